"""The planning pipeline's progress stages and its cancel check: the names :func:`~retarget.planning.run.plan`
reports its stages by (the Retarget action's feedback ``stage``), and the progress callback that turns a cancel
request into :class:`~retarget.optimize.errors.PlanCancelled`."""

from __future__ import annotations

import time
from collections.abc import Callable

from retarget.optimize.errors import PlanCancelled

__all__ = ["CANCEL_POLL_S", "FEEDBACK_STAGES", "TRAINING_STAGE", "CancelCheck"]


#: :func:`~retarget.planning.run.run_plan`'s progress stages as :func:`~retarget.planning.run.plan` reports them
#: (the Retarget action's feedback ``stage``).
FEEDBACK_STAGES = {"targets": "targets", "naive playback": "naive playback",
                   "evaluation (forward + adjoint)": "optimizing", "zv": "baselines", "zvd": "baselines",
                   "verifying": "verifying"}

#: How often :func:`~retarget.planning.run.plan` polls its ``cancelled`` callback at most [s].
CANCEL_POLL_S = 0.05


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
