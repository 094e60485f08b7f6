"""Checking a plan in models it was not optimized on.

A plan's cut measured in the reduced model it was optimized on says little about the robot: the optimizer exploits
that model's exact frequencies. Two checks here measure it elsewhere:

- :func:`verify_full`: the naive, ZVD and optimized motor trajectories re-simulated in the **full FEM** of the
  robot (no reduced basis, no cubature, a finer step) — a model the optimizer never saw. Its flexible parts are the
  training mesh's, whose frequencies the model card (:mod:`retarget.fem.modal`) compares with a mesh-converged
  reference. Affordable for robots of a few thousand deformable DOFs (single_rod, two_rods, fit_rig); the cost is
  estimated first (:func:`~retarget.planning.budget.full_verification_cost`).
- :func:`verify_reduced`: the same three re-simulated in an **independently trained reduced model** — another
  ``retarget reduce`` artifact of the robot, on a finer mesh and its own training, kept apart from the planning
  models (``<model folder>/verify/``, :func:`retarget.sim.reduced.store.verification_candidates`). For robots whose
  full FEM is beyond the verification's budget (the characters); the report names the file, its mesh and modes.
- :func:`stiffness_band`: the same trajectories in the reduced model with every flexible part's stiffness scaled
  (a robot whose parts are a few per cent stiffer or softer, e.g. a material-fit error): the cut across that band,
  beside ZVD's, which is robust by design.

Both measure like the planner: tracked bodies' centres of mass against the input's quasi-static targets (cubic
interpolation of the planner's targets onto the finer grid), plus the peak deviation once the motion has stopped
(``ring_out_peak_m``) and the peak motor torque over stall.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import rollout
from retarget.optimize.control import BudgetExhausted, Deadline, guarded_progress
from retarget.optimize.errors import PlanCancelled
from retarget.optimize.limits import MotorLimits, torque_report
from retarget.optimize.objective import deviation_metrics
from retarget.optimize.parallel import default_workers, fork_pool, run_shared
from retarget.planning.budget import deformable_dofs, full_verification_cost
from retarget.planning.checks import (
    MEANINGFUL_CUT,
    NO_CUT_SLACK,
    BandResult,
    FinerStepCheck,
    ModelKind,
    NaiveAtFinerStep,
    PlanChecks,
    RunFigures,
    StiffnessBand,
    Verdict,
    Verification,
    band_from_entries,
    finer_step_holds,
)
from retarget.planning.options import VerifyModel, band_offloaded
from retarget.planning.variants import start_of

if TYPE_CHECKING:  # pragma: no cover
    from retarget.model.robot import RobotModel
    from retarget.optimize.adjoint import TrackedPoses
    from retarget.optimize.bspline import MotorProfiles
    from retarget.optimize.problem import PlanProblem
    from retarget.planning.model import PlanningModel
    from retarget.planning.options import PlanOptions
    from retarget.planning.variants import PlanResult
    from retarget.sim.engine import Engine, EngineState
    from retarget.sim.motors import SplineMotors
    from retarget.sim.reduced.store import ReducedRobotModel
    from retarget.sim.system import System

    #: What the full-FEM runs share with their workers (:func:`verify_full`): the system, the tracked links, the
    #: motor rows of λ, per variant (motors, duration [s], dt [s], stop time [s]), the target times [s] and
    #: positions [m], and the motor limits.
    _FullShared = tuple[System, list[str], NDArray[np.int64], dict[str, tuple[SplineMotors, float, float, float]],
                        NDArray[np.float64], NDArray[np.float64], MotorLimits]
    #: What the band's runs share with their workers (:func:`stiffness_band`): the plan, the engine factory and the
    #: variants.
    _BandShared = tuple[PlanResult, Callable[[float], Engine], tuple[str, ...]]

__all__ = [
    "MEANINGFUL_CUT",
    "NO_CUT_SLACK",
    "VERIFIED_VARIANTS",
    "check_plan",
    "commanded_stop_time",
    "finer_step_holds",
    "gate_model",
    "naive_at_finer_step",
    "scaled_stiffness_model",
    "stiffness_band",
    "trajectory_metrics",
    "variant_motors",
    "verify_full",
    "verify_metrics",
    "verify_plan",
    "verify_reduced",
]

#: The variants re-simulated, in order (those the plan has).
VERIFIED_VARIANTS: tuple[str, ...] = ("naive", "zvd", "optimized")


def variant_motors(times: NDArray[np.float64], angles: NDArray[np.float64]) -> SplineMotors:
    """A motor trajectory through a variant's commanded angles on the planning grid (cubic spline, C²)."""
    from retarget.sim.motors import SplineMotors

    return SplineMotors(np.asarray(times, dtype=float), np.asarray(angles, dtype=float))


