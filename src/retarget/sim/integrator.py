"""BDF1/BDF2 time stepping of the index-2 DAE: Newton on ``S = [U, V, λ]`` with the exact Jacobian.

The step is a short chain of pure functions: :func:`retarget.sim.bdf.step_inputs` (Ū, V̄, h, θ, θ̇, a) →
:func:`solve_newton` (iterate :func:`retarget.sim.dae.residual_and_jacobian` + :func:`solve_linearized`) → a new
:class:`State`. Each Newton system is solved by eliminating the U rows exactly (their Jacobian is the identity
except 4×4 quaternion blocks) and factorizing the remaining ``[V, λ]`` saddle-point system with SuperLU; this is
algebraically the full-space Newton step on ``S``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from retarget.sim.bdf import step_inputs
from retarget.sim.dae import Linearization, residual_and_jacobian
from retarget.sim.errors import NewtonFailed, SimulationDiverged
from retarget.sim.motors import MotorTrajectory
from retarget.sim.newton import FastFactorization, NewtonPlan, Residual, factorize_fast, newton_plan, quat_rate_half
from retarget.sim.newton import residual as fast_residual
from retarget.sim.system import System

__all__ = [
    "State",
    "StepOptions",
    "FactorizationCache",
    "Factorization",
    "factorize",
    "linearize",
    "initial_state",
    "simulate_states",
    "solve_linearized",
    "solve_newton",
    "step",
]

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class State:
    """The DAE state at time ``t``: ``U`` (nU,), ``V`` (nV,), ``λ`` (m,) (layout: :class:`System`)."""

    t: float
    u: NDArray[np.float64]
    v: NDArray[np.float64]
    lam: NDArray[np.float64]

    def replace(self, **changes: object) -> State:
        """A copy with some fields changed."""
        return replace(self, **changes)

    @property
    def s(self) -> NDArray[np.float64]:
        """``S = [U, V, λ]`` (nS,)."""
        return np.concatenate([self.u, self.v, self.lam])


@dataclass(frozen=True)
class StepOptions:
    """Newton and stabilization settings.

    Attributes:
        baumgarte: ``a`` [1/s] in ``Ċ + a C = 0``; None = ``1 / h`` (critically damps constraint drift per step).
        max_iterations: Newton iteration limit.
        tolerance: convergence when the update's max-norm on U ≤ ``tolerance`` [m] and on V·Δt ≤ ``tolerance``.
        reuse_factorization: keep the factorized Jacobian across iterations and steps (chord iterations) while
            it contracts by ``chord_contraction`` per iteration; the converged state is the same DAE solution.
        chord_contraction: see above.
        estimate_error: also stop when the contraction-based estimate of the remaining error,
            ``θ/(1 − θ)·|δ|`` with ``θ = |δ_k|/|δ_{k−1}|``, is below ``tolerance`` (the usual test for simplified
            Newton). Off by default: ~1 iteration per step fewer on a moving rod, but the contraction is
            irregular (the Newton matrix omits ``h β dK[u̇]``), so the estimate is optimistic and states drift
            by ~1e-8 m over 20 steps instead of ~1e-11 m (tests/sim/test_integrator.py) — too coarse for
            finite-difference gradient checks.
        max_backtracks: damped Newton: halvings of an update whose iterate inverts an element or whose exact
            Newton step fails the natural monotonicity test once the iteration stopped contracting; 0 disables.
        predictor: Newton's starting guess: ``"extrapolate"`` (second order: V and λ extrapolated linearly from
            the last two states, U advanced with their mean velocity) or ``"constant_velocity"`` (first order).
        max_halvings: :func:`simulate_states` only: a step whose Newton fails is redone as two half steps (BDF1
            restart, then BDF2 at the half step), each halved again on failure, at most this many times (0:
            fail at once). The stored states stay on the ``dt`` grid; the next full step is BDF2 from the grid
            states again. Violent motions (a rod whipping at the end of a fast servo move) need a few of these
            where a smaller ``dt`` throughout would cost the whole run. :func:`step` itself never subdivides (the
            discrete adjoint differentiates it).
    """

    baumgarte: float | None = None
    max_iterations: int = 25
    tolerance: float = 1e-10
    reuse_factorization: bool = True
    chord_contraction: float = 0.3
    estimate_error: bool = False
    max_backtracks: int = 6
    predictor: str = "extrapolate"
    max_halvings: int = 3


def initial_state(system: System, u: NDArray[np.float64] | None = None, t: float = 0.0) -> State:
    """A state at rest: ``U`` = reference (or ``u``), ``V = 0``, ``λ = 0``."""
    u0 = system.reference_u() if u is None else np.asarray(u, dtype=float).copy()
    return State(t, u0, np.zeros(system.n_v), np.zeros(system.n_lambda))


def _quaternion_block_inverse(system: System, lin: Linearization) -> sp.csr_matrix:
    """``(∂R_U/∂U)⁻¹``: identity except the rigid bodies' 4×4 quaternion blocks."""
    juu = lin.j_uu
    nu = system.n_u
    nb = len(system.rigid)
    if nb == 0:
        return sp.identity(nu, format="csr")
    rows, cols, vals = [], [], []
    dense = juu[: 7 * nb, : 7 * nb].toarray()
    for i in range(nb):
        blk = dense[7 * i + 3 : 7 * i + 7, 7 * i + 3 : 7 * i + 7]
        inv = np.linalg.inv(blk)
        idx = np.arange(7 * i + 3, 7 * i + 7)
        rows.append(np.repeat(idx, 4))
        cols.append(np.tile(idx, 4))
        vals.append(inv.ravel())
        idc = np.arange(7 * i, 7 * i + 3)
        rows.append(idc)
        cols.append(idc)
        vals.append(1.0 / np.diag(dense)[idc])
    rest = np.arange(7 * nb, nu)
    rows.append(rest)
    cols.append(rest)
    vals.append(np.ones(len(rest)))
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(nu, nu))


