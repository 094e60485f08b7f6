"""The BDF residual ``R(S_n; Ū, V̄, h, θ, θ̇, a)`` of the index-2 DAE and its exact Jacobian.

With ``h = γ Δt`` (BDF1: γ = 1, ``Ū = U_{n−1}``; BDF2: γ = 2/3, ``Ū = 4/3 U_{n−1} − 1/3 U_{n−2}``, same for V;
everything but ``S_n`` is one :class:`retarget.sim.bdf.StepInputs`)::

    R_U = U − Ū − h T(U) V                                  [m], [-] (quaternions)
    R_V = M (V − V̄) / h − F(U, V) − C_Vᵀ λ                  [N], [N m]
    R_λ = C_θ θ̇ + C_V V + a C                               [m/s] (or [1/s] for angular rows)

``C_V = C_U T`` is the velocity Jacobian, ``λ`` are the constraint forces [N] / torques [N m] (force-scaled: the
momentum form of DESIGN.md divided by ``h``), ``a`` the Baumgarte rate [1/s]. ``F`` holds gravity, ``−f_int(u)``,
Rayleigh damping ``−(αM + βK(u)) u̇`` and, for rigid bodies, ``−ω × I ω``. The Jacobian is exact: the curvature of
the constraints (``∂(C_Vᵀλ)/∂U``, ``∂(C_V V)/∂U``) comes from complex steps of the analytic ``∂C/∂y`` (exact to
rounding, no subtractive cancellation); the only approximate term is the derivative of the stiffness-proportional
damping ``β ∂(K(u) u̇)/∂u``, a central difference of ``K`` along ``u̇`` (relative error ~1e-8), used only when β > 0.

The residual depends on earlier steps only through ``Ū, V̄`` (linear: ``∂R/∂S_{n−k}`` is ``−a_k`` times the
identity on U rows and ``−a_k M/h`` on V rows) and on the controls only through ``θ, θ̇``: both are exposed for the
discrete adjoint (:func:`history_jacobian`, :class:`Linearization` ``r_theta``, ``r_theta_dot``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from retarget.sim.assembly import JointPack, joint_pack, joint_terms
from retarget.sim.bdf import StepInputs
from retarget.sim.constraints import JointConstraint, RigidSlot, motor_theta_terms, theta_derivative
from retarget.sim.rotation import QUATERNION_BASIS_Q, omega_matrix, quat_rate_matrix
from retarget.sim.servo import servo_mass, servo_rows
from retarget.sim.system import System

__all__ = [
    "COMPLEX_STEP",
    "block_second_order",
    "ConstraintTerms",
    "Linearization",
    "constraint_terms",
    "history_jacobian",
    "motor_reactions",
    "residual_and_jacobian",
]

#: Imaginary step for complex-step derivatives (any tiny value works: no cancellation).
COMPLEX_STEP: float = 1e-30


class _Coo:
    """Triplet accumulator for a sparse matrix."""

    def __init__(self, shape: tuple[int, int]) -> None:
        self.shape = shape
        self.rows: list[NDArray] = []
        self.cols: list[NDArray] = []
        self.vals: list[NDArray] = []

    def add(self, rows: NDArray, cols: NDArray, block: NDArray) -> None:
        self.rows.append(np.repeat(rows, len(cols)))
        self.cols.append(np.tile(cols, len(rows)))
        self.vals.append(np.asarray(block, dtype=float).ravel())

    def add_triplets(self, rows: NDArray, cols: NDArray, vals: NDArray) -> None:
        keep = (rows >= 0) & (cols >= 0)
        self.rows.append(rows[keep])
        self.cols.append(cols[keep])
        self.vals.append(np.asarray(vals, dtype=float)[keep])

    def csr(self) -> sp.csr_matrix:
        if not self.rows:
            return sp.csr_matrix(self.shape)
        return sp.csr_matrix(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))), shape=self.shape
        )


@dataclass(frozen=True, eq=False)
class ConstraintTerms:
    """All constraint quantities at one ``(U, V, λ, θ, θ̇)`` (m = number of scalar constraints).

    Attributes:
        c: ``C`` (m,).
        c_u: ``∂C/∂U`` csr (m, nU).
        c_v: ``C_V = C_U T`` csr (m, nV).
        c_theta: ``∂C/∂θ`` (m, n_motors).
        r3: ``C_θ θ̇ + C_V V + a C`` (m,).
        r3_u: ``∂r3/∂U`` csr (m, nU).
        r3_theta: ``∂r3/∂θ`` (m, n_motors).
        force: generalized constraint force ``C_Vᵀ λ`` (nV,).
        force_u: ``∂(C_Vᵀ λ)/∂U`` csr (nV, nU).
        force_theta: ``∂(C_Vᵀ λ)/∂θ`` (nV, n_motors).
    """

    c: NDArray[np.float64]
    c_u: sp.csr_matrix
    c_v: sp.csr_matrix
    c_theta: NDArray[np.float64]
    r3: NDArray[np.float64]
    r3_u: sp.csr_matrix
    r3_theta: NDArray[np.float64]
    force: NDArray[np.float64]
    force_u: sp.csr_matrix
    force_theta: NDArray[np.float64]


def _slot_data(system: System, slot: object, ui: NDArray, vi: NDArray, u: NDArray, v: NDArray) -> tuple:
    """(y_s, ẏ_s, T_s (ny_s, nv_s), Y_s (ny_s, nu_s) or None for identity)."""
    if isinstance(slot, RigidSlot):
        ys = u[ui]
        vs = v[vi]
        qr = 0.5 * quat_rate_matrix(ys[3:7])
        t = np.zeros((7, 6))
        t[:3, :3] = np.eye(3)
        t[3:, 3:] = qr
        return ys, np.concatenate([vs[:3], qr @ vs[3:]]), t, None
    body = system.deformable[slot.body]  # type: ignore[attr-defined]
    x = body.rest_positions[slot.nodes].ravel() + u[ui]  # type: ignore[attr-defined]
    w = slot.map  # type: ignore[attr-defined]
    return w @ x, w @ v[vi], w, w


def block_second_order(
    blk: object, y: NDArray, ydot: NDArray, th: float, lam: NDArray, baumgarte: float
) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray | None]:
    """A constraint block's value and first and second derivatives from one batched complex-step evaluation.

    The batch holds the value, the direction ``ẏ``, every unit direction of ``y`` and (motor blocks) ``θ``.

    Args:
        blk: the constraint block (``evaluate(y, θ)`` accepting complex batches).
        y: slot data (ny,). ydot: its rate (ny,). th: motor angle [rad] (0 without a motor).
        lam: the block's multipliers (rows,). baumgarte: stabilization rate [1/s].

    Returns:
        ``c`` (rows,), ``C_y`` (rows, ny), ``∂(C_y ẏ + a C)/∂y`` without the motor-rate term (rows, ny),
        ``Σ_r λ_r ∂²C_r/∂y²`` (ny, ny), and ``∂C_y/∂θ`` (rows, ny) or None without a motor.
    """
    h = COMPLEX_STEP
    ny = len(y)
    motor = blk.motor >= 0  # type: ignore[attr-defined]
    nbatch = ny + 2 + motor
    yb = np.tile(y.astype(complex), (nbatch, 1))
    yb[1] += 1j * h * ydot
    yb[2 : 2 + ny] += 1j * h * np.eye(ny)
    thb = np.full(nbatch, th, dtype=complex)
    if motor:
        thb[-1] += 1j * h
    cc, cyc = blk.evaluate(yb, thb)  # type: ignore[attr-defined]
    cy = cyc[0].real
    a3 = cyc[1].imag / h + baumgarte * cy
    hess = np.einsum("jmk,m->kj", cyc[2 : 2 + ny].imag, lam) / h
    return cc[0].real, cy, a3, hess, (cyc[-1].imag / h if motor else None)


def constraint_terms(
    system: System,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    lam: NDArray[np.float64],
    theta: NDArray[np.float64],
    theta_dot: NDArray[np.float64],
    baumgarte: float,
    second_order: bool = True,
) -> ConstraintTerms:
    """Evaluate every constraint block and assemble the global sparse terms (see :class:`ConstraintTerms`).

    Args:
        system: the system.
        u, v, lam: ``U`` (nU,), ``V`` (nV,), ``λ`` (m,).
        theta, theta_dot: motor values (n_motors,) [rad] or [m] and their rates.
        baumgarte: ``a`` [1/s].
        second_order: compute the Jacobians; False gives only ``c``, ``c_theta``, ``r3`` and ``force`` (the
            matrix fields are None): what a residual needs.
    """
    nu, nv, m = system.n_u, system.n_v, system.n_lambda
    nm = len(system.motors)
    h = COMPLEX_STEP
    c = np.zeros(m)
    r3 = np.zeros(m)
    force = np.zeros(nv)
    c_theta = np.zeros((m, nm))
    r3_theta = np.zeros((m, nm))
    force_theta = np.zeros((nv, nm))
    cu, cv, r3u, fu = _Coo((m, nu)), _Coo((m, nv)), _Coo((m, nu)), _Coo((nv, nu))
    pack = joint_pack(system)
    if pack.n:
        _add_joint_terms(
            pack, u, v, lam, theta, theta_dot, baumgarte, second_order,
            c, r3, force, c_theta, r3_theta, force_theta, cu, cv, r3u, fu,
        )
    for blk, sus, svs, l0 in zip(system.constraints, system.slot_u, system.slot_v, system.lambda_offsets):
        if isinstance(blk, JointConstraint):
            continue
        rows = np.arange(l0, l0 + blk.size)
        data = [_slot_data(system, s, ui, vi, u, v) for s, ui, vi in zip(blk.slots, sus, svs)]
        y = np.concatenate([d[0] for d in data])
        ydot = np.concatenate([d[1] for d in data])
        th = theta[blk.motor] if blk.motor >= 0 else 0.0
        thd = theta_dot[blk.motor] if blk.motor >= 0 else 0.0
        lb = lam[rows]
        if second_order:
            cb, cy, a3, hess, d_theta_y = block_second_order(blk, y, ydot, th, lb, baumgarte)
            g = cy.T @ lb
        else:
            cb, cy = blk.evaluate(y, th)
        c[rows] = cb
        r3[rows] = cy @ ydot + baumgarte * cb
        cols = np.cumsum([0] + [s.size for s in blk.slots])
        d_theta = None
        if blk.motor >= 0:
            cth = theta_derivative(blk, y, th).real
            c_theta[rows, blk.motor] = cth
            r3[rows] += cth * thd
            if second_order:
                d_theta = d_theta_y
                cthth = theta_derivative(blk, y, th + 1j * h).imag / h
                r3_theta[rows, blk.motor] = cthth * thd + d_theta @ ydot + baumgarte * cth
                a3 = a3 + thd * d_theta
        for k, (s, ui, vi, (_, _, ts, ys)) in enumerate(zip(blk.slots, sus, svs, data)):
            sl = slice(cols[k], cols[k + 1])
            cyk = cy[:, sl]
            force[vi] += ts.T @ (cyk.T @ lb)
            if not second_order:
                continue
            cu.add(rows, ui, cyk if ys is None else cyk @ ys)
            cv.add(rows, vi, cyk @ ts)
            blk3 = a3[:, sl] if ys is None else a3[:, sl] @ ys
            if isinstance(s, RigidSlot):
                blk3 = blk3.copy()
                blk3[:, 3:7] += cyk[:, 3:7] @ (0.5 * omega_matrix(v[vi][3:]))
            r3u.add(rows, ui, blk3)
            if d_theta is not None:
                force_theta[vi, blk.motor] += ts.T @ (d_theta[:, sl].T @ lb)
            for k2, (ui2, (_, _, _, ys2)) in enumerate(zip(sus, data)):
                sl2 = slice(cols[k2], cols[k2 + 1])
                hb = ts.T @ hess[sl, sl2]
                if ys2 is not None:
                    hb = hb @ ys2
                if k2 == k and isinstance(s, RigidSlot):
                    # ∂(T_sᵀ g)/∂q at fixed g: the ω rows hold ½ Q(q)ᵀ g_q, linear in q.
                    hb = hb.copy()
                    gamma = np.einsum("kij,i->jk", QUATERNION_BASIS_Q, g[sl][3:7])
                    hb[3:6, 3:7] += 0.5 * gamma
                fu.add(vi, ui2, hb)
    if not second_order:
        return ConstraintTerms(c, None, None, c_theta, r3, None, r3_theta, force, None, force_theta)  # type: ignore[arg-type]
    return ConstraintTerms(c, cu.csr(), cv.csr(), c_theta, r3, r3u.csr(), r3_theta, force, fu.csr(), force_theta)


def _add_joint_terms(
    pack: JointPack,
    u: NDArray, v: NDArray, lam: NDArray, theta: NDArray, theta_dot: NDArray, baumgarte: float, second_order: bool,
    c: NDArray, r3: NDArray, force: NDArray, c_theta: NDArray, r3_theta: NDArray, force_theta: NDArray,
    cu: _Coo, cv: _Coo, r3u: _Coo, fu: _Coo,
) -> None:
    """Scatter the compiled joint-block terms (:func:`retarget.sim.assembly.joint_terms`) into the global ones."""
    jt = joint_terms(pack, u, v, lam, theta, theta_dot, baumgarte, second_order)
    valid = pack.rows >= 0
    c[pack.rows[valid]] = jt.c[valid]
    r3[pack.rows[valid]] = jt.r3[valid]
    vmask = pack.v_index >= 0
    np.add.at(force, pack.v_index[vmask], jt.force[vmask])
    motorized = pack.motors >= 0
    if np.any(motorized):
        mrows = pack.rows[motorized]
        mot = np.broadcast_to(pack.motors[motorized, None], mrows.shape)
        ok = mrows >= 0
        c_theta[mrows[ok], mot[ok]] = jt.c_theta[motorized][ok]
    if not second_order:
        return
    if np.any(motorized):
        r3_theta[mrows[ok], mot[ok]] = jt.r3_theta[motorized][ok]
        vi = pack.v_index[motorized]
        mv = np.broadcast_to(pack.motors[motorized, None, None], vi.shape)
        okv = vi >= 0
        np.add.at(force_theta, (vi[okv], mv[okv]), jt.force_theta[motorized][okv])
    rows4 = np.broadcast_to(pack.rows[:, :, None, None], jt.c_u.shape)
    ucols = np.broadcast_to(pack.u_index[:, None, :, :], jt.c_u.shape)
    cu.add_triplets(rows4.ravel(), ucols.ravel(), jt.c_u.ravel())
    r3u.add_triplets(rows4.ravel(), ucols.ravel(), jt.r3_u.ravel())
    rows_v = np.broadcast_to(pack.rows[:, :, None, None], jt.c_v.shape)
    vcols = np.broadcast_to(pack.v_index[:, None, :, :], jt.c_v.shape)
    cv.add_triplets(rows_v.ravel(), vcols.ravel(), jt.c_v.ravel())
    frows = np.broadcast_to(pack.v_index[:, :, :, None, None], jt.force_u.shape)
    fcols = np.broadcast_to(pack.u_index[:, None, None, :, :], jt.force_u.shape)
    fu.add_triplets(frows.ravel(), fcols.ravel(), jt.force_u.ravel())


@dataclass(frozen=True, eq=False)
class MotorReaction:
    """The reaction of a motor constraint block on its servo's shaft, ``f = C_θᵀ λ`` [N m], and its derivatives.

    Attributes:
        force: ``f``. lam_rows: the block's λ indices (rows,); c_theta: ``∂f/∂λ = C_θ`` on them.
        u_index, force_u: ``∂f/∂U`` on the block's U entries. force_theta: ``∂f/∂θ = λᵀ C_θθ``.
    """

    force: float
    lam_rows: NDArray[np.int64]
    c_theta: NDArray[np.float64]
    u_index: NDArray[np.int64]
    force_u: NDArray[np.float64]
    force_theta: float


def motor_reactions(system: System, u: NDArray[np.float64], lam: NDArray[np.float64], theta: NDArray[np.float64],
                    derivatives: bool = True) -> list[tuple[int, MotorReaction]]:
    """Per modelled servo (servo index, :class:`MotorReaction`) at shaft angles ``theta`` (n_motors,) [rad].

    ``C_θ`` and its derivatives in U (``λᵀ ∂C_θ/∂y``: the mixed second derivative, symmetric with the θ column of
    the V rows) and θ: only the block's motor row (its last) depends on θ, and its derivatives are analytic
    (:func:`~retarget.sim.constraints.motor_theta_terms`; equal to complex steps of ``C_y`` and ``C_θ`` to 1e-15,
    tests/sim/test_constraints.py).
    """
    layout = system.servo
    out = []
    for b, (blk, sus) in enumerate(zip(system.constraints, system.slot_u)):
        m = getattr(blk, "motor", -1)
        if m < 0 or layout.motor_servo[m] < 0:
            continue
        ui = np.concatenate(sus)
        l0, l1 = system.lambda_offsets[b], system.lambda_offsets[b + 1]
        lam_m = float(lam[l1 - 1])
        c_theta_m, c_theta_y, c_theta_theta = motor_theta_terms(blk, u[ui], float(theta[m]))
        cth = np.zeros(l1 - l0)
        cth[-1] = c_theta_m
        force_u = c_theta_y * lam_m if derivatives else np.zeros(len(ui))
        force_theta = c_theta_theta * lam_m if derivatives else 0.0
        out.append((int(layout.motor_servo[m]), MotorReaction(c_theta_m * lam_m, np.arange(l0, l1), cth, ui, force_u,
                                                               force_theta)))
    return out


@dataclass(frozen=True, eq=False)
class Linearization:
    """The residual and its Jacobian blocks at one Newton iterate.

    Attributes:
        r_u, r_v, r_lambda: residual parts (nU,), (nV,), (m,).
        j_uu, j_uv: csr blocks of the U rows (``∂R_U/∂U``, ``∂R_U/∂V``).
        j_vu, j_vv, j_vl: csr blocks of the V rows.
        j_lu, j_lv: csr blocks of the λ rows (``∂R_λ/∂λ = 0``).
        r_theta: ``∂R/∂θ`` (nS, n_motors).
        r_theta_dot: ``∂R/∂θ̇`` (nS, n_motors).
        terms: the constraint terms.
        fem_forces: per deformable body, ``f_int(u)`` (3N,) (diagnostics).
    """

    r_u: NDArray[np.float64]
    r_v: NDArray[np.float64]
    r_lambda: NDArray[np.float64]
    j_uu: sp.csr_matrix
    j_uv: sp.csr_matrix
    j_vu: sp.csr_matrix
    j_vv: sp.csr_matrix
    j_vl: sp.csr_matrix
    j_lu: sp.csr_matrix
    j_lv: sp.csr_matrix
    r_theta: NDArray[np.float64]
    r_theta_dot: NDArray[np.float64]
    terms: ConstraintTerms

    @property
    def residual(self) -> NDArray[np.float64]:
        """``R`` (nS,)."""
        return np.concatenate([self.r_u, self.r_v, self.r_lambda])

    def matrix(self) -> sp.csr_matrix:
        """The full Jacobian ``∂R/∂S_n`` csr (nS, nS)."""
        return sp.bmat(
            [[self.j_uu, self.j_uv, None], [self.j_vu, self.j_vv, self.j_vl], [self.j_lu, self.j_lv, None]],
            format="csr",
        )

    def residual_norms(self) -> dict[str, float]:
        """Max-norms of the three residual parts."""
        return {
            "kinematic": float(np.max(np.abs(self.r_u), initial=0.0)),
            "dynamic": float(np.max(np.abs(self.r_v), initial=0.0)),
            "constraint": float(np.max(np.abs(self.r_lambda), initial=0.0)),
        }


def _damping_stiffness_derivative(elastic: object, u: NDArray, v: NDArray) -> sp.csr_matrix:
    """``∂(K(u) v)/∂u = dK(u)[v]`` by a central difference of K along v."""
    vn = float(np.linalg.norm(v, np.inf))
    if vn == 0.0:
        return sp.csr_matrix((len(u), len(u)))
    eps = 1e-6 * max(float(np.linalg.norm(u, np.inf)), 1e-4) / vn
    kp = elastic.tangent_stiffness(u + eps * v)  # type: ignore[attr-defined]
    km = elastic.tangent_stiffness(u - eps * v)  # type: ignore[attr-defined]
    return ((kp - km) / (2 * eps)).tocsr()


def _deformable_rows(
    system: System,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    inputs: StepInputs,
    jacobian: bool,
    r_u: NDArray[np.float64],
    r_v: NDArray[np.float64],
    fem_vu: list[sp.csr_matrix],
    fem_vv: list[sp.csr_matrix],
) -> None:
    """Every deformable body's kinematic rows and FEM dynamics into ``r_u`` / ``r_v`` (in place) and, with
    ``jacobian``, its ``∂R_V/∂U`` and ``∂R_V/∂V`` blocks appended to ``fem_vu`` / ``fem_vv``."""
    v_bar, h = inputs.v_bar, inputs.h
    for d, body in enumerate(system.deformable):
        ou, ov = system.u_offsets[d], system.v_offsets[d]
        n = body.n_dofs
        ud, vd = u[ou : ou + n], v[ov : ov + n]
        r_u[ou : ou + n] -= h * vd
        if jacobian or body.beta != 0.0:
            f_int, k = body.elastic.internal_forces_and_stiffness(ud)
            kv = k @ vd
        else:
            f_int, k, kv = body.elastic.internal_forces(ud), None, 0.0
        mv = body.mass_matrix @ vd
        r_v[ov : ov + n] += (
            body.mass_matrix @ (vd - v_bar[ov : ov + n]) / h
            + f_int
            + body.alpha * mv
            + body.beta * kv
            - body.gravity_force
        )
        if not jacobian:
            continue
        jvu_d = k
        if body.beta != 0.0:
            jvu_d = k + body.beta * _damping_stiffness_derivative(body.elastic, ud, vd)
        fem_vu.append(jvu_d)
        fem_vv.append(body.mass_matrix * (1.0 / h + body.alpha) + body.beta * k)


def _rigid_rows(
    system: System,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    inputs: StepInputs,
    r_u: NDArray[np.float64],
    r_v: NDArray[np.float64],
    juu: _Coo,
    juv: _Coo,
    jvv: _Coo,
) -> None:
    """Every rigid body's kinematic rows and Newton–Euler rows into ``r_u`` / ``r_v`` and their Jacobian entries
    into ``juu``, ``juv``, ``jvv`` (in place)."""
    v_bar, h = inputs.v_bar, inputs.h
    g = system.gravity
    for i, body in enumerate(system.rigid):
        cs, qs = slice(7 * i, 7 * i + 3), slice(7 * i + 3, 7 * i + 7)
        vs, ws = slice(6 * i, 6 * i + 3), slice(6 * i + 3, 6 * i + 6)
        q, w = u[qs], v[ws]
        qr = 0.5 * quat_rate_matrix(q)
        r_u[cs] -= h * v[vs]
        r_u[qs] -= h * (qr @ w)
        iw = body.inertia @ w
        r_v[vs] += body.mass * (v[vs] - v_bar[vs]) / h - body.mass * g
        r_v[ws] += body.inertia @ (w - v_bar[ws]) / h + np.cross(w, iw)
        idx_c = np.arange(7 * i, 7 * i + 3)
        idx_q = np.arange(7 * i + 3, 7 * i + 7)
        juu.add(idx_c, idx_c, np.eye(3))
        juu.add(idx_q, idx_q, np.eye(4) - 0.5 * h * omega_matrix(w))
        juv.add(idx_c, np.arange(6 * i, 6 * i + 3), -h * np.eye(3))
        juv.add(idx_q, np.arange(6 * i + 3, 6 * i + 6), -h * qr)
        jvv.add(np.arange(6 * i, 6 * i + 3), np.arange(6 * i, 6 * i + 3), body.mass / h * np.eye(3))
        wx = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
        iwx = np.array([[0, -iw[2], iw[1]], [iw[2], 0, -iw[0]], [-iw[1], iw[0], 0]])
        jvv.add(np.arange(6 * i + 3, 6 * i + 6), np.arange(6 * i + 3, 6 * i + 6),
                body.inertia / h + wx @ body.inertia - iwx)


def residual_and_jacobian(
    system: System,
    s: NDArray[np.float64],
    inputs: StepInputs,
    jacobian: bool = True,
) -> Linearization:
    """The BDF residual at ``S = s`` and its exact Jacobian (module docstring).

    Args:
        system: the system.
        s: ``S_n`` (nS,).
        inputs: ``Ū``, ``V̄``, ``h``, the motor values and rates at ``t_n`` and the Baumgarte rate
            (:func:`retarget.sim.bdf.step_inputs`).
        jacobian: False skips the Jacobian (the matrix fields are then None): a residual-only evaluation for
            chord iterations.
    """
    v_bar, h = inputs.v_bar, inputs.h
    u, v, lam = system.split_s(s)
    nu, nv = system.n_u, system.n_v
    nb = len(system.rigid)
    layout = system.servo
    goal = np.atleast_1d(np.asarray(inputs.theta, dtype=float))
    goal_dot = np.atleast_1d(np.asarray(inputs.theta_dot, dtype=float))
    th_c, thd_c = layout.motor_state(u, v, goal, goal_dot)
    terms = constraint_terms(system, u, v, lam, th_c, thd_c, inputs.baumgarte, second_order=jacobian)
    r_u = u - inputs.u_bar
    r_v = -terms.force.copy()
    juu, juv, jvv = _Coo((nu, nu)), _Coo((nu, nv)), _Coo((nv, nv))
    fem_vu: list[sp.csr_matrix] = []
    fem_vv: list[sp.csr_matrix] = []
    _rigid_rows(system, u, v, inputs, r_u, r_v, juu, juv, jvv)
    _deformable_rows(system, u, v, inputs, jacobian, r_u, r_v, fem_vu, fem_vv)
    nm = len(system.motors)
    servo = None
    reaction = []
    if not layout.ideal:
        servo = servo_rows(layout, nu, u, v, v_bar, h, goal, goal_dot)
        r_u[nu - layout.size :] -= h * v[nv - layout.size :]
        r_v[servo.rows - nu] += servo.values
        reaction = motor_reactions(system, u, lam, th_c, jacobian)
        for k, rx in reaction:
            r_v[int(layout.v_omega[k])] -= rx.force
    if not jacobian:
        return Linearization(r_u, r_v, terms.r3, None, None, None, None, None, None, None, None, None, terms)
    eye_fem = sp.identity(nu - 7 * nb, format="csr")  # deformable and servo coordinates: U̇ = V
    j_uu = juu.csr() + sp.block_diag([sp.csr_matrix((7 * nb, 7 * nb)), eye_fem], format="csr")
    j_uv = juv.csr() + sp.block_diag([sp.csr_matrix((7 * nb, 6 * nb)), -h * eye_fem], format="csr")
    zeros_r = sp.csr_matrix((6 * nb, 7 * nb))
    tail = [sp.csr_matrix((layout.size, layout.size))] if layout.size else []
    j_vu = sp.block_diag([zeros_r, *fem_vu, *tail], format="csr") - terms.force_u
    j_vv = jvv.csr() + sp.block_diag([sp.csr_matrix((6 * nb, 6 * nb)), *fem_vv, *tail], format="csr")
    j_vl = -terms.c_v.T.tocsr()
    j_lu, j_lv = terms.r3_u, terms.c_v
    r_theta = np.concatenate([np.zeros((nu, nm)), -terms.force_theta, terms.r3_theta])
    r_theta_dot = np.concatenate([np.zeros((nu + nv, nm)), terms.c_theta])
    if servo is not None:
        # The shaft of a modelled servo is a coordinate: the constraint terms' θ and θ̇ columns move to its θ (U) and
        # ω (V) columns, the ω row takes the reaction C_θᵀλ, and the goal enters only through the servo rows.
        ns = nu + nv + system.n_lambda
        rr, cc, vv = [servo.jac_rows], [servo.jac_cols], [servo.jac_values]
        for m, k in enumerate(layout.motor_servo):
            if k < 0:
                continue
            it, io = int(layout.u_theta[k]), int(layout.v_omega[k])
            for col, rth in ((it, r_theta[:, m]), (nu + io, r_theta_dot[:, m])):
                nz = np.flatnonzero(rth)
                rr.append(nz)
                cc.append(np.full(len(nz), col))
                vv.append(rth[nz])
            r_theta[:, m] = 0.0
            r_theta_dot[:, m] = 0.0
        for k, rx in reaction:
            row = nu + int(layout.v_omega[k])
            rr += [np.full(len(rx.lam_rows), row), np.full(len(rx.u_index), row), np.array([row])]
            cc += [nu + nv + rx.lam_rows, rx.u_index, np.array([int(layout.u_theta[k])])]
            vv += [-rx.c_theta, -rx.force_u, np.array([-rx.force_theta])]
        extra = sp.csr_matrix((np.concatenate(vv), (np.concatenate(rr), np.concatenate(cc))), shape=(ns, ns))
        j_uu = j_uu + extra[:nu, :nu]
        j_uv = j_uv + extra[:nu, nu : nu + nv]
        j_vu = j_vu + extra[nu : nu + nv, :nu]
        j_vv = j_vv + extra[nu : nu + nv, nu : nu + nv]
        j_vl = j_vl + extra[nu : nu + nv, nu + nv :]
        j_lu = j_lu + extra[nu + nv :, :nu]
        j_lv = j_lv + extra[nu + nv :, nu : nu + nv]
        np.add.at(r_theta, (servo.goal_rows, servo.goal_motors), servo.goal_values)
        np.add.at(r_theta_dot, (servo.goal_rows, servo.goal_motors), servo.goal_dot_values)
    return Linearization(
        r_u, r_v, terms.r3, j_uu.tocsr(), j_uv.tocsr(), j_vu.tocsr(), j_vv.tocsr(), j_vl.tocsr(), j_lu.tocsr(),
        j_lv.tocsr(), r_theta, r_theta_dot, terms
    )


def history_jacobian(system: System, h: float, coefficient: float) -> sp.csr_matrix:
    """``∂R/∂S_{n−k}`` for a history state entering ``Ū, V̄`` with weight ``coefficient`` (BDF2: 4/3, −1/3).

    ``R_U`` depends on it as ``−coefficient·I``, ``R_V`` as ``−coefficient·M/h``; ``R_λ`` not at all.
    """
    rigid_m = []
    for body in system.rigid:
        rigid_m.append(sp.csr_matrix(np.diag([body.mass] * 3)))
        rigid_m.append(sp.csr_matrix(body.inertia))
    m_blocks = rigid_m + [d.mass_matrix for d in system.deformable]
    if system.servo.size:
        m_blocks.append(sp.diags(servo_mass(system.servo)))
    mass = sp.block_diag(m_blocks, format="csr")
    return sp.block_diag(
        [-coefficient * sp.identity(system.n_u), -coefficient / h * mass, sp.csr_matrix((system.n_lambda, system.n_lambda))],
        format="csr",
    )