def trajectory_metrics(times: NDArray[np.float64], positions: NDArray[np.float64], torques: NDArray[np.float64],
                       target_times: NDArray[np.float64], target_positions: NDArray[np.float64], stop_time: float,
                       limits: MotorLimits) -> RunFigures:
    """Deviation and torque figures of one simulated run.

    Args:
        times: run sample times [s] (n,).
        positions: tracked centres of mass [m] (n, k, 3).
        torques: motor torques [N m] (n, n_motors).
        target_times, target_positions: the planner's quasi-static targets [s], [m] (n_t,), (n_t, k, 3).
        stop_time: when the run's commanded motion stops moving [s] (:func:`commanded_stop_time`): the ring-out is
            measured after it.
        limits: motor limits (stall torques).

    Returns:
        The run's figures, with its ring-out.
    """
    from scipy.interpolate import CubicSpline

    t = np.asarray(times, dtype=float)
    keep = t <= float(target_times[-1]) + 1e-9
    t, pos = t[keep], np.asarray(positions)[keep]
    target = CubicSpline(target_times, target_positions, axis=0)(t)
    deviation = deviation_metrics(pos, target)
    after = t >= stop_time
    dist = np.linalg.norm(pos - target, axis=-1)
    return RunFigures(deviation["peak_deviation_m"], deviation["rms_deviation_m"],
                      float(max(torque_report(t, np.asarray(torques)[keep], limits).ratio)),
                      float(dist[after].max()) if after.any() else 0.0)


def commanded_stop_time(times: NDArray[np.float64], angles: NDArray[np.float64], tolerance: float = 1e-3) -> float:
    """When a variant's commanded motors have settled [s]: from then on every motor stays within ``tolerance``
    [rad] of its final angle. The ring-out starts there: a shaped or optimized motion may end later than the input
    (its lag is not ringing), and an optimized one may keep correcting by hundredths of a degree until the end."""
    t = np.asarray(times, dtype=float)
    a = np.asarray(angles, dtype=float).reshape(len(t), -1)
    away = np.flatnonzero(np.any(np.abs(a - a[-1]) > tolerance, axis=1))
    return float(t[min(away[-1] + 1, len(t) - 1)]) if away.size else float(t[0])


def scaled_stiffness_model(model: RobotModel, factor: float) -> RobotModel:
    """``model`` (a :class:`retarget.model.RobotModel`) with every flexible part's Young's modulus × ``factor``."""
    if factor == 1.0:
        return model
    parts = tuple(replace(p, material=replace(p.material, youngs_modulus=p.material.youngs_modulus * factor))
                  for p in model.flexible_parts)
    return replace(model, flexible_parts=parts)


