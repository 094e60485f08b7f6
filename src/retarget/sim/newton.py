"""The fast Newton path of a BDF step: residual and eliminated Newton matrix assembled into fixed patterns.

Same equations as :func:`retarget.sim.dae.residual_and_jacobian` (see its module docstring), organized for speed:

- the U rows are eliminated analytically, ``δU = −P R_U − P J_UV δV`` with ``P = (∂R_U/∂U)⁻¹`` (identity except the
  rigid bodies' 4×4 quaternion blocks), leaving ``A [δV; δλ] = −[R_V; R_λ] + E R_U`` with
  ``A = [[J_VV − J_VU P J_UV, J_Vλ], [J_λV − J_λU P J_UV, 0]]`` and ``E = [J_VU; J_λU] P``;
- ``A`` and ``E`` are filled into sparsity patterns computed once per system (:class:`NewtonPlan`); the FEM blocks
  are combined on the stiffness pattern's data arrays (``(1/h + α) M + (β + h) K``);
- small systems use dense LAPACK (``A`` of order ≤ :data:`DENSE_LIMIT`), large ones SuperLU with a symmetric
  minimum-degree ordering (``MMD_AT_PLUS_A``, symmetric mode: the FEM block is symmetric);
- residual-only evaluations of a body with stiffness-proportional damping use the matrix-free ``K(u) u̇``
  (:meth:`retarget.fem.ElasticBody.forces_and_stiffness_product`) instead of assembling ``K``.

The Newton matrix drops the term ``h β dK(u)[u̇]`` (the derivative of the stiffness-proportional damping force
through ``K(u)``): it only changes the Newton direction slightly (the converged state solves the same residual);
pass ``exact=True`` to include it. :func:`retarget.sim.integrator.linearize` stays exact for the adjoint.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from retarget.sim.assembly import JointPack, Pattern, joint_pack, joint_terms
from retarget.sim.bdf import StepInputs
from retarget.sim.constraints import JointConstraint, RigidSlot, theta_derivative
from retarget.sim.dae import block_second_order, motor_reactions
from retarget.sim.servo import servo_rows
from retarget.sim.rotation import QUATERNION_BASIS_Q, cross, omega_matrix, quat_rate_matrix
from retarget.sim.system import System

if TYPE_CHECKING:
    from retarget.fem.elastic import ElasticBody
    from retarget.sim.assembly import JointTerms
    from retarget.sim.dae import MotorReaction
    from retarget.sim.servo import ServoRows

__all__ = [
    "DENSE_LIMIT",
    "FastFactorization",
    "NewtonPlan",
    "Residual",
    "assemble",
    "build_newton_plan",
    "constraint_values",
    "eliminated_matrices",
    "factorize_fast",
    "newton_plan",
    "quat_rate_half",
    "residual",
]

#: Largest order of the eliminated Newton matrix solved densely.
DENSE_LIMIT: int = 400


@dataclass(frozen=True, eq=False)
class _Generic:
    """A non-joint block (a coupling) handled by its own ``evaluate``: slot index arrays and pattern offsets."""

    block: int
    rows: NDArray[np.int64]
    u_index: tuple[NDArray[np.int64], ...]
    v_index: tuple[NDArray[np.int64], ...]


@dataclass(frozen=True, eq=False)
class NewtonPlan:
    """Per-system layout of the eliminated Newton matrix ``A`` (n_A, n_A) and of ``E`` (n_A, nU).

    Attributes:
        system: the system.
        pack: its joint blocks.
        generic: the other blocks.
        dense: whether ``A`` and ``E`` are dense.
        a_pattern, e_pattern: entry orders (rigid blocks, FEM stiffness patterns, joint blocks, other blocks;
            filled in the same order by :func:`assemble`).
        joint_masks: flat selections of the valid entries of the joint arrays (fv, avl, alv, evu, elu).
        servo_joints: per modelled servo, the index of its motor's block in the joint pack (:func:`_servo_entries`
            lists the servo entries of ``A`` and ``E``, appended after the others).
    """

    system: System
    pack: JointPack
    generic: tuple[_Generic, ...]
    dense: bool
    a_pattern: Pattern
    e_pattern: Pattern
    joint_masks: dict[str, NDArray[np.int64]] = field(default_factory=dict)
    servo_joints: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))


_PLANS: weakref.WeakKeyDictionary[System, NewtonPlan] = weakref.WeakKeyDictionary()


def _joint_entries(pack: JointPack, nv: int) -> dict[str, tuple[NDArray, NDArray, NDArray]]:
    """(rows, cols, flat selection) of each joint contribution array."""
    vi, ui, rows = pack.v_index, pack.u_index, pack.rows
    lr = np.where(rows >= 0, nv + rows, -1)
    nj = pack.n
    shapes = {
        "fv": (np.broadcast_to(vi[:, :, :, None, None], (nj, 2, 6, 2, 6)), np.broadcast_to(vi[:, None, None, :, :], (nj, 2, 6, 2, 6))),
        "avl": (np.broadcast_to(vi[:, :, :, None], (nj, 2, 6, 6)), np.broadcast_to(lr[:, None, None, :], (nj, 2, 6, 6))),
        "alv": (np.broadcast_to(lr[:, :, None, None], (nj, 6, 2, 6)), np.broadcast_to(vi[:, None, :, :], (nj, 6, 2, 6))),
        "evu": (np.broadcast_to(vi[:, :, :, None, None], (nj, 2, 6, 2, 7)), np.broadcast_to(ui[:, None, None, :, :], (nj, 2, 6, 2, 7))),
        "elu": (np.broadcast_to(lr[:, :, None, None], (nj, 6, 2, 7)), np.broadcast_to(ui[:, None, :, :], (nj, 6, 2, 7))),
    }
    out = {}
    for name, (r, c) in shapes.items():
        r, c = r.ravel(), c.ravel()
        sel = np.flatnonzero((r >= 0) & (c >= 0))
        out[name] = (r[sel], c[sel], sel)
    return out


def newton_plan(system: System) -> NewtonPlan:
    """The (cached) :class:`NewtonPlan` of ``system`` (dense when ``A`` has order ≤ :data:`DENSE_LIMIT`)."""
    cached = _PLANS.get(system)
    if cached is None:
        cached = build_newton_plan(system)
        _PLANS[system] = cached
    return cached


def build_newton_plan(system: System, dense: bool | None = None) -> NewtonPlan:
    """Compute the layout of ``A`` and ``E`` (``dense`` None: by size, see :func:`newton_plan`)."""
    nu, nv, m = system.n_u, system.n_v, system.n_lambda
    na = nv + m
    nb = len(system.rigid)
    pack = joint_pack(system)
    a_rows: list[NDArray] = []
    a_cols: list[NDArray] = []
    e_rows: list[NDArray] = []
    e_cols: list[NDArray] = []
    # Rigid J_VV: a 6×6 block per body.
    base = 6 * np.arange(nb)
    loc = np.arange(6)
    a_rows.append((base[:, None, None] + loc[None, :, None] + 0 * loc[None, None, :]).ravel())
    a_cols.append((base[:, None, None] + 0 * loc[None, :, None] + loc[None, None, :]).ravel())
    for d, body in enumerate(system.deformable):
        mm = body.mass_matrix.tocsr()
        r = np.repeat(np.arange(mm.shape[0]), np.diff(mm.indptr))
        a_rows.append(system.v_offsets[d] + r)
        a_cols.append(system.v_offsets[d] + mm.indices.astype(np.int64))
        e_rows.append(system.v_offsets[d] + r)
        e_cols.append(system.u_offsets[d] + mm.indices.astype(np.int64))
    masks: dict[str, NDArray[np.int64]] = {}
    if pack.n:
        je = _joint_entries(pack, nv)
        for name in ("fv", "avl", "alv"):
            a_rows.append(je[name][0])
            a_cols.append(je[name][1])
            masks[name] = je[name][2]
        for name in ("evu", "elu"):
            e_rows.append(je[name][0])
            e_cols.append(je[name][1])
            masks[name] = je[name][2]
    generic = []
    for k, (blk, sus, svs, l0) in enumerate(zip(system.constraints, system.slot_u, system.slot_v, system.lambda_offsets)):
        if isinstance(blk, JointConstraint):
            continue
        rows = nv + l0 + np.arange(blk.size)
        g = _Generic(k, rows, tuple(sus), tuple(svs))
        generic.append(g)
        for vi in svs:
            for vi2 in svs:
                a_rows.append(np.repeat(vi, len(vi2)))
                a_cols.append(np.tile(vi2, len(vi)))
        for vi in svs:
            a_rows.append(np.repeat(vi, len(rows)))
            a_cols.append(np.tile(rows, len(vi)))
            a_rows.append(np.repeat(rows, len(vi)))
            a_cols.append(np.tile(vi, len(rows)))
        for vi in svs:
            for ui2 in sus:
                e_rows.append(np.repeat(vi, len(ui2)))
                e_cols.append(np.tile(ui2, len(vi)))
        for ui in sus:
            e_rows.append(np.repeat(rows, len(ui)))
            e_cols.append(np.tile(ui, len(rows)))
    servo_joints = np.zeros(0, np.int64)
    if not system.servo.ideal:
        servo_joints = _servo_joints(system, pack)
        (ar, ac), (er, ec) = _servo_entries(system, pack, servo_joints)
        a_rows.append(ar)
        a_cols.append(ac)
        e_rows.append(er)
        e_cols.append(ec)
    if dense is None:
        dense = na <= DENSE_LIMIT

    def cat(x: list[NDArray]) -> NDArray[np.int64]:
        return np.concatenate(x).astype(np.int64) if x else np.zeros(0, np.int64)

    plan = NewtonPlan(
        system,
        pack,
        tuple(generic),
        dense,
        Pattern(cat(a_rows), cat(a_cols), (na, na), dense),
        Pattern(cat(e_rows), cat(e_cols), (na, nu), dense),
        masks,
        servo_joints,
    )
    return plan


def _servo_joints(system: System, pack: JointPack) -> NDArray[np.int64]:
    """Per modelled servo, the joint-pack index of its motor's block."""
    out = np.full(system.servo.n_servos, -1, np.int64)
    for j, m in enumerate(pack.motors):
        if m >= 0 and system.servo.motor_servo[m] >= 0:
            out[system.servo.motor_servo[m]] = j
    if np.any(out < 0):
        raise ValueError("a modelled servo's motor is not a joint block")
    return out


