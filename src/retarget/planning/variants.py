"""Simulated variants of a plan (naive, ZV/ZVD, optimized) measured against the targets, and the plan's result
(:class:`PlanResult`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.model.servo import ServoParams
from retarget.motion.motion import Motion
from retarget.optimize.adjoint import (
    AdjointProblem,
    Evaluation,
    rollout,
)
from retarget.optimize.bspline import MotorProfiles
from retarget.optimize.control import BudgetExhausted, Deadline
from retarget.optimize.limits import (
    TorqueReport,
    torque_report,
)
from retarget.optimize.objective import deviation_metrics
from retarget.optimize.problem import PlanProblem, motion_stop_time
from retarget.optimize.result import OptimizationResult
from retarget.optimize.settle import SettleReport
from retarget.planning.assumptions import ideal_servo_assumption
from retarget.planning.checks import NaiveAtFinerStep, PlanChecks, Verdict
from retarget.sim.engine import Engine, EngineState
from retarget.sim.motors import MotorTrajectory

__all__ = ["MIN_RING_OUT", "PlanResult", "Variant", "evaluation_variant", "measured_variant", "motion_stop_time",
           "PLANNED_SERVOS_PREFIX", "PLAN_SETTINGS_PREFIX", "declared_servos", "declared_with", "motion_digest",
           "plan_comments",
           "plan_settings", "planned_servos", "recorded_plan_settings", "ring_out_s",
           "servo_metrics", "servo_mismatches", "servo_refusal", "servo_summary", "shaped_baselines", "simulate_variant", "start_of",
           "training_range_of"]


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
        shafts: the simulated shaft angles [rad] (n_t, n_motors): where a modelled servo's shaft was (its goal is in
            ``angles``); None: the same as ``angles`` (ideal servos).
    """

    name: str
    angles: NDArray[np.float64]
    positions: NDArray[np.float64]
    torques: NDArray[np.float64]
    metrics: dict[str, float]
    training_range: dict[str, float] = field(default_factory=dict)
    shafts: NDArray[np.float64] | None = None

    @property
    def shaft_angles(self) -> NDArray[np.float64]:
        """The shaft angles [rad] (n_t, n_motors) (the commanded angles of ideal servos)."""
        return self.angles if self.shafts is None else self.shafts


def simulate_variant(pp: PlanProblem, name: str, motors: MotorTrajectory, extra: dict[str, float] | None = None,
                     progress: Callable[[int, int], None] | None = None) -> Variant:
    """Simulate motor trajectory ``motors`` (``value``/``derivative``) on the problem's grid and measure it."""
    prob = pp.problem
    run = rollout(prob.engine, start_of(prob, motors.value(0.0)), motors, prob.dt, prob.n_steps, progress)
    angles = np.array([np.atleast_1d(motors.value(t)) for t in pp.targets.times])
    return measured_variant(pp, name, angles, prob.poses.positions(run.matrix), run.matrix, extra)


def start_of(problem: AdjointProblem, goal: ArrayLike) -> EngineState:
    """The state a run of ``problem``'s engine commanded from ``goal`` (n_motors,) starts from: the problem's own
    start when it holds that goal, else the static equilibrium there (modelled servos: the naive playback starts
    from the input's first pose held as a goal, the plan from its sag-compensated one)."""
    goal = np.atleast_1d(np.asarray(goal, dtype=float))
    held = problem.parametrization.start_pose
    if held is None or np.allclose(np.asarray(held, dtype=float), goal, rtol=0.0, atol=1e-12):
        return problem.start
    return problem.engine.solve_static(goal, problem.start)


def measured_variant(pp: PlanProblem, name: str, angles: NDArray[np.float64], positions: NDArray[np.float64],
             states: NDArray[np.float64], extra: dict[str, float] | None = None) -> Variant:
    """A simulated variant measured against the targets (motor torques from the stored ``states`` (n_t, n_S))."""
    engine = pp.problem.engine
    tau = states[:, engine.motor_torque_index]
    metrics = deviation_metrics(positions, pp.targets.positions)
    metrics["peak_torque_ratio"] = max(torque_report(pp.targets.times, tau, pp.limits).ratio)
    shafts = None
    if not engine.servos.ideal and len(states) == len(angles):
        metrics.update(servo_metrics(engine, pp.targets.times, angles, states))
        shafts = np.stack([engine.shaft_angles(s, g) for s, g in zip(states, angles)])
    metrics.update(extra or {})
    return Variant(name, angles, positions, tau, metrics, training_range_of(pp.problem.engine, states), shafts)


