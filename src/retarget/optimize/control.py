"""Run control of the optimizers: the time budget's deadline and its unit of work, what interrupted a run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import Evaluation, evaluate
from retarget.optimize.errors import PlanCancelled, TimeBudgetError

if TYPE_CHECKING:
    from retarget.optimize.adjoint import AdjointProblem
    from retarget.optimize.problem import PlanProblem

__all__ = ["EVALUATION_FORWARD_RUNS", "BudgetExhausted", "deadline_progress", "first_evaluation", "interruption_reason"]

#: What one optimizer evaluation (forward and adjoint) costs in forward runs, the unit of the time budget's reserves.
EVALUATION_FORWARD_RUNS = 3.0


class BudgetExhausted(Exception):
    """The optimizer's deadline passed (or the next evaluation would pass it); its callers catch it and return what
    they have."""


def interruption_reason(exc: BaseException) -> str:
    """What interrupted a run, for its message: the ROS action's cancel or Ctrl-C."""
    return "cancel requested" if isinstance(exc, PlanCancelled) else "Ctrl-C"


def deadline_progress(deadline: float | None, step_progress: Callable[[int, int], None] | None
                       ) -> Callable[[int, int], None] | None:
    """A per-step progress callback that raises :class:`BudgetExhausted` once ``deadline`` has passed (and reports
    to ``step_progress``); ``step_progress`` itself without a deadline."""
    if deadline is None:
        return step_progress

    def guarded(k: int, n: int) -> None:
        if time.perf_counter() > deadline:
            raise BudgetExhausted
        if step_progress is not None:
            step_progress(k, n)

    return guarded


def first_evaluation(pp: PlanProblem | AdjointProblem, x: NDArray[np.float64], gradient: bool,
                      progress: Callable[[int, int], None] | None) -> Evaluation:
    """The evaluation at the start ``x`` (with :func:`deadline_progress`'s ``progress``): of the plan's objective
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
