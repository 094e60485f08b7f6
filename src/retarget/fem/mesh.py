"""Quadratic (10-node) tetrahedral meshes: the :class:`TetMesh` type, generators and file I/O.

Node order inside a tet is VTK's (see :mod:`retarget.fem.element`). Generators build a straight prism mesh by
extruding a triangulated cross-section along +z and splitting every prism into three tets with the
"lowest index" rule (each quad face is cut along the diagonal from its lower-indexed bottom vertex to its
higher-indexed top vertex, so neighbouring prisms agree), then add mid-edge nodes; on a round rod the mid-edge
nodes of edges lying on the lateral surface are moved onto the true cylinder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.errors import InputError
from retarget.fem.element import TET10_EDGES, TET10_FACES, tet10_gradients
from retarget.fem.quadrature import tet_rule

__all__ = [
    "DEFAULT_ROD_AROUND",
    "MIN_DEFAULT_AXIAL",
    "TetMesh",
    "bar_mesh",
    "bar_resolution",
    "default_rod_axial",
    "plate_mesh",
    "plate_resolution",
    "read_mesh",
    "rod_mesh",
    "write_mesh",
]

#: Default number of corner nodes around a rod's circumference.
DEFAULT_ROD_AROUND: int = 8

#: Default axial element length of a rod, in diameters (see docs/fem.md for the convergence study).
DEFAULT_ROD_AXIAL_PER_DIAMETER: float = 1.0

#: The default element layers along a generated rod or bar are at least this many: a part's second bending mode
#: needs about 10 layers to stay within 1 % of the converged frequency after the stiffness calibration, and
#: ``load_robot(..., mesh_scale=0.25)`` (the demo's training mesh) keeps a quarter of the default (docs/fem.md,
#: "Model card and stiffness calibration").
MIN_DEFAULT_AXIAL: int = 40

# Swapping corners 1 and 2 of a tet10 (VTK order) flips its orientation; mid-edge nodes follow their edges.
_FLIP = np.array([0, 2, 1, 3, 6, 5, 4, 7, 9, 8])


@dataclass(frozen=True, eq=False)
class TetMesh:
    """A mesh of 10-node tetrahedra in the rest configuration.

    Attributes:
        nodes: Rest positions [m], ``(n, 3)``.
        tets: Node indices per element in VTK quadratic-tetra order, ``(e, 10)``.
    """

    nodes: NDArray[np.float64]
    tets: NDArray[np.int64]
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        nodes = np.array(self.nodes, dtype=np.float64)
        tets = np.array(self.tets, dtype=np.int64, order="C")  # one layout: one compiled signature of the kernels
        if nodes.ndim != 2 or nodes.shape[1] != 3:
            raise InputError(f"mesh nodes must have shape (n, 3), got {nodes.shape}")
        if tets.ndim != 2 or tets.shape[1] != 10:
            raise InputError(f"mesh tets must have shape (e, 10) (quadratic tets), got {tets.shape}")
        if tets.size and (tets.min() < 0 or tets.max() >= nodes.shape[0]):
            raise InputError(f"mesh tets index nodes outside 0..{nodes.shape[0] - 1}")
        if not np.all(np.isfinite(nodes)):
            raise InputError("mesh nodes contain non-finite coordinates")
        nodes.setflags(write=False)
        tets.setflags(write=False)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "tets", tets)

    @property
    def n_nodes(self) -> int:
        """Number of nodes n."""
        return int(self.nodes.shape[0])

    @property
    def n_tets(self) -> int:
        """Number of elements e."""
        return int(self.tets.shape[0])

    @property
    def n_dofs(self) -> int:
        """Number of displacement degrees of freedom, 3 n (node-major: x0, y0, z0, x1, ...)."""
        return 3 * self.n_nodes

    @cached_property
    def _size(self) -> float:
        return float(np.linalg.norm(self.nodes.max(axis=0) - self.nodes.min(axis=0)))

    def boundary_faces(self) -> NDArray[np.int64]:
        """Faces that belong to exactly one tet, as outward-oriented 6-node triangles.

        Returns:
            ``(f, 6)`` node indices: corners a, b, c (right-hand normal pointing out), then mid-edges
            ab, bc, ca.
        """
        if "boundary_faces" not in self._cache:
            faces = self.tets[:, TET10_FACES].reshape(-1, 6)
            keys = np.sort(faces[:, :3], axis=1)
            _, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
            faces = faces[counts[inverse.ravel()] == 1]
            faces.setflags(write=False)
            self._cache["boundary_faces"] = faces
        return self._cache["boundary_faces"]

    def nodes_in_box(self, lo: ArrayLike, hi: ArrayLike, tol: float | None = None) -> NDArray[np.int64]:
        """Indices of nodes inside the closed box [lo, hi] (inclusive, widened by ``tol``).

        Args:
            lo: Lower corner [m], ``(3,)``.
            hi: Upper corner [m], ``(3,)``.
            tol: Widening [m]; default 1e-9 of the mesh's bounding-box diagonal, to absorb rounding.
        """
        lo_a, hi_a = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
        if lo_a.shape != (3,) or hi_a.shape != (3,):
            raise InputError(f"box corners must have 3 coordinates, got {lo_a.shape} and {hi_a.shape}")
        t = 1e-9 * self._size if tol is None else tol
        inside = np.all((self.nodes >= lo_a - t) & (self.nodes <= hi_a + t), axis=1)
        return np.flatnonzero(inside)

    def nodes_on_plane(self, axis: int, value: float, tol: float | None = None) -> NDArray[np.int64]:
        """Indices of nodes with ``|X[axis] − value| <= tol``.

        Args:
            axis: 0, 1 or 2 (x, y, z).
            value: Plane position [m].
            tol: Tolerance [m]; default 1e-9 of the mesh's bounding-box diagonal.
        """
        if axis not in (0, 1, 2):
            raise InputError(f"axis must be 0, 1 or 2, got {axis!r}")
        t = 1e-9 * self._size if tol is None else tol
        return np.flatnonzero(np.abs(self.nodes[:, axis] - value) <= t)

    def det_jacobians(self, degree: int = 5) -> NDArray[np.float64]:
        """det(dX/dξ) at the points of the tet rule of ``degree`` (positive for a valid mesh), ``(e, q)``."""
        grads = tet10_gradients(tet_rule(degree).points)
        jac = np.einsum("eai,qaj->eqij", self.nodes[self.tets], grads)
        return np.linalg.det(jac)

    def volume(self) -> float:
        """Total volume [m^3] (exact for straight-edged tets, degree-5 quadrature for curved ones)."""
        rule = tet_rule(5)
        return float((self.det_jacobians(5) * rule.weights).sum())


# ----------------------------------------------------------------------------------------------------
# Generators


def _split_prisms(tris2d: NDArray[np.int64], n_points2d: int, n_layers: int) -> NDArray[np.int64]:
    """Linear tets (corner indices) of the extruded prisms, ``(3 * t * n_layers, 4)``."""
    tri = np.sort(tris2d, axis=1)
    layers = np.arange(n_layers)[:, None, None] * n_points2d
    b = tri[None, :, :] + layers  # bottom corners, (L, t, 3)
    t = b + n_points2d  # top corners
    tets = np.stack(
        [
            np.stack([b[..., 0], b[..., 1], b[..., 2], t[..., 2]], axis=-1),
            np.stack([b[..., 0], b[..., 1], t[..., 1], t[..., 2]], axis=-1),
            np.stack([b[..., 0], t[..., 0], t[..., 1], t[..., 2]], axis=-1),
        ],
        axis=2,
    )
    return tets.reshape(-1, 4)


def _orient(corners: NDArray[np.float64], tets4: NDArray[np.int64]) -> NDArray[np.int64]:
    x = corners[tets4]
    vol = np.einsum("ei,ei->e", x[:, 1] - x[:, 0], np.cross(x[:, 2] - x[:, 0], x[:, 3] - x[:, 0]))
    tets4 = tets4.copy()
    flip = vol < 0
    tets4[flip] = tets4[flip][:, [0, 2, 1, 3]]
    return tets4


def _add_midside_nodes(
    corners: NDArray[np.float64], tets4: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """Quadratic connectivity from linear tets; mid-edge nodes at edge midpoints.

    Returns:
        nodes ``(n, 3)``, tets ``(e, 10)``, and the corner pairs of the new mid-edge nodes ``(m, 2)``.
    """
    edges = np.sort(tets4[:, TET10_EDGES].reshape(-1, 2), axis=1)
    unique_edges, inverse = np.unique(edges, axis=0, return_inverse=True)
    mid_ids = corners.shape[0] + inverse.reshape(-1, 6)
    nodes = np.vstack([corners, 0.5 * (corners[unique_edges[:, 0]] + corners[unique_edges[:, 1]])])
    return nodes, np.hstack([tets4, mid_ids]), unique_edges


def _extrude(
    points2d: NDArray[np.float64], tris2d: NDArray[np.int64], z: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    p = points2d.shape[0]
    corners = np.column_stack([np.tile(points2d, (z.size, 1)), np.repeat(z, p)])
    tets4 = _orient(corners, _split_prisms(tris2d, p, z.size - 1))
    return _add_midside_nodes(corners, tets4)


def _disc(radius: float, n_around: int) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Triangulated disc: centre plus concentric rings, outer ring with ``n_around`` points on the circle."""
    from scipy.spatial import Delaunay

    n_rings = max(1, round(n_around / (2.0 * math.pi)))
    pts = [np.zeros((1, 2))]
    for i in range(1, n_rings + 1):
        k = n_around if i == n_rings else max(3, round(n_around * i / n_rings))
        # Staggering alternate rings by half a step avoids slivers between rings.
        phase = 0.5 * (i % 2) * 2.0 * math.pi / k if i < n_rings else 0.0
        ang = phase + 2.0 * math.pi * np.arange(k) / k
        pts.append(radius * i / n_rings * np.column_stack([np.cos(ang), np.sin(ang)]))
    points = np.vstack(pts)
    if n_rings == 1:
        k = np.arange(1, n_around + 1)
        tris = np.column_stack([np.zeros(n_around, dtype=np.int64), k, np.roll(k, -1)])
    else:
        tris = Delaunay(points).simplices.astype(np.int64)
    return points, tris


