"""The simulator as the adjoint sees it: an :class:`Engine` protocol and adapters for both engines.

The discrete adjoint needs, from any BDF2 simulator (docs/optimize.md, "Adjoint"):

- a forward step that stores converged states ``S_n`` (:meth:`Engine.step`), from a quasi-static start
  (:meth:`Engine.solve_static`, also used for the targets);
- at a converged step, the exact Jacobian blocks (:class:`StepSensitivity`): a solve with ``(∂R_n/∂S_n)ᵀ``,
  products with ``(∂R_n/∂S_{n−k})ᵀ`` (k = 1, 2), and ``∂R_n/∂θ``, ``∂R_n/∂θ̇`` (θ̈ does not enter the DAE);
- where the tracked rigid bodies sit in ``S`` (both engines store rigid body ``i`` as ``U[7i:7i+7] = [c, q]``).

:class:`ReducedEngine` wraps the dense reference stepper of :mod:`retarget.sim.reduced.stepper`;
:class:`AbsoluteEngine` wraps the full absolute engine (:mod:`retarget.sim`);
:class:`retarget.sim.reduced.CompiledReducedEngine` implements the same protocol in numba and is what the
planner uses (:func:`reduced_engine`); the reference stepper stays the oracle in tests. Time starts at 0 at the
quasi-static initial state.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray

from retarget.optimize.errors import OptimizeError

__all__ = [
    "AbsoluteEngine", "Engine", "EngineState", "ReducedEngine", "StepSensitivity", "SystemEngine", "bdf_history",
    "motor_rows", "reduced_engine", "sensitivity_workers", "step_sensitivities",
]


@dataclass(frozen=True, eq=False)
class EngineState:
    """A converged state: time ``t`` [s] and ``S = [U, V, λ]`` (n_S,); ``native`` is the engine's own state object."""

    t: float
    s: NDArray[np.float64]
    native: Any = field(repr=False)


def sensitivity_workers() -> int:
    """Threads for the per-step linearizations of the backward and tangent passes (:func:`step_sensitivities`).

    ``NUMBA_NUM_THREADS`` (numba's default: the number of cores; the benchmarks set it to 1), at most the cores
    this process may use.
    """
    import os

    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(int(numba.config.NUMBA_NUM_THREADS), cores))


def step_sensitivities(engine: Engine, states: Sequence[EngineState], dt: float, motors: Any,
                       steps: Iterable[int], workers: int | None = None) -> Iterator[StepSensitivity]:
    """``engine.sensitivity`` of each step in ``steps`` (in that order) at the stored ``states``.

    The linearizations are independent given the states. An engine whose ``sensitivity`` releases the GIL and
    shares no mutable state (``concurrent_sensitivity = True``: the compiled reduced engine) computes them ahead on
    ``workers`` threads (default :func:`sensitivity_workers`) while the caller consumes them in order; otherwise,
    or with one worker, one at a time. At most ``2 × workers`` are held ahead.
    """
    workers = sensitivity_workers() if workers is None else int(workers)

    def one(k: int) -> StepSensitivity:
        return engine.sensitivity(states[k], states[k - 1], states[k - 2] if k >= 2 else None, dt, motors)

    if workers <= 1 or not getattr(engine, "concurrent_sensitivity", False):
        for k in steps:
            yield one(k)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    todo = iter(steps)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="retarget-linearize")
    try:
        ahead = deque(pool.submit(one, k) for k in itertools.islice(todo, 2 * workers))
        while ahead:
            sens = ahead.popleft().result()
            for k in itertools.islice(todo, 1):
                ahead.append(pool.submit(one, k))
            yield sens
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True, eq=False)
class StepSensitivity:
    """Exact derivatives of one BDF residual ``R_n(S_n, S_{n−1}, S_{n−2}, θ_n, θ̇_n)`` at its converged state.

    Attributes:
        solve_transposed: ``rhs ↦ (∂R_n/∂S_n)⁻ᵀ rhs`` (n_S,) → (n_S,).
        history_transposed: ``(k, μ) ↦ (∂R_n/∂S_{n−k})ᵀ μ`` for k = 1, 2 (zero for a state not in the history).
        r_theta: ``∂R_n/∂θ`` (n_S, n_motors).
        r_theta_dot: ``∂R_n/∂θ̇`` (n_S, n_motors).
        solve: ``rhs ↦ (∂R_n/∂S_n)⁻¹ rhs`` for (n_S,) or (n_S, p) (the tangent-linear pass of Gauss–Newton).
        history: ``(k, δ) ↦ (∂R_n/∂S_{n−k}) δ`` for (n_S,) or (n_S, p).
    """

    solve_transposed: Callable[[NDArray[np.float64]], NDArray[np.float64]]
    history_transposed: Callable[[int, NDArray[np.float64]], NDArray[np.float64]]
    r_theta: NDArray[np.float64]
    r_theta_dot: NDArray[np.float64]
    solve: Callable[[NDArray[np.float64]], NDArray[np.float64]] | None = None
    history: Callable[[int, NDArray[np.float64]], NDArray[np.float64]] | None = None


