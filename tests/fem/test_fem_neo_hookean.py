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
