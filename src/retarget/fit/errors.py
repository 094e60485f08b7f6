"""Errors of the material fitter, each carrying the data needed to debug it."""
from __future__ import annotations

from retarget.errors import InputError, RetargetError

__all__ = ["AlignmentError", "FitError", "RecordingError", "RigError"]


class FitError(RetargetError):
    """The fit itself failed (no convergence, a simulation that diverged at every trial, a singular problem).

    Attributes:
        reason: What went wrong.
        parameters: The last parameter values tried (name -> SI value), if any.
    """

    def __init__(self, reason: str, parameters: dict[str, float] | None = None) -> None:
        self.reason = reason
        self.parameters = dict(parameters or {})
        detail = f" (last parameters: {self.parameters})" if self.parameters else ""
        super().__init__(f"material fit failed: {reason}{detail}")


class RigError(InputError):
    """A robot description that is not a step-test rig (one motor, one flexible part, a tip body).

    Attributes:
        robot: Path or name of the robot file.
        reason: Why it is not a rig.
    """

    def __init__(self, robot: str, reason: str) -> None:
        self.robot = robot
        self.reason = reason
        super().__init__(f"robot {robot!r} is not a step-test rig: {reason}")


class RecordingError(InputError):
    """A recording that cannot be used (unknown body or topic, too few tracked samples, no rest phase).

    Attributes:
        path: The recording file.
        reason: What is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"recording {path}: {reason}")


class AlignmentError(RetargetError):
    """Recording and simulation could not be aligned (no step onset found, degenerate geometry).

    Attributes:
        reason: What failed.
        detail: Numbers that explain it (thresholds, sample counts).
    """

    def __init__(self, reason: str, detail: dict[str, float] | None = None) -> None:
        self.reason = reason
        self.detail = dict(detail or {})
        extra = f" ({', '.join(f'{k}={v:.4g}' for k, v in self.detail.items())})" if self.detail else ""
        super().__init__(f"alignment failed: {reason}{extra}")
