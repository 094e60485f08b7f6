"""Bending frequencies of one flexible part clamped as mounted, and their mesh-converged reference.

A part is clamped at its *root interface* (all nodes of the interface whose link is nearest the robot's root in
the joint graph: the frame the reduced model lets the part ride on, :func:`root_interface`); its other interfaces
are free. The linearization at rest, ``K₀ v = ω² M v`` on the free DOFs (consistent mass, shift-invert Lanczos),
gives the lowest modes; each is classified by the direction of its displacement in the part's own frame (z along
the part): a *bending mode in plane x* moves mostly along x (a bar's width), in plane y mostly along y (a bar's
thickness). Modes whose frequencies are nearly equal (a round rod's two planes) are rotated within their
eigenspace so that each is aligned with x or y (:func:`bending_frequencies`).

The reference (:func:`reference_frequencies`) is the same problem on three successively refined meshes of the
part's generator (axial and cross-section counts refined together) extrapolated with Richardson's formula
(:func:`richardson`), beside Euler–Bernoulli clamped-free theory for rods and rectangular bars
(:func:`euler_bernoulli_bending`). For a homogeneous linear-elastic material the frequencies scale exactly as
√(E/ρ) at fixed ν, so the cached values are stored divided by √(E/ρ) and keyed by the geometry, ν, the clamp and
the generator's version: a fitted Young's modulus reuses them.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse.linalg as spla
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq

from retarget.atomic import write_text_atomic
from retarget.errors import InputError
from retarget.fem.beam_theory import euler_bernoulli_frequencies, round_section
from retarget.fem.elastic import ElasticBody
from retarget.fem.material import Material
from retarget.fem.mesh import TetMesh, bar_mesh, plate_mesh, rod_mesh

if TYPE_CHECKING:
    import scipy.sparse as sp

    from retarget.model.robot import FlexiblePart, MeshGenerator, RobotModel

__all__ = [
    "BENDING_PLANES",
    "GENERATOR_VERSION",
    "BendingFrequencies",
    "Clamp",
    "Reference",
    "Richardson",
    "bending_frequencies",
    "cards_dir",
    "clamp_of",
    "euler_bernoulli_bending",
    "mesh_frequencies",
    "reference_frequencies",
    "reference_key",
    "reference_resolutions",
    "richardson",
    "root_interface",
    "write_packaged_references",
]

#: Bending planes, named by the displacement direction in the part's frame (bars: x = width, y = thickness).
BENDING_PLANES: tuple[str, str] = ("x", "y")
#: Version of the mesh generators and of this module's reference method (part of every cache key): bump when the
#: same inputs give other frequencies.
GENERATOR_VERSION: int = 1
#: Modes whose frequencies differ by less than this fraction are one eigenspace (a rod's two planes).
_CLUSTER_TOLERANCE = 0.03
#: A mode is a bending mode of a plane when this fraction of its kinetic energy moves along the plane's axis.
_PLANE_FRACTION = 0.7
#: Refinement ratio between reference levels: rods (around 8, 12, 18), bars and plates (×2).
_ROD_RATIO, _BAR_RATIO = 1.5, 2.0
_ROD_AROUND_LEVELS = (8, 12, 18)


@dataclass(frozen=True)
class BendingFrequencies:
    """The lowest bending frequencies of a part per plane.

    Attributes:
        frequencies: plane (``"x"``, ``"y"``) → the first bending frequencies in that plane [Hz], ascending.
        n_dofs: free DOFs of the eigenproblem.
    """

    frequencies: Mapping[str, tuple[float, ...]]
    n_dofs: int

    def scaled(self, factor: float) -> BendingFrequencies:
        """Every frequency multiplied by ``factor`` (√ of a stiffness or 1/√ of a density factor)."""
        return BendingFrequencies({p: tuple(factor * f for f in fs) for p, fs in self.frequencies.items()}, self.n_dofs)


@dataclass(frozen=True)
class Clamp:
    """The clamped region in the part's frame: a whole end face (``end`` = 0 or ``length`` along z) or a box.

    Attributes:
        end: z of the clamped end face [m], or None for a box.
        box: ``(lo, hi)`` corners [m] in the part's frame, each ``(3,)`` (only when ``end`` is None).
    """

    end: float | None
    box: tuple[tuple[float, float, float], tuple[float, float, float]] | None = None

    def nodes(self, mesh: TetMesh) -> NDArray[np.int64]:
        """The clamped node ids of a mesh in the part's frame, ``(k,)``."""
        if self.end is not None:
            return mesh.nodes_on_plane(2, self.end)
        assert self.box is not None
        return mesh.nodes_in_box(*self.box)

    def key(self) -> list[object]:
        """JSON-able identity (for cache keys), rounded to 1e-12 m."""
        if self.end is not None:
            return ["end", round(self.end, 12)]
        assert self.box is not None
        return ["box", [[round(v, 12) for v in c] for c in self.box]]