def _grid2d(
    width: float, thickness: float, n_width: int, n_thickness: int
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Rectangle [−w/2, w/2] × [−t/2, t/2] triangulated with alternating diagonals."""
    xs = np.linspace(-0.5 * width, 0.5 * width, n_width + 1)
    ys = np.linspace(-0.5 * thickness, 0.5 * thickness, n_thickness + 1)
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    points = np.column_stack([gx.ravel(), gy.ravel()])
    tris = []
    for i in range(n_width):
        for j in range(n_thickness):
            a, b = i * (n_thickness + 1) + j, (i + 1) * (n_thickness + 1) + j
            c, d = b + 1, a + 1
            if (i + j) % 2 == 0:
                tris += [[a, b, c], [a, c, d]]
            else:
                tris += [[a, b, d], [b, c, d]]
    return points, np.array(tris, dtype=np.int64)


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _positive_length(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise InputError(f"{name} must be a positive length [m], got {value!r}")
    return float(value)


def default_rod_axial(length: float, diameter: float) -> int:
    """Default number of element layers along a rod: one per ``DEFAULT_ROD_AXIAL_PER_DIAMETER`` diameters, at
    least :data:`MIN_DEFAULT_AXIAL`."""
    return max(MIN_DEFAULT_AXIAL, math.ceil(length / (DEFAULT_ROD_AXIAL_PER_DIAMETER * diameter)))


def rod_mesh(
    length: float, diameter: float, n_axial: int | None = None, n_around: int | None = None
) -> TetMesh:
    """A round rod along +z from z = 0 to z = ``length``, centred on the z axis.

    Mid-edge nodes of edges on the lateral surface lie on the true cylinder, so the circular cross-section is
    represented by quadratic arcs.

    Args:
        length: Rod length [m].
        diameter: Rod diameter [m].
        n_axial: Element layers along z; default :func:`default_rod_axial` (one layer per diameter, at least
            :data:`MIN_DEFAULT_AXIAL`).
        n_around: Corner nodes around the circumference (>= 6); default :data:`DEFAULT_ROD_AROUND`.

    Returns:
        The mesh (3 tets per prism of the extruded cross-section).
    """
    length = _positive_length("length", length)
    diameter = _positive_length("diameter", diameter)
    n_axial = default_rod_axial(length, diameter) if n_axial is None else _positive_int("n_axial", n_axial)
    n_around = DEFAULT_ROD_AROUND if n_around is None else _positive_int("n_around", n_around)
    if n_around < 6:
        raise InputError(f"n_around must be at least 6, got {n_around}")
    radius = 0.5 * diameter
    pts2d, tris2d = _disc(radius, n_around)
    nodes, tets, mid_edges = _extrude(pts2d, tris2d, np.linspace(0.0, length, n_axial + 1))
    # Mid-edge nodes whose edge joins two angularly adjacent surface nodes lie on the lateral surface.
    n_corner = nodes.shape[0] - mid_edges.shape[0]
    a, b = nodes[mid_edges[:, 0]], nodes[mid_edges[:, 1]]
    r_a, r_b = np.hypot(a[:, 0], a[:, 1]), np.hypot(b[:, 0], b[:, 1])
    on_rim = (np.abs(r_a - radius) < 1e-9 * radius) & (np.abs(r_b - radius) < 1e-9 * radius)
    cos_angle = np.einsum("ij,ij->i", a[:, :2], b[:, :2]) / (r_a * r_b + 1e-300)
    on_rim &= cos_angle > math.cos(1.01 * 2.0 * math.pi / n_around)
    mids = nodes[n_corner:].copy()
    r_mid = np.hypot(mids[on_rim, 0], mids[on_rim, 1])
    mids[on_rim, :2] *= (radius / r_mid)[:, None]
    nodes = np.vstack([nodes[:n_corner], mids])
    return TetMesh(nodes, tets)


def bar_resolution(
    length: float,
    width: float,
    thickness: float,
    n_axial: int | None = None,
    n_width: int | None = None,
    n_thickness: int | None = None,
) -> tuple[int, int, int]:
    """The element counts ``(n_axial, n_width, n_thickness)`` :func:`bar_mesh` uses (``None``: its default)."""
    length = _positive_length("length", length)
    width = _positive_length("width", width)
    thickness = _positive_length("thickness", thickness)
    small = min(width, thickness)
    n_width = max(1, min(16, round(width / small))) if n_width is None else _positive_int("n_width", n_width)
    n_thickness = (
        max(1, min(16, round(thickness / small)))
        if n_thickness is None
        else _positive_int("n_thickness", n_thickness)
    )
    if n_axial is None:
        n_axial = max(MIN_DEFAULT_AXIAL, math.ceil(length / small))
    return _positive_int("n_axial", n_axial), n_width, n_thickness


def bar_mesh(
    length: float,
    width: float,
    thickness: float,
    n_axial: int | None = None,
    n_width: int | None = None,
    n_thickness: int | None = None,
) -> TetMesh:
    """A rectangular bar along +z from z = 0 to ``length``; x ∈ [−w/2, w/2], y ∈ [−t/2, t/2].

    Args:
        length: Bar length along z [m].
        width: Extent along x [m].
        thickness: Extent along y [m].
        n_axial: Element layers along z; default one per min(width, thickness) (which puts the first bending
            frequency of a clamped strip within 0.3 % of the converged value, docs/fem.md), at least
            :data:`MIN_DEFAULT_AXIAL`.
        n_width: Divisions along x; default makes cross-section cells about square (1 on the short side).
        n_thickness: Divisions along y; same default rule.
    """
    n_axial, n_width, n_thickness = bar_resolution(length, width, thickness, n_axial, n_width, n_thickness)
    pts2d, tris2d = _grid2d(width, thickness, n_width, n_thickness)
    nodes, tets, _ = _extrude(pts2d, tris2d, np.linspace(0.0, length, n_axial + 1))
    return TetMesh(nodes, tets)


def plate_mesh(
    length: float,
    width: float,
    thickness: float,
    n_axial: int | None = None,
    n_width: int | None = None,
    n_thickness: int = 1,
) -> TetMesh:
    """A thin plate: a bar whose in-plane (x, z) cells are about square, one quadratic layer through y.

    Geometry is that of :func:`bar_mesh`: z ∈ [0, length], x ∈ [−w/2, w/2], y ∈ [−t/2, t/2] with t the small
    dimension. Quadratic tets bend well with a single layer through the thickness.

    Args:
        length: Extent along z [m].
        width: Extent along x [m].
        thickness: Extent along y [m].
        n_axial: Divisions along z; default so that cells are at most min(length, width)/6 and at least
            2 thicknesses.
        n_width: Divisions along x; same default rule.
        n_thickness: Divisions along y.
    """
    n_axial, n_width, n_thickness = plate_resolution(length, width, thickness, n_axial, n_width, n_thickness)
    return bar_mesh(length, width, thickness, n_axial, n_width, n_thickness)


def plate_resolution(
    length: float,
    width: float,
    thickness: float,
    n_axial: int | None = None,
    n_width: int | None = None,
    n_thickness: int = 1,
) -> tuple[int, int, int]:
    """The element counts ``(n_axial, n_width, n_thickness)`` :func:`plate_mesh` uses (``None``: its default)."""
    length = _positive_length("length", length)
    width = _positive_length("width", width)
    thickness = _positive_length("thickness", thickness)
    h = max(min(length, width) / 6.0, 2.0 * thickness)
    if n_axial is None:
        n_axial = max(2, math.ceil(length / h))
    if n_width is None:
        n_width = max(2, math.ceil(width / h))
    return _positive_int("n_axial", n_axial), _positive_int("n_width", n_width), _positive_int("n_thickness", n_thickness)


# ----------------------------------------------------------------------------------------------------
# File I/O


def read_mesh(path: str | Path) -> TetMesh:
    """Read a quadratic tet mesh with meshio (gmsh ``.msh``, ``.vtu``, ...), coordinates in metres.

    meshio converts every format's node order to VTK's. All ``tetra10`` blocks are concatenated; a file with
    only linear ``tetra`` cells is promoted to 10-node tets with straight edges. Nodes not used by any tet
    (gmsh geometry points, surface-only nodes) are dropped, and negatively oriented tets are flipped.

    Raises:
        InputError: Unreadable file or no tetrahedra in it.
    """
    import meshio

    path = Path(path)
    try:
        raw = meshio.read(path)
    except Exception as exc:  # meshio raises many types (ReadError, KeyError, ValueError) for bad files
        raise InputError(f"cannot read mesh {path}: {exc}") from exc
    points = np.asarray(raw.points, dtype=np.float64)
    if points.shape[1] == 2:
        raise InputError(f"mesh {path} is two-dimensional; a tet mesh needs 3-D points")
    quadratic = [np.asarray(c.data) for c in raw.cells if c.type == "tetra10"]
    linear = [np.asarray(c.data) for c in raw.cells if c.type == "tetra"]
    if quadratic:
        tets = np.vstack(quadratic).astype(np.int64)
    elif linear:
        tets4 = np.vstack(linear).astype(np.int64)
        used = np.unique(tets4)
        remap = np.full(points.shape[0], -1, dtype=np.int64)
        remap[used] = np.arange(used.size)
        corners = points[used]
        points, tets, _ = _add_midside_nodes(corners, _orient(corners, remap[tets4]))
    else:
        types = sorted({c.type for c in raw.cells})
        raise InputError(f"mesh {path} has no tetrahedra (cell types: {types})")
    used = np.unique(tets)
    remap = np.full(points.shape[0], -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    nodes, tets = points[used], remap[tets]
    x = nodes[tets[:, :4]]
    vol = np.einsum("ei,ei->e", x[:, 1] - x[:, 0], np.cross(x[:, 2] - x[:, 0], x[:, 3] - x[:, 0]))
    tets[vol < 0] = tets[vol < 0][:, _FLIP]
    return TetMesh(nodes, tets)


def write_mesh(path: str | Path, mesh: TetMesh, file_format: str | None = None) -> None:
    """Write a mesh with meshio; ``.msh`` is written as gmsh 4.1 (meshio's own default for ``.msh`` is ANSYS).

    Args:
        path: Output file; the format follows the suffix unless ``file_format`` is given.
        mesh: The mesh.
        file_format: meshio format name (e.g. ``"gmsh"``, ``"vtu"``).
    """
    import meshio

    path = Path(path)
    if file_format is None and path.suffix.lower() == ".msh":
        file_format = "gmsh"
    out = meshio.Mesh(np.asarray(mesh.nodes), [("tetra10", np.asarray(mesh.tets))])
    if file_format == "gmsh":
        # gmsh needs physical/geometrical tags per cell; one volume entity holds everything.
        ones = np.ones(mesh.n_tets, dtype=np.int32)
        out.cell_data = {"gmsh:physical": [ones], "gmsh:geometrical": [ones]}
        meshio.write(path, out, file_format="gmsh", binary=False)
    else:
        meshio.write(path, out, file_format=file_format)
