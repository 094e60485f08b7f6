"""retarget.model: robot descriptions as plain typed objects (links, joints, motors, flexible parts).

:func:`load_robot` reads ``config/<robot>.yaml`` + its URDF/xacro; :class:`RobotBuilder` builds robots in code.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from retarget._lazy import lazy_exports

# Public names → defining module, imported on first access (PEP 562): `retarget --help` and the CLI's start
# import this package without its heavy dependencies.
_EXPORTS: dict[str, str] = {
    "load_robot": "loader",
    "FlexiblePart": "robot",
    "Interface": "robot",
    "Joint": "robot",
    "JOINT_KINDS": "robot",
    "Link": "robot",
    "ModelError": "robot",
    "RobotBuilder": "robot",
    "RobotModel": "robot",
    "TrackedBody": "robot",
    "ServoParams": "servo",
    "ServoError": "servo",
    "SERVO_MODELS": "servo",
    "servo_params": "servo",
    "servos_from_config": "servo",
}

if TYPE_CHECKING:
    from retarget.model.loader import load_robot
    from retarget.model.robot import (
        FlexiblePart,
        Interface,
        Joint,
        JOINT_KINDS,
        Link,
        ModelError,
        RobotBuilder,
        RobotModel,
        TrackedBody,
    )
    from retarget.model.servo import SERVO_MODELS, ServoError, ServoParams, servo_params, servos_from_config


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "FlexiblePart",
    "Interface",
    "JOINT_KINDS",
    "Joint",
    "Link",
    "ModelError",
    "RobotBuilder",
    "RobotModel",
    "SERVO_MODELS",
    "ServoError",
    "ServoParams",
    "TrackedBody",
    "load_robot",
    "servo_params",
    "servos_from_config",
]
