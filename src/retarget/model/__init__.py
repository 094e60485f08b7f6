"""retarget.model: robot descriptions as plain typed objects (links, joints, motors, flexible parts).

:func:`load_robot` reads ``config/<robot>.yaml`` + its URDF/xacro; :class:`RobotBuilder` builds robots in code.
"""
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

__all__ = [
    "FlexiblePart",
    "Interface",
    "JOINT_KINDS",
    "Joint",
    "Link",
    "ModelError",
    "RobotBuilder",
    "RobotModel",
    "TrackedBody",
    "load_robot",
]
