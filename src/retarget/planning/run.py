"""Planning a motion: the one orchestration that ``retarget plan``, the ROS planner node and the benchmarks call.

:func:`plan` (robot, motion, :class:`~retarget.planning.options.PlanOptions`) → :class:`PlanResult`:

1. the motion against the robot's joint limits, before any model work (:func:`retarget.motion.limits.check_plan_input`);
2. the planning model — given, cached, found or trained (:func:`retarget.planning.model.planning_model`) —,
   its model card reported and gated (:func:`retarget.fem.model_card.check_fidelity`);
3. the reduced engine, and the stiffness-scaled engines of the robust objective;
4. with a time budget, :func:`warm_up` first (numba compiles every kernel before the budget's clock starts);
5. :func:`run_plan`: targets, optimization (with the torque penalty's continuation), baselines;
6. the checks in models the plan was not optimized on (:func:`retarget.planning.verification.check_plan`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.motion.motion import Motion
from retarget.optimize.adjoint import Evaluation
from retarget.optimize.control import BudgetExhausted, Deadline, first_evaluation, guarded_progress
from retarget.optimize.errors import OptimizeError, PlanCancelled, TimeBudgetError
from retarget.optimize.lbfgs import optimize
from retarget.optimize.limits import (
    MotorLimits,
    TorquePenalty,
    check_profile_limits,
    speed_feasible_parameters,
    torque_report,
)
from retarget.optimize.parallel import default_workers, fork_pool
from retarget.optimize.problem import PlanProblem, build_plan_problem, limits_for
from retarget.optimize.result import OptimizationResult
from retarget.optimize.robust import without_other_branches
from retarget.optimize.weights import TrackedBodyWeights
from retarget.optimize.windows import optimize_windows
from retarget.planning.assumptions import hardware_assumptions
from retarget.planning.budget import (
    SETTLE_RESERVE,
    Budget,
    PlanEstimate,
    StageEstimate,
    deformable_dofs,
    full_verification_cost,
    optimizer_reserve,
    plan_estimate,
)
from retarget.planning.checks import NaiveAtFinerStep, PlanChecks, Verification
from retarget.planning.options import PlanOptions, Start, VerifyModel
from retarget.planning.stages import CANCEL_POLL_S, TRAINING_STAGE, CancelCheck
from retarget.planning.variants import (
    MIN_RING_OUT,
    PlanResult,
    Variant,
    evaluation_variant,
    ring_out_s,
    shaped_baselines,
)
from retarget.planning.verification import naive_at_finer_step, verify_plan
from retarget.sim.engine import Engine

if TYPE_CHECKING:
    from retarget.optimize.settle import SettleReport
    from retarget.planning.model import PlanningModel
    from retarget.sim.reduced.system import ReducedSystem

__all__ = ["WARM_UP_S", "WARM_UP_STAGE", "PlanProgress", "estimate_for", "plan", "run_plan", "warm_up"]


@dataclass(frozen=True)
class PlanProgress:
    """What :func:`plan` reports while it works, and how it learns of a cancel. Every field is optional.

    Attributes:
        steps: ``steps(stage, done, total)`` per simulation step of each long stage (the training simulation,
            targets, evaluations, baselines, verifications); stage names: the keys of
            :data:`~retarget.planning.stages.FEEDBACK_STAGES`, :data:`~retarget.planning.stages.TRAINING_STAGE`,
            :data:`WARM_UP_STAGE` and ``"full FEM: <variant>"``.
        iteration: ``iteration(info)`` per optimizer iteration: ``iteration``, ``objective``, ``gradient_norm``
            (with windows also ``window``, ``windows``).
        message: ``message(text)``: human-readable lines (the model card, what each check does).
        cancelled: polled during simulations and per iteration (at most every ``cancel_poll_s`` [s]); once true the
            optimizer stops and the best parameters so far are returned, flagged ``cancelled``.
        cancel_poll_s: the shortest interval between two polls of ``cancelled`` [s].
        estimate: ``estimate(e)`` before the work: a :class:`~retarget.planning.budget.StageEstimate` before an
            in-process training, a :class:`~retarget.planning.budget.PlanEstimate` (every stage) once the model
            is ready.
    """

    steps: Callable[[str, int, int], None] | None = None
    iteration: Callable[[dict[str, float]], None] | None = None
    message: Callable[[str], None] | None = None
    cancelled: Callable[[], bool] | None = None
    cancel_poll_s: float = CANCEL_POLL_S
    estimate: Callable[[StageEstimate | PlanEstimate], None] | None = None


def _tracked_bodies(config: Mapping[str, object], options: PlanOptions) -> list[TrackedBodyWeights]:
    """The tracked bodies: ``options.bodies``, else the robot's merged with ``options.weights``."""
    from retarget.optimize.weights import merge_tracked_weights, parse_tracked_bodies

    if options.bodies is not None:
        return list(options.bodies)
    return merge_tracked_weights(parse_tracked_bodies(config.get("tracked_bodies")), list(options.weights))


