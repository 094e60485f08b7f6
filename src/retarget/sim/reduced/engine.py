"""The compiled reduced engine from Python: packing, runs, exact linearizations and the ``Engine`` protocol.

:func:`pack_system` turns a :class:`~retarget.sim.reduced.system.ReducedSystem` into the arrays of
:mod:`retarget.sim.reduced.compiled`; :func:`simulate_compiled` runs the time loop in compiled chunks (a progress
callback between chunks, no Python per step) and keeps every converged state; :func:`linearize_compiled` gives
the exact ``∂R/∂S``, ``∂R/∂θ``, ``∂R/∂θ̇`` of a step; :class:`CompiledReducedEngine` implements the simulator's
:class:`retarget.sim.engine.Engine` protocol (transposed solves through the condensed factorization).
"""
from __future__ import annotations

import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.sim.bdf import BDF1, BDF2, StepInputs, history_jacobian_product, step_inputs
from retarget.sim.constraints import CouplingConstraint, JointConstraint
from retarget.sim.errors import NewtonFailed, SimulationDiverged
from retarget.sim.engine import EngineState, StepSensitivity, SystemEngine, warm_u
from retarget.sim.motors import sample_motors
from retarget.sim.reduced import compiled as ck
from retarget.sim.reduced.cubature import reduced_gradients
from retarget.sim.reduced.kernels import COUPLING_CODE, JOINT_CODES, block_eval
from retarget.sim.reduced.stepper import ReducedState, _block_layout, solve_static
from retarget.sim.reduced.system import ReducedSystem
from retarget.sim.reduced.typed_lists import typed_list
from retarget.sim.servo import N_PARAMS

if TYPE_CHECKING:
    from retarget.sim.motors import MotorTrajectory

__all__ = [
    "CompiledLinearization",
    "CompiledReducedEngine",
    "CompiledRun",
    "DEFAULT_DT",
    "linearize_compiled",
    "pack_system",
    "residual_compiled",
    "simulate_compiled",
]

#: Default time step of the reduced engine [s] (docs/reduced.md §5: accuracy vs dt).
DEFAULT_DT: float = 1e-3


