"""Compiled (numba) kernels of the simulator's per-iteration work: the rigid joint blocks.

:func:`joint_block_terms` evaluates every joint block (joints and motors between rigid bodies or the world) of a
system in one compiled pass and returns, per block, everything the BDF residual and its Newton matrix need, in
the rigid slots' own coordinates (7 U entries ``[c, q]`` and 6 V entries ``[v, ω]`` per side). It is the same
mathematics as :meth:`retarget.sim.constraints.JointConstraint.evaluate` (the reference implementation, which the
tests compare against) and as :func:`retarget.sim.dae.constraint_terms`: curvature terms by complex steps of the
analytic ``∂C/∂y`` (exact to rounding).

:func:`forces_and_stiffness_product` (``f_int(u)`` and ``K(u) v`` without assembling ``K``) now lives with the
Neo-Hookean expressions in :mod:`retarget.fem.neo_hookean` (:meth:`retarget.fem.ElasticBody.stiffness_product`);
the name stays importable from here.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from retarget.fem.neo_hookean import forces_stiffness_product_numba as forces_and_stiffness_product
from retarget.sim.joint_kernels import along_row, joint_frames, joint_geometric_rows
from retarget.sim.rotation_kernels import omega_half_into, quat_rate_half_into, rotation_matrix
from retarget.jit import njit

__all__ = ["JOINT_KIND_CODES", "MAX_JOINT_ROWS", "forces_and_stiffness_product", "joint_block_terms"]

#: Integer codes of the joint kinds inside the kernels.
JOINT_KIND_CODES: dict[str, int] = {"fixed": 0, "hinge": 1, "universal": 2, "ball": 3, "prismatic": 4}
#: Largest joint block (fixed: 6; motorized hinge or prismatic: 6).
MAX_JOINT_ROWS: int = 6

_H = 1e-30  # complex step (no subtractive cancellation: any tiny value is exact to rounding)


@njit(cache=True)
def _joint_eval(
    kind: int,
    motorized: bool,
    anchor_a: NDArray,
    anchor_b: NDArray,
    axes_a: NDArray,
    axes_b: NDArray,
    y: NDArray,
    theta: complex,
    c: NDArray,
    jac: NDArray,
) -> int:
    """``C`` and ``∂C/∂y`` over the full 14-vector ``[c_a, q_a, c_b, q_b]`` (world sides hold the identity pose).

    Row order as :meth:`JointConstraint.evaluate` (the rows shared with the reduced path:
    :mod:`retarget.sim.joint_kernels`). Returns the number of rows.
    """
    gap, da, db, jra, jrb, jda, jdb = joint_frames(anchor_a, anchor_b, axes_a, axes_b, y)
    for i in range(jac.shape[0]):
        for j in range(14):
            jac[i, j] = 0.0
    row = joint_geometric_rows(kind, gap, da, db, jra, jrb, jda, jdb, c, jac)
    if motorized:
        if kind == 1:
            s = np.sin(theta)
            co = np.cos(theta)
            c[row] = s * (da[0, 0] * db[0, 0] + da[0, 1] * db[0, 1] + da[0, 2] * db[0, 2]) - co * (
                da[1, 0] * db[0, 0] + da[1, 1] * db[0, 1] + da[1, 2] * db[0, 2]
            )
            for m in range(4):
                ga = 0.0j
                gb = 0.0j
                for k in range(3):
                    ga += db[0, k] * (s * jda[0, k, m] - co * jda[1, k, m])
                    gb += (s * da[0, k] - co * da[1, k]) * jdb[0, k, m]
                jac[row, 3 + m] = ga
                jac[row, 10 + m] = gb
            row += 1
        else:
            along_row(2, theta, gap, da, jra, jrb, jda, c, jac, row)
            row += 1
    return row


@njit(cache=True)
def _theta_derivative(kind: int, axes_a: NDArray, axes_b: NDArray, y: NDArray, theta: complex) -> complex:
    """``∂C_motor/∂θ`` (see constraints.theta_derivative)."""
    if kind == 4:
        return -1.0 + 0.0j
    ra = rotation_matrix(y[3:7])
    rb = rotation_matrix(y[10:14])
    a1b1 = 0.0j
    a2b1 = 0.0j
    for i in range(3):
        b1 = rb[i, 0] * axes_b[0, 0] + rb[i, 1] * axes_b[0, 1] + rb[i, 2] * axes_b[0, 2]
        a1 = ra[i, 0] * axes_a[0, 0] + ra[i, 1] * axes_a[0, 1] + ra[i, 2] * axes_a[0, 2]
        a2 = ra[i, 0] * axes_a[1, 0] + ra[i, 1] * axes_a[1, 1] + ra[i, 2] * axes_a[1, 2]
        a1b1 += a1 * b1
        a2b1 += a2 * b1
    return np.cos(theta) * a1b1 + np.sin(theta) * a2b1


@njit(cache=True, inline="always")
def _gather_sides(
    bodies_b: NDArray[np.int64],
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    y: NDArray[np.complex128],
    ydot: NDArray[np.float64],
    tq: NDArray[np.float64],
    om: NDArray[np.float64],
) -> None:
    """Fill one block's ``y`` (14,) and ``ẏ`` (14,) from ``U`` and ``V`` (world sides: identity pose at rest), and
    per side the quaternion-rate map ``½Q(q)`` into ``tq`` (2, 4, 3) and ``½Ω(ω)`` into ``om`` (2, 4, 4)."""
    for side in range(2):
        body = bodies_b[side]
        if body >= 0:
            for k in range(7):
                y[7 * side + k] = u[7 * body + k]
            quat_rate_half_into(u[7 * body + 3 : 7 * body + 7], tq[side])
            omega_half_into(v[6 * body + 3 : 6 * body + 6], om[side])
            for k in range(3):
                ydot[7 * side + k] = v[6 * body + k]
            for k in range(4):
                ydot[7 * side + 3 + k] = (
                    tq[side, k, 0] * v[6 * body + 3] + tq[side, k, 1] * v[6 * body + 4]
                    + tq[side, k, 2] * v[6 * body + 5]
                )
        else:
            for k in range(7):
                y[7 * side + k] = 0.0
                ydot[7 * side + k] = 0.0
            y[7 * side + 3] = 1.0
            tq[side, :, :] = 0.0
            om[side, :, :] = 0.0


@njit(cache=True, inline="always")
def _value_terms(
    size: int,
    bodies_b: NDArray[np.int64],
    lam_b: NDArray[np.float64],
    motorized: bool,
    cth: float,
    thd: float,
    baumgarte: float,
    j0: NDArray[np.float64],
    ydot: NDArray[np.float64],
    tq: NDArray[np.float64],
    c_b: NDArray[np.float64],
    g: NDArray[np.float64],
    r3_b: NDArray[np.float64],
    f_b: NDArray[np.float64],
) -> None:
    """One block's ``r3 = C_y ẏ + C_θ θ̇ + a C`` into ``r3_b`` (6,), ``g = C_yᵀ λ`` (14,) and the generalized force
    ``T_sᵀ g_s`` per present side into ``f_b`` (2, 6); ``lam_b``: the block's λ rows."""
    for i in range(size):
        s = baumgarte * c_b[i]
        for j in range(14):
            s += j0[i, j] * ydot[j]
        r3_b[i] = s
    if motorized:
        r3_b[size - 1] += cth * thd
    for j in range(14):
        s = 0.0
        for i in range(size):
            s += j0[i, j] * lam_b[i]
        g[j] = s
    for side in range(2):
        if bodies_b[side] < 0:
            continue
        o = 7 * side
        for k in range(3):
            f_b[side, k] = g[o + k]
        for k in range(3):
            s = 0.0
            for m in range(4):
                s += tq[side, m, k] * g[o + 3 + m]
            f_b[side, 3 + k] = s


