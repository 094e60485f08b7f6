"""Servo files: a ``servo:`` section of its own (``retarget fit-servo --out``), laid over a robot's servos.

A servo file is YAML with one top-level key, ``servo:``, holding what a robot config's ``servo:`` section holds
(:func:`retarget.model.servo.servos_from_config`): SI keys (or control-table gains) and a model name that apply to
every motor, and ``motors: {NAME: {...}}`` per motor::

    servo:
      motors:
        base_pitch: {model: XM430-W210, kp: 12.9, ki: 0.0, kd: 0.021, ..., rotor_inertia: 0.0024}

Laid over a robot (:func:`servos_with_file`, ``retarget plan ROBOT --servo FILE``), the file changes only what it
names: its motor-wide keys apply to every motor, its ``motors:`` entries to those motors, each over the servo the
robot's own config gives that motor. A file written for one motor therefore leaves the others as configured.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from retarget.atomic import write_text_atomic
from retarget.model.servo import ServoError, ServoParams, servo_params, servos_from_config

__all__ = ["read_servo_file", "robot_servos", "servo_file_servos", "servos_with_file", "write_servo_file"]


def read_servo_file(path: str | Path) -> dict[str, object]:
    """The ``servo:`` mapping of a servo file.

    Raises:
        ServoError: an unreadable file, or one without a ``servo:`` mapping (naming the keys found).
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ServoError(f"servo file {path}: cannot read it ({exc})") from exc
    section = data.get("servo") if isinstance(data, Mapping) else None
    if not isinstance(section, Mapping):
        found = sorted(map(str, data)) if isinstance(data, Mapping) else type(data).__name__
        raise ServoError(f"servo file {path}: expected a top-level 'servo:' mapping, found {found}")
    return dict(section)


def servos_with_file(base: Sequence[ServoParams], motors: Sequence[str], section: Mapping[str, object],
                     where: str = "servo file") -> tuple[ServoParams, ...]:
    """Per motor (``motors`` order) its servo in ``base`` with ``section`` (a servo file's mapping) laid over it.

    Raises:
        ServoError: an invalid key or value (naming it), or ``motors:`` naming a motor the robot lacks.
    """
    if len(base) != len(motors):
        raise ValueError(f"{len(base)} servos for {len(motors)} motors")
    section = dict(section)
    per_motor = section.pop("motors", None) or {}
    if not isinstance(per_motor, Mapping):
        raise ServoError(f"{where}: servo.motors: expected a mapping of motor name to servo keys")
    unknown = sorted(set(map(str, per_motor)) - set(motors))
    if unknown:
        raise ServoError(f"{where}: servo.motors: no motor {', '.join(unknown)} in this robot; motors: "
                         f"{', '.join(motors)}")
    out = []
    for name, servo in zip(motors, base):
        if section:
            servo = servo_params(section, base=servo, where=f"{where}: servo")
        override = per_motor.get(name)
        if override is not None:
            if not isinstance(override, Mapping):
                raise ServoError(f"{where}: servo.motors.{name}: expected a mapping")
            servo = servo_params(override, base=servo, where=f"{where}: servo.motors.{name}")
        out.append(servo)
    return tuple(out)


def robot_servos(robot_yaml: str | Path) -> tuple[list[str], tuple[ServoParams, ...]]:
    """The motors of a robot params YAML and the servos its ``servo:`` section gives them (no mesh or URDF work).

    Raises:
        ModelError: an unreadable robot file or an invalid ``servo:`` section.
    """
    from retarget.model.loader import read_robot_yaml
    from retarget.model.robot import ModelError

    cfg = read_robot_yaml(robot_yaml)
    motors = [str(m) for m in cfg.get("motors") or []]
    try:
        return motors, servos_from_config(cfg.get("servo"), motors)
    except ServoError as exc:
        raise ModelError(f"{robot_yaml}: {exc}") from exc


def servo_file_servos(robot: str | Path, path: str | Path) -> tuple[ServoParams, ...]:
    """Per motor of ``robot`` (a name or params YAML) its servo with the servo file at ``path`` laid over it
    (``retarget plan --servo``).

    Raises:
        ServoError: an unreadable or invalid servo file (naming the key, the motor and the file).
        InputError: an unknown robot.
    """
    from retarget.model.library import resolve_robot

    motors, base = robot_servos(resolve_robot(robot))
    return servos_with_file(base, motors, read_servo_file(path), where=f"servo file {path}")


def write_servo_file(path: str | Path, section: Mapping[str, object], comment: str = "") -> Path:
    """Write ``{"servo": section}`` to ``path`` atomically (a temporary file beside it, renamed into place).

    Args:
        path: the file to (over)write.
        section: the ``servo:`` mapping (checked to parse with :func:`servo_params` per motor first).
        comment: lines written as YAML comments above it.

    Raises:
        ServoError: a section that would not load back.
    """
    path = Path(path)
    check = dict(section)
    for name, entry in (check.pop("motors", None) or {}).items():
        servo_params({**check, **entry}, where=f"servo.motors.{name}")
    if check:
        servo_params(check)
    head = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    text = head + yaml.safe_dump({"servo": dict(section)}, sort_keys=False, default_flow_style=False)
    return write_text_atomic(path, text)
