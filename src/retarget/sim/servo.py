"""The servo as part of the plant: each modelled motor's angle is a dynamic degree of freedom.

An ideal motor prescribes its joint angle, ``θ(t)``, through the motor constraint row. A modelled servo
(:class:`retarget.model.servo.ServoParams`, not ``ideal``) makes ``θ`` a coordinate of the state instead, driven by
the motor torque against the structure's reaction; the controls enter through the goal ``g(t)``, not through a
constraint. Each engine appends the servo coordinates after its own, in pairs (``U`` entry ↔ its rate in ``V``),
so that ``U_tail̇ = V_tail`` holds for everything after the rigid bodies::

    U: […, θ_1 … θ_s, ι_1 … ι_k]          θ: shaft angle [rad]; ι: the integral of the error [rad s] (ki > 0 only)
    V: […, ω_1 … ω_s, e_1 … e_k]          ω = θ̇ [rad/s]; e = ι̇ [rad] (an algebraic rate: e = g − θ)

Rows of the BDF residual (``h = γΔt``, bars the BDF history) that this module adds::

    R_θ = θ − θ̄ − h ω                                                  [rad]
    R_ι = ι − ῑ − h e                                                  [rad s]
    R_ω = J (ω − ω̄)/h − τ(g, ġ, θ, ω, ι) − C_θᵀ λ                     [N m]
    R_e = e − (g − θ)                                                   [rad]

with the motor torque ``τ`` of :func:`servo_torque` (PID on the error, saturated duty, torque–speed line, friction)
and ``C_θᵀ λ`` the motor constraint's reaction on the shaft (the engines add it: it comes from the constraint
block). The motor constraint row itself is unchanged: ``sin(θ − φ) = 0`` ties the joint angle ``φ`` to the shaft,
and its multiplier is the torque the structure takes from the servo. The perfect servo is the limit of infinite
gain (tested).

The goal replaces the angle as the engines' input: ``∂R/∂g`` and ``∂R/∂ġ`` (what the discrete adjoint multiplies
by the B-spline basis) are nonzero only on the ω and e rows of modelled servos.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from retarget.model.servo import ServoParams
from retarget.jit import njit

__all__ = [
    "FRICTION_SPEED",
    "N_PARAMS",
    "SATURATION_BLEND",
    "ServoLayout",
    "ServoRows",
    "duty_cycle",
    "holding_goals",
    "pack_params",
    "servo_layout",
    "servo_mass",
    "servo_rows",
    "servo_torque",
    "soft_saturation",
]

#: Coulomb friction is ``coulomb · tanh(ω / FRICTION_SPEED)`` [rad/s]: smooth for Newton and the adjoint.
FRICTION_SPEED: float = 0.02
#: The duty saturates smoothly over ``± SATURATION_BLEND · duty_limit`` around the limit (C¹, exact elsewhere).
SATURATION_BLEND: float = 0.03
#: Columns of a packed parameter row (:func:`pack_params`).
PARAM_NAMES: tuple[str, ...] = ("kp", "ki", "kd", "kff1", "stall_torque", "max_velocity", "rotor_inertia",
                                "coulomb_friction", "viscous_friction", "duty_limit")
N_PARAMS: int = len(PARAM_NAMES)


def pack_params(servos: Sequence[ServoParams]) -> NDArray[np.float64]:
    """(n, :data:`N_PARAMS`) rows of the servos' parameters in :data:`PARAM_NAMES` order."""
    out = np.zeros((len(servos), N_PARAMS))
    for i, s in enumerate(servos):
        out[i] = [getattr(s, name) for name in PARAM_NAMES]
    return out


