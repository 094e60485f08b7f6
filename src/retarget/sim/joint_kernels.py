"""Compiled (numba) joint constraint rows shared by the two compiled paths: the full-space joint kernels
(:mod:`retarget.sim.kernels`) and the reduced engine's blocks (:mod:`retarget.sim.reduced.kernels`).

The geometric rows of a joint between sides ``a`` and ``b`` over the local vector ``y = [c_a, q_a, c_b, q_b]``
(14,), in the row order of :meth:`retarget.sim.constraints.JointConstraint.evaluate`, which stays the NumPy
reference the tests compare both paths against. Each path adds its own motor row: the full path takes ``θ``
derivatives by complex steps, the reduced path analytically. Every function works in ``y``'s element type
(``float64`` or ``complex128``, for complex steps).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from retarget.sim.rotation_kernels import rotate_with_jacobian, rotation_matrix
from retarget.jit import njit

__all__ = ["along_row", "joint_frames", "joint_geometric_rows"]


@njit(cache=True)
def joint_frames(
    anchor_a: NDArray, anchor_b: NDArray, axes_a: NDArray, axes_b: NDArray, y: NDArray
) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray, NDArray, NDArray]:
    """The joint's world anchors and axes and their quaternion Jacobians.

    Args:
        anchor_a, anchor_b: Body-frame anchors (3,) [m]. axes_a, axes_b: body-frame joint frames (3, 3) (rows).
        y: ``[c_a, q_a, c_b, q_b]`` (14,) (a world side holds the identity pose).

    Returns:
        ``gap = p_b − p_a`` (3,) [m]; world axes ``da``, ``db`` (3, 3) (rows); ``∂(R_a anchor_a)/∂q_a``,
        ``∂(R_b anchor_b)/∂q_b`` (3, 4) [m]; ``∂da_k/∂q_a``, ``∂db_k/∂q_b`` (3, 3, 4).
    """
    ra = rotation_matrix(y[3:7])
    rb = rotation_matrix(y[10:14])
    pa, jra = rotate_with_jacobian(y[3:7], ra, anchor_a)
    pb, jrb = rotate_with_jacobian(y[10:14], rb, anchor_b)
    for i in range(3):
        pa[i] += y[i]
        pb[i] += y[7 + i]
    dt = y.dtype
    da = np.empty((3, 3), dtype=dt)
    db = np.empty((3, 3), dtype=dt)
    jda = np.empty((3, 3, 4), dtype=dt)
    jdb = np.empty((3, 3, 4), dtype=dt)
    for k in range(3):
        d, j = rotate_with_jacobian(y[3:7], ra, axes_a[k])
        da[k] = d
        jda[k] = j
        d, j = rotate_with_jacobian(y[10:14], rb, axes_b[k])
        db[k] = d
        jdb[k] = j
    return pb - pa, da, db, jra, jrb, jda, jdb


@njit(cache=True)
def along_row(i: int, offset: complex, gap: NDArray, da: NDArray, jra: NDArray, jrb: NDArray,
              jda: NDArray, c: NDArray, jac: NDArray, row: int) -> None:
    """Row ``row`` of ``C = gap · da_i − offset`` [m] and its ``∂C/∂y`` (14,) (prismatic rows and its motor)."""
    zero = gap[0] * 0.0
    c[row] = gap[0] * da[i, 0] + gap[1] * da[i, 1] + gap[2] * da[i, 2] - offset
    for k in range(3):
        jac[row, k] = -da[i, k]
        jac[row, 7 + k] = da[i, k]
    for m in range(4):
        acc_a = zero
        acc_b = zero
        for k in range(3):
            acc_a += -da[i, k] * jra[k, m] + gap[k] * jda[i, k, m]
            acc_b += da[i, k] * jrb[k, m]
        jac[row, 3 + m] = acc_a
        jac[row, 10 + m] = acc_b


@njit(cache=True)
def joint_geometric_rows(kind: int, gap: NDArray, da: NDArray, db: NDArray, jra: NDArray, jrb: NDArray,
                         jda: NDArray, jdb: NDArray, c: NDArray, jac: NDArray) -> int:
    """Write the joint's rows without its motor into ``c`` (≥ 6,) and ``jac`` (≥ 6, 14) from the first row on.

    ``jac`` must be zero on entry (only its non-zero entries are written). Kinds as
    :data:`retarget.sim.kernels.JOINT_KIND_CODES`: fixed 0, hinge 1, universal 2, ball 3, prismatic 4; the
    arguments are :func:`joint_frames`'. Returns the number of rows written.
    """
    # Operation list mirroring JointConstraint.evaluate: (op, i, j), op 0 point, 1 dot, 2 along.
    ops = np.zeros((6, 3), dtype=np.int64)
    n_ops = 0
    if kind == 0 or kind == 4:
        ops[0, 0], ops[0, 1], ops[0, 2] = 1, 0, 1
        ops[1, 0], ops[1, 1], ops[1, 2] = 1, 1, 2
        ops[2, 0], ops[2, 1], ops[2, 2] = 1, 2, 0
        n_ops = 3
    if kind <= 3:
        ops[n_ops, 0] = 0
        n_ops += 1
    if kind == 1:
        ops[n_ops, 0], ops[n_ops, 1], ops[n_ops, 2] = 1, 0, 2
        ops[n_ops + 1, 0], ops[n_ops + 1, 1], ops[n_ops + 1, 2] = 1, 1, 2
        n_ops += 2
    elif kind == 2:
        ops[n_ops, 0], ops[n_ops, 1], ops[n_ops, 2] = 1, 0, 1
        n_ops += 1
    elif kind == 4:
        ops[n_ops, 0], ops[n_ops, 1] = 2, 0
        ops[n_ops + 1, 0], ops[n_ops + 1, 1] = 2, 1
        n_ops += 2
    row = 0
    for o in range(n_ops):
        op, i, j = ops[o, 0], ops[o, 1], ops[o, 2]
        if op == 0:
            for k in range(3):
                c[row + k] = gap[k]
                jac[row + k, k] = -1.0
                jac[row + k, 7 + k] = 1.0
                for m in range(4):
                    jac[row + k, 3 + m] = -jra[k, m]
                    jac[row + k, 10 + m] = jrb[k, m]
            row += 3
        elif op == 1:
            c[row] = da[i, 0] * db[j, 0] + da[i, 1] * db[j, 1] + da[i, 2] * db[j, 2]
            for m in range(4):
                jac[row, 3 + m] = db[j, 0] * jda[i, 0, m] + db[j, 1] * jda[i, 1, m] + db[j, 2] * jda[i, 2, m]
                jac[row, 10 + m] = da[i, 0] * jdb[j, 0, m] + da[i, 1] * jdb[j, 1, m] + da[i, 2] * jdb[j, 2, m]
            row += 1
        else:
            along_row(i, 0.0, gap, da, jra, jrb, jda, c, jac, row)
            row += 1
    return row
