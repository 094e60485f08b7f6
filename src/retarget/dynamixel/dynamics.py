"""How emulated servos move: the pluggable servo-dynamics interface and a rigid first-order model.

The emulated bus owns the wire protocol; a :class:`ServoDynamics` owns the physics. Each control period the bus
hands it a :class:`ServoCommand` (goal positions of all servos in SI units, torque flags, profile limits) and
receives a :class:`ServoFeedback` (present positions, velocities, currents). The digital twin plugs the robot
simulation in through :class:`CallbackDynamics`: a function ``(command, dt) -> feedback``.

All angles are servo-shaft angles [rad] with tick 2048 = 0 rad (see :mod:`retarget.dynamixel.control_table`).
"""
from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from retarget.dynamixel.control_table import XM430_RATINGS, ServoRatings

__all__ = [
    "XM430_NO_LOAD_SPEED_RAD_S",
    "CallbackDynamics",
    "FirstOrderServo",
    "ServoCommand",
    "ServoDynamics",
    "ServoFeedback",
    "first_order_step",
]

#: No-load speed of the XM430-W210 at 12 V: 77 rev/min [rad/s].
XM430_NO_LOAD_SPEED_RAD_S = XM430_RATINGS.no_load_speed
#: Stall torque at 12 V [N m] and the matching current [A] (e-manual: 3.0 N m at 2.3 A).
_XM430_STALL_TORQUE_NM = XM430_RATINGS.stall_torque
_XM430_STALL_CURRENT_A = XM430_RATINGS.stall_current


@dataclass(frozen=True)
class ServoCommand:
    """What the servos' controllers are asked to do over the next period. Arrays have shape ``(n,)``.

    Attributes:
        goal_position: Goal Position of each servo [rad].
        torque_enabled: Torque Enable of each servo (a servo in shutdown has it False).
        profile_velocity: Profile Velocity [rad/s]; ``inf`` when 0 (unlimited) on the servo.
        profile_acceleration: Profile Acceleration [rad/s²]; ``inf`` when 0 (unlimited) on the servo.
        velocity_limit: Velocity Limit [rad/s].
    """

    goal_position: np.ndarray
    torque_enabled: np.ndarray
    profile_velocity: np.ndarray
    profile_acceleration: np.ndarray
    velocity_limit: np.ndarray


@dataclass
class ServoFeedback:
    """What the servos measure. Arrays have shape ``(n,)``.

    Attributes:
        position: Present Position [rad].
        velocity: Present Velocity [rad/s].
        current: Present Current [A].
    """

    position: np.ndarray
    velocity: np.ndarray
    current: np.ndarray = field(default_factory=lambda: np.zeros(0))


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
    (forward Euler). A servo with torque off stops where it is. The one servo law of the package: used by
    :class:`FirstOrderServo` and by :func:`retarget.control.servo_model.step_servos`.

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


class FirstOrderServo(ServoDynamics):
    """A rigid servo: a first-order position loop, saturated in velocity and acceleration.

    Commanded velocity ``v* = clip((goal - x) / time_constant, ±v_max)`` with ``v_max`` the smallest of the
    no-load speed, the Velocity Limit and the Profile Velocity (when set); the actual velocity moves toward
    ``v*`` no faster than the Profile Acceleration (when set); ``x += v dt``. With torque off the shaft stays
    where it is (the load is not modelled); the law is :func:`first_order_step`. Current is the torque needed
    to accelerate ``load_inertia`` through the gear, plus a no-load share proportional to speed, scaled by the
    stall torque/current ratio and clipped to the stall current: a crude indicator, not a motor model. The defaults are the XM430-W210's;
    :meth:`rated` takes another model's from its control table.

    Args:
        n: number of servos.
        time_constant: position-loop time constant [s].
        no_load_speed: top speed [rad/s] (77 rev/min at 12 V).
        load_inertia: inertia seen at the output shaft [kg m²], for the current estimate.
        stall_torque: [N m] (3.0 at 12 V).
        stall_current: current at the stall torque [A] (2.3 at 12 V).
    """

    def __init__(
        self,
        n: int,
        time_constant: float = 0.02,
        no_load_speed: float = XM430_NO_LOAD_SPEED_RAD_S,
        load_inertia: float = 1e-3,
        stall_torque: float = _XM430_STALL_TORQUE_NM,
        stall_current: float = _XM430_STALL_CURRENT_A,
    ) -> None:
        if min(time_constant, no_load_speed, stall_torque, stall_current) <= 0:
            raise ValueError("time_constant, no_load_speed, stall_torque and stall_current must be positive")
        self.n = n
        self.time_constant = time_constant
        self.no_load_speed = no_load_speed
        self.load_inertia = load_inertia
        self.stall_torque = stall_torque
        self.stall_current = stall_current
        self._position = np.zeros(n)
        self._velocity = np.zeros(n)

    @classmethod
    def rated(cls, n: int, ratings: ServoRatings, **kwargs: float) -> FirstOrderServo:
        """Servos of a model with these ratings (``ControlTable.ratings``); other arguments as the constructor's."""
        return cls(n, no_load_speed=ratings.no_load_speed, stall_torque=ratings.stall_torque,
                   stall_current=ratings.stall_current, **kwargs)

    def reset(self, position: np.ndarray) -> ServoFeedback:
        self._position = np.array(position, dtype=float).reshape(self.n)
        self._velocity = np.zeros(self.n)
        return self._feedback(np.zeros(self.n))

    def step(self, command: ServoCommand, dt: float) -> ServoFeedback:
        v_max = np.minimum.reduce(
            [
                np.full(self.n, self.no_load_speed),
                np.where(command.velocity_limit > 0, command.velocity_limit, np.inf),
                command.profile_velocity,
            ]
        )
        position, velocity = first_order_step(self._position, self._velocity, command.goal_position, dt,
                                              self.time_constant, v_max, command.profile_acceleration,
                                              command.torque_enabled)
        acceleration = (velocity - self._velocity) / dt
        self._position = position
        self._velocity = velocity
        return self._feedback(np.where(np.asarray(command.torque_enabled, dtype=bool), acceleration, 0.0))

    def advance(self, command: ServoCommand, dt: float, steps: int) -> ServoFeedback:
        """As :meth:`ServoDynamics.advance`, ending early at a fixed point of the step (servos at rest at their goal).

        :meth:`step` depends on the state and the command alone, so a step that leaves position and velocity
        unchanged leaves them unchanged at every later step under the same command, with the same feedback (zero
        acceleration): the result equals ``steps`` steps.
        """
        feedback = self.step(command, dt)
        for _ in range(steps - 1):
            position, velocity = self._position, self._velocity
            feedback = self.step(command, dt)
            if np.array_equal(self._position, position) and np.array_equal(self._velocity, velocity):
                break
        return feedback

    def _feedback(self, acceleration: np.ndarray) -> ServoFeedback:
        torque = self.load_inertia * acceleration
        per_nm = self.stall_current / self.stall_torque
        current = torque * per_nm + 0.1 * self.stall_current * self._velocity / self.no_load_speed
        current = np.clip(current, -self.stall_current, self.stall_current)
        return ServoFeedback(self._position.copy(), self._velocity.copy(), current)


class CallbackDynamics(ServoDynamics):
    """Adapter for the digital twin: delegate stepping to a function.

    Args:
        step_fn: ``(command, dt) -> ServoFeedback``, e.g. a wrapper that sets the simulation's motor angles to
            ``command.goal_position`` (shaped by its own servo model), advances the simulation by ``dt`` and
            returns the motor joints' angles, rates and a current estimate.
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