@njit(cache=True, inline="always")
def _curvature_terms(
    kind: int,
    motorized: bool,
    size: int,
    bodies_b: NDArray[np.int64],
    aa: NDArray[np.float64],
    ab: NDArray[np.float64],
    xa: NDArray[np.float64],
    xb: NDArray[np.float64],
    th: float,
    thd: float,
    cth: float,
    baumgarte: float,
    lam_b: NDArray[np.float64],
    y: NDArray[np.complex128],
    ydot: NDArray[np.float64],
    cc: NDArray[np.complex128],
    jc: NDArray[np.complex128],
    j0: NDArray[np.float64],
    a3: NDArray[np.float64],
    dth: NDArray[np.float64],
    hess: NDArray[np.float64],
    r3th_b: NDArray[np.float64],
) -> None:
    """Complex steps of ``∂C/∂y``: along ``ẏ`` (``a3`` (6, 14) = ``∂r3/∂y``), along each present unit direction
    (``hess`` (14, 14) = ``∂(C_yᵀλ)/∂y``) and, motorized, along θ (``dth`` (6, 14) = ``∂C_y/∂θ``, ``r3th_b`` (6,))."""
    for j in range(14):
        y[j] += 1j * _H * ydot[j]
    _joint_eval(kind, motorized, aa, ab, xa, xb, y, th + 0.0j, cc, jc)
    for j in range(14):
        y[j] = y[j].real + 0.0j
    for i in range(size):
        for j in range(14):
            a3[i, j] = jc[i, j].imag / _H + baumgarte * j0[i, j]
    hess[:, :] = 0.0
    for side in range(2):
        if bodies_b[side] < 0:
            continue
        for jj in range(7):
            j = 7 * side + jj
            y[j] += 1j * _H
            _joint_eval(kind, motorized, aa, ab, xa, xb, y, th + 0.0j, cc, jc)
            y[j] = y[j].real + 0.0j
            for k in range(14):
                s = 0.0
                for i in range(size):
                    s += jc[i, k].imag * lam_b[i]
                hess[k, j] = s / _H
    if motorized:
        _joint_eval(kind, motorized, aa, ab, xa, xb, y, th + 1j * _H, cc, jc)
        for i in range(size):
            for j in range(14):
                dth[i, j] = jc[i, j].imag / _H
        cthth = _theta_derivative(kind, xa, xb, y, th + 1j * _H).imag / _H
        s = baumgarte * cth + cthth * thd
        for j in range(14):
            s += dth[size - 1, j] * ydot[j]
        # Only the motor row depends on θ.
        for i in range(size - 1):
            t = 0.0
            for j in range(14):
                t += dth[i, j] * ydot[j]
            r3th_b[i] = t
        r3th_b[size - 1] = s
        for i in range(size):
            for j in range(14):
                a3[i, j] += thd * dth[i, j]


