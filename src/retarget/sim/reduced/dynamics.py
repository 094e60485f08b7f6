"""Generalized inertial and gravity forces of a deformable body in relative coordinates, with exact Jacobians.

For a body in the frame of reference rigid body ``(c, q)`` with world linear velocity ``v`` and body-frame ``ω``,
reduced coordinates ``z`` and rates ``ż``, and the BDF accelerations ``a_v = (v − v̄)/h``, ``a_ω``, ``a_z``
(docs/reduced.md §2–3; ``e = Rᵀ(a_v − g)``, ``s = s₀ + S₁z``, ``B_l = P₁_l + Σ_k z_k P₂_lk``, ``Q = Σ_l ż_l B_l``,
``C_l = C₀_l + Σ_k z_k C₁_kl``)::

    f_v   = m_f (a_v − g) + R [a_ω × s + ω × (ω × s) + 2 ω × S₁ż + S₁ a_z]
    f_ω   = s × e + J a_ω + ω × (J ω) + 2 (tr Q I − Q) ω + Σ_l a_z,l C_l
    f_z,l = S₁_lᵀ e + a_ω·C_l + ωᵀ B_l ω − |ω|² tr B_l + 2 ω·Σ_k ż_k C₁_kl + (M_zz a_z)_l

These are the virtual power of ``Σ_ab m_ab δx_a·(ẍ_b − g)``. :func:`body_forces` returns them with their partial
derivatives with respect to ``q``, ``z``, the accelerations (the generalized mass — the paper's M1…M6) and the
explicit ``ω``, ``ż`` (centrifugal and Coriolis terms). Compiled with numba (no Python objects), so the engine's
time loop can call it; also callable from Python (tests).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from retarget.jit import njit
from retarget.sim.reduced.tensors import InertiaTensors
from retarget.sim.rotation_kernels import rotation_matrix

__all__ = ["body_force", "body_forces", "rotation_and_derivative"]


@njit(cache=True)
def rotation_and_derivative(q: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``R(q) = N(q)/(q·q)`` (3, 3) and ``∂R/∂q_k`` (4, 3, 3) (homogeneous form of :mod:`retarget.sim.rotation`)."""
    w, x, y, z = q[0], q[1], q[2], q[3]
    s = w * w + x * x + y * y + z * z
    r = rotation_matrix(q)
    dn = np.empty((4, 3, 3))
    dn[0] = np.array([[w, -z, y], [z, w, -x], [-y, x, w]])
    dn[1] = np.array([[x, y, z], [y, -x, -w], [z, w, -x]])
    dn[2] = np.array([[-y, x, w], [x, y, z], [-w, z, -y]])
    dn[3] = np.array([[-z, -w, x], [w, -z, y], [x, y, z]])
    dr = np.empty((4, 3, 3))
    for k in range(4):
        dr[k] = 2.0 * dn[k] / s - 2.0 * q[k] * r / s
    return r, dr


