"""The discrete adjoint of the BDF2 simulation: the exact gradient of the discrete objective w.r.t. the profiles.

Forward (:func:`rollout`): ``S_0`` is the quasi-static state at the fixed start pose (independent of ``x``),
then ``R_n(S_n, S_{n−1}, S_{n−2}, θ_n, θ̇_n) = 0`` for ``n = 1 … N`` (BDF1 for ``n = 1``), with
``θ_n = (B0 P)[n]``, ``θ̇_n = (B1 P)[n]``, ``P = T x + offset``; every converged ``S_n`` is stored.

Objective: ``J(x) = Σ_n q_n g_n(S_n) + T(S) + Reg(x)`` with the tracking term ``g`` of
:class:`~retarget.optimize.objective.TrackingObjective` (tracked rigid bodies' COM ``c = U[7i:7i+3]`` and
orientation ``R(q) F``), the torque penalty ``T`` of :class:`~retarget.optimize.limits.TorquePenalty` (on the motor
rows of ``λ``; optional) and ``Reg`` the motor regularizers and the speed penalty (functions of ``x`` only).

Backward (:func:`evaluate`), ``n = N … 1``, with the Jacobians recomputed at the stored states::

    (∂R_n/∂S_n)ᵀ μ_n = −q_n ∂g_n/∂S_nᵀ − ∂T/∂S_nᵀ − (∂R_{n+1}/∂S_n)ᵀ μ_{n+1} − (∂R_{n+2}/∂S_n)ᵀ μ_{n+2}
    dJ/dx = ∂Reg/∂x + Σ_n [ (∂R_n/∂θ_n)ᵀ μ_n ⊗ B0[n] + (∂R_n/∂θ̇_n)ᵀ μ_n ⊗ B1[n] ] T

which is the exact derivative of the discrete ``J`` (to the Newton tolerance of the forward solve).

A :class:`Window` restricts both to a time window ``a … e`` and to the parameters whose profiles change only after
``t_a``: the forward run starts from the stored ``S_a`` (and ``S_{a−1}`` for the BDF2 history), the tracking sums
over ``n = a … e`` with the whole grid's Simpson weights, the backward pass ends at ``n = a + 1``, and the gradient
is that of this windowed ``J`` w.r.t. the window's parameters — exact for it, as above (the receding-horizon
planner, :func:`retarget.optimize.windows.optimize_windows`, minimizes one window after another).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.bspline import MotorProfiles, ProfileParametrization
from retarget.optimize.limits import TorquePenalty, VelocityPenalty
from retarget.optimize.objective import MotorRegularizer, TrackingObjective
from retarget.sim.adapters import step_sensitivities
from retarget.sim.engine import Engine, EngineState

__all__ = ["AdjointProblem", "Evaluation", "Rollout", "TrackedPoses", "Window", "evaluate", "first_influence",
           "rollout", "run_time_ratio", "steady_step_times", "window_parameters"]


@dataclass(frozen=True, eq=False)
class TrackedPoses:
    """Tracked rigid bodies' COM positions and link orientations as functions of ``S``, with exact derivatives.

    Attributes:
        indices: rigid body index per tracked link (k,).
        frames: link frame orientation at the reference per tracked link (k, 3, 3).
    """

    indices: NDArray[np.int64]
    frames: NDArray[np.float64]

    @classmethod
    def build(cls, engine: Engine, links: Sequence[str]) -> TrackedPoses:
        """Look the links up in the engine's rigid bodies."""
        idx = np.array([engine.rigid_index(n) for n in links], dtype=np.int64)
        frames = np.array([engine.frame_rotation(int(i)) for i in idx]).reshape(len(idx), 3, 3)
        return cls(idx, frames)

    def positions(self, states: NDArray[np.float64]) -> NDArray[np.float64]:
        """``c`` [m] (n_t, k, 3) from states (n_t, n_S)."""
        cols = (7 * self.indices[:, None] + np.arange(3)).ravel()
        return states[:, cols].reshape(len(states), len(self.indices), 3)

    def orientations(self, states: NDArray[np.float64]) -> NDArray[np.float64]:
        """``R(q) F`` (n_t, k, 3, 3) from states (n_t, n_S) (homogeneous ``R(q)``, a rotation for any q ≠ 0)."""
        from retarget.sim.rotation import rotation_matrix

        cols = (7 * self.indices[:, None] + 3 + np.arange(4)).ravel()
        q = states[:, cols].reshape(len(states), len(self.indices), 4)
        return rotation_matrix(q) @ self.frames[None]

    def pullback(self, s: NDArray[np.float64], d_positions: NDArray[np.float64],
                 d_orientations: NDArray[np.float64] | None) -> NDArray[np.float64]:
        """``∂g/∂S`` (n_S,) at one state ``s`` from ``∂g/∂c`` (k, 3) and ``∂g/∂(R F)`` (k, 3, 3) (or None)."""
        from retarget.sim.rotation import rotate_jacobian

        out = np.zeros_like(s)
        for j, i in enumerate(self.indices):
            out[7 * i : 7 * i + 3] += d_positions[j]
            if d_orientations is not None and np.any(d_orientations[j]):
                q = s[7 * i + 3 : 7 * i + 7]
                # ∂/∂q Σ_ab D_ab (R F)_ab = Σ_b D[:, b]ᵀ ∂(R(q) F[:, b])/∂q
                jac = rotate_jacobian(q, self.frames[j].T)  # (3 columns b, 3, 4)
                out[7 * i + 3 : 7 * i + 7] += np.einsum("ab,bai->i", d_orientations[j], jac)
        return out


