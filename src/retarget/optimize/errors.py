"""Errors of the optimizer's building blocks."""
from __future__ import annotations

from retarget.errors import InputError, NotAvailableError, RetargetError

__all__ = ["NoPlanningModelError", "OptimizeError", "PlanCancelled", "ProfileError", "ShapingError", "TimeBudgetError",
           "WeightSyntaxError"]


class OptimizeError(RetargetError):
    """Root of the optimizer's errors."""


class NoPlanningModelError(OptimizeError, NotAvailableError):
    """No reduced model of the robot was given, cached, found in the model folders or shipped, and training was not
    allowed: each shell says what to pass in its own spelling (``--reduced``, the node's ``reduced_file``).

    Attributes:
        robot: The robot's name.
        searched: The folders looked in.
        skipped: One line per model file skipped (stale, foreign or unreadable).
    """

    def __init__(self, message: str, robot: str, searched: tuple[str, ...] = (), skipped: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.robot = robot
        self.searched = searched
        self.skipped = skipped


class ProfileError(OptimizeError, InputError):
    """Motor profiles cannot be built as asked (bad knot spacing, time span, shapes, limits that exclude the pose).

    Attributes:
        details: The offending values, by name, for debugging.
    """

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.details = details


class WeightSyntaxError(OptimizeError, InputError):
    """A weight (a number or a schedule) in the robot YAML or on the command line is malformed.

    Attributes:
        text: The offending text or YAML value.
    """

    def __init__(self, message: str, text: object = None) -> None:
        super().__init__(message if text is None else f"{message} (in {text!r})")
        self.text = text


class ShapingError(OptimizeError, InputError):
    """An input shaper or a vibration identification cannot be computed from the given data.

    Attributes:
        details: The offending values, by name.
    """

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.details = details


class TimeBudgetError(OptimizeError, NotAvailableError):
    """A plan's time budget ran out before there was any result to return (targets or the first simulation).

    It is a :class:`~retarget.errors.NotAvailableError`: no result is available within the budget (the planner
    node answers NOT_AVAILABLE, the CLI exits 2).

    Attributes:
        stage: where the budget ran out (``targets`` or ``optimization``).
        elapsed_s: wall time spent in that stage [s].
    """

    def __init__(self, message: str, stage: str = "", elapsed_s: float = 0.0) -> None:
        super().__init__(f"{message} (stage {stage}, {elapsed_s:.1f} s)" if stage else message)
        self.stage = stage
        self.elapsed_s = elapsed_s


class PlanCancelled(KeyboardInterrupt):
    """A request to stop planning that does not come from the terminal: the ROS action's cancel.

    A :class:`KeyboardInterrupt` on purpose: the optimizer treats it as Ctrl-C and returns the best parameters
    evaluated so far. Raised before there is any (the targets, the optimizer's first simulation) it ends the
    request.

    Attributes:
        stage: what was running when the cancel was noticed (a progress stage such as ``targets``).
    """

    def __init__(self, stage: str = "") -> None:
        super().__init__(f"cancelled during {stage}" if stage else "cancelled")
        self.stage = stage