def plan(robot: str | Path, motion: Motion, options: PlanOptions | None = None,
         progress: PlanProgress | None = None) -> PlanResult:
    """Plan ``motion`` on ``robot``: the vibration-minimizing motor profiles and everything measured about them.

    Args:
        robot: a robot name (``retarget robots``) or its YAML.
        motion: the input animation [s], [rad]; its columns must include every motor.
        options: settings (None: :class:`PlanOptions`' defaults).
        progress: reports and the cancel (:class:`PlanProgress`).

    Returns:
        The :class:`PlanResult`: profiles, variants, ``checks`` (verification, stiffness band, full FEM, the
        headline cut and whether it is meaningful), ``model_info`` (with the model card), ``cancelled``, and
        ``timings`` beginning with ``model`` (loaded or trained, and gated) and, with a time budget, ``warm_up``.

    Raises:
        InputError: a motion beyond the robot's limits or malformed; a model outside the fidelity gate
            (:class:`~retarget.fem.model_card.ModelFidelityError`); a reduced model that does not match the robot.
        NotAvailableError: no reduced model and ``options.allow_training`` False.
        TimeBudgetError: the budget ran out before the first simulation finished (or while training a model).
        PlanCancelled: the cancel came before there was anything to return.
        RetargetError: planning failed.
    """
    from retarget.motion.limits import check_plan_input, hold_note
    from retarget.planning.verification import gate_model  # noqa: PLC0415
    from retarget.sim.adapters import planner_engine

    options = PlanOptions() if options is None else options
    progress = PlanProgress() if progress is None else progress
    started = time.perf_counter()
    given, motion = motion, check_plan_input(robot, motion)  # motors it leaves out hold their zero pose
    if options.verify_file is not None and not (Path(options.verify_file).suffix.lower() == ".npz"
                                                and Path(options.verify_file).is_file()):
        raise InputError(f"verify_model {options.verify_file!r}: expected auto, full, none or an existing reduced-"
                         "model artifact (.npz)")
    reports = _Reports(progress)
    if held := given.held(motion.joint_names):
        reports.say(hold_note(held))
    pm = _load_planning_model(robot, motion, options, reports, started)
    options = _without_stiffness_factors(options, pm, reports.say)
    gate_warning = gate_model(pm, options.allow_unverified_model, reports.say)
    replay_warning = replay_check_warning(pm.info)
    if replay_warning:
        reports.say(replay_warning)
    bodies = _tracked_bodies(pm.config, options)
    prepared = {"model": time.perf_counter() - started}  # loaded (or trained) and gated
    if options.time_budget is not None:
        reports.steps(WARM_UP_STAGE)  # building the engine compiles too
    engine = planner_engine(pm.reduced)
    engine_factory = _ScaledEngines(pm.reduced, engine)
    limits = limits_for(pm.model, pm.config)
    if progress.estimate is not None:
        progress.estimate(estimate_for(pm, engine, motion, options))
    run_options = options
    if options.time_budget is not None:
        # The budget starts once the model is loaded and the kernels are compiled (an in-process training counts).
        if pm.info.get("source") == "trained":
            run_options = replace(options, time_budget=Budget.of(options).less(time.perf_counter() - started).seconds)
        reports.say("warming up: compiling the plan's kernels (not counted in the time budget)")
        warm_up(engine, motion, bodies, limits, run_options,
                lambda stage, done, total: reports.steps(WARM_UP_STAGE, done, total))
        prepared["warm_up"] = time.perf_counter() - started - prepared["model"]  # the engine built, compiled
    deadline = Budget.of(run_options).started().deadline
    rounds = _Rounds(robot=robot, motion=motion, pm=pm, engine=engine, engine_factory=engine_factory, bodies=bodies,
                     limits=limits, reports=reports, deadline=deadline,
                     loops=bool(pm.config.get("loop_joints")))  # two assembly branches meet at a loop's change points
    result = run_plan(engine, motion, bodies, limits, run_options, reports.steps, reports.on_iteration,
                      engine_factory, follow_playback=rounds.loops)
    result.warnings.extend(w for w in (gate_warning, replay_warning) if w)
    result, checks, fired = _verified_torque_rounds(rounds, result, options, run_options)
    info = dict(pm.info)
    assumptions = hardware_assumptions(pm.model, engine.motor_names, engine.servos.per_motor)
    return replace(result, checks=checks, model_info=info, cancelled=fired, assumptions=assumptions,
                   wall_s=time.perf_counter() - started, timings={**prepared, **result.timings})