def _servo_entries(system: System, pack: JointPack,
                   servo_joints: NDArray[np.int64]) -> tuple[tuple[NDArray, NDArray], tuple[NDArray, NDArray]]:
    """(rows, cols) of the servo entries of ``A`` and of ``E``, in the order :func:`_servo_values` fills them.

    Per servo (ω its V index, θ its U index, the motor block's λ rows and its bodies' V and U entries):
    ``A``: (ω, ω), (ω, λ), (λ, ω), (V, ω), (ω, V), then with integral action (ω, e), (e, e), (e, ω);
    ``E``: (ω, U), (ω, θ), (V, θ), (λ, θ), then with integral action (ω, ι), (e, θ).
    """
    nv = system.n_v
    lay = system.servo
    ar, ac, er, ec = [], [], [], []
    for k, j in enumerate(servo_joints):
        w, th = int(lay.v_omega[k]), int(lay.u_theta[k])
        lr = nv + pack.rows[j][pack.rows[j] >= 0]
        vi = pack.v_index[j][pack.v_index[j] >= 0]
        ui = pack.u_index[j][pack.u_index[j] >= 0]
        ar += [[w], np.full(len(lr), w), lr, vi, np.full(len(vi), w)]
        ac += [[w], lr, np.full(len(lr), w), np.full(len(vi), w), vi]
        er += [np.full(len(ui), w), [w], vi, lr]
        ec += [ui, [th], np.full(len(vi), th), np.full(len(lr), th)]
        if lay.v_e[k] >= 0:
            e, io = int(lay.v_e[k]), int(lay.u_iota[k])
            ar += [[w], [e], [e]]
            ac += [[e], [e], [w]]
            er += [[w], [e]]
            ec += [[io], [th]]

    def cat(x: list) -> NDArray[np.int64]:
        return np.concatenate([np.asarray(a, np.int64) for a in x]) if x else np.zeros(0, np.int64)

    return (cat(ar), cat(ac)), (cat(er), cat(ec))


