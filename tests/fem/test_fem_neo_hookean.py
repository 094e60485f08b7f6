"""Tests of retarget.fem.neo_hookean: P = dψ/dF, small-strain limit = linear elasticity, backend agreement."""

from __future__ import annotations

import numpy as np
import pytest

from retarget.fem.assembly import SparsityPattern
from retarget.fem.element import element_geometry
from retarget.fem.material import Material
from retarget.fem.mesh import bar_mesh
from retarget.fem.neo_hookean import (
    NUMBA_AVAILABLE,
    energy_density,
    forces_stiffness_numba,
    forces_stiffness_numpy,
    pk1_stress,
)
from retarget.fem.quadrature import tet_rule

MAT = Material("test", 1.0e9, 0.3, 1000.0)
MU, LAM = MAT.lame()


def test_pk1_is_the_derivative_of_the_energy_density() -> None:
    rng = np.random.default_rng(0)
    f = np.eye(3) + 0.2 * rng.standard_normal((3, 3))
    p = pk1_stress(f, MU, LAM)
    h = 1e-6
    fd = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            d = np.zeros((3, 3))
            d[i, j] = h
            fd[i, j] = (energy_density(f + d, MU, LAM) - energy_density(f - d, MU, LAM)) / (2 * h)
    np.testing.assert_allclose(p, fd, rtol=1e-6, atol=1e-6 * np.abs(p).max())


def test_rest_state_is_stress_free_and_inversion_has_infinite_energy() -> None:
    np.testing.assert_allclose(pk1_stress(np.eye(3), MU, LAM), 0.0, atol=1e-6)
    assert energy_density(np.eye(3), MU, LAM) == 0.0
    assert energy_density(np.diag([1.0, 1.0, -1.0]), MU, LAM) == np.inf


def test_small_strain_limit_is_linear_elasticity() -> None:
    eps = 1e-5
    e, nu = MAT.youngs_modulus, MAT.poisson_ratio
    # Uniaxial stress: F = diag(1 + ε, 1 − νε, 1 − νε) -> P11 = E ε, P22 = P33 = 0, ψ = E ε² / 2.
    f = np.diag([1 + eps, 1 - nu * eps, 1 - nu * eps])
    p = pk1_stress(f, MU, LAM)
    assert p[0, 0] == pytest.approx(e * eps, rel=1e-5)
    assert abs(p[1, 1]) < 1e-5 * e * eps and abs(p[2, 2]) < 1e-5 * e * eps
    assert float(energy_density(f, MU, LAM)) == pytest.approx(0.5 * e * eps**2, rel=1e-4)
    # Simple shear γ: P12 = μ γ with μ = E / (2 (1 + ν)).
    g = np.eye(3)
    g[0, 1] = eps
    assert pk1_stress(g, MU, LAM)[0, 1] == pytest.approx(e / (2 * (1 + nu)) * eps, rel=1e-5)


@pytest.mark.skipif(not NUMBA_AVAILABLE, reason="numba not installed")
def test_numpy_and_numba_kernels_agree() -> None:
    mesh = bar_mesh(0.02, 0.01, 0.005, n_axial=2)
    geo = element_geometry(mesh.nodes, mesh.tets, tet_rule(2))
    pattern = SparsityPattern.from_tets(mesh.tets, mesh.n_nodes)
    u = 1e-5 * np.random.default_rng(1).standard_normal(mesh.n_dofs)
    fe, ke, en, md = forces_stiffness_numpy(u.reshape(-1, 3)[mesh.tets], geo.grad, geo.weights, MU, LAM)
    f_np, k_np = pattern.assemble_vector(fe), pattern.assemble_data(ke)
    f_nb, k_nb, en_nb, md_nb = forces_stiffness_numba(
        u, mesh.tets, geo.grad, geo.weights, MU, LAM, pattern.scatter, pattern.nnz
    )
    np.testing.assert_allclose(f_nb, f_np, rtol=1e-10, atol=1e-10 * np.abs(f_np).max())
    np.testing.assert_allclose(k_nb, k_np, rtol=1e-10, atol=1e-10 * np.abs(k_np).max())
    assert en_nb == pytest.approx(en, rel=1e-10)
    assert md_nb == pytest.approx(md, rel=1e-12)


@pytest.mark.skipif(not NUMBA_AVAILABLE, reason="numba not installed")
def test_quadrature_point_kernels_match_the_reference_stress_and_its_derivative() -> None:
    """first_piola_point = pk1_stress (the numpy reference); first_piola_tangent_point = ∂P/∂H by central differences."""
    from retarget.fem.neo_hookean import first_piola_point, first_piola_tangent_point

    rng = np.random.default_rng(7)
    hm = 0.2 * rng.standard_normal((3, 3))
    fm, fi, tm, pu, ym = (np.empty((3, 3)) for _ in range(5))
    am = np.empty((9, 9))
    det = first_piola_point(hm, MU, LAM, fm, fi, tm, pu)
    assert det == pytest.approx(np.linalg.det(np.eye(3) + hm), rel=1e-13)
    np.testing.assert_allclose(pu, pk1_stress(np.eye(3) + hm, MU, LAM), rtol=1e-12, atol=1e-12 * MU)
    first_piola_tangent_point(fm, fi, pu, MU, LAM, ym, am)
    step = 1e-6
    fd = np.zeros((9, 9))
    for kl in range(9):
        dh = np.zeros((3, 3))
        dh.flat[kl] = step
        fd[:, kl] = (pk1_stress(np.eye(3) + hm + dh, MU, LAM) - pk1_stress(np.eye(3) + hm - dh, MU, LAM)).ravel()
    np.testing.assert_allclose(am, fd / (2 * step), rtol=0, atol=1e-6 * MU)
    # An inverted point reports det F <= 0 and leaves the stress alone.
    pu[:] = 0.0
    assert first_piola_point(-2.0 * np.eye(3), MU, LAM, fm, fi, tm, pu) <= 0.0
    assert not pu.any()
