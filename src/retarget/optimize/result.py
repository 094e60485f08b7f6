"""What an optimizer returns (:class:`OptimizationResult`) and the state it keeps while searching
(:class:`SearchState`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import (
    Evaluation,
)


__all__ = ["OptimizationResult", "SearchState", "WindowSummary"]


class WindowSummary(TypedDict, total=False):
    """One window of :func:`~retarget.optimize.windows.optimize_windows` (:attr:`OptimizationResult.windows`):
    its number, span [s] and free parameters always; the rest once it ran (or why it did not, ``stopped``)."""

    window: int
    start_s: float
    end_s: float
    parameters: int
    stopped: str
    share_s: float
    iterations: int
    evaluations: int
    value_evaluations: int
    objective_initial: float
    objective_final: float
    wall_s: float
    first_step_rad: float
    curvature_from: str
    forward_ratio: float


@dataclass(frozen=True, eq=False)
class OptimizationResult:
    """The outcome of :func:`optimize`.

    Attributes:
        x: best parameters found.
        objective_initial, objective_final: ``J(x₀)``, ``J(x)``.
        iterations: L-BFGS-B iterations completed.
        evaluations: simulations with gradient run.
        value_evaluations: forward runs without gradient (the ``descent`` method's line search).
        history: objective after each iteration.
        interruption: what stopped the run early — ``"Ctrl-C"`` (a KeyboardInterrupt) or ``"cancel requested"``
            (:class:`PlanCancelled`); ``""`` when nothing did. ``x`` is then the best point evaluated
            (:attr:`interrupted`).
        message: the optimizer's stop reason.
        best: the :class:`Evaluation` at ``x``.
        initial: the :class:`Evaluation` at ``x₀`` (with ``x₀`` the fit, this is the naive playback).
        budget_limited: stopped because the time budget ran out; ``x`` is the best point evaluated.
        evaluation_s: wall time of the latest complete evaluation (forward + adjoint, or forward alone for
            Gauss–Newton) [s].
        failed_simulations: trial points the model could not simulate (the line search backed off).
        restarts: L-BFGS-B restarts after a stalled line search.
        method: the method that ran.
        first_step: length of L-BFGS-B's first trial step [rad] (see
            :attr:`~retarget.planning.options.PlanOptions.first_step`).
        windows: with :func:`optimize_windows`, per window: ``window``, ``start_s``, ``end_s``, ``parameters``,
            its share of the time budget ``share_s`` (with a budget), ``iterations``, ``evaluations``, its
            ``objective_initial`` / ``objective_final``, ``wall_s``, its ``first_step_rad``, whether that step came
            from the previous window's curvature (``curvature_from``) and why it ``stopped``; None otherwise.
        curvature: ``J``'s curvature along the first trial step [1/rad²·J units], the secant
            ``(∇J(x₁) − ∇J(x₀))·s / |s|²`` of the first point evaluated after ``x₀`` (the probe, or the first
            trial point); None if there was none or it was not positive.
        tangent_s: wall time of the latest Levenberg–Marquardt tangent-linear pass [s] (windows hand it on as the
            next window's estimate); None without one.
    """

    x: NDArray[np.float64]
    objective_initial: float
    objective_final: float
    iterations: int
    evaluations: int
    history: list[float]
    interruption: str
    message: str
    best: Evaluation
    initial: Evaluation
    budget_limited: bool = False
    evaluation_s: float = 0.0
    failed_simulations: int = 0
    restarts: int = 0
    method: str = "lbfgs"
    first_step: float = 1.0
    windows: list[WindowSummary] | None = None
    curvature: float | None = None
    value_evaluations: int = 0
    tangent_s: float | None = None

    @property
    def interrupted(self) -> bool:
        """Stopped by Ctrl-C or a cancel (:attr:`interruption`)."""
        return bool(self.interruption)


@dataclass(eq=False)
class SearchState:
    """What an optimizer keeps while it searches (mutated in place by :func:`~retarget.optimize.lbfgs.optimize` and
    :func:`~retarget.optimize.gauss_newton.levenberg_marquardt`).

    Attributes:
        best, best_x: the lowest evaluation so far and its parameters.
        last, last_x: the latest evaluation and its parameters (L-BFGS-B asks for the gradient at the point it
            just evaluated).
        evaluations: complete evaluations (with gradient).
        values: forward runs without gradient (the ``descent`` method's line search).
        duration: wall time of the latest complete evaluation [s] (the time budget's unit).
        iterations: accepted iterations.
        failed: trial points the model could not simulate.
        secant: ``J``'s curvature along the first step after ``x₀`` (None: not positive or not measured).
        secant_measured: whether ``secant`` was measured.
        tangent_s: wall time of the latest (or, before one ran, the expected) tangent-linear pass [s]; None:
            unknown.
    """

    best: Evaluation
    best_x: NDArray[np.float64]
    last: Evaluation
    last_x: NDArray[np.float64]
    evaluations: int = 1
    duration: float = 0.0
    iterations: int = 0
    failed: int = 0
    secant: float | None = None
    secant_measured: bool = False
    values: int = 0
    tangent_s: float | None = None