@njit(cache=True)
def soft_saturation(x: float, limit: float) -> tuple[float, float]:
    """``(sat(x), sat'(x))``: the identity within ``±limit(1 − b)``, ``±limit`` beyond ``±limit(1 + b)``, a
    quadratic blend between (C¹; ``b`` = :data:`SATURATION_BLEND`)."""
    d = SATURATION_BLEND * limit
    a = abs(x)
    s = 1.0 if x >= 0.0 else -1.0
    if a <= limit - d:
        return x, 1.0
    if a >= limit + d:
        return s * limit, 0.0
    r = a - (limit - d)
    return s * (a - r * r / (4.0 * d)), 1.0 - r / (2.0 * d)


@njit(cache=True)
def servo_torque(par: NDArray, g: float, gd: float, th: float, w: float, iota: float) -> tuple[float, NDArray]:
    """The servo's output torque and its partial derivatives.

    Args:
        par: one packed parameter row (:func:`pack_params`).
        g, gd: goal [rad] and its rate [rad/s]. th, w: shaft angle [rad] and speed [rad/s]. iota: integral of the
            error [rad s].

    Returns:
        ``τ`` [N m] and ``∂τ/∂(g, ġ, θ, ω, ι)`` (5,).
    """
    kp, ki, kd, kff1 = par[0], par[1], par[2], par[3]
    stall, vmax, coul, visc, lim = par[4], par[5], par[7], par[8], par[9]
    u = kp * (g - th) + ki * iota + kd * (gd - w) + kff1 * gd
    duty, dd = soft_saturation(u / stall, lim)
    tw = np.tanh(w / FRICTION_SPEED)
    tau = stall * (duty - w / vmax) - coul * tw - visc * w
    out = np.empty(5)
    out[0] = dd * kp
    out[1] = dd * (kd + kff1)
    out[2] = -dd * kp
    out[3] = -dd * kd - stall / vmax - coul * (1.0 - tw * tw) / FRICTION_SPEED - visc
    out[4] = dd * ki
    return tau, out


@njit(cache=True)
def duty_cycle(par: NDArray, g: float, gd: float, th: float, w: float, iota: float) -> float:
    """The saturated PWM duty (−duty_limit … duty_limit) the loop commands (``Present PWM / 885``)."""
    u = par[0] * (g - th) + par[1] * iota + par[2] * (gd - w) + par[3] * gd
    return soft_saturation(u / par[4], par[9])[0]


