"""Quasi-static solve: equilibrium under gravity (and optional external loads) at given motor values.

Unknowns ``U`` and ``λ`` with ``V = 0``; equations ``−F(U, 0) − C_Vᵀ λ − f_ext = 0`` and ``C(U, θ) = 0``.
Newton works in tangent coordinates ``δW`` (V-space: a rigid body's rotation increment is a body-frame
rotation vector) with Jacobian ``[[∂G/∂U T, −C_Vᵀ], [C_V, 0]]``, ``T = ∂U/∂W``; quaternions are renormalized
after each update.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import ArrayLike, NDArray

from retarget.sim.bdf import StepInputs
from retarget.sim.constraints import JointConstraint
from retarget.sim.dae import constraint_terms, residual_and_jacobian
from retarget.sim.errors import NewtonFailed, SimulationDiverged
from retarget.sim.integrator import State
from retarget.sim.rotation import quat_rate_matrix
from retarget.sim.system import System

__all__ = ["solve_static", "tangent_map"]


def tangent_map(system: System, u: NDArray[np.float64]) -> sp.csr_matrix:
    """``T(U)`` (nU, nV): ``U̇ = T V`` (identity except ``½ Q(q)`` blocks)."""
    nb = len(system.rigid)
    blocks = []
    for i in range(nb):
        t = np.zeros((7, 6))
        t[:3, :3] = np.eye(3)
        t[3:, 3:] = 0.5 * quat_rate_matrix(u[7 * i + 3 : 7 * i + 7])
        blocks.append(sp.csr_matrix(t))
    if system.n_u > 7 * nb:
        # Deformable and servo coordinates: U̇ = V.
        blocks.append(sp.identity(system.n_u - 7 * nb, format="csr"))
    return sp.block_diag(blocks, format="csr")


def solve_static(
    system: System,
    theta: ArrayLike,
    u0: NDArray[np.float64] | None = None,
    external_force: NDArray[np.float64] | None = None,
    tolerance: float = 1e-11,
    max_iterations: int = 30,
    t: float = 0.0,
) -> State:
    """Gravity equilibrium at motor values ``theta``.

    Args:
        system: the system.
        theta: motor values (n_motors,) [rad] / [m].
        u0: starting ``U`` (default: the reference).
        external_force: extra generalized force (nV,) (world force [N] on a rigid body's linear rows,
            body-frame torque [N m] on its angular rows, nodal forces [N] on a deformable body).
        tolerance: on the max-norm of the tangent update [m].
        max_iterations: Newton limit.
        t: time stamp of the returned state [s].

    Returns:
        A :class:`State` with ``V = 0`` and the equilibrium constraint forces ``λ``.

    Far from the reference (Newton from the reference fails and ``u0`` is None), the motors are moved to
    ``theta`` by continuation in increments of at most 0.1 rad.

    With modelled servos (:mod:`retarget.sim.servo`) ``theta`` are the goals: each shaft settles where its loop's
    torque holds the load (it sags by ``τ_load / kp`` below saturation; with integral action it reaches the goal
    and the integral state carries the load).

    Raises:
        NewtonFailed: no convergence (the error carries residual norms; step index 0).
    """
    th = np.atleast_1d(np.asarray(theta, dtype=float))
    try:
        return _newton_static(system, th, u0, external_force, tolerance, max_iterations, t)
    except NewtonFailed:
        if u0 is not None or not np.any(th):
            raise
    # Far from the reference (large motor angles): continuation, moving the motors there in small increments
    # from the reference equilibrium, each solve starting from the previous one.
    n = max(2, int(np.ceil(np.max(np.abs(th)) / CONTINUATION_STEP)))
    state = _newton_static(system, 0.0 * th, None, external_force, tolerance, max_iterations, t)
    for k in range(1, n + 1):
        state = _newton_static(system, th * (k / n), state.u, external_force, tolerance, max_iterations, t)
    return state


#: Largest motor increment [rad] (or [m]) per continuation stage of :func:`solve_static`.
CONTINUATION_STEP: float = 0.1


def _singular(system: System, t: float, norms: list[dict[str, float]]) -> SimulationDiverged:
    """The error of a singular static system, naming the joints that nothing holds (a hinge, slider, universal or
    ball joint that is not a motor: the usual cause, e.g. a gripper's fingers left free)."""
    free = [c.name for c in system.constraints
            if isinstance(c, JointConstraint) and c.kind != "fixed" and c.motor < 0]
    hint = (f"; joints that are not motors: {', '.join(free)} — one that nothing holds (a gripper's fingers, a "
            "hinge whose axis is along gravity) has no rest position: list it under motors or locked_joints "
            "(docs/robot-description.md)") if free else ""
    return SimulationDiverged(0, t, norms, reason=f"singular static system{hint}")


def _solve(system: System, mat: sp.spmatrix, rhs: NDArray[np.float64], t: float,
           norms: list[dict[str, float]]) -> NDArray[np.float64]:
    """One Newton step's linear solve (symmetric minimum-degree ordering: the stiffness block dominates and is
    structurally symmetric); a singular system raises :func:`_singular`'s error."""
    try:
        sol = spla.splu(mat, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.1,
                        options={"SymmetricMode": True}).solve(rhs)
    except RuntimeError as exc:  # SuperLU: "Factor is exactly singular"
        raise _singular(system, t, norms) from exc
    if not np.all(np.isfinite(sol)):
        raise _singular(system, t, norms)
    return sol


def _newton_static_servo(
    system: System,
    goal: NDArray[np.float64],
    u0: NDArray[np.float64] | None,
    external_force: NDArray[np.float64] | None,
    tolerance: float,
    max_iterations: int,
    t: float,
) -> State:
    """:func:`_newton_static` for a system with servo coordinates: Newton on the BDF residual at ``V = V̄ = 0``,
    ``h = 1``, ``ġ = 0`` and Baumgarte ``a = 1`` (its V rows are then the static balance, shafts included, and its
    λ rows ``C``), in tangent coordinates."""
    u = system.reference_u() if u0 is None else np.asarray(u0, dtype=float).copy()
    if u0 is None:
        u[system.servo.u_theta] = goal[system.servo.motor_servo >= 0]
    nv = system.n_v
    lam = np.zeros(system.n_lambda)
    zero_v = np.zeros(nv)
    f_ext = np.zeros(nv) if external_force is None else np.asarray(external_force, dtype=float)
    nb = len(system.rigid)
    norms: list[dict[str, float]] = []
    for _ in range(max_iterations):
        s = np.concatenate([u, zero_v, lam])
        try:
            lin = residual_and_jacobian(system, s, StepInputs.static(u, nv, goal))
        except Exception as exc:
            raise SimulationDiverged(0, t, norms, reason=f"{type(exc).__name__}: {exc}") from exc
        g = lin.r_v - f_ext
        norms.append({"force": float(np.max(np.abs(g), initial=0.0)),
                      "constraint": float(np.max(np.abs(lin.r_lambda), initial=0.0))})
        tmap = tangent_map(system, u)
        mat = sp.bmat([[lin.j_vu @ tmap, lin.j_vl], [lin.j_lu @ tmap, None]], format="csc")
        sol = _solve(system, mat, -np.concatenate([g, lin.r_lambda]), t, norms)
        dw = sol[:nv]
        u = u + tmap @ dw
        for i in range(nb):
            q = u[7 * i + 3 : 7 * i + 7]
            u[7 * i + 3 : 7 * i + 7] = q / np.linalg.norm(q)
        lam = lam + sol[nv:]
        if np.max(np.abs(dw), initial=0.0) <= tolerance:
            return State(t, u, zero_v.copy(), lam)
    raise NewtonFailed(0, t, norms, reason="quasi-static solve (servos: a load beyond a servo's stall torque has no "
                                        "equilibrium)")


def _newton_static(
    system: System,
    th: NDArray[np.float64],
    u0: NDArray[np.float64] | None,
    external_force: NDArray[np.float64] | None,
    tolerance: float,
    max_iterations: int,
    t: float,
) -> State:
    if not system.servo.ideal:
        return _newton_static_servo(system, th, u0, external_force, tolerance, max_iterations, t)
    u = system.reference_u() if u0 is None else np.asarray(u0, dtype=float).copy()
    lam = np.zeros(system.n_lambda)
    zero_v = np.zeros(system.n_v)
    f_ext = np.zeros(system.n_v) if external_force is None else np.asarray(external_force, dtype=float)
    nb = len(system.rigid)
    norms: list[dict[str, float]] = []
    for it in range(max_iterations):
        terms = constraint_terms(system, u, zero_v, lam, th, np.zeros_like(th), 0.0)
        g = -terms.force - f_ext
        k_blocks = [sp.csr_matrix((6 * nb, 7 * nb))]
        for i, body in enumerate(system.rigid):
            g[6 * i : 6 * i + 3] -= body.mass * system.gravity
        for d, body in enumerate(system.deformable):
            ou, ov = system.u_offsets[d], system.v_offsets[d]
            n = body.n_dofs
            try:
                f_int, k = body.elastic.internal_forces_and_stiffness(u[ou : ou + n])
            except Exception as exc:
                raise SimulationDiverged(0, t, norms, reason=f"{type(exc).__name__}: {exc}") from exc
            g[ov : ov + n] += f_int - body.gravity_force
            k_blocks.append(k)
        norms.append({"force": float(np.max(np.abs(g), initial=0.0)), "constraint": float(np.max(np.abs(terms.c), initial=0.0))})
        tmap = tangent_map(system, u)
        jg = (sp.block_diag(k_blocks, format="csr") - terms.force_u) @ tmap
        mat = sp.bmat([[jg, -terms.c_v.T], [terms.c_v, None]], format="csc")
        sol = _solve(system, mat, -np.concatenate([g, terms.c]), t, norms)
        dw, dl = sol[: system.n_v], sol[system.n_v :]
        u = u + tmap @ dw
        for i in range(nb):
            q = u[7 * i + 3 : 7 * i + 7]
            u[7 * i + 3 : 7 * i + 7] = q / np.linalg.norm(q)
        lam = lam + dl
        if np.max(np.abs(dw), initial=0.0) <= tolerance:
            return State(t, u, zero_v.copy(), lam)
    raise NewtonFailed(0, t, norms, reason="quasi-static solve")
