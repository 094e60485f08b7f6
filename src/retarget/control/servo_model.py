"""A rigid first-order position servo: the twin used until the reduced robot model drives the servos.

Each joint follows its goal position with time constant ``tau`` and saturates at ``max_velocity``:
``q̇ = clip((q_goal − q) / tau, −v_max, v_max)``, integrated exactly for the unsaturated case and with the
saturated speed otherwise, so any step size is stable.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = ["ServoState", "step_servos"]


@dataclass(frozen=True, eq=False)
class ServoState:
    """Positions and velocities of a set of servos.

    Attributes:
        positions: [rad] ``(m,)``.
        velocities: [rad/s] ``(m,)``.
        goals: Goal positions [rad] ``(m,)``.
    """

    positions: np.ndarray
    velocities: np.ndarray
    goals: np.ndarray

    @staticmethod
    def at_rest(positions: np.ndarray) -> ServoState:
        """Servos at rest with their goals at ``positions`` [rad] ``(m,)``."""
        q = np.asarray(positions, dtype=float).copy()
        return ServoState(q, np.zeros_like(q), q.copy())

    def replace(self, **changes: np.ndarray) -> ServoState:
        """A copy with fields changed."""
        return replace(self, **changes)


def step_servos(state: ServoState, dt: float, tau: float, max_velocity: float) -> ServoState:
    """Advance the servos by ``dt``.

    Args:
        state: Current state.
        dt: Step [s], > 0.
        tau: Time constant [s], > 0.
        max_velocity: Speed limit [rad/s], > 0.

    Returns:
        The state after ``dt``; ``velocities`` is the mean speed over the step.
    """
    error = state.goals - state.positions
    decayed = state.goals - error * np.exp(-dt / tau)
    # The exponential approach starts at its fastest speed |error| / tau: saturate the step where that exceeds
    # the limit (the servo then moves at max_velocity for the whole step, a slight simplification near the knee).
    saturated = np.abs(error) / tau > max_velocity
    limited = state.positions + np.sign(error) * np.minimum(np.abs(error), max_velocity * dt)
    positions = np.where(saturated, limited, decayed)
    return ServoState(positions, (positions - state.positions) / dt, state.goals)