@dataclass(frozen=True, eq=False)
class Factorization:
    """A factorized Newton matrix (U rows eliminated), reusable for chord iterations."""

    lu: spla.SuperLU
    p: sp.csr_matrix
    pj: sp.csr_matrix
    j_vu: sp.csr_matrix
    j_lu: sp.csr_matrix
    n_v: int

    def solve(self, lin: Linearization) -> NDArray[np.float64]:
        """``δS`` for the residual in ``lin`` (with this factorization's Jacobian)."""
        pr = self.p @ lin.r_u
        rhs = np.concatenate([-lin.r_v + self.j_vu @ pr, -lin.r_lambda + self.j_lu @ pr])
        sol = self.lu.solve(rhs)
        du = -pr - self.pj @ sol[: self.n_v]
        return np.concatenate([du, sol])


def factorize(system: System, lin: Linearization) -> Factorization:
    """Factorize ``∂R/∂S`` after exact elimination of the U rows.

    ``δU = P(−R_U − J_UV δV)`` with ``P = J_UU⁻¹``; the ``[δV, δλ]`` system has the blocks
    ``J_VV − J_VU P J_UV``, ``J_Vλ``, ``J_λV − J_λU P J_UV`` and ``0``; SuperLU with COLAMD ordering.
    """
    p = _quaternion_block_inverse(system, lin)
    pj = (p @ lin.j_uv).tocsr()
    a_vv = lin.j_vv - lin.j_vu @ pj
    if system.n_lambda:
        a_lv = lin.j_lv - lin.j_lu @ pj
        mat = sp.bmat([[a_vv, lin.j_vl], [a_lv, None]], format="csc")
    else:
        mat = a_vv.tocsc()
    lu = spla.splu(mat, permc_spec="COLAMD")
    return Factorization(lu, p, pj, lin.j_vu, lin.j_lu, system.n_v)