class GenericPieces(TypedDict):
    """Per-slot u-space Jacobian pieces of a non-joint block (:func:`_generic_block`): ``cu``, ``cv``, ``r3u``
    per slot, ``fu`` per pair of slots."""

    cu: list[NDArray[np.float64]]
    cv: list[NDArray[np.float64]]
    r3u: list[NDArray[np.float64]]
    fu: list[list[NDArray[np.float64]]]


class NewtonPieces(TypedDict, total=False):
    """What :func:`residual` with ``jacobian=True`` hands to :func:`assemble`.

    ``h`` [s]; rigid ``jvv`` (nb, 6, 6), ``pq`` (nb, 4, 4), ``bq`` (nb, 4, 3); per deformable body the stiffness
    data on its pattern and (exact) ``dK[u̇]`` by body; the joint kernel's terms; per generic block its pieces;
    with modelled servos their rows and the motor reactions by servo.
    """

    h: float
    jvv: NDArray[np.float64]
    pq: NDArray[np.float64]
    bq: NDArray[np.float64]
    stiffness: list[NDArray[np.float64]]
    damping_derivative: dict[int, NDArray[np.float64]]
    joints: JointTerms
    generic: list[GenericPieces | None]
    servo: ServoRows
    reactions: dict[int, MotorReaction]


@dataclass(frozen=True, eq=False)
class Residual:
    """The BDF residual at one iterate and, optionally, the local Jacobian pieces needed to assemble ``A``, ``E``.

    Attributes:
        r_u, r_v, r_lambda: (nU,), (nV,), (m,).
        pieces: assembly inputs (None for a residual-only evaluation).
    """

    r_u: NDArray[np.float64]
    r_v: NDArray[np.float64]
    r_lambda: NDArray[np.float64]
    pieces: NewtonPieces | None = None

    def residual_norms(self) -> dict[str, float]:
        """Max-norms of the three residual parts."""
        return {
            "kinematic": float(np.max(np.abs(self.r_u), initial=0.0)),
            "dynamic": float(np.max(np.abs(self.r_v), initial=0.0)),
            "constraint": float(np.max(np.abs(self.r_lambda), initial=0.0)),
        }