def _without_stiffness_factors(options: PlanOptions, pm: PlanningModel, say: Callable[[str], None]) -> PlanOptions:
    """``options`` for a robot without flexible parts: every stiffness factor (the robust objective's members, the
    settle refinement's models, the band, the full-FEM band) scales nothing there, so each would repeat the nominal
    model's run; they are dropped, and said so."""
    if pm.model.flexible_parts:
        return options
    fields = ("stiffness_band", "settle_band", "band", "verify_full_band")
    if not any(getattr(options, name) for name in fields):
        return options
    say("no flexible parts: the stiffness factors (robust members, settle and stiffness bands) scale nothing; the "
        "plan and its checks use the nominal model only (what it rests on: the servo loops and rigid links)")
    return replace(options, **{name: () for name in fields})


class _Reports:
    """:func:`plan`'s side of a :class:`PlanProgress`: the step reports (which also poll the cancel), the messages
    and the per-iteration reports."""

    def __init__(self, progress: PlanProgress) -> None:
        self.progress = progress
        self.cancel = None if progress.cancelled is None else CancelCheck(progress.cancelled, progress.cancel_poll_s)

    def steps(self, stage: str, done: int = 0, total: int = 0) -> None:
        """Report ``done`` of ``total`` steps of ``stage``; raises :class:`PlanCancelled` once cancelled."""
        if self.progress.steps is not None:
            self.progress.steps(stage, done, total)
        if self.cancel is not None:
            self.cancel(stage, done, total)

    def say(self, text: str) -> None:
        """Pass a human-readable line on."""
        if self.progress.message is not None:
            self.progress.message(text)

    def on_iteration(self, info: dict[str, float]) -> None:
        """Report an optimizer iteration; raises :class:`PlanCancelled` once cancelled."""
        if self.progress.iteration is not None:
            self.progress.iteration(info)
        if self.cancel is not None:
            self.cancel("optimizing")

    @property
    def fired(self) -> bool:
        """Whether the cancel came."""
        return self.cancel is not None and self.cancel.fired


class _ScaledEngines:
    """The planning model at ``factor`` × stiffness (``engines(factor)``), each built once: the robust objective's
    members and the stiffness band share their engines."""

    def __init__(self, reduced: ReducedSystem, engine: Engine) -> None:
        self.reduced = reduced
        self.scaled: dict[float, Engine] = {1.0: engine}

    def __call__(self, factor: float) -> Engine:
        from retarget.sim.adapters import planner_engine
        from retarget.sim.reduced.system import with_stiffness_scale

        if factor not in self.scaled:
            self.scaled[factor] = planner_engine(with_stiffness_scale(self.reduced, factor))
        return self.scaled[factor]


def _load_planning_model(robot: str | Path, motion: Motion, options: PlanOptions, reports: _Reports,
                         started: float) -> PlanningModel:
    """The planning model (:func:`~retarget.planning.model.planning_model`) with ``options``' settings; an
    in-process training counts against the time budget from ``started``.

    Raises:
        TimeBudgetError: the budget ran out while training the model.
    """
    from retarget.model.servo_file import servo_file_servos
    from retarget.planning.model import planning_model

    training = guarded_progress(Budget.of(options).started(at=started).deadline,
                                lambda done, total: reports.steps(TRAINING_STAGE, done, total))
    try:
        return planning_model(robot, motion, n_modes=options.modes, dt_train=options.dt_train,
                              mesh_axial=options.mesh_axial, mesh_around=options.mesh_around,
                              reduced_file=options.reduced_file, use_cache=options.use_cache,
                              allow_training=options.allow_training, progress=training,
                              servos=None if options.servo_file is None
                              else servo_file_servos(robot, options.servo_file),
                              fallback=options.fallback_models, announce=reports.progress.estimate)
    except BudgetExhausted:
        raise TimeBudgetError("the time budget ran out while training the reduced model; build it once with "
                              "`retarget reduce` or `retarget plan` and plan again", stage="training",
                              elapsed_s=time.perf_counter() - started) from None


@dataclass(frozen=True, eq=False)
class _Rounds:
    """What :func:`plan` runs its plan and the checks with, round after round: the planning model ``pm``, its
    ``engine`` and stiffness-scaled engines, the tracked bodies, the motor limits, the reports, the deadline
    (None: no budget) and whether the robot has loop joints."""

    robot: str | Path
    motion: Motion
    pm: PlanningModel
    engine: Engine
    engine_factory: Callable[[float], Engine]
    bodies: Sequence[TrackedBodyWeights]
    limits: MotorLimits
    reports: _Reports
    deadline: Deadline | None
    loops: bool

    def check(self, result: PlanResult, options: PlanOptions) -> PlanChecks:
        """The checks of ``result`` in other models (:func:`~retarget.planning.verification.check_plan`)."""
        from retarget.planning.verification import check_plan

        return check_plan(result, self.pm.model, options, self.engine_factory, self.reports.steps, self.reports.say,
                          self.deadline, robot=self.robot, planning_info=self.pm.info)