def solve_linearized(system: System, lin: Linearization) -> NDArray[np.float64]:
    """The full Newton update ``δS = −(∂R/∂S)⁻¹ R`` at ``lin``."""
    return factorize(system, lin).solve(lin)


@dataclass
class FactorizationCache:
    """Carries the last factorization from step to step (a performance cache: results agree within the Newton
    tolerance with or without it). Reused while ``h`` is unchanged and chord iterations contract fast."""

    factorization: Factorization | FastFactorization | None = None
    h: float = 0.0
    factorizations: int = 0


def solve_newton(
    system: System,
    guess: NDArray[np.float64],
    residual_fn: Callable[[NDArray[np.float64], bool], Linearization],
    dt: float,
    options: StepOptions,
    step_index: int,
    t: float,
    cache: FactorizationCache | None = None,
    h: float = 0.0,
) -> tuple[NDArray[np.float64], Linearization, int]:
    """Newton's method from ``guess`` until the update is below tolerance.

    With a ``cache``, the Jacobian is refactorized only when needed (first use, new ``h``, or when the chord
    iteration contracts by less than ``options.chord_contraction`` per iteration); otherwise every iteration
    uses the exact Jacobian at the current iterate.

    Returns:
        ``S`` (nS,), the last linearization (residual-only during chord iterations), and the iteration count.

    Raises:
        SimulationDiverged: non-finite iterate or residual, inverted element.
        NewtonFailed: no convergence within ``options.max_iterations``.
    """
    s = guess.copy()
    norms: list[dict[str, float]] = []
    nu, nv = system.n_u, system.n_v
    factor = cache.factorization if (cache is not None and cache.h == h) else None
    fresh = False
    previous = np.inf
    for it in range(options.max_iterations):
        need = factor is None
        try:
            lin = residual_fn(s, need)
        except Exception as exc:  # an element inverted, or the geometry became singular
            if isinstance(exc, (ArithmeticError, np.linalg.LinAlgError)) or type(exc).__name__.endswith("Error"):
                raise SimulationDiverged(step_index, t, norms, reason=f"{type(exc).__name__}: {exc}") from exc
            raise
        rn = lin.residual_norms()
        norms.append(rn)
        if not all(np.isfinite(x) for x in rn.values()):
            raise SimulationDiverged(step_index, t, norms, reason="non-finite residual")
        if need:
            factor = factorize(system, lin)
            fresh = True
            if cache is not None:
                cache.factorization, cache.h = factor, h
                cache.factorizations += 1
        assert factor is not None
        delta = factor.solve(lin)
        if not np.all(np.isfinite(delta)):
            raise SimulationDiverged(step_index, t, norms, reason="singular Newton system")
        s += delta
        size = max(float(np.max(np.abs(delta[:nu]), initial=0.0)), dt * float(np.max(np.abs(delta[nu : nu + nv]), initial=0.0)))
        if size <= options.tolerance:
            return s, lin, it + 1
        if not fresh and size > options.chord_contraction * previous:
            factor = None
        previous = size
        fresh = False if not need else fresh
    raise NewtonFailed(step_index, t, norms)


def step(
    system: System,
    prev: State,
    prev2: State | None,
    dt: float,
    motors: MotorTrajectory,
    options: StepOptions = StepOptions(),
    step_index: int = 1,
    cache: FactorizationCache | None = None,
) -> tuple[State, Linearization, int]:
    """One BDF step: BDF1 if ``prev2`` is None, else BDF2 (constant ``dt`` [s]).

    Returns:
        The new state, the last linearization (see :func:`solve_newton`; use :func:`linearize` for the exact
        Jacobian at the new state), and the Newton iteration count.
    """
    t = prev.t + dt
    inputs = step_inputs(prev, prev2, dt, motors.value(t), motors.derivative(t), options.baumgarte)
    guess = _predict(system, prev, prev2 if options.predictor == "extrapolate" else None, dt)
    plan = newton_plan(system)

    def residual_fn(s: NDArray[np.float64], jacobian: bool) -> Residual:
        return fast_residual(plan, s, inputs, jacobian)

    s, res, iters = _solve_newton_fast(plan, guess, residual_fn, dt, options, step_index, t, cache, inputs.h)
    u, v, lam = system.split_s(s)
    lin = Linearization(res.r_u, res.r_v, res.r_lambda, *([None] * 10))  # type: ignore[arg-type]
    return State(t, u.copy(), v.copy(), lam.copy()), lin, iters