@dataclass(frozen=True, eq=False)
class ServoLayout:
    """Where the modelled servos' coordinates sit in an engine's ``U`` and ``V`` (module docstring).

    Attributes:
        motor_servo: per motor, its servo index, or -1 for an ideal motor (n_motors,).
        params: packed parameters of the modelled servos (n_s, N_PARAMS).
        servos: the modelled servos' :class:`ServoParams` (n_s,).
        u_theta, v_omega: U index of θ, V index of ω per servo (n_s,).
        u_iota, v_e: U index of ι, V index of e per servo, -1 without integral action (n_s,).
    """

    motor_servo: NDArray[np.int64]
    params: NDArray[np.float64]
    servos: tuple[ServoParams, ...]
    u_theta: NDArray[np.int64]
    v_omega: NDArray[np.int64]
    u_iota: NDArray[np.int64]
    v_e: NDArray[np.int64]

    @property
    def n_servos(self) -> int:
        """Modelled servos."""
        return len(self.servos)

    @cached_property
    def size(self) -> int:
        """Coordinates added to U (= to V)."""
        return self.n_servos + int(np.sum(self.u_iota >= 0))

    @property
    def ideal(self) -> bool:
        """Whether every motor is an ideal position source (nothing added)."""
        return self.n_servos == 0

    @property
    def per_motor(self) -> tuple[ServoParams, ...]:
        """Per motor its :class:`ServoParams` (the ideal source for an ideal motor)."""
        from retarget.model.servo import IDEAL, SERVO_MODELS

        return tuple(self.servos[k] if k >= 0 else SERVO_MODELS[IDEAL] for k in self.motor_servo)

    def shifted(self, du: int, dv: int) -> ServoLayout:
        """The same layout with U indices moved by ``du`` and V indices by ``dv`` (another engine's layout)."""
        return ServoLayout(self.motor_servo, self.params, self.servos, self.u_theta + du, self.v_omega + dv,
                           np.where(self.u_iota >= 0, self.u_iota + du, -1),
                           np.where(self.v_e >= 0, self.v_e + dv, -1))

    def motor_state(self, u: NDArray[np.float64], v: NDArray[np.float64], goal: NDArray[np.float64],
                    goal_dot: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The motor angles and rates the constraint rows see (n_motors,): the state's shaft for a modelled
        servo, the goal itself for an ideal motor."""
        th = np.array(goal, dtype=float, copy=True)
        thd = np.array(goal_dot, dtype=float, copy=True)
        for m, k in enumerate(self.motor_servo):
            if k >= 0:
                th[m] = u[self.u_theta[k]]
                thd[m] = v[self.v_omega[k]]
        return th, thd

    def shaft_angles(self, u: NDArray[np.float64], goal: NDArray[np.float64]) -> NDArray[np.float64]:
        """Shaft angle per motor [rad] (n_motors,) (ideal motors: the goal)."""
        th = np.array(goal, dtype=float, copy=True)
        for m, k in enumerate(self.motor_servo):
            if k >= 0:
                th[m] = u[self.u_theta[k]]
        return th


def holding_goals(servos: Sequence[ServoParams], shaft: NDArray[np.float64],
                  load: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """The goals at which each servo, at rest, holds its shaft at ``shaft`` against ``load``.

    At rest the loop's torque balances the load: a P (and D) servo needs the error ``τ/kp`` (its sag; the duty
    saturates beyond ``duty_limit · stall_torque``), a servo with integral action reaches the goal itself (the
    integral carries the load).

    Args:
        servos: one per motor (ideal ones hold any load at their goal).
        shaft: shaft angles [rad] (..., n_motors).
        load: the torque the loop must give [N m] (..., n_motors): ``−C_θᵀλ`` of the motor rows (the motor row's
            multiplier with opposite sign).

    Returns:
        ``(goal, beyond)``: goals [rad] (..., n_motors) and where the load exceeds what the duty can give (there the
        goal is the saturation's edge).
    """
    shaft = np.asarray(shaft, dtype=float)
    load = np.asarray(load, dtype=float)
    goal = shaft.copy()
    beyond = np.zeros(shaft.shape, dtype=bool)
    for m, sv in enumerate(servos):
        if sv.ideal or sv.ki > 0.0:
            continue
        limit = sv.duty_limit * sv.stall_torque * (1.0 - SATURATION_BLEND)
        tau = load[..., m]
        beyond[..., m] = np.abs(tau) > limit
        goal[..., m] = shaft[..., m] + np.clip(tau, -limit, limit) / sv.kp
    return goal, beyond


def servo_mass(layout: ServoLayout) -> NDArray[np.float64]:
    """The generalized mass of the servo tail of V (size,): the rotor inertia on ω [kg m²], 0 on e."""
    return np.concatenate([layout.params[:, 6] if layout.n_servos else np.zeros(0),
                           np.zeros(layout.size - layout.n_servos)])


def servo_layout(servos: Sequence[ServoParams], prismatic: Sequence[bool], u_start: int, v_start: int) -> ServoLayout:
    """The layout of the modelled servos among ``servos`` (one per motor), appended at ``u_start`` / ``v_start``.

    Raises:
        ValueError: a modelled servo on a prismatic motor (only rotary servos are modelled).
    """
    motor_servo = np.full(len(servos), -1, dtype=np.int64)
    modelled = []
    for m, s in enumerate(servos):
        if s.ideal:
            continue
        if prismatic[m]:
            raise ValueError(f"motor {m} is prismatic: only rotary servos are modelled (give it model: ideal)")
        motor_servo[m] = len(modelled)
        modelled.append(s)
    n = len(modelled)
    integrating = [k for k, s in enumerate(modelled) if s.ki > 0.0]
    u_iota = np.full(n, -1, dtype=np.int64)
    v_e = np.full(n, -1, dtype=np.int64)
    for j, k in enumerate(integrating):
        u_iota[k] = u_start + n + j
        v_e[k] = v_start + n + j
    return ServoLayout(motor_servo, pack_params(modelled), tuple(modelled), u_start + np.arange(n, dtype=np.int64),
                       v_start + np.arange(n, dtype=np.int64), u_iota, v_e)


@dataclass(frozen=True, eq=False)
class ServoRows:
    """The servo rows of one residual evaluation (module docstring), with their derivatives.

    Entries are (row, column, value) triplets in the engine's ``S`` numbering: ``jac_*`` of ``∂R/∂S``;
    ``r_goal`` (n_S, n_motors) and ``r_goal_dot`` ``∂R/∂g``, ``∂R/∂ġ``; ``mass`` the ω rows' generalized mass
    (V index, value) for the BDF history; ``torque`` the motor torque ``τ`` per servo [N m].
    """

    rows: NDArray[np.int64]
    values: NDArray[np.float64]
    jac_rows: NDArray[np.int64]
    jac_cols: NDArray[np.int64]
    jac_values: NDArray[np.float64]
    goal_rows: NDArray[np.int64]
    goal_motors: NDArray[np.int64]
    goal_values: NDArray[np.float64]
    goal_dot_values: NDArray[np.float64]
    mass_index: NDArray[np.int64]
    mass_values: NDArray[np.float64]
    torque: NDArray[np.float64]


def servo_rows(layout: ServoLayout, nu: int, u: NDArray[np.float64], v: NDArray[np.float64],
               v_bar: NDArray[np.float64], h: float, goal: NDArray[np.float64],
               goal_dot: NDArray[np.float64]) -> ServoRows:
    """The servo's V rows of the BDF residual (``R_ω`` without the constraint reaction ``C_θᵀλ``, and ``R_e``) and
    their derivatives, in ``S`` numbering (V rows offset by ``nu``). The kinematic rows ``R_θ``, ``R_ι`` are the
    engines' own (``U̇ = V`` on everything after the rigid bodies)."""
    rows, vals = [], []
    jr, jc, jv = [], [], []
    gr, gm, gv, gdv = [], [], [], []
    mi, mv = [], []
    torque = np.zeros(layout.n_servos)
    for m, k in enumerate(layout.motor_servo):
        if k < 0:
            continue
        par = layout.params[k]
        it, io = int(layout.u_theta[k]), int(layout.v_omega[k])
        ii, ie = int(layout.u_iota[k]), int(layout.v_e[k])
        th, w = u[it], v[io]
        iota = u[ii] if ii >= 0 else 0.0
        tau, d = servo_torque(par, float(goal[m]), float(goal_dot[m]), float(th), float(w), float(iota))
        torque[k] = tau
        inertia = par[6]
        rw = nu + io
        rows += [rw]
        vals += [inertia * (w - v_bar[io]) / h - tau]
        jr += [rw, rw]
        jc += [nu + io, it]
        jv += [inertia / h - d[3], -d[2]]
        gr += [rw]
        gm += [m]
        gv += [-d[0]]
        gdv += [-d[1]]
        mi += [io]
        mv += [inertia]
        if ii >= 0:
            re = nu + ie
            rows += [re]
            vals += [v[ie] - (goal[m] - th)]
            jr += [rw, re, re]
            jc += [ii, nu + ie, it]
            jv += [-d[4], 1.0, 1.0]
            gr += [re]
            gm += [m]
            gv += [-1.0]
            gdv += [0.0]
    i64 = np.int64
    return ServoRows(np.array(rows, i64), np.array(vals, float), np.array(jr, i64), np.array(jc, i64),
                     np.array(jv, float), np.array(gr, i64), np.array(gm, i64), np.array(gv, float),
                     np.array(gdv, float), np.array(mi, i64), np.array(mv, float), torque)
