"""The optimizer driver: :func:`optimize` minimizes the plan's objective with exact adjoint gradients — L-BFGS-B,
projected steepest descent (``descent``), or Levenberg–Marquardt
(:func:`retarget.optimize.gauss_newton.levenberg_marquardt`) — within the position bounds, the time budget, Ctrl-C
and cancel requests."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import Evaluation, run_time_ratio, steady_step_times
from retarget.optimize.control import (
    EVALUATION_FORWARD_RUNS,
    BudgetExhausted,
    Deadline,
    first_evaluation,
    guarded_progress,
    interruption_reason,
)
from retarget.optimize.errors import OptimizeError
from retarget.optimize.gauss_newton import levenberg_marquardt
from retarget.optimize.problem import PlanProblem
from retarget.optimize.result import OptimizationResult, SearchState
from retarget.optimize.solver_settings import Method, SolverOptions

__all__ = ["DESCENT_ARMIJO", "DESCENT_TRIALS", "FIRST_STEP_PROBE", "choose_method", "optimize"]


#: Length [rad] of the probe step that measures the objective's curvature for the first L-BFGS-B (and descent) step.
FIRST_STEP_PROBE = 1e-3

#: Sufficient decrease a ``descent`` trial point must reach, as a fraction of the first-order prediction ``∇J·s``
#: (the Armijo factor of L-BFGS-B's own line search, scipy's ``ftol`` of ``dcsrch``).
DESCENT_ARMIJO = 1e-3

#: Trial points one ``descent`` step tries (the first, then backtracking) before it keeps its start.
DESCENT_TRIALS = 8


def optimize(pp: PlanProblem, options: SolverOptions, x0: NDArray[np.float64] | None = None,
             callback: Callable[[dict[str, float]], None] | None = None,
             step_progress: Callable[[int, int], None] | None = None, deadline: Deadline | None = None,
             reserve_evaluations: float = 0.0, curvature: float | None = None,
             tangent_s: float | None = None, reserve_s: float = 0.0) -> OptimizationResult:
    """Minimize ``J`` from ``x₀`` (default: the fit of the input) by Levenberg–Marquardt or L-BFGS-B.

    ``options.method`` picks the method (:class:`~retarget.planning.options.PlanOptions`); both respect the position
    bounds, the time budget, Ctrl-C and ``max_iterations`` alike.

    The objective is scaled by ``1/J(x₀)`` inside the solver so that ``relative_tolerance`` is relative to the
    starting value (L-BFGS-B's own ``ftol`` test is absolute below 1).

    Time budget: an evaluation is not started when one more, plus ``reserve_evaluations`` of them (time kept
    for the caller's baselines), at the duration of the latest complete evaluation (the first one, which may
    include compiling the engine, counts only until a second completes), would end after ``deadline``; one still
    running at the deadline is abandoned. Either way the best point evaluated so far is returned with
    ``budget_limited``.

    Args:
        pp: the planning problem.
        options: ``max_iterations``, ``relative_tolerance``; ``time_budget`` [s] when ``deadline`` is None.
        x0: starting parameters.
        callback: called after each iteration with ``{iteration, objective, gradient_norm}``; a KeyboardInterrupt
            raised there (or anywhere during the run) stops the optimization and returns the best point so far.
        step_progress: per-simulation ``(done, total)`` steps (forward + backward).
        deadline: when to stop by; None: ``options.time_budget`` from now (or no limit).
        reserve_evaluations: evaluations' worth of time to leave before the deadline.
        reserve_s: seconds to leave before the deadline besides (measured work of the caller's).
        curvature: a known curvature of ``J`` along steepest descent (e.g. the previous window's
            :attr:`OptimizationResult.curvature`): with ``options.first_step`` None the first step is the minimizer
            of that quadratic without the probe simulation.
        tangent_s: the expected wall time of a Levenberg–Marquardt tangent-linear pass [s] (e.g. the previous
            window's :attr:`OptimizationResult.tangent_s`), which the time budget checks before starting one; None:
            guessed from the first evaluation.

    Raises:
        TimeBudgetError: the deadline passed before the first evaluation (at ``x₀``) completed.
    """
    if options.first_step is not None and not options.first_step > 0.0:
        raise OptimizeError(f"the first step must be a positive length [rad], not {options.first_step}")
    if deadline is None and options.time_budget is not None:
        deadline = Deadline.after(float(options.time_budget))
    progress = guarded_progress(deadline, step_progress)
    x_start = pp.fit.parameters.copy() if x0 is None else np.asarray(x0, dtype=float).copy()
    method = choose_method(pp, options)
    started = time.perf_counter()
    # Levenberg–Marquardt takes its gradient from the tangent pass: its start needs the forward run only (an
    # adjoint costs about three forward runs on the drummer's windows), and its trials are forward runs too.
    first = first_evaluation(pp, x_start, method != "gauss-newton", progress)
    state = SearchState(best=first, best_x=x_start, last=first, last_x=x_start,
                        duration=time.perf_counter() - started, tangent_s=tangent_s)
    lower, upper = pp.bound_arrays()
    search = _Search(pp=pp, options=options, state=state, first=first, x_start=x_start, history=[first.value],
                     callback=callback, progress=progress, deadline=deadline,
                     reserve_evaluations=reserve_evaluations, reserve_s=reserve_s, curvature=curvature,
                     lower=lower, upper=upper)
    run = _run_method(search, method, step_progress)
    return OptimizationResult(x=state.best_x, objective_initial=first.value, objective_final=state.best.value,
                              iterations=state.iterations, evaluations=state.evaluations, history=search.history,
                              interruption=run.interruption, message=run.message, best=state.best, initial=first,
                              budget_limited=run.budget_limited, evaluation_s=state.duration,
                              failed_simulations=state.failed, restarts=run.restarts, method=method,
                              first_step=run.length, curvature=state.secant, value_evaluations=state.values,
                              tangent_s=state.tangent_s)


@dataclass(eq=False)
class _Search:
    """One :func:`optimize` run's evaluations of ``J``, shared by its methods: the time budget, the best and latest
    points (in ``state``), the objective history and the per-iteration callback.

    Attributes:
        first: the evaluation at ``x_start``; ``J`` is scaled by ``1/J(x₀)`` inside L-BFGS-B (:attr:`scale`).
        lower, upper: the position bounds as arrays, ``(n_parameters,)`` [rad].
        per_evaluation: the reserve's unit — evaluations with the adjoint, or forward runs for Levenberg–Marquardt
            (whose latest evaluation is a forward run).
        first_steps: the start's per-step simulation times (to scale ``reserve_s`` to the best point's profiles).
    """

    pp: PlanProblem
    options: SolverOptions
    state: SearchState
    first: Evaluation
    x_start: NDArray[np.float64]
    history: list[float]
    callback: Callable[[dict[str, float]], None] | None
    progress: Callable[[int, int], None] | None
    deadline: Deadline | None
    reserve_evaluations: float
    reserve_s: float
    curvature: float | None
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    scale: float = field(init=False)
    per_evaluation: float = field(init=False)
    first_steps: NDArray[np.float64] = field(init=False)

    def __post_init__(self) -> None:
        self.scale = 1.0 / self.first.value if self.first.value > 0 else 1.0
        self.per_evaluation = EVALUATION_FORWARD_RUNS if self.first.gradient is None else 1.0
        self.first_steps = steady_step_times(self.first.rollout)

    def affordable(self, seconds: float) -> None:
        """Stop (``BudgetExhausted``) before work of ``seconds`` that, with the reserve, would end past the deadline.
        ``reserve_s`` (runs measured on the start's profiles) scales by how much longer the best point's profiles
        take to simulate than the start's (rough profiles take more Newton iterations per step)."""
        if self.deadline is None:
            return
        state = self.state
        ratio = run_time_ratio(self.first_steps, 0, state.best.rollout) if self.reserve_s > 0.0 else None
        if self.deadline.passed_after(seconds, state.duration * self.per_evaluation * self.reserve_evaluations,
                                      self.reserve_s * (1.0 if ratio is None else ratio)):
            raise BudgetExhausted

    def simulated(self, x: NDArray[np.float64], gradient: bool) -> Evaluation | None:
        """``J`` (and with ``gradient`` its gradient) at ``x``, recorded as maybe the best point; None (counted as
        failed) when the model cannot simulate ``x``. The time budget counts it as a full evaluation."""
        from retarget.sim.errors import SimulationError

        state = self.state
        self.affordable(state.duration)
        try:
            ev = self.pp.evaluate(x, gradient=gradient, progress=self.progress)
        except SimulationError:
            state.failed += 1
            return None
        if ev.value < state.best.value:
            state.best, state.best_x = ev, x.copy()
        return ev

    def evaluated(self, x: NDArray[np.float64]) -> Evaluation | None:
        """:meth:`simulated` with the gradient, cached for the latest point and recorded as the latest."""
        state = self.state
        if np.array_equal(x, state.last_x):
            return state.last
        t0 = time.perf_counter()
        ev = self.simulated(x, True)
        if ev is None:
            return None
        state.evaluations += 1
        state.duration = time.perf_counter() - t0
        if not state.secant_measured and ev.gradient is not None and self.first.gradient is not None:
            # The first point after x₀ (the probe or the first trial): J's curvature along that step.
            s = x - self.x_start
            c = float((ev.gradient - self.first.gradient) @ s) / float(s @ s)
            state.secant = c if c > 0.0 and math.isfinite(c) else None
            state.secant_measured = True
        state.last, state.last_x = ev, x.copy()
        return ev

    def valued(self, x: NDArray[np.float64]) -> Evaluation | None:
        """:meth:`simulated` without the gradient (a forward run; the ``descent`` line search)."""
        ev = self.simulated(x, False)
        if ev is not None:
            self.state.values += 1
        return ev

    def fun(self, x: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        """The scaled ``J`` and its gradient at ``x``, as L-BFGS-B asks for them."""
        ev = self.evaluated(x)
        if ev is None:
            # A trial point too violent to simulate: a large value makes the line search back off.
            return 10.0 * max(1.0, self.state.best.value * self.scale), self.state.last.gradient * self.scale
        assert ev.gradient is not None
        return ev.value * self.scale, ev.gradient * self.scale

    def on_iteration(self, xk: NDArray[np.float64]) -> None:
        """Count an L-BFGS-B iteration ending at ``xk``, record its objective and report it to the callback."""
        state = self.state
        state.iterations += 1
        ev = state.last if np.array_equal(xk, state.last_x) else state.best
        self.history.append(ev.value)
        if self.callback is not None:
            self.callback({"iteration": state.iterations, "objective": float(ev.value),
                           "gradient_norm": float(np.linalg.norm(ev.gradient))})

    def projected_gradient_norm(self, x: NDArray[np.float64], g: NDArray[np.float64]) -> float:
        """``|x − clip(x − g)|``: the gradient's norm within the bounds."""
        return float(np.linalg.norm(x - np.clip(x - g, self.lower, self.upper)))

    def first_step(self) -> float:
        """The first trial step's length [rad] (``options.first_step``; None: from ``curvature`` or a probe)."""
        if self.options.first_step is not None:
            return float(self.options.first_step)
        x_start, lower, upper = self.x_start, self.lower, self.upper
        g0 = self.first.gradient
        direction = np.clip(x_start - g0, lower, upper) - x_start
        norm = float(np.linalg.norm(direction))
        if norm == 0.0:
            return 1.0
        if self.curvature is not None and self.curvature > 0.0:
            slope = float(g0 @ direction) / norm
            return 1.0 if slope >= 0.0 else min(1.0, -slope / self.curvature)
        x_probe = np.clip(x_start + FIRST_STEP_PROBE / norm * direction, lower, upper)
        step = x_probe - x_start
        probe = self.evaluated(x_probe)
        if probe is None:
            return FIRST_STEP_PROBE
        probe_length = float(np.linalg.norm(step))
        slope = float(g0 @ step) / probe_length
        measured = float((probe.gradient - g0) @ step) / probe_length**2
        if slope >= 0.0 or measured <= 0.0:
            return 1.0
        return min(1.0, -slope / measured)


@dataclass
class _Run:
    """How a method's run ended: its stop ``message``, the first step's ``length`` [rad], L-BFGS-B ``restarts``,
    the ``interruption`` (Ctrl-C or cancel; "" for none) and whether the time budget stopped it."""

    message: str = ""
    length: float = 1.0
    restarts: int = 0
    interruption: str = ""
    budget_limited: bool = False


def _run_method(search: _Search, method: Method, step_progress: Callable[[int, int], None] | None) -> _Run:
    """Run ``method`` on ``search``; a Ctrl-C, a cancel or the time budget ends it with the best point so far."""
    state = search.state
    run = _Run()
    try:
        if method == "gauss-newton":
            run.message = levenberg_marquardt(search.pp, search.options, search.x_start, state, search.history,
                                              search.callback, search.progress, search.affordable, search.lower,
                                              search.upper, paid_progress=step_progress)
        if method == "descent":
            run.message, run.length = _descent(search.options, state, search.first, search.lower, search.upper,
                                               search.curvature, search.evaluated, search.valued, search.history,
                                               search.callback)
        if method == "lbfgs":
            run.length = search.first_step()
            _lbfgs_restarts(search, run)
    except KeyboardInterrupt as exc:
        run.interruption = interruption_reason(exc)
        run.message = f"interrupted ({run.interruption}): returning the best parameters evaluated so far"
    except BudgetExhausted:
        run.budget_limited = True
        run.message = (f"time budget reached after {state.iterations} iterations ({state.evaluations} evaluations, "
                       f"the latest {state.duration:.1f} s): returning the best parameters evaluated so far")
    if run.restarts:
        run.message += f" (after {run.restarts} restart{'s' if run.restarts > 1 else ''} of a stalled line search)"
    return run


def _lbfgs_restarts(search: _Search, run: _Run) -> None:
    """L-BFGS-B from the best point, restarted with fresh memory (at most twice) after a stalled line search;
    ``run`` gets the stop message and the restart count."""
    from scipy.optimize import minimize

    pp, options, state = search.pp, search.options, search.state
    g_first = 0.0 if search.first.gradient is None else search.projected_gradient_norm(search.x_start,
                                                                                        search.first.gradient)
    boxed = all(lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
                for lo, hi in pp.bounds)
    while True:
        # L-BFGS-B on y with x = centre + σ y. Its first trial step (fresh memory, B = I) is the steepest-descent
        # step −∇_y = −σ ∇_x when every parameter has both bounds ("boxed"), else a unit step in y: σ makes
        # either one `length` long in x.
        centre = state.best_x.copy()
        g_norm = float(np.linalg.norm(state.best.gradient)) * search.scale
        sigma = math.sqrt(run.length / g_norm) if boxed and g_norm > 0.0 else run.length

        def fun_y(y: NDArray[np.float64], c: NDArray[np.float64] = centre,
                  sg: float = sigma) -> tuple[float, NDArray[np.float64]]:
            value, grad = search.fun(c + sg * y)
            return value, sg * grad

        bounds_y = [(None if lo is None else (lo - c) / sigma, None if hi is None else (hi - c) / sigma)
                    for (lo, hi), c in zip(pp.bounds, centre)]
        res = minimize(fun_y, np.zeros_like(centre), jac=True, method="L-BFGS-B", bounds=bounds_y,
                       callback=lambda y, c=centre, sg=sigma: search.on_iteration(c + sg * y),
                       options={"maxiter": int(options.max_iterations) - state.iterations,
                                "ftol": float(options.relative_tolerance), "gtol": 1e-12,
                                "maxcor": int(options.lbfgs_memory)})
        run.message = str(res.message)
        # A line search that only finds tiny steps (a trial point the model cannot simulate, or curvature
        # pairs that no longer fit) ends L-BFGS-B through its f-reduction test or abnormally, while the
        # gradient is still far from zero: restart from the best point with fresh memory, at most twice.
        stalled = res.status == 2 or "REDUCTION OF F" in run.message.upper().replace("_", " ")
        g_best = search.projected_gradient_norm(state.best_x, state.best.gradient)
        if not stalled or run.restarts >= 2 or state.iterations >= options.max_iterations \
                or g_best < 1e-2 * g_first:
            return
        run.restarts += 1


def choose_method(pp: PlanProblem, options: SolverOptions) -> Method:
    """:attr:`Method.GAUSS_NEWTON`, ``DESCENT`` or ``LBFGS`` from ``options.method`` (see
    :class:`~retarget.planning.options.PlanOptions`)."""
    from retarget.optimize.gauss_newton import MAX_PARAMETERS, supports_tangent

    if options.method in (Method.LBFGS, Method.DESCENT):
        return options.method
    if options.method is Method.AUTO and pp.ensemble is not None:
        return Method.LBFGS
    tangent = supports_tangent(pp.problem)
    if options.method is Method.GAUSS_NEWTON:
        if not tangent:
            raise OptimizeError("the engine has no forward sensitivities: use --method lbfgs")
        return Method.GAUSS_NEWTON
    return (Method.GAUSS_NEWTON if tangent and pp.problem.parametrization.n_parameters <= MAX_PARAMETERS
            else Method.LBFGS)


def _descent(options: SolverOptions, state: SearchState, first: Evaluation, lower: NDArray[np.float64],
             upper: NDArray[np.float64], curvature: float | None,
             evaluated: Callable[[NDArray[np.float64]], Evaluation | None],
             valued: Callable[[NDArray[np.float64]], Evaluation | None], history: list[float],
             callback: Callable[[dict[str, float]], None] | None) -> tuple[str, float]:
    """Projected steepest descent (``options.method`` "descent"): each iteration one step along the projected
    −∇J, line-searched on values alone.

    The first iteration of L-BFGS-B from a fresh memory is this same step, but scipy's line search asks for the
    gradient at every trial point (its curvature condition), while a plan that ends after the step never uses it:
    here the trial points are forward runs only (about a quarter of an evaluation's cost, the adjoint being the
    rest). The step's length is the minimizer of the quadratic through ``J(x₀)``, its slope and ``curvature`` (or a
    value probe at :data:`FIRST_STEP_PROBE`, or ``options.first_step``), at most 1 rad; a trial point is accepted
    with ``J ≤ J₀ + DESCENT_ARMIJO ∇J·s``, else the step shrinks to the minimizer of the quadratic through ``J₀``,
    the slope and the trial's value, within [0.1, 0.5] of it (a point the model cannot simulate: 0.25), at most
    :data:`DESCENT_TRIALS` trials. The curvature ``2 (J(x₁) − J₀ − ∇J·s) / |s|²`` of the first point after ``x₀`` is
    the secant :attr:`OptimizationResult.curvature` (windows hand it on). A further iteration first evaluates the
    gradient at the accepted point (its forward run once more). Stops at ``max_iterations``, when an iteration
    lowers ``J`` by at most ``relative_tolerance × J(x₀)``, or when no trial point decreases ``J`` enough.

    Returns:
        The stop reason and the first step's length [rad].
    """
    length = 1.0
    step_curvature = curvature
    while state.iterations < options.max_iterations:
        at = state.best
        x0 = state.best_x.copy()
        if at.gradient is None:  # the previous step's point: its gradient, for this step
            ev = evaluated(x0)
            if ev is None:
                return "the accepted point could not be simulated again for its gradient", length
            at = state.best = ev
        g0 = at.gradient
        assert g0 is not None
        direction = np.clip(x0 - g0, lower, upper) - x0
        norm = float(np.linalg.norm(direction))
        if norm == 0.0:
            return "the projected gradient is zero", length
        u = direction / norm
        slope = float(g0 @ u)
        if slope >= 0.0:
            return "no descent direction within the bounds", length

        def point(t: float, x0: NDArray[np.float64] = x0, u: NDArray[np.float64] = u) -> NDArray[np.float64]:
            return np.clip(x0 + t * u, lower, upper)

        def secant(ev: Evaluation, x: NDArray[np.float64], x0: NDArray[np.float64] = x0,
                   at: Evaluation = at, g0: NDArray[np.float64] = g0) -> float | None:
            s = x - x0
            ss = float(s @ s)
            if ss == 0.0:
                return None
            c = 2.0 * (ev.value - at.value - float(g0 @ s)) / ss
            return c if c > 0.0 and math.isfinite(c) else None

        if state.iterations == 0 and options.first_step is not None:
            t = float(options.first_step)
        elif step_curvature is not None and step_curvature > 0.0:
            t = min(1.0, -slope / step_curvature)
        else:
            x_probe = point(FIRST_STEP_PROBE)
            probe = valued(x_probe)
            c = None if probe is None else secant(probe, x_probe)
            if probe is not None and not state.secant_measured:
                state.secant, state.secant_measured = c, True
            t = 1.0 if c is None else min(1.0, -slope / c)
        if state.iterations == 0:
            length = t
        accepted = False
        for _ in range(DESCENT_TRIALS):
            x_trial = point(t)
            s = x_trial - x0
            trial = valued(x_trial)
            if trial is None:
                t *= 0.25
                continue
            c = secant(trial, x_trial)
            if not state.secant_measured:
                state.secant, state.secant_measured = c, True
            predicted = float(g0 @ s)
            if trial.value <= at.value + DESCENT_ARMIJO * predicted:
                accepted = True
                step_curvature = c if c is not None else step_curvature
                break
            shrink = 0.5 if c is None else min(0.5, max(0.1, -predicted / (c * float(s @ s))))
            t *= shrink
        if not accepted:
            return f"no sufficient decrease along the projected steepest descent in {DESCENT_TRIALS} trials", length
        state.iterations += 1  # valued() kept the lowest point evaluated as the best
        history.append(state.best.value)
        if callback is not None:
            callback({"iteration": state.iterations, "objective": float(state.best.value),
                      "gradient_norm": float(np.linalg.norm(g0))})
        if at.value - state.best.value <= options.relative_tolerance * first.value:
            return "converged: the step lowered J by at most relative_tolerance × J(x₀)", length
    return "iteration cap reached", length
