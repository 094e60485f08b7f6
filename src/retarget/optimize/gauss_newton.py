"""Gauss–Newton / Levenberg–Marquardt on the tracking and torque least squares, with exact forward sensitivities.

The tracking term is a weighted least-squares sum (:mod:`retarget.optimize.objective`)::

    G(x) = ½ |r(x)|²,   r = [√(q_n w_pos) (c_k(t_n) − c̄_k(t_n)),  √(q_n w_ori) (R_k F_k − R̄_k)(t_n)]

so its Gauss–Newton Hessian ``JᵣᵀJᵣ`` needs only first derivatives of the tracked poses. They come from the
*tangent-linear* pass of the BDF2 simulation (the forward counterpart of the adjoint in
:mod:`retarget.optimize.adjoint`), exact to the Newton tolerance, one column per parameter::

    (∂R_n/∂S_n) δS_n = −(∂R_n/∂S_{n−1}) δS_{n−1} − (∂R_n/∂S_{n−2}) δS_{n−2} − (∂R_n/∂θ) δθ_n − (∂R_n/∂θ̇) δθ̇_n

with ``δS_0 = 0`` (the quasi-static start does not depend on ``x``) and ``δθ_n = (B0 T)[n]``, ``δθ̇_n =
(B1 T)[n]`` per motor. The torque penalty ``T = ½ w Δt Σ (|τ_m(t_n)| − τ̄_m)₊²`` is a least-squares sum too: its
residual rows (motor torques above the threshold) come from the same tangent pass, so the Gauss–Newton model sees
the servos' limit. The parameter-only terms (regularizers, speed penalty) enter with their exact Hessian
(differences of their gradients: they are cheap and piecewise quadratic).

Why: the two-rod problem's Hessian has ~30 eigenvalues spread over three decades (docs/optimize.md); L-BFGS
must learn them one per iteration, a Gauss–Newton step takes them all at once. A tangent pass costs one
factorization per step (as the adjoint) plus one solve per parameter and step (``--method auto`` uses it up to
:data:`MAX_PARAMETERS`). Measured (docs/optimize.md, "The optimizer"): on two_rods the full Gauss–Newton steps
leave the region the 3-mode reduced model represents (inverted cubature elements, ρ < 0), the damping then keeps the
steps short, and it ends behind L-BFGS-B in the same budget; L-BFGS-B is the planner's default.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import AdjointProblem, Rollout, evaluate
from retarget.optimize.parallel import run_shared
from retarget.optimize.result import SearchState
from retarget.optimize.robust import forked_member
from retarget.sim.adapters import step_sensitivities

if TYPE_CHECKING:  # pragma: no cover
    from retarget.optimize.limits import TorquePenalty
    from retarget.optimize.problem import PlanProblem
    from retarget.optimize.solver_settings import SolverOptions

_LOG = logging.getLogger(__name__)

__all__ = ["MAX_PARAMETERS", "PROJECT_AFTER", "LeastSquares", "ensemble_gauss_newton", "levenberg_marquardt",
           "parameter_hessian", "state_tangents", "supports_tangent", "tangent_least_squares"]

#: Above this many parameters the tangent pass (one solve per parameter and step) costs more than L-BFGS saves.
MAX_PARAMETERS: int = 200

#: A tangent pass checks its projected end against the time budget after this fraction (1/20) of its steps.
PROJECT_AFTER: int = 20


@dataclass(frozen=True, eq=False)
class LeastSquares:
    """The simulated terms' residual and its Jacobian at one point.

    Attributes:
        residual: ``r`` (m,): the tracking rows, then the torque penalty's active rows (where a motor's torque is
            above the penalty's threshold); ``½|r|²`` is the tracking term ``G`` plus the torque penalty ``T``.
        jacobian: ``∂r/∂x`` (m, n_parameters).
    """

    residual: NDArray[np.float64]
    jacobian: NDArray[np.float64]

    @property
    def gradient(self) -> NDArray[np.float64]:
        """``∂(G + T)/∂x = Jᵣᵀ r``."""
        return self.jacobian.T @ self.residual

    @property
    def hessian(self) -> NDArray[np.float64]:
        """Gauss–Newton ``JᵣᵀJᵣ``."""
        return self.jacobian.T @ self.jacobian


def supports_tangent(problem: AdjointProblem) -> bool:
    """Whether the engine's step sensitivities offer the forward solve and history products."""
    st = problem.start
    try:
        sens = problem.engine.sensitivity(st, st, None, problem.dt, problem.template)
    except Exception:  # an engine that cannot linearize at rest cannot be used either way
        return False
    return sens.solve is not None and sens.history is not None