def pack_system(rs: ReducedSystem) -> ck.Packed:
    """The compiled engine's arrays for ``rs`` (cost: milliseconds; the system itself is not copied)."""
    bodies = rs.bodies
    nd = len(bodies)
    bzu = np.array([rs.z_slice_u(d).start for d in range(nd)], dtype=np.int64)
    bzv = np.array([rs.z_slice_v(d).start for d in range(nd)], dtype=np.int64)
    n_blocks = len(rs.constraints)
    kind = np.zeros(n_blocks, dtype=np.int64)
    motor = np.full(n_blocks, -1, dtype=np.int64)
    present_a = np.ones(n_blocks, dtype=np.int64)
    present_b = np.ones(n_blocks, dtype=np.int64)
    separate = np.zeros(n_blocks, dtype=np.int64)
    n_rigid_seg = np.zeros(n_blocks, dtype=np.int64)
    fvec = np.zeros((n_blocks, 6))
    fmat = np.zeros((n_blocks, 6, 3))
    y0s: list[NDArray] = []
    ymaps: list[NDArray] = []
    uis, vis = [], []
    for b, blk in enumerate(rs.constraints):
        segs, ui, vi = _block_layout(rs, b)
        uis.append(ui)
        vis.append(vi)
        n_rigid_seg[b] = sum(1 for s in segs if s[0] == "rigid")
        if isinstance(blk, CouplingConstraint):
            kind[b] = COUPLING_CODE
            present_a[b] = int(blk.rigid_present)
            separate[b] = int(len(segs) == 3)
            fvec[b, :3] = blk.slots[-1].centroid - blk.rigid_reference
            itf = rs.interfaces[b]
            y0s.append(itf.y0)
            ymaps.append(itf.y)
        else:
            assert isinstance(blk, JointConstraint)
            kind[b] = JOINT_CODES[blk.kind]
            motor[b] = blk.motor
            present_a[b], present_b[b] = int(blk.present[0]), int(blk.present[1])
            fvec[b] = np.concatenate([blk.anchor_a, blk.anchor_b])
            fmat[b] = np.vstack([blk.axes_a, blk.axes_b])
            y0s.append(np.zeros(12))
            ymaps.append(np.zeros((12, 0)))
    off_u = np.concatenate([[0], np.cumsum([len(x) for x in uis])]).astype(np.int64)
    off_v = np.concatenate([[0], np.cumsum([len(x) for x in vis])]).astype(np.int64)
    t = [b.tensors for b in bodies]
    curv = np.concatenate([
        _curvature_columns(kind[b], motor[b] >= 0, present_a[b], present_b[b], fvec[b], fmat[b], separate[b],
                           y0s[b], ymaps[b], len(uis[b]), n_rigid_seg[b]) for b in range(n_blocks)
    ]).astype(np.int64) if n_blocks else np.zeros(0, dtype=np.int64)
    return ck.Packed(
        rmass=np.array([b.mass for b in rs.rigid], dtype=float),
        rinertia=np.ascontiguousarray(np.array([b.inertia for b in rs.rigid], dtype=float).reshape(-1, 3, 3)),
        bref=np.array([b.reference for b in bodies], dtype=np.int64),
        bzu=bzu,
        bzv=bzv,
        bsize=np.array([b.size for b in bodies], dtype=np.int64),
        bmass=np.array([x.mass for x in t], dtype=float),
        s0=typed_list([x.s0 for x in t], 1),
        s1=typed_list([x.s1 for x in t], 2),
        p0=typed_list([x.p0 for x in t], 2),
        p1=typed_list([x.p1 for x in t], 3),
        p2=typed_list([x.p2 for x in t], 4),
        c0=typed_list([x.c0 for x in t], 2),
        c1=typed_list([x.c1 for x in t], 3),
        mzz=typed_list([x.m_zz for x in t], 2),
        balpha=np.array([b.alpha for b in bodies], dtype=float),
        cub_qw=typed_list([b.cubature.qweights for b in bodies], 2),
        cub_w=typed_list([b.cubature.weights for b in bodies], 1),
        cub_d=typed_list([reduced_gradients(b.cubature.basis_rows, b.cubature.grad) for b in bodies], 4),
        bmu=np.array([b.cubature.mu for b in bodies], dtype=float),
        blam=np.array([b.cubature.lam for b in bodies], dtype=float),
        bbeta=np.array([b.beta for b in bodies], dtype=float),
        kind=kind,
        motor=motor,
        present_a=present_a,
        present_b=present_b,
        separate=separate,
        n_rigid_seg=n_rigid_seg,
        lam_off=np.asarray(rs.lambda_offsets, dtype=np.int64),
        fvec=fvec,
        fmat=fmat,
        y0=typed_list(y0s, 1),
        ymap=typed_list(ymaps, 2),
        ui=np.concatenate(uis).astype(np.int64),
        ui_off=off_u,
        vi=np.concatenate(vis).astype(np.int64),
        vi_off=off_v,
        gravity=np.asarray(rs.gravity, dtype=float),
        sizes=np.array([rs.n_u, rs.n_v, rs.n_lambda, len(rs.motors)], dtype=np.int64),
        curv=curv,
        sv_motor=np.ascontiguousarray(rs.servo.motor_servo, dtype=np.int64),
        sv_par=np.ascontiguousarray(rs.servo.params.reshape(-1, N_PARAMS), dtype=float),
        sv_u=np.ascontiguousarray(rs.servo.u_theta, dtype=np.int64),
        sv_v=np.ascontiguousarray(rs.servo.v_omega, dtype=np.int64),
        sv_ui=np.ascontiguousarray(rs.servo.u_iota, dtype=np.int64),
        sv_ve=np.ascontiguousarray(rs.servo.v_e, dtype=np.int64),
    )