def _generic_block(
    system: System, g: _Generic, u: NDArray, v: NDArray, lam: NDArray, theta: NDArray, theta_dot: NDArray,
    baumgarte: float, second_order: bool,
) -> tuple[NDArray, NDArray, list[NDArray], GenericPieces | None]:
    """A non-joint block: ``c``, ``r3``, per-slot V forces, and (second order) per-slot u-space Jacobian pieces."""
    blk = system.constraints[g.block]
    lb = lam[g.rows - system.n_v]
    data = []
    for s, ui, vi in zip(blk.slots, g.u_index, g.v_index):
        if isinstance(s, RigidSlot):
            ys = u[ui]
            qr = 0.5 * quat_rate_matrix(ys[3:7])
            t = np.zeros((7, 6))
            t[:3, :3] = np.eye(3)
            t[3:, 3:] = qr
            data.append((ys, np.concatenate([v[vi][:3], qr @ v[vi][3:]]), t, None))
        else:
            body = system.deformable[s.body]  # type: ignore[union-attr]
            x = body.rest_positions[s.nodes].ravel() + u[ui]  # type: ignore[union-attr]
            w = s.map  # type: ignore[union-attr]
            data.append((w @ x, w @ v[vi], w, w))
    y = np.concatenate([d[0] for d in data])
    ydot = np.concatenate([d[1] for d in data])
    th = theta[blk.motor] if blk.motor >= 0 else 0.0
    thd = theta_dot[blk.motor] if blk.motor >= 0 else 0.0
    if second_order:
        c, cy, a3, hess, d_theta = block_second_order(blk, y, ydot, th, lb, baumgarte)
    else:
        c, cy = blk.evaluate(y, th)
    r3 = cy @ ydot + baumgarte * c
    if blk.motor >= 0:
        cth = theta_derivative(blk, y, th).real
        r3 = r3 + cth * thd
        if second_order:
            a3 = a3 + thd * d_theta
    cols = np.cumsum([0] + [s.size for s in blk.slots])
    forces = [d[2].T @ (cy[:, cols[k] : cols[k + 1]].T @ lb) for k, d in enumerate(data)]
    if not second_order:
        return c, r3, forces, None
    g_all = cy.T @ lb
    cu, cv, r3u, fu = [], [], [], []
    for k, (s, vi, (_, _, ts, ys)) in enumerate(zip(blk.slots, g.v_index, data)):
        sl = slice(cols[k], cols[k + 1])
        cyk = cy[:, sl]
        cu.append(cyk if ys is None else cyk @ ys)
        cv.append(cyk @ ts)
        b3 = a3[:, sl] if ys is None else a3[:, sl] @ ys
        if isinstance(s, RigidSlot):
            b3 = b3.copy()
            b3[:, 3:7] += cyk[:, 3:7] @ (0.5 * omega_matrix(v[vi][3:]))
        r3u.append(b3)
        row = []
        for k2, (_, _, _, ys2) in enumerate(data):
            hb = ts.T @ hess[sl, cols[k2] : cols[k2 + 1]]
            if ys2 is not None:
                hb = hb @ ys2
            if k2 == k and isinstance(s, RigidSlot):
                hb = hb.copy()
                hb[3:6, 3:7] += 0.5 * np.einsum("kij,i->jk", QUATERNION_BASIS_Q, g_all[sl][3:7])
            row.append(hb)
        fu.append(row)
    return c, r3, forces, {"cu": cu, "cv": cv, "r3u": r3u, "fu": fu}


def _deformable_residual(
    system: System,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    inputs: StepInputs,
    exact: bool,
    r_u: NDArray[np.float64],
    r_v: NDArray[np.float64],
    pieces: NewtonPieces | None,
) -> None:
    """Every deformable body's kinematic rows and FEM dynamics into ``r_u`` / ``r_v`` (in place) and, with
    ``pieces``, its stiffness data (and with ``exact``, ``dK[u̇]``) for :func:`assemble`."""
    v_bar, h = inputs.v_bar, inputs.h
    jacobian = pieces is not None
    for d, body in enumerate(system.deformable):
        ou, ov, n = system.u_offsets[d], system.v_offsets[d], body.n_dofs
        ud, vd = u[ou : ou + n], v[ov : ov + n]
        r_u[ou : ou + n] -= h * vd
        el = body.elastic
        if jacobian:
            f_int, k = el.internal_forces_and_stiffness(ud)
            kv = k @ vd if body.beta != 0.0 else 0.0
            assert pieces is not None
            pieces.setdefault("stiffness", []).append(k.data)
            if exact and body.beta != 0.0:
                pieces.setdefault("damping_derivative", {})[d] = _damping_derivative_data(el, ud, vd)
        elif body.beta != 0.0:
            f_int, kv = el.forces_and_stiffness_product(ud, vd)
        else:
            f_int, kv = el.internal_forces(ud), 0.0
        r_v[ov : ov + n] = (
            body.mass_matrix @ ((1.0 / h + body.alpha) * vd - v_bar[ov : ov + n] / h)
            + f_int
            + body.beta * kv
            - body.gravity_force
        )