def verify_full(result: PlanResult, model: RobotModel, dt: float, stiffness: float = 1.0,
                variants: Sequence[str] = VERIFIED_VARIANTS,
                progress: Callable[[str, int, int], None] | None = None,
                workers: int | None = None) -> Verification:
    """Re-simulate the plan's variants in the full FEM of ``model`` at step ``dt`` [s].

    Args:
        result: the plan.
        model: the :class:`retarget.model.RobotModel` to simulate in full (the planning model's mesh).
        dt: the full simulation's step [s].
        stiffness: factor on every flexible part's Young's modulus (1: the nominal robot).
        variants: which of the plan's variants to re-simulate (those it has).
        progress: ``progress(stage, step, n_steps)`` (of the run in this process).
        workers: forked processes for the other variants' runs (:mod:`retarget.optimize.parallel`; None: one per
            core; 1: all here, one after another).

    Returns:
        The :class:`Verification` (:class:`ModelKind` ``FULL_FEM``): each variant's figures
        (:func:`trajectory_metrics`) and their ratios.
    """
    from retarget.sim.system import build_system

    started = time.perf_counter()
    pp = result.pp
    system = build_system(scaled_stiffness_model(model, stiffness))
    links = list(pp.problem.tracking.links)
    from retarget.sim.engine import motor_rows

    rows = motor_rows(system.constraints, system.lambda_offsets, len(system.motors))
    duration = float(pp.targets.times[-1])
    out: dict[str, RunFigures] = {}
    names = [name for name in variants if name in result.variants]
    runs = {name: (variant_motors(pp.targets.times, result.variants[name].angles), duration, dt,
                   commanded_stop_time(pp.targets.times, result.variants[name].angles)) for name in names}
    shared = (system, links, rows, runs, pp.targets.times, pp.targets.positions, pp.limits)
    with fork_pool(shared, min(len(names) - 1, default_workers() if workers is None else workers)) as pool:
        futures = {} if pool is None else {n: pool[0].submit(run_shared, pool[1], partial(_full_run, name=n))
                                           for n in names[1:]}
        # The first variant here (with progress), the others in the workers meanwhile.
        for name in names[:1] if pool is not None else names:
            cb = None if progress is None else (lambda k, n, s=name: progress(f"full FEM: {s}", k, n))
            out[name] = _full_run(shared, name, cb)
        for name, future in futures.items():
            out[name] = future.result()
    return Verification({name: out[name] for name in names}, ModelKind.FULL_FEM, float(dt), float(stiffness),
                        int(system.n_deformable_dofs), time.perf_counter() - started)


def _full_run(shared: _FullShared, name: str, progress: Callable[[int, int], None] | None = None) -> RunFigures:
    """One variant in the full FEM (in a worker or here): its :func:`trajectory_metrics`."""
    from retarget.sim.simulate import simulate

    system, links, rows, runs, target_times, target_positions, limits = shared
    motors, duration, dt, stop = runs[name]
    run = simulate(system, motors, duration, dt, progress=progress)
    positions = np.stack([run.body_position(link) for link in links], axis=1)
    return trajectory_metrics(run.time, positions, run.constraint_forces[:, rows], target_times, target_positions,
                              stop, limits)


def verify_reduced(result: PlanResult, verification: ReducedRobotModel, dt: float, stiffness: float = 1.0,
                   variants: Sequence[str] = VERIFIED_VARIANTS,
                   progress: Callable[[str, int, int], None] | None = None) -> Verification:
    """Re-simulate the plan's variants in another reduced model of the robot at step ``dt`` [s].

    Args:
        result: the plan.
        verification: the verification model (a :class:`~retarget.sim.reduced.store.ReducedRobotModel` loaded from
            an artifact trained independently of the planning model).
        dt: the step [s].
        stiffness: factor on every flexible part's stiffness (1: the nominal robot).
        variants: which of the plan's variants to re-simulate (those it has).
        progress: ``progress(stage, step, n_steps)``.

    Returns:
        The :class:`Verification` (:class:`ModelKind` ``REDUCED``: its ``file``, the ``deformable_dofs`` of its
        mesh and its ``modes`` per part): each variant's figures (:func:`trajectory_metrics`) and their ratios.
    """
    from retarget.optimize.adjoint import TrackedPoses
    from retarget.sim.adapters import planner_engine
    from retarget.sim.reduced.system import with_stiffness_scale

    started = time.perf_counter()
    pp = result.pp
    system = verification.reduced if stiffness == 1.0 else with_stiffness_scale(verification.reduced, stiffness)
    engine = planner_engine(system)
    poses = TrackedPoses.build(engine, list(pp.problem.tracking.links))
    n = int(round(float(pp.targets.times[-1]) / dt))
    runs = _variant_runs(result, engine, poses, dt, n, variants, "verification model", progress)
    modes = verification.info.get("modes")
    return Verification(runs, ModelKind.REDUCED, float(dt), float(stiffness),
                        int(verification.info.get("full_dofs", 0)) or None, time.perf_counter() - started,
                        str(verification.info.get("file", "")), None if modes is None else tuple(int(m) for m in modes))