def bdf_history(nu: int, nv: int, coef: float, h: float, mass: NDArray[np.float64], delta: NDArray[np.float64],
                transposed: bool) -> NDArray[np.float64]:
    """``(∂R_n/∂S_{n−k}) δ`` (or its transpose) of the reduced engines' BDF residual for history coefficient
    ``coef``: ``R_U`` holds ``−Ū``, ``R_V`` holds ``−mass V̄ / h`` (δ (n_S,) or (n_S, p))."""
    out = np.zeros_like(delta)
    if coef != 0.0:
        out[:nu] = -coef * delta[:nu]
        out[nu : nu + nv] = -coef / h * ((mass.T if transposed else mass) @ delta[nu : nu + nv])
    return out


class Engine(Protocol):
    """What the adjoint and the planner need from a simulator (see the module docstring)."""

    @property
    def n_state(self) -> int:
        """Length of ``S``."""
        ...

    @property
    def motor_names(self) -> tuple[str, ...]:
        """Motors in command order."""
        ...

    def rigid_index(self, link: str) -> int:
        """Index ``i`` of the rigid body of link ``link`` (``U[7i:7i+7] = [c, q]``)."""
        ...

    def frame_rotation(self, index: int) -> NDArray[np.float64]:
        """Link frame orientation of rigid body ``index`` at the reference (3, 3)."""
        ...

    def solve_static(self, theta: NDArray[np.float64], warm: EngineState | None = None) -> EngineState:
        """Gravity equilibrium at motor values ``theta`` (n_motors,), ``V = 0``, time 0."""
        ...

    def reference_state(self) -> EngineState:
        """The reference configuration at rest (``V = 0``, ``λ = 0``), time 0."""
        ...

    def step(self, prev: EngineState, prev2: EngineState | None, dt: float, motors: Any, index: int,
             cache: dict) -> EngineState:
        """One BDF step (BDF1 without ``prev2``) converged to the engine's tolerance."""
        ...

    def sensitivity(self, new: EngineState, prev: EngineState, prev2: EngineState | None, dt: float,
                    motors: Any) -> StepSensitivity:
        """The exact Jacobian blocks of the step that produced ``new``."""
        ...

    def motor_torques(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        """Motor constraint multipliers (torque [N m] for hinges, force [N] for sliders) (n_motors,) from ``S``."""
        ...

    @property
    def motor_torque_index(self) -> NDArray[np.int64]:
        """Where the motor torques sit in ``S``: ``motor_torques(s) = s[motor_torque_index]`` (n_motors,)."""
        ...


def motor_rows(constraints: tuple, lambda_offsets: tuple[int, ...], n_motors: int) -> NDArray[np.int64]:
    """Index in ``λ`` of each motor's row (the last row of its motorized joint block) (n_motors,)."""
    rows = np.full(n_motors, -1, dtype=np.int64)
    for b, blk in enumerate(constraints):
        if getattr(blk, "motor", -1) >= 0:
            rows[blk.motor] = lambda_offsets[b + 1] - 1
    if np.any(rows < 0):
        raise OptimizeError(f"motors without a constraint row: {np.flatnonzero(rows < 0).tolist()}")
    return rows


_COMPLEX_STEP = 1e-30


class SystemEngine:
    """What every engine adapter reads off its simulated system (absolute or reduced; both share the state layout
    and constraint bookkeeping): state size, motor names, where tracked rigid bodies sit, the motor rows of λ.

    Args:
        system: a :class:`retarget.sim.System` or :class:`retarget.sim.reduced.ReducedSystem`.
    """

    def __init__(self, system: Any) -> None:
        self.system = system
        self._motor_rows = motor_rows(system.constraints, system.lambda_offsets, len(system.motors))

    @property
    def n_state(self) -> int:
        return self.system.n_u + self.system.n_v + self.system.n_lambda

    @property
    def motor_names(self) -> tuple[str, ...]:
        return tuple(self.system.motors)

    def rigid_index(self, link: str) -> int:
        try:
            return self.system.rigid_index(link)
        except KeyError as exc:
            raise OptimizeError(f"tracked link {link!r} is not a rigid body of the model; rigid bodies: "
                                f"{[b.name for b in self.system.rigid]}") from exc

    def frame_rotation(self, index: int) -> NDArray[np.float64]:
        return np.asarray(self.system.rigid[index].frame_rotation, dtype=float)

    @property
    def motor_torque_index(self) -> NDArray[np.int64]:
        return self.system.n_u + self.system.n_v + self._motor_rows

    def motor_torques(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(s[self.motor_torque_index])


class ReducedEngine(SystemEngine):
    """The reduced model (relative coordinates) through the dense reference stepper.

    Args:
        system: a :class:`retarget.sim.reduced.ReducedSystem`.
        tolerance: Newton tolerance on the update (max-norm of δU [m] and Δt·δV); tight so that the discrete
            solution, hence the adjoint gradient, is exact to round-off.
    """

    def __init__(self, system: Any, tolerance: float = 1e-12) -> None:
        super().__init__(system)
        self.tolerance = float(tolerance)
        self._motor_blocks = [b for b, blk in enumerate(system.constraints) if getattr(blk, "motor", -1) >= 0]

    def _wrap(self, st: Any) -> EngineState:
        return EngineState(float(st.t), st.s, st)

    def solve_static(self, theta: NDArray[np.float64], warm: EngineState | None = None) -> EngineState:
        from retarget.sim.reduced.stepper import solve_static

        u0 = None if warm is None else warm.native.u
        return self._wrap(solve_static(self.system, np.atleast_1d(theta), u0=u0))

    def reference_state(self) -> EngineState:
        from retarget.sim.reduced.stepper import ReducedState

        rs = self.system
        return self._wrap(ReducedState(0.0, rs.reference_u(), np.zeros(rs.n_v), np.zeros(rs.n_lambda)))

    def step(self, prev: EngineState, prev2: EngineState | None, dt: float, motors: Any, index: int,
             cache: dict) -> EngineState:
        from retarget.sim.reduced.stepper import step

        new, _ = step(self.system, prev.native, None if prev2 is None else prev2.native, dt, motors, cache, index,
                      tol=self.tolerance, max_iter=40)
        return self._wrap(new)

    def sensitivity(self, new: EngineState, prev: EngineState, prev2: EngineState | None, dt: float,
                    motors: Any) -> StepSensitivity:
        from retarget.sim.reduced.stepper import BDF1, BDF2, linearize

        rs = self.system
        lin = linearize(rs, new.native, prev.native, None if prev2 is None else prev2.native, dt, motors)
        a1, a2, gamma = BDF1 if prev2 is None else BDF2
        h = gamma * dt
        lu = sla.lu_factor(lin.jacobian, check_finite=False)
        nu, nv = rs.n_u, rs.n_v
        mass = lin.mass

        def solve_t(rhs: NDArray[np.float64]) -> NDArray[np.float64]:
            return sla.lu_solve(lu, rhs, trans=1, check_finite=False)

        def solve(rhs: NDArray[np.float64]) -> NDArray[np.float64]:
            return sla.lu_solve(lu, rhs, check_finite=False)

        def history_t(k: int, mu: NDArray[np.float64]) -> NDArray[np.float64]:
            return bdf_history(nu, nv, a1 if k == 1 else a2, h, mass, mu, True)

        def history(k: int, delta: NDArray[np.float64]) -> NDArray[np.float64]:
            return bdf_history(nu, nv, a1 if k == 1 else a2, h, mass, delta, False)

        theta = np.atleast_1d(motors.value(new.t))
        theta_dot = np.atleast_1d(motors.derivative(new.t))
        r_theta = self._r_theta(new.native, theta, theta_dot, 1.0 / h)
        return StepSensitivity(solve_t, history_t, r_theta, lin.r_theta_dot, solve, history)

    def _r_theta(self, st: Any, theta: NDArray[np.float64], theta_dot: NDArray[np.float64],
                 baumgarte: float) -> NDArray[np.float64]:
        """``∂R/∂θ`` (n_S, n_motors) of the reduced residual.

        θ enters only the motorized joint blocks (rigid slots): the λ rows ``C_θ θ̇ + C_y ẏ + a C`` and the
        V rows ``−Tᵀ C_yᵀ λ``. The mixed derivatives ``∂C_y/∂θ`` and ``∂C_θ/∂θ`` are complex steps in θ of the
        analytic ``C_y`` and ``C_θ`` (holomorphic evaluations, exact to rounding), as in the absolute engine.
        """
        from retarget.sim.constraints import theta_derivative
        from retarget.sim.rotation import quat_rate_matrix

        rs = self.system
        nu, nv = rs.n_u, rs.n_v
        out = np.zeros((self.n_state, len(rs.motors)))
        for b in self._motor_blocks:
            blk = rs.constraints[b]
            bodies = [s.body for s in blk.slots]
            ui = np.concatenate([7 * i + np.arange(7) for i in bodies])
            vi = np.concatenate([6 * i + np.arange(6) for i in bodies])
            ul, vl = st.u[ui], st.v[vi]
            tl = np.zeros((len(ui), len(vi)))
            for k in range(len(bodies)):
                tl[7 * k : 7 * k + 3, 6 * k : 6 * k + 3] = np.eye(3)
                tl[7 * k + 3 : 7 * k + 7, 6 * k + 3 : 6 * k + 6] = 0.5 * quat_rate_matrix(ul[7 * k + 3 : 7 * k + 7])
            ydot = tl @ vl
            m = blk.motor
            l0, l1 = rs.lambda_offsets[b], rs.lambda_offsets[b + 1]
            th = complex(theta[m], _COMPLEX_STEP)
            _, cy = blk.evaluate(ul.astype(complex)[None], np.array([th]))
            d_cy = cy[0].imag / _COMPLEX_STEP
            c_th = theta_derivative(blk, ul[None], np.array([theta[m]])).real[0]
            c_thth = theta_derivative(blk, ul.astype(complex)[None], np.array([th])).imag[0] / _COMPLEX_STEP
            out[nu + nv + l0 : nu + nv + l1, m] = c_thth * theta_dot[m] + d_cy @ ydot + baumgarte * c_th
            out[nu + vi, m] -= tl.T @ (d_cy.T @ st.lam[l0:l1])
        return out


class AbsoluteEngine(SystemEngine):
    """The full absolute-coordinate engine (:mod:`retarget.sim`): slow, the reference for tiny test systems.

    Args:
        system: a :class:`retarget.sim.System`.
        tolerance: Newton tolerance (see :class:`retarget.sim.StepOptions`).
    """

    def __init__(self, system: Any, tolerance: float = 1e-12) -> None:
        from retarget.sim.integrator import StepOptions

        super().__init__(system)
        self.options = StepOptions(tolerance=float(tolerance), max_iterations=40)
        self._history: dict[tuple[float, float], Any] = {}

    def solve_static(self, theta: NDArray[np.float64], warm: EngineState | None = None) -> EngineState:
        from retarget.sim.integrator import initial_state
        from retarget.sim.statics import solve_static

        u0 = None if warm is None else warm.native.u
        st = solve_static(self.system, np.atleast_1d(theta), u0=u0)
        st = initial_state(self.system, st.u).replace(lam=st.lam)
        return EngineState(0.0, st.s, st)

    def reference_state(self) -> EngineState:
        from retarget.sim.integrator import initial_state

        st = initial_state(self.system)
        return EngineState(0.0, st.s, st)

    def step(self, prev: EngineState, prev2: EngineState | None, dt: float, motors: Any, index: int,
             cache: dict) -> EngineState:
        from retarget.sim.integrator import FactorizationCache, step

        fc = cache.setdefault("factorization", FactorizationCache())
        new, _, _ = step(self.system, prev.native, None if prev2 is None else prev2.native, dt, motors,
                         self.options, index, fc)
        return EngineState(float(new.t), new.s, new)

    def sensitivity(self, new: EngineState, prev: EngineState, prev2: EngineState | None, dt: float,
                    motors: Any) -> StepSensitivity:
        import scipy.sparse.linalg as spla

        from retarget.sim.dae import history_jacobian
        from retarget.sim.integrator import BDF1, BDF2, linearize

        lin = linearize(self.system, new.native, prev.native, None if prev2 is None else prev2.native, dt, motors,
                        self.options)
        a1, a2, gamma = BDF1 if prev2 is None else BDF2
        h = gamma * dt
        lu = spla.splu(lin.matrix().T.tocsc(), permc_spec="COLAMD")
        hist = {}
        for k, coef in ((1, a1), (2, a2)):
            key = (h, coef)
            if coef != 0.0 and key not in self._history:
                self._history[key] = history_jacobian(self.system, h, coef).tocsr()
            hist[k] = self._history.get(key) if coef != 0.0 else None

        def history_t(k: int, mu: NDArray[np.float64]) -> NDArray[np.float64]:
            mat = hist.get(k)
            return np.zeros_like(mu) if mat is None else np.asarray(mat.T @ mu)

        def history(k: int, delta: NDArray[np.float64]) -> NDArray[np.float64]:
            mat = hist.get(k)
            return np.zeros_like(delta) if mat is None else np.asarray(mat @ delta)

        def solve(rhs: NDArray[np.float64]) -> NDArray[np.float64]:
            return lu.solve(np.asarray(rhs, dtype=float), trans="T")

        return StepSensitivity(lu.solve, history_t, np.asarray(lin.r_theta), np.asarray(lin.r_theta_dot), solve,
                               history)


def reduced_engine(system: Any, tolerance: float = 1e-12, compiled: bool = True) -> Engine:
    """The engine the planner runs on a reduced model: the compiled one (same states, Jacobians and gradients
    as :class:`ReducedEngine` to round-off, about 10x faster), or the reference stepper with ``compiled=False``."""
    if compiled:
        from retarget.sim.reduced import CompiledReducedEngine

        return CompiledReducedEngine(system, tolerance=tolerance)
    return ReducedEngine(system, tolerance=tolerance)