def _rigid_residual(
    system: System,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    inputs: StepInputs,
    r_u: NDArray[np.float64],
    r_v: NDArray[np.float64],
    pieces: NewtonPieces | None,
) -> None:
    """The rigid bodies' kinematic and Newton–Euler rows into ``r_u`` / ``r_v`` (in place) and, with ``pieces``,
    their ``J_VV`` blocks, ``P_q`` and ``P_q ½Q`` for :func:`assemble`."""
    v_bar, h = inputs.v_bar, inputs.h
    nb = len(system.rigid)
    jacobian = pieces is not None
    rig = _rigid_data(system)
    uq = u[: 7 * nb].reshape(nb, 7)
    vv = v[: 6 * nb].reshape(nb, 6)
    vb = v_bar[: 6 * nb].reshape(nb, 6)
    q, w = uq[:, 3:], vv[:, 3:]
    qh = quat_rate_half(q)  # (nb, 4, 3)
    ru = r_u[: 7 * nb].reshape(nb, 7)
    ru[:, :3] -= h * vv[:, :3]
    ru[:, 3:] -= h * np.einsum("bij,bj->bi", qh, w)
    iw = np.einsum("bij,bj->bi", rig["inertia"], w)
    rv = r_v[: 6 * nb].reshape(nb, 6)
    rv[:, :3] = rig["mass"][:, None] * ((vv[:, :3] - vb[:, :3]) / h - system.gravity)
    rv[:, 3:] = np.einsum("bij,bj->bi", rig["inertia"], w - vb[:, 3:]) / h + cross(w, iw)
    if jacobian:
        assert pieces is not None
        jvv = np.zeros((nb, 6, 6))
        jvv[:, :3, :3] = rig["mass"][:, None, None] / h * np.eye(3)
        wx = _skew(w)
        jvv[:, 3:, 3:] = rig["inertia"] / h + wx @ rig["inertia"] - _skew(iw)
        pq = np.linalg.inv(np.eye(4) - h * (0.5 * omega_matrix(w)))
        pieces.update(jvv=jvv, pq=pq, bq=pq @ qh)


def residual(
    plan: NewtonPlan,
    s: NDArray[np.float64],
    inputs: StepInputs,
    jacobian: bool,
    exact: bool = False,
) -> Residual:
    """The BDF residual at ``S = s`` (and, with ``jacobian``, the pieces for :func:`factorize_fast`).

    Args: as :func:`retarget.sim.dae.residual_and_jacobian`; ``exact`` keeps the ``β dK[u̇]`` term.

    Raises:
        retarget.fem.elastic.InvertedElementError: an element inverted.
    """
    v_bar, h, baumgarte = inputs.v_bar, inputs.h, inputs.baumgarte
    system = plan.system
    nu, nv = system.n_u, system.n_v
    nb = len(system.rigid)
    u, v, lam = s[:nu], s[nu : nu + nv], s[nu + nv :]
    r_u = u - inputs.u_bar
    r_v = np.zeros(nv)
    pieces: NewtonPieces | None = {} if jacobian else None
    if nb:
        _rigid_residual(system, u, v, inputs, r_u, r_v, pieces)
    _deformable_residual(system, u, v, inputs, exact, r_u, r_v, pieces)
    r_l = np.zeros(system.n_lambda)
    pack = plan.pack
    layout = system.servo
    goal, goal_dot = inputs.theta, inputs.theta_dot
    theta, theta_dot = (goal, goal_dot) if layout.ideal else layout.motor_state(u, v, goal, goal_dot)
    if pack.n:
        jt = joint_terms(pack, u, v, lam, theta, theta_dot, baumgarte, jacobian)
        valid = pack.rows >= 0
        r_l[pack.rows[valid]] = jt.r3[valid]
        vmask = pack.v_index >= 0
        r_v -= np.bincount(pack.v_index[vmask], weights=jt.force[vmask], minlength=nv)
        if jacobian:
            assert pieces is not None
            pieces["joints"] = jt
    generic = []
    for g in plan.generic:
        _, r3, forces, loc = _generic_block(system, g, u, v, lam, theta, theta_dot, baumgarte, jacobian)
        r_l[g.rows - nv] = r3
        for vi, f in zip(g.v_index, forces):
            r_v[vi] -= f
        generic.append(loc)
    if not layout.ideal:
        rows = servo_rows(layout, nu, u, v, v_bar, h, goal, goal_dot)
        r_u[nu - layout.size :] -= h * v[nv - layout.size :]
        r_v[rows.rows - nu] += rows.values
        # The motor rows' reaction on the shaft, C_θᵀλ (the joint kernel's c_theta on the block's rows).
        for k, j in enumerate(plan.servo_joints):
            ok = pack.rows[j] >= 0
            r_v[layout.v_omega[k]] -= float(jt.c_theta[j][ok] @ lam[pack.rows[j][ok]])
        if jacobian:
            assert pieces is not None
            pieces["servo"] = rows
            pieces["reactions"] = dict(motor_reactions(system, u, lam, theta, True))
    if jacobian:
        assert pieces is not None
        pieces["generic"] = generic
        pieces["h"] = h
    return Residual(r_u, r_v, r_l, pieces)


