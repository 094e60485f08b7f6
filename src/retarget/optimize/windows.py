"""Receding-horizon windows: :func:`optimize_windows` minimizes the objective one time window after another."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import (
    Evaluation,
    Window,
    first_influence,
    run_time_ratio,
    steady_step_times,
    window_parameters,
)
from retarget.optimize.control import (
    EVALUATION_FORWARD_RUNS,
    Deadline,
    first_evaluation,
    guarded_progress,
    interruption_reason,
)
from retarget.optimize.errors import OptimizeError, TimeBudgetError
from retarget.optimize.lbfgs import optimize
from retarget.optimize.problem import PlanProblem
from retarget.optimize.result import OptimizationResult, WindowSummary
from retarget.optimize.solver_settings import WindowOptions
from retarget.sim.engine import EngineState


__all__ = ["optimize_windows"]


def optimize_windows(pp: PlanProblem, options: WindowOptions, x0: NDArray[np.float64] | None = None,
                     callback: Callable[[dict[str, float]], None] | None = None,
                     step_progress: Callable[[int, int], None] | None = None, deadline: Deadline | None = None,
                     reserve_evaluations: float = 0.0,
                     window_optimizer: Callable[..., OptimizationResult] = optimize,
                     reserve_s: float = 0.0) -> OptimizationResult:
    """Minimize ``J`` one time window after another (receding horizon), with L-BFGS-B in each (:func:`optimize`),
    projected steepest descent with ``options.method`` "descent", or Levenberg–Marquardt on the window's exact
    tangent-linear Jacobian with "gauss-newton".

    The motion is cut into spans of ``options.window`` seconds. For the span ``(t_a, t_b]`` the free parameters are
    those whose influence on the profiles begins in it (:func:`~retarget.optimize.adjoint.window_parameters`); the
    window simulates from the stored ``S_a`` (and ``S_{a−1}``) to ``t_e = t_b + options.window_tail`` and
    minimizes the tracking over ``t_a … t_e`` plus the regularizers, with the exact windowed adjoint gradient
    (:class:`~retarget.optimize.adjoint.Window`). Its end states start the next window. Each window is a short,
    well-conditioned problem (a few hundred parameters over ~1.5 s) where the whole motion's L-BFGS-B sees
    thousands of weakly coupled ones, and an evaluation costs the window's share of the motion. It is greedy: a
    window does not see the tracking beyond its tail.

    First steps: the first window measures ``J``'s curvature along steepest descent with the probe of
    :func:`optimize`; every later window starts from the latest curvature measured (the secant along the previous
    window's first step, :attr:`OptimizationResult.curvature`) and saves that simulation — a window gets only a
    few evaluations of its own within a 15-minute budget.

    The time budget (after keeping ``reserve_evaluations`` whole evaluations, about three forward runs each,
    ``reserve_s`` seconds, and one forward run for the final measurement) is shared out equally among the windows
    still to do; time a window does not use passes on. A whole-motion forward run is timed by the median time
    per step of the start run and the Levenberg–Marquardt windows' runs, and the reserve is scaled by how much
    longer the optimized profiles take to simulate: the median, over the windows done, of the forward run of a
    window's best point over its first (the same start state and steps;
    :attr:`~retarget.optimize.adjoint.Rollout.step_s`; ``forward_ratio`` in the window's summary). Rough profiles
    take more Newton iterations per step, and the checks after the plan (``reserve_s``: a run measured on the
    start's profiles) run them.
    (Shares weighted by the input's tracking error per window were measured worse on the drummer: the early
    windows' improvements carry over as less sway into the later ones; docs/optimize.md.)
    ``J`` over the whole motion is measured before and after; if the windows made it worse, the start ``x₀`` is
    returned (with a message).

    ``window_optimizer`` minimizes each window (default :func:`optimize`; same signature).

    Args and the result: as :func:`optimize` (``iterations`` and ``evaluations`` summed over the windows,
    ``history`` the whole-motion ``J`` before and after, ``windows`` one summary per window; ``callback`` gets
    ``window`` and ``windows`` too).

    Raises:
        TimeBudgetError: the deadline passed before the first (whole-motion) simulation completed.
    """
    _check_window_options(options)
    if deadline is None and options.time_budget is not None:
        deadline = Deadline.after(float(options.time_budget))
    problem = pp.problem
    n = problem.n_steps
    x = pp.fit.parameters.copy() if x0 is None else np.asarray(x0, dtype=float).copy()
    x_start = x.copy()
    initial, forward_s = _timed_start(pp, x, deadline, step_progress)
    run = _Windows(pp=pp, options=options, spans=_spans(n, problem.dt, options),
                   influence=first_influence(problem),
                   window_method=options.method if options.method in ("gauss-newton", "descent") else "lbfgs",
                   callback=callback, step_progress=step_progress, deadline=deadline,
                   reserve_evaluations=reserve_evaluations, reserve_s=reserve_s, window_optimizer=window_optimizer,
                   x=x, states=list(initial.rollout.states), fresh=n, step_s=[forward_s / n])
    for w in range(len(run.spans)):
        if not _window(run, w):
            break
    return _finish(run, x_start, initial)


def _check_window_options(options: WindowOptions) -> None:
    """Raise :class:`OptimizeError` unless the window, its tail and its overlap [s] are usable."""
    if options.window is None or not options.window > 0.0:
        raise OptimizeError(f"optimize_windows needs a positive window [s], not {options.window}")
    if not options.window_tail >= 0.0:
        raise OptimizeError(f"the window tail must be ≥ 0 s, not {options.window_tail}")
    if not 0.0 <= options.window_overlap < options.window:
        raise OptimizeError(f"the window overlap must be in [0, window) = [0, {options.window:g}) s, not "
                            f"{options.window_overlap}")


def _timed_start(pp: PlanProblem, x: NDArray[np.float64], deadline: Deadline | None,
                 step_progress: Callable[[int, int], None] | None) -> tuple[Evaluation, float]:
    """The whole-motion forward run at ``x`` and its duration [s], timed from the steps after the first, so that a
    first plan after an install or upgrade (numba compiling) does not shrink every window's share."""
    n = pp.problem.n_steps
    started = time.perf_counter()
    first_step: list[float] = []  # when the first step finished: it includes compiling the engine (tens of s)

    def timed_progress(k: int, total: int) -> None:
        if not first_step:
            first_step.append(time.perf_counter())
        if step_progress is not None:
            step_progress(k, total)

    initial = first_evaluation(pp, x, False, guarded_progress(deadline, timed_progress))
    ended = time.perf_counter()
    forward_s = ended - started
    if first_step and n > 1:
        forward_s = min(forward_s, (ended - first_step[0]) * n / (n - 1))
    return initial, forward_s


def _spans(n: int, dt: float, options: WindowOptions) -> list[tuple[int, int, int]]:
    """The windows' step spans ``(a, b, last)``: span ``(t_a, t_b]``, simulated to ``t_last``."""
    assert options.window is not None
    span = max(1, int(round(options.window / dt)))
    tail = int(round(options.window_tail / dt))
    stride = max(1, span - int(round(options.window_overlap / dt)))
    spans: list[tuple[int, int, int]] = []
    a = 0
    while not spans or spans[-1][1] < n:
        b = min(a + span, n)
        spans.append((a, b, min(n, b + tail)))
        a += stride
    return spans


@dataclass(eq=False)
class _Windows:
    """What :func:`optimize_windows` carries from one window to the next, after its arguments.

    Attributes:
        spans: the windows' step spans ``(a, b, last)`` (:func:`_spans`).
        influence: per parameter, the first grid index it acts on (:func:`first_influence`).
        window_method: the method each window runs.
        x: the parameters, each window's free ones replaced by its result.
        states: the whole motion's states; ``states[: fresh + 1]`` were simulated with the current ``x``.
        step_s: seconds per forward step: the start run's, then each Levenberg–Marquardt window's latest forward
            run (its evaluations are forward runs). The reserve uses their median, so one slow run does not move
            every share.
        ratios: how much longer the optimized profiles take to simulate: each window's best point's forward run
            over the window's first (same start state, same steps); the reserve scales by their median.
        curvature: ``J``'s curvature along steepest descent, handed from window to window.
        tangent_s: the latest Levenberg–Marquardt tangent pass's wall time [s], likewise.
    """

    pp: PlanProblem
    options: WindowOptions
    spans: list[tuple[int, int, int]]
    influence: NDArray[np.int64]
    window_method: str
    callback: Callable[[dict[str, float]], None] | None
    step_progress: Callable[[int, int], None] | None
    deadline: Deadline | None
    reserve_evaluations: float
    reserve_s: float
    window_optimizer: Callable[..., OptimizationResult]
    x: NDArray[np.float64]
    states: list[EngineState]
    fresh: int
    step_s: list[float]
    ratios: list[float] = field(default_factory=list)
    iterations: int = 0
    evaluations: int = 0
    values: int = 0
    failed: int = 0
    restarts: int = 0
    interruption: str = ""
    budget_limited: bool = False
    evaluation_s: float = 0.0
    first_step: float = 1.0
    messages: list[str] = field(default_factory=list)
    summaries: list[WindowSummary] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    curvature: float | None = None
    tangent_s: float | None = None


def _window(run: _Windows, w: int) -> bool:
    """Optimize window ``w`` and record it in ``run``; False when it and the later windows keep the start."""
    pp, options, spans = run.pp, run.options, run.spans
    problem = pp.problem
    dt = problem.dt
    a, b, last = spans[w]
    # The parameters that first act in (t_a, t_b]; those acting only after the grid's end (a motion longer than the
    # simulated duration, the spline's last knots) change nothing the objective sees and keep their start.
    free = window_parameters(problem, a, b, run.influence)
    summary: WindowSummary = {"window": w + 1, "start_s": a * dt, "end_s": b * dt, "parameters": int(free.size)}
    run.summaries.append(summary)
    if free.size == 0:
        summary["stopped"] = "no parameters"
        return True
    if a > run.fresh:
        # A skipped window left no states simulated with the earlier windows' changes this far.
        summary["stopped"] = "skipped: no simulated start"
        run.messages.append(f"window {w + 1} of {len(spans)} and the later ones keep the start: the window before "
                            "was skipped and left no start state for them")
        return False
    window_deadline: Deadline | None = None
    if run.deadline is not None:
        share = _share(run, w)
        if share is None:
            run.budget_limited = True
            summary["stopped"] = "skipped: no time left"
            run.messages.append(f"time budget reached before window {w + 1} of {len(spans)}: it and the later "
                                "ones keep the start")
            return False
        summary["share_s"] = share
        window_deadline = Deadline.after(share)
    window = Window(a, last, run.states[a], run.states[a - 1] if a > 0 else None, free, run.x.copy())
    sub = replace(pp, problem=replace(problem, window=window), bounds=[pp.bounds[i] for i in free], ensemble=None)

    def on_iteration(info: dict[str, float], w: int = w) -> None:
        if run.callback is not None:
            run.callback({**info, "iteration": run.iterations + info["iteration"], "window": w + 1,
                          "windows": len(spans)})

    window_started = time.perf_counter()
    try:
        res = run.window_optimizer(sub, replace(options, method=run.window_method), x0=run.x[free],
                                   callback=on_iteration, step_progress=run.step_progress, deadline=window_deadline,
                                   curvature=run.curvature, tangent_s=run.tangent_s)
    except TimeBudgetError:
        # Its share did not cover one simulation (a hard stretch of the motion): its parameters stay, and its
        # time passes on to the later windows (while the stored states still reach their starts).
        run.budget_limited = True
        summary["stopped"] = "skipped: no time for its first simulation"
        run.skipped.append(w + 1)
        return True
    except KeyboardInterrupt as exc:
        # Before the window's first simulation finished (the optimizer returns its best point after that):
        # the earlier windows' results stand.
        run.interruption = interruption_reason(exc)
        summary["stopped"] = "interrupted before its first simulation"
        run.messages.append(f"interrupted ({run.interruption}) in window {w + 1} of {len(spans)} before its first "
                            "simulation finished: it and the later windows keep the start")
        return False
    _record(run, w, free, res, summary, window_started)
    if res.interrupted:
        run.interruption = res.interruption
        run.messages.append(f"interrupted ({run.interruption}) in window {w + 1} of {len(spans)}: the later windows "
                            "keep the start")
        return False
    return True


def _share(run: _Windows, w: int) -> float | None:
    """Window ``w``'s share of the time left [s], after the reserve; None when no time is left."""
    assert run.deadline is not None
    forward_s = float(np.median(run.step_s)) * run.pp.problem.n_steps
    scale = float(np.median(run.ratios)) if run.ratios else 1.0
    left = (run.deadline.remaining()
            - scale * (forward_s * (1.0 + EVALUATION_FORWARD_RUNS * run.reserve_evaluations) + run.reserve_s))
    if left <= 0.0:
        return None
    return left / (len(run.spans) - w)


def _record(run: _Windows, w: int, free: NDArray[np.int64], res: OptimizationResult, summary: WindowSummary,
            window_started: float) -> None:
    """Take window ``w``'s result ``res`` into ``run`` and its ``summary``."""
    a, _, last = run.spans[w]
    run.x[free] = res.x
    run.iterations += res.iterations
    run.evaluations += res.evaluations
    run.values += res.value_evaluations
    run.failed += res.failed_simulations
    run.restarts += res.restarts
    run.evaluation_s, run.first_step = res.evaluation_s, res.first_step
    run.states[a : last + 1] = res.best.rollout.states
    run.fresh = last
    summary.update(iterations=res.iterations, evaluations=res.evaluations,
                   **({"value_evaluations": res.value_evaluations} if res.value_evaluations else {}),
                   objective_initial=res.objective_initial,
                   objective_final=res.objective_final, wall_s=time.perf_counter() - window_started,
                   first_step_rad=res.first_step,
                   curvature_from="--first-step" if run.options.first_step is not None
                   else "previous window" if run.curvature is not None else "probe",
                   stopped="interrupted" if res.interrupted else "time share" if res.budget_limited
                   else "converged or iteration cap")
    if run.window_method == "gauss-newton" and res.evaluation_s > 0.0:
        run.step_s.append(res.evaluation_s / (last - a))
    ratio = run_time_ratio(steady_step_times(res.initial.rollout), 0, res.best.rollout)
    if ratio is not None:
        run.ratios.append(ratio)
        summary["forward_ratio"] = ratio
    run.curvature = res.curvature or run.curvature
    run.tangent_s = res.tangent_s or run.tangent_s


def _finish(run: _Windows, x_start: NDArray[np.float64], initial: Evaluation) -> OptimizationResult:
    """The whole motion's ``J`` at the windows' parameters (or the start, if they raised it) and the result."""
    options, spans, messages = run.options, run.spans, run.messages
    x, interruption = run.x, run.interruption
    try:
        final = run.pp.evaluate(x, gradient=False, progress=run.step_progress)
    except KeyboardInterrupt as exc:
        interruption = interruption_reason(exc)
        messages.append(f"interrupted ({interruption}) in the final simulation: returning the start")
        x, final = x_start, initial
    if final.value > initial.value:
        messages.append(f"the windows raised J over the whole motion ({initial.value:.4g} → {final.value:.4g}): "
                        "returning the start")
        x, final = x_start, initial
    skipped = run.skipped
    if skipped:
        messages.append(f"window{'s' if len(skipped) > 1 else ''} {', '.join(map(str, skipped))} of {len(spans)} "
                        "kept the start: their share of the time budget did not cover one simulation")
    cut = sum(1 for sm in run.summaries if sm.get("stopped") == "time share")
    if cut:
        messages.append(f"{cut} of {len(spans)} windows stopped at their share of the time budget")
    overlap = f", {options.window_overlap:g} s overlap" if options.window_overlap else ""
    message = "; ".join([f"{len(spans)} windows of {options.window:g} s (+{options.window_tail:g} s tail{overlap}), "
                         f"{run.iterations} iterations", *messages])
    return OptimizationResult(x=x, objective_initial=initial.value, objective_final=final.value,
                              iterations=run.iterations, evaluations=run.evaluations,
                              history=[initial.value, final.value], interruption=interruption, message=message,
                              best=final, initial=initial, budget_limited=run.budget_limited or cut > 0,
                              evaluation_s=run.evaluation_s, failed_simulations=run.failed, restarts=run.restarts,
                              method=f"{run.window_method}-windows", first_step=run.first_step,
                              windows=run.summaries, value_evaluations=run.values)
