"""How emulated servos move: the pluggable servo-dynamics interface.

The emulated bus owns the wire protocol; a :class:`ServoDynamics` owns the physics. Each control period the bus
hands it a :class:`ServoCommand` (goal positions of all servos in SI units, torque flags, profile limits, the
position loop's gains) and receives a :class:`ServoFeedback` (present positions, velocities, currents, PWM). The
servos' own loop is :class:`retarget.dynamixel.servo_loop.ServoLoop` (the servo law on each rotor, the bus's
default); the digital twin drives the robot simulation with it (:mod:`retarget.twin.servo`);
:class:`CallbackDynamics` plugs in any function ``(command, dt) -> feedback``.

All angles are servo-shaft angles [rad] with tick 2048 = 0 rad (see :mod:`retarget.dynamixel.control_table`).
"""
from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "CallbackDynamics",
    "ServoCommand",
    "ServoDynamics",
    "ServoFeedback",
]


@dataclass(frozen=True)
class ServoCommand:
    """What the servos' controllers are asked to do over the next period. Arrays have shape ``(n,)``.

    Attributes:
        goal_position: Goal Position of each servo [rad].
        torque_enabled: Torque Enable of each servo (a servo in shutdown has it False).
        profile_velocity: Profile Velocity [rad/s]; ``inf`` when 0 (unlimited) on the servo.
        profile_acceleration: Profile Acceleration [rad/s²]; ``inf`` when 0 (unlimited) on the servo.
        velocity_limit: Velocity Limit [rad/s].
        position_gains: Position P, I and D Gain of each servo, ``(n, 3)`` [control table units]; None: each
            servo model's own.
        pwm_limit: PWM Limit of each servo (0–885, 885 = full duty); None: each servo model's own.
    """

    goal_position: np.ndarray
    torque_enabled: np.ndarray
    profile_velocity: np.ndarray
    profile_acceleration: np.ndarray
    velocity_limit: np.ndarray
    position_gains: np.ndarray | None = None
    pwm_limit: np.ndarray | None = None


@dataclass
class ServoFeedback:
    """What the servos measure. Arrays have shape ``(n,)``.

    Attributes:
        position: Present Position [rad].
        velocity: Present Velocity [rad/s].
        current: Present Current [A] (empty: none reported, 0 on the wire).
        pwm: Present PWM as the duty, −1 … 1 (× 885 on the wire; empty: 0).
    """

    position: np.ndarray
    velocity: np.ndarray
    current: np.ndarray = field(default_factory=lambda: np.zeros(0))
    pwm: np.ndarray = field(default_factory=lambda: np.zeros(0))


class ServoDynamics(abc.ABC):
    """Steps the present state of ``n`` servos from their commands.

    Implementations keep their own state; the bus calls :meth:`reset` once (power-on positions) and then
    :meth:`step` with a fixed period ``dt`` [s].
    """

    @abc.abstractmethod
    def reset(self, position: np.ndarray) -> ServoFeedback:
        """Start at rest at ``position`` [rad], shape ``(n,)``; return the feedback there."""

    @abc.abstractmethod
    def step(self, command: ServoCommand, dt: float) -> ServoFeedback:
        """Advance by ``dt`` [s] under ``command``; return the new feedback."""

    def advance(self, command: ServoCommand, dt: float, steps: int) -> ServoFeedback:
        """``steps`` (≥ 1) calls of :meth:`step` under one constant ``command``; return the last feedback."""
        for _ in range(steps):
            feedback = self.step(command, dt)
        return feedback


class CallbackDynamics(ServoDynamics):
    """Adapter for the digital twin: delegate stepping to a function.

    Args:
        step_fn: ``(command, dt) -> ServoFeedback``, e.g. a wrapper that advances a simulation of the servos by
            ``dt`` under ``command`` and returns their shafts' angles, rates, currents and duties.
        reset_fn: ``(position) -> ServoFeedback``, called once with the power-on positions; None to echo them.
    """

    def __init__(
        self,
        step_fn: Callable[[ServoCommand, float], ServoFeedback],
        reset_fn: Callable[[np.ndarray], ServoFeedback] | None = None,
    ) -> None:
        self._step_fn = step_fn
        self._reset_fn = reset_fn

    def reset(self, position: np.ndarray) -> ServoFeedback:
        if self._reset_fn is not None:
            return self._reset_fn(np.asarray(position, dtype=float))
        p = np.array(position, dtype=float)
        return ServoFeedback(p, np.zeros_like(p), np.zeros_like(p))

    def step(self, command: ServoCommand, dt: float) -> ServoFeedback:
        return self._step_fn(command, dt)