def _damping_derivative_data(
    elastic: ElasticBody, u: NDArray[np.float64], v: NDArray[np.float64]
) -> NDArray[np.float64]:
    """``dK(u)[v]`` on the stiffness pattern's data array (nnz,): a central difference of ``K`` along ``v``
    (relative error ≈ 1e-8); zeros when ``v = 0``."""
    vn = float(np.max(np.abs(v), initial=0.0))
    if vn == 0.0:
        return np.zeros(elastic.pattern.nnz)
    eps = 1e-6 * max(float(np.max(np.abs(u), initial=0.0)), 1e-4) / vn
    kp = elastic.tangent_stiffness(u + eps * v).data
    km = elastic.tangent_stiffness(u - eps * v).data
    return (kp - km) / (2.0 * eps)


_RIGID: weakref.WeakKeyDictionary[System, dict[str, NDArray]] = weakref.WeakKeyDictionary()


def _rigid_data(system: System) -> dict[str, NDArray]:
    cached = _RIGID.get(system)
    if cached is None:
        cached = {
            "mass": np.array([b.mass for b in system.rigid], dtype=float),
            "inertia": np.array([b.inertia for b in system.rigid], dtype=float).reshape(-1, 3, 3),
        }
        _RIGID[system] = cached
    return cached


def quat_rate_half(q: NDArray[np.float64]) -> NDArray[np.float64]:
    """``½ Q(q)`` for a batch of quaternions (nb, 4) → (nb, 4, 3) (:func:`retarget.sim.rotation.quat_rate_matrix`)."""
    return 0.5 * quat_rate_matrix(q)


def constraint_values(system: System, u: NDArray[np.float64], theta: NDArray[np.float64]) -> NDArray[np.float64]:
    """``C(U, θ)`` (m,): every block's constraint values (joints by the compiled kernel)."""
    nm = len(system.motors)
    th = np.zeros(nm) if theta is None else np.asarray(theta, dtype=float)
    th = system.servo.shaft_angles(u, th)
    plan = newton_plan(system)
    c = np.zeros(system.n_lambda)
    zv = np.zeros(system.n_v)
    zl = np.zeros(system.n_lambda)
    if plan.pack.n:
        jt = joint_terms(plan.pack, u, zv, zl, th, np.zeros(nm), 0.0, False)
        valid = plan.pack.rows >= 0
        c[plan.pack.rows[valid]] = jt.c[valid]
    for g in plan.generic:
        cg, _, _, _ = _generic_block(system, g, u, zv, zl, th, np.zeros(nm), 0.0, False)
        c[g.rows - system.n_v] = cg
    return c


def _skew(w: NDArray) -> NDArray:
    out = np.zeros(w.shape[:-1] + (3, 3))
    out[..., 0, 1], out[..., 0, 2] = -w[..., 2], w[..., 1]
    out[..., 1, 0], out[..., 1, 2] = w[..., 2], -w[..., 0]
    out[..., 2, 0], out[..., 2, 1] = -w[..., 1], w[..., 0]
    return out


@dataclass(eq=False)
class FastFactorization:
    """A factorized eliminated Newton matrix with what the back-substitution needs (reusable: chord iterations).

    Attributes:
        plan: the system's plan.
        h: ``γ Δt`` it was built for [s].
        solver: dense ``(lu, piv)`` or a SuperLU object.
        e: ``E`` (dense or CSC).
        pq, bq: per rigid body ``P_q`` (nb, 4, 4) and ``P_q ½Q(q)`` (nb, 4, 3).
    """

    plan: NewtonPlan
    h: float
    solver: tuple[NDArray[np.float64], NDArray[np.int32]] | spla.SuperLU
    e: NDArray[np.float64] | sp.csc_matrix
    pq: NDArray[np.float64]
    bq: NDArray[np.float64]

    def solve(self, res: Residual) -> NDArray[np.float64]:
        """``δS`` (nS,) for the residual ``res``."""
        system = self.plan.system
        nb, nv = len(system.rigid), system.n_v
        rhs = -np.concatenate([res.r_v, res.r_lambda]) + self.e @ res.r_u
        if self.plan.dense:
            x = sla.lu_solve(self.solver, rhs, check_finite=False)
        else:
            x = self.solver.solve(rhs)
        dv = x[:nv]
        du = -res.r_u + self.h * _expand_v(system, dv)
        if nb:
            ru = res.r_u[: 7 * nb].reshape(nb, 7)
            dw = dv[: 6 * nb].reshape(nb, 6)[:, 3:]
            duq = du[: 7 * nb].reshape(nb, 7)
            duq[:, 3:] = -np.einsum("bij,bj->bi", self.pq, ru[:, 3:]) + self.h * np.einsum("bij,bj->bi", self.bq, dw)
        return np.concatenate([du, x])


