"""Segment polynomials meet their end conditions; velocities and accelerations match finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.control import GoalPoint, TrajectorySampler, segment_coefficients, validate_trajectory

RNG = np.random.default_rng(7)
JOINTS = ("a", "b")


def _traj(with_v: bool, with_a: bool, t0: float = 0.5):
    times = [t0, 1.2, 2.0, 2.5]
    p = RNG.uniform(-1, 1, (4, 2))
    v = RNG.uniform(-0.5, 0.5, (4, 2))
    a = RNG.uniform(-2, 2, (4, 2))
    points = [GoalPoint(t, p[i], v[i] if with_v else (), a[i] if with_a else ()) for i, t in enumerate(times)]
    return validate_trajectory(JOINTS, points, controller_joints=JOINTS), p, v, a


@pytest.mark.parametrize("with_v,with_a", [(False, False), (True, False), (True, True)])
def test_passes_through_points_with_their_derivatives(with_v: bool, with_a: bool) -> None:
    traj, p, v, a = _traj(with_v, with_a)
    start = np.array([0.3, -0.2])
    s = TrajectorySampler(traj, start)
    np.testing.assert_allclose(s.sample(0.0).positions, start, atol=1e-12)
    for i, t in enumerate(traj.time):
        # approach each knot from the left, where the segment ending there is evaluated
        got = s.sample(t - 1e-9)
        np.testing.assert_allclose(got.positions, p[i], atol=1e-7)
        assert got.index == i
        if with_v:
            np.testing.assert_allclose(got.velocities, v[i], atol=1e-5)
        if with_a:
            np.testing.assert_allclose(got.accelerations, a[i], atol=1e-4)
    end = s.sample(10.0)
    assert end.after_end and end.index == 3
    np.testing.assert_allclose(end.positions, p[-1])


@pytest.mark.parametrize("with_v,with_a", [(False, False), (True, False), (True, True)])
def test_derivatives_match_finite_differences(with_v: bool, with_a: bool) -> None:
    traj, *_ = _traj(with_v, with_a)
    s = TrajectorySampler(traj, np.zeros(2), np.array([0.1, -0.1]))
    h = 1e-6
    for t in RNG.uniform(0.01, 2.49, 20):
        if np.min(np.abs(t - traj.time)) < 1e-4:
            continue
        fd_v = (s.sample(t + h).positions - s.sample(t - h).positions) / (2 * h)
        fd_a = (s.sample(t + h).velocities - s.sample(t - h).velocities) / (2 * h)
        np.testing.assert_allclose(s.sample(t).velocities, fd_v, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(s.sample(t).accelerations, fd_a, rtol=1e-5, atol=1e-5)


def test_linear_segment_is_constant_speed_from_start_state() -> None:
    traj = validate_trajectory(JOINTS, [GoalPoint(2.0, (1.0, -1.0))], controller_joints=JOINTS)
    s = TrajectorySampler(traj, np.array([0.0, 0.0]))
    got = s.sample(0.5)
    np.testing.assert_allclose(got.positions, [0.25, -0.25])
    np.testing.assert_allclose(got.velocities, [0.5, -0.5])
    np.testing.assert_allclose(s.sample(-1.0).positions, [0.0, 0.0])  # holds the start before it begins


def test_first_point_at_zero_is_taken_at_once() -> None:
    traj = validate_trajectory(JOINTS, [GoalPoint(0.0, (1.0, 1.0)), GoalPoint(1.0, (2.0, 2.0))],
                               controller_joints=JOINTS)
    s = TrajectorySampler(traj, np.array([5.0, 5.0]))
    np.testing.assert_allclose(s.sample(0.0).positions, [1.0, 1.0])
    np.testing.assert_allclose(s.sample(-0.1).positions, [1.0, 1.0])
    assert s.sample(0.5).index == 1


def test_quintic_coefficients_reproduce_a_quintic() -> None:
    c_true = RNG.normal(size=(6, 3))
    T = 0.7
    pw = T ** np.arange(6)
    p1 = pw @ c_true
    v1 = (np.arange(1, 6) * pw[:5]) @ c_true[1:]
    a1 = (np.arange(2, 6) * np.arange(1, 5) * pw[:4]) @ c_true[2:]
    c = segment_coefficients(T, c_true[0], p1, c_true[1], v1, 2 * c_true[2], a1)
    np.testing.assert_allclose(c, c_true, rtol=1e-9, atol=1e-9)


def test_first_segment_starts_when_execution_starts() -> None:
    # joint_trajectory_controller: the segment to the first point runs from the state at acceptance, at that
    # moment, to the first point's time; a trajectory stamped 0.5 s in the future starts moving now.
    traj = validate_trajectory(JOINTS, [GoalPoint(1.0, (1.0, -1.0))], controller_joints=JOINTS)
    s = TrajectorySampler(traj, np.array([0.0, 0.0]), start_offset=-0.5)
    np.testing.assert_allclose(s.sample(-0.5).positions, [0.0, 0.0])
    np.testing.assert_allclose(s.sample(0.25).positions, [0.5, -0.5])
    np.testing.assert_allclose(s.sample(0.25).velocities, [2 / 3, -2 / 3])
    # stamped in the past: no jump at the first sample, the remaining time is used
    s = TrajectorySampler(traj, np.array([0.0, 0.0]), start_offset=0.5)
    np.testing.assert_allclose(s.sample(0.5).positions, [0.0, 0.0])
    np.testing.assert_allclose(s.sample(0.75).positions, [0.5, -0.5])