def servo_metrics(engine: Engine, times: NDArray[np.float64], goals: NDArray[np.float64],
                  states: NDArray[np.float64]) -> dict[str, float]:
    """How a run's modelled servos followed their goals: ``peak_servo_error_deg`` (largest goal − shaft over the
    run and the motors) and ``peak_duty`` (largest PWM duty the loops commanded, as a fraction of full duty: at the
    duty limit a servo is saturated)."""
    from retarget.sim.servo import duty_cycle

    lay = engine.servos
    shafts = np.stack([engine.shaft_angles(s, g) for s, g in zip(states, goals)])
    rates = np.gradient(goals, times, axis=0) if len(times) > 1 else np.zeros_like(goals)
    duty = 0.0
    for m, k in enumerate(lay.motor_servo):
        if k < 0:
            continue
        par = lay.params[k]
        iota = states[:, lay.u_iota[k]] if lay.u_iota[k] >= 0 else np.zeros(len(states))
        w = states[:, engine.shaft_speed_index[m]]
        for n in range(len(states)):
            duty = max(duty, abs(duty_cycle(par, goals[n, m], rates[n, m], shafts[n, m], w[n], iota[n])))
    modelled = lay.motor_servo >= 0
    error = np.abs(goals - shafts)[:, modelled]
    return {"peak_servo_error_deg": float(np.degrees(error.max())) if error.size else 0.0, "peak_duty": float(duty)}