def _expand_v(system: System, dv: NDArray[np.float64]) -> NDArray[np.float64]:
    """V-space vector to U layout (linear parts and FEM copied; quaternion entries zero)."""
    nb = len(system.rigid)
    out = np.zeros(system.n_u)
    if nb:
        out[: 7 * nb].reshape(nb, 7)[:, :3] = dv[: 6 * nb].reshape(nb, 6)[:, :3]
    out[7 * nb :] = dv[6 * nb :]
    return out


def _sides(arr: NDArray, bodies: NDArray[np.int64]) -> NDArray:
    """Per joint side, the body's array (zeros for the world): (nj, 2, ...)."""
    out = np.zeros(bodies.shape + arr.shape[1:])
    ok = bodies >= 0
    out[ok] = arr[bodies[ok]]
    return out


def assemble(
    plan: NewtonPlan, res: Residual
) -> tuple[NDArray[np.float64] | sp.csc_matrix, NDArray[np.float64] | sp.csc_matrix, NDArray, NDArray]:
    """``A``, ``E`` and the rigid ``P_q``, ``P_q ½Q`` from a residual evaluated with ``jacobian=True``."""
    system = plan.system
    p = res.pieces
    assert p is not None
    h = p["h"]
    nb = len(system.rigid)
    a_vals: list[NDArray] = []
    e_vals: list[NDArray] = []
    if nb:
        pq, bq = p["pq"], p["bq"]
        a_vals.append(p["jvv"].ravel())
    else:
        pq, bq = np.zeros((0, 4, 4)), np.zeros((0, 4, 3))
    # Per rigid body: P_u = diag(I, P_q) (7, 7) and P J_UV = [[−h I, 0], [0, −h P_q ½Q]] (7, 6).
    pu = np.zeros((nb, 7, 7))
    pu[:, :3, :3] = np.eye(3)
    pu[:, 3:, 3:] = pq
    pj = np.zeros((nb, 7, 6))
    pj[:, :3, :3] = -h * np.eye(3)
    pj[:, 3:, 3:] = -h * bq
    for d, body in enumerate(system.deformable):
        kd = p["stiffness"][d]
        md = body.mass_matrix.data
        a_fem = (1.0 / h + body.alpha) * md + (body.beta + h) * kd
        e_fem = kd
        dk = p.get("damping_derivative", {}).get(d)
        if dk is not None:
            a_fem = a_fem + h * body.beta * dk
            e_fem = kd + body.beta * dk
        a_vals.append(a_fem)
        e_vals.append(e_fem)
    pack = plan.pack
    if pack.n:
        jt = p["joints"]
        pj_s = _sides(pj, pack.bodies)
        pu_s = _sides(pu, pack.bodies)
        fv = np.einsum("bkiml,bmlj->bkimj", jt.force_u, pj_s)
        r3v = np.einsum("brkl,bklj->brkj", jt.r3_u, pj_s)
        avl = -np.transpose(jt.c_v, (0, 2, 3, 1))
        alv = jt.c_v - r3v
        evu = -np.einsum("bkiml,bmlj->bkimj", jt.force_u, pu_s)
        elu = np.einsum("brkl,bklj->brkj", jt.r3_u, pu_s)
        m = plan.joint_masks
        a_vals += [fv.ravel()[m["fv"]], avl.ravel()[m["avl"]], alv.ravel()[m["alv"]]]
        e_vals_j = [evu.ravel()[m["evu"]], elu.ravel()[m["elu"]]]
    else:
        e_vals_j = []
    e_generic: list[NDArray] = []
    for g, loc in zip(plan.generic, p["generic"]):
        blk = system.constraints[g.block]
        pjs, pus = [], []
        for s in blk.slots:
            if isinstance(s, RigidSlot):
                pjs.append(pj[s.body])
                pus.append(pu[s.body])
            else:
                pjs.append(None)
                pus.append(None)
        ns = len(blk.slots)
        for k in range(ns):
            for k2 in range(ns):
                fu = loc["fu"][k][k2]
                a_vals.append((fu @ pjs[k2] if pjs[k2] is not None else -h * fu).ravel())
        for k in range(ns):
            a_vals.append((-loc["cv"][k].T).ravel())
            r3v_k = loc["r3u"][k] @ pjs[k] if pjs[k] is not None else -h * loc["r3u"][k]
            a_vals.append((loc["cv"][k] - r3v_k).ravel())
        for k in range(ns):
            for k2 in range(ns):
                fu = loc["fu"][k][k2]
                e_generic.append((-(fu @ pus[k2]) if pus[k2] is not None else -fu).ravel())
        for k in range(ns):
            e_generic.append((loc["r3u"][k] @ pus[k] if pus[k] is not None else loc["r3u"][k]).ravel())
    if len(plan.servo_joints):
        a_servo, e_servo = _servo_values(plan, p, pj, pu)
        a_vals.append(a_servo)
        e_generic.append(e_servo)
    a = plan.a_pattern.matrix(np.concatenate(a_vals) if a_vals else np.zeros(0))
    e_all = e_vals + e_vals_j + e_generic
    e = plan.e_pattern.matrix(np.concatenate(e_all) if e_all else np.zeros(0))
    return a, e, pq, bq


