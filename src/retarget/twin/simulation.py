"""The reduced simulation stepped live: motor angles arrive as samples, the robot follows, poses come out.

:class:`MotorHistory` holds the motor angles θ(t) [rad] and rates θ̇(t) [rad/s] measured on the servo shafts
(the servo model's output), sampled irregularly; between samples both are linear in time. :class:`TwinSimulation`
advances the compiled reduced engine (:class:`retarget.sim.reduced.CompiledReducedEngine`, BDF1 then BDF2, fixed
``dt``) with those values as the prescribed motor angles, never past the newest sample, so the simulation is
causal: it can lag the servos, never lead them. It is a plain object with no thread: the caller (the twin worker
process, or a test) decides when to step. The same θ(t) given to :func:`retarget.sim.reduced.simulate_compiled`
through :meth:`MotorHistory` gives the same states to Newton tolerance (tested).

Falling behind: each :meth:`TwinSimulation.advance` call is bounded in wall time, so the caller stays responsive.
The lag (newest motor time − simulation time) is reported; beyond ``max_lag_s`` the simulation drops the backlog
and restarts at rest from the quasi-static state at the newest angles (logged, counted in ``resyncs``): a
predictable degradation, instead of an ever-growing delay or memory.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from retarget.twin.model import TwinModel

__all__ = ["MotorHistory", "SimulationStats", "TwinSimulation"]


class MotorHistory:
    """Motor samples ``(t, θ, θ̇)`` in time order, interpolated linearly; the oldest are dropped on request.

    Args:
        n_motors: number of motors.

    Implements the engine's motor protocol: :meth:`value` ``(t) -> (m,)`` [rad], :meth:`derivative` [rad/s].
    Outside the samples the end values are held.
    """

    def __init__(self, n_motors: int) -> None:
        self.n = int(n_motors)
        self._t = np.zeros(0)
        self._theta = np.zeros((0, self.n))
        self._rate = np.zeros((0, self.n))
        self._pending: list[tuple[float, NDArray, NDArray]] = []

    def append(self, t: float, theta: NDArray[np.float64], theta_dot: NDArray[np.float64]) -> None:
        """Add a sample at time ``t`` [s]; samples not newer than the last one are ignored."""
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
        """θ(t) [rad], ``(m,)``."""
        return self._interp("theta", t)

    def derivative(self, t: float) -> NDArray[np.float64]:
        """θ̇(t) [rad/s], ``(m,)``."""
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
    """The twin's reduced simulation, advanced on demand from the motor history.

    Args:
        model: the reduced model (:func:`retarget.twin.model.load_twin_model`).
        dt: engine step [s] (default the engine's, 1 ms).
        tolerance: Newton tolerance (as :func:`~retarget.sim.reduced.simulate_compiled`'s default).
        max_lag_s: lag beyond which the backlog is dropped and the simulation restarts at rest [s].
        log: receives one line per notable event (restart, failure).
    """

    def __init__(self, model: TwinModel, dt: float | None = None, tolerance: float = 1e-10,
                 max_lag_s: float = 5.0, log: Callable[[str], None] | None = None) -> None:
        from retarget.sim.reduced.engine import DEFAULT_DT, CompiledReducedEngine

        self.model = model
        self.dt = float(dt if dt is not None else DEFAULT_DT)
        self.max_lag_s = float(max_lag_s)
        self.engine = CompiledReducedEngine(model.reduced, tolerance=tolerance)
        self.history = MotorHistory(len(model.motors))
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
        """Simulation time [s] (on the motor samples' clock)."""
        return float(self._prev.t) if self._prev is not None else float("nan")

    @property
    def lag_s(self) -> float:
        """Newest motor sample time − simulation time [s]."""
        return self.history.latest_time - self.time if self.started else 0.0

    def push(self, t: float, theta: NDArray[np.float64], theta_dot: NDArray[np.float64]) -> None:
        """Record the motor angles [rad] and rates [rad/s] at ``t`` [s], in the model's motor order ``(m,)``."""
        self.history.append(t, theta, theta_dot)

    def start(self, t: float | None = None) -> None:
        """Start at rest in the quasi-static state at the motor angles of time ``t`` (default: the newest sample).

        Raises:
            ValueError: no motor sample yet.
        """
        if not len(self.history):
            raise ValueError("no motor sample: push one before start()")
        t0 = self.history.latest_time if t is None else float(t)
        st = self.engine.solve_static(self.history.value(t0))
        self._prev = type(st)(t0, st.s, type(st.native)(t0, st.native.u, st.native.v, st.native.lam))
        self._prev2 = None
        self._cache = {}
        self._index = 0

    def advance(self, max_wall_s: float = 0.05, on_step: Callable[[float, NDArray], None] | None = None) -> int:
        """Step while a whole step fits before the newest motor sample, for at most ``max_wall_s`` [s].

        Args:
            max_wall_s: wall-time budget of this call [s] (at least one step is taken when one is possible).
            on_step: called after every step with ``(t, poses)`` (see :meth:`poses`).

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
        while self.time + self.dt <= self.history.latest_time + 1e-12:
            t0 = time.perf_counter()
            try:
                new = self.engine.step(self._prev, self._prev2, self.dt, self.history, self._index, self._cache)
            except (NewtonFailed, SimulationDiverged) as exc:
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
                on_step(self.time, self.poses())
            if time.perf_counter() - began > max_wall_s:
                break
        # BDF2 needs the samples back to t_{n-1}; older ones are never read again.
        self.history.drop_before(self.time - 2 * self.dt)
        return steps

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
