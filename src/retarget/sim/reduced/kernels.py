"""Compiled (numba) constraint rows of the reduced engine: joints, motors and reduced couplings.

Same mathematics and row order as :class:`retarget.sim.constraints.JointConstraint` and
:class:`~retarget.sim.constraints.CouplingConstraint` (the reference implementations the tests compare against),
written generically over the element type of the local vector: ``complex128`` keeps them holomorphic (the engine
obtains the curvature terms of the Newton Jacobian, ``∂(C_yᵀλ)/∂y`` and ``∂(C_y ẏ)/∂y``, by complex steps of the
analytic ``∂C/∂y``, exactly like the reference stepper), ``float64`` gives the same values and first derivatives
about four times cheaper for the residual-only chord-Newton iterations (numba compiles one specialization each). A block acts on its *local vector* ``ul``:

- joint: ``[c_a, q_a, c_b, q_b]`` of the bodies present (a world side is the identity pose and has no entries);
- coupling: ``[c_o, q_o]`` of the coupled body when it is not the reference body, then ``[c_r, q_r]`` of the
  reference body, then ``z`` of the deformable body. The coupling slot ``[x̄, vec A]`` is
  ``[c_r + R_r ŷ_x̄, vec(R_r Â)]`` with ``ŷ = y₀ + Y z`` (:func:`retarget.sim.reduced.tensors.reduce_interface`).

The motor row's ``θ`` derivatives are analytic (``C_θ`` and ``∂C_y/∂θ``), so θ needs no complex step.
"""
from __future__ import annotations

import numba
import numpy as np
from numba.extending import overload
from numpy.typing import NDArray

from retarget.sim.joint_kernels import along_row, joint_frames, joint_geometric_rows
from retarget.sim.rotation_kernels import rotate_with_jacobian, rotation_matrix
from retarget.jit import njit

__all__ = ["COUPLING_CODE", "JOINT_CODES", "block_eval", "coupling_curvature", "polar_complex"]

#: Integer codes of the joint kinds (same names as :data:`retarget.sim.constraints.JOINT_KINDS`).
JOINT_CODES: dict[str, int] = {"fixed": 0, "hinge": 1, "universal": 2, "ball": 3, "prismatic": 4}
#: Code of a reduced coupling block.
COUPLING_CODE: int = 5


@njit(cache=True)
def _joint_rows(
    kind: int,
    motorized: bool,
    anchor_a: NDArray,
    anchor_b: NDArray,
    axes_a: NDArray,
    axes_b: NDArray,
    y: NDArray,
    theta: float,
) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """``C`` (k,), ``∂C/∂y`` (k, 14), ``C_θ`` (k,), ``∂C_y/∂θ`` (k, 14) over ``y = [c_a, q_a, c_b, q_b]``.

    The rows without the motor are the full path's (:mod:`retarget.sim.joint_kernels`); the motor row's ``θ``
    derivatives are analytic here.
    """
    gap, da, db, jra, jrb, jda, jdb = joint_frames(anchor_a, anchor_b, axes_a, axes_b, y)
    dt = y.dtype
    c = np.zeros(7, dtype=dt)
    jac = np.zeros((7, 14), dtype=dt)
    c_th = np.zeros(7, dtype=dt)
    jac_th = np.zeros((7, 14), dtype=dt)
    row = joint_geometric_rows(kind, gap, da, db, jra, jrb, jda, jdb, c, jac)
    if motorized:
        if kind == 1:
            s, co = np.sin(theta), np.cos(theta)
            a1b1 = da[0, 0] * db[0, 0] + da[0, 1] * db[0, 1] + da[0, 2] * db[0, 2]
            a2b1 = da[1, 0] * db[0, 0] + da[1, 1] * db[0, 1] + da[1, 2] * db[0, 2]
            c[row] = s * a1b1 - co * a2b1
            c_th[row] = co * a1b1 + s * a2b1
            for m in range(4):
                g0 = db[0, 0] * jda[0, 0, m] + db[0, 1] * jda[0, 1, m] + db[0, 2] * jda[0, 2, m]
                g1 = db[0, 0] * jda[1, 0, m] + db[0, 1] * jda[1, 1, m] + db[0, 2] * jda[1, 2, m]
                h0 = da[0, 0] * jdb[0, 0, m] + da[0, 1] * jdb[0, 1, m] + da[0, 2] * jdb[0, 2, m]
                h1 = da[1, 0] * jdb[0, 0, m] + da[1, 1] * jdb[0, 1, m] + da[1, 2] * jdb[0, 2, m]
                jac[row, 3 + m] = s * g0 - co * g1
                jac[row, 10 + m] = s * h0 - co * h1
                jac_th[row, 3 + m] = co * g0 + s * g1
                jac_th[row, 10 + m] = co * h0 + s * h1
        else:
            along_row(2, theta, gap, da, jra, jrb, jda, c, jac, row)
            c_th[row] = -1.0
        row += 1
    return c[:row], jac[:row], c_th[:row], jac_th[:row]


