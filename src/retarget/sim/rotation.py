"""Quaternions, rotation matrices and the polar decomposition, with their exact derivatives.

Conventions: a quaternion is ``q = (w, x, y, z)`` (scalar first). Rotations use the *homogeneous* formula
``R(q) = N(q) / (q·q)``, with ``N`` the usual quadratic numerator, so ``R(q)`` is a proper rotation for every
non-zero ``q``: the small norm drift of a BDF step then changes no physics. Angular velocities are in the body
frame: ``q̇ = ½ Q(q) ω`` with ``Q(q) ω = q ⊗ (0, ω)``.

Every function here is *holomorphic* (no ``abs``, norms or conjugates): called with complex arguments it returns
the analytic continuation, which the simulator uses for complex-step second derivatives (exact to rounding).
The polar decomposition of a complex matrix ``A = A0 + i A1`` is continued to first order in ``A1`` through its
analytic derivative, which is all a complex step with a tiny imaginary part needs.

This module is the vectorized NumPy reference; the compiled paths use the numba helpers of
:mod:`retarget.sim.rotation_kernels`, which the tests compare against it.
"""
from __future__ import annotations

import re

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "QUATERNION_BASIS_Q",
    "axial",
    "cross",
    "omega_matrix",
    "polar_decomposition",
    "polar_rotation_derivative",
    "quat_from_matrix",
    "quat_multiply",
    "quat_rate_matrix",
    "rotate",
    "rotate_jacobian",
    "rotate_transpose",
    "rotate_transpose_jacobian",
    "rotation_matrix",
    "skew",
]

_CONJ = np.array([1.0, -1.0, -1.0, -1.0])


def _linear_table(entries: list[list[str]], names: str) -> NDArray[np.float64]:
    """The constant (len(names), r, c) tensor ``T`` of a matrix whose entries are ``0`` or ± one variable of
    ``names`` (e.g. ``"-x"``): the matrix of ``v`` is ``Σ_k v_k T[k]``."""
    table = np.zeros((len(names), len(entries), len(entries[0])))
    for i, row in enumerate(entries):
        for j, entry in enumerate(row):
            if entry != "0":
                table[names.index(entry[-1]), i, j] = -1.0 if entry[0] == "-" else 1.0
    return table


def _quadratic_table(entries: list[list[str]], names: str) -> NDArray[np.float64]:
    """The constant symmetric (n, n, r, c) tensor ``T`` of a matrix whose entries are sums of ± [integer] products
    of two variables of ``names`` (e.g. ``"2xy-2wz"``): entry ``(i, j)`` of the matrix of ``q`` is
    ``qᵀ T[:, :, i, j] q``."""
    n = len(names)
    table = np.zeros((n, n, len(entries), len(entries[0])))
    for i, row in enumerate(entries):
        for j, entry in enumerate(row):
            for sign, factor, a, b in re.findall(r"([+-]?)(\d*)([a-z])([a-z])", entry):
                c = (-1.0 if sign == "-" else 1.0) * float(factor or 1)
                ia, ib = names.index(a), names.index(b)
                table[ia, ib, i, j] += 0.5 * c
                table[ib, ia, i, j] += 0.5 * c
    return table


def _apply_linear(table: NDArray[np.float64], v: NDArray) -> NDArray:
    """``Σ_k v_k T[k]`` over the leading axes of ``v``: (..., k) → (..., r, c)."""
    k, r, c = table.shape
    return (v @ table.reshape(k, r * c)).reshape(v.shape[:-1] + (r, c))


#: ``[v]×`` (entries in ``v = (a, b, c)``), ``Q(q)`` of ``q̇ = ½ Q(q) ω`` (in ``q = (w, x, y, z)``) and ``Ω(ω)`` of
#: ``Q(q) ω = Ω(ω) q`` (in ``ω = (a, b, c)``): all linear in their argument.
_SKEW = _linear_table([["0", "-c", "b"], ["c", "0", "-a"], ["-b", "a", "0"]], "abc")
_QUAT_RATE = _linear_table([["-x", "-y", "-z"], ["w", "-z", "y"], ["z", "w", "-x"], ["-y", "x", "w"]], "wxyz")
_OMEGA = _linear_table([["0", "-a", "-b", "-c"], ["a", "0", "c", "-b"], ["b", "-c", "0", "a"], ["c", "b", "-a", "0"]],
                       "abc")