def _curvature_columns(kind: int, motorized: bool, present_a: int, present_b: int, fvec: NDArray, fmat: NDArray,
                       separate: int, y0: NDArray, ymap: NDArray, n: int, n_rigid: int) -> NDArray[np.int64]:
    """1 for each local coordinate ``y_j`` that ``∂C/∂y`` of a block depends on, 0 where it does not.

    Structural: a complex step in ``y_j`` leaves ``∂C/∂y`` exactly real when ``C`` is affine in ``y_j`` (a position
    entering a joint or coupling linearly), so two random states (unit quaternions, random motor value) that both
    give an exactly zero imaginary part mark the column as curvature-free; the exact Jacobian then skips it.
    """
    rng = np.random.default_rng(1234)
    flags = np.zeros(n, dtype=np.int64)
    for _ in range(2):
        ul = rng.normal(size=n)
        for sg in range(n_rigid):
            ul[7 * sg + 3 : 7 * sg + 7] /= np.linalg.norm(ul[7 * sg + 3 : 7 * sg + 7])
        ul[7 * n_rigid :] *= 1e-2
        th = float(rng.normal())
        for j in range(n):
            ulc = ul.astype(np.complex128)
            ulc[j] += 1j * 1e-20
            _, cu, _, cuth = block_eval(kind, motorized, present_a != 0, present_b != 0, fvec, fmat, separate != 0,
                                        y0, ymap, ulc, th)
            if np.any(cu.imag != 0.0) or np.any(cuth.imag != 0.0):
                flags[j] = 1
    return flags


@dataclass(eq=False)
class CompiledLinearization:
    """Residual and exact Jacobian blocks of one BDF step of the compiled engine.

    Attributes:
        residual: ``R`` (n_S,). jacobian: ``∂R/∂S_n`` (n_S, n_S) (None for residual-only).
        r_theta: ``∂R/∂θ`` (n_S, n_m). r_theta_dot: ``∂R/∂θ̇`` (n_S, n_m).
        mass: generalized mass (n_V, n_V): ``R`` depends on ``V̄`` as ``−mass/h``.
        min_det: smallest det F of the cubature elements.
    """

    residual: NDArray[np.float64]
    jacobian: NDArray[np.float64] | None
    r_theta: NDArray[np.float64]
    r_theta_dot: NDArray[np.float64]
    mass: NDArray[np.float64] | None
    min_det: float


def _kernel_array(x: ArrayLike) -> NDArray[np.float64]:
    """``x`` as the kernels take it: a writable, C-contiguous float64 array of at least one dimension. numba compiles
    one signature per array kind, so a read-only array (a plan's start pose, a cached profile) would compile the
    whole residual tree a second time (about 40 s)."""
    a = np.ascontiguousarray(np.atleast_1d(np.asarray(x, dtype=np.float64)))
    return a if a.flags.writeable else a.copy()


def residual_compiled(
    packed: ck.Packed | ck.Kernels,
    s: NDArray[np.float64],
    inputs: StepInputs,
    jacobian: bool = True,
) -> CompiledLinearization:
    """The compiled residual (and exact Jacobian); same arguments as ``stepper.residual_and_jacobian`` (``packed``:
    the packed system, or its :class:`~retarget.sim.reduced.compiled.Kernels` for repeated calls). The kernel
    takes the record's fields as plain arrays and floats (numba takes no dataclass)."""
    kernels = packed if isinstance(packed, ck.Kernels) else ck.Kernels(packed)
    r, jac, rthd, rth, mass, md = kernels(
        ck.residual_jacobian, _kernel_array(s), _kernel_array(inputs.u_bar), _kernel_array(inputs.v_bar),
        float(inputs.h), _kernel_array(inputs.theta), _kernel_array(inputs.theta_dot), float(inputs.baumgarte),
        bool(jacobian), True,
    )
    return CompiledLinearization(r, jac if jacobian else None, rth, rthd, mass if jacobian else None, float(md))