@njit(cache=True)
def _svd_polar(a: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Real polar decomposition ``A = R S`` (proper R), as ``rotation._polar_real``."""
    u, _, vt = np.linalg.svd(a)
    # LAPACK's factors are Fortran-ordered: C copies keep one layout for u below (numba warned about ``@`` on
    # mixed layouts).
    u, vt = np.ascontiguousarray(u), np.ascontiguousarray(vt)
    if np.linalg.det(u @ vt) < 0.0:
        u[:, 2] = -u[:, 2]
    r = u @ vt
    s = r.T @ a
    return r, 0.5 * (s + s.T)


@njit(cache=True)
def polar_complex(a: NDArray[np.complex128]) -> tuple[NDArray[np.complex128], NDArray[np.complex128]]:
    """Polar decomposition continued to first order in ``Im A`` (``rotation.polar_decomposition``): ``(R, Rᵀ A)``."""
    r0, s0 = _svd_polar(np.ascontiguousarray(a.real))
    a1 = np.ascontiguousarray(a.imag)
    m = np.trace(s0) * np.eye(3) - s0
    g = r0.T @ a1
    ax = np.empty(3)
    ax[0] = g[2, 1] - g[1, 2]
    ax[1] = g[0, 2] - g[2, 0]
    ax[2] = g[1, 0] - g[0, 1]
    om = np.linalg.solve(m, ax)
    sk = np.zeros((3, 3))
    sk[0, 1], sk[0, 2], sk[1, 0], sk[1, 2], sk[2, 0], sk[2, 1] = -om[2], om[1], om[2], -om[0], -om[1], om[0]
    r = r0 + 1j * (r0 @ sk)
    return r, r.T @ a


def _polar(a: NDArray) -> tuple[NDArray, NDArray]:
    """``(R, Rᵀ A)`` of the polar decomposition for real or complex ``A`` (3, 3); compiled through its overload."""
    raise NotImplementedError("only callable from numba-compiled code")


@overload(_polar)
def _polar_overload(a):  # type: ignore[no-untyped-def]
    if isinstance(a.dtype, numba.types.Complex):
        return lambda a: polar_complex(a)

    def real(a):  # type: ignore[no-untyped-def]
        r, _ = _svd_polar(np.ascontiguousarray(a))
        return r, r.T @ a

    return real


@njit(cache=True)
def _coupling_rows(ref: NDArray, rigid_present: bool, y: NDArray) -> tuple[NDArray, NDArray]:
    """``C`` (6,) and ``∂C/∂y`` (6, 19) over ``y = [c, q, x̄, vec A]`` (world: ``c = 0``, ``q = 1``).

    Args:
        ref: ``X̄ − c₀`` (3,) [m] (reference centroid minus the coupled body's reference COM).
    """
    dt = y.dtype
    c = np.empty(6, dtype=dt)
    jac = np.zeros((6, 19), dtype=dt)
    q = y[3:7]
    rot = rotation_matrix(q)
    gap = y[7:10] - y[0:3]
    qc = q.copy()
    qc[1:] = -qc[1:]
    rott = rot.T.copy()
    rtg, jt = rotate_with_jacobian(qc, rott, gap)  # R(q*) gap = Rᵀ gap
    for k in range(3):
        c[k] = ref[k] - rtg[k]
        for m in range(3):
            jac[k, m] = rott[k, m]
            jac[k, 7 + m] = -rott[k, m]
        jac[k, 3] = -jt[k, 0]
        for m in range(1, 4):
            jac[k, 3 + m] = jt[k, m]  # −(∂/∂q*)·(−1)
    amat = np.empty((3, 3), dtype=dt)
    for i in range(3):
        for j in range(3):
            amat[i, j] = y[10 + 3 * i + j]
    rp, s = _polar(amat)
    minv = np.linalg.inv(np.trace(s) * np.eye(3) - s)
    for k in range(3):
        i0 = k
        j0 = (k + 1) % 3
        ej = np.zeros(3)
        ej[j0] = 1.0
        fj, jf = rotate_with_jacobian(q, rot, ej)
        rpi = rp[:, i0].copy()
        c[3 + k] = rpi[0] * fj[0] + rpi[1] * fj[1] + rpi[2] * fj[2]
        for m in range(4):
            jac[3 + k, 3 + m] = rpi[0] * jf[0, m] + rpi[1] * jf[1, m] + rpi[2] * jf[2, m]
        rtf = rp.T @ fj
        # e_i × R_pᵀ f_j
        ex = np.zeros(3, dtype=dt)
        ex[(i0 + 1) % 3] = -rtf[(i0 + 2) % 3]
        ex[(i0 + 2) % 3] = rtf[(i0 + 1) % 3]
        zz = minv @ ex
        sk = np.zeros((3, 3), dtype=dt)
        sk[0, 1], sk[0, 2], sk[1, 0], sk[1, 2], sk[2, 0], sk[2, 1] = -zz[2], zz[1], zz[2], -zz[0], -zz[1], zz[0]
        dca = rp @ sk
        for i in range(3):
            for j in range(3):
                jac[3 + k, 10 + 3 * i + j] = dca[i, j]
    if not rigid_present:
        for k in range(6):
            for m in range(7):
                jac[k, m] = 0.0
    return c, jac


@njit(cache=True)
def _coupling_map(present_a: bool, separate: bool, y0: NDArray[np.float64], ymap: NDArray[np.float64],
                  ul: NDArray) -> tuple[NDArray, NDArray]:
    """A coupling's slot ``y = [c, q, x̄, vec A]`` (19,) and ``∂y/∂ul`` (19, n) from its local vector (see
    :func:`block_eval`): ``x̄ = c_r + R_r ŷ_x̄``, ``A = R_r Â``, ``ŷ = y₀ + Y z``. Affine in positions and ``z``;
    its only second derivatives are in the reference quaternion (with itself and with ``z``)."""
    n = ul.shape[0]
    o = 7 if separate else 0
    nz = n - o - 7
    qr = ul[o + 3 : o + 7]
    rot = rotation_matrix(qr)
    yh = np.empty(12, dtype=ul.dtype)
    for i in range(12):
        acc = ul[0] * 0.0 + y0[i]
        for l in range(nz):
            acc += ymap[i, l] * ul[o + 7 + l]
        yh[i] = acc
    y = np.zeros(19, dtype=ul.dtype)
    dy = np.zeros((19, n), dtype=ul.dtype)
    if present_a:
        src = 0 if separate else o
        for k in range(7):
            y[k] = ul[src + k]
            dy[k, src + k] = 1.0
    else:
        y[3] = 1.0
    xr, jx = rotate_with_jacobian(qr, rot, yh[0:3])
    for i in range(3):
        y[7 + i] = ul[o + i] + xr[i]
        dy[7 + i, o + i] = 1.0
        for m in range(4):
            dy[7 + i, o + 3 + m] = jx[i, m]
        for l in range(nz):
            dy[7 + i, o + 7 + l] = rot[i, 0] * ymap[0, l] + rot[i, 1] * ymap[1, l] + rot[i, 2] * ymap[2, l]
    for j in range(3):
        col = np.empty(3, dtype=ul.dtype)
        for m in range(3):
            col[m] = yh[3 + 3 * m + j]
        ac, ja = rotate_with_jacobian(qr, rot, col)
        for i in range(3):
            y[10 + 3 * i + j] = ac[i]
            for m in range(4):
                dy[10 + 3 * i + j, o + 3 + m] = ja[i, m]
            for l in range(nz):
                dy[10 + 3 * i + j, o + 7 + l] = (
                    rot[i, 0] * ymap[3 + j, l] + rot[i, 1] * ymap[6 + j, l] + rot[i, 2] * ymap[9 + j, l]
                )
    return y, dy


@njit(cache=True)
def _coupling_eval(ref: NDArray[np.float64], present_a: bool, separate: bool, y0: NDArray[np.float64],
                   ymap: NDArray[np.float64], ul: NDArray) -> tuple[NDArray, NDArray]:
    """A coupling's ``C`` (6,) and ``∂C/∂ul`` (6, n): the slot rows composed with the slot map."""
    y, dy = _coupling_map(present_a, separate, y0, ymap, ul)
    c, jac = _coupling_rows(ref, present_a, y)
    return c, jac @ dy


@njit(cache=True)
def block_eval(
    kind: int,
    motorized: bool,
    present_a: bool,
    present_b: bool,
    fvec: NDArray[np.float64],
    fmat: NDArray[np.float64],
    separate: bool,
    y0: NDArray[np.float64],
    ymap: NDArray[np.float64],
    ul: NDArray[np.complex128],
    theta: float,
) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """``C`` (k,), ``∂C/∂ul`` (k, n), ``C_θ`` (k,) and ``∂²C/∂ul∂θ`` (k, n) of one block at its local vector.

    Args:
        kind: :data:`JOINT_CODES` value or :data:`COUPLING_CODE`.
        motorized: the block carries a motor row (joints).
        present_a, present_b: joint sides that are bodies; for a coupling ``present_a`` = coupled to a rigid body.
        fvec: joints: ``[anchor_a, anchor_b]`` (6,) [m]; couplings: ``[X̄ − c₀]`` (3,) [m].
        fmat: joints: ``[axes_a; axes_b]`` (6, 3); couplings: unused.
        separate: coupling to a rigid body other than the reference body (its pose leads ``ul``).
        y0, ymap: the reduced interface ``ŷ = y₀ + Y z`` (12,), (12, r) (couplings).
        ul: local vector (n,): ``float64`` for values, ``complex128`` for complex steps (outputs have its type).
        theta: motor value [rad] or [m].
    """
    n = ul.shape[0]
    if kind != COUPLING_CODE:
        y = np.zeros(14, dtype=ul.dtype)
        y[3] = 1.0
        y[10] = 1.0
        cols = np.empty(14, dtype=np.int64)
        nc = 0
        if present_a:
            for k in range(7):
                y[k] = ul[k]
                cols[nc] = k
                nc += 1
        if present_b:
            off = 7 if present_a else 0
            for k in range(7):
                y[7 + k] = ul[off + k]
                cols[nc] = 7 + k
                nc += 1
        c, jac, c_th, jac_th = _joint_rows(kind, motorized, fvec[0:3], fvec[3:6], fmat[0:3], fmat[3:6], y, theta)
        rows = c.shape[0]
        cu = np.empty((rows, n), dtype=ul.dtype)
        cu_th = np.empty((rows, n), dtype=ul.dtype)
        for k in range(nc):
            cu[:, k] = jac[:, cols[k]]
            cu_th[:, k] = jac_th[:, cols[k]]
        return c, cu, c_th, cu_th
    c, cu = _coupling_eval(fvec[0:3], present_a, separate, y0, ymap, ul)
    return c, cu, np.zeros(6, dtype=ul.dtype), np.zeros((6, n), dtype=ul.dtype)


@njit(cache=True)
def coupling_curvature(
    fvec: NDArray[np.float64],
    present_a: bool,
    separate: bool,
    y0: NDArray[np.float64],
    ymap: NDArray[np.float64],
    ul: NDArray[np.float64],
    lam: NDArray[np.float64],
    ydot: NDArray[np.float64],
    step: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """A coupling block's curvature terms of the exact Jacobian, by the chain rule through its slot ``y(ul)``.

    Returns ``∂(C_ul ẏ)/∂ul`` (6, n) and ``∂(C_ulᵀ λ)/∂ul`` (n, n), the quantities the engine otherwise gets from one
    complex step of :func:`block_eval` per local coordinate (``n`` = 7–14 + r). Here, with ``C(ul) = C_y(y(ul))``:

    - ``∂(C_ul ẏ)/∂ul`` column ``j`` is ``Σ_m ∂²C/∂ul_j∂ul_m ẏ_m`` (symmetric second derivatives): one complex
      step of the whole block along ``ẏ``;
    - ``∂(C_ulᵀ λ)/∂ul = Yᵀ H Y + Σ_k g_k ∇²y_k`` with ``Y = ∂y/∂ul``, ``H = ∂(C_yᵀλ)/∂y`` (13 complex steps of
      the slot rows, independent of r), ``g = C_yᵀ λ``, and ``∇²y`` nonzero only in the reference quaternion's rows
      and columns (four complex steps of the slot map, :func:`_coupling_map`).

    Args:
        fvec, present_a, separate, y0, ymap: the block's data (:func:`block_eval`). ul: local vector (n,).
        lam: the block's multipliers (6,). ydot: ``ẏ`` (n,). step: the complex step.
    """
    n = ul.shape[0]
    o = 7 if separate else 0
    ref = fvec[0:3]
    ulc = ul.astype(np.complex128)
    for m in range(n):
        ulc[m] = ul[m] + 1j * step * ydot[m]
    curv_dot = np.ascontiguousarray(_coupling_eval(ref, present_a, separate, y0, ymap, ulc)[1].imag) / step
    for m in range(n):
        ulc[m] = ul[m]
    y, dy = _coupling_map(present_a, separate, y0, ymap, ul)
    _, jr = _coupling_rows(ref, present_a, y)
    g = jr.T @ lam
    # Slot rows: positions c and x̄ (slots 0–2, 7–9) enter only through R(q)ᵀ(x̄ − c), so they pair with q alone;
    # their columns of H come from the q columns by symmetry (13 complex steps instead of 19).
    hy = np.zeros((19, 19))
    yk = y.astype(np.complex128)
    for k in range(19):
        if k < 3 or 7 <= k < 10:
            continue
        yk[k] = y[k] + 1j * step
        _, jk = _coupling_rows(ref, present_a, yk)
        yk[k] = y[k]
        col = (np.ascontiguousarray(jk.imag) / step).T @ lam
        for m in range(19):
            hy[m, k] = col[m]
    for k in (0, 1, 2, 7, 8, 9):
        for m in range(3, 7):
            hy[m, k] = hy[k, m]
    hess = dy.T @ (hy @ dy)
    for a in range(4):
        m = o + 3 + a
        ulc[m] = ul[m] + 1j * step
        _, dym = _coupling_map(present_a, separate, y0, ymap, ulc)
        ulc[m] = ul[m]
        row = (np.ascontiguousarray(dym.imag) / step).T @ g  # Σ_k g_k ∂²y_k/∂ul ∂ul_m
        for j in range(n):
            hess[j, m] += row[j]
            if j < o + 3 or j >= o + 7:  # the quaternion block itself comes in once, from its own column
                hess[m, j] += row[j]
    return curv_dot, hess