def load_verification_model(robot: str | Path, path: str | Path,
                            planning_info: Mapping[str, object]) -> ReducedRobotModel:
    """The verification artifact at ``path`` for ``robot``, checked to be another model than the planning one.

    Raises:
        InputError: the file is the planning model's, or a stale/foreign artifact (its message names why).
    """
    from retarget.errors import InputError
    from retarget.sim.reduced.store import load_artifact

    path = Path(path)
    planning_file = planning_info.get("file") or planning_info.get("cache_file")
    if planning_file and Path(planning_file).resolve() == path.resolve():
        raise InputError(f"verification model {path}: it is the planning model; verify in a model trained "
                         "independently (another mesh and training: `retarget reduce ... --mesh-scale` into a "
                         "verify/ model folder)")
    vm = load_artifact(robot, path)
    modes = [int(b.basis.size - b.basis.n_rigid) for b in vm.reduced.bodies]  # deformation coordinates per part
    return type(vm)(vm.model, vm.config, vm.reduced, {**vm.info, "full_dofs": deformable_dofs(vm.model),
                                                      "modes": modes})


def stiffness_band(result: PlanResult, factors: Sequence[float], engine_factory: Callable[[float], Engine],
                   variants: Sequence[str] = VERIFIED_VARIANTS) -> StiffnessBand:
    """The plan's variants re-simulated in the planning model with the flexible parts' stiffness scaled.

    Args:
        result: the plan.
        factors: stiffness factors (e.g. 0.9, 1.1: frequencies about ∓5 %).
        engine_factory: ``engine_factory(factor)`` → an engine of the planning model with that stiffness.
        variants: which variants.

    Returns:
        One :class:`BandResult` per factor, in order (the variants' figures and their ratios), and the
        ``worst_peak_ratio`` over the band.
    """
    return StiffnessBand(_band_entries((result, engine_factory, tuple(variants)), factors))


def _band_entries(shared: _BandShared, factors: Sequence[float]) -> tuple[BandResult, ...]:
    """:func:`stiffness_band`'s runs of ``factors`` (in a worker or here; ``shared``: the plan, the engine factory
    and the variants)."""
    result, engine_factory, variants = shared
    prob = result.pp.problem
    return tuple(BandResult(_variant_runs(result, engine_factory(float(factor)), prob.poses, prob.dt, prob.n_steps,
                                          variants), float(factor)) for factor in factors)


def _variant_runs(result: PlanResult, engine: Engine, poses: TrackedPoses, dt: float, n_steps: int,
                  variants: Sequence[str],
                  stage: str = "", progress: Callable[[str, int, int], None] | None = None) -> dict[str, RunFigures]:
    """The plan's ``variants`` (those it has) simulated in a reduced ``engine`` from its static start at the first
    commanded pose, ``n_steps`` of ``dt`` [s]: :func:`trajectory_metrics` per variant (``poses``: the tracked bodies
    in that engine's state; ``progress(f"{stage}: {variant}", step, n_steps)``)."""
    pp = result.pp
    starts: dict[bytes, EngineState] = {}
    out: dict[str, RunFigures] = {}
    for name in (v for v in variants if v in result.variants):
        angles = result.variants[name].angles
        cb = None if progress is None else (lambda k, m, s=name: progress(f"{stage}: {s}", k, m))
        # Each variant from the static equilibrium at its first command (modelled servos: the naive playback's
        # first goal is the input's pose, the plan's the one that holds it against the servo's sag).
        key = np.asarray(angles[0], dtype=float).tobytes()
        if key not in starts:
            starts[key] = engine.solve_static(np.asarray(angles[0], dtype=float))
        run = rollout(engine, starts[key], variant_motors(pp.targets.times, angles), dt, n_steps, cb)
        out[name] = trajectory_metrics(run.times, poses.positions(run.matrix), run.matrix[:, engine.motor_torque_index],
                                       pp.targets.times, pp.targets.positions,
                                       commanded_stop_time(pp.targets.times, angles), pp.limits)
    return out


