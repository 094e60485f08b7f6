"""Per-tick execution: success when tracking, path and goal-time aborts, finished state is sticky."""
from __future__ import annotations

import numpy as np

from retarget.control import (ErrorCode, ExecutionState, ExecutionStatus, GoalPoint, TrajectoryExecution,
                              resolve_tolerances, validate_trajectory)

J = ("a", "b")


def _execution(path: float = 0.0, goal: float = 0.01, goal_time: float = 0.2) -> TrajectoryExecution:
    traj = validate_trajectory(J, [GoalPoint(1.0, (1.0, -1.0))], controller_joints=J, now=10.0)
    tol = resolve_tolerances(J, default_path=path, default_goal=goal, default_goal_time=goal_time)
    return TrajectoryExecution(traj, tol, ExecutionState(np.zeros(2)))


def test_perfect_tracking_succeeds_at_the_last_point() -> None:
    ex = _execution(path=0.05)
    for now in np.arange(10.0, 11.0, 0.01):
        step = ex.update(now, ExecutionState(ex.sampler.sample(now - 10.0).positions))
        assert step.status is ExecutionStatus.RUNNING
    step = ex.update(11.0, ExecutionState(np.array([1.0, -1.0])))
    assert step.status is ExecutionStatus.SUCCEEDED and step.code == ErrorCode.SUCCESSFUL
    assert step.desired.index == 0


def test_path_violation_aborts() -> None:
    ex = _execution(path=0.05)
    ex.update(10.0, ExecutionState(np.zeros(2)))
    step = ex.update(10.5, ExecutionState(np.array([0.5, 0.0])))  # desired b = -0.5
    assert step.status is ExecutionStatus.ABORTED and step.code == ErrorCode.PATH_TOLERANCE_VIOLATED
    assert "'b'" in step.message
    assert ex.update(10.6, ExecutionState(np.array([0.6, -0.6]))) is step


def test_goal_time_tolerance() -> None:
    ex = _execution(goal_time=0.2)
    late = ExecutionState(np.array([0.9, -1.0]))
    assert ex.update(11.1, late).status is ExecutionStatus.RUNNING  # still within goal_time_tolerance
    step = ex.update(11.3, late)
    assert step.code == ErrorCode.GOAL_TOLERANCE_VIOLATED and "0.1 rad" in step.message


def test_zero_goal_time_waits() -> None:
    ex = _execution(goal_time=0.0)
    assert ex.update(100.0, ExecutionState(np.array([0.9, -1.0]))).status is ExecutionStatus.RUNNING
    assert ex.update(101.0, ExecutionState(np.array([1.0, -1.0]))).status is ExecutionStatus.SUCCEEDED
