"""The reduced simulation stepped live: servo goals arrive as samples, the servos and the robot follow.

The emulated bus streams, per motor, the goal its servo's loop acts on (the profile's Position Trajectory ``g``
[rad] and Velocity Trajectory ``ġ`` [rad/s], joint space) and the control-table values that set the loop
(:class:`ServoSettings`: Torque Enable, Position P/I/D Gain, PWM Limit). :class:`MotorHistory` holds the goals,
sampled irregularly, linear in time between samples; the settings hold from the sample that changed them.
:class:`TwinSimulation` advances the compiled reduced engine (:class:`retarget.sim.reduced.CompiledReducedEngine`,
BDF1 then BDF2, fixed ``dt``) with the goals as the engine's motor input: each modelled servo's shaft is a degree
of freedom driven by the servo law against the structure (:mod:`retarget.sim.servo`), so the shafts sag under
load, lag and ring as the servos on the robot do. Its :meth:`TwinSimulation.shafts` are what the emulated servos
report (Present Position, Velocity, Current, PWM). It never steps past the newest sample, so the simulation is
causal: it can lag the bus, never lead it. It is a plain object with no thread: the caller (the twin worker
process, or a test) decides when to step. The same goals given to :func:`retarget.sim.reduced.simulate_compiled`
through :class:`MotorHistory` give the same states to Newton tolerance (tested).

Settings: the servos' loops are :func:`retarget.dynamixel.servo_loop.loop_params` of the robot's servos (its
``servo:`` section, as the model was trained with) and the control tables' values; when a value changes the engine
is rebuilt on those servos (:meth:`retarget.sim.engine.SystemEngine.with_servos`, cached per setting) and the run
goes on from the same state (the integral state is cleared for a servo whose torque comes on, and added or
dropped when an I Gain changes from or to 0). Torque off is the loop without drive: the shaft is free but for the
motor's back EMF and friction. Ideal motors (``model: ideal``) follow their goals whatever the settings.

Falling behind: each :meth:`TwinSimulation.advance` call is bounded in wall time, so the caller stays responsive.
The lag (newest sample time − simulation time) is reported; beyond ``max_lag_s`` the simulation drops the backlog
and restarts at rest from the quasi-static state at the newest goals (logged, counted in ``resyncs``): a
predictable degradation, instead of an ever-growing delay or memory. The quasi-static start always has the servos
holding (torque on): with torque off there may be no equilibrium; the run then goes on without drive.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from retarget.model.servo import DEFAULT_CONTROL_PERIOD, ServoParams, table_from_si
from retarget.twin.model import TwinModel
from retarget.twin.perturbation import TwinPerturbation

__all__ = ["MotorHistory", "ServoSettings", "SimulationStats", "TwinSimulation", "static_state"]

#: Largest motor move per continuation step of :func:`static_state` [rad].
CONTINUATION_STEP: float = 0.1


@dataclass(frozen=True, eq=False)
class ServoSettings:
    """The control-table values that set each motor's servo loop, in the model's motor order.

    Attributes:
        torque_on: Torque Enable ``(m,)``.
        gains: Position P, I, D Gain ``(m, 3)`` [control table units].
        pwm_limit: PWM Limit ``(m,)`` (0–885).
    """

    torque_on: NDArray[np.bool_]
    gains: NDArray[np.float64]
    pwm_limit: NDArray[np.float64]

    @classmethod
    def of(cls, servos: Sequence[ServoParams], torque_on: bool = True,
           control_period: float = DEFAULT_CONTROL_PERIOD) -> ServoSettings:
        """The values that give ``servos``' own loops (:func:`retarget.model.servo.table_from_si`; ideal motors
        get the factory P Gain 800), torque on or off."""
        rows = [table_from_si(sv, control_period) if not sv.ideal else
                {"Position P Gain": 800, "Position I Gain": 0, "Position D Gain": 0, "PWM Limit": 885}
                for sv in servos]
        gains = np.array([[r["Position P Gain"], r["Position I Gain"], r["Position D Gain"]] for r in rows],
                         dtype=float).reshape(len(rows), 3)
        return cls(np.full(len(rows), bool(torque_on)), gains,
                   np.array([r["PWM Limit"] for r in rows], dtype=float))

    @property
    def key(self) -> bytes:
        """Equal for equal settings."""
        return (np.asarray(self.torque_on, dtype=bool).tobytes() + np.asarray(self.gains, dtype=float).tobytes()
                + np.asarray(self.pwm_limit, dtype=float).tobytes())

    def with_torque(self) -> ServoSettings:
        """The same with every servo's torque on."""
        return ServoSettings(np.ones_like(self.torque_on, dtype=bool), self.gains, self.pwm_limit)


