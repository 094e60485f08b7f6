"""B-spline motor profiles: against scipy's BSpline, derivatives against finite differences, end conditions, fits."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.interpolate import BSpline, PchipInterpolator

from retarget.motion import Motion
from retarget.optimize.bspline import MotorProfiles, ProfileParametrization, fit_profiles, num_segments
from retarget.optimize.errors import ProfileError


@pytest.fixture
def profiles() -> MotorProfiles:
    rng = np.random.default_rng(7)
    return MotorProfiles(0.1, 0.3, 1.25, rng.normal(size=(13, 2)))


def test_segments_cover_the_span() -> None:
    assert num_segments(0.0, 1.0, 0.1) == 10  # 1.0/0.1 is 10.000000000000002 in floating point
    assert num_segments(0.0, 1.05, 0.1) == 11
    assert num_segments(2.0, 2.0, 0.1) == 1
    with pytest.raises(ProfileError):
        num_segments(0.0, 1.0, 0.0)
    with pytest.raises(ProfileError):
        num_segments(1.0, 0.0, 0.1)


def test_matches_scipy_bspline(profiles: MotorProfiles) -> None:
    assert profiles.n_segments == 10 and profiles.t_end == pytest.approx(1.3)
    ref = BSpline(profiles.knots(), profiles.control_points, 3)
    t = np.linspace(profiles.t0, profiles.t_end, 777)
    for d in range(4):
        np.testing.assert_allclose(profiles.evaluate(t, d), ref(t, nu=d), atol=1e-9 * 10 ** d, rtol=0)


def test_basis_rows(profiles: MotorProfiles) -> None:
    t = np.linspace(0.0, 1.6, 301)  # also outside [t0, t_end]
    b0, b1, b2 = profiles.basis_matrices(t)
    assert b0.shape == (301, profiles.n_control)
    assert np.all(np.diff(b0.indptr) == 4)
    np.testing.assert_allclose(np.asarray(b0.sum(axis=1)).ravel(), 1.0, atol=1e-14)  # partition of unity
    np.testing.assert_allclose(np.asarray(b1.sum(axis=1)).ravel(), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(b2.sum(axis=1)).ravel(), 0.0, atol=1e-9)
    assert b0.min() >= 0.0


def test_time_derivatives_against_finite_differences(profiles: MotorProfiles) -> None:
    rng = np.random.default_rng(3)
    t = rng.uniform(profiles.t0 + 1e-3, profiles.t_end - 1e-3, 50)
    eps = 1e-6
    for d in range(3):
        fd = (profiles.evaluate(t + eps, d) - profiles.evaluate(t - eps, d)) / (2 * eps)
        exact = profiles.evaluate(t, d + 1)
        # Central differences are O(eps²) except within eps of a knot, where a C^(2-d) derivative kinks.
        np.testing.assert_allclose(fd, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


def test_control_point_derivatives_against_finite_differences(profiles: MotorProfiles) -> None:
    rng = np.random.default_rng(4)
    t = rng.uniform(0.2, 1.4, 40)
    p = profiles.control_points
    eps = 1e-6
    for d in range(3):
        basis = profiles.basis_matrix(t, d).toarray()
        for j in (0, 5, profiles.n_control - 1):
            dp = np.zeros_like(p)
            dp[j, 1] = eps
            plus = profiles.with_control_points(p + dp).evaluate(t, d)[:, 1]
            minus = profiles.with_control_points(p - dp).evaluate(t, d)[:, 1]
            np.testing.assert_allclose((plus - minus) / (2 * eps), basis[:, j], atol=1e-6 * 10 ** d)


def test_held_outside_the_spline(profiles: MotorProfiles) -> None:
    before, after = profiles.evaluate(np.array([-1.0, 0.0])), profiles.evaluate(np.array([2.0, 5.0]))
    np.testing.assert_allclose(before, profiles.evaluate(np.array([profiles.t0, profiles.t0])))
    np.testing.assert_allclose(after, profiles.evaluate(np.array([profiles.t_end, profiles.t_end])))
    assert np.all(profiles.evaluate(np.array([-1.0, 3.0]), 1) == 0.0)


def test_scalar_protocol(profiles: MotorProfiles) -> None:
    assert profiles.value(0.5).shape == (2,)
    np.testing.assert_allclose(profiles.derivative(0.5), profiles.evaluate(np.array([0.5]), 1)[0])
    np.testing.assert_allclose(profiles.second_derivative(0.5), profiles.evaluate(np.array([0.5]), 2)[0])
    t = np.linspace(0.0, 1.6, 203)  # the scalar fast path agrees with the matrix path, also outside the spline
    for d in range(4):
        scalar = np.array([profiles.evaluate(float(x), d) for x in t])
        np.testing.assert_allclose(scalar, profiles.evaluate(t, d), rtol=1e-12, atol=1e-10 * 10 ** d)


def test_parametrization_end_conditions() -> None:
    rng = np.random.default_rng(11)
    pose = np.array([0.2, -0.4, 1.0])
    param = ProfileParametrization(12, 3, pose, hold_end=True)
    assert param.n_free == 12 - 3 - 2 and param.n_parameters == 3 * param.n_free
    x = rng.normal(size=param.n_parameters)
    p = param.control_points(x)
    np.testing.assert_allclose(p[:3], np.tile(pose, (3, 1)))
    np.testing.assert_allclose(p[-3:], np.tile(p[-1], (3, 1)))
    np.testing.assert_allclose(param.parameters(p), x)
    prof = MotorProfiles(0.1, 0.0, 0.9, p)
    np.testing.assert_allclose(prof.value(0.0), pose, atol=1e-15)
    for t in (0.0, prof.t_end):
        np.testing.assert_allclose(prof.derivative(t), 0.0, atol=1e-12)
        np.testing.assert_allclose(prof.second_derivative(t), 0.0, atol=1e-10)
    # x is motor-major: the first n_free entries move motor 0 only.
    dx = np.zeros_like(x)
    dx[: param.n_free] = 1.0
    changed = np.abs(param.control_points(x + dx) - p).max(axis=0)
    assert changed[0] > 0 and changed[1] == 0 and changed[2] == 0


def test_rest_control_holds_the_profile_still_from_its_knot_on() -> None:
    rng = np.random.default_rng(14)
    param = ProfileParametrization(14, 2, np.zeros(2), hold_end=True, rest_control=8)
    assert param.n_free == 14 - 3 - (14 - 8 - 1)
    x = rng.normal(size=param.n_parameters)
    prof = MotorProfiles(0.1, 0.0, 1.1, param.control_points(x))
    t = np.linspace(0.8, 1.1, 31)  # knot 8 is at 0.8 s: still from there on, at the one rest pose per motor
    np.testing.assert_allclose(prof.evaluate(t), np.tile(prof.value(1.1), (t.size, 1)), atol=1e-14)
    np.testing.assert_allclose(prof.evaluate(t, 1), 0.0, atol=1e-12)
    assert np.abs(prof.evaluate(np.array([0.75]), 1)).max() > 1e-6  # and free to move before it
    np.testing.assert_allclose(param.parameters(param.control_points(x)), x)
    # A rest knot inside the last three control points changes nothing; before the held start, one pose throughout.
    assert ProfileParametrization(14, 2, np.zeros(2), rest_control=13).n_free == \
        ProfileParametrization(14, 2, np.zeros(2)).n_free
    assert ProfileParametrization(14, 2, np.zeros(2), rest_control=1).n_free == 1


def test_fit_rests_from_the_knot_after_rest_from() -> None:
    t = np.linspace(0.0, 2.0, 401)
    q = np.where(t < 0.5, 0.0, np.where(t < 1.0, 0.6 * (t - 0.5) ** 2 * (3 - 4 * (t - 0.5)), 0.15))
    motion = Motion(t, ("m",), q[:, None])
    fit = fit_profiles(motion, 0.05, rest_from=1.23)
    after = np.linspace(1.25, 2.0, 16)
    np.testing.assert_allclose(fit.profiles.evaluate(after, 1), 0.0, atol=1e-12)
    assert fit.parametrization.n_free == fit_profiles(motion, 0.05).parametrization.n_free - (40 + 3 - 25 - 3)
    assert fit.max_error.max() < 2e-3  # the input is at rest there too


def test_parametrization_pullback_is_the_transpose() -> None:
    rng = np.random.default_rng(12)
    param = ProfileParametrization(10, 2, np.zeros(2))
    g = rng.normal(size=(10, 2))
    x = rng.normal(size=param.n_parameters)
    dx = rng.normal(size=param.n_parameters)
    # <g, P(x + dx) − P(x)> = <pullback(g), dx> because P is affine in x.
    lhs = np.sum(g * (param.control_points(x + dx) - param.control_points(x)))
    assert lhs == pytest.approx(param.pullback(g) @ dx, rel=1e-12)
    basis = MotorProfiles(0.1, 0.0, 0.7, np.zeros((10, 2))).basis_matrix(np.linspace(0, 0.7, 9))
    assert param.parameter_basis(basis).shape == (9, param.n_free)


def test_full_jacobian_against_finite_differences() -> None:
    rng = np.random.default_rng(13)
    param = ProfileParametrization(11, 3, rng.normal(size=3))
    x = rng.normal(size=param.n_parameters)
    space = MotorProfiles.constant(np.zeros(3), 0.0, 0.8, 0.1)
    t = np.linspace(-0.1, 0.9, 37)
    eps = 1e-6
    for d in range(3):
        basis = space.basis_matrix(t, d)
        jac = param.jacobian(basis)
        assert jac.shape == (t.size * 3, param.n_parameters)
        for _ in range(5):
            dx = rng.normal(size=x.size)
            plus = np.asarray(basis @ param.control_points(x + eps * dx)).ravel()
            minus = np.asarray(basis @ param.control_points(x - eps * dx)).ravel()
            np.testing.assert_allclose((plus - minus) / (2 * eps), jac @ dx, rtol=1e-7, atol=1e-7 * 10 ** d)


def test_parametrization_rejects_too_few_points() -> None:
    with pytest.raises(ProfileError, match="knot spacing"):
        ProfileParametrization(5, 1, np.zeros(1), hold_end=True)


def _smooth_motion() -> Motion:
    """Starts and ends at rest with zero acceleration, like the spline's end conditions."""
    t = np.linspace(0.0, 3.0, 601)
    s = np.sin(np.pi * t / 3.0) ** 4
    return Motion(t, ("a", "b"), np.stack([0.5 * s, -0.3 * s * np.cos(2 * t)], axis=1))