def _finer_run(pp: PlanProblem, profiles: MotorProfiles, dt: float,
               progress: Callable[[int, int], None] | None) -> RunFigures:
    """``profiles`` simulated in the planning model at the finer step ``dt`` [s]: deviation metrics against the
    targets (interpolated, cubic) and the peak torque ratio."""
    from scipy.interpolate import CubicSpline

    prob = pp.problem
    n = int(round(prob.n_steps * prob.dt / dt))
    target = CubicSpline(pp.targets.times, pp.targets.positions, axis=0)(np.arange(n + 1) * dt)
    run = rollout(prob.engine, start_of(prob, profiles.value(0.0)), profiles, dt, n, progress)
    deviation = deviation_metrics(prob.poses.positions(run.matrix), target)
    return RunFigures(deviation["peak_deviation_m"], deviation["rms_deviation_m"],
                      float(max(torque_report(run.times, run.matrix[:, prob.engine.motor_torque_index],
                                              pp.limits).ratio)))


def naive_at_finer_step(pp: PlanProblem, dt: float,
                        progress: Callable[[int, int], None] | None = None) -> NaiveAtFinerStep:
    """The naive playback (the input's fit) at the finer step ``dt`` [s], as :func:`verify_plan` measures it, and
    its wall time (what one verification run costs). A budgeted plan runs it
    before the optimization, to keep the measured time of the optimized run for the verification, and
    :func:`verify_plan` uses it instead of simulating the naive playback again.

    Raises:
        ValueError: ``dt`` not positive.
    """
    if not dt > 0.0:
        raise ValueError(f"verification step must be positive, got {dt}")
    started = time.perf_counter()
    naive = _finer_run(pp, pp.input_fit.profiles, dt, progress)
    return NaiveAtFinerStep(float(dt), naive, time.perf_counter() - started)


def verify_plan(result: PlanResult, dt: float, progress: Callable[[int, int], None] | None = None) -> FinerStepCheck:
    """Re-simulate the naive and optimized profiles at a finer step ``dt`` [s] and measure them against the targets.

    The optimizer sees the robot only at the planning step; profiles it tuned there may excite modes that BDF2 at
    that step damps or delays, and then the improvement is the discretization's, not the robot's (the drummer at
    5 ms: peak 0.65 × naive at 5 ms, 1.05 × at 1 ms; docs/optimize.md). The targets are interpolated (cubic) to
    the finer grid. ``progress(done, total)`` is called per step of each run (and may raise to stop them). The
    naive playback is taken from ``result.verify_naive`` when the plan ran it at this ``dt``
    (:func:`naive_at_finer_step`).

    Returns:
        The naive and optimized figures at ``dt`` and the peak ratio at the planning step: the
        :class:`FinerStepCheck` (its ``peak_ratio`` and ``holds``, :func:`finer_step_holds`).

    Raises:
        ValueError: ``dt`` not positive.
    """
    if not dt > 0.0:
        raise ValueError(f"verification step must be positive, got {dt}")
    started = time.perf_counter()
    pp = result.pp
    prob = pp.problem
    early = result.verify_naive
    if early is not None and early.dt_s == float(dt):
        naive = early.naive
    else:
        naive = _finer_run(pp, pp.input_fit.profiles, dt, progress)
    optimized = _finer_run(pp, result.profiles, dt, progress)
    plan_ratio = (result.variants["optimized"].metrics["peak_deviation_m"]
                  / result.variants["naive"].metrics["peak_deviation_m"])
    return FinerStepCheck(float(dt), int(round(prob.n_steps * prob.dt / dt)), naive, optimized, plan_ratio,
                          time.perf_counter() - started)


def verify_metrics(result: PlanResult, dt: float, deadline: Deadline | None = None,
                   progress: Callable[[str, int, int], None] | None = None) -> FinerStepCheck | None:
    """:func:`verify_plan` for the plan's checks, with a warning appended to ``result.warnings`` when the
    improvement does not hold; None (and a warning) when the ``deadline`` passed first, or a cancel
    (:class:`PlanCancelled` from ``progress``) came first."""
    warnings = result.warnings
    planning_dt = result.pp.problem.dt
    step_progress = guarded_progress(deadline, None if progress is None
                                     else (lambda k, n: progress("verifying", k, n)))
    try:
        check = verify_plan(result, dt, step_progress)
    except (BudgetExhausted, PlanCancelled) as exc:
        why = "cancelled" if isinstance(exc, PlanCancelled) else "the time budget ran out"
        warnings.append(f"not verified at dt {dt:g} s: {why}")
        return None
    if not check.holds:
        what = "improvement does not hold" if check.planning_peak_ratio < 1.0 else "peak deviation is worse"
        warnings.append(f"the optimized profiles' {what} at dt {dt:g} s: peak deviation "
                        f"{check.peak_ratio:.2f}x naive there, {check.planning_peak_ratio:.2f}x at the "
                        f"planning dt {planning_dt:g} s - plan with a smaller dt")
    return check


