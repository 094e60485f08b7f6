"""Sampling a validated trajectory in time, as joint_trajectory_controller's spline interpolation does.

The segment type follows what both end points carry: positions only → linear; positions and velocities → cubic
Hermite (C¹); positions, velocities and accelerations → quintic (C²). Execution starts from the current state, as
joint_trajectory_controller's does: a segment from the start state, at the moment execution starts (``start_offset``
on the trajectory's time axis: 0 for a zero header stamp, negative for a stamp in the future, positive for one in the
past), to the first point is prepended when the first point lies after that moment; otherwise the trajectory is
taken where it is at once. Before the execution starts its first knot is held; after the last point, the last point.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # trajectory.py samples trajectories to validate their first segment
    from retarget.control.trajectory import Trajectory

__all__ = ["TrajectorySample", "TrajectorySampler", "segment_coefficients"]


@dataclass(frozen=True, eq=False)
class TrajectorySample:
    """The desired state at one instant.

    Attributes:
        positions: [rad] ``(m,)``.
        velocities: [rad/s] ``(m,)``.
        accelerations: [rad/s^2] ``(m,)``.
        index: Index of the trajectory point the current segment ends at (the last point after the end).
        after_end: True at or after the last point's time.
    """

    positions: np.ndarray
    velocities: np.ndarray
    accelerations: np.ndarray
    index: int
    after_end: bool


def segment_coefficients(duration: float, p0: np.ndarray, p1: np.ndarray, v0: np.ndarray | None = None,
                         v1: np.ndarray | None = None, a0: np.ndarray | None = None,
                         a1: np.ndarray | None = None) -> np.ndarray:
    """Polynomial coefficients of one segment, lowest order first.

    Args:
        duration: Segment length T [s], > 0.
        p0, p1: End positions [rad], ``(m,)``.
        v0, v1: End velocities [rad/s], ``(m,)``, or ``None`` (linear segment).
        a0, a1: End accelerations [rad/s^2], ``(m,)``, or ``None`` (cubic segment when velocities are given).

    Returns:
        ``c`` of shape ``(6, m)`` with ``p(s) = Σ c[k] s^k`` for ``s`` in ``[0, T]`` (unused orders are zero).
    """
    T = float(duration)
    h = p1 - p0
    c = np.zeros((6, p0.size))
    c[0] = p0
    if v0 is None or v1 is None:
        c[1] = h / T
    elif a0 is None or a1 is None:
        c[1] = v0
        c[2] = (3.0 * h - (2.0 * v0 + v1) * T) / T**2
        c[3] = (-2.0 * h + (v0 + v1) * T) / T**3
    else:
        c[1] = v0
        c[2] = 0.5 * a0
        c[3] = (20.0 * h - (8.0 * v1 + 12.0 * v0) * T - (3.0 * a0 - a1) * T**2) / (2.0 * T**3)
        c[4] = (-30.0 * h + (14.0 * v1 + 16.0 * v0) * T + (3.0 * a0 - 2.0 * a1) * T**2) / (2.0 * T**4)
        c[5] = (12.0 * h - 6.0 * (v1 + v0) * T - (a0 - a1) * T**2) / (2.0 * T**5)
    return c


def _evaluate(c: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    powers = s ** np.arange(6)
    p = powers @ c
    v = (np.arange(1, 6) * powers[:5]) @ c[1:]
    a = (np.arange(2, 6) * np.arange(1, 5) * powers[:4]) @ c[2:]
    return p, v, a


class TrajectorySampler:
    """Desired joint state over time for one trajectory started from a given state.

    Args:
        trajectory: The validated trajectory.
        start_positions: Joint positions at the start [rad] ``(m,)`` (measured, or last commanded in open loop).
        start_velocities: Joint velocities at the start [rad/s] ``(m,)``; zeros if ``None``. Only used when the
            trajectory carries velocities.
        start_offset: When execution starts from the start state, on the trajectory's time axis [s] (``now -
            trajectory.start_time`` when the goal is accepted).
    """

    def __init__(self, trajectory: Trajectory, start_positions: np.ndarray,
                 start_velocities: np.ndarray | None = None, start_offset: float = 0.0) -> None:
        self.trajectory = trajectory
        m = len(trajectory.joint_names)
        start_p = np.asarray(start_positions, dtype=float).reshape(m)
        start_v = np.zeros(m) if start_velocities is None else np.asarray(start_velocities, dtype=float).reshape(m)
        has_v = trajectory.velocities is not None
        has_a = trajectory.accelerations is not None
        times = list(trajectory.time)
        pos = list(trajectory.positions)
        vel = list(trajectory.velocities) if has_v else [None] * len(times)
        acc = list(trajectory.accelerations) if has_a else [None] * len(times)
        self._offset = 0  # knot k ends at trajectory point k - offset
        if times[0] > start_offset:
            times.insert(0, float(start_offset))
            pos.insert(0, start_p)
            vel.insert(0, start_v if has_v else None)
            acc.insert(0, np.zeros(m) if has_a else None)
            self._offset = 1
        self._times = np.asarray(times)
        self._knots = list(zip(pos, vel, acc))
        self._coefficients = [
            segment_coefficients(times[k + 1] - times[k], pos[k], pos[k + 1], vel[k], vel[k + 1], acc[k], acc[k + 1])
            for k in range(len(times) - 1)
        ]
        self.start_positions = start_p

    @property
    def duration(self) -> float:
        """Time of the last point [s]."""
        return float(self._times[-1])

    def _knot_state(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p, v, a = self._knots[k]
        return p.copy(), (np.zeros_like(p) if v is None else v.copy()), (np.zeros_like(p) if a is None else a.copy())

    def sample(self, t: float) -> TrajectorySample:
        """The desired state ``t`` seconds after the trajectory's start time.

        Args:
            t: Time since start [s].

        Returns:
            The sample; before the first knot, the start state (or the first point when no segment leads to it).
        """
        n_points = len(self.trajectory.time)
        if t >= self._times[-1]:
            p, v, a = self._knot_state(len(self._times) - 1)
            return TrajectorySample(p, v, a, n_points - 1, True)
        if t < self._times[0]:
            if self._offset:
                return TrajectorySample(self.start_positions.copy(), np.zeros_like(self.start_positions),
                                        np.zeros_like(self.start_positions), 0, False)
            p, v, a = self._knot_state(0)
            return TrajectorySample(p, v, a, 0, False)
        k = int(np.searchsorted(self._times, t, side="right")) - 1
        p, v, a = _evaluate(self._coefficients[k], t - self._times[k])
        return TrajectorySample(p, v, a, k + 1 - self._offset, False)
