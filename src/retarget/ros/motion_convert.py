"""Adapters between :class:`~retarget.motion.Motion` and real rclpy ``trajectory_msgs`` messages.

``trajectory_msgs`` is imported inside the functions only, so importing :mod:`retarget.motion` never needs ROS.
Reading works on any object with the message's attributes
(see :func:`retarget.motion.trajectory.motion_from_trajectory`).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from retarget.motion.limits import HOLD_RAD, hold_note
from retarget.motion.motion import Motion

if TYPE_CHECKING:
    from trajectory_msgs.msg import JointTrajectory
from retarget.motion.trajectory import motion_from_trajectory, motion_to_trajectory_dict

__all__ = ["for_joints", "from_joint_trajectory_msg", "to_joint_trajectory_msg"]


def for_joints(motion: Motion, joints: Sequence[str], command: str) -> Motion:
    """``motion`` in the robot's wire order; the joints it has no column for hold their zero pose, which the
    command says on stderr (``retarget <command>: ...``), as the planner does for an animation that leaves motors
    out.

    Raises:
        JointMismatchError: The motion moves joints the robot does not have (naming them).
    """
    held = motion.held(joints)
    full = motion.with_joints(joints, HOLD_RAD)
    if held:
        print(f"retarget {command}: {hold_note(held)}", file=sys.stderr, flush=True)
    return full


def to_joint_trajectory_msg(motion: Motion, *, velocities: bool = False, frame_id: str = "") -> JointTrajectory:
    """A ``trajectory_msgs.msg.JointTrajectory`` of the motion (header stamp zero: "start now").

    Args:
        motion: Motion to convert.
        velocities: Also fill ``points[].velocities`` [rad/s].
        frame_id: ``header.frame_id``.
    """
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    data = motion_to_trajectory_dict(motion, velocities=velocities, frame_id=frame_id)
    msg = JointTrajectory()
    msg.header.frame_id = frame_id
    msg.joint_names = data["joint_names"]
    for point in data["points"]:
        p = JointTrajectoryPoint()
        p.positions = point["positions"]
        p.velocities = point["velocities"]
        p.time_from_start = Duration(sec=point["time_from_start"]["sec"],
                                     nanosec=point["time_from_start"]["nanosec"])
        msg.points.append(p)
    return msg


def from_joint_trajectory_msg(msg: JointTrajectory) -> Motion:
    """The motion of a ``trajectory_msgs.msg.JointTrajectory`` (or any object with its attributes)."""
    return motion_from_trajectory(msg, source="JointTrajectory message")[0]