def _factorize_counted(
    plan: NewtonPlan,
    res: Residual,
    cache: FactorizationCache | None,
    reuse: bool,
    h: float,
    step_index: int,
    t: float,
    norms: list[dict[str, float]],
) -> FastFactorization:
    """A fresh factorization of the Newton matrix at ``res``, counted in ``cache`` (and kept there with ``reuse``).

    Raises:
        SimulationDiverged: the Newton system is singular.
    """
    try:
        factor = factorize_fast(plan, res)
    except (np.linalg.LinAlgError, RuntimeError, ValueError) as exc:
        raise SimulationDiverged(step_index, t, norms, reason=f"singular Newton system: {exc}") from exc
    if cache is not None:
        cache.factorizations += 1
        if reuse:
            cache.factorization, cache.h = factor, h  # type: ignore[assignment]
    return factor


def _failure_reason(exc: BaseException, backtracks: int) -> str:
    """Why a residual evaluation failed, with the number of halvings tried before."""
    reason = f"{type(exc).__name__}: {exc}"
    if backtracks:
        reason += f" (after {backtracks} halvings of the Newton update: the step itself is too large, reduce dt)"
    return reason


def _solve_newton_fast(
    plan: NewtonPlan,
    guess: NDArray[np.float64],
    residual_fn: Callable[[NDArray[np.float64], bool], Residual],
    dt: float,
    options: StepOptions,
    step_index: int,
    t: float,
    cache: FactorizationCache | None,
    h: float,
) -> tuple[NDArray[np.float64], Residual, int]:
    """:func:`solve_newton` on the fast path (:mod:`retarget.sim.newton`).

    Small (dense) systems refactorize every iteration (exact Newton: the Jacobian costs about as much as the
    residual there); large ones reuse the factorization while chord iterations contract fast enough.
    Convergence: the update's max-norm (or, with ``options.estimate_error``, the contraction-based estimate of
    the remaining error) ≤ ``options.tolerance``. Damping: an update whose iterate inverts an element (or makes
    the residual non-finite) is halved, with a fresh Jacobian at the shortened iterate, up to
    ``options.max_backtracks`` times.
    """
    system = plan.system
    s = guess.copy()
    norms: list[dict[str, float]] = []
    nu, nv = system.n_u, system.n_v
    reuse = cache is not None and not plan.dense
    factor = cache.factorization if (reuse and cache is not None and cache.h == h) else None
    if not isinstance(factor, FastFactorization) or factor.plan is not plan:
        factor = None
    fresh = False
    previous = np.inf
    last_delta: NDArray[np.float64] | None = None
    backtracks = 0
    damped = False
    for it in range(options.max_iterations):
        need = factor is None
        try:
            res = residual_fn(s, need)
            rn = res.residual_norms()
            if not all(np.isfinite(x) for x in rn.values()):
                raise FloatingPointError("non-finite residual")
        except Exception as exc:  # an element inverted, or the geometry became singular
            if not (isinstance(exc, (ArithmeticError, np.linalg.LinAlgError)) or type(exc).__name__.endswith("Error")):
                raise
            if last_delta is not None and backtracks < options.max_backtracks:
                # Damped Newton: retreat halfway along the last update and relinearize there.
                backtracks += 1
                last_delta *= 0.5
                s -= last_delta
                factor, previous = None, np.inf
                continue
            raise SimulationDiverged(step_index, t, norms, reason=_failure_reason(exc, backtracks)) from exc
        norms.append(rn)
        if need:
            factor = _factorize_counted(plan, res, cache, reuse, h, step_index, t, norms)
            fresh = True
        assert factor is not None
        delta = factor.solve(res)
        if not np.all(np.isfinite(delta)):
            raise SimulationDiverged(step_index, t, norms, reason="singular Newton system")
        size = _update_size(delta, nu, nv, dt)
        if size <= options.tolerance:
            return s + delta, res, it + 1
        theta = size / previous if previous > 0.0 else 0.0  # 0 after a restart (previous = inf): no estimate
        if theta >= 1.0:
            # The iteration no longer contracts. With a stale Jacobian (the geometry changed too much since it
            # was factorized) drop the update and relinearize here; with a fresh one, Newton overshoots from a
            # poor guess: damp every further exact step of this time step (natural monotonicity test).
            if not fresh:
                factor, previous = None, np.inf
                continue
            damped = True
        if damped and fresh:
            damped_delta, _ = _damped_update(residual_fn, factor, s, delta, size, nu, nv, dt, options.max_backtracks)
            if damped_delta is None:
                raise SimulationDiverged(
                    step_index, t, norms,
                    reason=f"Newton overshoots even when its update is halved {options.max_backtracks} times: the "
                    "time step is too large for this motion (reduce dt)",
                )
            s += damped_delta
            last_delta = damped_delta
            previous, fresh, factor = _update_size(damped_delta, nu, nv, dt), False, None
            continue
        s += delta
        last_delta = delta
        if options.estimate_error and 0.0 < theta < 1.0 and theta / (1.0 - theta) * size <= options.tolerance:
            return s, res, it + 1
        if not reuse or (not fresh and theta > options.chord_contraction):
            factor = None
        previous = size
        fresh = False
    raise NewtonFailed(step_index, t, norms)


