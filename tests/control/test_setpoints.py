"""joint_commands → goal positions: setpoints, partial commands, multi-point interpolation, rejection."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.control import GoalPoint, TrajectoryRejected
from retarget.control.setpoints import MAX_EXTRAPOLATION_S, CommandFollower
from retarget.motion.limits import JointLimit

J = ("a", "b", "c")


def test_setpoint_and_partial_command() -> None:
    f = CommandFollower(J, np.zeros(3))
    f.command(["c", "a"], [GoalPoint(5.0, (0.3, 0.1))], now=0.0)
    np.testing.assert_allclose(f.goal_at(0.0), [0.1, 0.0, 0.3])


def test_multi_point_is_interpolated_from_the_current_goal() -> None:
    f = CommandFollower(J, np.ones(3))
    f.command(J, [GoalPoint(1.0, (2.0, 2.0, 2.0)), GoalPoint(2.0, (3.0, 3.0, 3.0))], now=10.0)
    np.testing.assert_allclose(f.goal_at(10.5), [1.5] * 3)
    np.testing.assert_allclose(f.goal_at(11.5), [2.5] * 3)
    np.testing.assert_allclose(f.goal_at(20.0), [3.0] * 3)


def test_rejected_command_keeps_goal() -> None:
    f = CommandFollower(J, np.zeros(3), limits={"a": JointLimit(-1.0, 1.0)})
    for names, points in ((["x"], [GoalPoint(0.0, (1.0,))]), (["a"], [GoalPoint(0.0, (2.0,))]),
                          (["a"], [GoalPoint(0.0, (np.nan,))])):
        with pytest.raises(TrajectoryRejected):
            f.command(names, points, now=0.0)
    np.testing.assert_array_equal(f.goal_at(1.0), np.zeros(3))


def test_a_stamped_setpoint_is_held_on_its_own_clock() -> None:
    """A setpoint with velocities and a stamp is the trajectory at the instant the goal is read: received late or
    read between two of the sender's ticks, the goal is p + v (t − stamp); extrapolated at most
    MAX_EXTRAPOLATION_S, clipped to the limits; without a stamp or with zero velocities it is held."""
    f = CommandFollower(["a", "b"], np.zeros(2), limits={"b": JointLimit(-1.0, 0.54)})
    # Sampled at t = 10.000, received at 10.030 (a busy executor): read at 10.030 and 10.035.
    f.command(["a", "b"], [GoalPoint(0.0, [0.1, 0.5], [1.2, 1.0])], now=10.03, stamp=10.0)
    np.testing.assert_allclose(f.goal_at(10.03), [0.1 + 1.2 * 0.03, 0.5 + 0.03], atol=1e-12)
    np.testing.assert_allclose(f.goal_at(10.035), [0.1 + 1.2 * 0.035, 0.535], atol=1e-12)
    np.testing.assert_allclose(f.goal_at(9.99), [0.1, 0.5], atol=1e-12)  # before its stamp: the point itself
    np.testing.assert_allclose(f.goal_at(20.0), [0.1 + 1.2 * MAX_EXTRAPOLATION_S, 0.54], atol=1e-12)
    f.command(["a"], [GoalPoint(0.0, [0.2], [0.0])], now=20.0, stamp=20.0)  # at rest: held
    np.testing.assert_allclose(f.goal_at(21.0), [0.2, 0.54], atol=1e-12)
    f.command(["a", "b"], [GoalPoint(0.0, [0.3, 0.1], [1.0, 1.0])], now=22.0)  # no stamp: held
    np.testing.assert_allclose(f.goal_at(22.05), [0.3, 0.1], atol=1e-12)


def test_a_stamped_horizon_runs_on_its_stamps_clock_through_a_late_arrival() -> None:
    """The trajectory server's command: the next samples of a trajectory, with velocities, from its stamp. Received
    120 ms late (a loaded host), the goal is still the trajectory at each instant it is read (cubic Hermite between
    the samples: exact for a cubic), where a one-point setpoint extrapolated along its velocity is off by the
    trajectory's curvature; past its last sample it holds that sample."""
    def q(t: float) -> float:  # a cubic trajectory [rad]
        return 0.2 + 1.5 * t - 2.0 * t ** 2 + 0.7 * t ** 3

    def v(t: float) -> float:
        return 1.5 - 4.0 * t + 2.1 * t ** 2

    stamp, times = 10.0, np.arange(21) * 0.01
    horizon = [GoalPoint(float(dt), [q(0.4 + dt)], [v(0.4 + dt)]) for dt in times]
    f = CommandFollower(["a"], [q(0.4)])
    f.command(["a"], horizon, now=stamp + 0.12, stamp=stamp)
    for read in (0.12, 0.125, 0.15, 0.199):
        np.testing.assert_allclose(f.goal_at(stamp + read), [q(0.4 + read)], atol=1e-9)
    np.testing.assert_allclose(f.goal_at(stamp + 0.5), [q(0.6)], atol=1e-12)
    one = CommandFollower(["a"], [q(0.4)])
    one.command(["a"], horizon[:1], now=stamp + 0.12, stamp=stamp)
    # The setpoint alone, read when it arrives: its tangent, capped at MAX_EXTRAPOLATION_S, 0.6 deg off.
    assert abs(one.goal_at(stamp + 0.12)[0] - q(0.52)) > 1e-2
