"""Servo identification: the position loop of a Dynamixel carrying its load, fitted to a recorded step test.

The servo under test is simulated in the robot it drives — the load is the robot itself, its flexible parts
included — driven by the recorded goal, and its simulated shaft angle is compared with the recorded present
position at the recording's sample times::

    r_i = (θ_sim(t_i; p, τ) − present_i) / σ              [-]    σ = 1/√12 encoder tick (4096 per turn)

``p`` are the servo parameters fitted (:data:`FIT_PARAMETERS`: kp, ki, kd, rotor_inertia, coulomb_friction,
viscous_friction; some held, see below) and ``τ`` the goal's timing within a sample interval. Bounded least squares
(``scipy.optimize.least_squares``, trust region reflective) on internal coordinates: ``ln(p / p₀)`` for the gains
and inertia that must stay positive (kp, rotor_inertia), ``p / scale`` with a lower bound of 0 for the terms that
may vanish (ki, kd, the frictions: factory servos have no D, and a log coordinate never reaches 0). The Jacobian
is forward differences, one simulation per fitted coordinate.

How the recording becomes a simulation (:func:`prepare_step_test`):

- **Start**: the goal's first change (the step) is found in the recording's own goal column; the simulation
  starts :data:`REST_BEFORE_S` before it (at most at the first sample: a recording whose first second is missing
  is fine), from the quasi-static state at the goal then held — the servo at rest with its static sag.
- **Goal**: the recorded goal samples held between samples (the driver writes a goal per tick), each change
  smoothed over two simulation steps and moved earlier by ``τ`` ∈ [−2, 1] sample intervals (fitted: when the goal
  changed between two samples, and the command path's delay). Other motors hold their first recorded goal (a bag)
  or 0 (a CSV).
- **Load model**: the robot on a coarse mesh. With flexible parts, one full-FEM simulation of the recorded goal with
  the starting servo trains a reduced model (mass-PCA + cubature, :func:`retarget.sim.reduced.training.
  build_from_result`) whose compiled engine runs each candidate in a fraction of a second; the fitted servo is
  then simulated in the full FEM once more and the difference reported (:attr:`ServoFitResult.model_check_rad`).
  A rigid robot is simulated in full throughout.

What is held (:attr:`ServoFitResult.held`, each with its reason): the data sheet and control table's values
(stall_torque, max_velocity, duty_limit, kff1); ki when the servo has no integral action configured (a step test
shows integral action only through a steady state, and factory servos have I = 0); what the caller fixes; and what
the recording does not ask for. kp and the rotor inertia are always fitted; viscous friction, Coulomb friction, kd
(and ki when configured) join one at a time in that order, each kept only when it lowers the misfit χ² by more than
:data:`SELECTION_GAIN` (forward selection; kp and kd trade off through the error at which the duty leaves
saturation, so a kd the recording does not demand is held rather than left to soak up kp).

Uncertainties come from the Gauss–Newton covariance ``s² (JᵀJ)⁻¹`` with ``s² = max(1, Σr²/(n_runs − p))`` (the
quantization floor, or the residual when the model misses more than that; ``n_runs`` the independent readings,
:func:`run_weights`). Fitted terms the recording still does not separate (1σ beyond their scale) are named in a
warning.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.fit.errors import FitError, RecordingError
from retarget.fit.servo_recording import ServoRecording
from retarget.model.servo import IDEAL, SERVO_MODELS, ServoParams

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

    from retarget.model.robot import RobotModel
    from retarget.sim.reduced.system import ReducedSystem
    from retarget.sim.system import System

__all__ = [
    "FIT_PARAMETERS",
    "HELD_PARAMETERS",
    "MIN_SAMPLES",
    "MIN_STEP_TICKS",
    "QUANTIZATION_STD",
    "TICK_RAD",
    "FullLoad",
    "LoadSimulator",
    "ReducedLoad",
    "ServoFitOptions",
    "ServoFitResult",
    "StepGoals",
    "StepTest",
    "fit_servo",
    "make_load",
    "parse_servo_fixed",
    "prepare_step_test",
    "run_weights",
    "servo_section",
]

#: One encoder tick of a Dynamixel X (4096 per turn) [rad].
TICK_RAD: float = 2.0 * math.pi / 4096.0
#: The quantization's standard deviation, the measurement noise assumed [rad].
QUANTIZATION_STD: float = TICK_RAD / math.sqrt(12.0)
#: The parameters a fit may adjust (the robot config's ``servo:`` keys).
FIT_PARAMETERS: tuple[str, ...] = ("kp", "ki", "kd", "rotor_inertia", "coulomb_friction", "viscous_friction")
#: Parameters always held at the servo's configured values, with the reason.
HELD_PARAMETERS: dict[str, str] = {
    "stall_torque": "data sheet value (held: sets the torque scale with max_velocity)",
    "max_velocity": "data sheet value (held: no-load speed; with the stall torque the back-EMF damping)",
    "duty_limit": "control table value (PWM Limit)",
    "kff1": "control table value (velocity feedforward; a step goal has no rate to show it)",
}
#: Fitted in every default fit; the other parameters join when the recording asks for them (:data:`SELECTION_GAIN`).
ALWAYS_FITTED: tuple[str, ...] = ("kp", "rotor_inertia")
#: The order in which the other parameters are offered to a default fit: the gearbox's friction before the gains
#: that factory servos leave at 0.
SELECTION_ORDER: tuple[str, ...] = ("viscous_friction", "coulomb_friction", "kd", "ki")
#: A parameter joins a default fit when it lowers the misfit χ² (scaled by the residual variance) by more than this
#: (the 5 % point of χ² with one degree of freedom is 3.84). At 10 the rigid arm's Coulomb friction (gain 5.1) and
#: kd (8.6) stayed out, and the viscous friction that took their place left the rotor inertia 23 % (10σ) low.
SELECTION_GAIN: float = 4.0
#: Fewest samples from the goal's first change on.
MIN_SAMPLES: int = 20
#: Smallest goal step a fit accepts [ticks].
MIN_STEP_TICKS: float = 10.0
#: Rest simulated before the goal's first change [s] (less when the recording has less).
REST_BEFORE_S: float = 0.1
#: Default span fitted after the goal's first change [s].
MAX_DURATION_S: float = 10.0
#: Bounds of the goal timing τ [sample intervals] (positive: the goal changed before its sample).
SHIFT_BOUNDS: tuple[float, float] = (-2.0, 1.0)
#: Forward-difference step in internal coordinates.
FD_STEP: float = 1e-3
#: Forward-difference step of the goal timing [sample intervals] (a secant across the simulation's grid).
SHIFT_FD_STEP: float = 0.05
#: The goal's changes are smoothsteps this long [s]: the Dynamixel's control period, over which its loop sees a jump.
GOAL_RAMP_S: float = 1e-3
#: A fitted ki, kd or friction whose 1σ exceeds this many of its scales is not determined by the recording (warned).
UNDETERMINED: float = 1.0


# ---- the recording as a simulation ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepTest:
    """A recording cut to what is simulated: from :data:`REST_BEFORE_S` before the goal's first change to the end.

    Attributes:
        time: sample times compared (m,) [s] in the simulation's time (0 = its start).
        present: recorded present positions at them (m,) [rad].
        goal_time: the goal's samples from the last one before its change on (k,) [s], simulation time.
        goal: their values (k,) [rad].
        start_s: the simulation's start in the recording's time [s].
        onset_s: the first sample with the changed goal, recording time [s].
        step_rad: the goal's largest excursion from its value before the change [rad].
        sample_interval_s: the median sample interval [s].
        rest_spread_rad: the present position's spread over the samples before the change [rad].
        truncated_s: recorded time left out after ``max_duration`` [s].
    """

    time: NDArray[np.float64]
    present: NDArray[np.float64]
    goal_time: NDArray[np.float64]
    goal: NDArray[np.float64]
    start_s: float
    onset_s: float
    step_rad: float
    sample_interval_s: float
    rest_spread_rad: float
    truncated_s: float = 0.0

    @property
    def duration_s(self) -> float:
        """Simulated time [s]."""
        return float(self.time[-1])


def prepare_step_test(recording: ServoRecording, max_duration: float = MAX_DURATION_S,
                      rest_before: float = REST_BEFORE_S) -> StepTest:
    """Find the step in the goal and cut the recording to the simulated span (module docstring).

    Raises:
        RecordingError: fewer than :data:`MIN_SAMPLES` samples from the step on, no step of at least
            :data:`MIN_STEP_TICKS` ticks in the goal (none after its first sample), or a present position that moves
            against the goal (a sign convention that differs between the columns).
    """
    src = recording.source
    t, g, p = recording.time, recording.goal, recording.present
    dropped = f" ({recording.dropped} rows dropped for missing values)" if recording.dropped else ""
    if len(t) < MIN_SAMPLES + 1:
        raise RecordingError(src, f"{len(t)} samples{dropped}: a step test needs at least {MIN_SAMPLES + 1}")
    excursion = np.abs(g - g[0])
    if excursion.max() < MIN_STEP_TICKS * TICK_RAD:
        raise RecordingError(src, f"no step in the goal: it stays within {excursion.max():.4g} rad "
                             f"({excursion.max() / TICK_RAD:.1f} ticks) of its first value {g[0]:.6g} rad; a step "
                             f"test needs a goal step of at least {MIN_STEP_TICKS:g} ticks "
                             f"({MIN_STEP_TICKS * TICK_RAD:.4g} rad) with rest before it (a recording that starts "
                             "after the step shows none: record from before it, e.g. retarget play --record-lead 1)")
    onset = int(np.flatnonzero(excursion > 0.5 * TICK_RAD)[0])  # ≥ 1: the excursion is from the first sample
    dt_s = float(np.median(np.diff(t)))
    end = t[onset] + max_duration
    keep_to = int(np.searchsorted(t, end, side="right"))
    truncated = float(t[-1] - t[keep_to - 1]) if keep_to < len(t) else 0.0
    if keep_to - onset < MIN_SAMPLES:
        raise RecordingError(src, f"{keep_to - onset} samples from the goal's step on (at {t[onset]:.4g} s)"
                             f"{dropped}: a fit needs at least {MIN_SAMPLES}")
    start = max(float(t[0]), float(t[onset - 1]) - rest_before)
    first = int(np.searchsorted(t, start, side="left"))
    rest = p[first:onset]
    before = g[onset - 1]
    moved = p[onset:keep_to] - p[onset - 1]
    wanted = g[onset:keep_to] - before
    big = np.abs(wanted) > 0.5 * np.abs(wanted).max()
    if np.sum(big) and float(np.mean(moved[big] * np.sign(wanted[big]))) < -0.25 * float(np.mean(np.abs(wanted[big]))):
        raise RecordingError(src, f"the present position moves against the goal (by {float(np.mean(moved[big])):.4g} "
                             f"rad where the goal stepped {float(np.mean(wanted[big])):.4g} rad): the two columns "
                             "use different sign conventions (a joint direction applied to one only?)")
    gi = np.arange(onset - 1, keep_to)
    return StepTest(time=t[first:keep_to] - start, present=p[first:keep_to].astype(float),
                    goal_time=t[gi] - start, goal=g[gi].astype(float), start_s=start, onset_s=float(t[onset]),
                    step_rad=float(np.abs(g[onset:keep_to] - before).max()), sample_interval_s=dt_s,
                    rest_spread_rad=float(np.ptp(rest)) if len(rest) else 0.0, truncated_s=truncated)


class StepGoals:
    """The motors' goals of a step test (a :class:`retarget.sim.motors.MotorTrajectory`, simulation time).

    The tested motor's goal holds each recorded sample until the next; each change is a smoothstep of
    ``width`` [s] centred ``shift`` [s] before its sample. The other motors hold ``held`` [rad].

    Args:
        test: the step test.
        motor: the tested motor's index among ``n_motors``.
        held: every motor's value when held (n_motors,) [rad] (the tested motor's entry is unused).
        shift: [s]. width: [s].
    """

    def __init__(self, test: StepTest, motor: int, held: NDArray[np.float64], shift: float, width: float) -> None:
        change = np.flatnonzero(np.diff(test.goal) != 0.0) + 1
        self._base = float(test.goal[0])
        self._inc = np.diff(test.goal)[change - 1]
        self._centre = test.goal_time[change] - shift
        self._width = float(width)
        self._motor = motor
        self._held = np.asarray(held, dtype=float).copy()

    def _tested(self, t: float) -> tuple[float, float]:
        x = np.clip((t - self._centre) / self._width + 0.5, 0.0, 1.0)
        value = self._base + float(np.dot(self._inc, x * x * (3.0 - 2.0 * x)))
        rate = float(np.dot(self._inc, 6.0 * x * (1.0 - x))) / self._width
        return value, rate

    def value(self, t: float) -> NDArray[np.float64]:
        out = self._held.copy()
        out[self._motor] = self._tested(t)[0]
        return out

    def derivative(self, t: float) -> NDArray[np.float64]:
        out = np.zeros_like(self._held)
        out[self._motor] = self._tested(t)[1]
        return out

    def _smoothsteps(self, times: NDArray[np.float64]) -> NDArray[np.float64]:
        """Where each time is in each change's smoothstep, clipped to [0, 1]: (N, changes)."""
        return np.clip((np.asarray(times, dtype=float)[:, None] - self._centre) / self._width + 0.5, 0.0, 1.0)

    def values(self, times: NDArray[np.float64]) -> NDArray[np.float64]:
        """:meth:`value` at every time (N, n_motors) (:func:`retarget.sim.motors.sample_motors`)."""
        x = self._smoothsteps(times)
        out = np.tile(self._held, (len(x), 1))
        out[:, self._motor] = self._base + (x * x * (3.0 - 2.0 * x)) @ self._inc
        return out

    def derivatives(self, times: NDArray[np.float64]) -> NDArray[np.float64]:
        """:meth:`derivative` at every time (N, n_motors)."""
        x = self._smoothsteps(times)
        out = np.zeros((len(x), len(self._held)))
        out[:, self._motor] = (6.0 * x * (1.0 - x)) @ self._inc / self._width
        return out