def test_fit_smooth_motion() -> None:
    fit = fit_profiles(_smooth_motion(), 0.1)
    # Measured: h = 0.1 s: max 2.0e-5 rad, RMS 3.9e-6 rad; h = 0.05 s: max 1.2e-6 rad (error ~ h⁴).
    assert fit.max_error.max() < 3e-5
    assert fit.rms_error.max() < 1e-5
    finer = fit_profiles(_smooth_motion(), 0.05)
    assert finer.max_error.max() < fit.max_error.max() / 8  # fourth-order convergence (16× ideally)
    summary = fit.summary()
    assert set(summary["max_error_rad"]) == {"a", "b"}


def _step_motion() -> Motion:
    """The single-rod step-and-return: pchip keyframes 0 → 30° in 0.2 s, hold 1.5 s, back, at 200 Hz."""
    keys = np.array([[0.0, 0.0], [0.5, 0.0], [0.7, 30.0], [2.2, 30.0], [2.4, 0.0], [4.0, 0.0]])
    t = np.arange(801) / 200.0
    return Motion(t, ("base_pitch",), np.radians(PchipInterpolator(keys[:, 0], keys[:, 1])(t))[:, None])


def test_fit_step_motion() -> None:
    motion = _step_motion()
    coarse = fit_profiles(motion, 0.1)
    fine = fit_profiles(motion, 0.05)
    # Measured: h = 0.1 s: max 1.13°, RMS 0.37°; h = 0.05 s: max 0.24°, RMS 0.06°; h = 0.025 s: max 0.05°,
    # RMS 0.01° (pchip is only C¹ at the keyframes, so the error converges more slowly than for a smooth motion).
    assert np.degrees(coarse.max_error[0]) < 1.5
    assert np.degrees(fine.max_error[0]) < 0.3
    assert np.degrees(fine.rms_error[0]) < 0.08
    assert fine.profiles.value(0.0)[0] == pytest.approx(0.0, abs=1e-15)


