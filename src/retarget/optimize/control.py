"""Run control shared by the optimizers and the orchestration: the time budget, cancel requests, progress stages."""

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

__all__ = ["CANCEL_POLL_S", "FEEDBACK_STAGES", "TRAINING_STAGE", "BudgetExhausted", "CancelCheck", "deadline_progress",
           "first_evaluation", "interruption_reason"]


class BudgetExhausted(Exception):
    """The optimizer's deadline passed (or the next evaluation would pass it); caught inside the package."""


#: :func:`run_plan`'s progress stages as :func:`plan` reports them (the Retarget action's feedback ``stage``).
FEEDBACK_STAGES = {"targets": "targets", "naive playback": "naive playback",
                   "evaluation (forward + adjoint)": "optimizing", "zv": "baselines", "zvd": "baselines",
                   "verifying": "verifying"}

#: How often :func:`plan` polls its ``cancelled`` callback at most [s].
CANCEL_POLL_S = 0.05


def interruption_reason(exc: BaseException) -> str:
    """What interrupted a run, for its message: the ROS action's cancel or Ctrl-C."""
    return "cancel requested" if isinstance(exc, PlanCancelled) else "Ctrl-C"


class CancelCheck:
    """A ``progress(stage, done, total)`` callback that raises :class:`PlanCancelled` once ``cancelled()`` is true.

    It raises only once: the optimizer returns its best iterate on the first (as on Ctrl-C), and the baselines and
    metrics after it then run to the end, so the cancelled request still answers with everything it has.
    ``cancelled`` is polled at most every ``interval`` seconds (default :data:`CANCEL_POLL_S`; the progress comes
    once per simulation step).
    """

    def __init__(self, cancelled: Callable[[], bool], interval: float | None = None) -> None:
        self.cancelled = cancelled
        self.interval = CANCEL_POLL_S if interval is None else interval
        self.fired = False
        self._next = 0.0

    def __call__(self, stage: str, done: int = 0, total: int = 0) -> None:
        if self.fired:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        if self.cancelled():
            self.fired = True
            raise PlanCancelled(stage)


#: The feedback stage of an in-process training simulation (``plan`` with ``allow_training``).
TRAINING_STAGE = "training reduced model"


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
