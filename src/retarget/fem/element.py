"""The 10-node (quadratic) tetrahedron and the 6-node (quadratic) triangle.

Node order is VTK's (``VTK_QUADRATIC_TETRA``): corners 0-3, then the mid-edge nodes of edges
(0,1), (1,2), (0,2), (0,3), (1,3), (2,3). With reference coordinates ξ = (ξ1, ξ2, ξ3) and barycentric
L0 = 1 − ξ1 − ξ2 − ξ3, L1 = ξ1, L2 = ξ2, L3 = ξ3, the shape functions are

    N_a = L_a (2 L_a − 1)          for the corners a = 0..3,
    N_m = 4 L_i L_j                for the mid-edge node m of edge (i, j).

Quadratic triangle (VTK ``quadratic_triangle``): corners 0-2, mid-edge nodes of (0,1), (1,2), (2,0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from retarget.fem.quadrature import QuadratureRule

__all__ = [
    "TET10_EDGES",
    "TET10_FACES",
    "TET10_REFERENCE_NODES",
    "ElementGeometry",
    "element_geometry",
    "tet10_gradients",
    "tet10_shape",
    "tri6_gradients",
    "tri6_shape",
]

#: Corner pairs of the mid-edge nodes 4..9, in VTK order.
TET10_EDGES: NDArray[np.int64] = np.array([[0, 1], [1, 2], [0, 2], [0, 3], [1, 3], [2, 3]])

#: The four faces as 6-node triangles (corners a, b, c then mid-edges ab, bc, ca), ordered so that the
#: right-hand normal points out of a positively oriented tet.
TET10_FACES: NDArray[np.int64] = np.array(
    [
        [0, 2, 1, 6, 5, 4],
        [0, 1, 3, 4, 8, 7],
        [1, 2, 3, 5, 9, 8],
        [0, 3, 2, 7, 9, 6],
    ]
)

#: Reference coordinates of the 10 nodes, ``(10, 3)``.
TET10_REFERENCE_NODES: NDArray[np.float64] = np.array(
    [
        [0.0, 0.0, 0.0],
        [1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
        [0.5, 0.0, 0.0],
        [0.5, 0.5, 0.0],
        [0.0, 0.5, 0.0],
        [0.0, 0.0, 0.5],
        [0.5, 0.0, 0.5],
        [0.0, 0.5, 0.5],
    ]
)

# dL_a/dξ for the four barycentric coordinates, (4, 3).
_DL = np.array([[-1.0, -1.0, -1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


def _barycentric(xi: NDArray[np.float64]) -> NDArray[np.float64]:
    xi = np.atleast_2d(xi)
    return np.column_stack([1.0 - xi.sum(axis=1), xi])


def tet10_shape(xi: NDArray[np.float64]) -> NDArray[np.float64]:
    """Shape functions at reference points.

    Args:
        xi: Reference coordinates, ``(p, 3)`` (or ``(3,)``).

    Returns:
        ``(p, 10)`` values N_a(ξ).
    """
    lam = _barycentric(xi)
    n = np.empty((lam.shape[0], 10))
    n[:, :4] = lam * (2.0 * lam - 1.0)
    n[:, 4:] = 4.0 * lam[:, TET10_EDGES[:, 0]] * lam[:, TET10_EDGES[:, 1]]
    return n


def tet10_gradients(xi: NDArray[np.float64]) -> NDArray[np.float64]:
    """Shape-function gradients with respect to the reference coordinates.

    Args:
        xi: Reference coordinates, ``(p, 3)`` (or ``(3,)``).

    Returns:
        ``(p, 10, 3)`` values dN_a/dξ_α.
    """
    lam = _barycentric(xi)
    g = np.empty((lam.shape[0], 10, 3))
    g[:, :4, :] = (4.0 * lam - 1.0)[:, :, None] * _DL[None, :, :]
    i, j = TET10_EDGES[:, 0], TET10_EDGES[:, 1]
    g[:, 4:, :] = 4.0 * (lam[:, j, None] * _DL[None, i, :] + lam[:, i, None] * _DL[None, j, :])
    return g


def tri6_shape(xi: NDArray[np.float64]) -> NDArray[np.float64]:
    """Quadratic triangle shape functions, ``(p, 2)`` -> ``(p, 6)``."""
    xi = np.atleast_2d(xi)
    lam = np.column_stack([1.0 - xi.sum(axis=1), xi])
    n = np.empty((lam.shape[0], 6))
    n[:, :3] = lam * (2.0 * lam - 1.0)
    n[:, 3] = 4.0 * lam[:, 0] * lam[:, 1]
    n[:, 4] = 4.0 * lam[:, 1] * lam[:, 2]
    n[:, 5] = 4.0 * lam[:, 2] * lam[:, 0]
    return n


def tri6_gradients(xi: NDArray[np.float64]) -> NDArray[np.float64]:
    """Quadratic triangle shape-function gradients, ``(p, 2)`` -> ``(p, 6, 2)``."""
    xi = np.atleast_2d(xi)
    lam = np.column_stack([1.0 - xi.sum(axis=1), xi])
    dl = np.array([[-1.0, -1.0], [1.0, 0.0], [0.0, 1.0]])
    g = np.empty((lam.shape[0], 6, 2))
    g[:, :3, :] = (4.0 * lam - 1.0)[:, :, None] * dl[None, :, :]
    for m, (i, j) in enumerate(((0, 1), (1, 2), (2, 0))):
        g[:, 3 + m, :] = 4.0 * (lam[:, j, None] * dl[None, i, :] + lam[:, i, None] * dl[None, j, :])
    return g


@dataclass(frozen=True)
class ElementGeometry:
    """Rest-configuration quantities at the quadrature points of every element.

    Attributes:
        shape: N_a at the quadrature points, ``(q, 10)``.
        grad: dN_a/dX in the rest configuration [1/m], ``(e, q, 10, 3)``.
        weights: Quadrature weight times det(dX/dξ) [m^3], ``(e, q)``.
        det_j: det(dX/dξ) [m^3 per reference volume], ``(e, q)``.
    """

    shape: NDArray[np.float64]
    grad: NDArray[np.float64]
    weights: NDArray[np.float64]
    det_j: NDArray[np.float64]


def element_geometry(
    nodes: NDArray[np.float64], tets: NDArray[np.int64], rule: QuadratureRule
) -> ElementGeometry:
    """Precompute dN/dX and weights·det J per element and quadrature point.

    Args:
        nodes: Rest positions [m], ``(n, 3)``.
        tets: Connectivity in VTK tet10 order, ``(e, 10)``.
        rule: Tetrahedron quadrature rule with ``q`` points.

    Returns:
        The element geometry; ``det_j`` may be non-positive for inverted elements (callers check).
    """
    dn_dxi = tet10_gradients(rule.points)  # (q, 10, 3)
    xe = nodes[tets]  # (e, 10, 3)
    jac = np.einsum("eai,qaj->eqij", xe, dn_dxi)  # dX_i/dξ_j
    det_j = np.linalg.det(jac)
    jinv = np.linalg.inv(jac)  # dξ_j/dX_k
    grad = np.einsum("qaj,eqjk->eqak", dn_dxi, jinv)
    return ElementGeometry(
        shape=tet10_shape(rule.points),
        grad=np.ascontiguousarray(grad),
        weights=det_j * rule.weights[None, :],
        det_j=det_j,
    )