def _motor_tangents(problem: AdjointProblem, times: NDArray[np.float64], columns: NDArray[np.int64] | None = None
                    ) -> tuple[NDArray, NDArray]:
    """``∂θ_n/∂x`` and ``∂θ̇_n/∂x`` (n_t, n_motors, len(columns)) for the parameters ``columns`` of the whole
    problem's ``x`` (motor-major; None: all)."""
    par = problem.parametrization
    nm, nf = int(par.n_motors), int(par.n_free)
    cols = np.arange(nm * nf) if columns is None else np.asarray(columns, dtype=np.int64)
    out = []
    for d in (0, 1):
        per_motor = np.asarray(par.parameter_basis(problem.template.basis_matrix(times, d)).todense())  # (n_t, nf)
        full = np.zeros((len(times), nm, len(cols)))
        for m in range(nm):
            mine = np.flatnonzero(cols // nf == m)
            full[:, m, mine] = per_motor[:, cols[mine] % nf]
        out.append(full)
    return out[0], out[1]


def _parameter_gradient(problem: AdjointProblem, x: NDArray[np.float64]) -> NDArray[np.float64]:
    """``∂/∂x`` of the parameter-only terms (restricted to a window's parameters)."""
    return problem.restricted(problem.parameter_terms(problem.whole(x))[1])


def state_tangents(problem: AdjointProblem, x: NDArray[np.float64], fwd: Rollout
                   ) -> Iterator[tuple[int, NDArray[np.float64]]]:
    """The tangent-linear pass over the rollout ``fwd`` at ``x``: ``(n, ∂S_n/∂x)`` for ``n = 1 … N`` in order
    (``∂S_0/∂x = 0``), each (n_S, n_parameters), exact to the Newton tolerance.

    With a :class:`~retarget.optimize.adjoint.Window`, ``x`` and ``fwd`` are the window's (as
    :func:`~retarget.optimize.adjoint.evaluate` takes and makes them) and ``n`` counts its steps: no window parameter
    moves a motor before the window's start, so its start states have no tangent.
    """
    window = problem.window
    motors = problem.profiles(problem.whole(x))
    if window is None:
        n, states, lead, columns = problem.n_steps, fwd.states, 0, None
    else:
        n, lead, columns = window.last - window.first, int(window.before is not None), window.free
        states = ([window.before] if window.before is not None else []) + list(fwd.states)
    d_theta, d_theta_dot = _motor_tangents(problem, fwd.times, columns)
    p = d_theta.shape[2]
    n_s = fwd.matrix.shape[1]
    # A parameter moves no motor before its B-spline's support starts, so its column of δS is exactly zero until
    # then: each step solves only the columns that have moved a motor by then (a window's later knots wait).
    moving = np.any(d_theta[: n + 1] != 0.0, axis=1) | np.any(d_theta_dot[: n + 1] != 0.0, axis=1)  # (n + 1, p)
    starts = np.where(moving.any(axis=0), np.argmax(moving, axis=0), n + 1)
    live = np.zeros(0, dtype=np.int64)
    history: list[NDArray[np.float64]] = [np.zeros((n_s, 0))]  # δS_{n−1}, δS_{n−2} over the live columns
    for step, sens in zip(range(1, n + 1), step_sensitivities(problem.engine, states, problem.dt, motors,
                                                              range(1 + lead, n + 1 + lead))):
        assert sens.solve is not None and sens.history is not None
        now = np.flatnonzero(starts <= step)
        if now.size != live.size:  # columns only join: the history's new columns are zero
            history = [_widen(ds, live, now) for ds in history]
            live = now
        rhs = sens.r_theta @ d_theta[step][:, live] + sens.r_theta_dot @ d_theta_dot[step][:, live]
        for lag, ds in enumerate(history, start=1):
            rhs += sens.history(lag, ds)
        ds_live = -sens.solve(rhs) if live.size else rhs
        history = [ds_live] + history[:1]
        ds_n = np.zeros((n_s, p))
        ds_n[:, live] = ds_live
        yield step, ds_n


def _widen(ds: NDArray[np.float64], old: NDArray[np.int64], new: NDArray[np.int64]) -> NDArray[np.float64]:
    """``ds`` over the columns ``old`` as over ``new`` (a sorted superset of ``old``), the added columns zero."""
    out = np.zeros((ds.shape[0], new.size))
    out[:, np.searchsorted(new, old)] = ds
    return out


def tangent_least_squares(problem: AdjointProblem, x: NDArray[np.float64], fwd: Rollout,
                          progress: Callable[[int, int], None] | None = None) -> LeastSquares:
    """The residual of the simulated terms and its exact Jacobian at ``x`` by the tangent-linear pass over the
    rollout ``fwd``: the tracking term, and the torque penalty (:class:`~retarget.optimize.limits.TorquePenalty`)
    as the residual ``√(w Δt) (|τ_m(t_n)| − τ̄_m)`` of every motor and step above the threshold (its Gauss–Newton
    term; rows below the threshold have neither residual nor derivative and are left out).

    Args:
        problem: the adjoint problem (engine with forward sensitivities: :func:`supports_tangent`).
        x: the parameters ``fwd`` was simulated with.
        fwd: the forward rollout at ``x``.
        progress: ``progress(done, total)`` per step.
    """
    from retarget.sim.rotation import rotate_jacobian

    window = problem.window
    n = problem.n_steps if window is None else window.last - window.first
    tr = problem.tracking if window is None else problem.tracking.window(window.first, window.last)
    idx = problem.poses.indices
    k = len(idx)
    p = len(x)
    sq_pos = np.sqrt(tr.quadrature[:, None] * tr.position_weights)  # (n_t, k)
    ori = tr.tracks_orientation
    rows_per = 3 + (9 if ori else 0)
    res = np.zeros((n + 1, k, rows_per))
    jac = np.zeros((n + 1, k, rows_per, p))
    pos = problem.poses.positions(fwd.matrix)
    res[:, :, :3] = sq_pos[:, :, None] * (pos - tr.target_positions)
    if ori:
        assert tr.target_orientations is not None
        sq_ori = np.sqrt(tr.quadrature[:, None] * tr.orientation_weights)
        rot = problem.poses.orientations(fwd.matrix)
        res[:, :, 3:] = (sq_ori[:, :, None, None] * (rot - tr.target_orientations)).reshape(n + 1, k, 9)
    penalty = problem.torque_penalty
    if penalty is not None:
        torque_rows = np.asarray(problem.engine.motor_torque_index)
        tau = fwd.matrix[:, torque_rows]
        speeds = penalty.speeds(fwd.matrix)
        thr, motoring = penalty.thresholds(tau, speeds)
        excess = np.maximum(np.abs(tau) - thr, 0.0)
        active = excess > 0.0
        # The threshold's slope in the shaft speed, where a modelled servo drives its shaft (d|τ| − dτ̄).
        speed_rows = None if speeds is None else np.maximum(penalty.speed_index, 0)
        speed_slope = None if speeds is None else np.where(motoring, penalty.speed_slope * np.sign(speeds), 0.0)
        sq_tau = float(np.sqrt(penalty.weight * penalty.dt))
        res_tau = sq_tau * excess[active]
        jac_tau = np.zeros((res_tau.size, p))
        row_of = np.cumsum(active.ravel()).reshape(active.shape) - 1  # the active rows, step-major
    for step, ds_n in state_tangents(problem, x, fwd):
        if penalty is not None and active[step].any():
            on = np.flatnonzero(active[step])
            jac_tau[row_of[step, on]] = sq_tau * np.sign(tau[step, on])[:, None] * ds_n[torque_rows[on]]
            if speed_rows is not None:
                jac_tau[row_of[step, on]] += sq_tau * speed_slope[step, on][:, None] * ds_n[speed_rows[on]]
        for j, i in enumerate(idx):
            jac[step, j, :3] = sq_pos[step, j] * ds_n[7 * i : 7 * i + 3]
            if ori and sq_ori[step, j] != 0.0:
                q = fwd.matrix[step, 7 * i + 3 : 7 * i + 7]
                dq = ds_n[7 * i + 3 : 7 * i + 7]  # (4, p)
                drf = np.einsum("bai,ip->abp", rotate_jacobian(q, problem.poses.frames[j].T), dq)
                jac[step, j, 3:] = sq_ori[step, j] * drf.reshape(9, p)
        if progress is not None:
            progress(step, n)
    if penalty is None:
        return LeastSquares(res.ravel(), jac.reshape(-1, p))
    return LeastSquares(np.concatenate([res.ravel(), res_tau]), np.vstack([jac.reshape(-1, p), jac_tau]))


def parameter_hessian(problem: AdjointProblem, x: NDArray[np.float64], step: float = 1e-6) -> NDArray[np.float64]:
    """Hessian of the parameter-only terms (regularizers, speed penalty) by central differences of their gradient.

    The regularizers are quadratic (exact to round-off); the speed penalty is piecewise quadratic (exact away from
    its kinks).
    """
    x = np.asarray(x, dtype=float)
    p = len(x)
    out = np.zeros((p, p))
    for j in range(p):
        e = np.zeros(p)
        e[j] = step
        out[:, j] = (_parameter_gradient(problem, x + e) - _parameter_gradient(problem, x - e)) / (2 * step)
    return 0.5 * (out + out.T)


def ensemble_gauss_newton(pp: PlanProblem, x: NDArray[np.float64], nominal: Rollout,
                          progress: Callable[[int, int], None] | None = None
                          ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Gauss–Newton Hessian and gradient of the plan's objective at ``x``: the simulated terms (tracking, torque
    penalty) averaged over the robust objective's models (each model's exact tangent-linear Jacobian; each member is
    simulated at ``x`` first), plus the parameter-only terms (:func:`parameter_hessian`). With the ensemble's forked
    workers (:attr:`~retarget.optimize.robust.Ensemble.pool`) the members' runs and passes go to them while this
    process runs the nominal model's pass; otherwise they run here, one after another.

    Args:
        pp: the plan problem (with or without an ensemble).
        x: the parameters. nominal: the nominal model's rollout at ``x``.
        progress: ``progress(done, total)`` over the tangent passes.
    """
    problems = (pp.problem,) if pp.ensemble is None else (pp.ensemble.nominal, *pp.ensemble.members)
    x = np.asarray(x, dtype=float)
    pool = None if pp.ensemble is None else pp.ensemble.pool
    futures = []
    if pool is not None:
        # The members' passes run in the forked workers while this process runs the nominal model's.
        executor, key = pool
        futures = [executor.submit(run_shared, key, partial(_member_normal_equations, index=i, x=x,
                                                            torque_penalty=member.torque_penalty))
                   for i, member in enumerate(problems[1:])]
        todo: tuple[AdjointProblem, ...] = problems[:1]
    else:
        todo = problems
    hess = np.zeros((len(x), len(x)))
    grad = np.zeros(len(x))
    for i, problem in enumerate(todo):
        run = nominal if i == 0 else evaluate(problem, x, gradient=False).rollout
        # A pass reports over its own steps: a window's, not the motion's.
        cb = None if progress is None else (lambda k, steps, i=i: progress(i * steps + k, len(todo) * steps))
        ls = tangent_least_squares(problem, x, run, cb)
        hess += ls.hessian
        grad += ls.gradient
    for future in futures:
        h_m, g_m = future.result()
        hess += h_m
        grad += g_m
    g_reg = _parameter_gradient(pp.problem, x)
    return hess / len(problems) + parameter_hessian(pp.problem, x), grad / len(problems) + g_reg


def _member_normal_equations(members: tuple[AdjointProblem, ...], index: int, x: NDArray[np.float64],
                             torque_penalty: TorquePenalty | None
                             ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """In a worker: member ``index``'s Gauss–Newton Hessian ``JᵣᵀJᵣ`` and gradient ``Jᵣᵀr`` at ``x`` (its own run),
    with the parent's current torque penalty (:func:`~retarget.optimize.robust.forked_member`)."""
    problem = forked_member(members, index, torque_penalty)
    ls = tangent_least_squares(problem, x, evaluate(problem, x, gradient=False).rollout)
    return ls.hessian, ls.gradient


