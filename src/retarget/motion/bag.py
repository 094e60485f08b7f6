"""rosbag2 topics of trajectory_msgs/JointTrajectory and sensor_msgs/JointState, read and written with ``rosbags``.

- A **JointTrajectory** topic holds whole motions, one per message; reading picks one message (``index``).
- A **JointState** topic holds one sample per message; reading collects them all. Sample times are the header
  stamps (the bag's receive times when stamps are zero) minus the first one, so the motion starts at 0 s.

Bags are written as a directory (``metadata.yaml`` + one ``.mcap`` or ``.db3`` file), atomically.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retarget.atomic import atomic_path
from retarget.motion.errors import MotionFormatError
from retarget.motion.limits import RowLabel
from retarget.motion.motion import Motion, validate_motion_arrays
from retarget.motion.trajectory import motion_from_trajectory, seconds_to_duration

if TYPE_CHECKING:
    from rosbags.typesys.store import Typestore
    from rosbags.typesys.stores.ros2_kilted import sensor_msgs__msg__JointState as JointStateMsg
    from rosbags.typesys.stores.ros2_kilted import trajectory_msgs__msg__JointTrajectory as JointTrajectoryMsg

__all__ = ["JOINT_STATE", "JOINT_TRAJECTORY", "STORAGES", "bag_topics", "read_bag", "write_bag"]

JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
JOINT_STATE = "sensor_msgs/msg/JointState"
#: Storage back ends accepted by :func:`write_bag`.
STORAGES: tuple[str, ...] = ("mcap", "sqlite3")
_SUPPORTED = (JOINT_TRAJECTORY, JOINT_STATE)


def _typestore() -> Typestore:
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_KILTED)


def bag_topics(path: str | os.PathLike[str]) -> dict[str, str]:
    """``{topic: message type}`` of a bag directory or a single ``.mcap`` / ``.db3`` file."""
    from rosbags.highlevel import AnyReader

    with AnyReader([Path(path)], default_typestore=_typestore()) as reader:
        return {c.topic: c.msgtype for c in reader.connections}


def _pick_topic(path: Path, topics: dict[str, str], topic: str | None) -> str:
    if topic is not None:
        if topic not in topics:
            raise MotionFormatError(f"no topic '{topic}' in the bag; it has {topics}", source=str(path))
        if topics[topic] not in _SUPPORTED:
            raise MotionFormatError(f"topic '{topic}' has type {topics[topic]}, expected one of {list(_SUPPORTED)}",
                                    source=str(path))
        return topic
    usable = [t for t, ty in topics.items() if ty in _SUPPORTED]
    if len(usable) != 1:
        what = "no" if not usable else "several"
        raise MotionFormatError(f"{what} JointTrajectory/JointState topics in the bag (topics: {topics}); "
                                f"choose one with topic=...", source=str(path))
    return usable[0]


def read_bag(path: str | os.PathLike[str], *, topic: str | None = None,
             index: int = 0) -> tuple[Motion, RowLabel]:
    """Read a motion from a rosbag2 bag (sqlite3 or MCAP).

    Args:
        path: Bag directory, or its ``.mcap`` / ``.db3`` file.
        topic: Topic to read; may be omitted when the bag has exactly one JointTrajectory or JointState topic.
        index: For a JointTrajectory topic, which message (0 first, -1 last).

    Returns:
        The motion and row labels (``"message i"`` for JointState, ``"point i"`` for JointTrajectory).

    Raises:
        MotionFormatError: Unknown or unsupported topic, empty topic, messages with different or missing joints,
            NaN, unsorted or duplicate stamps.
    """
    from rosbags.highlevel import AnyReader

    path = Path(path)
    if not path.exists():
        raise MotionFormatError("no such bag", source=str(path))
    with AnyReader([path], default_typestore=_typestore()) as reader:
        topics = {c.topic: c.msgtype for c in reader.connections}
        chosen = _pick_topic(path, topics, topic)
        connections = [c for c in reader.connections if c.topic == chosen]
        messages = [(stamp, reader.deserialize(raw, conn.msgtype))
                    for conn, stamp, raw in reader.messages(connections=connections)]
    if not messages:
        raise MotionFormatError(f"topic '{chosen}' has no messages", source=str(path))
    source = f"{path}:{chosen}"
    if topics[chosen] == JOINT_TRAJECTORY:
        try:
            _, msg = messages[index]
        except IndexError:
            raise MotionFormatError(f"message index {index} out of range: the topic has {len(messages)} messages",
                                    source=source) from None
        return motion_from_trajectory(msg, source=source)
    return _joint_states(messages, source)


def _joint_states(messages: list[tuple[int, JointStateMsg]], source: str) -> tuple[Motion, RowLabel]:
    names = [str(n) for n in messages[0][1].name]
    stamps: list[int] = []
    q = np.empty((len(messages), len(names)))
    for i, (bag_ns, msg) in enumerate(messages):
        these = [str(n) for n in msg.name]
        if len(msg.position) != len(these):
            raise MotionFormatError(f"message {i}: {len(msg.position)} positions for {len(these)} names",
                                    source=source, row=f"message {i}")
        missing = [n for n in names if n not in these]
        if missing or len(these) != len(names):
            extra = [n for n in these if n not in names]
            raise MotionFormatError(f"message {i}: joints differ from message 0: missing {missing}, "
                                    f"unknown {extra}", source=source, row=f"message {i}",
                                    joint=(missing or extra or [None])[0])
        col = {n: k for k, n in enumerate(these)}
        q[i] = np.asarray(msg.position, dtype=np.float64)[[col[n] for n in names]]
        stamp_ns = int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)
        stamps.append(stamp_ns if stamp_ns else int(bag_ns))
    # Subtract in integer nanoseconds: epoch stamps (~1.7e18 ns) as float seconds would lose 0.2 us.
    t = np.array([s - stamps[0] for s in stamps], dtype=np.float64) * 1e-9

    def row_label(index: int) -> str:
        return f"message {index}"

    tt, nn, qq = validate_motion_arrays(t, names, q, row_label=row_label, source=source)
    return Motion(tt, nn, qq), row_label


def _trajectory_message(store: Typestore, motion: Motion) -> JointTrajectoryMsg:
    types = store.types
    header = types["std_msgs/msg/Header"](stamp=types["builtin_interfaces/msg/Time"](sec=0, nanosec=0),
                                          frame_id="")
    point_type = types["trajectory_msgs/msg/JointTrajectoryPoint"]
    duration_type = types["builtin_interfaces/msg/Duration"]
    empty = np.zeros(0)
    points = [point_type(positions=np.array(row, dtype=np.float64), velocities=empty, accelerations=empty,
                         effort=empty, time_from_start=duration_type(**seconds_to_duration(t)))
              for t, row in zip(motion.time.tolist(), motion.positions)]
    return types[JOINT_TRAJECTORY](header=header, joint_names=list(motion.joint_names), points=points)


def write_bag(path: str | os.PathLike[str], motion: Motion, *, topic: str = "/joint_trajectory",
              msgtype: str = JOINT_TRAJECTORY, storage: str = "mcap", start_time_ns: int = 0) -> Path:
    """Write a motion to a new rosbag2 bag directory, atomically (an existing bag at ``path`` is replaced).

    Args:
        path: Bag directory to create.
        motion: Motion to write.
        topic: Topic name.
        msgtype: ``JOINT_TRAJECTORY`` (one message holding the whole motion) or ``JOINT_STATE`` (one message per
            sample, stamped ``start_time_ns + time``).
        storage: ``"mcap"`` or ``"sqlite3"``.
        start_time_ns: Bag time of the first message [ns]; JointState messages are stamped relative to it.

    Returns:
        The bag directory.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer

    if storage not in STORAGES:
        raise MotionFormatError(f"unknown bag storage '{storage}', use one of {list(STORAGES)}")
    if msgtype not in _SUPPORTED:
        raise MotionFormatError(f"cannot write message type '{msgtype}', use one of {list(_SUPPORTED)}")
    store = _typestore()
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    t0_ns = int(start_time_ns) - int(round(motion.time[0] * 1e9))
    with atomic_path(path, directory=True) as tmp, Writer(tmp, version=9, storage_plugin=plugin) as writer:
        conn = writer.add_connection(topic, msgtype, typestore=store)
        if msgtype == JOINT_TRAJECTORY:
            writer.write(conn, int(start_time_ns), store.serialize_cdr(_trajectory_message(store, motion), msgtype))
        else:
            types = store.types
            empty = np.zeros(0)
            for t, row in zip(motion.time.tolist(), motion.positions):
                stamp_ns = t0_ns + int(round(t * 1e9))
                sec, nanosec = divmod(stamp_ns, 1_000_000_000)
                header = types["std_msgs/msg/Header"](stamp=types["builtin_interfaces/msg/Time"](
                    sec=sec, nanosec=nanosec), frame_id="")
                msg = types[JOINT_STATE](header=header, name=list(motion.joint_names),
                                         position=np.array(row, dtype=np.float64), velocity=empty, effort=empty)
                writer.write(conn, stamp_ns, store.serialize_cdr(msg, msgtype))
    return Path(path)