def _predict(system: System, prev: State, prev2: State | None, dt: float) -> NDArray[np.float64]:
    """Newton's starting guess ``S`` (nS,): with two past states, V and λ extrapolated linearly and U advanced
    with the mean of the old and extrapolated velocities (second order); else constant velocity."""
    if prev2 is None:
        return np.concatenate([prev.u + dt * _u_rate(system, prev), prev.v, prev.lam])
    v_next = 2.0 * prev.v - prev2.v
    mid = prev.replace(v=0.5 * (prev.v + v_next))
    return np.concatenate([prev.u + dt * _u_rate(system, mid), v_next, 2.0 * prev.lam - prev2.lam])


def _update_size(delta: NDArray[np.float64], nu: int, nv: int, dt: float) -> float:
    """The convergence measure of an update: max-norm over ``δU`` [m] and ``Δt δV`` [m]."""
    return max(float(np.max(np.abs(delta[:nu]), initial=0.0)), dt * float(np.max(np.abs(delta[nu : nu + nv]), initial=0.0)))


def _damped_update(
    residual_fn: Callable[[NDArray[np.float64], bool], Residual],
    factor: FastFactorization,
    s: NDArray[np.float64],
    delta: NDArray[np.float64],
    size: float,
    nu: int,
    nv: int,
    dt: float,
    max_backtracks: int,
) -> tuple[NDArray[np.float64] | None, Residual | None]:
    """Deuflhard's natural monotonicity test: the largest ``λ = 1, ½, ¼, …`` whose simplified Newton correction
    at ``s + λ δ`` (same factorization) shrinks, ``|δ̄(λ)| ≤ (1 − λ/4) |δ|``. Returns ``(λ δ, residual there)``
    or ``(None, None)`` when ``max_backtracks`` halvings do not pass."""
    lam = 1.0
    for _ in range(max_backtracks + 1):
        trial = s + lam * delta
        try:
            res = residual_fn(trial, False)
            bar = factor.solve(res)
        except Exception as exc:  # an inverted element at the trial point: shorten further
            if not (isinstance(exc, (ArithmeticError, np.linalg.LinAlgError)) or type(exc).__name__.endswith("Error")):
                raise
            lam *= 0.5
            continue
        if np.all(np.isfinite(bar)) and _update_size(bar, nu, nv, dt) <= (1.0 - 0.25 * lam) * size:
            return lam * delta, res
        lam *= 0.5
    return None, None


