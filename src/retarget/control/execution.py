"""One trajectory goal being executed: desired state, error and outcome per control tick (no ROS, no clock).

This is joint_trajectory_controller's ``update()`` for one goal as a plain object: the node calls
:meth:`TrajectoryExecution.update` at its control rate with the measured state and forwards the desired
positions as setpoints. Path tolerances are checked before the last point's time (and on the first sample),
goal tolerances from then on; the goal succeeds as soon as every joint is within the goal tolerance, and is
aborted with ``GOAL_TOLERANCE_VIOLATED`` if that has not happened ``goal_time`` seconds after the last point.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from retarget.control.errors import ErrorCode
from retarget.control.interpolation import TrajectorySample, TrajectorySampler
from retarget.control.tolerances import Tolerances, check_tolerance
from retarget.control.trajectory import Trajectory

__all__ = ["ExecutionState", "ExecutionStatus", "ExecutionStep", "TrajectoryExecution", "start_state"]


class ExecutionStatus(Enum):
    """Where a goal stands after a tick."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    ABORTED = "aborted"


@dataclass(frozen=True, eq=False)
class ExecutionState:
    """Measured joint state in controller order.

    Attributes:
        positions: [rad] ``(m,)``.
        velocities: [rad/s] ``(m,)`` or ``None`` if not measured.
    """

    positions: np.ndarray
    velocities: np.ndarray | None = None


def start_state(measured: ExecutionState | None, last_command: np.ndarray | None, *, open_loop: bool = False,
                hold_within: float = 0.0, replacing: bool = False) -> ExecutionState | None:
    """Where a new goal's first segment starts from: the measured state, or the last command.

    A position servo holding a load does not sit at its goal: it holds it with an error (its sag, the load torque
    over its gain). A goal started from the measured state first moves the goal onto the shaft, letting the sag go
    in one control period, and then back: a jerk on every goal. So while the servos hold the last command — no
    goal running (``replacing`` false) and the measured positions within ``hold_within`` [rad] of it — the goal
    starts from the command, at rest, as joint_trajectory_controller's ``interpolate_from_desired_state`` does.
    Farther (the robot pushed, or moved with its torque off) or replacing a running goal it starts from the
    measured state; ``open_loop`` always from the last command.

    Returns:
        The start state; None when it needs a measured state and there is none.
    """
    if last_command is not None and open_loop:
        return ExecutionState(np.array(last_command, dtype=float))
    if measured is None:
        return None
    if (last_command is not None and not replacing and hold_within > 0.0
            and float(np.max(np.abs(np.asarray(measured.positions) - last_command))) <= hold_within):
        return ExecutionState(np.array(last_command, dtype=float))
    return measured


@dataclass(frozen=True, eq=False)
class ExecutionStep:
    """The outcome of one tick.

    Attributes:
        desired: The sampled desired state.
        position_error: Desired minus actual [rad] ``(m,)``.
        velocity_error: Desired minus actual [rad/s] ``(m,)`` or ``None``.
        status: Running, succeeded or aborted.
        code: Result code for a finished goal (``SUCCESSFUL`` while running).
        message: Human-readable reason when aborted, empty otherwise.
    """

    desired: TrajectorySample
    position_error: np.ndarray
    velocity_error: np.ndarray | None
    status: ExecutionStatus
    code: ErrorCode = ErrorCode.SUCCESSFUL
    message: str = ""


class TrajectoryExecution:
    """Executes one validated trajectory against measured states.

    Args:
        trajectory: The validated trajectory (its ``start_time`` is on the same clock as ``now`` below).
        tolerances: Resolved tolerances for this goal.
        start: The state the trajectory starts from (measured, or the last command in open loop).
        start_offset: When execution starts, on the trajectory's time axis [s]: ``now - trajectory.start_time``
            at acceptance (the segment to the first point starts then, as in joint_trajectory_controller).
    """

    def __init__(self, trajectory: Trajectory, tolerances: Tolerances, start: ExecutionState,
                 start_offset: float = 0.0) -> None:
        self.trajectory = trajectory
        self.tolerances = tolerances
        self.sampler = TrajectorySampler(trajectory, start.positions, start.velocities, start_offset)
        self._first = True
        self.finished: ExecutionStep | None = None

    def update(self, now: float, actual: ExecutionState) -> ExecutionStep:
        """Advance to ``now`` [s] and judge the measured state.

        Args:
            now: Current time [s], same clock as ``trajectory.start_time``.
            actual: Measured state.

        Returns:
            The step; once finished, every later call returns the same finished step.
        """
        if self.finished is not None:
            return self.finished
        t = now - self.trajectory.start_time
        desired = self.sampler.sample(t)
        pos_err = desired.positions - actual.positions
        vel_err = None if actual.velocities is None else desired.velocities - actual.velocities
        names = self.trajectory.joint_names
        status, code, message = ExecutionStatus.RUNNING, ErrorCode.SUCCESSFUL, ""
        if not desired.after_end or self._first:
            bad = check_tolerance(names, self.tolerances.path, pos_err, vel_err)
            if bad:
                status, code = ExecutionStatus.ABORTED, ErrorCode.PATH_TOLERANCE_VIOLATED
                message = f"path tolerance violated at t = {t:.3f} s: " + "; ".join(map(str, bad))
        if status is ExecutionStatus.RUNNING and desired.after_end:
            bad = check_tolerance(names, self.tolerances.goal, pos_err, vel_err)
            late = t - self.trajectory.duration
            if not bad:
                status = ExecutionStatus.SUCCEEDED
            elif self.tolerances.goal_time > 0.0 and late > self.tolerances.goal_time:
                status, code = ExecutionStatus.ABORTED, ErrorCode.GOAL_TOLERANCE_VIOLATED
                message = (f"goal tolerance not reached {late:.3f} s after the last point (goal_time_tolerance "
                           f"{self.tolerances.goal_time:.3f} s): " + "; ".join(map(str, bad)))
        self._first = False
        step = ExecutionStep(desired, pos_err, vel_err, status, code, message)
        if status is not ExecutionStatus.RUNNING:
            self.finished = step
        return step
