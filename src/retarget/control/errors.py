"""Errors of :mod:`retarget.control`: trajectory goals that cannot be executed.

The error codes mirror ``control_msgs/action/FollowJointTrajectory`` results so that a ROS node can put
``exc.code`` straight into its result, while this package stays free of ROS imports.
"""
from __future__ import annotations

from enum import IntEnum

from retarget.errors import InputError

__all__ = ["ErrorCode", "TrajectoryRejected"]


class ErrorCode(IntEnum):
    """Result codes of ``control_msgs/action/FollowJointTrajectory`` (same numbers as the message constants)."""

    SUCCESSFUL = 0
    INVALID_GOAL = -1
    INVALID_JOINTS = -2
    OLD_HEADER_TIMESTAMP = -3
    PATH_TOLERANCE_VIOLATED = -4
    GOAL_TOLERANCE_VIOLATED = -5


class TrajectoryRejected(InputError):
    """A trajectory goal failed validation; nothing was commanded.

    Attributes:
        code: The FollowJointTrajectory error code to report.
        joint: Offending joint name, or ``None``.
        point: Offending point index, or ``None``.
    """

    def __init__(self, code: ErrorCode, message: str, *, joint: str | None = None,
                 point: int | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.joint = joint
        self.point = point
