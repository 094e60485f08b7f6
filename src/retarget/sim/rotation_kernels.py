"""Compiled (numba) quaternion helpers shared by the two compiled paths: the full-space joint kernels
(:mod:`retarget.sim.kernels`) and the reduced engine (:mod:`retarget.sim.reduced.compiled`,
:mod:`retarget.sim.reduced.kernels`).

The same mathematics as :mod:`retarget.sim.rotation`, which stays the vectorized NumPy reference (the oracle the
tests compare these against and the home of the conventions): ``q = (w, x, y, z)``, the homogeneous
``R(q) = N(q) / (q·q)``, body-frame angular velocity with ``q̇ = ½ Q(q) ω`` and ``Q(q) ω = Ω(ω) q``. Every function
works in ``q``'s element type (``float64`` or ``complex128``, for complex steps) and is holomorphic.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from retarget.jit import njit

__all__ = [
    "omega_half",
    "omega_half_into",
    "quat_rate_half",
    "quat_rate_half_into",
    "rotate_with_jacobian",
    "rotation_matrix",
]


@njit(cache=True, inline="always")
def rotation_matrix(q: NDArray) -> NDArray:
    """Homogeneous ``R(q) = N(q)/(q·q)`` (3, 3) of ``q`` (4,), in ``q``'s element type (real or complex)."""
    w, x, y, z = q[0], q[1], q[2], q[3]
    s = w * w + x * x + y * y + z * z
    r = np.empty((3, 3), dtype=q.dtype)
    r[0, 0] = (w * w + x * x - y * y - z * z) / s
    r[0, 1] = 2.0 * (x * y - w * z) / s
    r[0, 2] = 2.0 * (x * z + w * y) / s
    r[1, 0] = 2.0 * (x * y + w * z) / s
    r[1, 1] = (w * w - x * x + y * y - z * z) / s
    r[1, 2] = 2.0 * (y * z - w * x) / s
    r[2, 0] = 2.0 * (x * z - w * y) / s
    r[2, 1] = 2.0 * (y * z + w * x) / s
    r[2, 2] = (w * w - x * x - y * y + z * z) / s
    return r


@njit(cache=True)
def rotate_with_jacobian(q: NDArray, rmat: NDArray, r: NDArray) -> tuple[NDArray, NDArray]:
    """``R r`` (3,) and ``∂(R(q) r)/∂q`` (3, 4) for a constant ``r`` (3,) [m or -] (as ``rotation.rotate_jacobian``).

    Args:
        q: Quaternion (4,), real or complex.
        rmat: ``R(q)`` (3, 3), from :func:`rotation_matrix`.
        r: Body-frame vector (3,), real.
    """
    w = q[0]
    s = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]
    v0, v1, v2 = q[1], q[2], q[3]
    vr = v0 * r[0] + v1 * r[1] + v2 * r[2]
    rr = np.empty(3, dtype=q.dtype)
    for i in range(3):
        rr[i] = rmat[i, 0] * r[0] + rmat[i, 1] * r[1] + rmat[i, 2] * r[2]
    jac = np.empty((3, 4), dtype=q.dtype)
    jac[0, 0] = 2.0 * w * r[0] + 2.0 * (v1 * r[2] - v2 * r[1])
    jac[1, 0] = 2.0 * w * r[1] + 2.0 * (v2 * r[0] - v0 * r[2])
    jac[2, 0] = 2.0 * w * r[2] + 2.0 * (v0 * r[1] - v1 * r[0])
    for i in range(3):
        for j in range(3):
            val = -2.0 * r[i] * q[1 + j] + 2.0 * q[1 + i] * r[j]
            if i == j:
                val += 2.0 * vr
            jac[i, 1 + j] = val
    # − 2 w [r]×
    jac[0, 2] += 2.0 * w * r[2]
    jac[0, 3] -= 2.0 * w * r[1]
    jac[1, 1] -= 2.0 * w * r[2]
    jac[1, 3] += 2.0 * w * r[0]
    jac[2, 1] += 2.0 * w * r[1]
    jac[2, 2] -= 2.0 * w * r[0]
    for i in range(3):
        for k in range(4):
            jac[i, k] = jac[i, k] / s - 2.0 * rr[i] * q[k] / s
    return rr, jac


@njit(cache=True, inline="always")
def quat_rate_half_into(q: NDArray, out: NDArray) -> None:
    """Write ``½ Q(q)`` (4, 3) into ``out`` for a quaternion ``q`` (4,): ``q̇ = ½ Q(q) ω``."""
    w, x, y, z = q[0], q[1], q[2], q[3]
    out[0, 0], out[0, 1], out[0, 2] = -0.5 * x, -0.5 * y, -0.5 * z
    out[1, 0], out[1, 1], out[1, 2] = 0.5 * w, -0.5 * z, 0.5 * y
    out[2, 0], out[2, 1], out[2, 2] = 0.5 * z, 0.5 * w, -0.5 * x
    out[3, 0], out[3, 1], out[3, 2] = -0.5 * y, 0.5 * x, 0.5 * w


@njit(cache=True, inline="always")
def quat_rate_half(q: NDArray) -> NDArray:
    """``½ Q(q)`` (4, 3) of a real quaternion ``q`` (4,)."""
    out = np.empty((4, 3))
    quat_rate_half_into(q, out)
    return out


@njit(cache=True, inline="always")
def omega_half_into(w: NDArray, out: NDArray) -> None:
    """Write ``½ Ω(ω)`` (4, 4) into ``out`` for an angular velocity ``ω`` (3,) [rad/s]: ``Q(q) ω = Ω(ω) q``."""
    a, b, c = 0.5 * w[0], 0.5 * w[1], 0.5 * w[2]
    out[0, 0], out[0, 1], out[0, 2], out[0, 3] = 0.0, -a, -b, -c
    out[1, 0], out[1, 1], out[1, 2], out[1, 3] = a, 0.0, c, -b
    out[2, 0], out[2, 1], out[2, 2], out[2, 3] = b, -c, 0.0, a
    out[3, 0], out[3, 1], out[3, 2], out[3, 3] = c, b, -a, 0.0


@njit(cache=True, inline="always")
def omega_half(w: NDArray) -> NDArray:
    """``½ Ω(ω)`` (4, 4) of an angular velocity ``ω`` (3,) [rad/s]."""
    out = np.empty((4, 4))
    omega_half_into(w, out)
    return out