class MotorHistory:
    """Goal samples ``(t, g, ġ)`` in time order, interpolated linearly; the oldest are dropped on request.

    Args:
        n_motors: number of motors.

    Implements the engine's motor protocol: :meth:`value` ``(t) -> (m,)`` [rad], :meth:`derivative` [rad/s]
    (the goal of a modelled servo, the angle of an ideal motor). Outside the samples the end values are held.
    """

    def __init__(self, n_motors: int) -> None:
        self.n = int(n_motors)
        self._t = np.zeros(0)
        self._theta = np.zeros((0, self.n))
        self._rate = np.zeros((0, self.n))
        self._pending: list[tuple[float, NDArray, NDArray]] = []

    def append(self, t: float, theta: NDArray[np.float64], theta_dot: NDArray[np.float64]) -> None:
        """Add a sample at time ``t`` [s]: goals [rad] and their rates [rad/s] ``(m,)``; samples not newer than the
        last one are ignored."""
        last = self._pending[-1][0] if self._pending else (self._t[-1] if self._t.size else -np.inf)
        if t > last:
            self._pending.append((float(t), np.asarray(theta, dtype=float).reshape(self.n),
                                  np.asarray(theta_dot, dtype=float).reshape(self.n)))

    def _flush(self) -> None:
        if self._pending:
            ts, th, rt = zip(*self._pending)
            self._t = np.concatenate([self._t, ts])
            self._theta = np.vstack([self._theta, th])
            self._rate = np.vstack([self._rate, rt])
            self._pending.clear()

    @property
    def latest_time(self) -> float:
        """Time of the newest sample [s] (−inf when empty)."""
        if self._pending:
            return self._pending[-1][0]
        return float(self._t[-1]) if self._t.size else -np.inf

    def latest(self) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
        """The newest sample."""
        self._flush()
        return float(self._t[-1]), self._theta[-1].copy(), self._rate[-1].copy()

    def __len__(self) -> int:
        return int(self._t.size) + len(self._pending)

    def _interp(self, which: str, t: float) -> NDArray[np.float64]:
        self._flush()
        values = self._theta if which == "theta" else self._rate
        return np.array([np.interp(t, self._t, values[:, j]) for j in range(self.n)])

    def value(self, t: float) -> NDArray[np.float64]:
        """g(t) [rad], ``(m,)``."""
        return self._interp("theta", t)

    def derivative(self, t: float) -> NDArray[np.float64]:
        """ġ(t) [rad/s], ``(m,)``."""
        return self._interp("rate", t)

    def drop_before(self, t: float) -> None:
        """Forget samples older than the last one at or before ``t`` (that one is kept for interpolation)."""
        self._flush()
        k = int(np.searchsorted(self._t, t, side="right")) - 1
        if k > 0:
            self._t, self._theta, self._rate = self._t[k:], self._theta[k:], self._rate[k:]


@dataclass
class SimulationStats:
    """What the live simulation did.

    Attributes:
        steps: engine steps taken. step_wall_s: wall time spent in them [s].
        resyncs: restarts after the lag exceeded ``max_lag_s``. dropped_s: simulated time skipped by them [s].
        failures: engine failures (Newton / divergence), each followed by a restart at rest.
        training_range: per flexible part, its largest deformation so far as a multiple of the largest in the
            model's training run (:func:`retarget.sim.reduced.training.training_range`; parts whose model does not
            record it are absent).
    """

    steps: int = 0
    step_wall_s: float = 0.0
    resyncs: int = 0
    dropped_s: float = 0.0
    failures: int = 0
    training_range: dict[str, float] = field(default_factory=dict)

    def real_time_factor(self, dt: float) -> float:
        """Simulated seconds per wall second while stepping (≥ 1: keeps up with the servos)."""
        return self.steps * dt / self.step_wall_s if self.step_wall_s > 0 else float("nan")


