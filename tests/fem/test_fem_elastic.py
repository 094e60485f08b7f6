"""Tests of retarget.fem.elastic.ElasticBody: derivatives vs finite differences, invariances, mass, loads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from retarget.errors import InputError
from retarget.fem.elastic import ElasticBody, InvertedElementError
from retarget.fem.material import MATERIALS, Material
from retarget.fem.mesh import TetMesh, bar_mesh, rod_mesh
from retarget.fem.neo_hookean import NUMBA_AVAILABLE

BACKENDS = ["numpy"] + (["numba"] if NUMBA_AVAILABLE else [])
STEEL = MATERIALS["spring_steel"]


@pytest.fixture(scope="module")
def rod() -> TetMesh:
    return rod_mesh(0.03, 0.01, n_axial=3)


def _random_deformation(mesh: TetMesh, strain: float, seed: int) -> np.ndarray:
    """A smooth random displacement (affine + quadratic in X) with strains of order ``strain``."""
    rng = np.random.default_rng(seed)
    x = mesh.nodes / np.abs(mesh.nodes).max()
    a = rng.standard_normal((3, 3))
    b = rng.standard_normal((3, 3))
    scale = np.abs(mesh.nodes).max()
    u = strain * scale * (x @ a.T + (x**2) @ b.T + 0.02 * rng.standard_normal(mesh.nodes.shape))
    return u.reshape(-1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("strain", "seed"), [(1e-4, 0), (0.05, 1), (0.1, 2)])
def test_forces_are_the_energy_gradient(rod: TetMesh, backend: str, strain: float, seed: int) -> None:
    body = ElasticBody(rod, STEEL, backend=backend)
    u = _random_deformation(rod, strain, seed)
    f = body.internal_forces(u)
    d = np.random.default_rng(10 + seed).standard_normal(body.n_dofs)
    h = 1e-4 * strain * 0.03
    fd = (body.energy(u + h * d) - body.energy(u - h * d)) / (2 * h)
    assert f @ d == pytest.approx(fd, rel=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("strain", "seed"), [(1e-4, 3), (0.05, 4), (0.1, 5)])
def test_stiffness_is_the_force_jacobian(rod: TetMesh, backend: str, strain: float, seed: int) -> None:
    body = ElasticBody(rod, STEEL, backend=backend)
    u = _random_deformation(rod, strain, seed)
    f, k = body.internal_forces_and_stiffness(u)
    np.testing.assert_allclose(f, body.internal_forces(u), rtol=1e-12, atol=1e-12 * np.abs(f).max())
    rng = np.random.default_rng(20 + seed)
    h = 1e-6 * 0.03
    for _ in range(3):
        d = rng.standard_normal(body.n_dofs)
        fd = (body.internal_forces(u + h * d) - body.internal_forces(u - h * d)) / (2 * h)
        kd = k @ d
        assert np.linalg.norm(kd - fd) <= 1e-6 * np.linalg.norm(kd)
    asym = abs(k - k.T).max()
    assert asym <= 1e-12 * abs(k).max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_rigid_motions_give_zero_energy_and_forces(rod: TetMesh, backend: str) -> None:
    body = ElasticBody(rod, STEEL, backend=backend)
    x = rod.nodes
    rot = Rotation.from_rotvec([0.4, -1.1, 0.7]).as_matrix()
    # Reference: energy and forces of a 1e-3 strain, so "zero" is relative to physical levels. Round-off alone
    # leaves up to ~5e-11 of that energy for a finite rotation (it depends on the compiled code's operation
    # order, i.e. the machine); a rotation-variant energy would give O(1).
    reference = _random_deformation(rod, 1e-3, 0)
    e_ref, f_ref = body.energy(reference), body.internal_forces(reference)
    for u in (np.tile([1e-3, -2e-3, 5e-4], rod.n_nodes), (x @ rot.T - x + [0.01, 0.02, -0.03]).reshape(-1)):
        assert abs(body.energy(u)) < 1e-9 * e_ref
        f = body.internal_forces(u)
        assert np.abs(f).max() < 1e-9 * np.abs(f_ref).max()


def test_stiffness_at_rest_has_six_rigid_modes(rod: TetMesh) -> None:
    body = ElasticBody(rod_mesh(0.02, 0.01, n_axial=2), STEEL)
    k = body.tangent_stiffness(np.zeros(body.n_dofs)).toarray()
    vals = np.linalg.eigvalsh(k)
    assert np.all(np.abs(vals[:6]) < 1e-8 * vals[-1])
    assert vals[6] > 1e-6 * vals[-1]


def test_homogeneous_stretch_matches_linear_elasticity() -> None:
    # Uniaxial stress along z on a bar: energy E ε² V / 2 and end-face reaction E ε A.
    mat = Material("test", 2.0e9, 0.35, 1000.0)
    length, width, thickness = 0.05, 0.01, 0.004
    body = ElasticBody(bar_mesh(length, width, thickness), mat)
    eps = 1e-7
    f_def = np.diag([1 - mat.poisson_ratio * eps, 1 - mat.poisson_ratio * eps, 1 + eps])
    u = (body.mesh.nodes @ (f_def - np.eye(3)).T).reshape(-1)
    volume, area = length * width * thickness, width * thickness
    assert body.energy(u) == pytest.approx(0.5 * mat.youngs_modulus * eps**2 * volume, rel=1e-5)
    f = body.internal_forces(u).reshape(-1, 3)
    end = body.mesh.nodes_on_plane(2, length)
    assert f[end, 2].sum() == pytest.approx(mat.youngs_modulus * eps * area, rel=1e-5)
    # Interior nodes are in equilibrium under a homogeneous stress.
    interior = np.setdiff1d(np.arange(body.mesh.n_nodes), np.unique(body.mesh.boundary_faces()))
    assert np.abs(f[interior]).max() < 1e-8 * mat.youngs_modulus * eps * area
    # Simple shear in the x-z plane: F = I + γ e_x ⊗ e_z, energy μ γ² V / 2.
    gamma = 1e-7
    u = (gamma * np.outer(body.mesh.nodes[:, 2], [1.0, 0.0, 0.0])).reshape(-1)
    mu, _ = mat.lame()
    assert body.energy(u) == pytest.approx(0.5 * mu * gamma**2 * volume, rel=1e-5)


def test_mass_matrix_totals_and_centre_of_mass(rod: TetMesh) -> None:
    body = ElasticBody(rod, STEEL)
    m = body.mass_matrix()
    expected = STEEL.density * rod.volume()
    assert body.total_mass == pytest.approx(expected, rel=1e-12)
    for axis in range(3):
        e = np.zeros(3)
        e[axis] = 1.0
        t = np.tile(e, rod.n_nodes)
        assert t @ m @ t == pytest.approx(expected, rel=1e-12)
    assert abs(m - m.T).max() < 1e-15 * abs(m).max()
    assert np.linalg.eigvalsh(m.toarray()).min() > 0
    np.testing.assert_allclose(body.center_of_mass, [0.0, 0.0, 0.015], atol=1e-12)
    bar = ElasticBody(bar_mesh(0.02, 0.01, 0.005, n_axial=2), STEEL)
    # Exact mass for straight-edged tets: ρ w t L.
    assert bar.total_mass == pytest.approx(STEEL.density * 0.02 * 0.01 * 0.005, rel=1e-13)


def test_gravity_and_damping(rod: TetMesh) -> None:
    body = ElasticBody(rod, STEEL)
    g = np.array([0.0, 0.0, -9.81])
    fg = body.gravity_forces(g)
    np.testing.assert_allclose(fg, body.mass_matrix() @ np.tile(g, rod.n_nodes), atol=1e-15)
    assert fg.reshape(-1, 3).sum(axis=0) == pytest.approx(body.total_mass * g)
    u = _random_deformation(rod, 0.01, 7)
    d = body.damping_matrix(u)
    expected = STEEL.rayleigh_alpha * body.mass_matrix() + STEEL.rayleigh_beta * body.tangent_stiffness(u)
    assert abs(d - expected).max() <= 1e-12 * abs(expected).max()
    with pytest.raises(InputError):
        body.gravity_forces([0.0, -9.81])


def test_face_area_weights_on_flat_and_curved_faces(rod: TetMesh) -> None:
    bar = ElasticBody(bar_mesh(0.02, 0.01, 0.004, n_axial=2), STEEL)
    end = bar.mesh.nodes_on_plane(2, 0.02)
    w = bar.face_area_weights(end)
    assert np.all(w > 0)
    assert w.sum() == pytest.approx(0.01 * 0.004, rel=1e-13)
    # Area-weighted centroid of a flat face is exact.
    np.testing.assert_allclose(w @ bar.mesh.nodes[end] / w.sum(), [0.0, 0.0, 0.02], atol=1e-15)
    body = ElasticBody(rod, STEEL)
    start = rod.nodes_on_plane(2, 0.0)
    ws = body.face_area_weights(start)
    assert np.all(ws > 0)
    assert ws.sum() == pytest.approx(math.pi * 0.005**2, rel=2e-3)
    np.testing.assert_allclose(ws @ rod.nodes[start], 0.0, atol=1e-15)
    # A box that also catches interior nodes: those get weight 0, the face nodes keep theirs.
    box = rod.nodes_in_box([-1, -1, -1], [1, 1, 0.006])  # end face plus the half-layer nodes at z = 5 mm
    assert box.size > start.size
    wb = dict(zip(box.tolist(), body.face_area_weights(box), strict=True))
    for node, weight in zip(start.tolist(), ws, strict=True):
        assert wb.pop(node) == pytest.approx(weight, rel=1e-14)
    assert all(v == 0.0 for v in wb.values())
    with pytest.raises(InputError, match="no boundary face"):
        body.face_area_weights(start[:3])


def test_inverted_deformation_is_reported(rod: TetMesh) -> None:
    body = ElasticBody(rod, STEEL, backend="numpy")
    u = (-2.0 * rod.nodes).reshape(-1)  # x = −X: an inversion
    assert body.energy(u) == np.inf
    with pytest.raises(InvertedElementError) as info:
        body.internal_forces(u)
    assert info.value.min_det < 0
    with pytest.raises(InputError, match="shape"):
        body.internal_forces(np.zeros(5))
    with pytest.raises(InputError, match="backend"):
        ElasticBody(rod, STEEL, backend="cuda")  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("strain", [1e-5, 0.05])
def test_stiffness_product_matches_the_assembled_stiffness(rod: TetMesh, backend: str, strain: float) -> None:
    body = ElasticBody(rod, STEEL, backend=backend)
    u = _random_deformation(rod, strain, seed=11)
    v = np.random.default_rng(12).standard_normal(body.n_dofs)
    f_ref, k = body.internal_forces_and_stiffness(u)
    f, kv = body.forces_and_stiffness_product(u, v)
    kv_ref = k @ v
    assert np.allclose(f, f_ref, rtol=0, atol=1e-12 * np.abs(f_ref).max())
    assert np.allclose(kv, kv_ref, rtol=0, atol=1e-11 * np.abs(kv_ref).max())
    assert np.allclose(body.stiffness_product(u, v), kv_ref, rtol=0, atol=1e-11 * np.abs(kv_ref).max())


@pytest.mark.parametrize("backend", BACKENDS)
def test_stiffness_product_reports_inversion(rod: TetMesh, backend: str) -> None:
    body = ElasticBody(rod, STEEL, backend=backend)
    with pytest.raises(InvertedElementError):
        body.stiffness_product(-2.0 * body.rest_positions, body.rest_positions)
