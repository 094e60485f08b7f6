"""Rigid first-order position servos as an immutable state stepped by a pure function (the servo twin node's).

Each joint follows its goal with time constant ``tau``, ``q̇ = clip((q_goal − q) / tau, −v_max, v_max)``, never
overshooting within a step, integrated with forward Euler (:func:`first_order_step`). Here the servos have no
acceleration limit and their torque is always on. This is a stand-in for driver and servos in the trajectory
server's tests, not the servo model: the emulated bus and the simulators run the servo's position loop
(:mod:`retarget.dynamixel.servo_loop`, :mod:`retarget.sim.servo`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = ["ServoState", "first_order_step", "step_servos"]


def first_order_step(
    position: np.ndarray,
    velocity: np.ndarray,
    goal: np.ndarray,
    dt: float,
    time_constant: float,
    max_velocity: np.ndarray | float,
    max_acceleration: np.ndarray | float = np.inf,
    torque_enabled: np.ndarray | bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """One step of the first-order position loop of a rigid servo, saturated in velocity and acceleration.

    Commanded velocity ``v* = clip((goal - x) / time_constant, ±max_velocity)``, never more than the remaining
    distance per step; the velocity moves toward ``v*`` by at most ``max_acceleration dt``; ``x += v dt``
    (forward Euler). A servo with torque off stops where it is.

    Args:
        position: Present positions [rad] ``(n,)``.
        velocity: Present velocities [rad/s] ``(n,)``.
        goal: Goal positions [rad] ``(n,)``.
        dt: Step [s], > 0.
        time_constant: Position-loop time constant [s], > 0.
        max_velocity: Speed limit [rad/s], scalar or ``(n,)``.
        max_acceleration: Acceleration limit [rad/s²], scalar or ``(n,)``; ``inf`` for none.
        torque_enabled: Torque Enable, scalar or ``(n,)``.

    Returns:
        ``(position, velocity)`` after the step, [rad] and [rad/s] ``(n,)``.
    """
    on = np.asarray(torque_enabled, dtype=bool)
    v_star = np.clip((goal - position) / time_constant, -max_velocity, max_velocity)
    # A first-order loop cannot overshoot within one step: never ask for more than the remaining distance.
    v_star = np.clip(v_star, -np.abs(goal - position) / dt, np.abs(goal - position) / dt)
    dv = np.clip(v_star - velocity, -max_acceleration * dt, max_acceleration * dt)
    new_velocity = np.where(on, velocity + dv, 0.0)
    return position + new_velocity * dt, new_velocity


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
    """Advance the servos by ``dt`` with :func:`first_order_step`.

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
