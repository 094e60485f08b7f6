"""Servo parameters: a Dynamixel's position loop, motor and gearbox in SI units, per motor.

A Dynamixel in position mode is a PID loop on the encoder error whose output is a PWM duty ``d`` driving a DC motor
through its gearbox. In SI at the output shaft (what the simulator models, :mod:`retarget.sim.servo`)::

    u = kp (g − θ) + ki ι + kd (ġ − θ̇) + kff1 ġ          [N m]   (ι̇ = g − θ; g the goal position [rad])
    d = sat(u / stall_torque, duty_limit)                   [-]
    τ = stall_torque (d − θ̇ / max_velocity) − coulomb_friction sgn(θ̇) − viscous_friction θ̇      [N m]
    rotor_inertia θ̈ = τ − τ_load

The gains are torque per error at zero speed: a P gain of ``kp`` holds a load ``τ`` at an error ``τ / kp`` until
the duty saturates (``|u| = duty_limit · stall_torque``). The torque falls linearly from stall at zero speed to zero
at the no-load speed (the motor's back EMF; a damping of ``stall_torque / max_velocity`` even below saturation).

Control-table gains convert by the e-Manual's equations (KPP = P/128, KPI = I/65536, KPD = D/16, on errors in
encoder pulses, 4096 per turn; PWM 885 = 100 % duty), per pulse of error to duty, then to torque at stall::

    kp = P/128 · (4096/2π) / 885 · stall_torque                          [N m/rad]
    ki = I/65536 · (4096/2π) / 885 · stall_torque / control_period       [N m/(rad s)]
    kd = D/16 · (4096/2π) / 885 · stall_torque · control_period          [N m s/rad]

The I and D conversions assume the loop sums and differences the error once per ``control_period`` (the e-Manual
says its constants "include the sampling time" without giving it; 1 ms is assumed unless the config says
otherwise). The XM430-W210's factory P 800 is 13.8 N m/rad, saturating at 12.4° of error.

``model: ideal`` is the perfect position source (the shaft follows the goal exactly, whatever the load): the
simulator then prescribes the motor angle, and every report says so.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace

from retarget.errors import InputError

__all__ = [
    "CONFIG_KEYS",
    "IDEAL",
    "PULSES_PER_RAD",
    "PWM_FULL_SCALE",
    "SERVO_MODELS",
    "ServoError",
    "ServoParams",
    "control_table_gains",
    "ideal_flips",
    "servo_params",
    "servos_from_config",
]

#: Encoder pulses per radian (4096 per turn).
PULSES_PER_RAD: float = 4096.0 / (2.0 * math.pi)
#: The PWM value of 100 % duty (the X series' PWM Limit range).
PWM_FULL_SCALE: float = 885.0
#: Control period assumed by the I and D gains' conversion [s].
DEFAULT_CONTROL_PERIOD: float = 1e-3
#: Name of the perfect position source.
IDEAL: str = "ideal"


class ServoError(InputError):
    """A robot's ``servo:`` section is invalid: names the key, the motor and what is accepted."""