#: The numerator ``N(q)`` of ``R(q) = N(q) / (q·q)``, quadratic in ``q``, and ``q·q`` (the last column).
_NUMERATOR = _quadratic_table([["ww+xx-yy-zz", "2xy-2wz", "2xz+2wy"],
                               ["2xy+2wz", "ww-xx+yy-zz", "2yz-2wx"],
                               ["2xz-2wy", "2yz+2wx", "ww-xx-yy+zz"]], "wxyz")
_NUMERATOR_AND_NORM = np.concatenate([_NUMERATOR.reshape(16, 9), np.eye(4).reshape(16, 1)], axis=1)
#: ``∂(N(q) r)_i/∂q_c = Σ_(b, j) q_b r_j K[(b, j), (i, c)]``, ``K = 2 T[c, b, i, j]``.
_NUMERATOR_JACOBIAN = (2.0 * _NUMERATOR.transpose(1, 3, 2, 0)).reshape(12, 12)


def cross(a: NDArray, b: NDArray) -> NDArray:
    """``a × b`` over the last axis (broadcasting; faster than ``np.cross`` for small arrays)."""
    return np.stack(
        [
            a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
            a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
            a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0],
        ],
        axis=-1,
    )


def skew(v: NDArray) -> NDArray:
    """Cross-product matrix ``[v]×`` with ``[v]× r = v × r``; ``v``: (..., 3) → (..., 3, 3)."""
    return _apply_linear(_SKEW, v)


def axial(m: NDArray) -> NDArray:
    """Axial vector of the skew part: ``axial([v]×) = v``; ``m``: (..., 3, 3) → (..., 3)."""
    return 0.5 * np.stack(
        [m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]], axis=-1
    )


def rotation_matrix(q: NDArray) -> NDArray:
    """Rotation matrix ``R(q) = N(q) / (q·q)`` of a (not necessarily unit) quaternion: (..., 4) → (..., 3, 3)."""
    q = np.asarray(q)
    both = (q[..., :, None] * q[..., None, :]).reshape(q.shape[:-1] + (16,)) @ _NUMERATOR_AND_NORM
    return (both[..., :9] / both[..., 9:]).reshape(q.shape[:-1] + (3, 3))


def rotate(q: NDArray, r: NDArray) -> NDArray:
    """``R(q) r``; ``q``: (..., 4), ``r``: (..., 3) → (..., 3)."""
    return (rotation_matrix(q) @ np.asarray(r)[..., None])[..., 0]


def rotate_transpose(q: NDArray, r: NDArray) -> NDArray:
    """``R(q)ᵀ r``; ``q``: (..., 4), ``r``: (..., 3) → (..., 3)."""
    return rotate(q * _CONJ, r)


def rotate_jacobian(q: NDArray, r: NDArray) -> NDArray:
    """``∂(R(q) r)/∂q`` for a constant vector ``r``: (..., 3, 4) (broadcasting over leading axes).

    ``N(q) r`` is quadratic in ``q``, so its Jacobian ``D`` is linear in ``q`` (and in ``r``) and ``N r = ½ D q``;
    with ``R = N / s``, ``s = q·q``: ``∂(R r)/∂q = D / s − 2 (R r) qᵀ / s``.
    """
    q, r = np.asarray(q), np.asarray(r)
    qr = q[..., :, None] * r[..., None, :]
    d = (qr.reshape(qr.shape[:-2] + (12,)) @ _NUMERATOR_JACOBIAN).reshape(qr.shape[:-2] + (3, 4))
    s = np.sum(q * q, axis=-1)[..., None, None]
    rr = 0.5 * (d @ q[..., None])
    return (d - 2.0 * rr * q[..., None, :] / s) / s


def rotate_transpose_jacobian(q: NDArray, r: NDArray) -> NDArray:
    """``∂(R(q)ᵀ r)/∂q`` for a constant vector ``r``: (..., 3, 4). Uses ``R(q)ᵀ = R(q*)``."""
    return rotate_jacobian(q * _CONJ, r) * _CONJ


def quat_rate_matrix(q: NDArray) -> NDArray:
    """``Q(q)`` (..., 4, 3) with ``q̇ = ½ Q(q) ω`` for the body-frame angular velocity ``ω`` [rad/s]."""
    return _apply_linear(_QUAT_RATE, np.asarray(q))


def omega_matrix(omega: NDArray) -> NDArray:
    """``Ω(ω)`` (..., 4, 4) with ``Q(q) ω = Ω(ω) q`` (so ``∂(Q(q) ω)/∂q = Ω(ω)``)."""
    return _apply_linear(_OMEGA, np.asarray(omega))


