"""Quadrature on the uniform simulation time grid.

``∫ f dt ≈ Σ_n q_n f(t_n)`` on ``t_n = t0 + n Δt``, ``n = 0 … N − 1`` (:func:`simpson_weights`):

- ``N`` odd (an even number of intervals): composite Simpson 1/3, ``Δt/3 · [1, 4, 2, 4, …, 2, 4, 1]``;
- ``N`` even ≥ 4 (an odd number of intervals): Simpson 1/3 on the first ``N − 4`` intervals and Simpson 3/8,
  ``3Δt/8 · [1, 3, 3, 1]``, on the last three (the shared sample gets both contributions);
- ``N = 2``: trapezoid; ``N = 1``: zero (an empty interval).

Simpson 1/3 and 3/8 are both exact for cubics, so for ``N ≥ 3`` every cubic is integrated exactly; the error of a
smooth integrand is ``O(Δt⁴)``.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.errors import InputError

__all__ = ["integrate", "simpson_weights", "uniform_grid"]


def simpson_weights(n: int, dt: float) -> NDArray[np.float64]:
    """Composite Simpson quadrature weights for ``n`` uniform samples ``Δt`` apart (see module docstring).

    Args:
        n: Number of samples, ``≥ 1``.
        dt: Sample spacing [s], ``> 0``.

    Returns:
        ``q`` [s], shape ``(n,)``, with ``∫ f dt ≈ q @ f(t)``; ``q.sum() == (n − 1) Δt``.
    """
    if n < 1:
        raise InputError(f"need at least one sample, got {n}")
    if not dt > 0:
        raise InputError(f"sample spacing must be positive, got {dt}")
    q = np.zeros(n)
    if n == 1:
        return q
    if n == 2:
        return np.array([0.5 * dt, 0.5 * dt])
    simpson_end = n if n % 2 == 1 else n - 3
    if simpson_end >= 3:
        w = np.full(simpson_end, 2.0)
        w[1::2] = 4.0
        w[0] = w[-1] = 1.0
        q[:simpson_end] = w * dt / 3.0
    if n % 2 == 0:
        q[n - 4:] += 3.0 * dt / 8.0 * np.array([1.0, 3.0, 3.0, 1.0])
    return q


def uniform_grid(t0: float, t1: float, dt: float) -> NDArray[np.float64]:
    """``t0 + n Δt`` for ``n = 0 … ceil((t1 − t0)/Δt)`` [s]: the first grid covering ``[t0, t1]``."""
    count = int(math.ceil((t1 - t0) / dt - 1e-9)) + 1
    return t0 + np.arange(count) * dt


def integrate(values: ArrayLike, dt: float) -> NDArray[np.float64] | float:
    """``∫ f dt`` of samples ``(n, ...)`` on a uniform grid with :func:`simpson_weights` (over axis 0)."""
    f = np.asarray(values, dtype=np.float64)
    return np.tensordot(simpson_weights(f.shape[0], dt), f, axes=(0, 0))
