"""The planner: L-BFGS-B on the B-spline parameters with adjoint gradients, plus the naive and ZV/ZVD baselines.

:func:`build_plan_problem` fits the profiles to the input, solves the quasi-static targets and assembles the
:class:`~retarget.optimize.adjoint.AdjointProblem`; :func:`optimize` minimizes it (scipy L-BFGS-B, position-limit
bounds, speed penalty, Ctrl-C or an exhausted time budget returns the best point so far), or, with
``PlanOptions.window``, :func:`optimize_windows` minimizes it one time window after another (receding horizon);
:func:`run_plan` does
both and simulates the baselines side by side (:class:`PlanResult`). :func:`plan` is the ROS planner node's entry
point.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retarget.motion.motion import Motion
from retarget.optimize.adjoint import (
    AdjointProblem,
    Evaluation,
    TrackedPoses,
    Window,
    evaluate,
    first_influence,
    rollout,
    window_parameters,
)
from retarget.optimize.bspline import ProfileFit, fit_profiles
from retarget.optimize.engines import Engine
from retarget.optimize.errors import OptimizeError, PlanCancelled, TimeBudgetError
from retarget.optimize.limits import (
    MotorLimits,
    TorquePenalty,
    TorqueReport,
    VelocityPenalty,
    check_profile_limits,
    parameter_bounds,
    speed_feasible_parameters,
    torque_report,
)
from retarget.optimize.objective import MotorRegularizer, TrackingObjective, deviation_metrics
from retarget.optimize.robust import Ensemble, evaluate_ensemble
from retarget.optimize.targets import Targets, quasi_static_targets
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule

__all__ = [
    "OptimizationResult",
    "PlanOptions",
    "PlanProblem",
    "PlanResult",
    "Variant",
    "build_plan_problem",
    "limits_for",
    "optimize",
    "optimize_windows",
    "plan",
    "run_plan",
    "simulate_variant",
    "verification_reserve",
    "verify_metrics",
    "verify_plan",
]


@dataclass(frozen=True)
class PlanOptions:
    """Planner settings.

    Attributes:
        knot_spacing: B-spline knot spacing [s].
        dt: simulation step [s].
        max_iterations: optimizer iteration limit (L-BFGS-B or Levenberg–Marquardt).
        relative_tolerance: stop when an iteration lowers ``J`` by less than this fraction of ``J(x₀)``.
        deviation_weight: ``w_dev`` [1/(rad² s)] (number or schedule text/mapping).
        acceleration_weight: ``w_acc`` [s³/rad²].
        velocity_weight: speed-limit penalty weight (see :class:`VelocityPenalty`).
        torque_weight: weight of the penalty on simulated motor torques above ``(1 − torque_margin)`` × the
            servos' stall torque (:class:`~retarget.optimize.limits.TorquePenalty`) [1/(N² m² s)]; 0 (default):
            torques are only reported (and warned about above stall). Off by default: the paper's motions ask more
            than the XM430's stall torque already as authored (single_rod's step ≈ 4× in the naive playback), and
            held to it the plans suppress less (docs/optimize.md).
        torque_margin: fraction of the stall torque the penalty keeps free, in ``[0, 1)``.
        duration: simulated time [s]; None: the motion's duration.
        baselines: also simulate the ZV/ZVD baselines (the naive one is the optimizer's first evaluation).
        target_stride: solve the quasi-static targets at every ``target_stride``-th step only and interpolate
            (cubic) in between (1: every step; see :func:`~retarget.optimize.targets.quasi_static_targets`).
        lbfgs_memory: L-BFGS-B correction pairs (``maxcor``). The Gauss-Newton Hessian of two_rods has ~30
            eigenvalues spread over three decades (docs/optimize.md): fewer pairs than that forget curvature the
            solver has already paid simulations for.
        time_budget: wall-time budget of :func:`run_plan` [s] (targets, optimization, baselines, and a reserve for
            the caller's verification at ``verify_dt``); None: no limit.
            The optimizer stops before an evaluation that would not fit (or aborts one that overruns) and returns
            the best point evaluated so far, flagged ``budget_limited``.
        method: ``"lbfgs"`` (L-BFGS-B with the adjoint gradient, the default), ``"gauss-newton"``
            (Levenberg–Marquardt with the exact tangent-linear Jacobian, :mod:`retarget.optimize.gauss_newton`) or
            ``"auto"``: Gauss–Newton up to :data:`~retarget.optimize.gauss_newton.MAX_PARAMETERS` parameters.
            Measured on two_rods (docs/optimize.md): Gauss–Newton's large steps leave the region the 3-mode
            reduced model represents (inverted cubature elements) and it ends behind L-BFGS-B in the same budget,
            so L-BFGS-B stays the default.
        first_step: length [rad, Euclidean norm over the parameters] of L-BFGS-B's first trial step (and of the
            first one after a restart). None (default): measured — one extra evaluation at a
            :data:`FIRST_STEP_PROBE` step along the projected steepest descent gives the objective's curvature
            there (a gradient difference), and the first step goes to the minimizer of that quadratic, at most
            1 rad. Left to itself, scipy's L-BFGS-B starts with the raw gradient step (every parameter bounded)
            or a unit step, whatever the useful step is, and its line search then backs off one simulation at a
            time.
        window: receding-horizon windows [s] (:func:`optimize_windows`): optimize the parameters whose influence
            begins in each ``window``-long span in turn, each against the tracking up to ``window_tail`` past the
            span, from the states the earlier windows left; ``max_iterations`` and ``relative_tolerance`` apply per
            window. None (default): the whole motion at once (:func:`optimize`).
        window_tail: how far past its span a window's objective reaches [s]: the ringing its profiles cause.
        window_overlap: how much of each span the next window optimizes again [s] (0 ≤ overlap < window): windows
            start every ``window − window_overlap`` seconds, so no window's last parameters are final after its
            few iterations.
        verify_dt: the step at which the caller will re-simulate the naive and optimized profiles afterwards
            (:func:`verify_plan`), or None. With a ``time_budget`` the optimizer keeps time for it: two forward runs
            at ``verify_dt``, counted as ``2 dt / verify_dt`` forward runs at the planning step times
            :data:`VERIFY_COST_FACTOR` (:func:`verification_reserve`). Without it a budget-limited plan used the
            whole budget and its verification then ran past the budget or was skipped.
        start: where the optimizer starts. ``"feasible"`` (default): from the input's fit, except that motors
            faster than their speed limit start from their closest speed-feasible profiles
            (:func:`~retarget.optimize.limits.speed_feasible_parameters`, no simulation): otherwise the speed
            penalty is most of ``J`` and the simulations go to slowing the motors down (the boxer: 23.7 of 23.8).
            The naive baseline still plays the input as authored, and the start is reported as the
            ``speed_limited`` variant. ``"input"``: from the input's fit as it is.
        stiffness_band: stiffness factors of the robust objective's other models: ``J`` is averaged over the nominal
            model and the same model with every flexible part's stiffness times each factor
            (:mod:`retarget.optimize.robust`; one more forward and adjoint run per factor). Empty: the nominal model
            alone. Not with ``window`` or Gauss–Newton.
    """

    knot_spacing: float = 0.05
    dt: float = 0.005
    max_iterations: int = 50
    relative_tolerance: float = 1e-6
    deviation_weight: Any = 1e-3
    acceleration_weight: Any = 1e-8
    velocity_weight: float = 10.0
    torque_weight: float = 0.0
    torque_margin: float = 0.1
    duration: float | None = None
    baselines: bool = True
    target_stride: int = 1
    lbfgs_memory: int = 50
    time_budget: float | None = None
    method: str = "lbfgs"
    first_step: float | None = None
    window: float | None = None
    window_tail: float = 0.5
    window_overlap: float = 0.0
    start: str = "feasible"
    verify_dt: float | None = None
    stiffness_band: tuple[float, ...] = ()


#: The verification's cost over its ``2 dt / verify_dt`` forward runs' worth at the planning step: a step at the
#: finer ``verify_dt`` costs a little more, and the deviation metrics of every step come on top. Measured on the
#: drummer's demo model (3 s of drumming, dt 2 ms, verify_dt 1 ms, NUMBA_NUM_THREADS=2): forward run 5.1-6.3 s at
#: 2 ms, 12.0-12.4 s at 1 ms, the verification 26.5-31.1 s = 4.8-5.6 planning forward runs where 4 were kept (its
#: 210 s demo plan ran out of time in the verification, session 18).
VERIFY_COST_FACTOR = 1.5


def verification_reserve(options: PlanOptions) -> float:
    """Time the verification at ``options.verify_dt`` needs, in optimizer evaluations (one evaluation, forward and
    adjoint, costs about three forward runs): two forward runs at ``verify_dt``, i.e. ``2 dt / verify_dt`` at the
    planning step, times :data:`VERIFY_COST_FACTOR`. 0 without a ``verify_dt``."""
    if options.verify_dt is None or not options.verify_dt > 0:
        return 0.0
    return VERIFY_COST_FACTOR * 2.0 * float(options.dt) / float(options.verify_dt) / 3.0


#: Length [rad] of the probe step that measures the objective's curvature for the first L-BFGS-B step.
FIRST_STEP_PROBE = 1e-3


@dataclass(frozen=True, eq=False)
class PlanProblem:
    """A built planning problem.

    Attributes:
        problem: the adjoint problem.
        fit: the least-squares fit of the input (the naive profiles, ``x₀``).
        targets: the quasi-static targets.
        motion: the input motion, starting at 0.
        bounds: L-BFGS-B bounds per parameter.
        limits: motor limits.
        ensemble: the robust objective's models (:mod:`retarget.optimize.robust`), or None: ``problem`` alone.
    """

    problem: AdjointProblem
    fit: ProfileFit
    targets: Targets
    motion: Motion
    bounds: list[tuple[float | None, float | None]]
    limits: MotorLimits
    ensemble: Ensemble | None = None

    def evaluate(self, x: NDArray[np.float64], gradient: bool = True,
                 progress: Callable[[int, int], None] | None = None) -> Evaluation:
        """``J`` (and its gradient) at ``x``: averaged over the ensemble when there is one."""
        if self.ensemble is None:
            return evaluate(self.problem, x, gradient=gradient, progress=progress)
        return evaluate_ensemble(self.ensemble, x, gradient=gradient, progress=progress)


def build_plan_problem(engine: Engine, motion: Motion, bodies: Sequence[TrackedBodyWeights], limits: MotorLimits,
                       options: PlanOptions, progress: Callable[[str, int, int], None] | None = None,
                       deadline: float | None = None,
                       members: Sequence[tuple[float, Engine]] = ()) -> PlanProblem:
    """Fit the profiles, solve the targets and assemble the adjoint problem.

    Args:
        engine: the simulator.
        motion: the input animation; its columns must include every motor of the engine.
        bodies: tracked bodies and weights.
        limits: motor limits in the engine's motor order.
        options: settings.
        progress: ``progress(stage, done, total)``.
        deadline: ``time.perf_counter()`` value by which the targets must be solved; None: no limit.
        members: ``(stiffness factor, engine)`` of the robust objective's other models (:mod:`retarget.optimize.robust`;
            empty: the nominal model alone). They track the nominal targets.

    Raises:
        OptimizeError: motors missing from the motion, no tracked body, a too short motion.
        TimeBudgetError: the targets were not solved by ``deadline``.
    """
    if not bodies:
        raise OptimizeError("no tracked body: give tracked_bodies in the robot YAML or --weight LINK:pos=1")
    names = list(engine.motor_names)
    missing = [m for m in names if m not in motion.joint_names]
    if missing:
        raise OptimizeError(f"the motion has no column for motors {missing} (it has {list(motion.joint_names)})")
    m0 = motion.shifted(-float(motion.time[0]))
    m0 = Motion(m0.time, tuple(names), np.stack([m0.positions[:, m0.joint_index(n)] for n in names], axis=1))
    duration = m0.duration if options.duration is None else min(float(options.duration), m0.duration)
    if not duration > 2 * options.dt:
        raise OptimizeError(f"the motion is too short to simulate ({duration} s with dt {options.dt} s)")
    n_steps = int(round(duration / options.dt))
    times = np.arange(n_steps + 1) * options.dt
    fit = fit_profiles(m0, options.knot_spacing)
    angles = m0.sample(times)
    poses = TrackedPoses.build(engine, [b.link for b in bodies])
    started = time.perf_counter()

    def cb(k: int, n: int) -> None:
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeBudgetError(f"the time budget ran out while solving the quasi-static targets ({k} of {n} "
                                  "solves)", stage="targets", elapsed_s=time.perf_counter() - started)
        if progress is not None:
            progress("targets", k, n)

    targets = quasi_static_targets(engine, poses, times, angles, cb, options.target_stride)
    tracking = TrackingObjective.build(times, bodies, targets.positions, targets.orientations)
    reg = MotorRegularizer.build(fit.profiles, times, angles, WeightSchedule.parse(options.deviation_weight),
                                 WeightSchedule.parse(options.acceleration_weight))
    vel = VelocityPenalty.build(fit.profiles, times, limits, options.velocity_weight) if options.velocity_weight > 0 \
        else None
    start = engine.solve_static(fit.profiles.value(0.0))
    torque = TorquePenalty.build(options.dt, limits, options.torque_weight, options.torque_margin) \
        if options.torque_weight > 0 else None
    problem = AdjointProblem(engine, start, options.dt, n_steps, fit.profiles, fit.parametrization, tracking, poses,
                             reg, vel, torque_penalty=torque)
    bounds = parameter_bounds(fit.parametrization, limits)
    ensemble = None
    if members:
        others = tuple(replace(problem, engine=e, start=e.solve_static(fit.profiles.value(0.0))) for _, e in members)
        ensemble = Ensemble(problem, others, tuple(float(f) for f, _ in members))
    return PlanProblem(problem, fit, targets, m0, bounds, limits, ensemble)


@dataclass(frozen=True, eq=False)
class OptimizationResult:
    """The outcome of :func:`optimize`.

    Attributes:
        x: best parameters found.
        objective_initial, objective_final: ``J(x₀)``, ``J(x)``.
        iterations: L-BFGS-B iterations completed.
        evaluations: simulations with gradient run.
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
        first_step: length of L-BFGS-B's first trial step [rad] (see :attr:`PlanOptions.first_step`).
        windows: with :func:`optimize_windows`, per window: ``window``, ``start_s``, ``end_s``, ``parameters``,
            ``iterations``, ``evaluations``, its ``objective_initial`` / ``objective_final``, ``wall_s``, its
            ``first_step_rad``, whether that step came from the previous window's curvature (``curvature_from``)
            and why it ``stopped``; None otherwise.
        curvature: ``J``'s curvature along the first trial step [1/rad²·J units], the secant
            ``(∇J(x₁) − ∇J(x₀))·s / |s|²`` of the first point evaluated after ``x₀`` (the probe, or the first
            trial point); None if there was none or it was not positive.
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
    windows: list[dict[str, Any]] | None = None
    curvature: float | None = None

    @property
    def interrupted(self) -> bool:
        """Stopped by Ctrl-C or a cancel (:attr:`interruption`)."""
        return bool(self.interruption)