# ---- load models ------------------------------------------------------------------------------------------------

class LoadSimulator:
    """The robot as the tested servo's load: ``shaft(servos, goals, duration, dt)`` → (times (N+1,) [s], the tested
    motor's shaft angle (N+1,) [rad]) from the quasi-static start at ``goals.value(0)``."""

    name: str = ""
    motor: int = 0

    def shaft(self, servos: Sequence[ServoParams], goals: StepGoals, duration: float,
              dt: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        raise NotImplementedError


class FullLoad(LoadSimulator):
    """The full FEM engine (:func:`retarget.sim.simulate.simulate`) on the robot's system."""

    name = "full"

    def __init__(self, system: System, motor: int) -> None:
        self.system = system
        self.motor = motor

    def shaft(self, servos: Sequence[ServoParams], goals: StepGoals, duration: float,
              dt: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        from retarget.sim.simulate import simulate
        from retarget.sim.system import with_servos

        result = simulate(with_servos(self.system, list(servos)), goals, duration, dt)
        return result.time, result.shaft_angles[:, self.motor]


class ReducedLoad(LoadSimulator):
    """The compiled reduced engine on a model trained from one full simulation of the step test."""

    name = "reduced"

    def __init__(self, reduced: ReducedSystem, motor: int, info: Mapping[str, object]) -> None:
        from retarget.sim.adapters import planner_engine

        self.engine = planner_engine(reduced)
        self.motor = motor
        self.info = dict(info)

    def shaft(self, servos: Sequence[ServoParams], goals: StepGoals, duration: float,
              dt: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        from retarget.optimize.adjoint import rollout
        from retarget.sim.reduced.engine import CompiledReducedEngine

        engine = self.engine.with_servos(list(servos))
        n = math.ceil(duration / dt - 1e-9)
        start = engine.solve_static(goals.value(0.0))
        index = engine.shaft_angle_index[self.motor]
        if isinstance(engine, CompiledReducedEngine):  # the whole run in compiled chunks: no per-step dispatch
            compiled = engine.simulate(start, goals, dt, n)
            return compiled.time, compiled.states[:, index]
        run = rollout(engine, start, goals, dt, n)
        return run.times, run.matrix[:, index]


def make_load(model: RobotModel, servos: Sequence[ServoParams], motor: int, goals: StepGoals, duration: float,
              engine: str = "auto", dt: float = 1e-3, modes: int = 6) -> tuple[LoadSimulator, FullLoad]:
    """The load simulator a fit runs and the full-FEM one that checks it.

    Args:
        model: the robot (:class:`retarget.model.RobotModel`, any mesh).
        servos: per motor the servo the reduced model is trained with.
        motor: the tested motor's index.
        goals: the step test's goals (the training motion).
        duration: [s]. dt: the training simulation's step [s].
        engine: ``reduced`` (trained here), ``full``, or ``auto`` (reduced when the robot has flexible parts).
        modes: deformation modes per flexible part of the reduced model (a cap).
    """
    from retarget.sim.system import build_system, with_servos

    if engine not in ("auto", "reduced", "full"):
        raise InputError(f"engine {engine!r}: expected auto, reduced or full")
    system = with_servos(build_system(model), list(servos))
    full = FullLoad(system, motor)
    if engine == "full" or (engine == "auto" and not system.deformable):
        return full, full
    if not system.deformable:
        raise InputError("the reduced engine needs a robot with flexible parts; this one is rigid: use full")
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.simulate import simulate

    started = time.perf_counter()
    result = simulate(system, goals, duration, dt)
    reduced, bases, _ = build_from_result(system, result, n_modes=modes)
    info = {"modes": [int(b.modes.shape[1]) for b in bases], "training_wall_s": time.perf_counter() - started,
            "training_shaft": (result.time, result.shaft_angles[:, motor])}
    return ReducedLoad(reduced, motor, info), full


# ---- the fit ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ServoFitOptions:
    """Settings of :func:`fit_servo`.

    Attributes:
        params: the parameters to fit (None: :data:`FIT_PARAMETERS` less ki when the servo has none configured).
        fixed: values to hold parameters at instead of the servo's (SI, config names).
        engine: ``auto``, ``reduced`` or ``full`` (:func:`make_load`).
        dt: simulation step [s].
        modes: deformation modes per part of the reduced model.
        max_duration: fitted span after the goal's first change [s].
        noise_std: measurement noise of the present position [rad].
        max_evaluations: simulations allowed per least-squares run.
        fit_shift: fit the goal's timing within a sample interval (else: changes exactly at their samples).
        check_model: simulate the fitted servo in the full FEM too and report the difference (reduced engine).
    """

    params: tuple[str, ...] | None = None
    fixed: Mapping[str, float] = field(default_factory=dict)
    engine: str = "auto"
    dt: float = 1e-3
    modes: int = 6
    max_duration: float = MAX_DURATION_S
    noise_std: float = QUANTIZATION_STD
    max_evaluations: int = 120
    fit_shift: bool = True
    check_model: bool = True


@dataclass(frozen=True)
class ServoFitResult:
    """A fitted servo and how well the recording determines it.

    Attributes:
        motor: the tested motor.
        servo: the fitted servo (held parameters at their values).
        start: the servo the fit started from (the robot's configured one).
        fitted: the parameters fitted.
        held: parameters held, each with its reason.
        std: 1σ of each fitted parameter (SI); None at a bound.
        correlation: correlation of the fitted parameters (p, p) (their order: ``fitted``).
        goal_shift_s: the fitted goal timing (positive: earlier than its sample) [s], and its 1σ.
        residual_rms_rad: RMS of simulated − recorded present position [rad].
        noise_std_rad: the measurement noise assumed [rad].
        samples: samples compared.
        step_rad: the goal step [rad].
        onset_s: when the goal changed, recording time [s].
        engine: the load model's engine (``reduced`` or ``full``) and its details.
        model_check_rad: RMS difference of the fitted servo's shaft angle, reduced vs full FEM [rad] (None: not
            checked or not reduced).
        at_bound: parameters that ended at a bound (``lower``/``upper``).
        evaluations: simulations run. wall_s: [s].
        warnings: what the caller should know.
        simulated: (time [s] recording time, recorded [rad], simulated [rad]) at the samples compared.
    """

    motor: str
    servo: ServoParams
    start: ServoParams
    fitted: tuple[str, ...]
    held: Mapping[str, str]
    std: Mapping[str, float | None]
    correlation: NDArray[np.float64]
    goal_shift_s: tuple[float, float | None]
    residual_rms_rad: float
    noise_std_rad: float
    samples: int
    step_rad: float
    onset_s: float
    engine: Mapping[str, object]
    model_check_rad: float | None
    at_bound: Mapping[str, str]
    evaluations: int
    wall_s: float
    warnings: tuple[str, ...] = ()
    simulated: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]] | None = None

    @property
    def relative_std(self) -> dict[str, float | None]:
        """1σ over the value of each fitted parameter (None at a bound or a zero value)."""
        out: dict[str, float | None] = {}
        for name in self.fitted:
            s, v = self.std.get(name), getattr(self.servo, name)
            out[name] = None if s is None or v == 0.0 else s / abs(v)
        return out

    def to_json(self) -> dict[str, object]:
        """Plain data: the servo's config keys at top level (``kp``, ``ki``, … in SI), then the fit's figures."""
        corr = {f"{a}|{b}": float(self.correlation[i, j]) for i, a in enumerate(self.fitted)
                for j, b in enumerate(self.fitted) if j > i}
        return {
            "motor": self.motor,
            **self.servo.to_config(),
            "fitted": list(self.fitted),
            "held": dict(self.held),
            "std": dict(self.std),
            "relative_std": self.relative_std,
            "correlation": corr,
            "start": self.start.to_config(),
            "goal_shift_s": self.goal_shift_s[0],
            "goal_shift_std_s": self.goal_shift_s[1],
            "residual_rms_rad": self.residual_rms_rad,
            "noise_std_rad": self.noise_std_rad,
            "samples": self.samples,
            "step_rad": self.step_rad,
            "onset_s": self.onset_s,
            "engine": dict(self.engine),
            "model_check_rad": self.model_check_rad,
            "at_bound": dict(self.at_bound),
            "evaluations": self.evaluations,
            "wall_s": self.wall_s,
            "warnings": list(self.warnings),
        }


def servo_section(result: ServoFitResult, per_motor: bool) -> dict[str, object]:
    """The ``servo:`` mapping of a servo file for ``result``: every SI key of the fitted servo, robot-wide or under
    ``motors: {NAME: ...}`` (:mod:`retarget.model.servo_file`)."""
    keys = result.servo.to_config()
    return {"motors": {result.motor: keys}} if per_motor else keys


@dataclass(frozen=True)
class _Coordinate:
    """One fitted quantity in internal coordinates: ``ref·exp(x)`` (log) or ``ref·x`` (linear)."""

    name: str
    log: bool
    ref: float
    lower: float
    upper: float

    def value(self, x: float) -> float:
        return self.ref * math.exp(x) if self.log else self.ref * x

    def internal(self, value: float) -> float:
        return math.log(value / self.ref) if self.log else value / self.ref


def _coordinate(name: str, start: ServoParams) -> _Coordinate:
    emf = start.back_emf_damping
    if name == "kp":
        return _Coordinate(name, True, start.kp, -math.log(20.0), math.log(20.0))
    if name == "rotor_inertia":
        return _Coordinate(name, True, start.rotor_inertia, -math.log(100.0), math.log(100.0))
    scale = {"ki": 0.25 * start.kp, "kd": 0.1 * emf, "coulomb_friction": 0.02 * start.stall_torque,
             "viscous_friction": 0.1 * emf}[name]
    upper = {"ki": 40.0, "kd": 50.0, "coulomb_friction": 25.0, "viscous_friction": 50.0}[name]
    return _Coordinate(name, False, scale, 0.0, upper)


def _starting_servo(configured: ServoParams, fixed: Mapping[str, float]) -> tuple[ServoParams, list[str]]:
    notes = []
    servo = configured
    if configured.ideal:
        servo = SERVO_MODELS["XM430-W210"]
        notes.append(f"the robot's servo is {IDEAL!r}: the fit starts from the {servo.model}'s factory values")
    unknown = sorted(set(fixed) - set(FIT_PARAMETERS) - set(HELD_PARAMETERS))
    if unknown:
        raise InputError(f"cannot fix {', '.join(unknown)}: known servo parameters "
                         f"{', '.join((*FIT_PARAMETERS, *HELD_PARAMETERS))}")
    return servo.with_values(**{k: float(v) for k, v in fixed.items()}), notes


def _default_params(start: ServoParams, fixed: Mapping[str, float]) -> tuple[str, ...]:
    return tuple(p for p in FIT_PARAMETERS if p not in fixed and not (p == "ki" and start.ki == 0.0))


def run_weights(present: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per sample ``1/√n`` for a run of ``n`` equal consecutive readings (m,): a servo at rest reads the same tick
    over and over, and its quantization error is then one error repeated, not ``n`` independent ones — the run
    carries the information of one reading."""
    present = np.asarray(present, dtype=float)
    starts = np.flatnonzero(np.concatenate([[True], present[1:] != present[:-1]]))
    lengths = np.diff(np.concatenate([starts, [len(present)]]))
    return np.repeat(1.0 / np.sqrt(lengths), lengths)


def parse_servo_fixed(items: Sequence[str]) -> dict[str, float]:
    """``["kd=0", "coulomb_friction=0.02"]`` → ``{"kd": 0.0, "coulomb_friction": 0.02}`` (``--fix NAME=VALUE``, SI).

    Raises:
        InputError: not ``NAME=VALUE``, an unknown or repeated name, a value that is not a finite number.
    """
    from retarget.cliargs import parse_assignments

    return parse_assignments(items, (*FIT_PARAMETERS, *HELD_PARAMETERS), "--fix", units="SI units")


class _Problem:
    """Residuals and forward-difference Jacobian of one least-squares run (counts its simulations).

    The goal's timing ``τ`` moves the comparison, not the goal: the simulation (goal changes at their samples, at rest
    before) is read at ``t_i + τ``. Time-invariant and at rest before the step, that is the same as the goal changing
    ``τ`` earlier, and it is smooth in ``τ`` — a goal moved on the simulation's grid changes a saturated response
    only when a step crosses the duty's threshold — and costs no simulation of its own.
    """

    def __init__(self, load: LoadSimulator, test: StepTest, servos: Sequence[ServoParams], motor: int,
                 held: NDArray[np.float64], coords: Sequence[_Coordinate], fit_shift: bool, dt: float, sigma: float,
                 progress: Callable[[], None] | None) -> None:
        self.load, self.test, self.servos, self.motor, self.held = load, test, list(servos), motor, held
        self.coords, self.fit_shift, self.dt, self.sigma = list(coords), fit_shift, dt, sigma
        self.progress = progress
        self.weight = run_weights(test.present) / sigma
        self.n_eff = float(np.sum((self.weight * sigma) ** 2))
        self.goals = StepGoals(test, motor, held, 0.0, GOAL_RAMP_S)
        self.duration = test.duration_s + SHIFT_BOUNDS[1] * test.sample_interval_s
        self.evaluations = 0
        self._trajectory: tuple[bytes, NDArray[np.float64], NDArray[np.float64]] | None = None

    def servo_at(self, x: NDArray[np.float64]) -> ServoParams:
        values = {c.name: c.value(float(v)) for c, v in zip(self.coords, x)}
        return self.servos[self.motor].with_values(**values)

    def shift_at(self, x: NDArray[np.float64]) -> float:
        return float(x[-1]) * self.test.sample_interval_s if self.fit_shift else 0.0

    def trajectory(self, x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The simulated shaft angle of the servo at ``x`` on the simulation's grid (times [s], angles [rad])."""
        from retarget.sim.errors import SimulationError

        key = np.asarray(x[: len(self.coords)], dtype=float).tobytes()
        if self._trajectory is not None and self._trajectory[0] == key:
            return self._trajectory[1], self._trajectory[2]
        servos = list(self.servos)
        servos[self.motor] = self.servo_at(x)
        self.evaluations += 1
        if self.progress is not None:
            self.progress()
        try:
            t, shaft = self.load.shaft(servos, self.goals, self.duration, self.dt)
        except SimulationError:
            t, shaft = np.array([0.0, self.duration]), np.full(2, np.nan)
        self._trajectory = (key, t, shaft)
        return t, shaft

    def simulate(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """The simulated shaft angle at the test's sample times (m,) [rad]."""
        t, shaft = self.trajectory(x)
        return np.interp(np.maximum(self.test.time + self.shift_at(x), 0.0), t, shaft)

    def residual(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        r = (self.simulate(x) - self.test.present) * self.weight
        return np.where(np.isfinite(r), r, 1e6)  # a candidate the engine cannot simulate: rejected by its cost

    def jacobian(self, x: NDArray[np.float64], lower: NDArray[np.float64],
                 upper: NDArray[np.float64]) -> NDArray[np.float64]:
        r0 = self.residual(x)
        base = self._trajectory
        jac = np.empty((len(r0), len(x)))
        for k in range(len(x)):
            step = SHIFT_FD_STEP if (self.fit_shift and k == len(x) - 1) else FD_STEP
            h = step if x[k] + step <= upper[k] else -step
            xk = np.array(x, dtype=float)
            xk[k] += h
            rk = (self.simulate(xk) - self.test.present) * self.weight
            jac[:, k] = (np.where(np.isfinite(rk), rk, r0) - r0) / h
            self._trajectory = base  # the next column perturbs the base point again
        return jac


def _solve(problem: _Problem, x0: NDArray[np.float64], lower: NDArray[np.float64], upper: NDArray[np.float64],
           max_evaluations: int, n_simulated: int) -> OptimizeResult:
    from scipy.optimize import least_squares

    x0 = np.clip(x0, lower + 1e-9, upper - 1e-9)
    return least_squares(problem.residual, x0, jac=lambda x: problem.jacobian(x, lower, upper), bounds=(lower, upper),
                         method="trf", x_scale=1.0, max_nfev=max(5, max_evaluations // (n_simulated + 1)),
                         xtol=1e-6, ftol=1e-8, gtol=1e-8)


def _covariance(jac: NDArray[np.float64], residual: NDArray[np.float64], free: NDArray[np.bool_],
                n_eff: float) -> tuple[NDArray[np.float64], float]:
    """``s² (JᵀJ)⁻¹`` over the coordinates not at a bound (others: NaN), and ``s²`` (``n_eff``: independent
    readings, :func:`run_weights`)."""
    p = jac.shape[1]
    s2 = max(1.0, float(residual @ residual) / max(n_eff - int(free.sum()), 1.0))
    cov = np.full((p, p), np.nan)
    if free.any():
        j = jac[:, free]
        cov[np.ix_(free, free)] = s2 * np.linalg.pinv(j.T @ j)
    return cov, s2


def fit_servo(model: RobotModel, recording: ServoRecording, motor: str, options: ServoFitOptions | None = None,
              held_goals: Mapping[str, float] | None = None,
              progress: Callable[[], None] | None = None) -> ServoFitResult:
    """Fit the servo of ``motor`` carrying ``model`` to a step-test recording (module docstring).

    Args:
        model: the robot (:class:`retarget.model.RobotModel`; a coarse mesh is enough, its servos the starting
            point: ``model.servo(motor)``).
        recording: the step test (:func:`retarget.fit.servo_recording.read_servo_recording`).
        motor: the tested motor's name.
        options: settings (None: :class:`ServoFitOptions`' defaults).
        held_goals: where other motors are held [rad] (default: the recording's ``other_goals``, else 0).
        progress: called once per simulation.

    Raises:
        InputError: ``motor`` not in the robot (naming its motors), an unknown parameter name.
        RecordingError: a recording that holds no usable step test (:func:`prepare_step_test`).
        FitError: no simulation of the step test succeeded.
    """
    options = ServoFitOptions() if options is None else options
    started = time.perf_counter()
    motors = list(model.motors)
    if motor not in motors:
        raise InputError(f"no motor {motor!r} in robot {model.name}; motors: {', '.join(motors)}")
    m = motors.index(motor)
    if not (options.dt > 0 and options.max_duration > 0 and options.noise_std > 0):
        raise InputError("dt, max_duration and noise_std must be positive")
    configured = model.servo_list[m]
    start, warnings = _starting_servo(configured, options.fixed)
    params = _fitted_parameters(options, start)
    held_reason = _held_reasons(params, options, start)
    test = prepare_step_test(recording, options.max_duration)
    if test.truncated_s > 0.0:
        warnings.append(f"fitted the first {options.max_duration:g} s after the step; {test.truncated_s:.2f} s of the "
                        "recording left out (--duration)")
    if test.rest_spread_rad > 3.0 * TICK_RAD:
        warnings.append(f"the present position moves by {test.rest_spread_rad / TICK_RAD:.0f} ticks before the step: "
                        "the simulation starts at rest; record the step from rest")
    other = dict(recording.other_goals) if held_goals is None else dict(held_goals)
    held = np.array([other.get(name, 0.0) for name in motors], dtype=float)
    servos = list(model.servo_list)
    servos[m] = start
    goals0 = StepGoals(test, m, held, 0.0, GOAL_RAMP_S)
    load, full = make_load(model, servos, m, goals0, test.duration_s + SHIFT_BOUNDS[1] * test.sample_interval_s,
                           options.engine, options.dt, options.modes)
    setup = _FitSetup(load, test, servos, m, held, start, options, progress)
    problem, result, evaluations = _select_terms(setup, params, held_reason)
    coords = problem.coords
    current = problem.servo_at(result.x)
    fitted_names = [c.name for c in coords]
    spread = _spread(problem, result)
    shift_s = problem.shift_at(result.x)
    before = problem.evaluations
    simulated = problem.simulate(result.x)
    evaluations += problem.evaluations - before
    rms = float(np.sqrt(np.mean((simulated - test.present) ** 2)))
    warnings += _fit_warnings(coords, result, spread, current, test, rms, options.noise_std)
    engine_info: dict[str, object] = {"name": load.name, "dt_s": options.dt, "mesh_dofs": int(full.system.n_v)}
    model_check = None
    if isinstance(load, ReducedLoad):
        engine_info["modes"] = load.info["modes"]
        engine_info["training_wall_s"] = load.info["training_wall_s"]
        if options.check_model:
            model_check = _full_fem_check(setup, full, problem, current, shift_s, simulated)
            evaluations += 1
            if model_check > options.noise_std:
                warnings.append(f"the reduced load model differs from the full FEM by {model_check / TICK_RAD:.2f} "
                                "ticks RMS at the fitted servo: compare with --engine full")
    shift_std = (float(spread.std_x[-1] * test.sample_interval_s) if options.fit_shift and spread.free[-1]
                 else None)
    return ServoFitResult(
        motor=motor, servo=current, start=start, fitted=tuple(fitted_names),
        held={k: v for k, v in held_reason.items() if k not in fitted_names}, std=spread.std,
        correlation=spread.correlation, goal_shift_s=(shift_s, shift_std), residual_rms_rad=rms,
        noise_std_rad=options.noise_std, samples=len(test.time), step_rad=test.step_rad, onset_s=test.onset_s,
        engine=engine_info, model_check_rad=model_check, at_bound=spread.at_bound, evaluations=evaluations,
        wall_s=time.perf_counter() - started, warnings=tuple(warnings),
        simulated=(test.time + test.start_s, test.present, simulated))


def _fitted_parameters(options: ServoFitOptions, start: ServoParams) -> tuple[str, ...]:
    """The parameters to fit: ``options.params``, else :data:`FIT_PARAMETERS` less the fixed ones (and ki when
    ``start`` has none).

    Raises:
        InputError: an unknown parameter, or kp not among them.
    """
    params = options.params if options.params is not None else _default_params(start, options.fixed)
    unknown = sorted(set(params) - set(FIT_PARAMETERS))
    if unknown:
        raise InputError(f"cannot fit {', '.join(unknown)}: fittable parameters {', '.join(FIT_PARAMETERS)}")
    if "kp" not in params:
        raise InputError("kp is always fitted: give it in the parameters (and --fix the others)")
    return params


def _held_reasons(params: Sequence[str], options: ServoFitOptions, start: ServoParams) -> dict[str, str]:
    """Per parameter not in ``params``, why and where it is held."""
    held_reason = {name: reason for name, reason in HELD_PARAMETERS.items()}
    for name in FIT_PARAMETERS:
        if name in params:
            continue
        if name in options.fixed:
            held_reason[name] = f"held at {options.fixed[name]:g} (given)"
        elif name == "ki" and start.ki == 0.0:
            held_reason[name] = ("held at 0: the servo has no integral action configured (I gain 0), and a step test "
                                 "shows one only through its steady state; fit it with --params including ki")
        else:
            held_reason[name] = f"held at the configured {getattr(start, name):g} (not among the fitted parameters)"
    for name in HELD_PARAMETERS:
        if name in options.fixed:
            held_reason[name] = f"held at {options.fixed[name]:g} (given)"
    return held_reason


@dataclass(frozen=True, eq=False)
class _FitSetup:
    """What every least-squares run of :func:`fit_servo` shares: the load simulator, the step test, the servos
    (the tested one, index ``motor``, at ``start``), the other motors' held goals [rad], the options and the
    per-simulation progress."""

    load: LoadSimulator
    test: StepTest
    servos: list[ServoParams]
    motor: int
    held: NDArray[np.float64]
    start: ServoParams
    options: ServoFitOptions
    progress: Callable[[], None] | None

    def run(self, names: Sequence[str], servo: ServoParams, shift_x: float) -> tuple[_Problem, OptimizeResult]:
        """Fit the parameters ``names`` from ``servo`` (and the goal's timing from ``shift_x`` samples).

        Raises:
            FitError: the step test cannot be simulated with ``servo``.
        """
        options = self.options
        coords = [_coordinate(n, self.start) for n in names]
        lower = np.array([c.lower for c in coords] + ([SHIFT_BOUNDS[0]] if options.fit_shift else []))
        upper = np.array([c.upper for c in coords] + ([SHIFT_BOUNDS[1]] if options.fit_shift else []))
        # Terms that may vanish start a tenth of their scale in: a bound is where the trust region cannot turn.
        x0 = np.array([c.internal(getattr(servo, c.name) if c.log else max(getattr(servo, c.name), 0.1 * c.ref))
                       for c in coords] + ([shift_x] if options.fit_shift else []))
        problem = _Problem(self.load, self.test, self.servos, self.motor, self.held, coords, options.fit_shift,
                           options.dt, options.noise_std, self.progress)
        if not np.all(problem.residual(np.clip(x0, lower + 1e-9, upper - 1e-9)) < 1e6):
            raise FitError("the step test cannot be simulated with the starting servo", servo.to_config())
        return problem, _solve(problem, x0, lower, upper, options.max_evaluations, len(coords))


def _select_terms(setup: _FitSetup, params: Sequence[str],
                  held_reason: dict[str, str]) -> tuple[_Problem, OptimizeResult, int]:
    """The fit of ``params`` as given, else by forward selection: the always-fitted, then each other term if the
    recording asks for it (a term left out gets its reason in ``held_reason``). Returns the last problem, its
    least-squares result and the simulations run."""
    options, start = setup.options, setup.start
    evaluations = 0
    candidates: list[str]
    if options.params is not None:
        chosen, candidates = list(params), []
    else:
        chosen = [p for p in params if p in ALWAYS_FITTED]
        candidates = [p for p in SELECTION_ORDER if p in params]
    problem, result = setup.run(chosen, start, 0.0)
    evaluations += problem.evaluations
    for name in candidates:
        trial_problem, trial = setup.run([*chosen, name], problem.servo_at(result.x),
                                         float(result.x[-1]) if options.fit_shift else 0.0)
        evaluations += trial_problem.evaluations
        s2 = max(1.0, 2.0 * trial.cost / max(trial_problem.n_eff - len(trial.x), 1.0))
        gain = 2.0 * (result.cost - trial.cost) / s2
        if gain > SELECTION_GAIN:
            chosen.append(name)
            problem, result = trial_problem, trial
        else:
            held_reason[name] = (f"not determined by this recording: fitting it lowered the misfit by "
                                 f"{max(gain, 0.0):.1f} (χ², less than {SELECTION_GAIN:g}); held at the configured "
                                 f"{getattr(start, name):g}")
    return problem, result, evaluations


@dataclass(frozen=True)
class _Spread:
    """The fit's uncertainty: which coordinates are ``free`` (not at a bound; the others' side in ``at_bound``),
    their 1σ in internal coordinates ``std_x`` and per fitted parameter in SI (``std``; None at a bound), and the
    parameters' correlation matrix."""

    free: NDArray[np.bool_]
    std_x: NDArray[np.float64]
    std: dict[str, float | None]
    at_bound: dict[str, str]
    correlation: NDArray[np.float64]


def _spread(problem: _Problem, result: OptimizeResult) -> _Spread:
    """The uncertainty of ``result`` (:func:`_covariance`)."""
    coords = problem.coords
    at_bound: dict[str, str] = {}
    free = (result.active_mask == 0)
    cov, _ = _covariance(result.jac, result.fun, free, problem.n_eff)
    std_x = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    std: dict[str, float | None] = {}
    for k, c in enumerate(coords):
        if not free[k]:
            at_bound[c.name] = "lower" if result.active_mask[k] < 0 else "upper"
            std[c.name] = None
            continue
        value = c.value(float(result.x[k]))
        std[c.name] = float(value * std_x[k]) if c.log else float(c.ref * std_x[k])
    d = np.sqrt(np.clip(np.diag(cov), 1e-300, None))
    corr_all = cov / np.outer(d, d)
    p = len(coords)
    correlation = np.nan_to_num(corr_all[:p, :p], nan=0.0)
    return _Spread(free, std_x, std, at_bound, correlation)


def _fit_warnings(coords: Sequence[_Coordinate], result: OptimizeResult, spread: _Spread, current: ServoParams,
                  test: StepTest, rms: float, noise_std: float) -> list[str]:
    """What to trust of the fit: parameters at a bound or not separated, a vague kp or rotor inertia, a residual
    beyond the noise, a step within the loop's linear range."""
    warnings: list[str] = []
    std, std_x, correlation = spread.std, spread.std_x, spread.correlation
    fitted_names = [c.name for c in coords]
    for name, side in spread.at_bound.items():
        warnings.append(f"{name} ended at its {side} bound: not an estimate (the recording pushes it there or does "
                        f"not constrain it); hold it with --fix {name}=VALUE")
    vague = [f"{c.name} ±{std[c.name]:.2g}" for k, c in enumerate(coords)
             if not c.log and std[c.name] is not None and std_x[k] > UNDETERMINED]
    if vague:
        warnings.append(f"not separated by this recording (1σ beyond their scale): {', '.join(vague)}; what they "
                        "share (damping) is determined, each alone is not: --fix one to its known value")
    rel = {c.name: (std[c.name] / c.value(float(result.x[k])) if std[c.name] is not None and c.log else None)
           for k, c in enumerate(coords)}
    kp_rel, inertia_rel = rel.get("kp"), rel.get("rotor_inertia")
    if kp_rel is not None and kp_rel > 0.1:
        k = fitted_names.index("kp")
        partner = max((j for j in range(len(coords)) if j != k), key=lambda j: abs(correlation[k, j]), default=None)
        why = (f"record a larger step (beyond the duty's saturation at {current.saturation_error:.3g} rad of error)"
               if test.step_rad < current.saturation_error or partner is None else
               f"it trades off with {coords[partner].name} (correlation {correlation[k, partner]:+.3f}): --fix that "
               "to its control-table value")
        warnings.append(f"kp is determined to ±{100 * kp_rel:.0f} % only: {why}")
    if inertia_rel is not None and inertia_rel > 0.5:
        warnings.append(f"the rotor inertia is barely seen behind the load: ±{100 * inertia_rel:.0f} % "
                        "(1σ); use its uncertainty, not the number")
    if rms > 3.0 * noise_std:
        warnings.append(f"the residual ({rms / TICK_RAD:.1f} ticks RMS) is {rms / noise_std:.1f} x the "
                        "quantization noise: the model misses part of the response; the uncertainties are scaled "
                        "by it")
    if test.step_rad < current.saturation_error:
        warnings.append(f"the step ({test.step_rad:.3g} rad) stays within the loop's linear range (the duty saturates "
                        f"beyond {current.saturation_error:.3g} rad of error): kp rests on the modelled load's inertia "
                        "and gravity; a larger step pins it by the stall torque")
    return warnings


def _full_fem_check(setup: _FitSetup, full: FullLoad, problem: _Problem, current: ServoParams, shift_s: float,
                    simulated: NDArray[np.float64]) -> float:
    """The RMS difference [rad] between the full FEM and the fitted load model at the fitted servo ``current``
    (one full simulation)."""
    servos_fit = list(setup.servos)
    servos_fit[setup.motor] = current
    t_full, shaft_full = full.shaft(servos_fit, problem.goals, problem.duration, setup.options.dt)
    at = np.maximum(setup.test.time + shift_s, 0.0)
    return float(np.sqrt(np.mean((np.interp(at, t_full, shaft_full) - simulated) ** 2)))
