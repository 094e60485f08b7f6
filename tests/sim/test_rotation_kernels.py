"""The compiled quaternion helpers (retarget.sim.rotation_kernels) against the NumPy reference (retarget.sim.rotation)."""
from __future__ import annotations

import numpy as np

from retarget.sim.rotation import omega_matrix, quat_rate_matrix
from retarget.sim.rotation_kernels import omega_half, omega_half_into, quat_rate_half, quat_rate_half_into


def test_half_rate_matrices_match_the_reference_to_the_bit() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        q, w = rng.normal(size=4), rng.normal(size=3)
        np.testing.assert_array_equal(quat_rate_half(q), 0.5 * quat_rate_matrix(q))
        np.testing.assert_array_equal(omega_half(w), 0.5 * omega_matrix(w))
        out_q, out_w = np.full((4, 3), np.nan), np.full((4, 4), np.nan)
        quat_rate_half_into(q, out_q)
        omega_half_into(w, out_w)
        np.testing.assert_array_equal(out_q, 0.5 * quat_rate_matrix(q))
        np.testing.assert_array_equal(out_w, 0.5 * omega_matrix(w))


def test_half_rate_is_the_quaternion_derivative() -> None:
    """``½ Q(q) ω = ½ Ω(ω) q`` and ``q̇ = ½ Q(q) ω`` keeps ``|q|`` constant to first order."""
    rng = np.random.default_rng(4)
    q, w = rng.normal(size=4), rng.normal(size=3)
    np.testing.assert_allclose(quat_rate_half(q) @ w, omega_half(w) @ q, rtol=0, atol=1e-14)
    assert abs(q @ (quat_rate_half(q) @ w)) < 1e-14


def test_rotation_and_its_jacobian_match_the_reference_in_real_and_complex_arithmetic() -> None:
    from retarget.sim.rotation import rotate_jacobian
    from retarget.sim.rotation import rotation_matrix as rotation_matrix_ref
    from retarget.sim.rotation_kernels import rotate_with_jacobian, rotation_matrix

    rng = np.random.default_rng(5)
    for _ in range(10):
        q, r = rng.normal(size=4), rng.normal(size=3)
        rmat = rotation_matrix(q)
        np.testing.assert_allclose(rmat, rotation_matrix_ref(q), rtol=0, atol=1e-14)
        rr, jac = rotate_with_jacobian(q, rmat, r)
        np.testing.assert_allclose(rr, rmat @ r, rtol=0, atol=1e-14)
        np.testing.assert_allclose(jac, rotate_jacobian(q, r), rtol=0, atol=1e-13)
        # Holomorphic: a complex step along dq gives the Jacobian's column sum exactly to rounding.
        dq = rng.normal(size=4)
        rr_c, _ = rotate_with_jacobian(q + 1e-30j * dq, rotation_matrix(q + 1e-30j * dq), r)
        np.testing.assert_allclose(rr_c.imag / 1e-30, jac @ dq, rtol=1e-12, atol=1e-14)
