"""Rigid first-order position servos as an immutable state stepped by a pure function (the servo twin node's).

The law is the emulated bus's, :func:`retarget.dynamixel.dynamics.first_order_step`: each joint follows its goal
with time constant ``tau``, ``q̇ = clip((q_goal − q) / tau, −v_max, v_max)``, never overshooting within a step,
integrated with forward Euler. Here the servos have no acceleration limit and their torque is always on.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from retarget.dynamixel.dynamics import first_order_step

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
    """Advance the servos by ``dt`` with :func:`~retarget.dynamixel.dynamics.first_order_step`.

    Args:
        state: Current state.
        dt: Step [s], > 0.
        tau: Time constant [s], > 0.
        max_velocity: Speed limit [rad/s], > 0.

    Returns:
        The state after ``dt``; ``velocities`` is the speed over the step [rad/s] ``(m,)``.
    """
    positions, velocities = first_order_step(state.positions, state.velocities, state.goals, dt, tau, max_velocity)
    return ServoState(positions, velocities, state.goals)
