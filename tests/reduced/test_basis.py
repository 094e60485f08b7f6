"""Tests of retarget.sim.reduced.basis: rigid modes, mass-PCA, mode selection."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.sim.reduced.basis import mass_pca_basis, rigid_modes
from retarget.sim.reduced.errors import TrainingDataError


def _snapshots(body, rng, n_snap=12):
    """Static-like deformations: K⁻¹ of random tip loads, plus random rigid motions (which PCA must ignore)."""
    import scipy.sparse.linalg as spla

    x0 = body.mesh.nodes
    k = body.tangent_stiffness(np.zeros(body.n_dofs)) + 1e3 * body.mass_matrix()
    lu = spla.splu(k.tocsc())
    snaps = []
    for _ in range(n_snap):
        f = np.zeros((len(x0), 3))
        for zc in (0.15, 0.225, 0.3):  # loads on three cross-sections: several bending shapes
            f[body.mesh.nodes_on_plane(2, zc)] = rng.normal(size=3)
        u = lu.solve(f.ravel())
        w = rng.normal(size=3) * 1e-3
        snaps.append(u + (rng.normal(size=3) * 1e-3 + np.cross(w, x0)).ravel())
    return np.array(snaps)


def test_rigid_modes_are_mass_orthonormal_and_rigid(small_rod):
    m = small_rod.mass_matrix()
    r = rigid_modes(small_rod.mesh.nodes, m)
    assert np.allclose(r.T @ (m @ r), np.eye(6), atol=1e-12)
    # Rigid modes produce no internal force (to first order: the force is quadratic in a rotation).
    f = small_rod.internal_forces(1e-9 * r[:, 4])
    assert np.max(np.abs(f)) < 1e-6 * 1e-9 * small_rod.material.youngs_modulus * 1e-3


def test_mass_pca_orthonormal_variance_and_reproduction(small_rod):
    rng = np.random.default_rng(0)
    snaps = _snapshots(small_rod, rng)
    m = small_rod.mass_matrix()
    basis = mass_pca_basis(snaps, small_rod.mesh.nodes, m, variance=0.999999)
    u = basis.modes
    assert basis.n_rigid == 6
    assert np.allclose(u.T @ (m @ u), np.eye(basis.size), atol=1e-10)
    assert basis.captured_variance >= 0.999999
    # The snapshots (deformation + rigid part) are reproduced by their M-projection onto the basis.
    proj = u @ (u.T @ (m @ snaps.T))
    err = np.linalg.norm(proj - snaps.T) / np.linalg.norm(snaps)
    assert err < 2e-3
    # The training range: the largest deformation (non-rigid coordinates) among the snapshots; linear in them.
    z = snaps @ (m @ u)
    assert basis.training_norm == pytest.approx(np.max(np.linalg.norm(z[:, 6:], axis=1)), rel=1e-12)
    assert mass_pca_basis(2.0 * snaps, small_rod.mesh.nodes, m, variance=0.999999).training_norm == pytest.approx(
        2.0 * basis.training_norm, rel=1e-9)
    # Fixed mode count and spectrum ordering.
    b3 = mass_pca_basis(snaps, small_rod.mesh.nodes, m, n_modes=3)
    assert b3.size == 9 and np.all(np.diff(b3.spectrum) <= 0)
    assert b3.captured_variance < basis.captured_variance


def test_mass_pca_rejects_bad_input(small_rod):
    m = small_rod.mass_matrix()
    with pytest.raises(TrainingDataError):
        mass_pca_basis(np.zeros((3, 5)), small_rod.mesh.nodes, m)
    with pytest.raises(TrainingDataError, match="no deformation"):
        mass_pca_basis(np.zeros((3, small_rod.n_dofs)), small_rod.mesh.nodes, m)
    rng = np.random.default_rng(1)
    snaps = _snapshots(small_rod, rng, 3)
    with pytest.raises(TrainingDataError, match="support"):
        mass_pca_basis(snaps, small_rod.mesh.nodes, m, n_modes=4)
    # As a cap (training commands): as many as the snapshots support, no error after a long training run.
    assert mass_pca_basis(snaps, small_rod.mesh.nodes, m, n_modes=4, cap=True).size == 6 + 3