def _verified_torque_rounds(rounds: _Rounds, result: PlanResult, options: PlanOptions,
                            run_options: PlanOptions) -> tuple[PlanResult, PlanChecks | None, bool]:
    """Check ``result``; while the verification model measures the optimum above the stall torque where the
    planning model did not (:func:`verified_torque_margin`), optimize again from it with the torque penalty's
    margin moved and check again (at most ``options.verified_torque_rounds`` times). Returns the last result, its
    checks (None when cancelled before them) and whether the cancel had come when the last round ended."""
    fired = rounds.reports.fired
    checks = None if fired else rounds.check(result, run_options)
    for _ in range(int(options.verified_torque_rounds) if run_options.torque_weight > 0
                   and run_options.window is None else 0):
        verified = None if checks is None else checks.verified
        margin = verified_torque_margin(result, verified, run_options.torque_margin)
        if margin is None or verified is None or verified.optimized is None or fired or (
                rounds.deadline is not None and rounds.deadline.passed()):
            break
        message = (f"the verification model needs {verified.optimized.peak_torque_ratio:.2f} x the "
                   f"stall torque where the planning model needed "
                   f"{result.variants['optimized'].metrics['peak_torque_ratio']:.2f} x: optimizing again from the "
                   f"optimum with the torque penalty from {1.0 - margin:.2f} x stall on, then verifying again")
        rounds.reports.say(message)
        run_options = replace(run_options, torque_margin=margin)
        again = run_plan(rounds.engine, rounds.motion, rounds.bodies, rounds.limits, run_options,
                         rounds.reports.steps, rounds.reports.on_iteration, rounds.engine_factory,
                         x0=result.optimization.x, follow_playback=rounds.loops, verify_naive=result.verify_naive)
        again.warnings[:0] = [*result.warnings, message]
        # One plan: the iterations and evaluations of both rounds.
        again = replace(again, optimization=continued(result.optimization, again.optimization))
        fired = rounds.reports.fired
        result, checks = again, (None if fired else rounds.check(again, run_options))
    return result, checks, fired


def estimate_for(pm: PlanningModel, engine: Engine, motion: Motion, options: PlanOptions) -> PlanEstimate:
    """The :class:`~retarget.planning.budget.PlanEstimate` of planning ``motion`` with ``options`` on the
    planning model ``pm`` (its ``engine`` built): the stages after the model, as :func:`run_plan` and the checks will
    run them."""
    from retarget.optimize.gauss_newton import MAX_PARAMETERS

    duration = float(motion.duration if options.duration is None else min(options.duration, motion.duration))
    n_parameters = (int(duration / options.knot_spacing) + 3) * len(pm.model.motors)
    full = options.verify_model is VerifyModel.FULL or (
        options.verify_model is VerifyModel.AUTO
        and full_verification_cost(pm.model, duration, options.verify_full_dt) <= options.verify_full_max_s)
    settles = options.settle_iterations > 0 and options.window is None and n_parameters <= MAX_PARAMETERS
    return plan_estimate(options, duration, int(engine.n_state), n_parameters, deformable_dofs(pm.model), full,
                         settles)


def verified_torque_margin(result: PlanResult, verification: Verification | None, margin: float) -> float | None:
    """The torque penalty's margin for another round when the verification model measured the optimum above the
    stall torque and the planning model below it: the threshold ``(1 − margin)`` × stall scaled by the ratio of the
    two models' peak torques; None when no round is needed (or the models do not disagree that way, or the plan
    was not verified in another model)."""
    run = None if verification is None else verification.optimized
    verified = None if run is None else run.peak_torque_ratio
    planned = result.variants["optimized"].metrics.get("peak_torque_ratio") if "optimized" in result.variants \
        else None
    if verified is None or planned is None or not verified > 1.0 or not 0.0 < planned < verified:
        return None
    return 1.0 - (1.0 - float(margin)) * float(planned) / float(verified)


def replay_check_warning(info: Mapping[str, object]) -> str:
    """A warning when a model trained by the planner replays its training motion worse than
    :data:`~retarget.planning.model.REPLAY_WARN` of the tracked travel, else ""."""
    from retarget.planning.model import REPLAY_WARN

    error = (info.get("training") or {}).get("replay_error_rel")
    if error is None or not error > REPLAY_WARN:
        return ""
    trained_on = (info.get("training") or {}).get("train_motion", "its training motion")
    return (f"the planning model replays {trained_on} with an RMS error of {100 * error:.3g} % of the tracked "
            f"bodies' travel (more than {100 * REPLAY_WARN:g} %): it does not represent this motion well (large "
            "deformations for its modes; more --modes, or a gentler motion); trust the verification in another model")