def gate_model(pm: PlanningModel, allow: bool, say: Callable[[str], None]) -> str:
    """Report the planning model's card (``say``) and stop on a model outside the fidelity gate.

    Returns:
        A warning when ``allow`` let a model outside the gate through (or the model has no card), else "".

    Raises:
        ModelFidelityError: a part's frequencies miss the gate and ``allow`` is False.
    """
    from retarget.fem.model_card import ModelCard, ModelFidelityError, check_fidelity

    data = pm.info.get("model_card")
    if not data:
        return "the planning model has no model card: its frequencies are not checked"
    card = ModelCard.from_dict(data)
    say(card.format())
    try:
        check_fidelity(card, card.f1_tolerance, card.f2_tolerance)
    except ModelFidelityError as exc:
        if not allow:
            raise
        return f"planning on a model outside the fidelity gate (allowed by the caller): {exc}"
    return ""


def check_plan(result: PlanResult, model: RobotModel, options: PlanOptions, engine_factory: Callable[[float], Engine],
               steps: Callable[[str, int, int], None] | None = None, say: Callable[[str], None] | None = None,
               deadline: Deadline | None = None, robot: str | Path | None = None,
               planning_info: Mapping[str, object] | None = None) -> PlanChecks:
    """The plan measured in models it was not optimized on, and its headline (:class:`PlanChecks`).

    ``verify`` (the planning model at the finer ``options.verify_dt``: a numerical check), ``band`` (the planning
    model with the parts' stiffness × each of ``options.band``), ``verified`` (the full FEM,
    ``options.verify_model``; with a time budget only when its estimated cost fits before ``deadline``; when the
    full FEM is beyond ``options.verify_full_max_s`` or ``verify_model`` names a file: an independently trained
    reduced model, :func:`verify_reduced`), ``robot`` (name or YAML, for loading a verification model; default
    ``model.name``) and ``planning_info`` (the planning model's ``info``: its file is refused as verification model),
    ``verified_band`` (the full FEM again with every part's Young's modulus × each of ``options.verify_full_band``:
    the robustness of the cut in the model that was not optimized), the timings of each check (``verify``, ``band``,
    ``verified`` with its band), and the :class:`Verdict`: the headline (the verification model's optimized/naive
    peak ratio, else the planning model's), whether it is a meaningful cut (≤ :data:`MEANINGFUL_CUT`) and whether
    the optimized motion's peak torque, in the model the headline comes from, is within the servos' stall torque.
    Warnings go to ``result.warnings``.
    """
    def tell(text: str) -> None:
        if say is not None:
            say(text)

    if "optimized" not in result.variants or "naive" not in result.variants:
        return PlanChecks(Verdict.no_result())
    laps = _Laps()
    check, band = _planning_model_checks(result, options, engine_factory, steps, tell, deadline, laps)
    duration = float(result.pp.targets.times[-1])
    estimate = full_verification_cost(model, duration, options.verify_full_dt)
    robot = model.name if robot is None else robot
    kind, vm = _verification_model(result, model, options, deadline, robot, planning_info or {}, estimate)
    verified, verified_band = _verify_in(kind, vm, result, model, options, steps, tell, estimate)
    if verified is not None:
        laps.lap("verified")
    verdict = plan_verdict(result, verified)
    if not verdict.cut_reached:
        result.warnings.append(f"no meaningful cut: {verdict.cut_text}")
    return PlanChecks(verdict, check, band, verified, tuple(verified_band), laps.stages)


class _Laps:
    """The wall time of each check [s] (``stages``), each lap from the end of the one before."""

    def __init__(self) -> None:
        self.clock = time.perf_counter()
        self.stages: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = now - self.clock
        self.clock = now


