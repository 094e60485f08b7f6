"""The servos a robot's description declares, per joint of its servo bus (no ROS, no meshes).

The robot's ``config/<robot>.yaml`` is the source of truth for its servos: its ``servo:`` section (robot-wide
keys, per-motor overrides under ``motors:``; :func:`retarget.model.servo.servos_from_config`) gives every motor's
:class:`~retarget.model.servo.ServoParams`. The driver writes their gains to the servos at start
(:meth:`retarget.dynamixel.bus.DynamixelBus.write_servo_gains`); the emulated bus moves its servos by them.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from retarget.model.servo import ServoParams, servos_from_config

__all__ = ["servos_for_joints"]


def servos_for_joints(robot: str | Path, joints: Sequence[str]) -> tuple[ServoParams | None, ...]:
    """Per joint, the servo the robot's description declares for that motor; None for a joint that is not one of
    its motors.

    Args:
        robot: robot name or description YAML path.
        joints: joint names (e.g. the driver's ``joint_names``).

    Raises:
        UnknownNameError: unknown robot. InputError: no ``retarget:`` section. ServoError: an invalid ``servo:``
            section (names the key and what is accepted).
    """
    from retarget.model.library import robot_config

    cfg = robot_config(robot)["retarget"]
    motors = [str(m) for m in cfg.get("motors") or []]
    by_motor = dict(zip(motors, servos_from_config(cfg.get("servo"), motors)))
    return tuple(by_motor.get(str(j)) for j in joints)