@njit(cache=True, inline="always")
def _scatter_side_jacobian(
    side: int,
    size: int,
    motorized: bool,
    bodies_b: NDArray[np.int64],
    lam_b: NDArray[np.float64],
    j0: NDArray[np.float64],
    a3: NDArray[np.float64],
    dth: NDArray[np.float64],
    hess: NDArray[np.float64],
    g: NDArray[np.float64],
    tq: NDArray[np.float64],
    om: NDArray[np.float64],
    cu_b: NDArray[np.float64],
    cv_b: NDArray[np.float64],
    r3u_b: NDArray[np.float64],
    fu_b: NDArray[np.float64],
    fth_b: NDArray[np.float64],
) -> None:
    """One present side's Jacobian pieces in its slot coordinates (shapes of :func:`joint_block_terms` less the
    block axis)."""
    o = 7 * side
    for i in range(size):
        for k in range(7):
            cu_b[i, side, k] = j0[i, o + k]
            r3u_b[i, side, k] = a3[i, o + k]
        for k in range(3):
            cv_b[i, side, k] = j0[i, o + k]
            s = 0.0
            for m in range(4):
                s += j0[i, o + 3 + m] * tq[side, m, k]
            cv_b[i, side, 3 + k] = s
        # ∂(C_q Q(q)ω/2)/∂q at fixed ω: C_q ½Ω(ω).
        for m in range(4):
            s = 0.0
            for k in range(4):
                s += j0[i, o + 3 + k] * om[side, k, m]
            r3u_b[i, side, 3 + m] += s
    if motorized:
        for k in range(3):
            fth_b[side, k] = 0.0
            for i in range(size):
                fth_b[side, k] += dth[i, o + k] * lam_b[i]
        for k in range(3):
            s = 0.0
            for m in range(4):
                t = 0.0
                for i in range(size):
                    t += dth[i, o + 3 + m] * lam_b[i]
                s += tq[side, m, k] * t
            fth_b[side, 3 + k] = s
    for side2 in range(2):
        if bodies_b[side2] < 0:
            continue
        o2 = 7 * side2
        for k2 in range(7):
            for k in range(3):
                fu_b[side, k, side2, k2] = hess[o + k, o2 + k2]
            for k in range(3):
                s = 0.0
                for m in range(4):
                    s += tq[side, m, k] * hess[o + 3 + m, o2 + k2]
                fu_b[side, 3 + k, side2, k2] = s
    # ∂(½Q(q)ᵀ g_q)/∂q at fixed g (½Q is linear in q): ω rows, q columns.
    gq0, gq1, gq2, gq3 = g[o + 3], g[o + 4], g[o + 5], g[o + 6]
    fu_b[side, 3, side, 3] += 0.5 * gq1
    fu_b[side, 3, side, 4] += -0.5 * gq0
    fu_b[side, 3, side, 5] += -0.5 * gq3
    fu_b[side, 3, side, 6] += 0.5 * gq2
    fu_b[side, 4, side, 3] += 0.5 * gq2
    fu_b[side, 4, side, 4] += 0.5 * gq3
    fu_b[side, 4, side, 5] += -0.5 * gq0
    fu_b[side, 4, side, 6] += -0.5 * gq1
    fu_b[side, 5, side, 3] += 0.5 * gq3
    fu_b[side, 5, side, 4] += -0.5 * gq2
    fu_b[side, 5, side, 5] += 0.5 * gq1
    fu_b[side, 5, side, 6] += -0.5 * gq0


