"""The emulated servos' position loop: the servo law of :mod:`retarget.sim.servo` on each servo's own shaft.

Each servo is the model of :mod:`retarget.model.servo` in SI at the output shaft, stepped with the same
:func:`retarget.sim.servo.servo_torque` the simulators use::

    u = kp (g − θ) + ki ι + kd (ġ − ω) + kff1 ġ          d = sat(u / stall_torque, duty_limit)
    τ = stall_torque (d − ω / max_velocity) − friction(ω)
    (rotor_inertia + load_inertia) ω̇ = τ + load_torque          θ̇ = ω,  ι̇ = g − θ

integrated with backward Euler (Newton on ω per servo; ``∂R/∂ω > 0``, so it converges from any start), stable
at any step the bus takes (its 2 ms period, or a long catch-up in at most 500 steps). At rest a P servo holds a
load at the error ``−load_torque / kp`` exactly: backward Euler keeps the fixed points of the law.

What the control table sets (:func:`loop_params`): the gains come from Position P, I and D Gain, converted by
:func:`retarget.model.servo.control_table_gains` with the servo's stall torque (a write of P Gain changes the
stiffness), the duty limit from PWM Limit (``/ 885``). Everything else — stall torque, no-load speed, rotor
inertia, friction, the velocity feedforward — is the servo's :class:`~retarget.model.servo.ServoParams`.

Torque Enable off: no drive. The loop's output is zero (duty 0: gains of :data:`NO_DRIVE_GAIN`), the shaft is free
but for the motor's back EMF ``stall_torque ω / max_velocity`` (the H-bridge at zero duty shorts the motor) and
friction; the integral is cleared. A PWM Limit of 0 is the same.

Goal profile: Goal Position reaches the loop through the profile generator, as on the servo (Position and
Velocity Trajectory): a step when Profile Velocity and Profile Acceleration are 0 (unlimited; ``ġ = 0``), else a
trapezoid (velocity ≤ min(Profile Velocity, Velocity Limit), acceleration ≤ Profile Acceleration). With torque
off the trajectory follows the shaft.

Reported (:class:`~retarget.dynamixel.dynamics.ServoFeedback`): Present Position θ, Present Velocity ω, Present
PWM the duty ``d`` (× 885 on the wire), Present Current the motor's current: the electromagnetic torque
``τ_em = stall_torque (d − ω / max_velocity)`` (the output torque plus what friction takes) times the model's
torque constant, stall current / stall torque of its ratings (XM430-W210: 2.3 A / 3.0 N m = 0.767 A/(N m), so
one Present Current unit of 2.69 mA is 3.51 mN m). The no-load current is not modelled.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from retarget.dynamixel.control_table import ControlTable
from retarget.dynamixel.dynamics import ServoCommand, ServoDynamics, ServoFeedback
from retarget.errors import InputError
from retarget.model.servo import (
    DEFAULT_CONTROL_PERIOD,
    PWM_FULL_SCALE,
    ServoParams,
    control_table_gains,
)
from retarget.model.servo import (
    SERVO_MODELS as SERVO_PARAMS,
)
from retarget.sim.servo import duty_cycle, pack_params, servo_torque
from retarget.jit import njit

__all__ = ["NO_DRIVE_GAIN", "ServoLoop", "factory_servo", "loop_params", "motor_output"]

#: The gains [N m/rad, N m/(rad s)] of a loop without drive (torque off, PWM Limit 0, P Gain 0):
#: :class:`ServoParams` needs ``kp > 0``; at this value the loop's torque is below 1e-11 N m at any error.
NO_DRIVE_GAIN: float = 1e-12

# Columns of the state array: shaft angle [rad], speed [rad/s], integral of the error [rad s], Position Trajectory
# [rad], Velocity Trajectory [rad/s].
_THETA, _OMEGA, _IOTA, _GOAL, _GOAL_RATE = range(5)


def factory_servo(table: ControlTable) -> ServoParams:
    """The servo of a control table's model at factory settings: :data:`retarget.model.servo.SERVO_MODELS`'
    entry when the model has one, else a servo with the table's ratings and the XM430-W210's rotor inertia."""
    if table.model in SERVO_PARAMS:
        return SERVO_PARAMS[table.model]
    base = SERVO_PARAMS["XM430-W210"]
    kp, ki, kd = control_table_gains(table["Position P Gain"].initial, table["Position I Gain"].initial,
                                     table["Position D Gain"].initial, table.ratings.stall_torque)
    return base.with_values(model=table.model, kp=kp, ki=ki, kd=kd, stall_torque=table.ratings.stall_torque,
                            max_velocity=table.ratings.no_load_speed)


def loop_params(base: ServoParams, p_gain: float, i_gain: float, d_gain: float, pwm_limit: float, torque_on: bool,
                control_period: float = DEFAULT_CONTROL_PERIOD) -> ServoParams:
    """The loop a servo runs with these control-table values (module docstring).

    Args:
        base: the servo (not ideal): stall torque, no-load speed, rotor inertia, friction, feedforward.
        p_gain, i_gain, d_gain: Position P, I, D Gain [control table units].
        pwm_limit: PWM Limit (0–885).
        torque_on: Torque Enable.
        control_period: the period the I and D gains assume [s].

    Returns:
        ``base`` with the table's gains and duty limit; without drive, gains of :data:`NO_DRIVE_GAIN` (an integral
        state is kept, at that gain, so that the simulators' state layout does not change with Torque Enable).
    """
    kp, ki, kd = control_table_gains(p_gain, i_gain, d_gain, base.stall_torque, control_period=control_period)
    integrating = ki > 0.0
    if not torque_on or pwm_limit <= 0:
        return base.with_values(kp=NO_DRIVE_GAIN, ki=NO_DRIVE_GAIN if integrating else 0.0, kd=0.0, kff1=0.0)
    return base.with_values(kp=max(kp, NO_DRIVE_GAIN), ki=ki, kd=kd, duty_limit=min(pwm_limit, PWM_FULL_SCALE)
                            / PWM_FULL_SCALE)


def motor_output(params: NDArray[np.float64], goal: float, goal_rate: float, angle: float, speed: float,
                 integral: float) -> tuple[float, float]:
    """``(duty [-], electromagnetic torque [N m])`` of one servo (a :func:`retarget.sim.servo.pack_params` row) at
    this state: what Present PWM and Present Current report."""
    duty = float(duty_cycle(params, goal, goal_rate, angle, speed, integral))
    return duty, float(params[4] * (duty - speed / params[5]))


@njit(cache=True)
def _profile(goal: float, g: float, gd: float, vmax: float, amax: float, dt: float) -> tuple[float, float]:
    """One step of the goal's profile: ``(Position Trajectory, Velocity Trajectory)`` after ``dt``."""
    if math.isinf(vmax) and math.isinf(amax):
        return goal, 0.0
    e = goal - g
    if e == 0.0 and gd == 0.0:
        return g, 0.0
    speed = vmax
    if not math.isinf(amax):
        speed = min(speed, math.sqrt(2.0 * amax * abs(e)))
    v_des = speed if e > 0.0 else -speed
    dv = v_des - gd
    if not math.isinf(amax):
        dv = min(max(dv, -amax * dt), amax * dt)
    v = gd + dv
    if abs(e) <= abs(v) * dt:  # arrives within this step
        return goal, 0.0
    return g + v * dt, v


