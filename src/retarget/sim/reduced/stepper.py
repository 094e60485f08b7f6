"""BDF1/BDF2 steps of the reduced DAE with the exact Newton Jacobian (dense reference implementation).

Same DAE, BDF coefficients, Baumgarte stabilization and constraint blocks as the absolute engine
(:mod:`retarget.sim.dae`); what differs is the deformable bodies' coordinates (``z`` in their reference body's
frame) and therefore their inertial terms (:func:`retarget.sim.reduced.dynamics.body_forces`)::

    R_U = U − Ū − h T(U) V
    R_V = [rigid Newton–Euler] + [relative inertial − gravity] + α M(U) V_d + f_cub(z) + β K(z) ż − C_Vᵀ λ
    R_λ = C_θ θ̇ + C_V V + a C

``α M(U) V_d`` is the absolute engine's mass-proportional damping ``α M u̇`` of the nodes' absolute velocities in
these coordinates: ``V_d = [v_ref, ω_ref, ż]`` of each deformable body, ``M(U)`` its generalized mass (rigid motion
of a flexible part is damped too, as there).

Constraint blocks are the absolute engine's own (``evaluate`` of :mod:`retarget.sim.constraints`); a coupling's
slot ``[x̄, vec A]`` is composed from ``(c_ref, q_ref, z)`` by the reduced interface map, and the curvature terms
(``∂(C_Vᵀλ)/∂U``, ``∂(C_V V)/∂U``) come from complex steps of the analytic first derivatives, as in the
absolute engine. ``K(z)`` is the cubature's reduced tangent; the Jacobian's ``∂(β K(z) ż)/∂z = β dK(z)[ż]`` is the
exact second derivative of the cubature force along ż (:meth:`~retarget.sim.reduced.cubature.Cubature.tangent_derivative`;
the absolute engine differences its tangent along u̇ instead). Matrices are dense: the reduced system has a few hundred unknowns.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray

from retarget.sim.bdf import StepInputs, step_inputs
from retarget.sim.constraints import CouplingConstraint, theta_derivative
from retarget.sim.errors import NewtonFailed, SimulationDiverged
from retarget.sim.statics import CONTINUATION_STEP
from retarget.sim.reduced.compiled import REFACTOR_COST, charge, converged, refactor
from retarget.sim.reduced.dynamics import body_forces
from retarget.sim.reduced.system import ReducedSystem
from retarget.sim.servo import servo_rows
from retarget.sim.rotation import QUATERNION_BASIS_Q, omega_matrix, quat_rate_matrix, rotate, rotate_jacobian, rotation_matrix

__all__ = [
    "ReducedLinearization",
    "ReducedState",
    "history_jacobian",
    "linearize",
    "residual_and_jacobian",
    "solve_static",
    "step",
]

_H = 1e-30


@dataclass(frozen=True, eq=False)
class ReducedState:
    """``U`` (nU,), ``V`` (nV,), ``λ`` (m,) at time ``t`` [s] (layout: :class:`ReducedSystem`)."""

    t: float
    u: NDArray[np.float64]
    v: NDArray[np.float64]
    lam: NDArray[np.float64]

    @property
    def s(self) -> NDArray[np.float64]:
        """``S = [U, V, λ]``."""
        return np.concatenate([self.u, self.v, self.lam])


@dataclass(eq=False)
class ReducedLinearization:
    """Residual ``R`` (nS,) and dense Jacobian ``∂R/∂S`` (nS, nS) (None for residual-only), ``∂R/∂θ̇`` (nS, n_m)
    and ``∂R/∂θ`` (nS, n_m) (None for residual-only) — θ being the motor input: the angle of an ideal motor, the
    goal of a modelled servo (:mod:`retarget.sim.servo`).

    ``mass`` (nV, nV) is the generalized mass at ``S_n`` (rigid blocks plus each body's ``∂f/∂a``): ``R`` depends on
    ``V̄`` as ``−mass/h`` (see :func:`history_jacobian`).
    """

    residual: NDArray[np.float64]
    jacobian: NDArray[np.float64] | None
    r_theta_dot: NDArray[np.float64]
    norms: dict[str, float] = field(default_factory=dict)
    mass: NDArray[np.float64] | None = None
    r_theta: NDArray[np.float64] | None = None


def _block_layout(rs: ReducedSystem, b: int) -> tuple[list[tuple[str, int]], NDArray[np.int64], NDArray[np.int64]]:
    """Segments ``[("rigid", i) | ("z", d)]`` of block b's local vector, with global U and V indices."""
    blk = rs.constraints[b]
    segs: list[tuple[str, int]] = []
    if isinstance(blk, CouplingConstraint):
        d = blk.slots[-1].body
        ref = rs.bodies[d].reference
        if blk.rigid_present and blk.slots[0].body != ref:
            segs.append(("rigid", blk.slots[0].body))
        segs.append(("rigid", ref))
        segs.append(("z", d))
    else:
        segs = [("rigid", s.body) for s in blk.slots]
    ui, vi = [], []
    for kind, i in segs:
        if kind == "rigid":
            ui.append(7 * i + np.arange(7))
            vi.append(6 * i + np.arange(6))
        else:
            zu, zv = rs.z_slice_u(i), rs.z_slice_v(i)
            ui.append(np.arange(zu.start, zu.stop))
            vi.append(np.arange(zv.start, zv.stop))
    return segs, np.concatenate(ui), np.concatenate(vi)


def _coupling_eval(rs: ReducedSystem, b: int, segs: list[tuple[str, int]], ul: NDArray) -> tuple[NDArray, NDArray]:
    """``C`` (B, 6) and ``∂C/∂ul`` (B, 6, n) of a coupling block from the local vector ``ul`` (B, n) (holomorphic)."""
    blk = rs.constraints[b]
    itf = rs.interfaces[b]
    batch = ul.shape[0]
    n = ul.shape[1]
    sep = len(segs) == 3
    o = 7 if sep else 0
    cr, qr, z = ul[:, o : o + 3], ul[:, o + 3 : o + 7], ul[:, o + 7 :]
    nz = z.shape[1]
    yh = itf.y0 + z @ itf.y.T  # (B, 12)
    rot = rotation_matrix(qr)
    ahat = yh[:, 3:].reshape(batch, 3, 3)
    xbar = cr + rotate(qr, yh[:, :3])
    amat = rot @ ahat
    rigid = (ul[:, 0:7] if sep else ul[:, o : o + 7]) if blk.rigid_present else ul[:, :0]
    c, cy = blk.evaluate(np.concatenate([rigid, xbar, amat.reshape(batch, 9)], axis=1))
    # ∂C/∂ul by the chain rule through y = [rigid, x̄, A], block by block (∂y/∂ul is zero outside them):
    r0, nc = rigid.shape[1], cy.shape[1]
    cx = cy[:, :, r0 : r0 + 3]  # ∂C/∂x̄ (B, nc, 3)
    ca = cy[:, :, r0 + 3 : r0 + 12].reshape(batch, nc, 3, 3)  # ∂C/∂A_ij
    dc = np.zeros((batch, nc, n), dtype=np.result_type(cy, ul))
    if r0:
        rc = 0 if sep else o
        dc[:, :, rc : rc + 7] += cy[:, :, :7]
    dc[:, :, o : o + 3] += cx  # ∂x̄/∂c = I
    dq = cx @ rotate_jacobian(qr, yh[:, :3])
    for j in range(3):  # column j of A = R â_j
        dq += ca[:, :, :, j] @ rotate_jacobian(qr, ahat[:, :, j])
    dc[:, :, o + 3 : o + 7] += dq
    # z: ∂x̄/∂z = R Y_x and ∂A_ij/∂z = Σ_m R_im Y_(mj): one product with the interface's modes Y (12, nz).
    w = np.concatenate([cx @ rot, (np.swapaxes(rot, 1, 2)[:, None] @ ca).reshape(batch, nc, 9)], axis=2)
    dc[:, :, o + 7 :] += (w.reshape(batch * nc, 12) @ itf.y).reshape(batch, nc, nz)
    return c, dc


def _eval_block(rs: ReducedSystem, b: int, segs: list, ul: NDArray, th: NDArray) -> tuple[NDArray, NDArray]:
    blk = rs.constraints[b]
    if isinstance(blk, CouplingConstraint):
        return _coupling_eval(rs, b, segs, ul)
    return blk.evaluate(ul, th)


def _local_t(segs: list, ul: NDArray[np.float64], nu: int, nv: int) -> NDArray[np.float64]:
    """``T`` (nu, nv) of the local vector: ``[[I, 0], [0, ½Q(q)]]`` per rigid segment, identity for z."""
    t = np.zeros((nu, nv))
    ou = ov = 0
    for kind, _ in segs:
        if kind == "rigid":
            t[ou : ou + 3, ov : ov + 3] = np.eye(3)
            t[ou + 3 : ou + 7, ov + 3 : ov + 6] = 0.5 * quat_rate_matrix(ul[ou + 3 : ou + 7])
            ou, ov = ou + 7, ov + 6
        else:
            k = nu - ou
            t[ou:, ov:] = np.eye(k)
            break
    return t


def _constraint_block_rows(
    rs: ReducedSystem,
    b: int,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    lam: NDArray[np.float64],
    theta: NDArray[np.float64],
    theta_dot: NDArray[np.float64],
    baumgarte: float,
    jacobian: bool,
    r: NDArray[np.float64],
    jac: NDArray[np.float64] | None,
    r_theta: NDArray[np.float64] | None,
    r_theta_dot: NDArray[np.float64],
) -> None:
    """Constraint block ``b``'s λ rows and reaction on its V entries into ``r`` and, with ``jacobian``, its Jacobian
    entries and motor sensitivities (in place); ``theta``, ``theta_dot``: the motor angles the rows see."""
    blk = rs.constraints[b]
    layout = rs.servo
    iv, il = rs.n_u, rs.n_u + rs.n_v
    segs, ui, vi = _block_layout(rs, b)
    l0, l1 = rs.lambda_offsets[b], rs.lambda_offsets[b + 1]
    ul, vl, lb = u[ui], v[vi], lam[l0:l1]
    tl = _local_t(segs, ul, len(ui), len(vi))
    ydot = tl @ vl
    th = theta[blk.motor] if blk.motor >= 0 else 0.0
    thd = theta_dot[blk.motor] if blk.motor >= 0 else 0.0
    n = len(ui)
    has_motor = blk.motor >= 0
    nbatch = (n + 1 + has_motor) if jacobian else (1 + has_motor)
    ub = np.tile(ul.astype(complex), (nbatch, 1))
    thb = np.full(nbatch, th, dtype=complex)
    if jacobian:
        ub[1 : 1 + n] += 1j * _H * np.eye(n)
    if has_motor:
        thb[-1] += 1j * _H
    cc, cuc = _eval_block(rs, b, segs, ub, thb)
    c, cu = cc[0].real, cuc[0].real
    c_theta = cc[-1].imag / _H if has_motor else np.zeros(len(c))
    cv = cu @ tl
    r[il + l0 : il + l1] = cu @ ydot + baumgarte * c + c_theta * thd
    g = cu.T @ lb
    r[iv + vi] -= tl.T @ g
    servo = layout.motor_servo[blk.motor] if has_motor else -1
    if servo >= 0:
        # The motor row's reaction on the shaft: R_ω −= C_θᵀλ.
        r[iv + layout.v_omega[servo]] -= c_theta @ lb
    elif has_motor:
        r_theta_dot[il + l0 : il + l1, blk.motor] = c_theta
    if jac is None:
        return
    if has_motor:
        # ∂/∂θ of the λ rows (∂C_y/∂θ ẏ + a C_θ + C_θθ θ̇) and of the V rows (−Tᵀ ∂C_yᵀ/∂θ λ), complex steps.
        d_cy = cuc[-1].imag / _H
        thc = np.array([complex(th, _H)])
        c_thth = theta_derivative(blk, ul.astype(complex)[None], thc).imag[0] / _H
        col_l = d_cy @ ydot + baumgarte * c_theta + c_thth * thd
        col_v = -tl.T @ (d_cy.T @ lb)
        if servo >= 0:
            ct, cw = int(layout.u_theta[servo]), iv + int(layout.v_omega[servo])
            jac[il + l0 : il + l1, ct] += col_l
            jac[iv + vi, ct] += col_v
            jac[il + l0 : il + l1, cw] += c_theta
            jac[cw, il + l0 : il + l1] -= c_theta
            jac[cw, ui] -= d_cy.T @ lb
            jac[cw, ct] -= c_thth @ lb
        else:
            r_theta[il + l0 : il + l1, blk.motor] = col_l
            r_theta[iv + vi, blk.motor] = col_v
    dcu = cuc[1 : 1 + n].imag / _H  # (n_j, m, n): ∂C_ul/∂ul_j
    # ∂(C_V V + a C + C_θ θ̇)/∂ul
    a3 = np.einsum("jmk,k->mj", dcu, ydot) + baumgarte * cu
    if has_motor:
        a3 += thd * (cuc[-1].imag / _H)
    # ∂(T_localᵀ C_ulᵀ λ)/∂ul
    hess = tl.T @ np.einsum("jmk,m->kj", dcu, lb)
    ou = ov = 0
    for kind, _ in segs:
        if kind != "rigid":
            break
        wq = vl[ov + 3 : ov + 6]
        a3[:, ou + 3 : ou + 7] += cu[:, ou + 3 : ou + 7] @ (0.5 * omega_matrix(wq))
        gamma = np.einsum("kij,i->jk", QUATERNION_BASIS_Q, g[ou + 3 : ou + 7])
        hess[ov + 3 : ov + 6, ou + 3 : ou + 7] += 0.5 * gamma
        ou, ov = ou + 7, ov + 6
    jac[np.ix_(il + np.arange(l0, l1), ui)] += a3
    jac[np.ix_(il + np.arange(l0, l1), iv + vi)] += cv
    jac[np.ix_(iv + vi, ui)] -= hess
    jac[np.ix_(iv + vi, il + np.arange(l0, l1))] -= cv.T


def _servo_coordinate_rows(
    rs: ReducedSystem,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    v_bar: NDArray[np.float64],
    h: float,
    goal: NDArray[np.float64],
    goal_dot: NDArray[np.float64],
    r: NDArray[np.float64],
    jac: NDArray[np.float64] | None,
    mass: NDArray[np.float64] | None,
    r_theta: NDArray[np.float64] | None,
    r_theta_dot: NDArray[np.float64],
) -> None:
    """The servo coordinates' kinematic rows (``U̇ = V`` on the tail) and the servos' V rows (the reaction ``C_θᵀλ``
    comes with the blocks) into ``r`` and, with ``jac``, their Jacobian, mass and goal-sensitivity entries."""
    layout = rs.servo
    nu, nv = rs.n_u, rs.n_v
    iv = nu
    # Servo coordinates: U̇ = V on the tail, the servo's V rows (the reaction C_θᵀλ comes with the blocks).
    ut, vt = np.arange(nu - layout.size, nu), np.arange(nv - layout.size, nv)
    r[ut] -= h * v[vt]
    rows = servo_rows(layout, nu, u, v, v_bar, h, goal, goal_dot)
    r[rows.rows] += rows.values
    if jac is not None:
        jac[ut, ut] = 1.0
        jac[ut, iv + vt] = -h
        np.add.at(jac, (rows.jac_rows, rows.jac_cols), rows.jac_values)
        mass[rows.mass_index, rows.mass_index] += rows.mass_values
        np.add.at(r_theta, (rows.goal_rows, rows.goal_motors), rows.goal_values)
        np.add.at(r_theta_dot, (rows.goal_rows, rows.goal_motors), rows.goal_dot_values)


def _deformable_rows(
    rs: ReducedSystem,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    inputs: StepInputs,
    r: NDArray[np.float64],
    jac: NDArray[np.float64] | None,
    mass: NDArray[np.float64] | None,
) -> None:
    """Every deformable body's kinematic rows, relative inertial forces, cubature forces and damping into ``r`` and,
    with ``jac``, their Jacobian entries and generalized mass (in place).

    Raises:
        SimulationDiverged: an element of a cubature inverted.
    """
    v_bar, h = inputs.v_bar, inputs.h
    iv = rs.n_u
    min_det = np.inf
    for d, rb in enumerate(rs.bodies):
        zu, zv = rs.z_slice_u(d), rs.z_slice_v(d)
        z, zd = u[zu], v[zv]
        r[zu] -= h * zd
        ref = rb.reference
        vr = slice(6 * ref, 6 * ref + 3)
        wr = slice(6 * ref + 3, 6 * ref + 6)
        # Mass-proportional damping α M ẋ on the nodes' absolute velocities ẋ = J [v, ω, ż] (as the absolute engine)
        # is α Jᵀ M J [v, ω, ż]: the inertial force at the accelerations shifted by α [v, ω, ż].
        a = rb.alpha
        f, f_q, f_z, f_acc, f_w, f_zd = body_forces(
            u[7 * ref + 3 : 7 * ref + 7], z, zd, v[wr],
            (v[vr] - v_bar[vr]) / h + a * v[vr], (v[wr] - v_bar[wr]) / h + a * v[wr], (zd - v_bar[zv]) / h + a * zd,
            rs.gravity, rb.tensors,
        )
        f_el, k_el, md = rb.cubature.evaluate(z)
        min_det = min(min_det, md)
        # Stiffness-proportional damping on ż with the current reduced tangent: β K(z) ż vanishes for rigid rotation
        # rates of the current shape (the rest stiffness K₀ does not, docs/reduced.md §3b).
        damp = rb.beta * k_el
        rows = np.concatenate([iv + 6 * ref + np.arange(6), iv + np.arange(zv.start, zv.stop)])
        r[rows] += f
        r[iv + zv.start : iv + zv.stop] += f_el + damp @ zd
        if jac is not None:
            jac[zu, zu] = np.eye(rb.size)
            jac[zu, iv + zv.start : iv + zv.stop] = -h * np.eye(rb.size)
            vcols = rows  # same V indices as the rows (v_ref, ω_ref, ż)
            jac[np.ix_(rows, np.arange(7 * ref + 3, 7 * ref + 7))] += f_q
            jac[np.ix_(rows, np.arange(zu.start, zu.stop))] += f_z
            jac[np.ix_(rows, vcols)] += f_acc * (1.0 / h + a)
            mass[np.ix_(vcols - iv, vcols - iv)] += f_acc
            jac[np.ix_(rows, iv + 6 * ref + 3 + np.arange(3))] += f_w
            jac[np.ix_(rows, iv + np.arange(zv.start, zv.stop))] += f_zd
            jac[iv + zv.start : iv + zv.stop, zu] += k_el
            if rb.beta != 0.0 and np.any(zd):  # dK(z)[ż] is linear in ż: zero at rest (every static solve)
                jac[iv + zv.start : iv + zv.stop, zu] += rb.beta * rb.cubature.tangent_derivative(z, zd)
            jac[iv + zv.start : iv + zv.stop, iv + zv.start : iv + zv.stop] += damp
    if not min_det > 0.0:
        raise SimulationDiverged(0, 0.0, [], reason=f"inverted element in the cubature (min det F = {min_det:.3e})")


def _rigid_rows(
    rs: ReducedSystem,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    inputs: StepInputs,
    r: NDArray[np.float64],
    jac: NDArray[np.float64] | None,
    mass: NDArray[np.float64] | None,
) -> None:
    """Every rigid body's kinematic rows (``− h T(q) V``; ``U − Ū`` is set before) and Newton–Euler rows into ``r``
    and, with ``jac``, their Jacobian entries and generalized mass (in place)."""
    v_bar, h = inputs.v_bar, inputs.h
    iv = rs.n_u
    for i, body in enumerate(rs.rigid):
        q, w = u[7 * i + 3 : 7 * i + 7], v[6 * i + 3 : 6 * i + 6]
        qr = 0.5 * quat_rate_matrix(q)
        r[7 * i : 7 * i + 3] -= h * v[6 * i : 6 * i + 3]
        r[7 * i + 3 : 7 * i + 7] -= h * (qr @ w)
        iw = body.inertia @ w
        rv = iv + 6 * i
        r[rv : rv + 3] += body.mass * ((v[6 * i : 6 * i + 3] - v_bar[6 * i : 6 * i + 3]) / h - rs.gravity)
        r[rv + 3 : rv + 6] += body.inertia @ (w - v_bar[6 * i + 3 : 6 * i + 6]) / h + np.cross(w, iw)
        if jac is not None:
            jac[7 * i : 7 * i + 3, 7 * i : 7 * i + 3] = np.eye(3)
            jac[7 * i + 3 : 7 * i + 7, 7 * i + 3 : 7 * i + 7] = np.eye(4) - 0.5 * h * omega_matrix(w)
            jac[7 * i : 7 * i + 3, iv + 6 * i : iv + 6 * i + 3] = -h * np.eye(3)
            jac[7 * i + 3 : 7 * i + 7, iv + 6 * i + 3 : iv + 6 * i + 6] = -h * qr
            jac[rv : rv + 3, iv + 6 * i : iv + 6 * i + 3] += body.mass / h * np.eye(3)
            mass[6 * i : 6 * i + 3, 6 * i : 6 * i + 3] += body.mass * np.eye(3)
            mass[6 * i + 3 : 6 * i + 6, 6 * i + 3 : 6 * i + 6] += body.inertia
            wx = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
            iwx = np.array([[0, -iw[2], iw[1]], [iw[2], 0, -iw[0]], [-iw[1], iw[0], 0]])
            jac[rv + 3 : rv + 6, iv + 6 * i + 3 : iv + 6 * i + 6] += body.inertia / h + wx @ body.inertia - iwx


def residual_and_jacobian(
    rs: ReducedSystem,
    s: NDArray[np.float64],
    inputs: StepInputs,
    jacobian: bool = True,
) -> ReducedLinearization:
    """The BDF residual of the reduced DAE at ``S = s`` and (optionally) its exact dense Jacobian.

    Args:
        rs: the reduced system.
        s: ``S_n`` (nS,).
        inputs: ``Ū``, ``V̄``, ``h``, the motor values and rates and the Baumgarte rate
            (:func:`retarget.sim.bdf.step_inputs`).
        jacobian: also form ``∂R/∂S``.
    """
    nu, nv, m = rs.n_u, rs.n_v, rs.n_lambda
    ns = nu + nv + m
    u, v, lam = s[:nu], s[nu : nu + nv], s[nu + nv :]
    r = np.zeros(ns)
    jac = np.zeros((ns, ns)) if jacobian else None
    r_theta_dot = np.zeros((ns, len(rs.motors)))
    r_theta = np.zeros((ns, len(rs.motors))) if jacobian else None
    mass = np.zeros((nv, nv)) if jacobian else None
    layout = rs.servo
    goal = np.atleast_1d(np.asarray(inputs.theta, dtype=float))
    goal_dot = np.atleast_1d(np.asarray(inputs.theta_dot, dtype=float))
    theta, theta_dot = layout.motor_state(u, v, goal, goal_dot)
    # Kinematics R_U = U − Ū − h T V.
    r[:nu] = u - inputs.u_bar
    _rigid_rows(rs, u, v, inputs, r, jac, mass)
    _deformable_rows(rs, u, v, inputs, r, jac, mass)
    if layout.size:
        _servo_coordinate_rows(rs, u, v, inputs.v_bar, inputs.h, goal, goal_dot, r, jac, mass, r_theta, r_theta_dot)
    # Constraints.
    for b in range(len(rs.constraints)):
        _constraint_block_rows(rs, b, u, v, lam, theta, theta_dot, inputs.baumgarte, jacobian, r, jac, r_theta,
                               r_theta_dot)
    return ReducedLinearization(r, jac, r_theta_dot, residual_norms(r, nu, nv), mass, r_theta)


def residual_norms(r: NDArray[np.float64], nu: int, nv: int) -> dict[str, float]:
    """Max-norms of the kinematic, dynamic and constraint rows of a residual (Newton failure reports)."""
    return {
        "kinematic": float(np.max(np.abs(r[:nu]), initial=0.0)),
        "dynamic": float(np.max(np.abs(r[nu : nu + nv]), initial=0.0)),
        "constraint": float(np.max(np.abs(r[nu + nv :]), initial=0.0)),
    }


def history_jacobian(rs: ReducedSystem, lin: ReducedLinearization, h: float, coefficient: float) -> NDArray[np.float64]:
    """``∂R/∂S_{n−k}`` (nS, nS) of a history state entering Ū, V̄ with weight ``coefficient`` (BDF2: 4/3, −1/3).

    Args:
        rs: the system. lin: the linearization at ``S_n`` (with its ``mass``). h: ``γ Δt`` [s].
        coefficient: the state's weight in Ū and V̄.
    """
    assert lin.mass is not None
    nu, nv = rs.n_u, rs.n_v
    ns = nu + nv + rs.n_lambda
    out = np.zeros((ns, ns))
    out[:nu, :nu] = -coefficient * np.eye(nu)
    out[nu : nu + nv, nu : nu + nv] = -coefficient / h * lin.mass
    return out


def _newton(
    rs: ReducedSystem,
    guess: NDArray[np.float64],
    fn: Callable[[NDArray[np.float64], bool], ReducedLinearization],
    dt: float,
    tol: float,
    max_iter: int,
    step_index: int,
    t: float,
    cache: dict,
    estimate: bool = False,
) -> tuple[NDArray[np.float64], int]:
    s = guess.copy()
    norms: list[dict[str, float]] = []
    nu, nv = rs.n_u, rs.n_v
    previous = np.inf
    fresh = False
    for it in range(max_iter):
        need = cache.get("lu") is None
        try:
            lin = fn(s, need)
        except SimulationDiverged as exc:
            raise SimulationDiverged(step_index, t, norms, reason=str(exc)) from exc
        norms.append(lin.norms)
        if not np.all(np.isfinite(lin.residual)):
            raise SimulationDiverged(step_index, t, norms, reason="non-finite residual")
        if need:
            cache["lu"] = sla.lu_factor(lin.jacobian, check_finite=False)
            cache["factorizations"] = cache.get("factorizations", 0) + 1
            cache["life"] = np.array([REFACTOR_COST, 0.0])
            fresh = True
        delta = -sla.lu_solve(cache["lu"], lin.residual, check_finite=False)
        if not np.all(np.isfinite(delta)):
            raise SimulationDiverged(step_index, t, norms, reason="singular Newton system")
        s += delta
        size = max(float(np.max(np.abs(delta[:nu]))), dt * float(np.max(np.abs(delta[nu : nu + nv]))))
        if converged(size, previous, tol, estimate):
            if charge(cache["life"], it + 1.0):
                cache["lu"] = None
            return s, it + 1
        if not fresh and refactor(size, previous, tol):
            cache["lu"] = None
        previous = size
        fresh = False
    raise NewtonFailed(step_index, t, norms)


def step(
    rs: ReducedSystem,
    prev: ReducedState,
    prev2: ReducedState | None,
    dt: float,
    motors: object,
    cache: dict,
    step_index: int = 1,
    tol: float = 1e-10,
    max_iter: int = 25,
    prev3: ReducedState | None = None,
    estimate: bool = False,
    prev4: ReducedState | None = None,
) -> tuple[ReducedState, int]:
    """One BDF step (BDF1 without ``prev2``), Baumgarte ``a = 1/h``; chord Newton with the cached LU.

    The Newton start extrapolates V and λ (cubically with ``prev3`` and ``prev4``, quadratically with ``prev3``,
    linearly without) and takes U from the kinematic rows, as the compiled engine's ``_predict``; the stopping
    test is ``compiled.converged``: the update size alone by default (``ReferenceReducedEngine``'s default:
    finite-difference checks of the adjoint resolve the difference), with the remaining-error estimate when
    ``estimate`` (as ``simulate_compiled``'s default).
    Returns the new state and the Newton iteration count.
    """
    t = prev.t + dt
    inputs = step_inputs(prev, prev2, dt, motors.value(t), motors.derivative(t))  # type: ignore[attr-defined]
    h = inputs.h
    if cache.get("h") != h:
        cache["lu"], cache["h"] = None, h
    nb = rs.n_rigid
    rate = np.zeros(rs.n_u)
    if prev2 is None:
        # First step: explicit Euler on U, V and λ held.
        u0, v0, lam0, base, hh = prev.u, prev.v, prev.lam, prev.u, dt
    else:
        # V, λ extrapolated; U from the kinematic rows at that V (T at the extrapolated quaternion).
        if prev3 is None:
            ext = 2 * prev.s - prev2.s
        elif prev4 is None:
            ext = 3 * prev.s - 3 * prev2.s + prev3.s
        else:
            ext = 4 * prev.s - 6 * prev2.s + 4 * prev3.s - prev4.s
        nu_, nv_ = rs.n_u, rs.n_v
        u0, v0, lam0, base, hh = ext[:nu_], ext[nu_ : nu_ + nv_], ext[nu_ + nv_ :], inputs.u_bar, h
    for i in range(nb):
        rate[7 * i : 7 * i + 3] = v0[6 * i : 6 * i + 3]
        rate[7 * i + 3 : 7 * i + 7] = 0.5 * quat_rate_matrix(u0[7 * i + 3 : 7 * i + 7]) @ v0[6 * i + 3 : 6 * i + 6]
    rate[7 * nb :] = v0[6 * nb :]
    guess = np.concatenate([base + hh * rate, v0, lam0])

    def fn(s: NDArray[np.float64], jacobian: bool) -> ReducedLinearization:
        return residual_and_jacobian(rs, s, inputs, jacobian)

    s, iters = _newton(rs, guess, fn, dt, tol, max_iter, step_index, t, cache, estimate)
    nu, nv = rs.n_u, rs.n_v
    return ReducedState(t, s[:nu].copy(), s[nu : nu + nv].copy(), s[nu + nv :].copy()), iters


def linearize(
    rs: ReducedSystem, new: ReducedState, prev: ReducedState, prev2: ReducedState | None, dt: float, motors: object
) -> ReducedLinearization:
    """The exact residual Jacobian ``∂R/∂S_n`` of the step that produced ``new`` (for the discrete adjoint)."""
    theta, theta_dot = motors.value(new.t), motors.derivative(new.t)  # type: ignore[attr-defined]
    return residual_and_jacobian(rs, new.s, step_inputs(prev, prev2, dt, theta, theta_dot))


#: ``linearize(S, inputs) -> (R, ∂R/∂S)`` for the static solve's inputs (:meth:`StepInputs.static`);
#: :func:`residual_and_jacobian` by default, the compiled kernel in the compiled engine.
StaticLinearization = Callable[[NDArray[np.float64], StepInputs], tuple[NDArray[np.float64], NDArray[np.float64]]]


def solve_static(
    rs: ReducedSystem, theta: NDArray[np.float64], u0: NDArray[np.float64] | None = None, tol: float = 1e-11,
    max_iter: int = 40, linearize: StaticLinearization | None = None,
) -> ReducedState:
    """Gravity equilibrium at motor values ``theta`` (V = 0): Newton in tangent coordinates, quaternions renormalized.

    As the full-space solve (:func:`retarget.sim.statics.solve_static`): when Newton from the reference fails and
    no ``u0`` is given, the motors are moved to ``theta`` by continuation in increments of at most 0.1 rad, each
    solve starting from the previous equilibrium (the boxer's first pose is beyond plain Newton's reach).

    ``linearize`` replaces the reference residual (same values to round-off; the compiled engine passes its
    kernel: a warm-started drummer solve 89 → 17 ms).

    Raises:
        NewtonFailed: no convergence.
    """
    th = np.atleast_1d(np.asarray(theta, dtype=float))
    try:
        return _newton_static(rs, th, u0, tol, max_iter, linearize)
    except NewtonFailed:
        if u0 is not None or not np.any(th):
            raise
    n = max(2, int(np.ceil(np.max(np.abs(th)) / CONTINUATION_STEP)))
    state = _newton_static(rs, 0.0 * th, None, tol, max_iter, linearize)
    for k in range(1, n + 1):
        state = _newton_static(rs, th * (k / n), state.u, tol, max_iter, linearize)
    return state


def _reference_linearization(rs: ReducedSystem) -> StaticLinearization:
    def linearize(s: NDArray[np.float64], inputs: StepInputs) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        lin = residual_and_jacobian(rs, s, inputs)
        assert lin.jacobian is not None
        return lin.residual, lin.jacobian

    return linearize


def _newton_static(rs: ReducedSystem, th: NDArray[np.float64], u0: NDArray[np.float64] | None, tol: float,
                   max_iter: int, linearize: StaticLinearization | None = None) -> ReducedState:
    if linearize is None:
        linearize = _reference_linearization(rs)
    nu, nv, m = rs.n_u, rs.n_v, rs.n_lambda
    u = rs.reference_u() if u0 is None else np.asarray(u0, dtype=float).copy()
    if u0 is None and rs.servo.n_servos:
        u[rs.servo.u_theta] = th[rs.servo.motor_servo >= 0]  # shafts start at their goals
    lam = np.zeros(m)
    zv = np.zeros(nv)
    nb = rs.n_rigid
    norms: list[dict[str, float]] = []
    for _ in range(max_iter):
        s = np.concatenate([u, zv, lam])
        res, j = linearize(s, StepInputs.static(u, nv, th))
        norms.append(residual_norms(res, nu, nv))
        tmap = np.zeros((nu, nv))
        for i in range(nb):
            tmap[7 * i : 7 * i + 3, 6 * i : 6 * i + 3] = np.eye(3)
            tmap[7 * i + 3 : 7 * i + 7, 6 * i + 3 : 6 * i + 6] = 0.5 * quat_rate_matrix(u[7 * i + 3 : 7 * i + 7])
        tmap[7 * nb :, 6 * nb :] = np.eye(nu - 7 * nb)
        # V = 0 and V̄ = 0: the V rows are the static balance; the λ rows are C (a = 1).
        mat = np.block([[j[nu : nu + nv, :nu] @ tmap, j[nu : nu + nv, nu + nv :]], [j[nu + nv :, :nu] @ tmap, np.zeros((m, m))]])
        rhs = -res[nu:]
        sol = np.linalg.solve(mat, rhs)
        dw = sol[:nv]
        u = u + tmap @ dw
        for i in range(nb):
            u[7 * i + 3 : 7 * i + 7] /= np.linalg.norm(u[7 * i + 3 : 7 * i + 7])
        lam = lam + sol[nv:]
        if np.max(np.abs(dw)) <= tol:
            return ReducedState(0.0, u, zv.copy(), lam)
    raise NewtonFailed(0, 0.0, norms, reason="reduced quasi-static solve")
