"""Rotation helpers and the polar-decomposition derivative against finite differences."""
import numpy as np
import pytest

from retarget.sim.rotation import (
    omega_matrix,
    polar_decomposition,
    polar_rotation_derivative,
    quat_from_matrix,
    quat_rate_matrix,
    rotate,
    rotate_jacobian,
    rotate_transpose,
    rotate_transpose_jacobian,
    rotation_matrix,
)

EPS = 1e-6


def _fd(f, x, eps=EPS):
    cols = [(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))]
    return np.stack(cols, axis=-1)


def test_rotation_matrix_is_rotation_for_any_quaternion_scale():
    rng = np.random.default_rng(0)
    q = rng.normal(size=4) * 3.0
    r = rotation_matrix(q)
    assert np.allclose(r @ r.T, np.eye(3), atol=1e-14)
    assert np.isclose(np.linalg.det(r), 1.0)
    assert np.allclose(rotation_matrix(quat_from_matrix(r)), r, atol=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rotate_jacobians_match_finite_differences(seed):
    rng = np.random.default_rng(seed)
    q, r = rng.normal(size=4), rng.normal(size=3)
    assert np.allclose(rotate_jacobian(q, r), _fd(lambda x: rotate(x, r), q), atol=1e-8)
    assert np.allclose(rotate_transpose_jacobian(q, r), _fd(lambda x: rotate_transpose(x, r), q), atol=1e-8)


def test_quaternion_rate_gives_body_frame_angular_velocity():
    rng = np.random.default_rng(3)
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    w, r = rng.normal(size=3), rng.normal(size=3)
    qdot = 0.5 * quat_rate_matrix(q) @ w
    assert np.allclose(rotate_jacobian(q, r) @ qdot, rotate(q, np.cross(w, r)), atol=1e-14)
    assert np.allclose(omega_matrix(w) @ q, quat_rate_matrix(q) @ w)
    assert abs(q @ qdot) < 1e-15  # the continuous flow preserves |q|


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_polar_derivative_matches_finite_differences(seed):
    rng = np.random.default_rng(seed)
    a = rotation_matrix(rng.normal(size=4)) @ (np.eye(3) + 0.3 * rng.normal(size=(3, 3)))
    da = rng.normal(size=(3, 3))
    r, s = polar_decomposition(a)
    assert np.allclose(r @ s, a, atol=1e-13) and np.allclose(s, s.T)
    fd = (polar_decomposition(a + EPS * da)[0] - polar_decomposition(a - EPS * da)[0]) / (2 * EPS)
    assert np.allclose(polar_rotation_derivative(r, s, da), fd, atol=1e-8)
    # The complex-step continuation carries the same derivative exactly.
    rc, _ = polar_decomposition(a + 1e-30j * da)
    assert np.allclose(rc.imag / 1e-30, polar_rotation_derivative(r, s, da), atol=1e-13)


def test_polar_derivative_of_a_planar_fit():
    """A rank-2 best-fit map (a flat interface) still has a well-defined polar rotation and derivative."""
    rng = np.random.default_rng(5)
    rot = rotation_matrix(rng.normal(size=4))
    a = rot @ np.diag([1.0, 1.0, 0.0])
    r, s = polar_decomposition(a)
    assert np.allclose(r, rot, atol=1e-12)
    da = rng.normal(size=(3, 3)) @ np.diag([1.0, 1.0, 0.0])
    fd = (polar_decomposition(a + EPS * da)[0] - polar_decomposition(a - EPS * da)[0]) / (2 * EPS)
    assert np.allclose(polar_rotation_derivative(r, s, da), fd, atol=1e-7)
