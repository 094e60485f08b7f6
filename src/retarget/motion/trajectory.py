"""trajectory_msgs/JointTrajectory without ROS: conversion to and from plain dicts, duck-typed messages and YAML.

The dict form mirrors the message field for field (``header``, ``joint_names``, ``points[].positions``,
``velocities``, ``accelerations``, ``effort``, ``time_from_start {sec, nanosec}``), which is also what
``ros2 topic echo`` prints as YAML. An object with those attributes (an rclpy message, a rosbags message) is
accepted as input. ``time_from_start`` is integer nanoseconds on the wire, so times round-trip to 1 ns.
The rclpy message itself is built in :mod:`retarget.ros.motion_convert`.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

import numpy as np
import yaml

from retarget.atomic import write_text_atomic
from retarget.motion.errors import MotionFormatError
from retarget.motion.limits import RowLabel
from retarget.motion.motion import Motion, validate_motion_arrays

__all__ = ["DurationDict", "TrajectoryDict", "TrajectoryPointDict", "duration_to_seconds", "format_trajectory_yaml",
           "is_trajectory_dict", "motion_from_trajectory",
           "motion_to_trajectory_dict", "parse_trajectory_yaml", "read_trajectory_yaml", "seconds_to_duration",
           "write_trajectory_yaml"]


class DurationDict(TypedDict):
    """builtin_interfaces/Duration as a dict: whole seconds and nanoseconds in ``[0, 1e9)``."""

    sec: int
    nanosec: int


class HeaderDict(TypedDict):
    """std_msgs/Header as a dict."""

    stamp: DurationDict
    frame_id: str


class TrajectoryPointDict(TypedDict):
    """trajectory_msgs/JointTrajectoryPoint as a dict ([rad], [rad/s], [rad/s²], [N m])."""

    positions: list[float]
    velocities: list[float]
    accelerations: list[float]
    effort: list[float]
    time_from_start: DurationDict


class TrajectoryDict(TypedDict):
    """trajectory_msgs/JointTrajectory as a dict (module docstring)."""

    header: HeaderDict
    joint_names: list[str]
    points: list[TrajectoryPointDict]


def _field(obj: object, key: str, default: object = None) -> object:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def seconds_to_duration(seconds: float) -> DurationDict:
    """``{sec, nanosec}`` of a time [s], rounded to the nearest nanosecond (``nanosec`` in ``[0, 1e9)``)."""
    total = round(seconds * 1e9)
    sec, nanosec = divmod(total, 1_000_000_000)
    return {"sec": int(sec), "nanosec": int(nanosec)}


def duration_to_seconds(duration: object) -> float:
    """Seconds [s] of a ``{sec, nanosec}`` dict or a builtin_interfaces Duration/Time-like object."""
    sec, nanosec = _field(duration, "sec"), _field(duration, "nanosec")
    if sec is None or nanosec is None:
        raise MotionFormatError(f"time_from_start must have sec and nanosec, got {duration!r}")
    return int(sec) + int(nanosec) * 1e-9


def is_trajectory_dict(data: object) -> bool:
    """Whether a parsed YAML/JSON object looks like a JointTrajectory (has ``joint_names`` and ``points``)."""
    return isinstance(data, Mapping) and "joint_names" in data and "points" in data


def motion_from_trajectory(message: object, *, source: str | None = None) -> tuple[Motion, RowLabel]:
    """Motion of a JointTrajectory given as a dict or any object with the message's attributes.

    Only ``positions`` are read (velocities and accelerations are derived data for a Motion).

    Returns:
        The motion and its row labels (``"point i"``).

    Raises:
        MotionFormatError: No points, a point without positions or with the wrong count, NaN, unsorted or duplicate
            ``time_from_start``.
    """
    names = [str(n) for n in (_field(message, "joint_names") or [])]
    points = list(_field(message, "points") or [])
    if not points:
        raise MotionFormatError("JointTrajectory has no points", source=source)
    t = np.empty(len(points))
    q = np.empty((len(points), len(names)))
    for i, point in enumerate(points):
        positions = _field(point, "positions")
        count = 0 if positions is None else len(positions)
        if count != len(names):
            raise MotionFormatError(f"point {i}: {count} positions for {len(names)} joints {names}",
                                    source=source, row=f"point {i}")
        try:
            q[i] = np.asarray(positions, dtype=np.float64)
        except (TypeError, ValueError):
            raise MotionFormatError(f"point {i}: positions are not numbers: {positions!r}", source=source,
                                    row=f"point {i}") from None
        stamp = _field(point, "time_from_start")
        if stamp is None:
            raise MotionFormatError(f"point {i}: missing time_from_start", source=source, row=f"point {i}")
        t[i] = duration_to_seconds(stamp)

    def row_label(index: int) -> str:
        return f"point {index}"

    tt, nn, qq = validate_motion_arrays(t, names, q, row_label=row_label, source=source)
    return Motion(tt, nn, qq), row_label


def motion_to_trajectory_dict(motion: Motion, *, velocities: bool = False, frame_id: str = "") -> TrajectoryDict:
    """The JointTrajectory dict of a motion (``time_from_start`` = the motion's times).

    Args:
        motion: Motion to convert.
        velocities: Also fill ``points[].velocities`` with :meth:`Motion.velocities` [rad/s].
        frame_id: ``header.frame_id``. The header stamp is zero, meaning "start now" to a trajectory controller.
    """
    vel = motion.velocities() if velocities else None
    points: list[TrajectoryPointDict] = []
    for i, (t, row) in enumerate(zip(motion.time.tolist(), motion.positions.tolist())):
        points.append({"positions": [float(v) for v in row],
                       "velocities": [] if vel is None else vel[i].tolist(),
                       "accelerations": [], "effort": [],
                       "time_from_start": seconds_to_duration(t)})
    return {"header": {"stamp": {"sec": 0, "nanosec": 0}, "frame_id": frame_id},
            "joint_names": list(motion.joint_names), "points": points}


def parse_trajectory_yaml(text: str, *, source: str | None = None) -> tuple[Motion, RowLabel]:
    """Motion of the first JointTrajectory in YAML text (``ros2 topic echo`` output; ``---`` separators allowed)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise MotionFormatError(f"not valid YAML: {exc}", source=source) from None
    if not docs or not is_trajectory_dict(docs[0]):
        raise MotionFormatError("not a JointTrajectory (expected joint_names and points)", source=source)
    return motion_from_trajectory(docs[0], source=source)


def read_trajectory_yaml(path: str | os.PathLike[str]) -> Motion:
    """Read a JointTrajectory YAML file."""
    path = Path(path)
    return parse_trajectory_yaml(path.read_text(encoding="utf-8"), source=str(path))[0]


def format_trajectory_yaml(motion: Motion, *, velocities: bool = False) -> str:
    """YAML text of the motion's JointTrajectory, laid out like ``ros2 topic echo`` (ending with ``---``)."""
    if not all(math.isfinite(v) for v in motion.time.tolist()):
        raise MotionFormatError("cannot write non-finite times")
    body = yaml.safe_dump(motion_to_trajectory_dict(motion, velocities=velocities), sort_keys=False,
                          default_flow_style=False)
    return body + "---\n"


def write_trajectory_yaml(path: str | os.PathLike[str], motion: Motion, *, velocities: bool = False) -> Path:
    """Write a JointTrajectory YAML file atomically; returns the path."""
    return write_text_atomic(path, format_trajectory_yaml(motion, velocities=velocities))