@dataclass(frozen=True, eq=False)
class Rollout:
    """A forward simulation: states on the grid ``t_n = n Δt``.

    Attributes:
        states: the engine states (N + 1), ``states[0]`` the start.
        matrix: ``S_n`` stacked (N + 1, n_S).
        step_s: wall time of each step (N,) [s], its progress report included; what the time budget's reserves
            measure a run of these profiles by (:func:`retarget.optimize.windows.optimize_windows`).
    """

    states: list[EngineState]
    matrix: NDArray[np.float64]
    step_s: NDArray[np.float64] | None = None

    @property
    def times(self) -> NDArray[np.float64]:
        """Step times [s] (N + 1,)."""
        return np.array([s.t for s in self.states])


def rollout(engine: Engine, start: EngineState, motors: object, dt: float, n_steps: int,
            progress: Callable[[int, int], None] | None = None, before: EngineState | None = None) -> Rollout:
    """Simulate ``n_steps`` BDF steps from ``start``, storing every converged state.

    The first step is BDF1 from a rest start (``before`` None) or BDF2 with ``before``, the state one step before
    ``start``, when a run continues from stored states.

    Raises:
        the engine's NewtonFailed / SimulationDiverged.
    """
    states = [start]
    cache: dict = {}
    prev2: EngineState | None = before
    prev = start
    clock = np.empty(n_steps + 1)
    clock[0] = time.perf_counter()
    for k in range(1, n_steps + 1):
        new = engine.step(prev, prev2, dt, motors, k, cache)
        states.append(new)
        prev2, prev = prev, new
        if progress is not None:
            progress(k, n_steps)
        clock[k] = time.perf_counter()
    return Rollout(states, np.stack([s.s for s in states]), np.diff(clock))


def steady_step_times(run: Rollout) -> NDArray[np.float64] | None:
    """``run``'s wall time per step [s] with its first step (numba compiling, the first run after an install) set
    to the median of the others; None when the run was not timed."""
    if run.step_s is None or run.step_s.size == 0:
        return None
    steps = np.array(run.step_s, dtype=float)
    if steps.size > 1:
        steps[0] = float(np.median(steps[1:]))
    return steps


def run_time_ratio(reference: NDArray[np.float64] | None, first: int, run: Rollout) -> float | None:
    """``run``'s wall time over the reference run's on the same steps (``run`` starting at the reference's grid
    step ``first``; ``reference`` from :func:`steady_step_times`): how much longer its profiles take to simulate.
    None when either was not timed or took no measurable time."""
    if reference is None or run.step_s is None:
        return None
    spent = float(np.sum(run.step_s))
    base = float(np.sum(reference[first : first + run.step_s.size]))
    return spent / base if spent > 0.0 and base > 0.0 else None