def run_plan(engine: Engine, motion: Motion, bodies: Sequence[TrackedBodyWeights], limits: MotorLimits,
             options: PlanOptions, progress: Callable[[str, int, int], None] | None = None,
             callback: Callable[[dict[str, float]], None] | None = None,
             engine_factory: Callable[[float], Engine] | None = None,
             x0: NDArray[np.float64] | None = None, follow_playback: bool = False,
             verify_naive: NaiveAtFinerStep | None = None) -> PlanResult:
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
        x0: start the optimization here (an earlier optimum) instead of the input's fit or its speed-feasible
            projection; the naive playback is then a simulation of its own.
        follow_playback: targets on the assembly branches the input's playback takes (robots with closed kinematic
            loops; :func:`~retarget.optimize.problem.build_plan_problem`), and the robust objective without the
            models that assemble on another branch (:func:`~retarget.optimize.robust.without_other_branches`: one
            forward run of every model before the optimization).
        verify_naive: an earlier run's :attr:`PlanResult.verify_naive` of the same motion (a second round from
            its optimum): reused instead of simulated again.

    With a ``time_budget`` and a ``verify_dt``, the naive playback at ``verify_dt`` runs first
    (:func:`~retarget.planning.verification.naive_at_finer_step`; the verification reuses it), and its measured
    time is kept from the optimizer for the verification's optimized run: what a run at ``verify_dt`` costs depends
    on the robot (1.05 × a run at the planning step on the boxer, 2 × on the demo's drummer, 2 ms against 1 ms).

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
    budget = Budget.of(options).started(at=t0)
    deadline = budget.deadline
    members: list[tuple[float, Engine]] = []
    if options.stiffness_band and options.window is None:
        if engine_factory is None:
            raise OptimizeError("a stiffness band needs the planning model's engine factory")
        members = [(float(f), engine_factory(float(f))) for f in options.stiffness_band if float(f) != 1.0]
    pp = build_plan_problem(engine, motion, bodies, limits, options, progress, deadline, members, follow_playback)
    timings["targets"] = time.perf_counter() - t0
    warnings: list[str] = []
    if verify_naive is None and deadline is not None and options.verify_dt is not None and options.verify_dt > 0:
        verify_naive = _timed_naive_at_verify_dt(pp, options, deadline, progress, timings, warnings)
    t0 = time.perf_counter()
    x_start, naive = _start_point(pp, options, limits, x0, deadline, progress, warnings)
    workers = default_workers() if options.workers is None else int(options.workers)
    if follow_playback and pp.ensemble is not None:
        ensemble, dropped = without_other_branches(
            pp.ensemble, pp.fit.parameters if x_start is None else x_start, workers, guarded_progress(
                deadline, None if progress is None else (lambda k, n: progress("robust models at the start", k, n))))
        warnings.extend(dropped)
        pp = replace(pp, ensemble=ensemble if ensemble.members else None)
    opt, pp = _optimize_pooled(pp, options, x_start, callback, progress, deadline, workers, verify_naive, warnings)
    timings["optimization"] = time.perf_counter() - t0
    settle = None
    if _settles(pp, options, engine_factory, opt, ring_out_s(pp) >= MIN_RING_OUT):
        t0 = time.perf_counter()
        assert engine_factory is not None
        opt, settle = _settle(pp, options, opt, engine_factory, workers,
                              budget.reserving(SETTLE_RESERVE * opt.evaluation_s), progress)
        timings["settle"] = time.perf_counter() - t0
    if opt.interrupted or opt.budget_limited:
        warnings.append(opt.message)
    if not opt.interrupted:
        t0 = time.perf_counter()
        opt = _within_speed_limits(pp, opt, limits, warnings)
        timings["speed_projection"] = time.perf_counter() - t0
    naive = opt.initial if naive is None else naive
    variants = _variants(pp, options, opt, naive, x_start if x0 is None else None, limits, progress, deadline,
                         timings, warnings)
    profiles = pp.problem.profiles(opt.x)
    report = torque_report(pp.targets.times, variants["optimized"].torques, limits)
    warnings.extend(report.warnings())
    for v in check_profile_limits(profiles, limits):
        warnings.append(f"optimized profile leaves a limit: {v}")
    from retarget.sim.reduced.training import training_range_warning

    beyond = training_range_warning(variants["optimized"].training_range)
    if beyond:
        warnings.append(f"optimized trajectory: {beyond}")
    return PlanResult(pp, opt, profiles, variants, report, warnings, timings, naive.value, settle=settle,
                      verify_naive=verify_naive, naive_evaluation=naive)


def _timed_naive_at_verify_dt(pp: PlanProblem, options: PlanOptions, deadline: Deadline,
                              progress: Callable[[str, int, int], None] | None, timings: dict[str, float],
                              warnings: list[str]) -> NaiveAtFinerStep | None:
    """The naive playback at ``options.verify_dt``, its wall time in ``timings``; None (with a warning) when the
    budget ran out first."""
    assert options.verify_dt is not None
    try:
        verify_naive = naive_at_finer_step(pp, float(options.verify_dt), guarded_progress(
            deadline, None if progress is None else (lambda k, n: progress("naive playback at verify_dt", k, n))))
    except BudgetExhausted:
        warnings.append(f"the time budget ran out timing the naive playback at dt {options.verify_dt:g} s: "
                        "the verification's time is not kept")
        return None
    timings["naive_at_verify_dt"] = verify_naive.wall_s
    return verify_naive


def _start_point(pp: PlanProblem, options: PlanOptions, limits: MotorLimits, x0: NDArray[np.float64] | None,
                 deadline: Deadline | None, progress: Callable[[str, int, int], None] | None,
                 warnings: list[str]) -> tuple[NDArray[np.float64] | None, Evaluation | None]:
    """The optimizer's start (None: the fit) and the naive playback when it is a run of its own (None: the
    optimizer's first evaluation is the naive playback)."""

    def naive_playback() -> Evaluation:
        """The input as authored played on the model: one forward run of its own."""
        return first_evaluation(pp.naive_problem, pp.input_fit.parameters, False, guarded_progress(
            deadline, None if progress is None else (lambda k, n: progress("naive playback", k, n))))

    x_start: NDArray[np.float64] | None = None
    naive: Evaluation | None = None
    if x0 is not None:
        x_start = np.asarray(x0, dtype=float)
        naive = naive_playback()
    elif options.start is Start.FEASIBLE:
        projection = speed_feasible_parameters(pp.fit.profiles, pp.fit.parametrization, pp.fit.parameters, limits,
                                               pp.bounds)
        if projection.changed:
            warnings.append(projection.describe())
            x_start = projection.x
            naive = naive_playback()
    if naive is None and pp.naive_fit is not None:
        # Modelled servos: the optimizer starts from the goals that hold the targets (sag pre-compensated), the
        # naive playback is the input itself.
        naive = naive_playback()
    return x_start, naive


def _optimize_pooled(pp: PlanProblem, options: PlanOptions, x_start: NDArray[np.float64] | None,
                     callback: Callable[[dict[str, float]], None] | None,
                     progress: Callable[[str, int, int], None] | None, deadline: Deadline | None, workers: int,
                     verify_naive: NaiveAtFinerStep | None,
                     warnings: list[str]) -> tuple[OptimizationResult, PlanProblem]:
    """The optimization (:func:`_optimize_within_torque`), with the robust objective's models in worker processes
    and the reserve for the baselines and checks kept before the deadline."""
    # One evaluation steps forward through the motion, then backward (the adjoint): its bar counts both.
    step_cb = None if progress is None else (lambda k, n: progress("evaluation (forward + adjoint)", k, n))
    # The baselines' and the caller's checks' (verification, band) reserve: the verification's optimized run at its
    # measured time when the naive one ran above.
    minimize = optimize if options.window is None else optimize_windows
    baselines = options.baselines and ring_out_s(pp) >= MIN_RING_OUT
    timed = verify_naive is not None
    reserve = optimizer_reserve(options, baselines, verification_timed=timed)
    reserve_s = float(verify_naive.wall_s) if verify_naive is not None else 0.0
    ensemble = pp.ensemble
    with fork_pool(None if ensemble is None else ensemble.members, workers if ensemble is not None else 0) as pool:
        if pool is not None and ensemble is not None:
            pp = replace(pp, ensemble=replace(ensemble, pool=pool))
        if ensemble is not None:
            # The reserved work (baselines, verification) runs on the nominal model alone, while the optimizer
            # counts the reserve in its own evaluations, each of every model of the robust objective: in turn, or
            # as many at a time as there are cores with the worker processes.
            at_once = 1 if pool is None else min(ensemble.size, workers + 1, default_workers())
            reserve *= at_once / ensemble.size
        opt, pp = _optimize_within_torque(pp, options, minimize, x_start, callback, step_cb, deadline, reserve,
                                          warnings, reserve_s)
    if pp.ensemble is not None:
        pp = replace(pp, ensemble=replace(pp.ensemble, pool=None))
    return opt, pp


def _variants(pp: PlanProblem, options: PlanOptions, opt: OptimizationResult, naive: Evaluation,
              speed_limited: NDArray[np.float64] | None, limits: MotorLimits,
              progress: Callable[[str, int, int], None] | None, deadline: Deadline | None, timings: dict[str, float],
              warnings: list[str]) -> dict[str, Variant]:
    """The plan's variants: the naive playback, the ``speed_limited`` start (when the optimizer started from a
    speed-feasible projection), the ZV/ZVD baselines (their wall time in ``timings``) and the optimized one."""
    variants: dict[str, Variant] = {}
    variants["naive"] = evaluation_variant(pp, "naive", pp.input_fit.parameters, naive, pp.naive_problem)
    if speed_limited is not None:
        variants["speed_limited"] = evaluation_variant(pp, "speed_limited", speed_limited, opt.initial)
    warnings.extend(f"input as authored (naive playback): {w}"
                    for w in torque_report(pp.targets.times, variants["naive"].torques, limits).warnings())
    t0 = time.perf_counter()
    if options.baselines:
        variants.update(shaped_baselines(pp, variants["naive"], progress, warnings, deadline))
    timings["baselines"] = time.perf_counter() - t0
    variants["optimized"] = evaluation_variant(pp, "optimized", opt.x, opt.best)
    return variants


def _within_speed_limits(pp: PlanProblem, opt: OptimizationResult, limits: MotorLimits,
                         warnings: list[str]) -> OptimizationResult:
    """The optimum, with the motors it drives faster than their servos' speed limit projected onto their closest
    speed-feasible profiles (:func:`~retarget.optimize.limits.speed_feasible_parameters`) and re-simulated.

    Both optimizers hold the speed limit by a penalty, which a long step can cross where the tracking gains more
    (a Levenberg–Marquardt plan of the boxer left head_yaw at 10.4 rad/s against 8.06); the trajectory server
    rejects such a plan, and a servo could not play it. One forward run (every model of a robust objective), only
    when a motor is over its limit; the warning says by how much the objective changed.
    """
    if not any(v.kind == "velocity" for v in check_profile_limits(pp.problem.profiles(opt.x), limits)):
        return opt
    projection = speed_feasible_parameters(pp.fit.profiles, pp.fit.parametrization, opt.x, limits, pp.bounds)
    if not projection.changed:
        return opt
    best = pp.evaluate(projection.x, gradient=False)
    changes = ", ".join(f"{n} by up to {np.degrees(float(c)):.1f}°"
                        for n, c in zip(projection.joint_names, projection.max_change) if n in projection.projected)
    warnings.append(f"the optimum exceeded the speed limit of {', '.join(projection.projected)}: returned on the "
                    f"closest speed-feasible profiles ({changes}), re-simulated: J {opt.objective_final:.6g} -> "
                    f"{float(best.value):.6g}")
    return replace(opt, x=projection.x, best=best, objective_final=float(best.value))


def _settles(pp: PlanProblem, options: PlanOptions, engine_factory: Callable[[float], Engine] | None,
             opt: OptimizationResult, ring_out: bool) -> bool:
    """Whether the settle refinement runs (:attr:`PlanOptions.settle_iterations`)."""
    from retarget.optimize.gauss_newton import MAX_PARAMETERS, supports_tangent

    return (int(options.settle_iterations) > 0 and options.window is None and engine_factory is not None
            and ring_out and not (opt.interrupted or opt.budget_limited)
            and pp.problem.parametrization.n_parameters <= MAX_PARAMETERS and supports_tangent(pp.problem))


def _settle(pp: PlanProblem, options: PlanOptions, opt: OptimizationResult,
            engine_factory: Callable[[float], Engine], workers: int, deadline: Deadline | None,
            progress: Callable[[str, int, int], None] | None) -> tuple[OptimizationResult, SettleReport]:
    """The settle refinement of ``opt.x`` (:mod:`retarget.optimize.settle`); the result carries the refined point,
    its objective (every model of the robust objective, forward only) and the refinement's report."""
    from retarget.optimize.problem import motion_stop_time
    from retarget.optimize.settle import STOPPED, settle_refinement
    from retarget.planning.verification import commanded_stop_time

    times = pp.targets.times
    angles = np.asarray(pp.problem.profiles(opt.x).evaluate(times))
    ring_from = max(motion_stop_time(pp.motion), commanded_stop_time(times, angles))
    problems = [(1.0, pp.problem)] + [(float(f), pp.on_engine(engine_factory(float(f))))
                                      for f in options.settle_band if float(f) != 1.0]
    caps = (1.0 - float(options.torque_margin)) * np.asarray(pp.limits.stall_torque, dtype=float)
    lower, upper = pp.bound_arrays()
    violations = len(check_profile_limits(pp.problem.profiles(opt.x), pp.limits))

    def admissible(x_new: NDArray[np.float64]) -> bool:  # no new position or speed limit violation
        return len(check_profile_limits(pp.problem.profiles(x_new), pp.limits)) <= violations

    x, _, report = settle_refinement(problems, opt.x, ring_from, caps, lower, upper,
                                     int(options.settle_iterations), float(options.settle_radius),
                                     float(options.settle_peak_allowance), workers,
                                     deadline,
                                     None if progress is None else (lambda k, n: progress("settle refinement", k, n)),
                                     admissible)
    if report.message.startswith(STOPPED):
        opt = replace(opt, interruption=report.message[len(STOPPED):])
    if report.iterations == 0:
        return opt, report
    best = pp.evaluate(x, gradient=False)
    return replace(opt, x=x, best=best, objective_final=float(best.value)), report


def _optimize_within_torque(pp: PlanProblem, options: PlanOptions, minimize: Callable[..., OptimizationResult],
                            x_start: NDArray[np.float64] | None,
                            callback: Callable[[dict[str, float]], None] | None,
                            step_cb: Callable[[int, int], None] | None, deadline: Deadline | None, reserve: float,
                            warnings: list[str], reserve_s: float = 0.0) -> tuple[OptimizationResult, PlanProblem]:
    """Optimize; while the optimum asks more than the stall torque, optimize again from it with the torque
    penalty's weight × 10 (at most ``options.torque_rounds`` times). Returns the result and the problem last used.
    ``reserve`` evaluations and ``reserve_s`` seconds are kept before the deadline."""
    opt = minimize(pp, options, x0=x_start, callback=callback, step_progress=step_cb, deadline=deadline,
                   reserve_evaluations=reserve, reserve_s=reserve_s)
    weight = float(options.torque_weight)
    for _ in range(int(options.torque_rounds) if weight > 0 and options.window is None else 0):
        tau = opt.best.rollout.matrix[:, pp.problem.engine.motor_torque_index]
        ratio = max(torque_report(pp.targets.times, tau, pp.limits).ratio)
        if ratio <= 1.0 or opt.interrupted or opt.budget_limited:
            break
        weight *= 10.0
        warnings.append(f"the optimum asked {ratio:.2f} x the stall torque: optimizing again with the torque "
                        f"penalty's weight at {weight:g}")
        pp = _with_torque_weight(pp, weight, options)
        again = minimize(pp, options, x0=opt.x, callback=callback, step_progress=step_cb, deadline=deadline,
                         reserve_evaluations=reserve, reserve_s=reserve_s)
        opt = continued(opt, again)
    return opt, pp


def continued(first: OptimizationResult, again: OptimizationResult) -> OptimizationResult:
    """``again`` — an optimization started from ``first``'s optimum — as one run from ``first``'s start: its
    initial objective and evaluation, and the iterations, evaluations, history, failed simulations and restarts of
    both."""
    return replace(again, objective_initial=first.objective_initial, initial=first.initial,
                   iterations=first.iterations + again.iterations, evaluations=first.evaluations + again.evaluations,
                   history=first.history + again.history,
                   failed_simulations=first.failed_simulations + again.failed_simulations,
                   restarts=first.restarts + again.restarts)


def _with_torque_weight(pp: PlanProblem, weight: float, options: PlanOptions) -> PlanProblem:
    """``pp`` with the torque penalty at ``weight`` in every model of its objective."""
    engine = pp.problem.engine
    penalty = TorquePenalty.build(options.dt, pp.limits, weight, options.torque_margin, engine.servos.per_motor,
                                  engine.shaft_speed_index)
    problem = replace(pp.problem, torque_penalty=penalty)
    ensemble = None if pp.ensemble is None else replace(
        pp.ensemble, nominal=problem, members=tuple(replace(m, torque_penalty=penalty) for m in pp.ensemble.members))
    return replace(pp, problem=problem, ensemble=ensemble)


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
    minutes of its budget compiling (with an empty numba cache, compiling the drummer's kernels takes longer than a
    3-minute budget; docs/optimize.md "Time budget"). With the kernels cached it costs a few short simulations.
    ``progress(stage, done, total)`` is called as by :func:`run_plan` (and may raise to stop it).

    Raises:
        KeyboardInterrupt: Ctrl-C during the warm-up (:class:`PlanCancelled`: a cancel from ``progress``) — the plan
            it prepares should not start.
    """
    started = time.perf_counter()
    short = replace(options, duration=max(WARM_UP_S, 3.0 * float(options.dt)), max_iterations=1, time_budget=None,
                    verify_dt=None, stiffness_band=(), torque_rounds=0)
    result = run_plan(engine, motion, bodies, limits, short, progress)
    if result.optimization.interrupted:  # the optimizer returns its best point on Ctrl-C and cancels: not here
        raise PlanCancelled(WARM_UP_STAGE) if result.optimization.interruption == "cancel requested" \
            else KeyboardInterrupt
    if options.verify_dt is not None and options.verify_dt > 0:
        verify_plan(result, float(options.verify_dt), None if progress is None
                    else (lambda k, n: progress("verifying", k, n)))
    return time.perf_counter() - started