def linearize(
    system: System,
    new: State,
    prev: State,
    prev2: State | None,
    dt: float,
    motors: MotorTrajectory,
    options: StepOptions = StepOptions(),
) -> Linearization:
    """The exact residual Jacobian of the step that produced ``new`` from ``prev`` (and ``prev2``): what the
    discrete adjoint needs (with :func:`retarget.sim.dae.history_jacobian` for ``∂R/∂S_{n−1}``, ``∂R/∂S_{n−2}``)."""
    return residual_and_jacobian(
        system, new.s, step_inputs(prev, prev2, dt, motors.value(new.t), motors.derivative(new.t), options.baumgarte)
    )


def _u_rate(system: System, state: State) -> NDArray[np.float64]:
    """``U̇ = T(U) V``."""
    nb = len(system.rigid)
    rate = np.zeros(system.n_u)
    if nb:
        r = rate[: 7 * nb].reshape(nb, 7)
        vv = state.v[: 6 * nb].reshape(nb, 6)
        r[:, :3] = vv[:, :3]
        r[:, 3:] = np.einsum("bij,bj->bi", quat_rate_half(state.u[: 7 * nb].reshape(nb, 7)[:, 3:]), vv[:, 3:])
    rate[7 * nb :] = state.v[6 * nb :]
    return rate


def simulate_states(
    system: System,
    state0: State,
    motors: MotorTrajectory,
    dt: float,
    n_steps: int,
    options: StepOptions = StepOptions(),
    callback: Callable[[int, State, int], None] | None = None,
) -> State:
    """Run ``n_steps`` steps (BDF1 first, then BDF2) from ``state0`` (at rest), calling
    ``callback(step_index, state, newton_iterations)`` after each. Returns the last state."""
    prev2: State | None = None
    prev = state0
    cache = FactorizationCache() if options.reuse_factorization else None
    subdivided = 0
    for k in range(1, n_steps + 1):
        try:
            new, _, iters = step(system, prev, prev2, dt, motors, options, k, cache)
        except NewtonFailed as exc:
            if options.max_halvings <= 0:
                raise
            new, iters = _half_steps(system, prev, dt, motors, options, k, cache, options.max_halvings, exc)
            subdivided += 1
            _LOG.info("step %d (t = %.4f s) redone in sub-steps after: %s", k, new.t, exc)
        prev2, prev = prev, new
        if callback is not None:
            callback(k, new, iters)
    if subdivided:
        _LOG.warning("%d of %d steps of %.3g s needed sub-steps (Newton failed at the full step): the motion is "
                     "violent for this dt", subdivided, n_steps, dt)
    return prev


def _half_steps(system: System, prev: State, dt: float, motors: MotorTrajectory, options: StepOptions, k: int,
                cache: FactorizationCache | None, depth: int, failure: NewtonFailed) -> tuple[State, int]:
    """Cover ``(prev.t, prev.t + dt]`` with two steps of ``dt / 2`` (BDF1 from ``prev``, then BDF2), each
    subdivided again on failure while ``depth`` allows; re-raises the last failure otherwise."""
    half = 0.5 * dt
    states, total = [prev], 0
    for i in range(2):
        try:
            new, _, iters = step(system, states[-1], None if i == 0 else states[0], half, motors, options, k, cache)
        except NewtonFailed as exc:
            if depth <= 1:
                exc.add_note(f"also failed with the step halved {options.max_halvings} times (dt = {half:.3g} s)")
                raise exc from failure
            new, iters = _half_steps(system, states[-1], half, motors, options, k, cache, depth - 1, exc)
        states.append(new)
        total += iters
    return states[-1], total