_LOG = logging.getLogger(__name__)


class _BudgetExhausted(Exception):
    """Internal: the optimizer's deadline passed (or the next evaluation would pass it)."""


#: :func:`run_plan`'s progress stages as :func:`plan` reports them (the Retarget action's feedback ``stage``).
FEEDBACK_STAGES = {"targets": "targets", "naive playback": "naive playback",
                   "evaluation (forward + adjoint)": "optimizing", "zv": "baselines", "zvd": "baselines",
                   "verifying": "verifying"}

#: How often :func:`plan` polls its ``cancelled`` callback at most [s].
CANCEL_POLL_S = 0.05


def _interruption(exc: BaseException) -> str:
    """What interrupted a run, for its message: the ROS action's cancel or Ctrl-C."""
    return "cancel requested" if isinstance(exc, PlanCancelled) else "Ctrl-C"


class _CancelCheck:
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


def _deadline_progress(deadline: float | None, step_progress: Callable[[int, int], None] | None
                       ) -> Callable[[int, int], None] | None:
    """A per-step progress callback that raises :class:`_BudgetExhausted` once ``deadline`` has passed (and reports
    to ``step_progress``); ``step_progress`` itself without a deadline."""
    if deadline is None:
        return step_progress

    def guarded(k: int, n: int) -> None:
        if time.perf_counter() > deadline:
            raise _BudgetExhausted
        if step_progress is not None:
            step_progress(k, n)

    return guarded


def _first_evaluation(pp: PlanProblem | AdjointProblem, x: NDArray[np.float64], gradient: bool,
                      progress: Callable[[int, int], None] | None) -> Evaluation:
    """The evaluation at the start ``x`` (with :func:`_deadline_progress`'s ``progress``): of the plan's objective
    (robust when it has an ensemble) for a :class:`PlanProblem`, of the one model for an ``AdjointProblem``.

    Raises:
        TimeBudgetError: the deadline passed before it completed.
    """
    started = time.perf_counter()
    try:
        if isinstance(pp, PlanProblem):
            return pp.evaluate(x, gradient=gradient, progress=progress)
        return evaluate(pp, x, gradient=gradient, progress=progress)
    except _BudgetExhausted:
        raise TimeBudgetError("the time budget ran out during the plan's first simulation: "
                              "nothing to return; give a larger budget, a coarser dt or a shorter motion",
                              stage="optimization", elapsed_s=time.perf_counter() - started) from None