class TwinSimulation:
    """The twin's reduced simulation, advanced on demand from the goal history.

    Args:
        model: the reduced model (:func:`retarget.twin.model.load_twin_model`), trained with its servos in the loop.
        dt: engine step [s] (default the engine's, 1 ms).
        tolerance: Newton tolerance (as :func:`~retarget.sim.reduced.simulate_compiled`'s default).
        max_lag_s: lag beyond which the backlog is dropped and the simulation restarts at rest [s].
        log: receives one line per notable event (restart, failure).
        control_period: the period the control tables' I and D gains assume [s].
        perturbation: how this twin differs from ``model`` (:mod:`retarget.twin.perturbation`): its stiffness and
            damping, its servos' P and D gains, the latency of their goals. None: the model as it is.
    """

    def __init__(self, model: TwinModel, dt: float | None = None, tolerance: float = 1e-10,
                 max_lag_s: float = 5.0, log: Callable[[str], None] | None = None,
                 control_period: float = DEFAULT_CONTROL_PERIOD,
                 perturbation: TwinPerturbation | None = None) -> None:
        from retarget.sim.reduced.engine import DEFAULT_DT, CompiledReducedEngine

        self.perturbation = perturbation or TwinPerturbation()
        #: The goals act this late [s]: a sample pushed at t is the goal at t + latency_s.
        self.latency_s = float(self.perturbation.latency)
        model = replace(model, reduced=self.perturbation.reduced(model.reduced))
        self.model = model
        self.dt = float(dt if dt is not None else DEFAULT_DT)
        self.max_lag_s = float(max_lag_s)
        self.control_period = float(control_period)
        self._base = CompiledReducedEngine(model.reduced, tolerance=tolerance)
        #: The robot's servo per motor (the model's, as trained): all but the gains, duty limit and torque flag.
        self.servos: tuple[ServoParams, ...] = tuple(model.reduced.servo.per_motor)
        self.history = MotorHistory(len(model.motors))
        self._settings: list[tuple[float, ServoSettings]] = []
        self.settings = ServoSettings.of(self.servos, control_period=self.control_period)
        if self.perturbation.servo_kp != 1.0 or self.perturbation.servo_kd != 1.0:
            self._base = self._base.with_servos(self.loop_servos(self.settings))
        self._engines: dict[bytes, object] = {self.settings.key: self._base}
        self.engine = self._base
        self.stats = SimulationStats()
        self._log = log or (lambda _line: None)
        self._cache: dict = {}
        self._prev = None
        self._prev2 = None
        self._index = 0
        self._body_index = [model.reduced.rigid_index(b) for b in model.bodies]
        rs = model.reduced
        # z of every part in S (as CompiledRun.coordinates), when some part records its training range.
        self._z = rs.z_slice if any(b.basis.training_norm > 0.0 for b in rs.bodies) else None
        self._range_warned: set[str] = set()

    @property
    def started(self) -> bool:
        """Whether the simulation has a state (after :meth:`start`)."""
        return self._prev is not None

    @property
    def time(self) -> float:
        """Simulation time [s] (on the goal samples' clock)."""
        return float(self._prev.t) if self._prev is not None else float("nan")

    @property
    def lag_s(self) -> float:
        """Newest goal sample time − simulation time [s] (the latency aside)."""
        return self.history.latest_time - self.latency_s - self.time if self.started else 0.0

    def push(self, t: float, goal: NDArray[np.float64], goal_rate: NDArray[np.float64],
             settings: ServoSettings | None = None) -> None:
        """Record the goals [rad] and their rates [rad/s] at ``t`` [s], in the model's motor order ``(m,)``, and
        the servo settings from ``t`` on (None: unchanged). With a latency they act from ``t + latency_s``."""
        t = float(t) + self.latency_s
        if self.history.latest_time >= t:
            return
        self.history.append(t, goal, goal_rate)
        if settings is not None:
            last = self._settings[-1][1] if self._settings else self.settings
            if settings.key != last.key:
                self._settings.append((float(t), settings))

    def _settings_at(self, t: float) -> ServoSettings:
        """The settings in force at ``t`` (forgets the ones it superseded)."""
        current = self.settings
        while self._settings and self._settings[0][0] <= t + 1e-12:
            current = self._settings.pop(0)[1]
        return current

    def loop_servos(self, settings: ServoSettings) -> list[ServoParams]:
        """The servo per motor these settings give (:func:`retarget.dynamixel.servo_loop.loop_params`)."""
        from retarget.dynamixel.servo_loop import loop_params

        servos = []
        for m, sv in enumerate(self.servos):
            if sv.ideal:
                servos.append(sv)
                continue
            loop = loop_params(sv, *settings.gains[m], settings.pwm_limit[m], bool(settings.torque_on[m]),
                               self.control_period)
            driven = bool(settings.torque_on[m]) and settings.pwm_limit[m] > 0
            servos.append(self.perturbation.servo(loop) if driven else loop)  # the perturbed robot's loop
        return servos

    def _engine_for(self, settings: ServoSettings):  # a CompiledReducedEngine
        engine = self._engines.get(settings.key)
        if engine is None:
            if len(self._engines) >= 16:  # bounded: a client sweeping gains must not grow it forever
                self._engines = {k: e for k, e in self._engines.items() if e is self._base or e is self.engine}
            engine = self._engines[settings.key] = self._base.with_servos(self.loop_servos(settings))
        return engine

    def _use(self, settings: ServoSettings) -> None:
        """Step on from the current state with the servos of ``settings``."""
        engine = self._engine_for(settings)
        old_sys, new_sys = self.engine.system, engine.system
        turned_on = np.asarray(settings.torque_on, dtype=bool) & ~np.asarray(self.settings.torque_on, dtype=bool)
        states = []
        for st in (self._prev, self._prev2):
            if st is None:
                states.append(None)
                continue
            s = _remap_state(np.asarray(st.s), old_sys, new_sys)
            lay = new_sys.servo
            for m, k in enumerate(lay.motor_servo):
                if k >= 0 and turned_on[m] and lay.u_iota[k] >= 0:
                    s[lay.u_iota[k]] = 0.0  # the loop's integral starts afresh when torque comes on
            states.append(_engine_state(st.t, s, new_sys))
        self._prev, self._prev2 = states
        self.engine, self.settings = engine, settings
        self._cache = {}

    def warm_up(self) -> None:
        """Load the engine's compiled kernels (numba: seconds from its cache, a minute to compile) before the run
        depends on them: a quasi-static solve at zero goals and three steps from it, all discarded. Without it the
        simulation's first steps would lag the bus by that time."""
        m = len(self.servos)
        goal = np.zeros(m)
        history = MotorHistory(m)
        history.append(0.0, goal, goal)
        history.append(1.0, goal, goal)
        prev, prev2, cache = static_state(self._base, goal), None, {}
        for k in range(3):
            new = self._base.step(prev, prev2, self.dt, history, k, cache)
            prev2, prev = prev, new

    def start(self, t: float | None = None) -> None:
        """Start at rest in the quasi-static state at the goals of time ``t`` (default: the newest sample), the
        servos holding (torque on) whatever Torque Enable says; the run goes on with the settings in force.

        Raises:
            ValueError: no goal sample yet.
        """
        if not len(self.history):
            raise ValueError("no goal sample: push one before start()")
        t0 = self.history.latest_time if t is None else float(t)
        settings = self._settings_at(t0)
        holding = self._engine_for(settings.with_torque())
        st = static_state(holding, self.history.value(t0))
        self.engine, self.settings = holding, settings.with_torque()
        self._prev = _engine_state(t0, np.asarray(st.s), holding.system)
        self._prev2 = None
        self._cache = {}
        self._index = 0
        if settings.key != self.settings.key:
            self._use(settings)

    def advance(self, max_wall_s: float = 0.05,
                on_step: Callable[[float, NDArray, NDArray], None] | None = None) -> int:
        """Step while a whole step fits before the newest goal sample, for at most ``max_wall_s`` [s].

        Args:
            max_wall_s: wall-time budget of this call [s] (at least one step is taken when one is possible).
            on_step: called after every step with ``(t, poses, shafts)`` (see :meth:`poses`, :meth:`shafts`).

        Returns:
            Steps taken.
        """
        from retarget.sim.errors import NewtonFailed, SimulationDiverged

        if not self.started:
            return 0
        if self.lag_s > self.max_lag_s:
            latest = self.history.latest_time
            self.stats.resyncs += 1
            self.stats.dropped_s += latest - self.time
            self._log(f"twin: simulation {latest - self.time:.2f} s behind the servos (> max lag {self.max_lag_s} s):"
                      f" dropped the backlog, restarting at rest at t = {latest:.3f} s")
            self.start(latest)
        began = time.perf_counter()
        steps = 0
        while self.time + self.dt <= self.history.latest_time - self.latency_s + 1e-12:
            settings = self._settings_at(self.time + self.dt)
            if settings.key != self.settings.key:
                self._use(settings)
            t0 = time.perf_counter()
            try:
                new = self.engine.step(self._prev, self._prev2, self.dt, self.history, self._index, self._cache)
            except (NewtonFailed, SimulationDiverged, np.linalg.LinAlgError) as exc:
                self.stats.failures += 1
                self._log(f"twin: engine failed at t = {self.time + self.dt:.3f} s ({exc}); restarting at rest")
                self.start(self.history.latest_time)
                break
            self.stats.step_wall_s += time.perf_counter() - t0
            self.stats.steps += 1
            self._prev2, self._prev = self._prev, new
            self._index += 1
            steps += 1
            self._track_range(new.s)
            if on_step is not None:
                on_step(self.time, self.poses(), self.shafts())
            if time.perf_counter() - began > max_wall_s:
                break
        # BDF2 needs the samples back to t_{n-1}; older ones are never read again.
        self.history.drop_before(self.time - 2 * self.dt)
        return steps

    def shafts(self) -> NDArray[np.float64]:
        """Per motor, in joint space, ``(m, 4)``: shaft angle [rad], speed [rad/s], the motor's electromagnetic
        torque [N m] and PWM duty [-] (:data:`retarget.twin.channel.SHAFT_COLUMNS`), at the current state.

        A modelled servo's come from its shaft's state and its loop at the goal in force
        (:func:`retarget.dynamixel.servo_loop.motor_output`); an ideal motor's angle and speed are its goal's, its
        torque the motor constraint's (what the structure takes), its duty that torque over the stall torque.
        """
        from retarget.dynamixel.servo_loop import motor_output

        engine = self.engine
        s = np.asarray(self._prev.s)
        t = self.time
        goal, rate = self.history.value(t), self.history.derivative(t)
        lay = engine.servos
        theta_at, omega_at = engine.shaft_angle_index, engine.shaft_speed_index
        out = np.zeros((len(self.servos), 4))
        structure = None
        for m, k in enumerate(lay.motor_servo):
            if k >= 0:
                th, w = float(s[theta_at[m]]), float(s[omega_at[m]])
                iota = float(s[lay.u_iota[k]]) if lay.u_iota[k] >= 0 else 0.0
                duty, torque = motor_output(lay.params[k], float(goal[m]), float(rate[m]), th, w, iota)
                out[m] = th, w, torque, duty
            else:
                if structure is None:
                    structure = engine.motor_torques(s)
                torque = -float(structure[m])
                out[m] = goal[m], rate[m], torque, torque / self.servos[m].stall_torque
        return out

    def _track_range(self, s: NDArray[np.float64]) -> None:
        """Update :attr:`SimulationStats.training_range`; log once per part when it passes the warning limit."""
        from retarget.sim.reduced.training import training_range, training_range_warning

        if self._z is None:
            return
        seen = self.stats.training_range
        for name, ratio in training_range(self.model.reduced, s[None, self._z]).items():
            if ratio > seen.get(name, 0.0):
                seen[name] = ratio
                warning = None if name in self._range_warned else training_range_warning({name: ratio})
                if warning:
                    self._range_warned.add(name)
                    self._log(f"twin: at t = {self.time:.3f} s {warning}")

    def state(self) -> NDArray[np.float64]:
        """The current state ``S = [U, V, λ]`` (n_S,)."""
        return np.asarray(self._prev.s).copy()

    def poses(self) -> NDArray[np.float64]:
        """Poses of :attr:`TwinModel.bodies`: ``(b, 7)``, centre of mass [m] and unit quaternion (x, y, z, w)."""
        s = self._prev.s
        out = np.empty((len(self._body_index), 7))
        for k, i in enumerate(self._body_index):
            out[k, :3] = s[7 * i : 7 * i + 3]
            q = s[7 * i + 3 : 7 * i + 7]  # engine order (w, x, y, z), homogeneous: normalize
            q = q / np.linalg.norm(q)
            out[k, 3:6] = q[1:]
            out[k, 6] = q[0]
        return out