@njit(cache=True)
def _advance(par: NDArray, state: NDArray, goal: NDArray, on: NDArray, vmax: NDArray, amax: NDArray,
             inertia: NDArray, load: NDArray, dt: float, steps: int, out: NDArray) -> None:
    """``steps`` backward-Euler steps of every servo under constant inputs; ``out`` (n, 2): duty, τ_em at the end.

    ``state`` (n, 5) is updated in place (columns: θ, ω, ι, g, ġ); ``inertia`` the total [kg m²], ``load`` the
    external torque [N m].
    """
    n = state.shape[0]
    for _ in range(steps):
        for k in range(n):
            th0, w0, io0 = state[k, 0], state[k, 1], state[k, 2]
            if on[k]:
                g, gd = _profile(goal[k], state[k, 3], state[k, 4], vmax[k], amax[k], dt)
            else:
                g, gd = th0, 0.0
            integrating = par[k, 1] > 0.0 and on[k]
            j = inertia[k]
            w = w0
            th, io = th0, 0.0
            for _it in range(30):
                th = th0 + dt * w
                io = io0 + dt * (g - th) if integrating else 0.0
                tau, d = servo_torque(par[k], g, gd, th, w, io)
                r = j * (w - w0) / dt - tau - load[k]
                slope = j / dt - d[2] * dt - d[3] + (d[4] * dt * dt if integrating else 0.0)
                step = r / slope
                w -= step
                if abs(step) <= 1e-13 * (1.0 + abs(w)):
                    break
            th = th0 + dt * w
            io = io0 + dt * (g - th) if integrating else 0.0
            state[k, 0], state[k, 1], state[k, 2], state[k, 3], state[k, 4] = th, w, io, g, gd
    for k in range(n):
        th, w, io, g, gd = state[k, 0], state[k, 1], state[k, 2], state[k, 3], state[k, 4]
        duty = duty_cycle(par[k], g, gd, th, w, io)
        out[k, 0] = duty
        out[k, 1] = par[k, 4] * (duty - w / par[k, 5])