@dataclass(frozen=True)
class Richardson:
    """Richardson extrapolation of a sequence f(h) = f∞ + C hᵖ.

    Attributes:
        value: the extrapolated f∞ (the finest value when the sequence is not monotone).
        order: the observed order p (nan when the sequence is not monotone).
        monotone: whether the three differences had one sign (extrapolation applied).
        uncertainty: |f∞ − f(finest)|, the correction applied.
    """

    value: float
    order: float
    monotone: bool
    uncertainty: float


@dataclass(frozen=True)
class Reference:
    """Mesh-converged bending frequencies of a part and how they were obtained.

    Attributes:
        frequencies: plane → extrapolated frequencies [Hz] (as :class:`BendingFrequencies`).
        levels: per refinement level, ``{"resolution": {...}, "n_dofs": int, "frequencies": {plane: [...]}}``.
        orders: plane → observed Richardson order per mode.
    """

    frequencies: BendingFrequencies
    levels: tuple[Mapping[str, object], ...]
    orders: Mapping[str, tuple[float, ...]]


def cards_dir() -> Path:
    """Where references and mesh frequencies are cached: ``$RETARGET_CACHE/cards`` or ``~/.cache/retarget/cards``."""
    root = Path(os.environ.get("RETARGET_CACHE", Path.home() / ".cache" / "retarget"))
    return root / "cards"


#: Results computed or read in this process (the values are deterministic functions of their key).
_MEMO: dict[str, dict[str, object]] = {}
#: References of the library robots' parts, shipped with the package (same keys and layout as the disk cache;
#: written by :func:`write_packaged_references`), so that loading a library robot computes none.
PACKAGED_REFERENCES: Path = Path(__file__).with_name("modal_references.json")


def _packaged() -> dict[str, object]:
    if "__packaged__" not in _MEMO:
        try:
            _MEMO["__packaged__"] = dict(json.loads(PACKAGED_REFERENCES.read_text()))
        except (OSError, ValueError):
            _MEMO["__packaged__"] = {}
    return _MEMO["__packaged__"]


def _read_cache(key: str) -> dict[str, object] | None:
    if key in _MEMO:
        return _MEMO[key]
    if key in _packaged():
        return dict(_packaged()[key])
    path = cards_dir() / f"{key}.json"
    try:
        value = dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None
    _MEMO[key] = value
    return value


def write_packaged_references(keys: Sequence[str] | None = None) -> int:
    """Copy cached references (``reference-*`` entries of :func:`cards_dir`, or only ``keys``) into
    :data:`PACKAGED_REFERENCES`, merged with its entries; returns the number of entries written."""
    table = dict(_packaged())
    for path in sorted(cards_dir().glob("reference-*.json")):
        if keys is None or path.stem in keys:
            table[path.stem] = json.loads(path.read_text())
    write_text_atomic(PACKAGED_REFERENCES, json.dumps(table, indent=1, sort_keys=True, allow_nan=False) + "\n")
    _MEMO.pop("__packaged__", None)
    return len(table)


