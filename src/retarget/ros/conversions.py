"""Conversions between ROS messages and the plain types of :mod:`retarget.control` (the only glue layer)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from builtin_interfaces.msg import Duration, Time
from control_msgs.msg import JointTolerance
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from retarget.control import GoalPoint, GoalTolerance

__all__ = ["duration_to_seconds", "goal_points", "goal_tolerances", "horizon_msg", "point_msg",
           "seconds_to_duration", "setpoint_msg", "time_to_seconds"]


def duration_to_seconds(d: Duration) -> float:
    """``builtin_interfaces/Duration`` → [s] (``sec`` may be negative)."""
    return float(d.sec) + 1e-9 * float(d.nanosec)


def seconds_to_duration(t: float) -> Duration:
    """[s] → ``builtin_interfaces/Duration``."""
    ns = int(round(t * 1e9))
    return Duration(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def time_to_seconds(t: Time) -> float:
    """``builtin_interfaces/Time`` → [s]."""
    return float(t.sec) + 1e-9 * float(t.nanosec)


def goal_points(trajectory: JointTrajectory) -> list[GoalPoint]:
    """The points of a ``JointTrajectory`` as :class:`GoalPoint` (sizes are checked later, by validation)."""
    return [GoalPoint(duration_to_seconds(p.time_from_start), list(p.positions), list(p.velocities),
                      list(p.accelerations), list(p.effort)) for p in trajectory.points]


def goal_tolerances(entries: Sequence[JointTolerance]) -> list[GoalTolerance]:
    """``control_msgs/JointTolerance[]`` → :class:`GoalTolerance` list."""
    return [GoalTolerance(e.name, e.position, e.velocity, e.acceleration) for e in entries]


def point_msg(positions: np.ndarray, velocities: np.ndarray | None = None,
              accelerations: np.ndarray | None = None, time_from_start: float = 0.0) -> JointTrajectoryPoint:
    """A ``JointTrajectoryPoint`` from arrays [rad], [rad/s], [rad/s^2]."""
    point = JointTrajectoryPoint()
    point.positions = [float(x) for x in positions]
    if velocities is not None:
        point.velocities = [float(x) for x in velocities]
    if accelerations is not None:
        point.accelerations = [float(x) for x in accelerations]
    point.time_from_start = seconds_to_duration(time_from_start)
    return point


def horizon_msg(joint_names: Sequence[str], times: Sequence[float], positions: np.ndarray, velocities: np.ndarray,
                stamp: Time) -> JointTrajectory:
    """A ``JointTrajectory`` of the next samples of a trajectory: positions [rad] and velocities [rad/s] ``(k, m)`` at
    ``times`` [s] after ``stamp``, the instant the first one belongs to (the driver runs it on that clock)."""
    msg = JointTrajectory()
    msg.header.stamp = stamp
    msg.joint_names = list(joint_names)
    msg.points = [point_msg(q, v, time_from_start=float(t)) for t, q, v in zip(times, positions, velocities)]
    return msg


def setpoint_msg(joint_names: Sequence[str], positions: np.ndarray, velocities: np.ndarray | None,
                 stamp: Time) -> JointTrajectory:
    """A one-point ``JointTrajectory``: the setpoint the driver applies at once."""
    msg = JointTrajectory()
    msg.header.stamp = stamp
    msg.joint_names = list(joint_names)
    msg.points = [point_msg(positions, velocities)]
    return msg
