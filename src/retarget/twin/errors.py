"""Errors of the simulation-driven digital twin."""
from __future__ import annotations

from retarget.errors import RetargetError

__all__ = ["ChannelError", "TwinError", "TwinModelUnavailable"]


class TwinError(RetargetError):
    """Root of the twin's errors."""


class TwinModelUnavailable(TwinError):
    """No reduced model can drive the twin (the emulated servos then run their own loops alone).

    Attributes:
        robot: the robot name.
        reason: why (no file given and none cached, file missing, motors differ ...).
    """

    def __init__(self, robot: str, reason: str) -> None:
        self.robot = robot
        self.reason = reason
        super().__init__(f"no reduced model for the {robot} twin: {reason}")


class ChannelError(TwinError):
    """A pose channel file is not one this version writes (bad magic, version or size).

    Attributes:
        path: the channel file. detail: what was wrong.
    """

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"pose channel {path}: {detail}")