def _write_cache(key: str, value: Mapping[str, object]) -> None:
    """Write atomically (temporary file, then rename): a reader never sees half a file."""
    _MEMO[key] = dict(value)
    path = cards_dir() / f"{key}.json"
    try:
        write_text_atomic(path, json.dumps(value, allow_nan=False))
    except OSError:
        pass  # a read-only cache only costs recomputation


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else json.dumps(p, sort_keys=True).encode())
    return h.hexdigest()[:32]


def _wave_speed(material: Material) -> float:
    """√(E/ρ) [m/s]: the frequencies of a fixed geometry and ν are proportional to it."""
    return math.sqrt(material.youngs_modulus / material.density)


# ----------------------------------------------------------------------------------------------------------------
# The eigenproblem


def bending_frequencies(
    mesh: TetMesh,
    material: Material,
    clamped_nodes: ArrayLike,
    rotation: ArrayLike | None = None,
    n_per_plane: int = 2,
) -> BendingFrequencies:
    """The first ``n_per_plane`` bending frequencies per plane of a mesh clamped at ``clamped_nodes``.

    Args:
        mesh: the part's mesh [m] (any placement).
        material: its material.
        clamped_nodes: node ids held fixed (all three DOFs), ``(k,)``.
        rotation: the part frame's axes in the mesh's frame as columns, ``(3, 3)`` (identity: the mesh is in the
            part's frame, z along the part).
        n_per_plane: bending modes wanted per plane.

    Returns:
        Frequencies [Hz] per plane (``"x"``, ``"y"``: displacement along the part frame's x, y).

    Raises:
        InputError: no clamped node, or fewer than ``n_per_plane`` bending modes per plane among the lowest 48.
    """
    clamped = np.unique(np.asarray(clamped_nodes, dtype=np.int64))
    if clamped.size == 0:
        raise InputError("no clamped node: the part would be free")
    rot = np.eye(3) if rotation is None else np.asarray(rotation, dtype=float)
    body = ElasticBody(mesh, material)
    fixed = np.zeros(mesh.n_nodes, dtype=bool)
    fixed[clamped] = True
    free = np.flatnonzero(np.repeat(~fixed, 3))
    k = body.rest_stiffness[free][:, free].tocsc()
    m = body.mass_matrix()[free][:, free].tocsc()
    m_scalar = body.mass_matrix()[0::3, 0::3][~fixed][:, ~fixed].tocsr()
    # Shift-invert at σ = 0 with one factorization of K; the minimum-degree ordering on KᵀK's pattern keeps the
    # fill of these symmetric matrices 3× smaller (and the factorization about 7× faster) than SuperLU's default.
    lu = spla.splu(k, permc_spec="MMD_AT_PLUS_A")
    k_inverse = spla.LinearOperator(k.shape, matvec=lu.solve, dtype=np.float64)
    n_modes = 6 * n_per_plane
    while True:
        n_modes = min(n_modes, free.size - 1)
        # A fixed start vector: the same mesh gives the same frequencies to the last bit in every process.
        start = np.random.default_rng(0).standard_normal(free.size)
        vals, vecs = spla.eigsh(k, k=n_modes, M=m, sigma=0.0, which="LM", OPinv=k_inverse, v0=start)
        order = np.argsort(vals)
        vals, vecs = np.abs(vals[order]), vecs[:, order]
        found = _classify(vals, vecs, m_scalar, rot)
        if all(len(found[p]) >= n_per_plane for p in BENDING_PLANES) or n_modes >= min(48, free.size - 1):
            break
        n_modes *= 2
    for p in BENDING_PLANES:
        if len(found[p]) < n_per_plane:
            raise InputError(f"only {len(found[p])} bending modes in plane {p} among the lowest {n_modes} modes")
    out = {p: tuple(sorted(found[p])[:n_per_plane]) for p in BENDING_PLANES}
    return BendingFrequencies(out, int(free.size))