def training_range_of(engine: Engine, states: ArrayLike) -> dict[str, float]:
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
        checks: the plan measured in other models and its verdict
            (:func:`retarget.planning.verification.check_plan`); None: not checked (cancelled, or not yet).
        model_info: how the planning model was obtained, with its ``model_card``.
        cancelled: a cancel request stopped the optimizer.
        wall_s: the whole plan's wall time [s], model included (None: the sum of ``timings``).
        settle: the settle refinement's :class:`~retarget.optimize.settle.SettleReport`, or None (it did not run).
        verify_naive: the naive playback at ``options.verify_dt``, simulated before the optimization of a budgeted
            plan to time the verification (:func:`~retarget.planning.verification.naive_at_finer_step`), or None.
        naive_evaluation: the naive playback's evaluation (its simulation: the optimizer's first evaluation, or a run
            of its own when the optimizer starts elsewhere).
        assumptions: what the plan rests on about the hardware that its model does not hold
            (:func:`~retarget.planning.assumptions.hardware_assumptions`).
    """

    pp: PlanProblem
    optimization: OptimizationResult
    profiles: MotorProfiles
    variants: dict[str, Variant]
    torque: TorqueReport
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    objective_naive: float | None = None
    checks: PlanChecks | None = None
    model_info: dict[str, object] = field(default_factory=dict)
    cancelled: bool = False
    wall_s: float | None = None
    settle: SettleReport | None = None
    verify_naive: NaiveAtFinerStep | None = None
    naive_evaluation: Evaluation | None = None
    assumptions: tuple[str, ...] = ()

    def trajectory(self, start_time: float = 0.0) -> tuple[tuple[str, ...], NDArray[np.float64], NDArray[np.float64]]:
        """The optimized trajectory sampled at the simulation step: joint names, times [s] (from ``start_time``,
        the input's first time) (n,) and positions [rad] (n, n_joints)."""
        t = self.pp.targets.times
        return tuple(self.pp.motion.joint_names), t + float(start_time), np.asarray(self.profiles.evaluate(t))

    def output_motion(self, motion: Motion) -> Motion:
        """The optimized motor profiles as a motion at ``motion``'s sample rate, from its first time to the end of
        the plan: what ``retarget plan --out`` writes (``motion`` is the input that was planned)."""
        rate = 1.0 / float(np.median(np.diff(motion.time))) if motion.num_samples > 1 else 100.0
        t_stop = float(self.pp.targets.times[-1])
        return self.profiles.to_motion(self.pp.motion.joint_names, rate, t_stop=t_stop).shifted(float(motion.time[0]))

    @property
    def verdict(self) -> Verdict | None:
        """The checks' :class:`~retarget.planning.checks.Verdict` (None: the plan was not checked)."""
        return None if self.checks is None else self.checks.verdict

    def to_json(self) -> dict[str, object]:
        """The JSON report (``retarget plan --json``, the planner node's ``metrics_json``, the benchmarks'):
        ``objective_initial`` is ``J`` of the naive playback, ``objective_start`` that of the optimizer's start (they
        differ with a speed-feasible start)."""
        opt = self.optimization
        out: dict[str, object] = {
            "objective_initial": opt.objective_initial if self.objective_naive is None else self.objective_naive,
            "objective_start": opt.objective_initial,
            "start": "speed-feasible" if "speed_limited" in self.variants else "input",
            "objective_final": opt.objective_final,
            "iterations": opt.iterations,
            "evaluations": opt.evaluations,
            "value_evaluations": opt.value_evaluations,
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
        if self.wall_s is not None:
            out["wall_s"] = self.wall_s
        if self.checks is not None:
            out.update(self.checks.to_json())
        out["warnings"] = list(self.warnings)
        out["cancelled"] = self.cancelled
        if self.settle is not None:
            out["settle"] = asdict(self.settle)
        if self.model_info:
            out["model"] = dict(self.model_info)
        out["servos"] = servo_summary(self.pp.problem.engine)
        out["assumptions"] = list(self.assumptions)
        for name, v in self.variants.items():
            entry: dict[str, object] = dict(v.metrics)
            if v.training_range:
                entry["training_range_ratio"] = dict(v.training_range)
            out[name] = entry
        # The Retarget action's result fields (docs/ros.md).
        for name in ("naive", "optimized"):
            if name in self.variants:
                out[f"{name}_peak_deviation"] = self.variants[name].metrics["peak_deviation_m"]
                out[f"{name}_rms_deviation"] = self.variants[name].metrics["rms_deviation_m"]
        return out


class ServoSummary(TypedDict, total=False):
    """The servos a plan was made for (:func:`servo_summary`): per motor its config keys and ``description``, the
    modelled motors, and the ``assumption`` of a perfect position source where a motor is ideal."""

    motors: dict[str, dict[str, object]]
    modelled: list[str]
    assumption: str


def servo_summary(engine: Engine) -> ServoSummary:
    """The servo model a plan was made for: per motor its parameters (SI, the robot config's keys) and one line;
    ``assumption`` names the perfect position source where a motor is ideal (the report of every plan that rests on
    it says so)."""
    per_motor = engine.servos.per_motor
    names = list(engine.motor_names)
    ideal = [n for n, s in zip(names, per_motor) if s.ideal]
    out: ServoSummary = {
        "motors": {n: {**s.to_config(), "description": s.describe()} for n, s in zip(names, per_motor)},
        "modelled": [n for n, s in zip(names, per_motor) if not s.ideal],
    }
    if ideal:
        out["assumption"] = ideal_servo_assumption(ideal)
    return out


#: The comment line of a plan CSV (``retarget plan --out``) that records the servos the plan was made for.
PLANNED_SERVOS_PREFIX = "servos planned for: "

#: The comment line of a plan CSV that records how its profiles were parametrized and which input they plan
#: (``retarget refine`` rebuilds the plan's parameters from it): JSON with ``knot_spacing_s``, ``dt_s``,
#: ``duration_s``, ``rest_from_s`` (the motors hold still from there on, from the input's start; null: only the
#: end is at rest) and ``input_sha256`` (:func:`motion_digest` of the input in the planner's motor order).
PLAN_SETTINGS_PREFIX = "plan settings: "


def plan_comments(result: PlanResult) -> list[str]:
    """The comment lines a plan's CSV starts with: what wrote it and the servos it was planned for (one JSON
    mapping of motor → the robot config's servo keys), which ``retarget play`` compares with the robot's."""
    import json

    servos = servo_summary(result.pp.problem.engine)
    plain = {n: {k: v for k, v in m.items() if k != "description"} for n, m in servos["motors"].items()}
    lines = ["retarget plan: optimized goal positions for the robot's servos (docs/optimize.md)",
             PLANNED_SERVOS_PREFIX + json.dumps(plain, sort_keys=True),
             PLAN_SETTINGS_PREFIX + json.dumps(plan_settings(result.pp), sort_keys=True)]
    lines.extend(ASSUMPTION_PREFIX + a for a in result.assumptions)
    return lines


def plan_settings(pp: PlanProblem) -> dict[str, object]:
    """The parametrization and input of a plan problem as its CSV records them (:data:`PLAN_SETTINGS_PREFIX`)."""
    profiles, par = pp.problem.template, pp.problem.parametrization
    rest = None if par.rest_control is None else profiles.t0 + int(par.rest_control) * profiles.knot_spacing
    return {"knot_spacing_s": float(profiles.knot_spacing), "dt_s": float(pp.problem.dt),
            "duration_s": float(pp.problem.n_steps * pp.problem.dt), "rest_from_s": rest,
            "input_sha256": motion_digest(pp.motion)}


def motion_digest(motion: Motion) -> str:
    """A SHA-256 of a motion's joint names, times and angles (rounded to 1e-9 s and rad: a motion read back from
    any of its file formats has the same digest)."""
    import hashlib

    digest = hashlib.sha256(",".join(motion.joint_names).encode())
    digest.update(np.round(np.asarray(motion.time, dtype=float) * 1e9).astype(np.int64).tobytes())
    digest.update(np.round(np.asarray(motion.positions, dtype=float) * 1e9).astype(np.int64).tobytes())
    return digest.hexdigest()


def comment_json(lines: Iterable[str], prefix: str) -> dict[str, object] | None:
    """The JSON object on the first of ``lines`` that starts with ``prefix``, or None (none, or not a JSON object)."""
    import json

    for line in lines:
        if line.startswith(prefix):
            try:
                data = json.loads(line[len(prefix):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def recorded_plan_settings(path: str | Path) -> dict[str, object] | None:
    """The settings a plan CSV records (:data:`PLAN_SETTINGS_PREFIX`), or None when it does not say."""
    from retarget.motion.csv_format import read_comments

    return comment_json(read_comments(path), PLAN_SETTINGS_PREFIX)


def planned_servos(path: str | Path) -> dict[str, dict[str, object]] | None:
    """The servos a plan CSV says it was planned for (motor → servo keys), or None when it does not say."""
    from retarget.motion.csv_format import read_comments

    return cast("dict[str, dict[str, object]] | None", comment_json(read_comments(path), PLANNED_SERVOS_PREFIX))


#: The comment lines of a plan CSV that state what it assumes of the hardware, one each.
ASSUMPTION_PREFIX = "assumption: "


def planned_assumptions(path: str | Path) -> list[str]:
    """What a plan CSV says it assumes of the hardware (its :data:`ASSUMPTION_PREFIX` comment lines), in order."""
    from retarget.motion.csv_format import read_comments

    return [c[len(ASSUMPTION_PREFIX):] for c in read_comments(path) if c.startswith(ASSUMPTION_PREFIX)]


def declared_servos(robot: str | Path, servo_file: str | Path | None = None) -> dict[str, ServoParams]:
    """Motor → :class:`~retarget.model.servo.ServoParams` the robot's config declares (its ``servo:`` section; read
    without loading meshes), with ``servo_file`` laid over them when given (the servos a planner that plans with
    the file knows the robot has: ``retarget plan --servo``, the node's ``servo_file``).

    Raises:
        ServoError: an unreadable or invalid servo file.
    """
    from retarget.model.library import resolve_robot
    from retarget.model.loader import read_robot_yaml
    from retarget.model.servo import servos_from_config

    path = Path(robot) if Path(str(robot)).is_file() else resolve_robot(str(robot))
    cfg = read_robot_yaml(path)
    motors = [str(m) for m in cfg.get("motors") or []]
    if servo_file is not None:
        from retarget.model.servo_file import servo_file_servos

        return dict(zip(motors, servo_file_servos(path, servo_file)))
    return dict(zip(motors, servos_from_config(cfg.get("servo"), motors)))


def declared_with(servo_file: str | Path | None) -> str:
    """The words after "the robot's config declares" in a message about :func:`declared_servos`."""
    return f" with the servo file {servo_file} laid over it" if servo_file else ""


def servo_refusal(metrics: Mapping[str, object], robot: str | Path, servo_file: str | Path | None = None) -> str:
    """Why a plan must not play on ``robot``: it was made for other servos than the robot's config declares, with
    ``servo_file`` laid over them when given (:func:`declared_servos`; ``metrics``: :meth:`PlanResult.to_json`); ""
    when it was made for them."""
    motors = (metrics.get("servos") or {}).get("motors")
    if not motors:
        return ""
    planned = {n: {k: v for k, v in m.items() if k != "description"} for n, m in motors.items()}
    diffs = servo_mismatches(planned, declared_servos(robot, servo_file))
    if not diffs:
        return ""
    return (f"the plan was made for other servos than the robot's config declares{declared_with(servo_file)} ("
            + "; ".join(diffs)
            + "): its goals pre-compensate those servos' sag and lag; not played")


def servo_mismatches(planned: Mapping[str, Mapping[str, object]], servos: Mapping[str, ServoParams],
                     rel: float = 0.02) -> list[str]:
    """Where the servos a plan was made for differ from ``servos`` (motor → :class:`ServoParams`): one line per
    motor and key (relative tolerance ``rel``; a model change or an ideal/modelled flip always counts)."""
    out = []
    for motor, params in servos.items():
        was = planned.get(motor)
        if was is None:
            out.append(f"{motor}: the plan does not say which servo it was made for")
            continue
        now = params.to_config()
        if str(was.get("model")) != str(now["model"]):
            out.append(f"{motor}: planned for {was.get('model')}, the robot has {now['model']}")
            continue
        for key, value in now.items():
            if key == "model" or key not in was:
                continue
            a, b = float(was[key]), float(value)
            if abs(a - b) > rel * max(abs(a), abs(b), 1e-12):
                out.append(f"{motor}: {key} planned {a:.4g}, the robot's {b:.4g}")
    return out


#: Ring-out after the input stops [s] that the ZV/ZVD baselines need to identify the vibration.
MIN_RING_OUT = 0.5


def ring_out_s(pp: PlanProblem) -> float:
    """Simulated time after the input stops moving [s]."""
    return float(pp.targets.times[-1]) - motion_stop_time(pp.motion)


def shaped_baselines(pp: PlanProblem, naive: Variant, progress: Callable[[str, int, int], None] | None,
                      warnings: list[str], deadline: Deadline | None = None) -> dict[str, Variant]:
    """ZV and ZVD shaping of the input at the first mode identified from the naive ring-out.

    A baseline still simulating at ``deadline`` or when Ctrl-C is pressed is dropped
    with a warning: the optimized result matters more.
    """
    from retarget.optimize.errors import ShapingError
    from retarget.optimize.shaping import identify_from_trajectory, shape_motion, zv_shaper, zvd_shaper
    from retarget.sim.motors import SplineMotors

    ring_out = ring_out_s(pp)
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
            if deadline is not None and deadline.passed():
                raise BudgetExhausted
            if progress is not None:
                progress(s, k, n)

        try:
            out[name] = simulate_variant(pp, name, motors, {"lag_s": shaper.lag_s, "frequency_hz": mode.frequency_hz,
                                                             "damping_ratio": mode.damping_ratio}, cb)
        except (BudgetExhausted, KeyboardInterrupt) as exc:
            why = "the time budget ran out" if isinstance(exc, BudgetExhausted) else "interrupted"
            warnings.append(f"ZV/ZVD baselines incomplete: {why} while simulating {name}")
            break
    return out


def evaluation_variant(pp: PlanProblem, name: str, x: NDArray[np.float64], ev: Evaluation,
                       problem: AdjointProblem | None = None) -> Variant:
    """The variant an evaluation of ``problem`` (default: the plan's) simulated (no new simulation)."""
    problem = pp.problem if problem is None else problem
    angles = np.asarray(problem.profiles(x).evaluate(pp.targets.times))
    return measured_variant(pp, name, angles, ev.positions, ev.rollout.matrix)