@dataclass(frozen=True, eq=False)
class Window:
    """A time window of the problem and the parameters optimized in it (module docstring).

    Attributes:
        first: grid index ``a`` of the window's start state (fixed: no free parameter changes the profiles up to
            ``t_a``).
        last: grid index ``e`` of its last step (``a < e ≤ N``).
        start: ``S_a``.
        before: ``S_{a−1}`` (the BDF2 history), None for ``a = 0``.
        free: indices of the window's parameters in the whole problem's ``x``.
        base: the whole problem's ``x`` with the other parameters' values.
    """

    first: int
    last: int
    start: EngineState
    before: EngineState | None
    free: NDArray[np.int64]
    base: NDArray[np.float64]

    def full(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """The whole problem's parameters with the window's set to ``x``."""
        out = self.base.copy()
        out[self.free] = x
        return out


@dataclass(frozen=True, eq=False)
class AdjointProblem:
    """Everything fixed during an optimization.

    Attributes:
        engine: the simulator.
        start: ``S_0`` (the quasi-static state at the start pose).
        dt: step [s]. n_steps: N.
        template: the spline space (its control points are not used).
        parametrization: ``x ↔ P``.
        tracking: the tracking term on the grid ``n Δt`` (n = 0 … N).
        poses: tracked bodies in ``S``.
        regularizer: deviation/acceleration regularizers on the same grid (or None).
        velocity_penalty: speed-limit penalty (or None).
        torque_penalty: penalty on simulated motor torques above the servos' limit (or None).
        window: restrict :func:`evaluate` to a time window and its parameters (or None: the whole problem).
    """

    engine: Engine
    start: EngineState
    dt: float
    n_steps: int
    template: MotorProfiles
    parametrization: ProfileParametrization
    tracking: TrackingObjective
    poses: TrackedPoses
    regularizer: MotorRegularizer | None = None
    velocity_penalty: VelocityPenalty | None = None
    window: Window | None = None
    torque_penalty: TorquePenalty | None = None

    def profiles(self, x: NDArray[np.float64]) -> MotorProfiles:
        """The motor profiles of parameters ``x``."""
        return self.template.with_control_points(self.parametrization.control_points(x))

    def whole(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """The whole problem's parameters for ``x`` (a window's parameters when there is a :class:`Window`)."""
        x = np.asarray(x, dtype=float)
        return x if self.window is None else self.window.full(x)

    def restricted(self, g: NDArray[np.float64]) -> NDArray[np.float64]:
        """A derivative over the whole problem's parameters restricted to the window's (as is without one)."""
        return g if self.window is None else g[self.window.free]

    def parameter_terms(self, x: NDArray[np.float64]) -> tuple[float, NDArray[np.float64], dict[str, float]]:
        """Regularizers + speed penalty: value, ``∂/∂x``, and the parts by name."""
        value, grad, parts = 0.0, np.zeros(self.parametrization.n_parameters), {}
        if self.regularizer is not None:
            out = self.regularizer.evaluate(self.parametrization.control_points(x))
            value += out.value
            grad += self.parametrization.pullback(out.grad_control_points)
            parts.update(deviation=out.deviation, acceleration=out.acceleration)
        if self.velocity_penalty is not None:
            v, g = self.velocity_penalty.evaluate_parameters(x, self.parametrization)
            value += v
            grad += g
            parts["velocity_penalty"] = v
        return value, grad, parts


def first_influence(problem: AdjointProblem) -> NDArray[np.int64]:
    """Per parameter, the first grid index ``n`` (of ``t_n = n Δt``, n = 0 … N) at which it changes a motor's angle
    or speed; ``N + 1`` for one that changes neither on the grid. Before it the motion, hence every state, is
    independent of the parameter (a cubic B-spline starts with zero value and first and second derivative)."""
    times = problem.start.t + np.arange(problem.n_steps + 1) * problem.dt  # the rollout's grid
    par = problem.parametrization
    out = np.full(par.n_free, problem.n_steps + 1, dtype=np.int64)
    for derivative in (0, 1):
        basis = par.parameter_basis(problem.template.basis_matrix(times, derivative)).tocoo()
        nonzero = basis.data != 0.0
        np.minimum.at(out, basis.col[nonzero], basis.row[nonzero])
    return np.tile(out, par.n_motors)  # motor-major x: every motor shares the basis


def window_parameters(
    problem: AdjointProblem, first: int, stop: int, influence: NDArray[np.int64] | None = None
) -> NDArray[np.int64]:
    """Indices of the parameters whose influence (:func:`first_influence`) begins in ``first < n ≤ stop``: those a
    window starting from the stored state ``S_first`` may change. ``influence``: :func:`first_influence` of
    ``problem`` when the caller has it (it evaluates the spline bases over the whole grid)."""
    start = first_influence(problem) if influence is None else influence
    return np.flatnonzero((start > first) & (start <= stop))


@dataclass(frozen=True, eq=False)
class Evaluation:
    """``J(x)``, its gradient and the forward run it came from.

    Attributes:
        value: ``J``. tracking: the tracking part. parts: the other parts by name (regularizers, penalties).
        gradient: ``dJ/dx`` (n_parameters,) or None (value only).
        rollout: the forward simulation.
        positions: tracked COM positions (N + 1, k, 3) [m].
    """

    value: float
    tracking: float
    parts: dict[str, float]
    gradient: NDArray[np.float64] | None
    rollout: Rollout
    positions: NDArray[np.float64]


def evaluate(problem: AdjointProblem, x: NDArray[np.float64], gradient: bool = True,
             progress: Callable[[int, int], None] | None = None) -> Evaluation:
    """Simulate at ``x``, evaluate ``J`` and (optionally) its exact gradient by the discrete adjoint.

    Args:
        problem: the fixed problem data; with a :class:`Window`, ``x`` holds the window's parameters only, and the
            rollout, the positions and ``J`` are the window's (module docstring).
        x: parameters (n_parameters,).
        gradient: also run the backward (adjoint) pass.
        progress: ``progress(done, total)`` over forward plus backward steps.
    """
    window = problem.window
    x = problem.whole(x)
    if window is None:
        n, start, before, tracking = problem.n_steps, problem.start, None, problem.tracking
    else:
        n, start, before = window.last - window.first, window.start, window.before
        tracking = problem.tracking.window(window.first, window.last)
    motors = problem.profiles(x)
    total = 2 * n if gradient else n
    fwd = rollout(problem.engine, start, motors, problem.dt, n,
                  None if progress is None else (lambda k, _n: progress(k, total)), before=before)
    pos = problem.poses.positions(fwd.matrix)
    ori = problem.poses.orientations(fwd.matrix) if tracking.tracks_orientation else None
    tv = tracking.evaluate(pos, ori)
    p_value, p_grad, parts = problem.parameter_terms(x)
    value = tv.value + p_value
    torque_grad = speed_grad = None
    if problem.torque_penalty is not None:
        penalty = problem.torque_penalty
        torque_index = problem.engine.motor_torque_index
        parts["torque_penalty"], torque_grad, speed_grad = penalty.evaluate(fwd.matrix[:, torque_index],
                                                                            penalty.speeds(fwd.matrix))
        value += parts["torque_penalty"]
        if speed_grad is not None:
            speed_on = penalty.speed_index >= 0
            speed_rows = penalty.speed_index[speed_on]
    if not gradient:
        return Evaluation(value, tv.value, parts, None, fwd, pos)
    nm = len(problem.engine.motor_names)
    grad_theta = np.zeros((n + 1, nm))
    grad_theta_dot = np.zeros((n + 1, nm))
    # Sliding window of the two later steps: (sensitivity, μ) of n + 1 and n + 2.
    later: list[tuple[object, NDArray[np.float64]]] = []
    # Local step k sits at states[k + lead]: a window's run is preceded by its BDF2 history state.
    lead = int(before is not None)
    states = ([before] if before is not None else []) + fwd.states
    for k, sens in zip(range(n, 0, -1), step_sensitivities(problem.engine, states, problem.dt, motors,
                                                            range(n + lead, lead, -1))):
        rhs = -problem.poses.pullback(fwd.matrix[k], tv.d_positions[k],
                                      None if tv.d_orientations is None else tv.d_orientations[k])
        if torque_grad is not None:
            rhs[torque_index] -= torque_grad[k]
            if speed_grad is not None:
                rhs[speed_rows] -= speed_grad[k][speed_on]
        for lag, (s_later, mu_later) in enumerate(later, start=1):
            rhs -= s_later.history_transposed(lag, mu_later)  # type: ignore[attr-defined]
        mu = sens.solve_transposed(rhs)
        grad_theta[k] = sens.r_theta.T @ mu
        grad_theta_dot[k] = sens.r_theta_dot.T @ mu
        later = [(sens, mu)] + later[:1]
        if progress is not None:
            progress(n + (n - k + 1), total)
    times = fwd.times
    b0 = problem.template.basis_matrix(times, 0)
    b1 = problem.template.basis_matrix(times, 1)
    grad_p = np.asarray(b0.T @ grad_theta) + np.asarray(b1.T @ grad_theta_dot)
    g = problem.restricted(problem.parametrization.pullback(grad_p) + p_grad)
    return Evaluation(value, tv.value, parts, g, fwd, pos)