def _classify(
    vals: NDArray[np.float64], vecs: NDArray[np.float64], m_scalar: sp.csr_matrix, rot: NDArray[np.float64]
) -> dict[str, list[float]]:
    """Bending frequencies [Hz] per plane from M-orthonormal modes ``vecs`` (free DOFs, node-major)."""
    found: dict[str, list[float]] = {p: [] for p in BENDING_PLANES}
    start = 0
    while start < len(vals):
        stop = start + 1
        while stop < len(vals) and vals[stop] <= vals[start] * (1.0 + _CLUSTER_TOLERANCE) ** 2:
            stop += 1
        block = vecs[:, start:stop]
        lam = vals[start:stop]
        # Local displacement components per node: (n_free_nodes, 3, m).
        local = np.einsum("nim,ij->njm", block.reshape(-1, 3, block.shape[1]), rot)
        energy_x = local[:, 0, :].T @ (m_scalar @ local[:, 0, :])
        # Within an eigenspace, the combinations that diagonalize the x-energy are the x- and y-aligned modes.
        _, w = np.linalg.eigh(0.5 * (energy_x + energy_x.T))
        for c in w.T:
            comp = local @ c  # (n, 3)
            e = np.array([comp[:, d] @ (m_scalar @ comp[:, d]) for d in range(3)])
            omega2 = float(c @ (lam * c))
            frac = e / e.sum()
            for d, plane in enumerate(BENDING_PLANES):
                if frac[d] >= _PLANE_FRACTION:
                    found[plane].append(math.sqrt(omega2) / (2.0 * math.pi))
        start = stop
    return found


def root_interface(model: RobotModel, part: FlexiblePart) -> int:
    """Index in ``part.interfaces`` of the root interface: the one whose link is nearest the robot's root.

    Distance is the number of joints from the world in the model's joint graph (the world itself: -1; a link
    reached by no joint chain: infinite); ties go to the link listed first in ``model.links``. This is the rigid
    body the reduced model lets the part ride on (``retarget.sim.reduced.system.reference_bodies``).
    """
    from collections import deque

    neighbours: dict[str, set[str]] = {}
    depth: dict[str, int] = {}
    for j in model.joints:
        if j.parent is None or j.child is None:
            link = j.child if j.parent is None else j.parent
            if link is not None:
                depth[link] = 0
        else:
            neighbours.setdefault(j.parent, set()).add(j.child)
            neighbours.setdefault(j.child, set()).add(j.parent)
    queue = deque(sorted(depth))
    while queue:
        a = queue.popleft()
        for b in neighbours.get(a, ()):
            if b not in depth:
                depth[b] = depth[a] + 1
                queue.append(b)
    order = {link.name: i for i, link in enumerate(model.links)}

    def rank(i: int) -> tuple[float, int, int]:
        link = part.interfaces[i].link
        if link is None:
            return (-1.0, -1, i)
        return (float(depth.get(link, math.inf)), order.get(link, len(order)), i)

    return min(range(len(part.interfaces)), key=rank)


def clamp_of(part: FlexiblePart, interface: int) -> Clamp:
    """The clamp of ``part`` at ``part.interfaces[interface]`` in the part's frame (an end face, else a box)."""
    local = (np.asarray(part.mesh.nodes) - part.pose[:3, 3]) @ part.pose[:3, :3]
    ids = np.unique(part.interfaces[interface].nodes)
    length = float(local[:, 2].max())
    tol = 1e-9 * float(np.linalg.norm(local.max(axis=0) - local.min(axis=0)))
    for end in (0.0, length):
        face = np.flatnonzero(np.abs(local[:, 2] - end) <= tol)
        if face.size == ids.size and np.array_equal(face, ids):
            return Clamp(end)
    sel = local[ids]
    return Clamp(None, (tuple(sel.min(axis=0).tolist()), tuple(sel.max(axis=0).tolist())))  # type: ignore[arg-type]