def optimize(pp: PlanProblem, options: PlanOptions, x0: NDArray[np.float64] | None = None,
             callback: Callable[[dict[str, float]], None] | None = None,
             step_progress: Callable[[int, int], None] | None = None, deadline: float | None = None,
             reserve_evaluations: float = 0.0, curvature: float | None = None) -> OptimizationResult:
    """Minimize ``J`` from ``x₀`` (default: the fit of the input) by Levenberg–Marquardt or L-BFGS-B.

    ``options.method`` picks the method (:class:`PlanOptions`); both respect the position bounds, the time budget,
    Ctrl-C and ``max_iterations`` alike.

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
        deadline: ``time.perf_counter()`` value to stop by; None: ``options.time_budget`` from now (or no limit).
        reserve_evaluations: evaluations' worth of time to leave before the deadline.
        curvature: a known curvature of ``J`` along steepest descent (e.g. the previous window's
            :attr:`OptimizationResult.curvature`): with ``options.first_step`` None the first step is the minimizer
            of that quadratic without the probe simulation.

    Raises:
        TimeBudgetError: the deadline passed before the first evaluation (at ``x₀``) completed.
    """
    from scipy.optimize import minimize

    from retarget.sim.errors import SimulationError

    if options.first_step is not None and not options.first_step > 0.0:
        raise OptimizeError(f"the first step must be a positive length [rad], not {options.first_step}")
    if deadline is None and options.time_budget is not None:
        deadline = time.perf_counter() + float(options.time_budget)
    progress = _deadline_progress(deadline, step_progress)
    x_start = pp.fit.parameters.copy() if x0 is None else np.asarray(x0, dtype=float).copy()
    started = time.perf_counter()
    first = _first_evaluation(pp, x_start, True, progress)
    scale = 1.0 / first.value if first.value > 0 else 1.0
    state: dict[str, Any] = {"best": first, "best_x": x_start, "last": first, "last_x": x_start, "evals": 1,
                             "duration": time.perf_counter() - started}
    history: list[float] = [first.value]
    state["iterations"] = 0

    def affordable(seconds: float) -> None:
        """Stop (``_BudgetExhausted``) before work of ``seconds`` that, with the reserve, would end past the deadline."""
        if deadline is not None and time.perf_counter() + seconds + state["duration"] * reserve_evaluations > deadline:
            raise _BudgetExhausted

    def evaluated(x: NDArray[np.float64]) -> Evaluation | None:
        """``J`` and its gradient at ``x`` (cached for the latest point), recorded as the latest and maybe the best
        point; None (counted as failed) when the model cannot simulate ``x``."""
        if np.array_equal(x, state["last_x"]):
            return state["last"]
        affordable(state["duration"])
        t0 = time.perf_counter()
        try:
            ev = pp.evaluate(x, progress=progress)
        except SimulationError:
            state["failed"] = state.get("failed", 0) + 1
            return None
        state["evals"] += 1
        state["duration"] = time.perf_counter() - t0
        if "secant" not in state and ev.gradient is not None and first.gradient is not None:
            # The first point after x₀ (the probe or the first trial): J's curvature along that step.
            s = x - x_start
            c = float((ev.gradient - first.gradient) @ s) / float(s @ s)
            state["secant"] = c if c > 0.0 and math.isfinite(c) else None
        state["last"], state["last_x"] = ev, x.copy()
        if ev.value < state["best"].value:
            state["best"], state["best_x"] = ev, x.copy()
        return ev

    def fun(x: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        ev = evaluated(x)
        if ev is None:
            # A trial point too violent to simulate: a large value makes the line search back off.
            return 10.0 * max(1.0, state["best"].value * scale), state["last"].gradient * scale
        assert ev.gradient is not None
        return ev.value * scale, ev.gradient * scale

    def on_iteration(xk: NDArray[np.float64]) -> None:
        state["iterations"] += 1
        ev = state["last"] if np.array_equal(xk, state["last_x"]) else state["best"]
        history.append(ev.value)
        if callback is not None:
            callback({"iteration": state["iterations"], "objective": float(ev.value),
                      "gradient_norm": float(np.linalg.norm(ev.gradient))})

    lower = np.array([-np.inf if b[0] is None else b[0] for b in pp.bounds])
    upper = np.array([np.inf if b[1] is None else b[1] for b in pp.bounds])

    def projected_gradient_norm(x: NDArray[np.float64], g: NDArray[np.float64]) -> float:
        return float(np.linalg.norm(x - np.clip(x - g, lower, upper)))

    def first_step() -> float:
        """The first trial step's length [rad] (``options.first_step``; None: from ``curvature`` or a probe)."""
        if options.first_step is not None:
            return float(options.first_step)
        g0 = first.gradient
        direction = np.clip(x_start - g0, lower, upper) - x_start
        norm = float(np.linalg.norm(direction))
        if norm == 0.0:
            return 1.0
        if curvature is not None and curvature > 0.0:
            slope = float(g0 @ direction) / norm
            return 1.0 if slope >= 0.0 else min(1.0, -slope / curvature)
        x_probe = np.clip(x_start + FIRST_STEP_PROBE / norm * direction, lower, upper)
        step = x_probe - x_start
        probe = evaluated(x_probe)
        if probe is None:
            return FIRST_STEP_PROBE
        probe_length = float(np.linalg.norm(step))
        slope = float(g0 @ step) / probe_length
        measured = float((probe.gradient - g0) @ step) / probe_length**2
        if slope >= 0.0 or measured <= 0.0:
            return 1.0
        return min(1.0, -slope / measured)

    g_first = projected_gradient_norm(x_start, first.gradient)
    interruption, budget_limited = "", False
    message = ""
    restarts = 0
    length = 1.0
    method = _choose_method(pp, options)
    try:
        if method == "gauss-newton":
            message = _levenberg_marquardt(pp, options, x_start, state, history, callback, progress, affordable,
                                           lower, upper)
        if method == "lbfgs":
            length = first_step()
        boxed = all(lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
                    for lo, hi in pp.bounds)
        while method == "lbfgs":
            # L-BFGS-B on y with x = centre + σ y. Its first trial step (fresh memory, B = I) is the steepest-descent
            # step −∇_y = −σ ∇_x when every parameter has both bounds ("boxed"), else a unit step in y: σ makes
            # either one `length` long in x.
            centre = state["best_x"].copy()
            g_norm = float(np.linalg.norm(state["best"].gradient)) * scale
            sigma = math.sqrt(length / g_norm) if boxed and g_norm > 0.0 else length

            def fun_y(y: NDArray[np.float64], c: NDArray[np.float64] = centre,
                      sg: float = sigma) -> tuple[float, NDArray[np.float64]]:
                value, grad = fun(c + sg * y)
                return value, sg * grad

            bounds_y = [(None if lo is None else (lo - c) / sigma, None if hi is None else (hi - c) / sigma)
                        for (lo, hi), c in zip(pp.bounds, centre)]
            res = minimize(fun_y, np.zeros_like(centre), jac=True, method="L-BFGS-B", bounds=bounds_y,
                           callback=lambda y, c=centre, sg=sigma: on_iteration(c + sg * y),
                           options={"maxiter": int(options.max_iterations) - state["iterations"],
                                    "ftol": float(options.relative_tolerance), "gtol": 1e-12,
                                    "maxcor": int(options.lbfgs_memory)})
            message = str(res.message)
            # A line search that only finds tiny steps (a trial point the model cannot simulate, or curvature
            # pairs that no longer fit) ends L-BFGS-B through its f-reduction test or abnormally, while the
            # gradient is still far from zero: restart from the best point with fresh memory, at most twice.
            stalled = res.status == 2 or "REDUCTION OF F" in message.upper().replace("_", " ")
            g_best = projected_gradient_norm(state["best_x"], state["best"].gradient)
            if not stalled or restarts >= 2 or state["iterations"] >= options.max_iterations \
                    or g_best < 1e-2 * g_first:
                break
            restarts += 1
    except KeyboardInterrupt as exc:
        interruption = _interruption(exc)
        message = f"interrupted ({interruption}): returning the best parameters evaluated so far"
    except _BudgetExhausted:
        budget_limited = True
        message = (f"time budget reached after {state['iterations']} iterations ({state['evals']} evaluations, the latest "
                   f"{state['duration']:.1f} s): returning the best parameters evaluated so far")
    best = state["best"]
    if restarts:
        message += f" (after {restarts} restart{'s' if restarts > 1 else ''} of a stalled line search)"
    return OptimizationResult(state["best_x"], first.value, best.value, state["iterations"], state["evals"], history,
                              interruption, message, best, first, budget_limited, state["duration"],
                              state.get("failed", 0), restarts, method, length, curvature=state.get("secant"))


def optimize_windows(pp: PlanProblem, options: PlanOptions, x0: NDArray[np.float64] | None = None,
                     callback: Callable[[dict[str, float]], None] | None = None,
                     step_progress: Callable[[int, int], None] | None = None, deadline: float | None = None,
                     reserve_evaluations: float = 0.0) -> OptimizationResult:
    """Minimize ``J`` one time window after another (receding horizon), with L-BFGS-B in each (:func:`optimize`).

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

    The time budget (after keeping ``reserve_evaluations`` whole evaluations, about three forward runs each, and
    one forward run for the final measurement) is shared out equally among the windows still to do; time a window
    does not use passes on. (Shares weighted by the input's tracking error per window were measured worse on the
    drummer: the early windows' improvements carry over as less sway into the later ones; docs/optimize.md.)
    ``J`` over the whole motion is measured before and after; if the windows made it worse, the start ``x₀`` is
    returned (with a message).

    Args and the result: as :func:`optimize` (``iterations`` and ``evaluations`` summed over the windows,
    ``history`` the whole-motion ``J`` before and after, ``windows`` one summary per window; ``callback`` gets
    ``window`` and ``windows`` too).

    Raises:
        TimeBudgetError: the deadline passed before the first (whole-motion) simulation completed.
    """
    if options.window is None or not options.window > 0.0:
        raise OptimizeError(f"optimize_windows needs a positive window [s], not {options.window}")
    if not options.window_tail >= 0.0:
        raise OptimizeError(f"the window tail must be ≥ 0 s, not {options.window_tail}")
    if not 0.0 <= options.window_overlap < options.window:
        raise OptimizeError(f"the window overlap must be in [0, window) = [0, {options.window:g}) s, not "
                            f"{options.window_overlap}")
    if deadline is None and options.time_budget is not None:
        deadline = time.perf_counter() + float(options.time_budget)
    problem = pp.problem
    n, dt = problem.n_steps, problem.dt
    x = pp.fit.parameters.copy() if x0 is None else np.asarray(x0, dtype=float).copy()
    x_start = x.copy()
    started = time.perf_counter()
    first_step: list[float] = []  # when the first step finished: it includes compiling the engine (tens of s)

    def timed_progress(k: int, total: int) -> None:
        if not first_step:
            first_step.append(time.perf_counter())
        if step_progress is not None:
            step_progress(k, total)

    initial = _first_evaluation(problem, x, False, _deadline_progress(deadline, timed_progress))
    ended = time.perf_counter()
    # The whole-motion forward run's duration, which the reserve below multiplies: from the steps after the first,
    # so that a first plan after an install or upgrade (numba compiling) does not shrink every window's share.
    forward_s = ended - started
    if first_step and n > 1:
        forward_s = min(forward_s, (ended - first_step[0]) * n / (n - 1))
    span = max(1, int(round(options.window / dt)))
    tail = int(round(options.window_tail / dt))
    stride = max(1, span - int(round(options.window_overlap / dt)))
    spans: list[tuple[int, int, int]] = []  # (a, b, last): span (t_a, t_b], simulated to t_last
    a = 0
    while not spans or spans[-1][1] < n:
        b = min(a + span, n)
        spans.append((a, b, min(n, b + tail)))
        a += stride
    states = list(initial.rollout.states)
    iterations = evaluations = failed = restarts = 0
    interruption, budget_limited = "", False
    evaluation_s, first_step = 0.0, 1.0
    messages: list[str] = []
    summaries: list[dict[str, Any]] = []
    skipped: list[int] = []
    curvature: float | None = None  # J's curvature along steepest descent, handed from window to window
    fresh = n  # states[: fresh + 1] were simulated with the current x
    influence = first_influence(problem)
    for w, (a, b, last) in enumerate(spans):
        free = window_parameters(problem, a, n + 1 if b == n else b, influence)
        summary: dict[str, Any] = {"window": w + 1, "start_s": a * dt, "end_s": b * dt, "parameters": int(free.size)}
        summaries.append(summary)
        if free.size == 0:
            summary["stopped"] = "no parameters"
            continue
        if a > fresh:
            # A skipped window left no states simulated with the earlier windows' changes this far.
            summary["stopped"] = "skipped: no simulated start"
            messages.append(f"window {w + 1} of {len(spans)} and the later ones keep the start: the window before "
                            "was skipped and left no start state for them")
            break
        window_deadline: float | None = None
        if deadline is not None:
            left = deadline - time.perf_counter() - forward_s * (1.0 + 3.0 * reserve_evaluations)
            if left <= 0.0:
                budget_limited = True
                summary["stopped"] = "skipped: no time left"
                messages.append(f"time budget reached before window {w + 1} of {len(spans)}: it and the later "
                                "ones keep the start")
                break
            window_deadline = time.perf_counter() + left / (len(spans) - w)
        window = Window(a, last, states[a], states[a - 1] if a > 0 else None, free, x.copy())
        sub = replace(pp, problem=replace(problem, window=window), bounds=[pp.bounds[i] for i in free], ensemble=None)

        def on_iteration(info: dict[str, float], w: int = w) -> None:
            if callback is not None:
                callback({**info, "iteration": iterations + info["iteration"], "window": w + 1,
                          "windows": len(spans)})

        window_started = time.perf_counter()
        try:
            res = optimize(sub, replace(options, method="lbfgs"), x0=x[free], callback=on_iteration,
                           step_progress=step_progress, deadline=window_deadline, curvature=curvature)
        except TimeBudgetError:
            # Its share did not cover one simulation (a hard stretch of the motion): its parameters stay, and its
            # time passes on to the later windows (while the stored states still reach their starts).
            budget_limited = True
            summary["stopped"] = "skipped: no time for its first simulation"
            skipped.append(w + 1)
            continue
        except KeyboardInterrupt as exc:
            # Before the window's first simulation finished (the optimizer returns its best point after that):
            # the earlier windows' results stand.
            interruption = _interruption(exc)
            summary["stopped"] = "interrupted before its first simulation"
            messages.append(f"interrupted ({interruption}) in window {w + 1} of {len(spans)} before its first "
                            "simulation finished: it and the later windows keep the start")
            break
        x[free] = res.x
        iterations += res.iterations
        evaluations += res.evaluations
        failed += res.failed_simulations
        restarts += res.restarts
        evaluation_s, first_step = res.evaluation_s, res.first_step
        states[a : last + 1] = res.best.rollout.states
        fresh = last
        summary.update(iterations=res.iterations, evaluations=res.evaluations, objective_initial=res.objective_initial,
                       objective_final=res.objective_final, wall_s=time.perf_counter() - window_started,
                       first_step_rad=res.first_step,
                       curvature_from="--first-step" if options.first_step is not None
                       else "previous window" if curvature is not None else "probe",
                       stopped="interrupted" if res.interrupted else "time share" if res.budget_limited
                       else "converged or iteration cap")
        curvature = res.curvature or curvature
        if res.interrupted:
            interruption = res.interruption
            messages.append(f"interrupted ({interruption}) in window {w + 1} of {len(spans)}: the later windows "
                            "keep the start")
            break
    try:
        final = evaluate(problem, x, gradient=False, progress=step_progress)
    except KeyboardInterrupt as exc:
        interruption = _interruption(exc)
        messages.append(f"interrupted ({interruption}) in the final simulation: returning the start")
        x, final = x_start, initial
    if final.value > initial.value:
        messages.append(f"the windows raised J over the whole motion ({initial.value:.4g} → {final.value:.4g}): "
                        "returning the start")
        x, final = x_start, initial
    if skipped:
        messages.append(f"window{'s' if len(skipped) > 1 else ''} {', '.join(map(str, skipped))} of {len(spans)} "
                        "kept the start: their share of the time budget did not cover one simulation")
    cut = sum(1 for sm in summaries if sm.get("stopped") == "time share")
    if cut:
        messages.append(f"{cut} of {len(spans)} windows stopped at their share of the time budget")
    overlap = f", {options.window_overlap:g} s overlap" if options.window_overlap else ""
    message = "; ".join([f"{len(spans)} windows of {options.window:g} s (+{options.window_tail:g} s tail{overlap}), "
                         f"{iterations} iterations", *messages])
    return OptimizationResult(x, initial.value, final.value, iterations, evaluations, [initial.value, final.value],
                              interruption, message, final, initial, budget_limited or cut > 0, evaluation_s, failed,
                              restarts, "lbfgs-windows", first_step, summaries)


def _choose_method(pp: PlanProblem, options: PlanOptions) -> str:
    """``"gauss-newton"`` or ``"lbfgs"`` from ``options.method`` (see :class:`PlanOptions`)."""
    from retarget.optimize.gauss_newton import MAX_PARAMETERS, supports_tangent

    if options.method not in ("auto", "lbfgs", "gauss-newton"):
        raise OptimizeError(f"unknown method {options.method!r}: choose auto, lbfgs or gauss-newton")
    if options.method == "lbfgs" or (options.method == "auto" and pp.ensemble is not None):
        return "lbfgs"
    tangent = supports_tangent(pp.problem)
    if options.method == "gauss-newton":
        if not tangent:
            raise OptimizeError("the engine has no forward sensitivities: use --method lbfgs")
        return "gauss-newton"
    return "gauss-newton" if tangent and pp.problem.parametrization.n_parameters <= MAX_PARAMETERS else "lbfgs"


def _levenberg_marquardt(pp: PlanProblem, options: PlanOptions, x_start: NDArray[np.float64],
                         state: dict[str, Any], history: list[float],
                         callback: Callable[[dict[str, float]], None] | None,
                         progress: Callable[[int, int], None] | None, affordable: Callable[[float], None],
                         lower: NDArray[np.float64], upper: NDArray[np.float64]) -> str:
    """Levenberg–Marquardt iterations (Marquardt's diagonal scaling, Nielsen's damping update) from ``x_start``.

    Each iteration: one tangent-linear pass at the current point (exact Gauss–Newton Hessian and gradient), then
    damped steps projected onto the bounds until one lowers ``J`` (a trial point the model cannot simulate counts as
    a rejected step). Updates ``state`` (best point, evaluations, ``iterations``) and ``history`` in place;
    returns the stop reason. ``affordable(seconds)`` raises ``_BudgetExhausted`` before work that would overrun
    the budget; ``KeyboardInterrupt`` passes through, as in the L-BFGS-B loop.
    """
    from retarget.optimize.gauss_newton import parameter_hessian, tangent_least_squares
    from retarget.sim.errors import SimulationError

    problem = pp.problem
    n = problem.n_steps
    x, ev = x_start.copy(), state["best"]
    j0 = ev.value
    mu, nu = 1e-3, 2.0
    tangent_s = 2.0 * state["duration"]

    def tangent_progress(k: int, total: int) -> None:
        if progress is not None:
            progress(n + k, 2 * n)

    while state["iterations"] < options.max_iterations:
        affordable(tangent_s + state["duration"])
        t0 = time.perf_counter()
        ls = tangent_least_squares(problem, x, ev.rollout, tangent_progress)
        tangent_s = time.perf_counter() - t0
        _, g_reg, _ = problem.parameter_terms(x)
        hess = ls.hessian + parameter_hessian(problem, x)
        grad = ls.gradient + g_reg
        state["best"] = ev = replace(ev, gradient=grad)
        scale = np.maximum(np.diag(hess), 1e-12 * max(float(np.max(np.diag(hess))), 1e-300))
        accepted = False
        for _ in range(12):
            affordable(state["duration"])
            step = np.linalg.solve(hess + mu * np.diag(scale), -grad)
            x_new = np.clip(x + step, lower, upper)
            step = x_new - x
            predicted = -float(grad @ step + 0.5 * step @ hess @ step)
            if predicted <= 0.0 or not np.any(step):
                mu, nu = mu * nu, 2.0 * nu
                continue
            t0 = time.perf_counter()
            try:
                trial = evaluate(problem, x_new, gradient=False, progress=progress)
            except SimulationError as exc:
                _LOG.debug("LM trial could not be simulated (mu %.3e): %s", mu, exc)
                state["failed"] = state.get("failed", 0) + 1
                mu, nu = mu * nu, 2.0 * nu
                continue
            state["evals"] += 1
            state["duration"] = time.perf_counter() - t0
            rho = (ev.value - trial.value) / predicted
            _LOG.debug("LM trial: J %.6e -> %.6e, predicted decrease %.3e, rho %.3f, mu %.3e, clipped %d",
                       ev.value, trial.value, predicted, rho, mu, int(np.sum((x_new == lower) | (x_new == upper))))
            if trial.value < ev.value and rho > 1e-4:
                mu *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                nu = 2.0
                accepted = True
                break
            mu, nu = mu * nu, 2.0 * nu
        if not accepted:
            return "no damped Gauss-Newton step lowers the objective (converged to the model's resolution)"
        decrease = ev.value - trial.value
        x, ev = x_new, trial
        state["best"], state["best_x"] = ev, x.copy()
        state["last"], state["last_x"] = ev, x.copy()
        state["iterations"] += 1
        history.append(ev.value)
        if callback is not None:
            callback({"iteration": state["iterations"], "objective": float(ev.value),
                      "gradient_norm": float(np.linalg.norm(grad))})
        if decrease <= options.relative_tolerance * j0:
            return "converged: relative reduction of the objective below the tolerance"
    return "iteration limit reached"


@dataclass(frozen=True, eq=False)
class Variant:
    """One simulated motor trajectory and its deviation from the targets.

    Attributes:
        name: ``naive``, ``zv``, ``zvd`` or ``optimized``.
        angles: the commanded motor angles on the grid [rad] (n_t, n_motors).
        positions: tracked COM positions [m] (n_t, k, 3).
        torques: motor torques [N m] (n_t, n_motors).
        metrics: ``peak_deviation_m``, ``rms_deviation_m`` (+ ``lag_s``, ``frequency_hz``, ``damping_ratio`` for
            shapers).
        training_range: per flexible part, its largest deformation in this simulation over the reduced model's
            largest training one (:func:`retarget.sim.reduced.training.training_range`; empty for a full-space
            engine or a model that does not record its training range).
    """

    name: str
    angles: NDArray[np.float64]
    positions: NDArray[np.float64]
    torques: NDArray[np.float64]
    metrics: dict[str, float]
    training_range: dict[str, float] = field(default_factory=dict)


def simulate_variant(pp: PlanProblem, name: str, motors: Any, extra: dict[str, float] | None = None,
                     progress: Callable[[int, int], None] | None = None) -> Variant:
    """Simulate motor trajectory ``motors`` (``value``/``derivative``) on the problem's grid and measure it."""
    prob = pp.problem
    run = rollout(prob.engine, prob.start, motors, prob.dt, prob.n_steps, progress)
    angles = np.array([np.atleast_1d(motors.value(t)) for t in pp.targets.times])
    return _variant(pp, name, angles, prob.poses.positions(run.matrix), run.matrix, extra)


def _variant(pp: PlanProblem, name: str, angles: NDArray[np.float64], positions: NDArray[np.float64],
             states: NDArray[np.float64], extra: dict[str, float] | None = None) -> Variant:
    """A simulated variant measured against the targets (motor torques from the stored ``states`` (n_t, n_S))."""
    tau = states[:, pp.problem.engine.motor_torque_index]
    metrics = deviation_metrics(positions, pp.targets.positions)
    metrics["peak_torque_ratio"] = max(torque_report(pp.targets.times, tau, pp.limits).ratio)
    metrics.update(extra or {})
    return Variant(name, angles, positions, tau, metrics, _training_range(pp.problem.engine, states))


def _training_range(engine: Any, states: Any) -> dict[str, float]:
    """Per flexible part, the largest deformation in ``states`` over the reduced model's largest training one."""
    from retarget.sim.reduced.system import ReducedSystem
    from retarget.sim.reduced.training import training_range

    system = getattr(engine, "system", None)
    if not isinstance(system, ReducedSystem):
        return {}
    return training_range(system, np.asarray(states)[:, system.z_slice])


@dataclass(frozen=True, eq=False)
class PlanResult:
    """Everything a plan produced.

    Attributes:
        pp: the problem. optimization: the L-BFGS-B outcome.
        profiles: the optimized motor profiles.
        variants: by name (``naive``, ``zv``, ``zvd``, ``optimized``).
        torque: peak torque vs stall torque of the optimized trajectory.
        warnings: human-readable warnings (torque, limits, identification).
        timings: wall time per stage [s].
        objective_naive: ``J`` of the naive playback (the input's fit); None: the optimizer's start.
    """

    pp: PlanProblem
    optimization: OptimizationResult
    profiles: Any
    variants: dict[str, Variant]
    torque: TorqueReport
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    objective_naive: float | None = None

    def metrics(self) -> dict[str, Any]:
        """The JSON report (``retarget plan --json``): ``objective_initial`` is ``J`` of the naive playback,
        ``objective_start`` that of the optimizer's start (they differ with a speed-feasible start)."""
        opt = self.optimization
        out: dict[str, Any] = {
            "objective_initial": opt.objective_initial if self.objective_naive is None else self.objective_naive,
            "objective_start": opt.objective_initial,
            "start": "speed-feasible" if "speed_limited" in self.variants else "input",
            "objective_final": opt.objective_final,
            "iterations": opt.iterations,
            "evaluations": opt.evaluations,
            "interrupted": opt.interrupted,
            "budget_limited": opt.budget_limited,
            "message": opt.message,
            "evaluation_s": opt.evaluation_s,
            "failed_simulations": opt.failed_simulations,
            "restarts": opt.restarts,
            "method": opt.method,
            "first_step_rad": opt.first_step,
            **({"windows": opt.windows} if opt.windows is not None else {}),
            "wall_s": sum(self.timings.values()),
            "timings_s": dict(self.timings),
            "parameters": int(self.pp.fit.parametrization.n_parameters),
            "knot_spacing_s": self.pp.fit.profiles.knot_spacing,
            "fit_max_error_deg": float(np.degrees(self.pp.fit.max_error.max())),
            "fit_rms_error_deg": float(np.degrees(np.sqrt(np.mean(self.pp.fit.rms_error ** 2)))),
            "dt_s": self.pp.problem.dt,
            "steps": self.pp.problem.n_steps,
            "target_solves": self.pp.targets.solves,
            "tracked_bodies": list(self.pp.problem.tracking.links),
            **self.torque.summary(),
            "warnings": list(self.warnings),
        }
        for name, v in self.variants.items():
            out[name] = dict(v.metrics)
            if v.training_range:
                out[name]["training_range_ratio"] = dict(v.training_range)
        # The Retarget action's result fields (docs/ros.md).
        for name in ("naive", "optimized"):
            if name in self.variants:
                out[f"{name}_peak_deviation"] = self.variants[name].metrics["peak_deviation_m"]
                out[f"{name}_rms_deviation"] = self.variants[name].metrics["rms_deviation_m"]
        return out


def verify_plan(result: PlanResult, dt: float, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Re-simulate the naive and optimized profiles at a finer step ``dt`` [s] and measure them against the targets.

    The optimizer sees the robot only at the planning step; profiles it tuned there may excite modes that BDF2 at
    that step damps or delays, and then the improvement is the discretization's, not the robot's (the drummer at
    5 ms: peak 0.65 × naive at 5 ms, 1.05 × at 1 ms; docs/optimize.md). The targets are interpolated (cubic) to
    the finer grid. ``progress(done, total)`` is called per step of each run (and may raise to stop them).

    Returns:
        ``dt_s``, ``steps``, ``naive`` and ``optimized`` deviation metrics at ``dt``, ``peak_ratio`` (optimized over
        naive at ``dt``), ``planning_peak_ratio`` (the same at the planning step), ``holds`` (the finer step keeps
        at least half the planning step's peak reduction, ``1 − peak_ratio ≥ ½ (1 − planning_peak_ratio)``; true
        when the plan claims no reduction) and ``wall_s``.

    Raises:
        ValueError: ``dt`` not positive.
    """
    from scipy.interpolate import CubicSpline

    if not dt > 0.0:
        raise ValueError(f"verification step must be positive, got {dt}")
    started = time.perf_counter()
    pp = result.pp
    prob = pp.problem
    n = int(round(prob.n_steps * prob.dt / dt))
    target = CubicSpline(pp.targets.times, pp.targets.positions, axis=0)(np.arange(n + 1) * dt)
    out: dict[str, Any] = {"dt_s": float(dt), "steps": n}
    for name, profiles in (("naive", pp.fit.profiles), ("optimized", result.profiles)):
        run = rollout(prob.engine, prob.start, profiles, dt, n, progress)
        out[name] = deviation_metrics(prob.poses.positions(run.matrix), target)
        out[name]["peak_torque_ratio"] = max(torque_report(run.times, run.matrix[:, prob.engine.motor_torque_index],
                                                           pp.limits).ratio)
    out["peak_ratio"] = out["optimized"]["peak_deviation_m"] / out["naive"]["peak_deviation_m"]
    plan_ratio = (result.variants["optimized"].metrics["peak_deviation_m"]
                  / result.variants["naive"].metrics["peak_deviation_m"])
    out["planning_peak_ratio"] = plan_ratio
    out["holds"] = bool(plan_ratio >= 1.0 or 1.0 - out["peak_ratio"] >= 0.5 * (1.0 - plan_ratio))
    out["wall_s"] = time.perf_counter() - started
    return out


def _motion_stop_time(motion: Motion, tolerance: float = 1e-6) -> float:
    """Last time the input moves [s] (start of the free ring-out)."""
    moving = np.flatnonzero(np.any(np.abs(np.diff(motion.positions, axis=0)) > tolerance, axis=1))
    return float(motion.time[moving[-1] + 1]) if moving.size else float(motion.time[0])


#: Ring-out after the input stops [s] that the ZV/ZVD baselines need to identify the vibration.
MIN_RING_OUT = 0.5


def _ring_out(pp: PlanProblem) -> float:
    """Simulated time after the input stops moving [s]."""
    return float(pp.targets.times[-1]) - _motion_stop_time(pp.motion)


def _shaped_baselines(pp: PlanProblem, naive: Variant, progress: Callable[[str, int, int], None] | None,
                      warnings: list[str], deadline: float | None = None) -> dict[str, Variant]:
    """ZV and ZVD shaping of the input at the first mode identified from the naive ring-out.

    A baseline still simulating at ``deadline`` (``time.perf_counter()``) or when Ctrl-C is pressed is dropped
    with a warning: the optimized result matters more.
    """
    from retarget.optimize.errors import ShapingError
    from retarget.optimize.shaping import identify_from_trajectory, shape_motion, zv_shaper, zvd_shaper
    from retarget.sim.motors import SplineMotors

    ring_out = _ring_out(pp)
    times = pp.targets.times
    stop = times[-1] - ring_out
    if ring_out < 0:
        warnings.append(f"no ZV/ZVD baseline: the simulation ends at {times[-1]:.2f} s, before the motion stops "
                        f"moving ({stop:.2f} s), so there is no ring-out to identify the vibration from")
        return {}
    if ring_out < MIN_RING_OUT:
        warnings.append(f"no ZV/ZVD baseline: only {ring_out:.2f} s of ring-out after the motion stops")
        return {}
    # The body that rings most after the motion stops identifies the mode.
    ring = times >= stop
    amp = [np.ptp(naive.positions[ring, j], axis=0).max() for j in range(naive.positions.shape[1])]
    j = int(np.argmax(amp))
    try:
        mode = identify_from_trajectory(times, naive.positions[:, j], start_time=stop + 0.05)
    except ShapingError as exc:
        warnings.append(f"no ZV/ZVD baseline: vibration identification failed ({exc})")
        return {}
    out = {}
    for shaper in (zv_shaper(mode.frequency_hz, mode.damping_ratio), zvd_shaper(mode.frequency_hz, mode.damping_ratio)):
        shaped = shape_motion(pp.motion, shaper, rate=1.0 / pp.problem.dt)
        motors = SplineMotors(shaped.time, shaped.positions)
        name = shaper.name.lower()

        def cb(k: int, n: int, s: str = name) -> None:
            if deadline is not None and time.perf_counter() > deadline:
                raise _BudgetExhausted
            if progress is not None:
                progress(s, k, n)

        try:
            out[name] = simulate_variant(pp, name, motors, {"lag_s": shaper.lag_s, "frequency_hz": mode.frequency_hz,
                                                             "damping_ratio": mode.damping_ratio}, cb)
        except (_BudgetExhausted, KeyboardInterrupt) as exc:
            why = "the time budget ran out" if isinstance(exc, _BudgetExhausted) else "interrupted"
            warnings.append(f"ZV/ZVD baselines incomplete: {why} while simulating {name}")
            break
    return out


def _evaluation_variant(pp: PlanProblem, name: str, x: NDArray[np.float64], ev: Evaluation) -> Variant:
    """The variant an evaluation simulated (no new simulation)."""
    angles = np.asarray(pp.problem.profiles(x).evaluate(pp.targets.times))
    return _variant(pp, name, angles, ev.positions, ev.rollout.matrix)


def run_plan(engine: Engine, motion: Motion, bodies: Sequence[TrackedBodyWeights], limits: MotorLimits,
             options: PlanOptions, progress: Callable[[str, int, int], None] | None = None,
             callback: Callable[[dict[str, float]], None] | None = None,
             engine_factory: Callable[[float], Engine] | None = None) -> PlanResult:
    """Build, optimize, and simulate the baselines and the result.

    Args:
        engine: the simulator (the reduced model in production).
        motion: the input animation.
        bodies: tracked bodies with weights.
        limits: motor limits (engine motor order).
        options: settings (``time_budget`` bounds the whole run; see :class:`PlanOptions`).
        progress: ``progress(stage, done, total)`` for long stages (targets, evaluations: forward + adjoint steps,
            baselines).
        callback: per-iteration ``{iteration, objective, gradient_norm}`` (see :func:`optimize`).
        engine_factory: ``engine_factory(factor)`` → the planning model with every flexible part's stiffness times
            ``factor``: needed for ``options.stiffness_band``.

    The naive variant is the optimizer's first evaluation (the fit ``x₀``), so it costs no extra simulation —
    unless the input is too fast for the servos and the optimizer starts from a speed-feasible projection
    (:attr:`PlanOptions.start`): then the naive playback is one forward simulation of its own, and the start is
    the ``speed_limited`` variant. The ZV/ZVD baselines run after the optimization, with two simulations' worth of
    the budget kept for them.

    Raises:
        TimeBudgetError: the budget ran out before the targets and the first simulation were done.
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    deadline = None if options.time_budget is None else t0 + float(options.time_budget)
    if options.start not in ("feasible", "input"):
        raise OptimizeError(f"unknown start {options.start!r}: choose feasible or input")
    members: list[tuple[float, Engine]] = []
    if options.stiffness_band and options.window is None and options.method != "gauss-newton":
        if engine_factory is None:
            raise OptimizeError("a stiffness band needs the planning model's engine factory")
        members = [(float(f), engine_factory(float(f))) for f in options.stiffness_band if float(f) != 1.0]
    pp = build_plan_problem(engine, motion, bodies, limits, options, progress, deadline, members)
    timings["targets"] = time.perf_counter() - t0
    warnings: list[str] = []
    variants: dict[str, Variant] = {}
    t0 = time.perf_counter()
    # One evaluation steps forward through the motion, then backward (the adjoint): its bar counts both.
    step_cb = None if progress is None else (lambda k, n: progress("evaluation (forward + adjoint)", k, n))
    x_start, naive = None, None
    if options.start == "feasible":
        projection = speed_feasible_parameters(pp.fit.profiles, pp.fit.parametrization, pp.fit.parameters, limits,
                                               pp.bounds)
        if projection.changed:
            warnings.append(projection.describe())
            x_start = projection.x
            naive = _first_evaluation(pp.problem, pp.fit.parameters, False, _deadline_progress(
                deadline, None if progress is None else (lambda k, n: progress("naive playback", k, n))))
    # Two forward simulations (ZV, ZVD) cost about 1.6 forward + adjoint evaluations; none are kept when the
    # motion leaves too little ring-out for the baselines to run. The caller's verification is kept too.
    minimize = optimize if options.window is None else optimize_windows
    baselines = options.baselines and _ring_out(pp) >= MIN_RING_OUT
    opt = minimize(pp, options, x0=x_start, callback=callback, step_progress=step_cb, deadline=deadline,
                   reserve_evaluations=(1.6 if baselines else 0.0) + verification_reserve(options))
    timings["optimization"] = time.perf_counter() - t0
    if opt.interrupted or opt.budget_limited:
        warnings.append(opt.message)
    naive = opt.initial if naive is None else naive
    variants["naive"] = _evaluation_variant(pp, "naive", pp.fit.parameters, naive)
    if x_start is not None:
        variants["speed_limited"] = _evaluation_variant(pp, "speed_limited", x_start, opt.initial)
    warnings.extend(f"input as authored (naive playback): {w}"
                    for w in torque_report(pp.targets.times, variants["naive"].torques, limits).warnings())
    t0 = time.perf_counter()
    if options.baselines:
        variants.update(_shaped_baselines(pp, variants["naive"], progress, warnings, deadline))
    timings["baselines"] = time.perf_counter() - t0
    profiles = pp.problem.profiles(opt.x)
    variants["optimized"] = _evaluation_variant(pp, "optimized", opt.x, opt.best)
    tau = variants["optimized"].torques
    report = torque_report(pp.targets.times, tau, limits)
    warnings.extend(report.warnings())
    for v in check_profile_limits(profiles, limits):
        warnings.append(f"optimized profile leaves a limit: {v}")
    from retarget.sim.reduced.training import training_range_warning

    beyond = training_range_warning(variants["optimized"].training_range)
    if beyond:
        warnings.append(f"optimized trajectory: {beyond}")
    return PlanResult(pp, opt, profiles, variants, report, warnings, timings, naive.value)


def _none_if_default(value: Any, default: Any, positive: bool = True) -> Any:
    """ROS goals use 0 / negative for "default"."""
    if value is None:
        return default
    if isinstance(value, (int, float)) and (value <= 0 if positive else value < 0):
        return default
    return value


def limits_for(model: Any, config: dict[str, Any] | None) -> MotorLimits:
    """Motor limits from the model's joints (URDF position limits) and the YAML's ``servo:`` mapping."""
    from retarget.optimize.limits import ServoSpec

    joints = {j.name: j for j in model.joints}
    lims = {}
    for m in model.motors:
        j = joints.get(m)
        if j is not None and (math.isfinite(j.lower) or math.isfinite(j.upper)):
            lims[m] = (j.lower, j.upper, 0.0)
    servo = ServoSpec.from_mapping((config or {}).get("servo"))
    return MotorLimits.build(model.motors, lims, servo)


def verify_metrics(result: PlanResult, dt: float, deadline: float | None = None,
                   progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """:func:`verify_plan` for the plan's metrics: ``verify``, and a warning appended to ``result.warnings`` (and
    the returned ``warnings``) when the improvement does not hold, the ``deadline`` passed first, or a cancel
    (:class:`PlanCancelled` from ``progress``) came first."""
    warnings = result.warnings
    planning_dt = result.pp.problem.dt
    step_progress = _deadline_progress(deadline, None if progress is None
                                       else (lambda k, n: progress("verifying", k, n)))
    out: dict[str, Any] = {}
    try:
        out["verify"] = check = verify_plan(result, dt, step_progress)
    except (_BudgetExhausted, PlanCancelled) as exc:
        why = "cancelled" if isinstance(exc, PlanCancelled) else "the time budget ran out"
        warnings.append(f"not verified at dt {dt:g} s: {why}")
    else:
        if not check["holds"]:
            warnings.append(f"the optimized profiles' improvement does not hold at dt {dt:g} s: peak deviation "
                            f"{check['peak_ratio']:.2f}x naive there, {check['planning_peak_ratio']:.2f}x at the "
                            f"planning dt {planning_dt:g} s - plan with a smaller dt")
    return {**out, "warnings": list(warnings)}


#: Seconds of the motion :func:`warm_up` plans (one iteration): enough for every stage of a plan to run once.
WARM_UP_S = 0.2

#: The feedback stage of :func:`warm_up` (``plan`` with a time budget, before the budget's clock starts).
WARM_UP_STAGE = "compiling kernels"


def warm_up(engine: Engine, motion: Motion, bodies: Sequence[TrackedBodyWeights], limits: MotorLimits,
            options: PlanOptions, progress: Callable[[str, int, int], None] | None = None) -> float:
    """Plan the first :data:`WARM_UP_S` s of ``motion`` for one iteration (and verify it at ``options.verify_dt``),
    so that numba compiles — or loads from its on-disk cache — every kernel a plan with these options runs; returns
    the wall time [s].

    A budgeted plan calls it before its clock starts: the first plan after an install or an update otherwise spends
    minutes of its budget compiling (the drummer's 180 s demo plan got 0 iterations with an empty cache, 11 with a
    warm one; docs/optimize.md "Time budget"). With the kernels cached it costs a few short simulations.
    ``progress(stage, done, total)`` is called as by :func:`run_plan` (and may raise to stop it).

    Raises:
        KeyboardInterrupt: Ctrl-C during the warm-up (:class:`PlanCancelled`: a cancel from ``progress``) — the plan
            it prepares should not start.
    """
    started = time.perf_counter()
    short = replace(options, duration=max(WARM_UP_S, 3.0 * float(options.dt)), max_iterations=1, time_budget=None,
                    verify_dt=None)
    result = run_plan(engine, motion, bodies, limits, short, progress)
    if result.optimization.interrupted:  # the optimizer returns its best point on Ctrl-C and cancels: not here
        raise PlanCancelled(WARM_UP_STAGE) if result.optimization.interruption == "cancel requested" \
            else KeyboardInterrupt
    if options.verify_dt is not None and options.verify_dt > 0:
        verify_plan(result, float(options.verify_dt), None if progress is None
                    else (lambda k, n: progress("verifying", k, n)))
    return time.perf_counter() - started


def plan(request: dict[str, Any], progress: Callable[[dict[str, Any]], None] | None = None,
         cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The ROS planner node's entry point (docs/ros.md): plain data in, plain data out.

    Args:
        request: ``robot``, ``joint_names``, ``time`` [s], ``positions`` [rad] (n, n_joints), ``tracked_bodies``,
            ``position_weights``, ``deviation_weight``, ``acceleration_weight``, ``knot_spacing``,
            ``max_iterations``, ``relative_tolerance`` (zero/negative/empty: defaults); optional ``dt``,
            ``modes``, ``mesh_axial``, ``mesh_around``, ``reduced_file`` (a ``retarget reduce`` ``.npz`` or a cached
            ``.pkl``), ``time_budget`` [s] (zero/negative/absent: none; the best iterate when it runs out, flagged
            ``budget_limited`` in the metrics; it starts once the model is loaded and :func:`warm_up` has compiled
            the kernels — an in-process training counts in it), ``window`` / ``window_tail`` / ``window_overlap``
            [s] (windows, :attr:`PlanOptions.window`; zero/negative/absent: the whole motion at once),
            ``torque_weight``, ``torque_margin`` (:attr:`PlanOptions.torque_weight`; absent: the defaults), ``verify``
            (default true: re-simulate the naive and optimized profiles at ``verify_dt``, default ``dt / 5``, as
            ``retarget plan`` does, :func:`verify_plan`; metrics ``verify``, and a warning when the improvement does
            not hold; skipped with a warning when the time budget runs out first), ``allow_training``
            (default False: a robot without a given, cached or found reduced model raises NotAvailableError rather
            than training for minutes to hours inside a request).
        progress: called per L-BFGS iteration with ``{iteration, objective, gradient_norm}`` (with windows also
            ``window``, ``windows``), and with ``{stage}`` when a stage begins (:data:`TRAINING_STAGE` when a
            reduced model is trained in-process, :data:`WARM_UP_STAGE` with a time budget, then
            :data:`FEEDBACK_STAGES`: ``targets``, ``naive playback``, ``optimizing``, ``baselines``, ``verifying``).
        cancelled: polled during the run (per simulation step — an in-process training simulation's too — at
            most every 50 ms, and per iteration); once it returns true the optimizer stops as on Ctrl-C and the
            best parameters so far are returned, flagged ``cancelled`` (and ``interrupted``) in the metrics.

    Returns:
        ``joint_names``, ``time``, ``positions`` (the optimized trajectory sampled at the simulation step) and
        ``metrics`` (:meth:`PlanResult.metrics`, including the Retarget action's result fields, and ``cancelled``).

    Raises:
        InputError: malformed request (StaleReducedModelError: the reduced model does not match the robot).
        NotAvailableError: no reduced model and training not allowed.
        TimeBudgetError: the budget ran out before the first simulation finished (or while training a model).
        PlanCancelled: ``cancelled`` turned true before there was anything to return (training, the targets, the naive
            playback of a too-fast input, or the optimizer's first simulation).
        RetargetError: planning failed.
    """
    from retarget.errors import InputError
    from retarget.optimize.engines import reduced_engine
    from retarget.optimize.planning_model import DEFAULT_PLAN_MODES, planning_model
    from retarget.optimize.weights import parse_tracked_bodies

    started = time.perf_counter()
    try:
        names = tuple(str(n) for n in request["joint_names"])
        motion = Motion(np.asarray(request["time"], dtype=float), names, np.asarray(request["positions"], dtype=float))
        robot = str(request["robot"])
    except (KeyError, ValueError, TypeError) as exc:
        raise InputError(f"malformed plan request: {exc}") from exc
    # Input limits before any model work (a training takes minutes): refuse with the joint, time and value.
    from retarget.motion.limits import check_plan_input
    check_plan_input(robot, motion)

    defaults = PlanOptions()
    options = PlanOptions(
        knot_spacing=float(_none_if_default(request.get("knot_spacing"), defaults.knot_spacing)),
        dt=float(_none_if_default(request.get("dt"), defaults.dt)),
        max_iterations=int(_none_if_default(request.get("max_iterations"), defaults.max_iterations)),
        relative_tolerance=float(_none_if_default(request.get("relative_tolerance"), defaults.relative_tolerance)),
        deviation_weight=_none_if_default(request.get("deviation_weight"), defaults.deviation_weight, positive=False),
        acceleration_weight=_none_if_default(request.get("acceleration_weight"), defaults.acceleration_weight,
                                             positive=False),
        time_budget=_none_if_default(request.get("time_budget"), None),
        target_stride=int(_none_if_default(request.get("target_stride"), defaults.target_stride)),
        window=_none_if_default(request.get("window"), None),
        window_tail=float(_none_if_default(request.get("window_tail"), defaults.window_tail, positive=False)),
        window_overlap=float(_none_if_default(request.get("window_overlap"), defaults.window_overlap,
                                              positive=False)),
        torque_weight=float(_none_if_default(request.get("torque_weight"), defaults.torque_weight, positive=False)),
        torque_margin=float(_none_if_default(request.get("torque_margin"), defaults.torque_margin, positive=False)),
    )
    if bool(request.get("verify", True)):
        options = replace(options, verify_dt=float(_none_if_default(request.get("verify_dt"), options.dt / 5.0)))
    check = None if cancelled is None else _CancelCheck(cancelled)
    stage_now: list[str] = []

    def steps(stage: str, done: int = 0, total: int = 0) -> None:
        stage = FEEDBACK_STAGES.get(stage, stage)
        if progress is not None and stage_now != [stage]:
            stage_now[:] = [stage]
            progress({"stage": stage})
        if check is not None:
            check(stage, done, total)

    # An in-process training run takes minutes to hours: it reports its stage and polls the cancel and the budget
    # per step like the simulations after it (and counts in the budget).
    budget_end = None if options.time_budget is None else started + float(options.time_budget)
    training = _deadline_progress(budget_end, lambda done, total: steps(TRAINING_STAGE, done, total))
    try:
        pm = planning_model(robot, motion,
                            n_modes=int(_none_if_default(request.get("modes"), DEFAULT_PLAN_MODES)),
                            mesh_axial=request.get("mesh_axial"),
                            mesh_around=request.get("mesh_around"), reduced_file=request.get("reduced_file"),
                            allow_training=bool(request.get("allow_training", False)), progress=training)
    except _BudgetExhausted:
        raise TimeBudgetError("the time budget ran out while training the reduced model; build it once with "
                              "`retarget reduce` or `retarget plan` and plan again", stage="training",
                              elapsed_s=time.perf_counter() - started) from None
    bodies = parse_tracked_bodies(pm.config.get("tracked_bodies"))
    links = list(request.get("tracked_bodies") or [])
    weights = list(request.get("position_weights") or [])
    if weights and len(weights) != len(links):
        raise InputError(f"{len(weights)} position weights for {len(links)} tracked bodies")
    if links:
        yaml_bodies = {b.link: b for b in bodies}
        bodies = [yaml_bodies.get(link, TrackedBodyWeights(link, WeightSchedule.constant(1.0),
                                                           WeightSchedule.constant(0.0))) for link in links]
        if weights:
            bodies = [replace(b, position=WeightSchedule.constant(float(w))) for b, w in zip(bodies, weights)]
    if options.time_budget is not None:
        steps(WARM_UP_STAGE)  # building the engine compiles too (the drummer's: 29 s with an empty numba cache)
    engine = reduced_engine(pm.reduced, tolerance=1e-10)
    limits = limits_for(pm.model, pm.config)
    if options.time_budget is not None:
        # The budget starts once the model is loaded and the kernels are compiled (an in-process training counts).
        if pm.info.get("source") == "trained":  # in this request
            options = replace(options, time_budget=max(float(options.time_budget) - (time.perf_counter() - started),
                                                       0.0))
        warm_up(engine, motion, bodies, limits, options, lambda stage, done, total: steps(WARM_UP_STAGE, done, total))

    def callback(info: dict[str, Any]) -> None:
        if progress is not None:
            progress(info)
        if check is not None:
            check("optimizing")

    deadline = None if options.time_budget is None else time.perf_counter() + float(options.time_budget)
    result = run_plan(engine, motion, bodies, limits, options, progress=steps, callback=callback)
    metrics = result.metrics()
    if options.verify_dt is not None and not (check is not None and check.fired):
        metrics.update(verify_metrics(result, options.verify_dt, deadline, steps))
    metrics["cancelled"] = check is not None and check.fired
    t = result.pp.targets.times
    return {"joint_names": list(result.pp.motion.joint_names), "time": (t + float(motion.time[0])).tolist(),
            "positions": np.asarray(result.profiles.evaluate(t)).tolist(), "metrics": metrics}