def _planning_model_checks(result: PlanResult, options: PlanOptions, engine_factory: Callable[[float], Engine],
                           steps: Callable[[str, int, int], None] | None, tell: Callable[[str], None],
                           deadline: Deadline | None, laps: _Laps
                           ) -> tuple[FinerStepCheck | None, StiffnessBand | None]:
    """The checks in the planning model: at the finer ``options.verify_dt`` and with the parts' stiffness × each
    of ``options.band`` (part of the band in a forked worker while this process runs the rest)."""
    check: FinerStepCheck | None = None
    band: StiffnessBand | None = None
    verify = options.verify_dt is not None and options.verify_dt > 0
    factors = tuple(float(f) for f in options.band or ())
    # Both cores busy: part of the band in a forked worker while this process verifies and runs the rest.
    workers = default_workers() if options.workers is None else int(options.workers)
    offloaded = band_offloaded(len(factors), verify, workers)
    band_shared = (result, engine_factory, VERIFIED_VARIANTS)
    with fork_pool(band_shared, 1 if offloaded else 0, least=1) as pool:
        beside = None if pool is None else pool[0].submit(run_shared, pool[1],
                                                          partial(_band_entries, factors=factors[:offloaded]))
        if verify:
            tell(f"verifying the plan at dt {options.verify_dt:g} s (naive and optimized re-simulated)")
            check = verify_metrics(result, options.verify_dt, deadline, steps)
            laps.lap("verify")
        if factors:
            there = f"; x {', '.join(f'{f:g}' for f in factors[:offloaded])} in a worker process" if beside else ""
            tell(f"robustness band: stiffness x {', '.join(f'{f:g}' for f in factors)} (planning model{there})")
            entries = _band_entries(band_shared, factors if beside is None else factors[offloaded:])
            if beside is not None:
                entries += beside.result()
            band = band_from_entries(entries, factors)
            laps.lap("band")
    return check, band


def _verification_model(result: PlanResult, model: RobotModel, options: PlanOptions, deadline: Deadline | None,
                        robot: str | Path, planning_info: Mapping[str, object], estimate: float
                        ) -> tuple[ModelKind | None, ReducedRobotModel | None]:
    """The kind of model the plan is verified in (None: none; with a warning why in ``result.warnings``) and, for
    a reduced one, the model: ``options.verify_file``, else with ``verify_model`` auto the full FEM when its
    ``estimate`` [s] fits, else a verification artifact of the robot."""
    kind: ModelKind | None = ModelKind.FULL_FEM if options.verify_model is VerifyModel.FULL else None
    vm: ReducedRobotModel | None = None
    if options.verify_file is not None:
        vm = load_verification_model(robot, options.verify_file, planning_info)
        kind = ModelKind.REDUCED
    elif options.verify_model is VerifyModel.AUTO:
        room = options.verify_full_max_s if deadline is None else min(options.verify_full_max_s,
                                                                      deadline.remaining())
        kind = ModelKind.FULL_FEM if estimate <= room else None
        if kind is None:
            from retarget.sim.reduced.store import find_artifact, verification_candidates

            vm, skipped = find_artifact(robot, model.name, verification_candidates(model.name),
                                        lambda r, path: load_verification_model(r, path, planning_info))
            kind = None if vm is None else ModelKind.REDUCED
            if vm is None:
                from retarget.sim.reduced.store import VERIFY_SUBDIR, artifact_dirs

                folders = ", ".join(str(d / VERIFY_SUBDIR) for d in artifact_dirs())
                result.warnings.append(
                    f"not verified in another model: the full FEM's estimated {estimate:.0f} s exceed the "
                    f"{room:.0f} s allowed and there is no verification model of {model.name} in {folders}"
                    + (f" (skipped: {'; '.join(skipped)})" if skipped else "")
                    + f"; build one with `retarget reduce {model.name} --train-motion {model.name}/MOTION "
                    f"--mesh-scale 0.5 --out .cache-models/{VERIFY_SUBDIR}/{model.name}-MOTION.npz`. The plan's "
                    "figures are the planning model's")
    if vm is not None:
        vm = with_planned_servos(vm, model, result.warnings)
    return kind, vm


