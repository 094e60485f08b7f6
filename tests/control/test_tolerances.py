"""Tolerance resolution (0 = default, -1 = none) and checks."""
from __future__ import annotations

import math

import numpy as np
import pytest

from retarget.control import ErrorCode, GoalTolerance, TrajectoryRejected, check_tolerance, resolve_tolerances

J = ("a", "b")


def test_defaults_and_overrides() -> None:
    tol = resolve_tolerances(J, default_path=0.1, default_goal=0.01, default_goal_time=0.5,
                             path=[GoalTolerance("b", 0.2, 0.0, 0.0)], goal=[GoalTolerance("a", -1.0, 0.3, 0.0)])
    np.testing.assert_array_equal(tol.path[:, 0], [0.1, 0.2])
    assert math.isinf(tol.path[0, 1])  # velocity not checked by default
    assert math.isinf(tol.goal[0, 0]) and tol.goal[0, 1] == 0.3  # -1 erases, positive sets
    assert tol.goal[1, 0] == 0.01
    assert tol.goal_time == 0.5


def test_zero_default_means_unchecked_and_goal_time_override() -> None:
    tol = resolve_tolerances(J, default_goal_time=0.5, goal_time=2.0)
    assert np.all(np.isinf(tol.path)) and np.all(np.isinf(tol.goal))
    assert tol.goal_time == 2.0


@pytest.mark.parametrize("entry,text", [(GoalTolerance("x", 0.1), "'x'"), (GoalTolerance("a", -0.5), "-0.5"),
                                        (GoalTolerance("a", math.nan), "nan")])
def test_invalid_goal_tolerances(entry: GoalTolerance, text: str) -> None:
    with pytest.raises(TrajectoryRejected) as info:
        resolve_tolerances(J, path=[entry])
    assert info.value.code == ErrorCode.INVALID_GOAL and text in str(info.value)


def test_negative_goal_time_rejected() -> None:
    with pytest.raises(TrajectoryRejected):
        resolve_tolerances(J, goal_time=-1.0)


def test_check_reports_each_component() -> None:
    tol = resolve_tolerances(J, default_path=np.array([[0.1, 0.5, 0.0], [0.1, 0.0, 0.0]]))
    bad = check_tolerance(J, tol.path, np.array([0.05, -0.2]), np.array([0.6, 100.0]))
    assert [(v.joint, v.component) for v in bad] == [("b", "position"), ("a", "velocity")]
    assert "joint 'b' position error -0.2 rad exceeds the tolerance 0.1 rad" == str(bad[0])
    assert check_tolerance(J, tol.path, np.array([0.0, 0.0]), None) == []