@dataclass(frozen=True)
class ServoParams:
    """One servo in SI units at the output shaft (module docstring).

    Attributes:
        model: the servo model (``XM430-W210``, ``XM430-W350``, ``XM540-W270``, ``ideal`` or a user's name).
        kp: position gain [N m/rad].
        ki: integral gain [N m/(rad s)].
        kd: derivative gain on the error rate [N m s/rad].
        kff1: velocity feedforward on the goal's rate [N m s/rad].
        stall_torque: torque at full duty and zero speed at the supply voltage [N m].
        max_velocity: no-load speed at full duty [rad/s].
        rotor_inertia: the motor's rotor inertia reflected through the gearbox [kg m²].
        coulomb_friction: [N m]. viscous_friction: [N m s/rad] (gearbox and bearings).
        duty_limit: PWM Limit as a fraction of full duty (885 = 1).
    """

    model: str
    kp: float = 0.0
    ki: float = 0.0
    kd: float = 0.0
    kff1: float = 0.0
    stall_torque: float = 3.0
    max_velocity: float = 77.0 * 2.0 * math.pi / 60.0
    rotor_inertia: float = 0.0
    coulomb_friction: float = 0.0
    viscous_friction: float = 0.0
    duty_limit: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "model":
                continue
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
                raise ServoError(f"servo {f.name} must be a finite number, got {value!r}")
            if value < 0.0:
                raise ServoError(f"servo {f.name} must not be negative, got {value!r}")
        for name in ("stall_torque", "max_velocity"):
            if getattr(self, name) <= 0.0:
                raise ServoError(f"servo {name} must be positive, got {getattr(self, name)!r}")
        if not self.ideal:
            if self.kp <= 0.0:
                raise ServoError(f"servo kp must be positive for a {self.model} position loop, got {self.kp!r}")
            if self.rotor_inertia <= 0.0:
                raise ServoError(f"servo rotor_inertia must be positive for a {self.model} position loop "
                                 f"(the motor angle is a dynamic degree of freedom), got {self.rotor_inertia!r}")
            if not 0.0 < self.duty_limit <= 1.0:
                raise ServoError(f"servo duty_limit must be in (0, 1], got {self.duty_limit!r}")

    @property
    def ideal(self) -> bool:
        """Whether this is the perfect position source."""
        return self.model == IDEAL

    @property
    def saturation_error(self) -> float:
        """Position error at which the P term alone saturates the duty [rad]."""
        return math.inf if self.ideal else self.duty_limit * self.stall_torque / self.kp

    @property
    def back_emf_damping(self) -> float:
        """``stall_torque / max_velocity`` [N m s/rad]: the torque lost per speed at any duty."""
        return self.stall_torque / self.max_velocity

    def available_torque(self, speed: float) -> float:
        """The most torque the motor gives at ``speed`` [rad/s] in the direction of motion [N m]."""
        return self.stall_torque * (self.duty_limit - abs(speed) / self.max_velocity)

    def with_values(self, **changes: float | str) -> ServoParams:
        """A copy with some fields changed (validated)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_config(self) -> dict[str, float | str]:
        """The ``servo:`` mapping that reproduces these parameters (SI keys)."""
        out = asdict(self)
        return {k: (v if k == "model" else float(v)) for k, v in out.items()}

    def describe(self) -> str:
        """One line for reports: the model and its loop in SI."""
        if self.ideal:
            return "ideal position source (the shaft follows the goal exactly, whatever the load)"
        parts = [f"{self.model}: kp {self.kp:.4g} N m/rad"]
        if self.ki:
            parts.append(f"ki {self.ki:.4g} N m/(rad s)")
        if self.kd:
            parts.append(f"kd {self.kd:.4g} N m s/rad")
        if self.kff1:
            parts.append(f"kff1 {self.kff1:.4g} N m s/rad")
        parts.append(f"stall {self.stall_torque:.4g} N m, no-load {self.max_velocity:.4g} rad/s, "
                     f"rotor {self.rotor_inertia:.3g} kg m²")
        if self.coulomb_friction or self.viscous_friction:
            parts.append(f"friction {self.coulomb_friction:.3g} N m + {self.viscous_friction:.3g} N m s/rad")
        return ", ".join(parts)


def control_table_gains(p_gain: float, i_gain: float, d_gain: float, stall_torque: float, duty_limit: float = 1.0,
                        control_period: float = DEFAULT_CONTROL_PERIOD) -> tuple[float, float, float]:
    """``(kp, ki, kd)`` in SI from the control table's Position P, I and D Gain (module docstring).

    ``duty_limit`` does not scale the gains (PWM Limit clips the output, it does not rescale it); it is accepted
    so that callers pass one set of table values.
    """
    del duty_limit
    if not control_period > 0.0:
        raise ServoError(f"servo control_period must be positive, got {control_period!r}")
    per_pulse = PULSES_PER_RAD / PWM_FULL_SCALE * stall_torque
    return (p_gain / 128.0 * per_pulse, i_gain / 65536.0 * per_pulse / control_period,
            d_gain / 16.0 * per_pulse * control_period)


def table_from_si(params: ServoParams, control_period: float = DEFAULT_CONTROL_PERIOD) -> dict[str, int]:
    """The control table's Position P/I/D Gain and PWM Limit that give ``params``' loop (rounded to integers)."""
    per_pulse = PULSES_PER_RAD / PWM_FULL_SCALE * params.stall_torque
    return {
        "Position P Gain": int(round(params.kp / per_pulse * 128.0)),
        "Position I Gain": int(round(params.ki / per_pulse * 65536.0 * control_period)),
        "Position D Gain": int(round(params.kd / per_pulse * 16.0 / control_period)),
        "PWM Limit": int(round(params.duty_limit * PWM_FULL_SCALE)),
    }


def _xm(model: str, stall: float, no_load_rpm: float, rotor: float) -> ServoParams:
    kp, ki, kd = control_table_gains(800.0, 0.0, 0.0, stall)
    return ServoParams(model, kp=kp, ki=ki, kd=kd, stall_torque=stall, max_velocity=no_load_rpm * 2.0 * math.pi / 60.0,
                       rotor_inertia=rotor)


#: Factory settings at 12 V (e-Manual: P 800, I 0, D 0, PWM Limit 885; stall torque and no-load speed). The
#: reflected rotor inertia is not published: 2.3e-3 kg m² for the XM430-W210 (212.6:1), 6.4e-3 kg m² for the
#: XM430-W350 (the same motor through 353.5:1) and 7.4e-3 kg m² for the XM540-W270 (272.5:1) are estimates
#: (coreless rotors of about 0.5 and 1.0 g cm² times the gear ratio squared); friction is not published either and
#: defaults to zero. `retarget fit-servo` measures all of them.
SERVO_MODELS: dict[str, ServoParams] = {
    "XM430-W210": _xm("XM430-W210", 3.0, 77.0, 2.3e-3),
    "XM430-W350": _xm("XM430-W350", 4.1, 46.0, 6.4e-3),
    "XM540-W270": _xm("XM540-W270", 10.6, 30.0, 7.4e-3),
    IDEAL: ServoParams(IDEAL, stall_torque=3.0, max_velocity=77.0 * 2.0 * math.pi / 60.0),
}

#: SI keys of a ``servo:`` section (besides ``model`` and ``motors``).
SI_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ServoParams) if f.name != "model")
#: Control-table keys, converted with ``control_period`` (module docstring).
TABLE_KEYS: tuple[str, ...] = ("p_gain", "i_gain", "d_gain", "pwm_limit", "control_period")
#: Every key a ``servo:`` section accepts.
CONFIG_KEYS: tuple[str, ...] = ("model", *SI_KEYS, *TABLE_KEYS, "motors")


def servo_params(
    data: Mapping[str, object] | None, base: ServoParams | None = None, where: str = "servo"
) -> ServoParams:
    """One servo's parameters from a ``servo:`` mapping over ``base`` (default: the named model's factory values).

    Args:
        data: SI keys (:data:`SI_KEYS`), or control-table gains ``p_gain``, ``i_gain``, ``d_gain`` (table units),
            ``pwm_limit`` (0–885) with the ``control_period`` [s] they assume; ``model`` picks the defaults.
        base: defaults for missing keys (a robot-wide section under a per-motor one).
        where: what to name in errors (``servo``, ``servo.motors.elbow``).

    Raises:
        ServoError: an unknown key or model (naming it and the known ones), a key given in both units, or a value
            out of range.
    """
    raw = dict(data or {})
    raw.pop("motors", None)
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        raise ServoError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"known: {', '.join(CONFIG_KEYS)}")
    model = raw.pop("model", None)
    if model is not None:
        model = str(model)
        if model not in SERVO_MODELS and base is None:
            # A user's own servo: the keys that set its loop and motor must be given (no other model's values
            # stand in for them); the rest (I, D, feedforward, friction, PWM limit) default to the factory's zero.
            missing = [k for k in ("stall_torque", "max_velocity", "rotor_inertia") if k not in raw]
            if "kp" not in raw and "p_gain" not in raw:
                missing.append("kp (or p_gain)")
            if missing:
                raise ServoError(f"{where}: servo model {model!r} is not in the library (known: "
                                 f"{', '.join(SERVO_MODELS)}); a servo of your own needs {', '.join(missing)} "
                                 "(docs/servo.md; `retarget fit-servo` measures them)")
            base = replace(SERVO_MODELS["XM430-W210"], model=model)
        elif model in SERVO_MODELS:
            base = SERVO_MODELS[model]
        else:
            base = replace(base, model=model)  # type: ignore[arg-type]
    base = base or SERVO_MODELS["XM430-W210"]
    for si, table in (("kp", "p_gain"), ("ki", "i_gain"), ("kd", "d_gain"), ("duty_limit", "pwm_limit")):
        if si in raw and table in raw:
            raise ServoError(f"{where}: give {si} (SI) or {table} (control table), not both")
    values: dict[str, float] = {}
    for key, value in raw.items():
        if key == "control_period":
            continue
        try:
            values[key] = float(value)
        except (TypeError, ValueError) as exc:
            raise ServoError(f"{where}.{key} must be a number, got {value!r}") from exc
    stall = values.get("stall_torque", base.stall_torque)
    if any(k in values for k in ("p_gain", "i_gain", "d_gain")):
        period = float(raw.get("control_period", DEFAULT_CONTROL_PERIOD))
        kp, ki, kd = control_table_gains(values.pop("p_gain", base.kp * 128.0 / (PULSES_PER_RAD / PWM_FULL_SCALE * stall)),
                                         values.pop("i_gain", 0.0), values.pop("d_gain", 0.0), stall,
                                         control_period=period)
        values.setdefault("kp", kp)
        if "ki" not in values:
            values["ki"] = ki
        if "kd" not in values:
            values["kd"] = kd
    elif "control_period" in raw:
        raise ServoError(f"{where}.control_period only converts p_gain, i_gain, d_gain; none is given")
    if "pwm_limit" in values:
        values["duty_limit"] = values.pop("pwm_limit") / PWM_FULL_SCALE
    try:
        return replace(base, **values)
    except ServoError as exc:
        raise ServoError(f"{where}: {exc}") from exc


def ideal_flips(motors: Sequence[str], were: Sequence[ServoParams], now: Sequence[ServoParams]) -> list[str]:
    """The motors whose servo is ideal in one of ``were`` and ``now`` and modelled in the other (per motor, in
    ``motors``' order): a reduced model trained with the one has not seen the other's loop."""
    return [name for name, a, b in zip(motors, were, now) if a.ideal != b.ideal]


def servos_from_config(section: Mapping[str, object] | None, motors: Sequence[str],
                       default_model: str = "XM430-W210") -> tuple[ServoParams, ...]:
    """Per motor (in ``motors`` order), the servo of a robot config's ``servo:`` section.

    The section's keys apply to every motor; ``motors: {NAME: {...}}`` overrides them per motor. Without a
    section every motor is a ``default_model`` at factory settings.

    Raises:
        ServoError: an invalid key or value (:func:`servo_params`), or ``motors:`` naming a motor the robot lacks.
    """
    if section is not None and not isinstance(section, Mapping):
        raise ServoError(f"servo: expected a mapping, got {type(section).__name__}")
    section = dict(section or {"model": default_model})
    if "model" not in section:
        section["model"] = default_model
    robot_wide = servo_params(section, where="servo")
    per_motor = section.get("motors") or {}
    if not isinstance(per_motor, Mapping):
        raise ServoError("servo.motors: expected a mapping of motor name to servo keys")
    unknown = sorted(set(map(str, per_motor)) - set(motors))
    if unknown:
        raise ServoError(f"servo.motors: no motor {', '.join(unknown)} in this robot; motors: {', '.join(motors)}")
    out = []
    for name in motors:
        override = per_motor.get(name)
        if override is None:
            out.append(robot_wide)
            continue
        if not isinstance(override, Mapping):
            raise ServoError(f"servo.motors.{name}: expected a mapping")
        if "motors" in override:
            raise ServoError(f"servo.motors.{name}: unknown key motors")
        out.append(servo_params(override, base=robot_wide, where=f"servo.motors.{name}"))
    return tuple(out)