#: ``Q(e_k)`` for the four unit quaternions, (4, 4, 3): ``Q(q) = Σ_k q_k Q(e_k)`` since ``Q`` is linear.
QUATERNION_BASIS_Q: NDArray[np.float64] = quat_rate_matrix(np.eye(4))


def quat_multiply(a: NDArray, b: NDArray) -> NDArray:
    """Hamilton product ``a ⊗ b``; (4,), (4,) → (4,)."""
    w1, v1 = a[0], a[1:]
    w2, v2 = b[0], b[1:]
    return np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])


def quat_from_matrix(m: NDArray[np.float64]) -> NDArray[np.float64]:
    """Unit quaternion (w ≥ 0) of a rotation matrix (3, 3) → (4,) (Shepperd's method, robust for all angles)."""
    tr = np.trace(m)
    diag = np.array([tr, m[0, 0], m[1, 1], m[2, 2]])
    k = int(np.argmax(diag))
    if k == 0:
        w = 0.5 * np.sqrt(1.0 + tr)
        q = np.array([w, (m[2, 1] - m[1, 2]) / (4 * w), (m[0, 2] - m[2, 0]) / (4 * w), (m[1, 0] - m[0, 1]) / (4 * w)])
    elif k == 1:
        x = 0.5 * np.sqrt(1.0 + 2 * m[0, 0] - tr)
        q = np.array([(m[2, 1] - m[1, 2]) / (4 * x), x, (m[0, 1] + m[1, 0]) / (4 * x), (m[0, 2] + m[2, 0]) / (4 * x)])
    elif k == 2:
        y = 0.5 * np.sqrt(1.0 + 2 * m[1, 1] - tr)
        q = np.array([(m[0, 2] - m[2, 0]) / (4 * y), (m[0, 1] + m[1, 0]) / (4 * y), y, (m[1, 2] + m[2, 1]) / (4 * y)])
    else:
        z = 0.5 * np.sqrt(1.0 + 2 * m[2, 2] - tr)
        q = np.array([(m[1, 0] - m[0, 1]) / (4 * z), (m[0, 2] + m[2, 0]) / (4 * z), (m[1, 2] + m[2, 1]) / (4 * z), z])
    q = q / np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def _polar_real(a: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    u, _, vt = np.linalg.svd(a)
    det = np.linalg.det(u @ vt)
    u = u.copy()
    u[..., :, 2] *= np.sign(det)[..., None]
    r = u @ vt
    s = np.swapaxes(r, -1, -2) @ a
    return r, 0.5 * (s + np.swapaxes(s, -1, -2))


def polar_rotation_derivative(r: NDArray, s: NDArray, da: NDArray) -> NDArray:
    """Directional derivative of the polar rotation: ``dR = R [ω]×`` for ``A = R S`` perturbed by ``dA``.

    From ``Rᵀ dA − dAᵀ R = Ω S + S Ω = [(tr(S) I − S) ω]×`` (``Ω = [ω]×``, ``S`` symmetric):
    ``ω = (tr(S) I − S)⁻¹ · 2 axial(Rᵀ dA)``. ``tr(S) I − S`` is invertible whenever the two smallest singular
    values of ``A`` have a positive sum, i.e. away from inversion (and for planar, rank-2 fits).

    Args:
        r: the polar rotation ``R`` (..., 3, 3).
        s: the symmetric stretch ``S = Rᵀ A`` (..., 3, 3).
        da: the perturbation ``dA`` (..., 3, 3).

    Returns:
        ``dR`` (..., 3, 3).
    """
    m = np.trace(s, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) - s
    omega = np.linalg.solve(m, 2.0 * axial(np.swapaxes(r, -1, -2) @ da)[..., None])[..., 0]
    return r @ skew(omega)


def polar_decomposition(a: NDArray) -> tuple[NDArray, NDArray]:
    """Polar decomposition ``A = R S`` (R proper rotation, S symmetric): (..., 3, 3) → (R, S).

    For complex ``A = A0 + i A1`` (complex step) it returns the first-order analytic continuation
    ``R(A0) + i dR(A0)[A1]``, ``S = Rᵀ A``.
    """
    if not np.iscomplexobj(a):
        return _polar_real(a)
    r0, s0 = _polar_real(a.real)
    r = r0 + 1j * polar_rotation_derivative(r0, s0, a.imag)
    return r, np.swapaxes(r, -1, -2) @ a
