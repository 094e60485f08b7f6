"""Every constraint block's Jacobian against finite differences, and the coupling's rigid-motion invariance."""
import numpy as np
import pytest

from retarget.sim.constraints import (
    CouplingConstraint,
    InterfaceSlot,
    JointConstraint,
    RigidSlot,
    interface_map,
    motor_theta_terms,
    perpendicular_axes,
    theta_derivative,
)
from retarget.sim.rotation import quat_from_matrix, rotation_matrix

EPS = 1e-6


def _fd(f, y, eps=EPS):
    return np.stack([(f(y + eps * e) - f(y - eps * e)) / (2 * eps) for e in np.eye(len(y))], axis=-1)


def _joint(kind, present=(True, True), motor=False, rng=None):
    rng = rng or np.random.default_rng(0)
    n = rng.normal(size=3)
    n /= np.linalg.norm(n)
    e1, e2 = perpendicular_axes(n)
    frame = np.array([e1, e2, n])
    slots = tuple(RigidSlot(i) for i, p in enumerate(present) if p)
    return JointConstraint(
        name=kind, slots=slots, size=JointConstraint.rows(kind, motor), motor=0 if motor else -1, kind=kind,
        present=present, anchor_a=rng.normal(size=3), anchor_b=rng.normal(size=3), axes_a=frame, axes_b=frame,
    )


CASES = [(k, p, m) for k in ("fixed", "hinge", "universal", "ball", "prismatic") for p in ((True, True), (False, True))
         for m in ((False, True) if k in ("hinge", "prismatic") else (False,))]


@pytest.mark.parametrize("kind,present,motor", CASES)
def test_joint_jacobian_matches_finite_differences(kind, present, motor):
    rng = np.random.default_rng(1)
    blk = _joint(kind, present, motor, rng)
    y = rng.normal(size=7 * sum(present))
    theta = 0.3
    c, jac = blk.evaluate(y, theta)
    assert c.shape == (blk.size,) and jac.shape == (blk.size, len(y))
    assert np.allclose(jac, _fd(lambda x: blk.evaluate(x, theta)[0], y), atol=1e-8)
    if motor:
        fd = (blk.evaluate(y, theta + EPS)[0] - blk.evaluate(y, theta - EPS)[0]) / (2 * EPS)
        assert np.allclose(theta_derivative(blk, y, theta), fd, atol=1e-8)


MOTOR_CASES = [(k, p) for k in ("hinge", "prismatic") for p in ((True, True), (False, True), (True, False))]


@pytest.mark.parametrize("kind,present", MOTOR_CASES)
def test_motor_theta_terms_match_finite_differences_and_complex_steps(kind, present):
    """The motor row's ∂C/∂θ, ∂²C/∂θ∂y, ∂²C/∂θ² (the servo reaction's terms in the full-space engine) against
    central differences in θ of evaluate's value and Jacobian, and against complex steps in θ (the form they
    replace); the other rows do not depend on θ."""
    rng = np.random.default_rng(2)
    blk = _joint(kind, present, True, rng)
    y = rng.normal(size=7 * sum(present))
    for k in range(0, len(y), 7):
        y[k + 3 : k + 7] /= np.linalg.norm(y[k + 3 : k + 7])
    theta, h = 0.7, 1e-30
    c_t, c_ty, c_tt = motor_theta_terms(blk, y, theta)
    fd_c = (blk.evaluate(y, theta + EPS)[0] - blk.evaluate(y, theta - EPS)[0]) / (2 * EPS)
    fd_j = (blk.evaluate(y, theta + EPS)[1] - blk.evaluate(y, theta - EPS)[1]) / (2 * EPS)
    fd_t = (theta_derivative(blk, y, theta + EPS) - theta_derivative(blk, y, theta - EPS)) / (2 * EPS)
    assert np.allclose(fd_c[:-1], 0.0) and np.allclose(fd_j[:-1], 0.0, atol=1e-9)
    assert c_t == pytest.approx(fd_c[-1], abs=1e-8)
    assert np.allclose(c_ty, fd_j[-1], atol=1e-8) and c_ty.shape == (len(y),)
    assert c_tt == pytest.approx(fd_t[-1], abs=1e-8)
    _, cy = blk.evaluate(y.astype(complex), complex(theta, h))
    assert np.all(cy.imag[:-1] == 0.0)
    assert np.allclose(c_ty, cy.imag[-1] / h, rtol=0.0, atol=1e-15)
    assert c_tt == pytest.approx((theta_derivative(blk, y.astype(complex), complex(theta, h)).imag / h)[-1],
                                 abs=1e-15)