def test_fit_smoothing_trades_error_for_acceleration() -> None:
    motion = _step_motion()
    plain = fit_profiles(motion, 0.05)
    smooth = fit_profiles(motion, 0.05, smoothing=1e-5)
    t = np.linspace(0, 4, 2001)
    peak = lambda f: np.abs(f.profiles.evaluate(t, 2)).max()  # noqa: E731
    assert peak(smooth) < peak(plain)
    assert smooth.max_error[0] > plain.max_error[0]


def test_fit_without_end_conditions_and_underdetermined() -> None:
    t = np.linspace(0.0, 1.0, 6)
    motion = Motion(t, ("j",), np.sin(3 * t)[:, None])
    fit = fit_profiles(motion, 0.05, hold_start=False, hold_end=False)  # 23 control points, 6 samples
    assert fit.max_error[0] < 1e-10


def test_to_motion_round_trip() -> None:
    motion = _step_motion()
    fit = fit_profiles(motion, 0.05)
    out = fit.profiles.to_motion(motion.joint_names, 200.0)
    assert out.num_samples == motion.num_samples and out.joint_names == motion.joint_names
    np.testing.assert_allclose(out.positions, motion.positions, atol=fit.max_error[0] + 1e-12)
    with pytest.raises(ProfileError):
        fit.profiles.to_motion(("a", "b"), 200.0)


def test_bad_control_point_shape() -> None:
    with pytest.raises(ProfileError, match="expected"):
        MotorProfiles(0.1, 0.0, 1.0, np.zeros((5, 1)))
