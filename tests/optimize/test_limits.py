"""Servo limits: convex-hull position bounds, the speed penalty and its gradient, limit checks, torque report."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from retarget.errors import InputError
from retarget.optimize.bspline import MotorProfiles, ProfileParametrization
from retarget.optimize.errors import ProfileError
from retarget.optimize.limits import (
    XM430_W210,
    MotorLimits,
    ServoSpec,
    VelocityPenalty,
    check_profile_limits,
    parameter_bounds,
    speed_feasible_parameters,
    torque_report,
    velocity_hull_bound,
)

H, T1, N_CTRL = 0.1, 2.0, 23


def test_xm430_numbers() -> None:
    assert XM430_W210.max_velocity == pytest.approx(8.06, abs=5e-3)  # 77 rpm
    assert XM430_W210.stall_torque == 3.0
    spec = ServoSpec.from_mapping({"model": "XM430-W210", "max_velocity": 6.0})
    assert spec.max_velocity == 6.0 and spec.stall_torque == 3.0
    with pytest.raises(InputError):
        ServoSpec.from_mapping({"max_speed": 6.0})
    with pytest.raises(InputError):
        ServoSpec.from_mapping({"stall_torque": -1.0})


def test_motor_limits_combine_urdf_and_servo() -> None:
    limits = MotorLimits.build(("a", "b", "c"), {"a": (-1.0, 1.0, 20.0), "b": (-0.5, 0.5, 2.0)},
                               {"b": ServoSpec("slow", 1.5, 1.0)})
    np.testing.assert_allclose(limits.max_velocity, [XM430_W210.max_velocity, 1.5, XM430_W210.max_velocity])
    assert limits.lower[2] == -math.inf and limits.upper[2] == math.inf
    np.testing.assert_allclose(limits.stall_torque, [3.0, 1.0, 3.0])
    assert limits.as_mapping()["a"] == (-1.0, 1.0, pytest.approx(XM430_W210.max_velocity))
    with pytest.raises(InputError, match="empty"):
        MotorLimits.build(("a",), {"a": (1.0, -1.0)})


def test_bounds_keep_the_profile_within_limits() -> None:
    rng = np.random.default_rng(2)
    limits = MotorLimits.build(("a", "b"), {"a": (-0.3, 0.8, None)})
    param = ProfileParametrization(N_CTRL, 2, np.array([0.0, 0.1]))
    bounds = parameter_bounds(param, limits)
    assert len(bounds) == param.n_parameters
    assert bounds[0] == (-0.3, 0.8) and bounds[-1] == (None, None)
    lo = np.array([b[0] if b[0] is not None else -10.0 for b in bounds])
    hi = np.array([b[1] if b[1] is not None else 10.0 for b in bounds])
    t = np.linspace(0.0, T1, 4001)
    for _ in range(20):
        x = rng.uniform(lo - 0.5, hi + 0.5).clip(lo, hi)  # many control points sit exactly on a bound
        theta = MotorProfiles(H, 0.0, T1, param.control_points(x)).evaluate(t)[:, 0]
        assert theta.min() >= -0.3 - 1e-12 and theta.max() <= 0.8 + 1e-12


def test_bounds_reject_a_start_outside_the_limits() -> None:
    limits = MotorLimits.build(("a",), {"a": (-0.3, 0.8)})
    with pytest.raises(ProfileError, match="starts at"):
        parameter_bounds(ProfileParametrization(N_CTRL, 1, np.array([1.0])), limits)


def test_velocity_hull_bound_is_an_upper_bound() -> None:
    rng = np.random.default_rng(3)
    prof = MotorProfiles(H, 0.0, T1, rng.normal(size=(N_CTRL, 3)))
    speed = np.abs(prof.evaluate(np.linspace(0, T1, 5001), 1)).max(axis=0)
    bound = velocity_hull_bound(prof)
    assert np.all(speed <= bound + 1e-12)
    assert np.all(speed > 0.3 * bound)  # and not absurdly loose


def _fast_case() -> tuple[MotorProfiles, ProfileParametrization, MotorLimits, np.ndarray]:
    t = np.linspace(0.0, T1, 401)
    param = ProfileParametrization(N_CTRL, 2, np.zeros(2))
    ramp = np.clip((np.arange(N_CTRL) - 5) / 3.0, 0.0, 1.0)  # 1 rad over ~0.3 s: about 3.5 rad/s
    p = np.stack([1.0 * ramp, -1.5 * ramp], axis=1)
    prof = MotorProfiles(H, 0.0, T1, p)
    limits = MotorLimits.build(("a", "b"), servos=ServoSpec("test", 2.0, 1.0))
    return prof, param, limits, t


def test_velocity_penalty_gradient_against_finite_differences() -> None:
    prof, param, limits, t = _fast_case()
    penalty = VelocityPenalty.build(prof, t, limits, weight=10.0)
    x = param.parameters(prof.control_points)
    value, grad = penalty.evaluate_parameters(x, param)
    assert value > 0
    rng = np.random.default_rng(4)
    eps = 1e-7
    for _ in range(10):
        d = rng.normal(size=x.size)
        fd = (penalty.evaluate_parameters(x + eps * d, param)[0]
              - penalty.evaluate_parameters(x - eps * d, param)[0]) / (2 * eps)
        assert fd == pytest.approx(grad @ d, rel=1e-6, abs=1e-9)


def test_velocity_penalty_enforces_the_limit() -> None:
    prof, param, limits, t = _fast_case()
    x0 = param.parameters(prof.control_points)
    assert check_profile_limits(prof, limits)  # the input is too fast
    penalty = VelocityPenalty.build(prof, t, limits, weight=1e4, margin=0.05)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        v, g = penalty.evaluate_parameters(x, param)
        return v + 0.5 * float(np.sum((x - x0) ** 2)), g + (x - x0)

    res = minimize(objective, x0, jac=True, method="L-BFGS-B", options={"maxiter": 500})
    out = prof.with_control_points(param.control_points(res.x))
    assert check_profile_limits(out, limits) == []
    assert np.abs(out.evaluate(np.linspace(0, T1, 4001), 1)).max() < 2.0


def _projection_objective(prof: MotorProfiles, param: ProfileParametrization, x0: np.ndarray, vbar: np.ndarray,
                          lam: float, rate: float = 1000.0):
    """The projection's penalized least-squares objective (the function it minimizes), for checking its optimum."""
    t = np.arange(int(round((prof.t_end - prof.t0) * rate)) + 1) / rate + prof.t0
    theta0 = prof.with_control_points(param.control_points(x0)).evaluate(t)

    def f(x: np.ndarray) -> float:
        p = prof.with_control_points(param.control_points(x))
        e = np.maximum(np.abs(p.evaluate(t, 1)) - vbar, 0.0)
        return 0.5 * float(np.sum((p.evaluate(t) - theta0) ** 2)) + 0.5 * lam * float(np.sum(e ** 2))

    return f


