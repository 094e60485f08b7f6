"""Settle refinement: lower the vibration a plan leaves after the motion across a stiffness band, without raising
its peak deviation — a minimax linear program on the band's exact sensitivities.

The tracking objective is a least-squares sum, and a least-squares optimum spreads its error: it trades the
ring-out after the motion (a few samples) against the deviation during it (thousands). Measured on the single rod's
servo-feasible step (docs/optimize.md, "Settle refinement"): for any settle weight the L2 optimum either keeps a
ring-out of 1–2 mm at stiffness × 0.9 / × 1.1 or gives up its peak, while a profile with the same peak and almost
no ring-out across the band exists. The refinement asks for that profile directly. At the current profile ``x``,
for every model ``m`` of the band (the nominal model and the same model with every flexible part's stiffness ×
``settle_band``), the tracked bodies' deviations from their targets ``d_m(t_n)``, the motor torques ``τ_m(t_n)`` and
their exact Jacobians come from one forward and one tangent-linear pass
(:func:`~retarget.optimize.gauss_newton.state_tangents`); the step ``δ`` solves::

    minimize R over δ, R
    subject to  u·(d_m + J_m δ)(t_n) ≤ R                for every model, t_n after the motors stop, direction u
                u·(d_0 + J_0 δ)(t_n) ≤ peak_0          the nominal model's peak deviation: not raised
                u·(d_m + J_m δ)(t_n) ≤ max_m peak_m    the band's largest peak deviation: not raised
                |τ_m + J_τ,m δ| ≤ max(τ_cap, |τ_m|max) every motor torque: within the penalty's cap, or not raised
                |δ_i| ≤ Δ, x + δ within the parameters' bounds

with ``u`` 16 directions in the plane of the deviations' principal axes, both ways along the third axis, and the
deviation's own (:func:`norm_directions`: the Euclidean norm to within 2 %). The step is simulated in every model
before it is taken: kept when the largest ring-out fell and no peak or torque rose by more than :data:`TOLERANCE`
(and the profiles stay within the servos' limits), else the trust radius ``Δ`` shrinks. The models run in forked
workers when there are cores for them.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import AdjointProblem, Evaluation, evaluate
from retarget.optimize.control import Deadline
from retarget.optimize.errors import PlanCancelled
from retarget.optimize.gauss_newton import state_tangents
from retarget.optimize.parallel import as_arrays, fork_pool, run_shared

_LOG = logging.getLogger(__name__)

__all__ = ["BandLinearization", "PLANE_DIRECTIONS", "STOPPED", "SettleReport", "TOLERANCE", "linearize", "norm_directions",
           "settle_refinement", "settle_step"]

#: How a :attr:`SettleReport.message` of a refinement stopped by Ctrl-C or a cancel begins (the reason follows).
STOPPED = "stopped: "

#: Relative rise of a peak deviation or torque a refinement step may cause (the linear program's constraints hold
#: to first order; the simulation of the step decides).
TOLERANCE = 0.01

#: Directions in the deviations' principal plane in which their Euclidean norm is bounded (a polygon whose
#: corners lie 1/cos(π/16) − 1 ≈ 2 % outside the circle).
PLANE_DIRECTIONS = 16


def norm_directions(deviations: NDArray[np.float64]) -> NDArray[np.float64]:
    """Unit vectors (PLANE_DIRECTIONS + 2, 3) bounding the Euclidean norm of deviations like ``deviations``
    (r, 3): :data:`PLANE_DIRECTIONS` in the plane of their two principal axes and both ways along the third. A
    cube's faces and corners instead let a bounded deviation grow by up to 22 % between them, and the steps
    that did were refused."""
    d = np.asarray(deviations, dtype=float).reshape(-1, 3)
    axes = np.linalg.svd(d, full_matrices=True)[2] if len(d) >= 3 and np.any(d) else np.eye(3)
    angles = 2.0 * np.pi * np.arange(PLANE_DIRECTIONS) / PLANE_DIRECTIONS
    plane = np.cos(angles)[:, None] * axes[0] + np.sin(angles)[:, None] * axes[1]
    return np.vstack([plane, axes[2], -axes[2]])


@dataclass(frozen=True, eq=False)
class BandLinearization:
    """One model's deviations and motor torques at ``x`` and their Jacobians.

    Attributes:
        deviation: tracked bodies' positions minus their targets [m] (N + 1, k, 3).
        tracked: whether a body's position is tracked at a step (weight > 0) (N + 1, k).
        torque: motor torques [N m] (N + 1, n_motors).
        d_deviation: ``∂deviation/∂x`` (N + 1, k, 3, p), or None (not linearized).
        d_torque: ``∂torque/∂x`` (N + 1, n_motors, p), or None.
        evaluation: the nominal model's :class:`Evaluation` (forward only), or None for a member.
    """

    deviation: NDArray[np.float64]
    tracked: NDArray[np.bool_]
    torque: NDArray[np.float64]
    d_deviation: NDArray[np.float64] | None = None
    d_torque: NDArray[np.float64] | None = None
    evaluation: Evaluation | None = None

    def peak(self, after: NDArray[np.bool_] | None = None) -> float:
        """Largest deviation [m] (over the steps in ``after`` only, if given)."""
        dist = np.where(self.tracked, np.linalg.norm(self.deviation, axis=-1), 0.0)
        if after is not None:
            dist = dist[after]
        return float(dist.max()) if dist.size else 0.0


def linearize(problem: AdjointProblem, x: NDArray[np.float64], tangents: bool = True,
              keep_evaluation: bool = False) -> BandLinearization:
    """Simulate ``problem`` at ``x``; with ``tangents``, also the deviations' and torques' exact Jacobians."""
    ev = evaluate(problem, x, gradient=False)
    tr = problem.tracking
    idx = problem.poses.indices
    torque_rows = np.asarray(problem.engine.motor_torque_index)
    dev = problem.poses.positions(ev.rollout.matrix) - tr.target_positions
    tracked = tr.position_weights > 0.0
    torque = ev.rollout.matrix[:, torque_rows]
    d_dev = d_tau = None
    if tangents:
        n, p = problem.n_steps, problem.parametrization.n_parameters
        d_dev = np.zeros((n + 1, len(idx), 3, p))
        d_tau = np.zeros((n + 1, len(torque_rows), p))
        for step, ds in state_tangents(problem, x, ev.rollout):
            for j, i in enumerate(idx):
                d_dev[step, j] = ds[7 * i : 7 * i + 3]
            d_tau[step] = ds[torque_rows]
    return BandLinearization(dev, tracked, torque, d_dev, d_tau, ev if keep_evaluation else None)


def _band_job(problems: Sequence[AdjointProblem], index: int, x: NDArray[np.float64],
              tangents: bool) -> tuple[NDArray, NDArray, NDArray, NDArray | None, NDArray | None]:
    """In a worker: :func:`linearize` of band model ``index`` (arrays only)."""
    lin = linearize(problems[index], x, tangents)
    return tuple(as_arrays(a) for a in (lin.deviation, lin.tracked, lin.torque, lin.d_deviation,
                                         lin.d_torque))  # type: ignore[return-value]


def _rows(lin: BandLinearization, steps: NDArray[np.bool_], directions: NDArray[np.float64]
          ) -> tuple[NDArray, NDArray]:
    """``(A, b)`` with ``u·(d + J δ) = b + A δ`` for every tracked body at ``steps`` and every direction (and the
    deviation's own)."""
    assert lin.d_deviation is not None
    mask = steps[:, None] & lin.tracked
    d = lin.deviation[mask]  # (r, 3)
    jac = lin.d_deviation[mask]  # (r, 3, p)
    norm = np.linalg.norm(d, axis=1, keepdims=True)
    own = np.where(norm > 0.0, d / np.where(norm > 0.0, norm, 1.0), 0.0)
    dirs = np.concatenate([np.broadcast_to(directions, (len(d), *directions.shape)), own[:, None, :]], axis=1)
    b = np.einsum("rua,ra->ru", dirs, d).ravel()
    a = np.einsum("rua,rap->rup", dirs, jac).reshape(-1, jac.shape[-1])
    return a, b


def settle_step(band: Sequence[BandLinearization], ring: NDArray[np.bool_], peak_caps: Sequence[float],
                torque_caps: NDArray[np.float64], radius: float, lower: NDArray[np.float64],
                upper: NDArray[np.float64], peak_stride: int = 1) -> tuple[NDArray[np.float64], float] | None:
    """The linear program of the module docstring at one point.

    Args:
        band: the models' linearizations (the nominal one first).
        ring: steps after the motors stop (N + 1,).
        peak_caps: per model, the peak deviation [m] the step may not exceed.
        torque_caps: per motor [N m].
        radius: trust radius ``Δ`` [rad]. lower, upper: bounds of ``δ`` (the parameters' bounds minus ``x``).
        peak_stride: constrain the peaks at every ``peak_stride``-th step (the ring-out at every step).

    Returns:
        ``(δ, R)``: the step and the predicted largest ring-out [m], or None when the program has no solution.
    """
    from scipy.optimize import linprog

    p = band[0].d_deviation.shape[-1]  # type: ignore[union-attr]
    n = len(ring)
    strided = np.zeros(n, dtype=bool)
    strided[::max(1, int(peak_stride))] = True
    blocks_a, blocks_b = [], []
    directions = norm_directions(band[0].deviation[band[0].tracked])
    for lin, cap in zip(band, peak_caps):
        a, b = _rows(lin, ring, directions)
        blocks_a.append(np.hstack([a, -np.ones((len(a), 1))]))  # u·(d + J δ) − R ≤ 0
        blocks_b.append(-b)
        a, b = _rows(lin, strided & ~ring, directions)
        blocks_a.append(np.hstack([a, np.zeros((len(a), 1))]))
        blocks_b.append(cap - b)
        assert lin.d_torque is not None
        for sign in (1.0, -1.0):
            jt = sign * lin.d_torque.reshape(-1, p)
            bound = np.broadcast_to(np.maximum(torque_caps, np.abs(lin.torque).max(axis=0)), lin.torque.shape)
            blocks_a.append(np.hstack([jt, np.zeros((len(jt), 1))]))
            blocks_b.append((bound - sign * lin.torque).ravel())
    # Rows in millimetres (and N mm), δ in milliradians, R in millimetres: the entries then sit near 1.
    a_ub = np.vstack(blocks_a)
    b_ub = np.concatenate(blocks_b) * 1e3
    bounds = [(max(-radius, lo) * 1e3, min(radius, hi) * 1e3) for lo, hi in zip(lower, upper)] + [(0.0, None)]
    cost = np.zeros(p + 1)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if res.status != 0:
        _LOG.debug("settle step: no solution (%s)", res.message)
        return None
    return res.x[:p] * 1e-3, float(res.x[-1]) * 1e-3


@dataclass(frozen=True)
class SettleReport:
    """What a settle refinement did.

    Attributes:
        factors: the band's stiffness factors (1.0 first).
        ring_before_m, ring_after_m: largest ring-out over the band's models [m] before and after.
        peak_before_m, peak_after_m: the nominal model's peak deviation [m].
        band_ring_m: per model, its ring-out after [m].
        iterations: steps taken. rejected: steps the simulations refused. wall_s: wall time [s].
        message: why it stopped.
    """

    factors: tuple[float, ...]
    ring_before_m: float
    ring_after_m: float
    peak_before_m: float
    peak_after_m: float
    band_ring_m: tuple[float, ...]
    iterations: int
    rejected: int
    wall_s: float
    message: str

    def describe(self) -> str:
        """One line for the plan's output."""
        return (f"settle refinement over stiffness x {', '.join(f'{f:g}' for f in self.factors)}: largest ring-out "
                f"{1e3 * self.ring_before_m:.2f} -> {1e3 * self.ring_after_m:.2f} mm, peak deviation "
                f"{1e3 * self.peak_before_m:.2f} -> {1e3 * self.peak_after_m:.2f} mm ({self.iterations} steps, "
                f"{self.wall_s:.0f} s; {self.message})")


def settle_refinement(problems: Sequence[tuple[float, AdjointProblem]], x: NDArray[np.float64],
                      ring_from: float, torque_caps: NDArray[np.float64], lower: NDArray[np.float64],
                      upper: NDArray[np.float64], iterations: int = 3, radius: float = 0.01,
                      peak_allowance: float = 1.0, workers: int = 1, deadline: Deadline | None = None,
                      progress: Callable[[int, int], None] | None = None,
                      admissible: Callable[[NDArray[np.float64]], bool] | None = None
                      ) -> tuple[NDArray[np.float64], Evaluation, SettleReport]:
    """Refine ``x`` (module docstring).

    Args:
        problems: ``(stiffness factor, problem)`` of the band, the nominal model (factor 1) first.
        x: the optimized parameters.
        ring_from: when the motors have stopped [s]: the ring-out is measured from there on.
        torque_caps: per motor [N m]: the torque a step may reach (or the current peak, if higher).
        lower, upper: the parameters' bounds.
        iterations: steps at most. radius: first trust radius [rad].
        peak_allowance: factor on the peak deviations the refinement may reach (1: not raised).
        workers: forked workers for the band's models (1: in-process).
        deadline: after it, no new step starts.
        progress: ``progress(done, total)`` over the steps (it may raise :class:`PlanCancelled`).
        admissible: ``admissible(x)``: whether a step's profiles may be taken (e.g. within the servos' speed
            limits, which the linear program does not see); None: every one.

    Returns:
        The refined parameters, the nominal model's (forward) evaluation there, and the report. Ctrl-C or a cancel
        stops the refinement at the last step taken (its message says so: :data:`STOPPED`).
    """
    started = time.perf_counter()
    factors = tuple(float(f) for f, _ in problems)
    x = np.asarray(x, dtype=float)
    ring = problems[0][1].tracking.times >= ring_from - 1e-12
    with fork_pool(tuple(p for _, p in problems[1:]), min(int(workers), len(problems) - 1)) as pool:
        def run(at: NDArray[np.float64], tangents: bool) -> list[BandLinearization]:
            return _linearized_band(problems, pool, at, tangents)

        band = run(x, iterations > 0)
        # The nominal model's peak may not rise (beyond the allowance); a band model's may, up to the band's
        # largest (the worst case of the band, the figure a plan reports there, does not rise).
        band_cap = max((lin.peak() for lin in band[1:]), default=0.0) * peak_allowance
        caps = [band[0].peak() * peak_allowance] + [band_cap] * (len(band) - 1)
        ring_before = current = max(lin.peak(ring) for lin in band)
        peak_before = band[0].peak()
        taken = rejected = 0
        message = "iteration limit reached"
        try:
            while taken < iterations:
                if progress is not None:
                    progress(taken, iterations)  # (a cancel request raises here)
                if deadline is not None and deadline.passed():
                    message = "time budget reached"
                    break
                if radius < 1e-6:
                    message = "no step lowers the ring-out (trust radius below 1 urad)"
                    break
                if band[0].d_deviation is None:
                    band = run(x, True)
                solved = settle_step(band, ring, caps, torque_caps, radius, lower - x, upper - x)
                if solved is None:
                    message = "the linear program has no solution"
                    break
                step, predicted = solved
                if predicted >= current * (1.0 - TOLERANCE):
                    message = "converged: no step lowers the ring-out by more than 1 %"
                    break
                x_trial = np.clip(x + step, lower, upper)
                if admissible is not None and not admissible(x_trial):
                    _LOG.debug("settle step: not admissible, radius %.2e", radius)
                    rejected += 1
                    radius /= 4.0
                    continue
                trial = run(x_trial, False)
                ring_now = max(lin.peak(ring) for lin in trial)
                within = _within_caps(trial, band, caps, torque_caps, current, ring_now, predicted, radius)
                if ring_now < current and within:
                    x = x_trial
                    gain = (current - ring_now) / max(current - predicted, 1e-300)
                    radius = radius * 2.0 if gain > 0.5 and np.max(np.abs(step)) > 0.9 * radius else radius
                    current, band = ring_now, trial
                    taken += 1
                else:
                    rejected += 1
                    radius /= 4.0
        except PlanCancelled:  # (a KeyboardInterrupt: first)
            message = f"{STOPPED}cancel requested"
        except KeyboardInterrupt:
            message = f"{STOPPED}Ctrl-C"
    nominal = band[0].evaluation
    assert nominal is not None
    report = SettleReport(factors, ring_before, current, peak_before, band[0].peak(),
                          tuple(lin.peak(ring) for lin in band), taken, rejected, time.perf_counter() - started,
                          message)
    return x, nominal, report


def _linearized_band(problems: Sequence[tuple[float, AdjointProblem]], pool: tuple[Executor, int] | None,
                     at: NDArray[np.float64], tangents: bool) -> list[BandLinearization]:
    """Every model of the band linearized at ``at`` (:func:`linearize`; with ``tangents`` their tangent-linear
    sensitivities too), the nominal one keeping its evaluation: the others in the ``pool``'s workers, if any."""
    futures = [] if pool is None else [
        pool[0].submit(run_shared, pool[1], partial(_band_job, index=i, x=at, tangents=tangents))
        for i in range(len(problems) - 1)]
    first = linearize(problems[0][1], at, tangents, keep_evaluation=True)
    if pool is None:
        rest = [linearize(p, at, tangents) for _, p in problems[1:]]
    else:
        rest = [BandLinearization(*f.result()) for f in futures]
    return [first, *rest]


def _within_caps(trial: Sequence[BandLinearization], band: Sequence[BandLinearization], caps: Sequence[float],
                 torque_caps: NDArray[np.float64], current: float, ring_now: float, predicted: float,
                 radius: float) -> bool:
    """Whether a trial step keeps every model's peak deviation within its cap [m] and every motor's torque within
    ``torque_caps`` (or the peak before the step, if higher) [N m]."""
    peaks_ok = all(lin.peak() <= cap * (1.0 + TOLERANCE) for lin, cap in zip(trial, caps))
    tau_ok = all(np.all(np.abs(t.torque).max(axis=0)
                        <= np.maximum(torque_caps, np.abs(b.torque).max(axis=0)) * (1.0 + TOLERANCE))
                 for t, b in zip(trial, band))
    _LOG.debug("settle step: ring-out %.3e -> %.3e m (predicted %.3e), radius %.2e, peaks %s, "
               "torques %s", current, ring_now, predicted, radius, peaks_ok, tau_ok)
    return peaks_ok and tau_ok