def test_joint_constraints_vanish_at_reference_and_hinge_allows_rotation():
    blk = _joint("hinge", motor=True)
    anchor = np.array([0.1, 0.2, 0.3])
    n = blk.axes_a[2]
    blk = JointConstraint(name="h", slots=(RigidSlot(0), RigidSlot(1)), size=6, motor=0, kind="hinge",
                          anchor_a=anchor - np.array([1.0, 0, 0]), anchor_b=anchor - np.array([0, 1.0, 0]),
                          axes_a=blk.axes_a, axes_b=blk.axes_b)
    ca, cb = np.array([1.0, 0, 0]), np.array([0, 1.0, 0])
    ident = np.array([1.0, 0, 0, 0])
    y0 = np.concatenate([ca, ident, cb, ident])
    assert np.allclose(blk.evaluate(y0, 0.0)[0], 0.0, atol=1e-15)
    phi = 0.7  # rotate the child about the hinge axis through the anchor by phi: satisfied at θ = phi
    rot = _axis_angle(n, phi)
    yb = np.concatenate([ca, ident, anchor + rot @ (cb - anchor), quat_from_matrix(rot)])
    assert np.allclose(blk.evaluate(yb, phi)[0], 0.0, atol=1e-14)
    assert abs(blk.evaluate(yb, 0.0)[0][-1]) > 0.5


def _axis_angle(n, a):
    k = np.array([[0, -n[2], n[1]], [n[2], 0, -n[0]], [-n[1], n[0], 0]])
    return np.eye(3) + np.sin(a) * k + (1 - np.cos(a)) * k @ k


def _interface(rng, planar):
    x = rng.normal(size=(12, 3)) * 0.01
    if planar:
        x[:, 2] = 0.3
    w = rng.uniform(0.5, 1.5, size=12)
    wmat, centroid = interface_map(x, w)
    return x, wmat, centroid


@pytest.mark.parametrize("planar", [False, True])
@pytest.mark.parametrize("rigid", [True, False])
def test_coupling_jacobian_matches_finite_differences(planar, rigid):
    rng = np.random.default_rng(2)
    x, wmat, centroid = _interface(rng, planar)
    slot = InterfaceSlot(0, np.arange(12), wmat, centroid)
    c0 = np.array([0.0, 0.0, 0.25])
    blk = CouplingConstraint(name="c", slots=((RigidSlot(0), slot) if rigid else (slot,)), size=6,
                             rigid_present=rigid, rigid_reference=c0)
    xd = (x + 1e-3 * rng.normal(size=x.shape)).ravel()
    yi = wmat @ xd
    y = np.concatenate([c0 + 0.01 * rng.normal(size=3), quat_from_matrix(rotation_matrix(rng.normal(size=4))), yi]) if rigid else yi
    c, jac = blk.evaluate(y)
    assert np.allclose(jac, _fd(lambda v: blk.evaluate(v)[0], y), atol=1e-7)


@pytest.mark.parametrize("planar", [False, True])
def test_coupling_is_satisfied_by_any_common_rigid_motion(planar):
    rng = np.random.default_rng(4)
    x, wmat, centroid = _interface(rng, planar)
    c0 = np.array([0.01, -0.02, 0.2])
    blk = CouplingConstraint(name="c", slots=(RigidSlot(0), InterfaceSlot(0, np.arange(12), wmat, centroid)),
                             size=6, rigid_reference=c0)
    rot = rotation_matrix(rng.normal(size=4))
    shift = rng.normal(size=3)
    moved = (x @ rot.T + shift).ravel()
    y = np.concatenate([rot @ c0 + shift, quat_from_matrix(rot), wmat @ moved])
    assert np.allclose(blk.evaluate(y)[0], 0.0, atol=1e-12)
    # Twisting the interface relative to the body violates the orientation rows.
    twist = _axis_angle(np.array([0, 0, 1.0]), 0.05)
    y2 = np.concatenate([rot @ c0 + shift, quat_from_matrix(rot), wmat @ ((x @ twist.T) @ rot.T + shift).ravel()])
    assert np.max(np.abs(blk.evaluate(y2)[0][3:])) > 0.01


def test_interface_map_rejects_collinear_nodes():
    from retarget.errors import InputError

    x = np.outer(np.linspace(0, 1, 5), [1.0, 0, 0])
    with pytest.raises(InputError):
        interface_map(x, np.ones(5))
