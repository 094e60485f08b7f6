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


# --- modal derivatives ----------------------------------------------------------------------------------------


def _clamp_rows(body) -> np.ndarray:
    """Selection rows holding every DOF of the nodes at z = 0 (a clamped end)."""
    dofs = (3 * body.mesh.nodes_on_plane(2, 0.0)[:, None] + np.arange(3)).ravel()
    rows = np.zeros((len(dofs), body.n_dofs))
    rows[np.arange(len(dofs)), dofs] = 1.0
    return rows


def _clamped_modes(body, held, k):
    import scipy.linalg as sla

    ns = sla.null_space(held)
    kr = ns.T @ (body.rest_stiffness @ ns)
    mr = ns.T @ (body.mass_matrix() @ ns)
    _, vec = sla.eigh(kr, mr, subset_by_index=[0, k - 1])
    return ns, ns @ vec


def test_force_hessian_is_the_second_difference_of_the_forces(small_rod) -> None:
    from retarget.sim.reduced.basis import force_hessian

    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, small_rod.n_dofs)) * 1e-3
    h = force_hessian(small_rod, a, b)
    assert np.linalg.norm(h - force_hessian(small_rod, b, a)) < 1e-6 * np.linalg.norm(h)  # symmetric
    f = small_rod.internal_forces

    def second_difference(s):  # of f_int at rest along a and b; error O(s²)
        return (f(s * (a + b)) - f(s * (a - b)) - f(s * (b - a)) + f(-s * (a + b))) / (4.0 * s * s)

    errors = [np.linalg.norm(h - second_difference(s)) / np.linalg.norm(h) for s in (1e-2, 1e-3)]
    assert errors[1] < 1e-4 and errors[1] < 0.03 * errors[0]


def test_modal_derivatives_solve_the_held_static_problem(small_rod) -> None:
    from retarget.sim.reduced.basis import force_hessian, modal_derivatives

    held = _clamp_rows(small_rod)
    ns, phi = _clamped_modes(small_rod, held, 2)
    psi = modal_derivatives(small_rod, held, phi)
    assert psi.shape == (small_rod.n_dofs, 3)
    assert np.max(np.abs(held @ psi)) < 1e-14 * np.max(np.abs(psi))
    # K₀ ψ₀₁ + H(φ₀, φ₁) is a reaction at the held DOFs only: zero on the free ones.
    res = small_rod.rest_stiffness @ psi[:, 1] + force_hessian(small_rod, phi[:, 0], phi[:, 1])
    assert np.linalg.norm(ns.T @ res) < 1e-8 * np.linalg.norm(force_hessian(small_rod, phi[:, 0], phi[:, 1]))


def test_modal_derivative_makes_the_static_error_third_order(small_rod) -> None:
    """Taylor: for a clamped eigenmode φ, f(aφ) = aλMφ + a²/2 H(φ, φ) + O(a³) on the free DOFs, so aφ leaves an
    O(a²) out-of-mode force; aφ + a²/2 ψ (ψ its modal derivative) leaves O(a³)."""
    from retarget.sim.reduced.basis import modal_derivatives

    held = _clamp_rows(small_rod)
    ns, phi = _clamped_modes(small_rod, held, 1)
    phi = phi[:, 0] / np.max(np.abs(phi[:, 0]))  # tip amplitude 1 m per unit a
    psi = modal_derivatives(small_rod, held, phi[:, None])[:, 0]
    w = ns.T @ (small_rod.mass_matrix() @ phi)

    def off_mode(u):
        r = ns.T @ small_rod.internal_forces(u)
        return np.linalg.norm(r - (r @ w) / (w @ w) * w)

    a = np.array([4e-3, 2e-3, 1e-3])  # tip deflections [m] of the 0.3 m rod
    linear = np.array([off_mode(x * phi) for x in a])
    second = np.array([off_mode(x * phi + 0.5 * x * x * psi) for x in a])
    assert np.allclose(linear[:-1] / linear[1:], 4.0, rtol=0.05)  # O(a²)
    assert np.allclose(second[:-1] / second[1:], 8.0, rtol=0.1)  # O(a³)
    assert np.all(second < 0.05 * linear)


def test_with_modal_derivatives_appends_orthonormal_modes(small_rod) -> None:
    from retarget.sim.reduced.basis import with_modal_derivatives

    rng = np.random.default_rng(0)
    m = small_rod.mass_matrix()
    basis = mass_pca_basis(_snapshots(small_rod, rng), small_rod.mesh.nodes, m, n_modes=4)
    held = _clamp_rows(small_rod)
    out = with_modal_derivatives(basis, small_rod, held, 2, m)
    assert out.n_derivatives == 3 and out.n_pca == 4 and out.size == basis.size + 3
    assert np.allclose(out.modes.T @ (m @ out.modes), np.eye(out.size), atol=1e-10)
    assert np.allclose(out.modes[:, : basis.size], basis.modes, atol=1e-10)  # the PCA basis is kept as it was
    assert with_modal_derivatives(basis, small_rod, held, 0, m) is basis
    # A derivative already in the span adds nothing: differentiating again appends no duplicate directions.
    again = with_modal_derivatives(out, small_rod, held, 2, m)
    assert again.size == out.size


def test_a_basis_from_a_precomputed_spectrum_is_the_basis(small_rod):
    """:func:`mass_pca_spectrum` once, then any mode count: value for value :func:`mass_pca_basis`'s own."""
    from retarget.sim.reduced.basis import mass_pca_spectrum

    snaps = _snapshots(small_rod, np.random.default_rng(1))
    m = small_rod.mass_matrix()
    spectrum = mass_pca_spectrum(snaps, small_rod.mesh.nodes, m)
    for kwargs in ({"variance": 0.99}, {"variance": 0.999999}, {"n_modes": 2}):
        a = mass_pca_basis(snaps, small_rod.mesh.nodes, m, **kwargs)
        b = mass_pca_basis(snaps, small_rod.mesh.nodes, m, spectrum=spectrum, **kwargs)
        assert np.array_equal(a.modes, b.modes) and np.array_equal(a.spectrum, b.spectrum)
        assert a.captured_variance == b.captured_variance and a.training_norm == b.training_norm