def test_speed_projection_is_feasible_and_optimal() -> None:
    prof, param, _, _ = _fast_case()
    # Motor a (≈ 3.5 rad/s) is over its 2.6 rad/s, motor b (≈ 5 rad/s) within its 6 rad/s.
    limits = MotorLimits.build(("a", "b"), servos={"a": ServoSpec("slow", 2.6, 1.0), "b": ServoSpec("fast", 6.0, 1.0)})
    x0 = param.parameters(prof.control_points)
    proj = speed_feasible_parameters(prof, param, x0, limits)
    assert proj.changed and proj.projected == ("a",) and proj.remaining == ()
    out = prof.with_control_points(param.control_points(proj.x))
    assert check_profile_limits(out, limits) == []
    assert np.abs(out.evaluate(np.linspace(0, T1, 4001), 1)[:, 0]).max() <= 0.98 * 2.6 + 1e-3
    np.testing.assert_array_equal(proj.x[param.n_free:], x0[param.n_free:])  # b untouched
    assert proj.max_change[1] == 0.0 and 0.0 < proj.max_change[0] < 0.5
    assert "a by up to" in proj.describe() and "naive baseline plays the input as authored" in proj.describe()
    # It is the minimizer of its objective: no random perturbation of motor a's parameters does better.
    f = _projection_objective(prof, param, x0, np.array([0.98 * 2.6, 0.98 * 6.0]), 1e4)
    best = f(proj.x)
    rng = np.random.default_rng(3)
    for _ in range(20):
        d = np.zeros_like(x0)
        d[:param.n_free] = rng.standard_normal(param.n_free)
        for eps in (1e-3, 1e-5):
            assert f(proj.x + eps * d) >= best - 1e-12 * max(1.0, best)


def test_speed_projection_leaves_a_feasible_input_alone_and_keeps_position_bounds() -> None:
    prof, param, _, _ = _fast_case()
    x0 = param.parameters(prof.control_points)
    fast = MotorLimits.build(("a", "b"), servos=ServoSpec("fast", 20.0, 1.0))
    proj = speed_feasible_parameters(prof, param, x0, fast)
    assert not proj.changed and proj.x is not x0
    np.testing.assert_array_equal(proj.x, x0)
    assert proj.describe() == "the input is within the servos' speed limits"
    slow = MotorLimits.build(("a", "b"), {"a": (-1.0, 0.95, None), "b": (-1.45, 1.0, None)}, ServoSpec("slow", 2.0, 1.0))
    bounds = parameter_bounds(param, slow)
    proj = speed_feasible_parameters(prof, param, np.clip(x0, -1.45, 0.95), slow, bounds)
    assert proj.projected == ("a", "b")
    assert all(lo - 1e-12 <= v <= hi + 1e-12 for v, (lo, hi) in zip(proj.x, bounds))
    with pytest.raises(InputError, match="margin"):
        speed_feasible_parameters(prof, param, x0, slow, margin=1.0)
    with pytest.raises(InputError, match="shape"):
        speed_feasible_parameters(prof, param, x0[:-1], slow)


def test_check_profile_limits_reports_runs() -> None:
    prof, _, _, _ = _fast_case()
    limits = MotorLimits.build(("a", "b"), {"a": (-1.0, 0.9, None), "b": (-1.2, 1.0, None)},
                               ServoSpec("test", 2.0, 1.0))
    found = {(v.joint, v.kind) for v in check_profile_limits(prof, limits, rate=500.0)}
    assert found == {("a", "upper"), ("a", "velocity"), ("b", "lower"), ("b", "velocity")}
    upper = next(v for v in check_profile_limits(prof, limits) if v.kind == "upper")
    assert upper.value == pytest.approx(1.0, abs=1e-6) and upper.limit == 0.9
    assert upper.start_time < upper.time <= upper.end_time
    assert "joint 'a'" in upper.describe()


def test_torque_report() -> None:
    t = np.linspace(0, 1, 101)
    tau = np.stack([2.0 * np.sin(2 * np.pi * t), -3.5 * t], axis=1)
    report = torque_report(t, tau, MotorLimits.build(("a", "b")))
    assert report.peak_torque == pytest.approx((2.0, 3.5), rel=1e-3)
    assert report.peak_time[1] == 1.0
    assert report.exceeded == ("b",)
    (warning,) = report.warnings()
    assert "'b'" in warning and "3.5" in warning
    assert report.summary()["torque_exceeded"] == ["b"]
    with pytest.raises(InputError):
        torque_report(t, tau[:, :1], MotorLimits.build(("a", "b")))