@njit(cache=True)
def joint_block_terms(
    kinds: NDArray[np.int64],
    sizes: NDArray[np.int64],
    motors: NDArray[np.int64],
    bodies: NDArray[np.int64],
    anchors: NDArray[np.float64],
    axes: NDArray[np.float64],
    lam_offsets: NDArray[np.int64],
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    lam: NDArray[np.float64],
    theta: NDArray[np.float64],
    theta_dot: NDArray[np.float64],
    baumgarte: float,
    second_order: bool,
) -> tuple:
    """Residual and Jacobian pieces of every joint block, per side (0 = parent, 1 = child).

    Args:
        kinds: (nj,) kind codes (:data:`JOINT_KIND_CODES`).
        sizes: (nj,) rows per block.
        motors: (nj,) motor index or -1.
        bodies: (nj, 2) rigid body index per side, -1 = world.
        anchors: (nj, 2, 3) local anchors [m]; axes: (nj, 2, 3, 3) local joint frames (rows).
        lam_offsets: (nj,) first λ row of each block.
        u, v, lam: the system's ``U``, ``V``, ``λ``.
        theta, theta_dot: motor values and rates (n_motors,).
        baumgarte: ``a`` [1/s].
        second_order: also compute the Jacobian pieces (else they stay zero).

    Returns:
        ``c`` (nj, 6), ``r3 = C_θ θ̇ + C_V V + a C`` (nj, 6), ``force = T_sᵀ C_sᵀ λ`` (nj, 2, 6),
        ``c_u`` (nj, 6, 2, 7), ``c_v`` (nj, 6, 2, 6), ``r3_u`` (nj, 6, 2, 7), ``force_u`` (nj, 2, 6, 2, 7)
        (``∂(C_Vᵀλ)/∂U``: V rows of side k, U columns of side k2), ``c_theta`` (nj, 6), ``r3_theta`` (nj, 6),
        ``force_theta`` (nj, 2, 6). Rows beyond a block's size and world sides are zero.
    """
    nj = kinds.shape[0]
    c_out = np.zeros((nj, 6))
    r3_out = np.zeros((nj, 6))
    f_out = np.zeros((nj, 2, 6))
    cu_out = np.zeros((nj, 6, 2, 7))
    cv_out = np.zeros((nj, 6, 2, 6))
    r3u_out = np.zeros((nj, 6, 2, 7))
    fu_out = np.zeros((nj, 2, 6, 2, 7))
    cth_out = np.zeros((nj, 6))
    r3th_out = np.zeros((nj, 6))
    fth_out = np.zeros((nj, 2, 6))
    y = np.zeros(14, dtype=np.complex128)
    ydot = np.zeros(14)
    cc = np.zeros(6, dtype=np.complex128)
    jc = np.zeros((6, 14), dtype=np.complex128)
    j0 = np.zeros((6, 14))
    a3 = np.zeros((6, 14))
    dth = np.zeros((6, 14))
    hess = np.zeros((14, 14))
    g = np.zeros(14)
    tq = np.zeros((2, 4, 3))
    om = np.zeros((2, 4, 4))
    for b in range(nj):
        kind = kinds[b]
        size = sizes[b]
        mot = motors[b]
        motorized = mot >= 0
        th = theta[mot] if motorized else 0.0
        thd = theta_dot[mot] if motorized else 0.0
        l0 = lam_offsets[b]
        lam_b = lam[l0 : l0 + size]
        _gather_sides(bodies[b], u, v, y, ydot, tq, om)
        aa, ab = anchors[b, 0], anchors[b, 1]
        xa, xb = axes[b, 0], axes[b, 1]
        _joint_eval(kind, motorized, aa, ab, xa, xb, y, th + 0.0j, cc, jc)
        for i in range(size):
            c_out[b, i] = cc[i].real
            for j in range(14):
                j0[i, j] = jc[i, j].real
        cth = 0.0
        if motorized:
            cth = _theta_derivative(kind, xa, xb, y, th + 0.0j).real
            cth_out[b, size - 1] = cth
        _value_terms(size, bodies[b], lam_b, motorized, cth, thd, baumgarte, j0, ydot, tq, c_out[b], g, r3_out[b],
                     f_out[b])
        if not second_order:
            continue
        _curvature_terms(kind, motorized, size, bodies[b], aa, ab, xa, xb, th, thd, cth, baumgarte, lam_b, y, ydot,
                         cc, jc, j0, a3, dth, hess, r3th_out[b])
        for side in range(2):
            if bodies[b, side] >= 0:
                _scatter_side_jacobian(side, size, motorized, bodies[b], lam_b, j0, a3, dth, hess, g, tq, om,
                                       cu_out[b], cv_out[b], r3u_out[b], fu_out[b], fth_out[b])
        for i in range(size):
            for j in range(14):
                a3[i, j] = 0.0
                dth[i, j] = 0.0
    return c_out, r3_out, f_out, cu_out, cv_out, r3u_out, fu_out, cth_out, r3th_out, fth_out