def linearize_compiled(
    packed: ck.Packed | ck.Kernels, new: ReducedState, prev: ReducedState, prev2: ReducedState | None, dt: float,
    motors: MotorTrajectory
) -> CompiledLinearization:
    """The exact ``∂R/∂S_n``, ``∂R/∂θ``, ``∂R/∂θ̇`` of the step ``(prev2, prev) → new`` (``packed`` as
    :func:`residual_compiled`'s)."""
    inputs = step_inputs(prev, prev2, dt, motors.value(new.t), motors.derivative(new.t))
    return residual_compiled(packed, new.s, inputs)


@dataclass(frozen=True, eq=False)
class CompiledRun:
    """Every converged state of a compiled reduced run.

    Attributes:
        system: the reduced system. time: (n+1,) [s]. states: ``S_k`` (n+1, n_S).
        newton_iterations: (n+1,). factorizations: condensed LU factorizations in the run. wall_s: loop time [s].
    """

    system: ReducedSystem
    time: NDArray[np.float64]
    states: NDArray[np.float64]
    newton_iterations: NDArray[np.int64]
    factorizations: int
    wall_s: float

    @property
    def rigid_poses(self) -> NDArray[np.float64]:
        """(n+1, b, 7) COM [m] and unit quaternion per rigid body."""
        nb = self.system.n_rigid
        poses = self.states[:, : 7 * nb].reshape(len(self.time), nb, 7).copy()
        poses[:, :, 3:] /= np.linalg.norm(poses[:, :, 3:], axis=2, keepdims=True)
        return poses

    @property
    def coordinates(self) -> NDArray[np.float64]:
        """Reduced coordinates z (n+1, Σr)."""
        return self.states[:, self.system.z_slice].copy()

    def body_position(self, name: str) -> NDArray[np.float64]:
        """Centre of mass of rigid body ``name`` over time (n+1, 3) [m]."""
        i = self.system.rigid_index(name)
        return self.states[:, 7 * i : 7 * i + 3].copy()

    def state(self, k: int) -> ReducedState:
        """Stored state k as a :class:`ReducedState`."""
        rs = self.system
        s = self.states[k]
        return ReducedState(float(self.time[k]), s[: rs.n_u].copy(), s[rs.n_u : rs.n_u + rs.n_v].copy(), s[rs.n_u + rs.n_v :].copy())


def _raise(status: int, step: int, t: float) -> None:
    if status == ck.STATUS_NEWTON_FAILED:
        raise NewtonFailed(step, t, [], reason="compiled reduced engine: no convergence within the iteration cap")
    if status == ck.STATUS_INVERTED:
        raise SimulationDiverged(step, t, [], reason="inverted element in the cubature")
    raise SimulationDiverged(step, t, [], reason="non-finite residual or singular Newton matrix")


