"""A deformable body: a tet10 mesh of a compressible Neo-Hookean material with Rayleigh damping.

Degrees of freedom are nodal displacements from the rest positions, node-major:
``u = [ux0, uy0, uz0, ux1, ...]`` [m], ``(3n,)``. The equations of motion the simulator builds from this are
``M v̇ = −f_int(u) − (α M + β K(u)) v + f_grav``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from retarget.errors import InputError, RetargetError
from retarget.fem.assembly import SparsityPattern
from retarget.fem.element import element_geometry, tri6_gradients
from retarget.fem.material import Material
from retarget.fem.mesh import TetMesh
from retarget.fem.neo_hookean import (
    NUMBA_AVAILABLE,
    forces_stiffness_numba,
    forces_stiffness_numpy,
    forces_stiffness_product_numba,
)
from retarget.fem.quadrature import tet_rule, triangle_rule

__all__ = ["Backend", "ElasticBody", "InvertedElementError"]

Backend = Literal["auto", "numba", "numpy"]

#: Elements per numpy chunk: bounds the (chunk, 30, 30) temporaries to a few tens of MB.
_CHUNK = 4096

#: Positive area weights of the 6 nodes of a quadratic triangle (corners, then mid-edges), as fractions of the
#: face area: the row-sum-free "HRZ" lumping of the triangle's consistent mass (diagonal entries 1/30 and
#: 8/45, rescaled to sum to 1). They reproduce the area and, on flat faces, the centroid exactly.
FACE_NODE_WEIGHTS: NDArray[np.float64] = np.array([3.0, 3.0, 3.0, 16.0, 16.0, 16.0]) / 57.0


class InvertedElementError(RetargetError):
    """The deformation inverts at least one element (det F <= 0), where the Neo-Hookean energy is undefined.

    Attributes:
        min_det: Smallest det F found.
    """

    def __init__(self, min_det: float) -> None:
        super().__init__(
            f"inverted element: min det F = {min_det:.3e} <= 0 (step too large or diverging solve)"
        )
        self.min_det = min_det


class ElasticBody:
    """Internal forces, tangent stiffness, mass and damping of one FEM body.

    Args:
        mesh: The tet10 mesh [m]; det J must be positive at every quadrature point.
        material: Elastic constants, density and Rayleigh coefficients.
        backend: ``"numba"`` (one compiled pass that scatters straight into CSR data), ``"numpy"``
            (vectorized, chunked), or ``"auto"`` (numba when importable). Measured speeds: docs/fem.md.
        stiffness_degree: Exactness of the quadrature for forces and stiffness (2: 4 points; 5: 14 points).

    Raises:
        InputError: Inverted or degenerate rest elements, or an unknown backend.
    """

    def __init__(
        self, mesh: TetMesh, material: Material, backend: Backend = "auto", stiffness_degree: int = 2
    ) -> None:
        if backend not in ("auto", "numba", "numpy"):
            raise InputError(f"backend must be 'auto', 'numba' or 'numpy', got {backend!r}")
        if backend == "numba" and not NUMBA_AVAILABLE:
            raise InputError("backend 'numba' requested but numba is not installed")
        self.mesh = mesh
        self.material = material
        self.backend: str = ("numba" if NUMBA_AVAILABLE else "numpy") if backend == "auto" else backend
        self.mu, self.lam = material.lame()
        self.geometry = element_geometry(mesh.nodes, mesh.tets, tet_rule(stiffness_degree))
        if self.geometry.det_j.min() <= 0.0:
            bad = np.flatnonzero((self.geometry.det_j <= 0.0).any(axis=1))
            raise InputError(f"mesh has {bad.size} inverted or degenerate tets (first: {bad[:5].tolist()})")
        self.pattern = SparsityPattern.from_tets(mesh.tets, mesh.n_nodes)

    # ------------------------------------------------------------------------------------------------------
    @property
    def n_dofs(self) -> int:
        """Number of DOFs 3 n."""
        return self.mesh.n_dofs

    @property
    def rest_positions(self) -> NDArray[np.float64]:
        """Rest node positions flattened node-major [m], ``(3n,)``."""
        return self.mesh.nodes.reshape(-1)

    def _check_u(self, u: ArrayLike) -> NDArray[np.float64]:
        u = np.ascontiguousarray(u, dtype=np.float64)
        if u.shape != (self.n_dofs,):
            raise InputError(f"displacement vector must have shape ({self.n_dofs},), got {u.shape}")
        return u

    def _evaluate(
        self, u: NDArray[np.float64], with_stiffness: bool
    ) -> tuple[NDArray[np.float64], NDArray[np.float64] | None, float, float]:
        g = self.geometry
        if self.backend == "numba":
            f, data, energy, min_det = forces_stiffness_numba(
                u,
                self.mesh.tets,
                g.grad,
                g.weights,
                self.mu,
                self.lam,
                self.pattern.scatter,
                self.pattern.nnz,
                with_stiffness,
            )
            return f, (data if with_stiffness else None), energy, min_det
        forces = np.zeros(self.n_dofs)
        data = np.zeros(self.pattern.nnz) if with_stiffness else None
        energy, min_det = 0.0, np.inf
        u_nodes = u.reshape(-1, 3)
        for start in range(0, self.mesh.n_tets, _CHUNK):
            sl = slice(start, min(start + _CHUNK, self.mesh.n_tets))
            fe, ke, en, md = forces_stiffness_numpy(
                u_nodes[self.mesh.tets[sl]], g.grad[sl], g.weights[sl], self.mu, self.lam, with_stiffness
            )
            min_det = min(min_det, md)
            if md <= 0.0:
                return forces, data, float("inf"), min_det
            energy += en
            forces += self.pattern.assemble_vector(fe, sl)
            if ke is not None:
                data += self.pattern.assemble_data(ke, sl)
        return forces, data, energy, min_det

    # ------------------------------------------------------------------------------------------------------
    def energy(self, u: ArrayLike) -> float:
        """Elastic energy [J]; +inf if the deformation inverts an element."""
        _, _, energy, _ = self._evaluate(self._check_u(u), with_stiffness=False)
        return float(energy)

    def internal_forces(self, u: ArrayLike) -> NDArray[np.float64]:
        """f_int = dE/du [N], ``(3n,)``.

        Raises:
            InvertedElementError: det F <= 0 at some quadrature point.
        """
        f, _, _, min_det = self._evaluate(self._check_u(u), with_stiffness=False)
        if min_det <= 0.0:
            raise InvertedElementError(min_det)
        return f

    def internal_forces_and_stiffness(self, u: ArrayLike) -> tuple[NDArray[np.float64], sp.csr_matrix]:
        """f_int(u) [N] ``(3n,)`` and K(u) = d f_int/du [N/m] ``(3n, 3n)`` CSR in one pass (for Newton).

        Raises:
            InvertedElementError: det F <= 0 at some quadrature point.
        """
        f, data, _, min_det = self._evaluate(self._check_u(u), with_stiffness=True)
        if min_det <= 0.0:
            raise InvertedElementError(min_det)
        assert data is not None
        return f, self.pattern.matrix(data)

    def forces_and_stiffness_product(
        self, u: ArrayLike, v: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """f_int(u) [N] ``(3n,)`` and K(u) v ``(3n,)`` without assembling K (numba backend: one pass, about 6×
        cheaper than :meth:`internal_forces_and_stiffness`; numpy backend: through the assembled K).

        Args:
            u: Displacements [m], ``(3n,)``.
            v: a vector in displacement layout (e.g. a velocity [m/s]), ``(3n,)``.

        Raises:
            InvertedElementError: det F <= 0 at some quadrature point.
        """
        u = self._check_u(u)
        v = self._check_u(v)
        if self.backend == "numba":
            g = self.geometry
            f, kv, min_det = forces_stiffness_product_numba(u, v, self.mesh.tets, g.grad, g.weights, self.mu, self.lam)
            if min_det <= 0.0:
                raise InvertedElementError(min_det)
            return f, kv
        f, k = self.internal_forces_and_stiffness(u)
        return f, k @ v

    def stiffness_product(self, u: ArrayLike, v: ArrayLike) -> NDArray[np.float64]:
        """K(u) v ``(3n,)`` matrix-free (see :meth:`forces_and_stiffness_product`).

        Raises:
            InvertedElementError: det F <= 0 at some quadrature point.
        """
        return self.forces_and_stiffness_product(u, v)[1]

    def tangent_stiffness(self, u: ArrayLike) -> sp.csr_matrix:
        """K(u) = d f_int/du [N/m], exact and symmetric, ``(3n, 3n)`` CSR with the body's pattern."""
        return self.internal_forces_and_stiffness(u)[1]

    @cached_property
    def rest_stiffness(self) -> sp.csr_matrix:
        """K₀ = K(0) [N/m], the linear stiffness at the rest shape (computed once per body; do not modify it)."""
        return self.tangent_stiffness(np.zeros(self.n_dofs))

    # ------------------------------------------------------------------------------------------------------
    @cached_property
    def _mass_data(self) -> NDArray[np.float64]:
        # N_a N_b is degree 4: use the degree-5 rule (exact on straight-edged tets).
        rule = tet_rule(5)
        geo = element_geometry(self.mesh.nodes, self.mesh.tets, rule)
        rho = self.material.density
        m_ab = np.einsum("eq,qa,qb->eab", rho * geo.weights, geo.shape, geo.shape, optimize=True)
        blocks = m_ab[:, :, None, :, None] * np.eye(3)[None, None, :, None, :]
        data = self.pattern.assemble_data(blocks.reshape(-1, 30, 30))
        data.setflags(write=False)
        return data

    def mass_matrix(self) -> sp.csr_matrix:
        """Consistent mass matrix [kg], ``(3n, 3n)`` CSR with the body's pattern (a fresh copy each call)."""
        return self.pattern.matrix(self._mass_data.copy())

    @cached_property
    def nodal_masses(self) -> NDArray[np.float64]:
        """Row sums of the scalar consistent mass, m_a = ∫ρ N_a dV [kg], ``(n,)``.

        Corner entries of tet10 are negative; these are for totals and moments, not for lumping.
        """
        return (self.mass_matrix() @ np.tile([1.0, 0.0, 0.0], self.mesh.n_nodes))[0::3]

    @property
    def total_mass(self) -> float:
        """∫ρ dV [kg]."""
        return float(self.nodal_masses.sum())

    @property
    def center_of_mass(self) -> NDArray[np.float64]:
        """Centre of mass at rest [m], ``(3,)`` (exact for the isoparametric geometry)."""
        return self.nodal_masses @ self.mesh.nodes / self.total_mass

    def gravity_forces(self, g: ArrayLike) -> NDArray[np.float64]:
        """Consistent gravity load M @ tile(g) [N], ``(3n,)``.

        Args:
            g: Gravitational acceleration [m/s^2], ``(3,)``.
        """
        g = np.asarray(g, dtype=float)
        if g.shape != (3,):
            raise InputError(f"gravity must have shape (3,), got {g.shape}")
        return np.outer(self.nodal_masses, g).reshape(-1)

    def damping_matrix(self, u: ArrayLike) -> sp.csr_matrix:
        """Rayleigh damping α M + β K(u) [N s/m], ``(3n, 3n)`` CSR with the body's pattern."""
        alpha, beta = self.material.rayleigh_alpha, self.material.rayleigh_beta
        data = alpha * self._mass_data
        if beta != 0.0:
            data = data + beta * self.tangent_stiffness(u).data
        return self.pattern.matrix(data)

    # ------------------------------------------------------------------------------------------------------
    def face_area_weights(self, node_ids: ArrayLike) -> NDArray[np.float64]:
        """Area weights of interface nodes for an area-weighted centroid and a best-fit linear map.

        Integrates over the boundary faces whose six nodes all belong to ``node_ids``; each face's area
        (quadrature of the curved quadratic surface) is split over its nodes with :data:`FACE_NODE_WEIGHTS`
        (corners 3/57, mid-edges 16/57 each), which are positive, unlike the integrals of the quadratic
        shape functions (0 at corners).

        Args:
            node_ids: Node indices of the interface, ``(k,)``.

        Returns:
            Weights [m^2] in the order of ``node_ids``, ``(k,)``; they sum to the area of the covered surface.
            Nodes on no covered face get weight 0.

        Raises:
            InputError: No boundary face has all its nodes in the set, or an index is out of range.
        """
        ids = np.asarray(node_ids, dtype=np.int64).ravel()
        if ids.size == 0 or ids.min() < 0 or ids.max() >= self.mesh.n_nodes:
            raise InputError(f"interface node ids must be non-empty and in 0..{self.mesh.n_nodes - 1}")
        member = np.zeros(self.mesh.n_nodes, dtype=bool)
        member[ids] = True
        faces = self.mesh.boundary_faces()
        faces = faces[member[faces].all(axis=1)]
        if faces.shape[0] == 0:
            raise InputError(f"no boundary face has all 6 nodes among the {ids.size} interface nodes")
        rule = triangle_rule(4)
        dn = tri6_gradients(rule.points)  # (q, 6, 2)
        xf = self.mesh.nodes[faces]  # (f, 6, 3)
        tangents = np.einsum("fai,qas->fqsi", xf, dn)
        area = (np.linalg.norm(np.cross(tangents[:, :, 0], tangents[:, :, 1]), axis=-1) * rule.weights).sum(
            axis=1
        )
        per_node = np.bincount(
            faces.ravel(), weights=(area[:, None] * FACE_NODE_WEIGHTS).ravel(), minlength=self.mesh.n_nodes
        )
        return per_node[ids]