def levenberg_marquardt(pp: PlanProblem, options: SolverOptions, x_start: NDArray[np.float64],
                         state: SearchState, history: list[float],
                         callback: Callable[[dict[str, float]], None] | None,
                         progress: Callable[[int, int], None] | None, affordable: Callable[[float], None],
                         lower: NDArray[np.float64], upper: NDArray[np.float64],
                         paid_progress: Callable[[int, int], None] | None = None) -> str:
    """Levenberg–Marquardt iterations (Marquardt's diagonal scaling, Nielsen's damping update) from ``x_start``.

    Each iteration: one tangent-linear pass per model of the objective at the current point (exact Gauss–Newton
    Hessian and gradient, averaged over the robust objective's models: :func:`ensemble_gauss_newton`), then
    damped steps projected onto the bounds until one lowers ``J`` (a trial point the model cannot simulate counts as
    a rejected step). Updates ``state`` (best point, evaluations, ``iterations``) and ``history`` in place;
    returns the stop reason. ``affordable(seconds)`` raises ``BudgetExhausted`` before work that would overrun
    the budget; ``KeyboardInterrupt`` passes through, as in the L-BFGS-B loop.

    A pass starts only when it and one trial after it are affordable, so the first trial after a pass always runs,
    reporting to ``paid_progress`` (the step progress without the deadline's guard): a pass that ran slower than
    its pace promised would otherwise be paid for and thrown away. The overrun is at most one forward run, taken
    from what comes after (the later windows' shares, the verification's reserve).
    """
    from retarget.sim.errors import SimulationError

    n = pp.problem.n_steps
    x, ev = x_start.copy(), state.best
    j0 = ev.value
    mu, nu = 1e-3, 2.0
    # Before a pass has run: the caller's estimate (the previous window's pass), else a guess from the evaluation,
    # which underestimates a pass over many parameters (the drummer's 260 in a window: 4-7 forward runs); the pass
    # then checks its own pace after a twentieth of its steps.
    tangent_s = state.tangent_s if state.tangent_s is not None else \
        2.0 * state.duration * (1 if pp.ensemble is None else pp.ensemble.size)

    pass_started = 0.0  # when the running tangent pass started

    def tangent_progress(k: int, total: int) -> None:
        if progress is not None:
            progress(n + k * n // total, 2 * n)
        if k == max(1, total // PROJECT_AFTER):
            # The pass's own pace: one that will not end (with a trial after it) before the deadline stops here,
            # not at the deadline, and its projected time goes to the next window.
            state.tangent_s = (time.perf_counter() - pass_started) * total / k
            affordable(state.tangent_s * (total - k) / total + state.duration)

    while state.iterations < options.max_iterations:
        affordable(tangent_s + state.duration)
        pass_started = time.perf_counter()
        hess, grad = ensemble_gauss_newton(pp, x, ev.rollout, tangent_progress)
        tangent_s = state.tangent_s = time.perf_counter() - pass_started
        state.best = ev = replace(ev, gradient=grad)
        scale = np.maximum(np.diag(hess), 1e-12 * max(float(np.max(np.diag(hess))), 1e-300))
        accepted, paid = False, True
        for _ in range(12):
            if not paid:
                affordable(state.duration)
            step = np.linalg.solve(hess + mu * np.diag(scale), -grad)
            x_new = np.clip(x + step, lower, upper)
            step = x_new - x
            predicted = -float(grad @ step + 0.5 * step @ hess @ step)
            if predicted <= 0.0 or not np.any(step):
                mu, nu = mu * nu, 2.0 * nu
                continue
            t0 = time.perf_counter()
            trial_progress, paid = (paid_progress if paid else progress), False
            try:
                trial = pp.evaluate(x_new, gradient=False, progress=trial_progress)
            except SimulationError as exc:
                _LOG.debug("LM trial could not be simulated (mu %.3e): %s", mu, exc)
                state.failed += 1
                mu, nu = mu * nu, 2.0 * nu
                continue
            state.evaluations += 1
            state.duration = time.perf_counter() - t0
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
        state.best, state.best_x = ev, x.copy()
        state.last, state.last_x = ev, x.copy()
        state.iterations += 1
        history.append(ev.value)
        if callback is not None:
            callback({"iteration": state.iterations, "objective": float(ev.value),
                      "gradient_norm": float(np.linalg.norm(grad))})
        if decrease <= options.relative_tolerance * j0:
            return "converged: relative reduction of the objective below the tolerance"
    return "iteration limit reached"
