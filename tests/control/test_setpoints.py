"""joint_commands → goal positions: setpoints, partial commands, multi-point interpolation, rejection."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.control import GoalPoint, TrajectoryRejected
from retarget.control.setpoints import CommandFollower
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
