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