def mesh_frequencies(part: FlexiblePart, clamp_interface: int, material: Material | None = None) -> BendingFrequencies:
    """The bending frequencies of ``part``'s own mesh clamped at one interface, cached on disk.

    Args:
        part: a :class:`retarget.model.robot.FlexiblePart`.
        clamp_interface: index of the clamped interface.
        material: the material (default ``part.nominal_material``).
    """
    material = part.nominal_material if material is None else material
    mesh = part.mesh
    ids = np.unique(part.interfaces[clamp_interface].nodes)
    rot = np.asarray(part.pose[:3, :3], dtype=float)
    key = "mesh-" + _digest(
        np.round(np.asarray(mesh.nodes) - part.pose[:3, 3], 12).tobytes(), np.asarray(mesh.tets).tobytes(),
        ids.tobytes(), np.round(rot, 12).tobytes(), [material.poisson_ratio, GENERATOR_VERSION],
    )
    speed = _wave_speed(material)
    cached = _read_cache(key)
    if cached is not None:
        stored = {p: tuple(v) for p, v in cached["frequencies"].items()}
        return BendingFrequencies(stored, int(cached["n_dofs"])).scaled(speed)
    bf = bending_frequencies(mesh, material, ids, rot)
    _write_cache(key, {"frequencies": bf.scaled(1.0 / speed).frequencies, "n_dofs": bf.n_dofs})
    return bf


# ----------------------------------------------------------------------------------------------------------------
# The reference


def richardson(h: Sequence[float], f: Sequence[float]) -> Richardson:
    """Extrapolate f(h) = f∞ + C hᵖ to h → 0 from three levels (any ratios; p and f∞ fitted exactly).

    Args:
        h: mesh sizes, decreasing, ``(3,)`` [m] (any consistent unit).
        f: the values on those meshes, ``(3,)``.

    Returns:
        f∞, p, and whether the sequence was monotone; a non-monotone sequence (not in the asymptotic range or at
        round-off) returns the finest value, p = nan.

    Raises:
        InputError: not three decreasing positive sizes.
    """
    h0, h1, h2 = (float(x) for x in h)
    f0, f1, f2 = (float(x) for x in f)
    if not (h0 > h1 > h2 > 0):
        raise InputError(f"Richardson extrapolation needs three decreasing positive mesh sizes, got {list(h)}")
    d01, d12 = f0 - f1, f1 - f2
    if d12 == 0.0 or d01 == 0.0 or (d01 > 0) != (d12 > 0):
        return Richardson(f2, math.nan, False, 0.0)
    ratio = d01 / d12

    def gap(p: float) -> float:
        return (h0**p - h1**p) / (h1**p - h2**p) - ratio

    lo, hi = 0.25, 12.0
    if gap(lo) > 0:
        p = lo
    elif gap(hi) < 0:
        p = hi
    else:
        p = float(brentq(gap, lo, hi, xtol=1e-12))
    c = d12 / (h1**p - h2**p)
    value = f2 - c * h2**p
    return Richardson(value, p, True, abs(value - f2))


def reference_resolutions(kind: str, length: float, diameter: float = 0.0, width: float = 0.0,
                          thickness: float = 0.0) -> list[dict[str, int]]:
    """The three refinement levels of the reference meshes.

    Rods: ``around`` 8, 12, 18 and ``axial`` one layer per 4, 2.7, 1.8 diameters (ratio 1.5). Bars and plates:
    the generator's default cross-section counts and one layer per 2 thicknesses, then ×2 and ×4 in every
    direction.
    """
    if kind == "rod":
        n0 = max(4, math.ceil(length / (4.0 * diameter)))
        return [{"axial": math.ceil(n0 * _ROD_RATIO**k - 1e-9), "around": _ROD_AROUND_LEVELS[k]} for k in range(3)]
    if kind in ("bar", "plate"):
        small = min(width, thickness)
        if kind == "bar":
            nw, nt = max(1, round(width / small)), max(1, round(thickness / small))
        else:
            cell = max(min(length, width) / 6.0, 2.0 * thickness)
            nw, nt = max(2, math.ceil(width / cell)), 1
        n0 = max(4, math.ceil(length / (2.0 * small)))
        r = int(_BAR_RATIO)
        return [{"axial": n0 * r**k, "width": nw * r**k, "thickness": nt * r**k} for k in range(3)]
    raise InputError(f"no reference meshes for generator {kind!r} (rod, bar or plate)")