def _engine_state(t: float, s: NDArray[np.float64], system) -> object:
    """An :class:`~retarget.sim.engine.EngineState` of the reduced engine at ``t`` from ``S`` (n_S,)."""
    from retarget.sim.engine import EngineState
    from retarget.sim.reduced.stepper import ReducedState

    s = np.array(s, dtype=float)
    nu, nv = system.n_u, system.n_v
    return EngineState(float(t), s, ReducedState(float(t), s[:nu].copy(), s[nu : nu + nv].copy(), s[nu + nv :].copy()))


def _remap_state(s: NDArray[np.float64], old, new) -> NDArray[np.float64]:
    """``S`` of ``old``'s layout in ``new``'s: the same model with other servos, whose tails of U and V
    (:mod:`retarget.sim.servo`) differ in the integral states only; a new integral state starts at 0."""
    s = np.asarray(s, dtype=float)
    if old.n_u == new.n_u and old.n_v == new.n_v:
        return s.copy()
    lo, ln = old.servo, new.servo
    out = np.zeros(new.n_u + new.n_v + new.n_lambda)
    u0, v0 = old.n_u - lo.size, old.n_v - lo.size
    out[:u0] = s[:u0]
    out[new.n_u : new.n_u + v0] = s[old.n_u : old.n_u + v0]
    for k in range(ln.n_servos):
        out[ln.u_theta[k]] = s[lo.u_theta[k]]
        out[new.n_u + ln.v_omega[k]] = s[old.n_u + lo.v_omega[k]]
        if ln.u_iota[k] >= 0 and lo.u_iota[k] >= 0:
            out[ln.u_iota[k]] = s[lo.u_iota[k]]
            out[new.n_u + ln.v_e[k]] = s[old.n_u + lo.v_e[k]]
    out[new.n_u + new.n_v :] = s[old.n_u + old.n_v :]
    return out


def static_state(engine, goal: NDArray[np.float64]):  # (reduced engine) -> EngineState
    """The quasi-static state of ``engine`` at the motor inputs ``goal`` (m,).

    Newton from the reference state, and when that fails (far from it: large angles), by continuation from the
    reference goals in steps of at most :data:`CONTINUATION_STEP`, each warm-started from the last.

    Raises:
        NewtonFailed, SimulationDiverged: no equilibrium reached.
    """
    from retarget.sim.errors import NewtonFailed, SimulationDiverged

    goal = np.asarray(goal, dtype=float)
    try:
        return engine.solve_static(goal)
    except (NewtonFailed, SimulationDiverged, np.linalg.LinAlgError):
        pass
    n = max(1, int(np.ceil(np.max(np.abs(goal)) / CONTINUATION_STEP)))
    state = None
    for k in range(1, n + 1):
        try:
            state = engine.solve_static(goal * k / n, warm=state)
        except np.linalg.LinAlgError as exc:  # a non-finite Newton matrix: report it as the engine does
            raise SimulationDiverged(0, 0.0, [], reason=f"quasi-static solve at {goal * k / n}: {exc}") from exc
    return state