def with_planned_servos(vm: ReducedRobotModel, model: RobotModel, warnings: list[str]) -> ReducedRobotModel:
    """The verification model ``vm`` driven by the servos ``model`` plans for (a plan for a fitted servo file,
    ``retarget plan --servo``, is verified with the servos it was made for, as the full FEM verifies it), with
    ``info["servos_planned_for"]`` true when they differ from the ones it was trained with. Where one of them
    models a motor's servo loop and the other takes the servo as ideal, the basis has not seen that loop: ``vm`` is
    kept as it is and a line naming the motors goes to ``warnings``."""
    from retarget.model.servo import ideal_flips
    from retarget.sim.reduced.system import with_servos

    planned, trained = list(model.servo_list), list(vm.model.servo_list)
    if planned == trained:
        return vm
    motors = list(vm.model.motors)
    flips = ideal_flips(motors, trained, planned)
    if len(planned) != len(trained) or flips:
        warnings.append(f"the verification model {vm.info.get('file', '')} was trained with "
                        f"{'ideal' if trained and trained[0].ideal else 'modelled'} servos on "
                        f"{', '.join(flips or motors)}, the plan is for others: verified with the model's own servos")
        return vm
    return type(vm)(vm.model.with_servos(planned), vm.config, with_servos(vm.reduced, planned),
                    {**vm.info, "servos_planned_for": True})


def _verify_in(kind: ModelKind | None, vm: ReducedRobotModel | None, result: PlanResult, model: RobotModel,
               options: PlanOptions, steps: Callable[[str, int, int], None] | None, tell: Callable[[str], None],
               estimate: float) -> tuple[Verification | None, list[Verification]]:
    """The plan verified in the model of ``kind`` (the full FEM, or the reduced ``vm``), then again with the
    parts' stiffness × each of ``options.verify_full_band``; None and [] without one."""
    verified: Verification | None = None
    verified_band: list[Verification] = []
    dofs = deformable_dofs(model)
    if kind is ModelKind.FULL_FEM:
        where = f"{dofs} deformable DOFs" if dofs else "no flexible parts: its rigid-body engine"
        tell(f"verifying in the full FEM ({where}, dt {options.verify_full_dt:g} s, about {estimate:.0f} s): naive, "
             "ZVD and optimized")
        verified = verify_full(result, model, options.verify_full_dt, progress=steps, workers=options.workers)
        for factor in options.verify_full_band:
            tell(f"verifying in the full FEM with the parts' Young's modulus x {factor:g}")
            verified_band.append(verify_full(result, model, options.verify_full_dt, stiffness=float(factor),
                                             progress=steps, workers=options.workers))
    if kind is ModelKind.REDUCED and vm is not None:
        verify_file = vm.info.get("file")
        tell(f"verifying in the verification model {verify_file} ({vm.info['full_dofs']} deformable DOFs on its "
             f"mesh, the planning model's {dofs}; modes {vm.info['modes']}): naive, ZVD and optimized")
        if vm.info["full_dofs"] <= dofs:
            result.warnings.append(f"the verification model {verify_file} is on a mesh no finer than the planning "
                                   f"model's ({vm.info['full_dofs']} vs {dofs} deformable DOFs)")
        verified = verify_reduced(result, vm, options.verify_full_dt, progress=steps)
        for factor in options.verify_full_band:
            tell(f"verifying in the verification model with the parts' stiffness x {factor:g}")
            verified_band.append(verify_reduced(result, vm, options.verify_full_dt, stiffness=float(factor),
                                                progress=steps))
    return verified, verified_band


def plan_verdict(result: PlanResult, verified: Verification | None) -> Verdict:
    """The :class:`Verdict` of a plan with both a naive and an optimized variant: its headline from ``verified``
    when the plan was verified in another model (and the optimized motion's torque there), else from the planning
    model."""
    naive = result.variants["naive"].metrics["peak_deviation_m"]
    planned = result.variants["optimized"].metrics["peak_deviation_m"] / max(naive, 1e-300)
    torque = float(result.variants["optimized"].metrics["peak_torque_ratio"])
    ratio = None if verified is None else verified.peak_ratio
    if ratio is None:
        return Verdict(planned, None, "none", torque, torque)
    # The torque where the cut is judged: a cut the servos cannot drive is not played as planned.
    judged = torque if verified.optimized is None else verified.optimized.peak_torque_ratio
    return Verdict(planned, ratio, verified.model, torque, judged)
