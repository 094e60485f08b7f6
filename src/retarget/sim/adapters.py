"""The engines the adjoint and the planner run: adapters behind the simulator's :class:`Engine` protocol.

The protocol and its types (:class:`Engine`, :class:`EngineState`, :class:`StepSensitivity`,
:class:`SystemEngine`, :func:`motor_rows`) are the simulator's (:mod:`retarget.sim.engine`,
docs/optimize.md, "Adjoint"). This module adds the adapters the optimizer runs:

- :class:`ReferenceReducedEngine` wraps the dense reference reduced stepper of :mod:`retarget.sim.reduced.stepper`
  (the oracle in tests); :class:`AbsoluteEngine` wraps the full absolute engine (:mod:`retarget.sim`);
- :func:`reduced_engine` picks the engine the planner runs on a reduced model:
  :class:`retarget.sim.reduced.CompiledReducedEngine` (numba), or the reference one;
- :func:`step_sensitivities` computes the per-step linearizations of a rollout, on several threads when the engine
  allows it.

Time starts at 0 at the quasi-static initial state.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray

from retarget.sim.bdf import BDF1, BDF2, history_jacobian_product
from retarget.sim.engine import Engine, EngineState, StepSensitivity, SystemEngine, warm_u

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from retarget.sim.motors import MotorTrajectory
    from retarget.sim.reduced.stepper import ReducedState
    from retarget.sim.reduced.system import ReducedSystem
    from retarget.sim.system import System

__all__ = ["PLAN_TOLERANCE", "AbsoluteEngine", "ReferenceReducedEngine", "planner_engine", "reduced_engine",
           "sensitivity_workers", "step_sensitivities"]


def sensitivity_workers() -> int:
    """Threads for the per-step linearizations of the backward and tangent passes (:func:`step_sensitivities`).

    ``NUMBA_NUM_THREADS`` (numba's default: the number of cores; the benchmarks set it to 1), at most the cores
    this process may use.
    """
    import os

    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(int(numba.config.NUMBA_NUM_THREADS), cores))


def step_sensitivities(engine: Engine, states: Sequence[EngineState], dt: float, motors: MotorTrajectory,
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


class ReferenceReducedEngine(SystemEngine):
    """The reduced model (relative coordinates) through the dense reference stepper (numpy, slow): the oracle
    the compiled :class:`retarget.sim.reduced.CompiledReducedEngine` is tested against.

    Args:
        system: a :class:`retarget.sim.reduced.ReducedSystem`.
        tolerance: Newton tolerance on the update (max-norm of δU [m] and Δt·δV); tight so that the discrete
            solution, hence the adjoint gradient, is exact to round-off.
        estimate: also stop Newton on the estimated remaining error (``retarget.sim.reduced.compiled.converged``),
            as :class:`~retarget.sim.reduced.CompiledReducedEngine`.
    """

    def __init__(self, system: ReducedSystem, tolerance: float = 1e-12, estimate: bool = False) -> None:
        super().__init__(system)
        self.tolerance = float(tolerance)
        self.estimate = bool(estimate)

    def _wrap(self, st: ReducedState) -> EngineState:
        return EngineState(float(st.t), st.s, st)

    def _on(self, system: ReducedSystem) -> ReferenceReducedEngine:
        return ReferenceReducedEngine(system, self.tolerance, self.estimate)

    def solve_static(self, theta: NDArray[np.float64], warm: EngineState | None = None) -> EngineState:
        from retarget.sim.reduced.stepper import solve_static

        u0 = None if warm is None else warm_u(warm, self.system.n_u)
        return self._wrap(solve_static(self.system, np.atleast_1d(theta), u0=u0))

    def reference_state(self) -> EngineState:
        from retarget.sim.reduced.stepper import ReducedState

        rs = self.system
        return self._wrap(ReducedState(0.0, rs.reference_u(), np.zeros(rs.n_v), np.zeros(rs.n_lambda)))

    def step(self, prev: EngineState, prev2: EngineState | None, dt: float, motors: MotorTrajectory, index: int,
             cache: dict) -> EngineState:
        from retarget.sim.reduced.stepper import step

        new, _ = step(self.system, prev.native, None if prev2 is None else prev2.native, dt, motors, cache, index,
                      tol=self.tolerance, max_iter=40, estimate=self.estimate)
        return self._wrap(new)

    def sensitivity(self, new: EngineState, prev: EngineState, prev2: EngineState | None, dt: float,
                    motors: MotorTrajectory) -> StepSensitivity:
        from retarget.sim.reduced.stepper import linearize

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
            return history_jacobian_product(nu, nv, a1 if k == 1 else a2, h, mass, mu, True)

        def history(k: int, delta: NDArray[np.float64]) -> NDArray[np.float64]:
            return history_jacobian_product(nu, nv, a1 if k == 1 else a2, h, mass, delta, False)

        return StepSensitivity(solve_t, history_t, lin.r_theta, lin.r_theta_dot, solve, history)


class AbsoluteEngine(SystemEngine):
    """The full absolute-coordinate engine (:mod:`retarget.sim`): slow, the reference for tiny test systems.

    Args:
        system: a :class:`retarget.sim.System`.
        tolerance: Newton tolerance (see :class:`retarget.sim.StepOptions`).
    """

    def __init__(self, system: System, tolerance: float = 1e-12) -> None:
        from retarget.sim.integrator import StepOptions

        super().__init__(system)
        self.options = StepOptions(tolerance=float(tolerance), max_iterations=40)
        self._history: dict[tuple[float, float], csr_matrix] = {}

    def _on(self, system: System) -> AbsoluteEngine:
        return AbsoluteEngine(system, self.options.tolerance)

    def solve_static(self, theta: NDArray[np.float64], warm: EngineState | None = None) -> EngineState:
        from retarget.sim.integrator import initial_state
        from retarget.sim.statics import solve_static

        u0 = None if warm is None else warm_u(warm, self.system.n_u)
        st = solve_static(self.system, np.atleast_1d(theta), u0=u0)
        st = initial_state(self.system, st.u).replace(lam=st.lam)
        return EngineState(0.0, st.s, st)

    def reference_state(self) -> EngineState:
        from retarget.sim.integrator import initial_state

        st = initial_state(self.system)
        return EngineState(0.0, st.s, st)

    def step(self, prev: EngineState, prev2: EngineState | None, dt: float, motors: MotorTrajectory, index: int,
             cache: dict) -> EngineState:
        from retarget.sim.integrator import FactorizationCache, step

        fc = cache.setdefault("factorization", FactorizationCache())
        new, _, _ = step(self.system, prev.native, None if prev2 is None else prev2.native, dt, motors,
                         self.options, index, fc)
        return EngineState(float(new.t), new.s, new)

    def sensitivity(self, new: EngineState, prev: EngineState, prev2: EngineState | None, dt: float,
                    motors: MotorTrajectory) -> StepSensitivity:
        import scipy.sparse.linalg as spla

        from retarget.sim.dae import history_jacobian
        from retarget.sim.integrator import linearize

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


def reduced_engine(system: ReducedSystem, tolerance: float = 1e-12, compiled: bool = True,
                   estimate: bool = False) -> Engine:
    """The optimizer's engine on a reduced model: the compiled one (same states, Jacobians and gradients as
    :class:`ReferenceReducedEngine` to round-off, about 10x faster), or the reference stepper with ``compiled=False``.
    The planner's runs take :func:`planner_engine`.

    ``estimate`` stops each step's Newton iteration on the estimated remaining error as well as on the update size
    (``retarget.sim.reduced.compiled.converged``): both leave the step within ``tolerance``; the estimate saves the
    last, confirming iteration. Exact-to-round-off gradients (finite-difference tests) want it off; the planner
    turns it on (docs/optimize.md "Newton test of the planner's runs").
    """
    if compiled:
        from retarget.sim.reduced import CompiledReducedEngine

        return CompiledReducedEngine(system, tolerance=tolerance, estimate=estimate)
    return ReferenceReducedEngine(system, tolerance=tolerance, estimate=estimate)


#: Newton tolerance of the planner's runs (update max-norm of δU [m] and Δt·δV): the plan's forward runs, adjoint
#: and tangent passes, and the checks after it.
PLAN_TOLERANCE = 1e-10


def planner_engine(system: ReducedSystem) -> Engine:
    """The compiled engine with the planner's Newton settings: :data:`PLAN_TOLERANCE`, stopping on the estimated
    remaining error too (``reduced_engine(estimate=True)``)."""
    return reduced_engine(system, tolerance=PLAN_TOLERANCE, estimate=True)