class ServoLoop(ServoDynamics):
    """Emulated servos: each one's position loop on its rotor, with an optional load (module docstring).

    Args:
        servos: one :class:`ServoParams` per servo (not ideal), in the bus's order ``(n,)``: everything but the
            gains and the duty limit, which come from the control table (the command); its own gains serve a
            command that carries none.
        amperes_per_newton_metre: the motor's torque constant per servo, stall current / stall torque of its
            ratings [A/(N m)], scalar or ``(n,)``.
        load_torque: constant external torque on each shaft [N m] ``(n,)`` (e.g. ``−m g r`` of a horizontal
            arm); default 0.
        load_inertia: inertia each shaft carries besides its rotor [kg m²] ``(n,)``; default 0.
        control_period: the period the table's I and D gains assume [s].
    """

    def __init__(self, servos: Sequence[ServoParams], amperes_per_newton_metre: float | Sequence[float],
                 load_torque: Sequence[float] | None = None, load_inertia: Sequence[float] | None = None,
                 control_period: float = DEFAULT_CONTROL_PERIOD) -> None:
        self.servos = tuple(servos)
        n = self.n = len(self.servos)
        ideal = [k for k, s in enumerate(self.servos) if s.ideal]
        if ideal:
            raise InputError(f"emulated servos {ideal} are ideal position sources: the emulated bus runs a servo "
                             "loop (give a servo model, e.g. XM430-W210)")
        self.amperes_per_newton_metre = np.broadcast_to(np.asarray(amperes_per_newton_metre, dtype=float),
                                                        (n,)).copy()
        self.load_torque = np.zeros(n) if load_torque is None else np.asarray(load_torque, dtype=float).reshape(n)
        extra = np.zeros(n) if load_inertia is None else np.asarray(load_inertia, dtype=float).reshape(n)
        if np.any(extra < 0.0):
            raise InputError(f"load_inertia must not be negative, got {extra.tolist()}")
        self.inertia = np.array([s.rotor_inertia for s in self.servos]) + extra
        self.control_period = float(control_period)
        self._state = np.zeros((n, 5))
        self._out = np.zeros((n, 2))
        self._key: tuple | None = None
        self._par = pack_params(self.servos)

    @classmethod
    def for_table(cls, n: int, table: ControlTable, servos: Sequence[ServoParams] | None = None,
                  **kwargs: object) -> ServoLoop:
        """``n`` servos of a control table's model: ``servos`` (default :func:`factory_servo`) with the torque
        constant of the table's ratings; other arguments as the constructor's."""
        ratings = table.ratings
        base = tuple(servos) if servos is not None else (factory_servo(table),) * n
        return cls(base, ratings.stall_current / ratings.stall_torque, **kwargs)  # type: ignore[arg-type]

    def params_for(self, command: ServoCommand) -> NDArray[np.float64]:
        """The packed loop parameters (n, N_PARAMS) the command's control-table values give (cached)."""
        on = np.asarray(command.torque_enabled, dtype=bool)
        gains, pwm = command.position_gains, command.pwm_limit
        key = (on.tobytes(), None if gains is None else np.asarray(gains).tobytes(),
               None if pwm is None else np.asarray(pwm).tobytes())
        if key != self._key:
            rows = []
            for k, s in enumerate(self.servos):
                if gains is None:
                    table_gains = _table_gains(s, self.control_period)
                else:
                    table_gains = tuple(float(x) for x in gains[k])
                limit = s.duty_limit * PWM_FULL_SCALE if pwm is None else float(pwm[k])
                rows.append(loop_params(s, *table_gains, limit, bool(on[k]), self.control_period))
            self._par = pack_params(rows)
            self._key = key
        return self._par

    @property
    def trajectory(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The goal profiles' Position Trajectory [rad] and Velocity Trajectory [rad/s] ``(n,)``: the ``g``, ``ġ``
        the loops act on."""
        return self._state[:, _GOAL].copy(), self._state[:, _GOAL_RATE].copy()

    @property
    def integral(self) -> NDArray[np.float64]:
        """The loops' integral of the error ι [rad s] ``(n,)`` (0 without integral action or torque)."""
        return self._state[:, _IOTA].copy()

    def set_shafts(self, position: NDArray[np.float64], velocity: NDArray[np.float64],
                   which: NDArray[np.bool_] | None = None) -> None:
        """Put shafts at ``position`` [rad] with ``velocity`` [rad/s] ``(n,)`` (``which``: only those servos);
        the digital twin keeps the loop at the simulated shafts so that it takes over from there."""
        sel = np.ones(self.n, dtype=bool) if which is None else np.asarray(which, dtype=bool)
        self._state[sel, _THETA] = np.asarray(position, dtype=float)[sel]
        self._state[sel, _OMEGA] = np.asarray(velocity, dtype=float)[sel]

    def reset(self, position: NDArray[np.float64]) -> ServoFeedback:
        self._state = np.zeros((self.n, 5))
        p = np.asarray(position, dtype=float).reshape(self.n)
        self._state[:, _THETA] = p
        self._state[:, _GOAL] = p
        # No step: the feedback at rest, and the compiled kernel loaded before the bus answers its first packet.
        n = self.n
        _advance(self._par, self._state, p.copy(), np.zeros(n, dtype=np.bool_), np.full(n, np.inf),
                 np.full(n, np.inf), self.inertia, self.load_torque, 1e-3, 0, self._out)
        return self._feedback()

    def step(self, command: ServoCommand, dt: float) -> ServoFeedback:
        return self.advance(command, dt, 1)

    def advance(self, command: ServoCommand, dt: float, steps: int) -> ServoFeedback:
        """``steps`` steps of ``dt`` [s] under one command, in one compiled call."""
        par = self.params_for(command)
        on = np.ascontiguousarray(command.torque_enabled, dtype=np.bool_)
        vmax = np.where(np.isfinite(command.profile_velocity),
                        np.minimum(command.profile_velocity,
                                   np.where(command.velocity_limit > 0, command.velocity_limit, np.inf)),
                        np.inf)
        _advance(par, self._state, np.ascontiguousarray(command.goal_position, dtype=float), on,
                 np.ascontiguousarray(vmax, dtype=float),
                 np.ascontiguousarray(command.profile_acceleration, dtype=float), self.inertia, self.load_torque,
                 float(dt), int(steps), self._out)
        return self._feedback()

    def _feedback(self) -> ServoFeedback:
        s = self._state
        return ServoFeedback(s[:, _THETA].copy(), s[:, _OMEGA].copy(),
                             self._out[:, 1] * self.amperes_per_newton_metre, self._out[:, 0].copy())


def _table_gains(servo: ServoParams, control_period: float) -> tuple[float, float, float]:
    """A servo's own gains in control-table units (unrounded): the inverse of ``control_table_gains``."""
    p1, i1, d1 = control_table_gains(1.0, 1.0, 1.0, servo.stall_torque, control_period=control_period)
    return servo.kp / p1, servo.ki / i1, servo.kd / d1
