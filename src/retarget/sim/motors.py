"""Prescribed motor trajectories ``θ(t)``: anything with ``value(t)`` and ``derivative(t)``.

A motor trajectory must be C² for the DAE's velocity constraints to be smooth; :class:`SplineMotors` (natural
cubic spline through samples) is, :class:`ConstantMotors` and :class:`FunctionMotors` are as smooth as their input.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.errors import InputError

__all__ = ["ConstantMotors", "FunctionMotors", "MotorTrajectory", "SplineMotors", "sample_motors"]


class MotorTrajectory(Protocol):
    """``θ(t)`` for every motor, in the system's motor order ([rad] hinges, [m] sliders)."""

    def value(self, t: float) -> NDArray[np.float64]:
        """θ(t) (n_motors,)."""
        ...

    def derivative(self, t: float) -> NDArray[np.float64]:
        """θ̇(t) (n_motors,)."""
        ...


def sample_motors(motors: MotorTrajectory, times: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
    """θ and θ̇ at every time: (N, n_motors) each.

    A trajectory may also evaluate many times at once, with ``values(times)`` and ``derivatives(times)`` returning
    (N, n_motors): equal to ``value`` and ``derivative`` time by time, without a Python call per time; others are
    sampled one time after another.
    """
    t = np.asarray(times, dtype=float)
    values, derivatives = getattr(motors, "values", None), getattr(motors, "derivatives", None)
    if callable(values) and callable(derivatives):
        theta, theta_dot = np.asarray(values(t), dtype=float), np.asarray(derivatives(t), dtype=float)
    else:
        theta = np.array([np.atleast_1d(motors.value(float(x))) for x in t], dtype=float)
        theta_dot = np.array([np.atleast_1d(motors.derivative(float(x))) for x in t], dtype=float)
    return theta.reshape(len(t), -1), theta_dot.reshape(len(t), -1)


@dataclass(frozen=True)
class ConstantMotors:
    """Motors held at fixed values (n_motors,)."""

    values: NDArray[np.float64]

    def value(self, t: float) -> NDArray[np.float64]:
        return np.asarray(self.values, dtype=float)

    def derivative(self, t: float) -> NDArray[np.float64]:
        return np.zeros(len(self.values))


@dataclass(frozen=True)
class FunctionMotors:
    """Motors from callables ``theta(t) -> (n,)`` and ``theta_dot(t) -> (n,)``."""

    theta: Callable[[float], ArrayLike]
    theta_dot: Callable[[float], ArrayLike]

    def value(self, t: float) -> NDArray[np.float64]:
        return np.atleast_1d(np.asarray(self.theta(t), dtype=float))

    def derivative(self, t: float) -> NDArray[np.float64]:
        return np.atleast_1d(np.asarray(self.theta_dot(t), dtype=float))


class SplineMotors:
    """C² natural cubic spline through sampled motor values; held constant outside the samples.

    Args:
        time: sample times (n,) [s], strictly increasing.
        positions: (n, n_motors) [rad] or [m].
    """

    def __init__(self, time: ArrayLike, positions: ArrayLike) -> None:
        from scipy.interpolate import CubicSpline

        t = np.asarray(time, dtype=float)
        p = np.asarray(positions, dtype=float)
        if p.ndim == 1:
            p = p[:, None]
        if t.ndim != 1 or len(t) < 2 or p.shape[0] != len(t) or np.any(np.diff(t) <= 0):
            raise InputError(f"motor samples need ≥ 2 strictly increasing times, got {t.shape} and {p.shape}")
        self._t0, self._t1 = float(t[0]), float(t[-1])
        self._spline = CubicSpline(t, p, bc_type="natural", axis=0)
        self._d = self._spline.derivative()

    def value(self, t: float) -> NDArray[np.float64]:
        return np.asarray(self._spline(min(max(t, self._t0), self._t1)), dtype=float)

    def derivative(self, t: float) -> NDArray[np.float64]:
        if t < self._t0 or t > self._t1:
            return np.zeros(self._spline.c.shape[-1])
        return np.asarray(self._d(t), dtype=float)

    def values(self, times: NDArray[np.float64]) -> NDArray[np.float64]:
        """θ at every time (N, n_motors) (:func:`sample_motors`)."""
        return np.asarray(self._spline(np.clip(times, self._t0, self._t1)), dtype=float)

    def derivatives(self, times: NDArray[np.float64]) -> NDArray[np.float64]:
        """θ̇ at every time (N, n_motors); zero outside the samples."""
        t = np.asarray(times, dtype=float)
        out = np.asarray(self._d(np.clip(t, self._t0, self._t1)), dtype=float)
        out[(t < self._t0) | (t > self._t1)] = 0.0
        return out

    @classmethod
    def from_columns(cls, time: ArrayLike, columns: Sequence[ArrayLike]) -> SplineMotors:
        """From one sample array per motor."""
        return cls(time, np.stack([np.asarray(c, dtype=float) for c in columns], axis=1))