@njit(cache=True, inline="always")
def _cross(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.empty(3)
    out[0] = a[1] * b[2] - a[2] * b[1]
    out[1] = a[2] * b[0] - a[0] * b[2]
    out[2] = a[0] * b[1] - a[1] * b[0]
    return out


@njit(cache=True, inline="always")
def _skew(a: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.zeros((3, 3))
    out[0, 1] = -a[2]
    out[0, 2] = a[1]
    out[1, 0] = a[2]
    out[1, 2] = -a[0]
    out[2, 0] = -a[1]
    out[2, 1] = a[0]
    return out


@njit(cache=True)
def _force_terms(rot, z, zdot, omega, acc_v, acc_w, acc_z, gravity, inertia):  # type: ignore[no-untyped-def]
    """``f`` and the intermediate terms :func:`body_forces` differentiates (see the module docstring), at the
    reference body's rotation ``rot``, for the body's tensors ``inertia``.

    Scalar loops throughout: the operands are 3-vectors and r × 3 blocks, for which a BLAS call costs more than the
    arithmetic, and the r² sums sweep ``P₂`` and ``C₁`` in memory order.
    """
    mass, s0, s1, p0, p1, p2, c0, c1, m_zz = inertia
    nr = z.shape[0]
    rel = acc_v - gravity
    e = np.empty(3)
    s = np.empty(3)
    sdot = np.empty(3)
    sacc = np.empty(3)
    for i in range(3):
        e[i] = rot[0, i] * rel[0] + rot[1, i] * rel[1] + rot[2, i] * rel[2]
        a = s0[i]
        b = 0.0
        c = 0.0
        for k in range(nr):
            a += s1[i, k] * z[k]
            b += s1[i, k] * zdot[k]
            c += s1[i, k] * acc_z[k]
        s[i] = a
        sdot[i] = b
        sacc[i] = c
    # B_l = P₁_l + Σ_k z_k P₂_lk
    bm = p1.copy()
    for l in range(nr):
        for k in range(nr):
            zk = z[k]
            if zk != 0.0:
                for i in range(3):
                    for j in range(3):
                        bm[l, i, j] += zk * p2[l, k, i, j]
    # C_l = C₀_l + Σ_k z_k C₁_kl and ck_l = Σ_k ż_k C₁_kl (3,)
    cm = c0.copy()
    ck = np.zeros((nr, 3))
    for k in range(nr):
        zk = z[k]
        zdk = zdot[k]
        for l in range(nr):
            for i in range(3):
                v = c1[k, l, i]
                cm[l, i] += zk * v
                ck[l, i] += zdk * v
    pm = p0.copy()
    qm = np.zeros((3, 3))
    tr_b = np.empty(nr)
    for k in range(nr):
        tr_b[k] = bm[k, 0, 0] + bm[k, 1, 1] + bm[k, 2, 2]
        zk = z[k]
        zdk = zdot[k]
        for i in range(3):
            for j in range(3):
                pm[i, j] += zk * (p1[k, i, j] + bm[k, j, i])
                qm[i, j] += zdk * bm[k, i, j]
    tr_p = pm[0, 0] + pm[1, 1] + pm[2, 2]
    tr_q = qm[0, 0] + qm[1, 1] + qm[2, 2]
    jm = np.empty((3, 3))
    gq = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            jm[i, j] = -pm[i, j]
            gq[i, j] = -2.0 * qm[i, j]
        jm[i, i] += tr_p
        gq[i, i] += 2.0 * tr_q
    ws = _cross(omega, s)
    psi = _cross(acc_w, s) + _cross(omega, ws) + 2.0 * _cross(omega, sdot) + sacc
    jw = np.empty(3)
    rest = np.empty(3)  # J a_ω + G ω + Σ_l a_z,l C_l
    for i in range(3):
        jw[i] = jm[i, 0] * omega[0] + jm[i, 1] * omega[1] + jm[i, 2] * omega[2]
        val = 0.0
        for a in range(3):
            val += jm[i, a] * acc_w[a] + gq[i, a] * omega[a]
        for l in range(nr):
            val += cm[l, i] * acc_z[l]
        rest[i] = val
    w2 = omega[0] * omega[0] + omega[1] * omega[1] + omega[2] * omega[2]

    f = np.empty(6 + nr)
    se = _cross(s, e)
    wjw = _cross(omega, jw)
    for i in range(3):
        f[i] = mass * rel[i] + rot[i, 0] * psi[0] + rot[i, 1] * psi[1] + rot[i, 2] * psi[2]
        f[3 + i] = se[i] + wjw[i] + rest[i]
    for l in range(nr):
        val = s1[0, l] * e[0] + s1[1, l] * e[1] + s1[2, l] * e[2] - w2 * tr_b[l]
        for i in range(3):
            bo = bm[l, i, 0] * omega[0] + bm[l, i, 1] * omega[1] + bm[l, i, 2] * omega[2]
            val += acc_w[i] * cm[l, i] + omega[i] * (bo + 2.0 * ck[l, i])
        for k in range(nr):
            val += m_zz[l, k] * acc_z[k]
        f[6 + l] = val

    return f, rel, e, s, sdot, cm, bm, tr_b, jm, gq, ws, psi, jw, w2, ck


@njit(cache=True)
def body_force(
    q: NDArray[np.float64],
    z: NDArray[np.float64],
    zdot: NDArray[np.float64],
    omega: NDArray[np.float64],
    acc_v: NDArray[np.float64],
    acc_w: NDArray[np.float64],
    acc_z: NDArray[np.float64],
    gravity: NDArray[np.float64],
    inertia: InertiaTensors,
) -> NDArray[np.float64]:
    """The force ``f`` (6+r,) of :func:`body_forces` alone (residual-only Newton iterations)."""
    return _force_terms(rotation_matrix(q), z, zdot, omega, acc_v, acc_w, acc_z, gravity, inertia)[0]


@njit(cache=True, inline="always")
def _force_z_derivative(
    rot: NDArray[np.float64],
    omega: NDArray[np.float64],
    acc_w: NDArray[np.float64],
    acc_z: NDArray[np.float64],
    zdot: NDArray[np.float64],
    e: NDArray[np.float64],
    w2: float,
    bm: NDArray[np.float64],
    tr_b: NDArray[np.float64],
    p2: NDArray[np.float64],
    s1: NDArray[np.float64],
    c1: NDArray[np.float64],
) -> NDArray[np.float64]:
    """``∂f/∂z`` (6+r, r) of :func:`body_forces` at fixed ω, ż and accelerations (the terms of
    :func:`_force_terms`: ``e`` (3,), ``w2 = |ω|²``, ``bm`` (r, 3, 3), ``tr_b`` (r,))."""
    nr = zdot.shape[0]
    f_z = np.zeros((6 + nr, nr))
    # ωᵀ P ω − |ω|² tr P = Σ_ij W_ij P_ij with W = ωωᵀ − |ω|² I
    wm = np.outer(omega, omega)
    for i in range(3):
        wm[i, i] -= w2
    dq = np.empty((3, 3))
    for k in range(nr):
        ds = s1[:, k].copy()
        f_z[0:3, k] = rot @ (_cross(acc_w, ds) + _cross(omega, _cross(omega, ds)))
        dj = -(bm[k] + bm[k].T)
        dq[:, :] = 0.0
        for m in range(nr):
            zm = zdot[m]
            if zm != 0.0:
                pmk = p2[m, k]
                for i in range(3):
                    for j in range(3):
                        dq[i, j] += zm * pmk[i, j]
        tr_dq = dq[0, 0] + dq[1, 1] + dq[2, 2]
        gdq = -2.0 * dq
        for i in range(3):
            dj[i, i] += 2.0 * tr_b[k]
            gdq[i, i] += 2.0 * tr_dq
        col = _cross(ds, e) + dj @ acc_w + _cross(omega, dj @ omega) + gdq @ omega
        for l in range(nr):
            al = acc_z[l]
            ckl = c1[k, l]
            for i in range(3):
                col[i] += al * ckl[i]
        f_z[3:6, k] = col
        for l in range(nr):
            pk = p2[l, k]
            ckl = c1[k, l]
            val = acc_w[0] * ckl[0] + acc_w[1] * ckl[1] + acc_w[2] * ckl[2]
            for i in range(3):
                for j in range(3):
                    val += wm[i, j] * pk[i, j]
            f_z[6 + l, k] = val

    return f_z


@njit(cache=True)
def body_forces(
    q: NDArray[np.float64],
    z: NDArray[np.float64],
    zdot: NDArray[np.float64],
    omega: NDArray[np.float64],
    acc_v: NDArray[np.float64],
    acc_w: NDArray[np.float64],
    acc_z: NDArray[np.float64],
    gravity: NDArray[np.float64],
    inertia: InertiaTensors,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Generalized inertial-minus-gravity force ``f = [f_v, f_ω, f_z]`` (6 + r,) and its partial derivatives.

    Args:
        q: reference body quaternion (4,). z, zdot: (r,). omega: body-frame ω (3,) [rad/s].
        acc_v: world ``a_v`` (3,) [m/s²]. acc_w: ``a_ω`` (3,) [rad/s²]. acc_z: (r,).
        gravity: world g (3,) [m/s²].
        inertia: the body's :class:`~retarget.sim.reduced.tensors.InertiaTensors`.

    Returns:
        ``f`` (6+r,) [N, N m, N·m/unit z]; ``f_q`` (6+r, 4); ``f_z`` (6+r, r); ``f_acc`` (6+r, 6+r) the
        generalized mass (columns a_v, a_ω, a_z; symmetric); ``f_w`` (6+r, 3) and ``f_zd`` (6+r, r): the
        derivatives with respect to the explicit ω and ż.
    """
    nr = z.shape[0]
    nf = 6 + nr
    rot, drot = rotation_and_derivative(q)
    f, rel, e, s, sdot, cm, bm, tr_b, jm, gq, ws, psi, jw, w2, ck = _force_terms(
        rot, z, zdot, omega, acc_v, acc_w, acc_z, gravity, inertia
    )
    mass, s1, p2, c1, m_zz = inertia.mass, inertia.s1, inertia.p2, inertia.c1, inertia.m_zz

    # Generalized mass (accelerations a_v, a_ω, a_z).
    f_acc = np.zeros((nf, nf))
    sk_s = _skew(s)
    for i in range(3):
        f_acc[i, i] = mass
    f_acc[0:3, 3:6] = -rot @ sk_s
    f_acc[0:3, 6:] = rot @ s1
    f_acc[3:6, 0:3] = sk_s @ rot.T
    f_acc[3:6, 3:6] = jm
    f_acc[3:6, 6:] = cm.T
    f_acc[6:, 0:3] = s1.T @ rot.T
    f_acc[6:, 3:6] = cm
    f_acc[6:, 6:] = m_zz

    # Explicit ω.
    f_w = np.zeros((nf, 3))
    sk_w = _skew(omega)
    f_w[0:3, :] = rot @ (-_skew(ws) - sk_w @ sk_s - 2.0 * _skew(sdot))
    f_w[3:6, :] = sk_w @ jm - _skew(jw) + gq
    for l in range(nr):
        bsym = bm[l] + bm[l].T
        f_w[6 + l, :] = bsym @ omega - 2.0 * tr_b[l] * omega + 2.0 * ck[l]

    # Explicit ż. (Scalar loops over the r × r pairs: no temporaries in the O(r²) parts.)
    f_zd = np.zeros((nf, nr))
    om0, om1, om2 = omega[0], omega[1], omega[2]
    for k in range(nr):
        f_zd[0:3, k] = rot @ (2.0 * _cross(omega, s1[:, k]))
        f_zd[3:6, k] = 2.0 * (tr_b[k] * omega - bm[k] @ omega)
        for l in range(nr):
            ckl = c1[k, l]
            f_zd[6 + l, k] = 2.0 * (om0 * ckl[0] + om1 * ckl[1] + om2 * ckl[2])

    # z.
    f_z = _force_z_derivative(rot, omega, acc_w, acc_z, zdot, e, w2, bm, tr_b, p2, s1, c1)

    # q (through R in f_v and Rᵀ in e).
    f_q = np.zeros((nf, 4))
    for j in range(4):
        de = drot[j].T @ rel
        f_q[0:3, j] = drot[j] @ psi
        f_q[3:6, j] = _cross(s, de)
        f_q[6:, j] = s1.T @ de
    return f, f_q, f_z, f_acc, f_w, f_zd