def _generate(kind: str, length: float, diameter: float, width: float, thickness: float,
              res: Mapping[str, int]) -> TetMesh:
    if kind == "rod":
        return rod_mesh(length, diameter, res["axial"], res["around"])
    maker = bar_mesh if kind == "bar" else plate_mesh
    return maker(length, width, thickness, res["axial"], res["width"], res["thickness"])


def reference_key(generator: MeshGenerator, material: Material, clamp: Clamp) -> str:
    """The cache key of a part's reference: its generator and dimensions, ν, the clamp, :data:`GENERATOR_VERSION`."""
    g = generator
    return "reference-" + _digest(
        [g.kind, round(g.length, 12), round(g.diameter, 12), round(g.width, 12), round(g.thickness, 12)],
        [material.poisson_ratio, clamp.key(), GENERATOR_VERSION],
    )


def reference_frequencies(
    generator: MeshGenerator, material: Material, clamp: Clamp, use_cache: bool = True
) -> Reference:
    """Mesh-converged bending frequencies of a generated part: three refined meshes, Richardson per mode.

    Args:
        generator: a :class:`retarget.model.robot.MeshGenerator` (kind, dimensions).
        material: the (nominal) material.
        clamp: the clamped region in the part's frame.
        use_cache: read and write the result under :func:`cards_dir` (keyed by geometry, ν, clamp and
            :data:`GENERATOR_VERSION`; stored divided by √(E/ρ)).

    Returns:
        The extrapolated frequencies [Hz] per plane, the levels and the observed orders.
    """
    g = generator
    key = reference_key(generator, material, clamp)
    speed = _wave_speed(material)
    cached = _read_cache(key) if use_cache else None
    if cached is None:
        levels = []
        for res in reference_resolutions(g.kind, g.length, g.diameter, g.width, g.thickness):
            mesh = _generate(g.kind, g.length, g.diameter, g.width, g.thickness, res)
            bf = bending_frequencies(mesh, material, clamp.nodes(mesh))
            levels.append({"resolution": dict(res), "n_dofs": bf.n_dofs,
                           "frequencies": {p: [f / speed for f in fs] for p, fs in bf.frequencies.items()}})
        cached = {"levels": levels}
        if use_cache:
            _write_cache(key, cached)
    levels = cached["levels"]
    h = [g.length / lv["resolution"]["axial"] for lv in levels]
    freqs: dict[str, tuple[float, ...]] = {}
    orders: dict[str, tuple[float, ...]] = {}
    for p in BENDING_PLANES:
        ext = [richardson(h, [lv["frequencies"][p][k] * speed for lv in levels]) for k in range(2)]
        freqs[p] = tuple(r.value for r in ext)
        orders[p] = tuple(r.order for r in ext)
    out_levels = tuple(
        {"resolution": lv["resolution"], "n_dofs": lv["n_dofs"],
         "frequencies": {p: [f * speed for f in fs] for p, fs in lv["frequencies"].items()}}
        for lv in levels
    )
    return Reference(BendingFrequencies(freqs, int(levels[-1]["n_dofs"])), out_levels, orders)


def euler_bernoulli_bending(generator: MeshGenerator, material: Material, clamp: Clamp) -> BendingFrequencies | None:
    """Clamped-free Euler–Bernoulli frequencies (β_k L)² / (2π L²) √(E I / (ρ A)) per plane, first two modes.

    Rods: I = π D⁴ / 64 in both planes; bars and plates: I = t w³ / 12 in plane x (bending along the width),
    w t³ / 12 in plane y. None when the clamp is not a whole end face (no clamped-free beam).
    """
    if clamp.end is None:
        return None
    g = generator
    if g.kind == "rod":
        area, rod_second = round_section(g.diameter)
        second = {"x": rod_second, "y": rod_second}
    elif g.kind in ("bar", "plate"):
        area = g.width * g.thickness
        second = {"x": g.thickness * g.width**3 / 12.0, "y": g.width * g.thickness**3 / 12.0}
    else:
        return None
    out = {
        p: tuple(euler_bernoulli_frequencies(g.length, material.youngs_modulus, second[p], material.density, area,
                                             n_modes=2).tolist())
        for p in BENDING_PLANES
    }
    return BendingFrequencies(out, 0)