def simulate_compiled(
    rs: ReducedSystem,
    motors: MotorTrajectory,
    duration: float,
    dt: float = DEFAULT_DT,
    start: ReducedState | None = None,
    tol: float = 1e-10,
    max_iter: int = 25,
    packed: ck.Packed | None = None,
    chunk: int = 500,
    progress: Callable[[int, int], None] | None = None,
    estimate: bool = True,
    exact_chord: bool = False,
) -> CompiledRun:
    """BDF1 then BDF2 from the quasi-static state at ``θ(0)`` (or ``start``) for ``duration`` [s].

    Args:
        rs: the reduced system. motors: ``value(t)``, ``derivative(t)`` (sampled once per step up front).
        duration: simulated time [s]. dt: step [s]. start: initial state (default: quasi-static at θ(0)).
        tol, max_iter: Newton tolerance (as the reference stepper) and iteration cap.
        packed: a cached :func:`pack_system` of ``rs``. chunk: steps per compiled call.
        progress: ``(k, n)`` after each chunk.
        estimate: also stop Newton on the estimated remaining error (``compiled.converged``); ``False`` for the
            stricter update-size test (``CompiledReducedEngine``'s default, for finite-difference checks of the
            adjoint).
        exact_chord: chord iterations on the exact Jacobian (default: without its second-order constraint and
            damping terms, ``compiled.run_chunk``; the converged states agree to the tolerance).

    Raises:
        NewtonFailed, SimulationDiverged: with the failing step and time.
    """
    p = packed if packed is not None else pack_system(rs)
    n_steps = int(round(duration / dt))
    st = start if start is not None else solve_static(rs, motors.value(0.0))
    t0 = float(st.t)
    times = t0 + dt * np.arange(n_steps + 1)
    thetas, theta_dots = sample_motors(motors, times)
    states = np.zeros((n_steps + 1, rs.n_u + rs.n_v + rs.n_lambda))
    states[0] = st.s
    iters = np.zeros(n_steps + 1, dtype=np.int64)
    ws = ck.make_workspace(p)
    wall = _time.perf_counter()
    k = 0
    while k < n_steps:
        k1 = min(n_steps, k + chunk)
        status, at = ck.run_chunk(p, states, iters, k, k1, float(dt), thetas, theta_dots, float(tol), int(max_iter), ws,
                                  bool(estimate), bool(exact_chord))
        if status != ck.STATUS_OK:
            _raise(status, at, float(times[at]))
        k = k1
        if progress is not None:
            progress(k, n_steps)
    wall = _time.perf_counter() - wall
    return CompiledRun(rs, times, states, iters, int(ws.scalars[1]), wall)


