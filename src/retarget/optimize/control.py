"""Run control of the optimizers: the time budget's deadline and its unit of work, what interrupted a run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import Evaluation, evaluate
from retarget.optimize.errors import PlanCancelled, TimeBudgetError

if TYPE_CHECKING:
    from retarget.optimize.adjoint import AdjointProblem
    from retarget.optimize.problem import PlanProblem

__all__ = ["EVALUATION_FORWARD_RUNS", "BudgetExhausted", "Deadline", "first_evaluation", "guarded_progress",
           "interruption_reason"]

#: What one optimizer evaluation (forward and adjoint) costs in forward runs, the unit of the time budget's reserves.
EVALUATION_FORWARD_RUNS = 3.0


class BudgetExhausted(Exception):
    """The optimizer's deadline passed (or the next evaluation would pass it); its callers catch it and return what
    they have."""


def interruption_reason(exc: BaseException) -> str:
    """What interrupted a run, for its message: the ROS action's cancel or Ctrl-C."""
    return "cancel requested" if isinstance(exc, PlanCancelled) else "Ctrl-C"


@dataclass(frozen=True)
class Deadline:
    """An instant to stop by, on the ``time.perf_counter()`` clock, which every method reads when it is called (a
    test's virtual clock, patched in for this module's ``time``, stands in for it).

    Attributes:
        at: the instant [s], a ``time.perf_counter()`` value.
    """

    at: float

    @staticmethod
    def after(seconds: float) -> Deadline:
        """The deadline ``seconds`` [s] from now."""
        return Deadline(time.perf_counter() + seconds)

    def passed(self) -> bool:
        """Whether the deadline has passed."""
        return time.perf_counter() > self.at

    def passed_after(self, *seconds: float) -> bool:
        """Whether work of ``seconds`` (summed in order, from now) would end past the deadline."""
        end = time.perf_counter()
        for s in seconds:
            end = end + s
        return end > self.at

    def remaining(self) -> float:
        """Seconds left until the deadline [s] (negative once it has passed)."""
        return self.at - time.perf_counter()

    def earlier(self, seconds: float) -> Deadline:
        """The deadline ``seconds`` [s] before this one (a reserve kept for the work after)."""
        return Deadline(self.at - seconds)

    def guard(self, step_progress: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
        """A per-step progress callback that raises :class:`BudgetExhausted` once the deadline has passed, and
        reports to ``step_progress`` before then."""

        def guarded(k: int, n: int) -> None:
            if self.passed():
                raise BudgetExhausted
            if step_progress is not None:
                step_progress(k, n)

        return guarded


def guarded_progress(deadline: Deadline | None, step_progress: Callable[[int, int], None] | None
                     ) -> Callable[[int, int], None] | None:
    """``deadline``'s :meth:`Deadline.guard` of ``step_progress``; ``step_progress`` itself without a deadline."""
    return step_progress if deadline is None else deadline.guard(step_progress)


def first_evaluation(pp: PlanProblem | AdjointProblem, x: NDArray[np.float64], gradient: bool,
                      progress: Callable[[int, int], None] | None) -> Evaluation:
    """The evaluation at the start ``x`` (with :func:`guarded_progress`'s ``progress``): of the plan's objective
    (robust when it has an ensemble) for a :class:`PlanProblem`, of the one model for an ``AdjointProblem``.

    Raises:
        TimeBudgetError: the deadline passed before it completed.
    """
    started = time.perf_counter()
    try:
        from retarget.optimize.problem import PlanProblem

        if isinstance(pp, PlanProblem):
            return pp.evaluate(x, gradient=gradient, progress=progress)
        return evaluate(pp, x, gradient=gradient, progress=progress)
    except BudgetExhausted:
        raise TimeBudgetError("the time budget ran out during the plan's first simulation: "
                              "nothing to return; give a larger budget, a coarser dt or a shorter motion",
                              stage="optimization", elapsed_s=time.perf_counter() - started) from None