def _servo_values(plan: NewtonPlan, p: NewtonPieces, pj: NDArray, pu: NDArray) -> tuple[NDArray, NDArray]:
    """Values of the servo entries of ``A`` and ``E`` (:func:`_servo_entries`' order).

    The shaft's kinematic row is eliminated (``δθ = −R_θ + h δω``), so a column of ``A`` at ω collects the ω column
    plus ``h`` times the θ column of the full Jacobian; the U-derivative of the reaction ``C_θᵀλ`` reaches ``A``
    through the bodies' kinematic rows (``−J_ωU P J_UV``) exactly as the joint curvature terms do.
    """
    system = plan.system
    lay = system.servo
    pack = plan.pack
    jt = p["joints"]
    h = p["h"]
    rows = p["servo"]
    reactions = p["reactions"]
    nu = system.n_u
    # Full-Jacobian entries of the servo rows by (row, column) in S numbering.
    jac: dict[tuple[int, int], float] = {}
    for r, c, val in zip(rows.jac_rows, rows.jac_cols, rows.jac_values):
        jac[(int(r), int(c))] = jac.get((int(r), int(c)), 0.0) + float(val)
    a_out: list[NDArray] = []
    e_out: list[NDArray] = []
    for k, j in enumerate(plan.servo_joints):
        w, th = int(lay.v_omega[k]), int(lay.u_theta[k])
        rx = reactions[k]
        okr = pack.rows[j] >= 0
        c_th = jt.c_theta[j][okr]
        r3_th = jt.r3_theta[j][okr]
        okv = pack.v_index[j] >= 0
        f_th = jt.force_theta[j][okv]  # ∂(C_Vᵀλ)/∂θ on the bodies' V entries
        # ∂R_ω/∂θ and ∂R_ω/∂ω
        j_wth = jac.get((nu + w, th), 0.0) - rx.force_theta
        j_ww = jac.get((nu + w, nu + w), 0.0)
        # −force_u on the block's U entries, in the (side, 7) layout of the pack.
        fu = np.zeros((2, 7))
        fu[pack.u_index[j] >= 0] = rx.force_u
        okb = pack.bodies[j] >= 0
        a_wv = np.concatenate([fu[s] @ pj[pack.bodies[j][s]] for s in range(2) if okb[s]])
        e_wu = np.concatenate([-fu[s] @ pu[pack.bodies[j][s]] for s in range(2) if okb[s]])
        a_out += [[j_ww + h * j_wth], -c_th, c_th + h * r3_th, -h * f_th, a_wv]
        e_out += [e_wu, [j_wth], -f_th, r3_th]
        if lay.v_e[k] >= 0:
            io = int(lay.u_iota[k])
            j_wi = jac.get((nu + w, io), 0.0)
            a_out += [[h * j_wi], [1.0], [h]]
            e_out += [[j_wi], [1.0]]

    def cat(x: list) -> NDArray:
        return np.concatenate([np.asarray(a, float).ravel() for a in x]) if x else np.zeros(0)

    return cat(a_out), cat(e_out)


def factorize_fast(plan: NewtonPlan, res: Residual) -> FastFactorization:
    """Assemble and factorize the eliminated Newton matrix at ``res`` (evaluated with ``jacobian=True``).

    Raises:
        numpy.linalg.LinAlgError / RuntimeError: singular matrix.
    """
    a, e, pq, bq = assemble(plan, res)
    if plan.dense:
        solver = sla.lu_factor(a, check_finite=False)
    else:
        solver = spla.splu(
            a, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.1, options={"SymmetricMode": True}
        )
        e = e.tocsr()
    return FastFactorization(plan, res.pieces["h"], solver, e, pq, bq)  # type: ignore[index]


def eliminated_matrices(plan: NewtonPlan, res: Residual) -> tuple[NDArray, NDArray]:
    """Dense ``A`` and ``E`` (for tests and diagnostics)."""
    a, e, _, _ = assemble(plan, res)
    to_dense = (lambda x: x) if plan.dense else (lambda x: x.toarray())
    return to_dense(a), to_dense(e)