class CompiledReducedEngine(SystemEngine):
    """The compiled reduced engine behind the ``Engine`` protocol (:mod:`retarget.sim.engine`).

    Drop-in for the dense reference stepper's adapter, ``sim.adapters.ReferenceReducedEngine``: same state
    layout ``S = [U, V, λ]``, quasi-static start from the reference solve, one compiled step per :meth:`step`
    (chord Newton with the cached condensed LU kept in ``cache``), and :meth:`sensitivity` with the exact Jacobian
    factorized by the condensed LU (transposed solves reuse its structure). :meth:`simulate` runs a whole rollout in compiled chunks.

    Args:
        system: a :class:`ReducedSystem`. tolerance: Newton tolerance on the update (max-norm of δU [m] and Δt·δV).
        estimate: also stop Newton on the estimated remaining error (:func:`compiled.converged`; default: the update
            size alone, which finite-difference checks of the adjoint resolve).
    """

    #: :meth:`sensitivity` runs in compiled code without the GIL and shares no mutable state: the adjoint computes
    #: the per-step linearizations on several threads (``retarget.sim.adapters.step_sensitivities``).
    concurrent_sensitivity = True

    def __init__(self, system: ReducedSystem, tolerance: float = 1e-12, estimate: bool = False) -> None:
        super().__init__(system)
        self.tolerance = float(tolerance)
        self.estimate = bool(estimate)
        self.packed = pack_system(system)
        self.kernels = ck.Kernels(self.packed)  # the per-step calls, without typing ``packed`` each time

    def _wrap(self, st: ReducedState) -> EngineState:
        return EngineState(float(st.t), st.s, st)

    def _on(self, system: ReducedSystem) -> CompiledReducedEngine:
        return CompiledReducedEngine(system, self.tolerance, self.estimate)

    def solve_static(self, theta: NDArray[np.float64], warm: EngineState | None = None) -> EngineState:
        u0 = None if warm is None else warm_u(warm, self.system.n_u)

        def linearize(s: NDArray, inputs: StepInputs) -> tuple[NDArray, NDArray]:
            lin = residual_compiled(self.kernels, s, inputs)
            assert lin.jacobian is not None
            return lin.residual, lin.jacobian

        return self._wrap(solve_static(self.system, np.atleast_1d(theta), u0=u0, linearize=linearize))

    def reference_state(self) -> EngineState:
        rs = self.system
        return self._wrap(ReducedState(0.0, rs.reference_u(), np.zeros(rs.n_v), np.zeros(rs.n_lambda)))

    def _state(self, t: float, s: NDArray) -> ReducedState:
        rs = self.system
        return ReducedState(t, s[: rs.n_u].copy(), s[rs.n_u : rs.n_u + rs.n_v].copy(), s[rs.n_u + rs.n_v :].copy())

    def step(self, prev: EngineState, prev2: EngineState | None, dt: float, motors: MotorTrajectory, index: int,
             cache: dict[str, object]) -> EngineState:
        ws = cache.get("compiled_workspace")
        if ws is None:
            ws = cache["compiled_workspace"] = ck.make_workspace(self.packed)
        t = prev.t + dt
        nm = len(self.system.motors)
        # The state before prev2, remembered from the previous call of a sequential rollout, only feeds the
        # quadratic predictor (the Newton start), never the converged step.
        last = cache.get("compiled_last")
        prev3 = last[0] if last is not None and prev2 is not None and last[1] is prev2 else None
        cache["compiled_last"] = (prev2, prev)
        if prev2 is None:
            states = np.stack([prev.s, np.zeros_like(prev.s)])
            k0 = 0
        elif prev3 is None:
            states = np.stack([prev2.s, prev.s, np.zeros_like(prev.s)])
            k0 = 1
        else:
            states = np.stack([prev3.s, prev2.s, prev.s, np.zeros_like(prev.s)])
            k0 = 2
        thetas = np.zeros((len(states), nm))
        theta_dots = np.zeros((len(states), nm))
        thetas[-1] = motors.value(t)
        theta_dots[-1] = motors.derivative(t)
        iters = np.zeros(len(states), dtype=np.int64)
        status, _ = self.kernels(ck.run_chunk, states, iters, k0, k0 + 1, float(dt), thetas, theta_dots,
                                 self.tolerance, 40, ws, self.estimate, False)
        if status != ck.STATUS_OK:
            _raise(status, index, t)
        return self._wrap(self._state(t, states[-1]))

    def simulate(self, start: EngineState, motors: MotorTrajectory, dt: float, n_steps: int) -> CompiledRun:
        """All states of an ``n_steps`` rollout from ``start`` (an ``EngineState``) in compiled chunks."""
        return simulate_compiled(self.system, motors, n_steps * dt, dt, start=start.native, tol=self.tolerance,
                                 max_iter=40, packed=self.packed, estimate=self.estimate)

    def sensitivity(self, new: EngineState, prev: EngineState, prev2: EngineState | None, dt: float,
                    motors: MotorTrajectory) -> StepSensitivity:
        kernels = self.kernels
        lin = linearize_compiled(kernels, new.native, prev.native, None if prev2 is None else prev2.native, dt, motors)
        a1, a2, gamma = BDF1 if prev2 is None else BDF2
        h = gamma * dt
        ws = ck.make_workspace(self.packed)
        kernels(ck.factorize_exact, lin.jacobian, float(h), ws)
        nu, nv = self.system.n_u, self.system.n_v
        mass = lin.mass

        def solve_t(rhs: NDArray[np.float64]) -> NDArray[np.float64]:
            return kernels(ck.condensed_solve_transposed, ws, _kernel_array(rhs))

        def solve(rhs: NDArray[np.float64]) -> NDArray[np.float64]:
            # condensed_solve gives the Newton update −J⁻¹ r (of each column: condensed_solve_columns).
            b = np.asarray(rhs, dtype=float)
            if b.ndim == 1:
                return -kernels(ck.condensed_solve, ws, np.ascontiguousarray(b))
            return -ck.condensed_solve_columns(self.packed, ws, b)

        def history_t(k: int, mu: NDArray[np.float64]) -> NDArray[np.float64]:
            return history_jacobian_product(nu, nv, a1 if k == 1 else a2, h, mass, mu, True)

        def history(k: int, delta: NDArray[np.float64]) -> NDArray[np.float64]:
            return history_jacobian_product(nu, nv, a1 if k == 1 else a2, h, mass, delta, False)

        return StepSensitivity(solve_t, history_t, lin.r_theta, lin.r_theta_dot, solve, history)
