"""A virtual clock for the time budget's tests: the optimizer's modules read it in place of the machine's, and it
advances by a fixed cost per unit of work, so a budget's decisions (stop before an evaluation, keep the
verification's reserve, start after the warm-up) do not depend on the machine's load."""
from __future__ import annotations

import importlib
import time as _time
from typing import Any

import pytest

from retarget.optimize.control import EVALUATION_FORWARD_RUNS
from retarget.optimize.problem import PlanProblem

#: The optimizer's and the planning pipeline's modules that read the clock (each imports ``time``).
MODULES = ("retarget.optimize.lbfgs", "retarget.optimize.gauss_newton", "retarget.optimize.windows",
           "retarget.optimize.control", "retarget.optimize.problem", "retarget.optimize.adjoint",
           "retarget.optimize.settle", "retarget.planning.run", "retarget.planning.verification",
           "retarget.planning.commands")

#: Virtual seconds of one evaluation with its adjoint; a forward run alone costs 1 / EVALUATION_FORWARD_RUNS of it.
EVALUATION_S = 1.0

#: Virtual seconds of one tangent-linear pass (Levenberg–Marquardt's exact sensitivities).
TANGENT_S = 2.0


class VirtualClock:
    """Stands in for the ``time`` module in :data:`MODULES`: ``perf_counter`` returns the virtual time, ``sleep``
    advances it, :meth:`PlanProblem.evaluate` and the tangent pass advance it by ``evaluation_s`` (a forward run: a
    third of it) and ``tangent_s``, and the checks' runs (:mod:`retarget.planning.verification`'s) by
    ``forward_step_s`` per step. With ``evaluation_s = tangent_s = 0`` the computation itself takes no time and a
    test paces it step by step (:meth:`advance` in a step progress callback: the per-step times the budget
    measures)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, forward_step_s: float = 0.0,
                 evaluation_s: float = EVALUATION_S, tangent_s: float = TANGENT_S) -> None:
        self.now = 0.0
        self.evaluations = 0
        for name in MODULES:
            monkeypatch.setattr(importlib.import_module(name), "time", self)
        evaluate = PlanProblem.evaluate

        def charged_evaluate(pp: PlanProblem, x: Any, gradient: bool = True, progress: Any = None) -> Any:
            result = evaluate(pp, x, gradient=gradient, progress=progress)
            self.evaluations += 1
            self.advance(evaluation_s if gradient else evaluation_s / EVALUATION_FORWARD_RUNS)
            return result

        monkeypatch.setattr(PlanProblem, "evaluate", charged_evaluate)
        gauss_newton = importlib.import_module("retarget.optimize.gauss_newton")
        normal_equations = gauss_newton.ensemble_gauss_newton

        def charged_normal_equations(*args: Any, **kwargs: Any) -> Any:
            result = normal_equations(*args, **kwargs)
            self.advance(tangent_s)
            return result

        monkeypatch.setattr(gauss_newton, "ensemble_gauss_newton", charged_normal_equations)
        verification = importlib.import_module("retarget.planning.verification")
        rollout = verification.rollout

        def charged_rollout(engine: Any, start: Any, motors: Any, dt: float, n_steps: int, *args: Any,
                            **kwargs: Any) -> Any:
            result = rollout(engine, start, motors, dt, n_steps, *args, **kwargs)
            self.advance(forward_step_s * n_steps)
            return result

        monkeypatch.setattr(verification, "rollout", charged_rollout)

    def advance(self, seconds: float) -> None:
        self.now += float(seconds)

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return _time.monotonic()  # the cancel poll's throttle, not the budget's clock

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def process_time(self) -> float:
        return _time.process_time()
