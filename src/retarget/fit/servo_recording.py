"""Servo step-test recordings: goal and present position of one motor over time, from a CSV or a rosbag2 bag.

Two inputs (docs/fit.md, "Servo identification"):

- **CSV** with a header row holding the columns ``time [s]``, ``goal [rad]`` and ``present [rad]`` (exactly these
  names; other columns are ignored, column order is free). One row per sample of the servo's own feedback.
- **rosbag2** (a folder, or its ``.mcap`` / ``.db3`` file) recorded by ``retarget play MOTION --record BAG
  --record-topics /joint_states /joint_commands``: ``sensor_msgs/JointState`` on ``joint_states`` gives the present
  positions (what the driver reads back each tick), ``trajectory_msgs/JointTrajectory`` on ``joint_commands`` the
  goals the trajectory server streamed to the driver (one point each: applied at once; several: at
  ``stamp + time_from_start``). The goal at a present sample is the last goal commanded at or before it (the driver
  holds a setpoint until the next); samples before the first command take the first command. Stamps are the
  messages' header stamps, or the bag's receive times for both topics when any stamp is zero.

Rows with a missing or non-finite value are dropped (counted in :attr:`ServoRecording.dropped`); times must
increase. Imports no ROS (bags are read with ``rosbags``).
"""
from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import NDArray

from retarget.fit.errors import RecordingError

if TYPE_CHECKING:
    from rosbags.typesys.store import Typestore

__all__ = ["CSV_COLUMNS", "GOAL_TOPIC", "STATE_TOPIC", "ServoRecording", "read_servo_bag", "read_servo_csv",
           "read_servo_recording"]

#: The CSV columns a servo recording needs: time [s], goal position [rad], present position [rad].
CSV_COLUMNS: tuple[str, str, str] = ("time [s]", "goal [rad]", "present [rad]")
#: The bag topic of present positions (sensor_msgs/JointState), by the name's last part.
STATE_TOPIC = "joint_states"
#: The bag topic of commanded goals (trajectory_msgs/JointTrajectory), by the name's last part.
GOAL_TOPIC = "joint_commands"
_JOINT_STATE = "sensor_msgs/msg/JointState"
_JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"


@dataclass(frozen=True)
class ServoRecording:
    """One motor's step test: goal and present position at the recorded samples.

    Attributes:
        time: sample times (n,) [s], increasing (any origin: a recording that starts late is fine).
        goal: the commanded goal position (n,) [rad].
        present: the servo's present position (n,) [rad].
        source: the file read.
        motor: the joint the columns belong to (a bag names it; a CSV does not: None).
        other_goals: the first goal of every other joint in the recording (a bag's) [rad].
        dropped: rows dropped for a missing or non-finite value.
    """

    time: NDArray[np.float64]
    goal: NDArray[np.float64]
    present: NDArray[np.float64]
    source: str
    motor: str | None = None
    other_goals: Mapping[str, float] = field(default_factory=dict)
    dropped: int = 0

    def __post_init__(self) -> None:
        n = len(self.time)
        if not (len(self.goal) == n and len(self.present) == n):
            raise RecordingError(self.source, f"columns of different lengths: time {n}, goal {len(self.goal)}, "
                                 f"present {len(self.present)}")
        if n >= 2 and np.any(np.diff(self.time) <= 0.0):
            k = int(np.flatnonzero(np.diff(self.time) <= 0.0)[0]) + 1
            raise RecordingError(self.source, f"time does not increase at sample {k} ({self.time[k - 1]:.6g} s, "
                                 f"then {self.time[k]:.6g} s)")

    @property
    def n_samples(self) -> int:
        """Samples (n)."""
        return len(self.time)


def read_servo_recording(path: str | Path, motor: str | None = None) -> ServoRecording:
    """A servo recording: a ``.csv`` file (:func:`read_servo_csv`), else a rosbag2 bag (:func:`read_servo_bag`).

    Raises:
        RecordingError: a missing file, missing columns or topics (naming those found), no samples.
    """
    path = Path(path)
    if not path.exists():
        raise RecordingError(str(path), "no such file or bag")
    if path.suffix.lower() == ".csv":
        return read_servo_csv(path)
    return read_servo_bag(path, motor)


def _finite_rows(time: NDArray, goal: NDArray, present: NDArray) -> tuple[NDArray, NDArray, NDArray, int]:
    ok = np.isfinite(time) & np.isfinite(goal) & np.isfinite(present)
    return time[ok], goal[ok], present[ok], int(np.sum(~ok))


def read_servo_csv(path: str | Path) -> ServoRecording:
    """A CSV with the columns of :data:`CSV_COLUMNS` (module docstring).

    Raises:
        RecordingError: unreadable, no header, a column missing (naming the columns found), no data rows.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RecordingError(str(path), f"cannot read it as CSV ({exc})") from exc
    if not rows:
        raise RecordingError(str(path), f"empty file; expected a header with the columns {', '.join(CSV_COLUMNS)}")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise RecordingError(str(path), f"missing column{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(repr(c) for c in missing)}; columns found: "
                             f"{', '.join(repr(h) for h in header) or 'none'} (a servo recording needs "
                             f"{', '.join(repr(c) for c in CSV_COLUMNS)})")
    idx = [header.index(c) for c in CSV_COLUMNS]
    data = np.full((len(rows) - 1, 3), np.nan)
    for r, row in enumerate(rows[1:]):
        for c, k in enumerate(idx):
            try:
                data[r, c] = float(row[k])
            except (IndexError, ValueError):
                pass  # a missing or malformed value: the row is dropped below
    t, g, p, dropped = _finite_rows(data[:, 0], data[:, 1], data[:, 2])
    if len(t) == 0:
        raise RecordingError(str(path), f"no row with numbers in all of {', '.join(CSV_COLUMNS)} "
                             f"({len(rows) - 1} data rows)")
    return ServoRecording(t, g, p, str(path), None, {}, dropped)


def _typestore() -> Typestore:
    from retarget.mocap.bags import typestore

    return typestore()


class _Stamp(Protocol):
    sec: int
    nanosec: int


class _Header(Protocol):
    stamp: _Stamp


class _Stamped(Protocol):
    """A deserialized message with a ``std_msgs/Header`` (JointState, JointTrajectory)."""

    header: _Header


def _stamp_ns(msg: _Stamped) -> int:
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


def _topic(topics: Mapping[str, str], name: str, msgtype: str) -> str | None:
    found = [t for t, ty in topics.items() if ty == msgtype and t.rstrip("/").split("/")[-1] == name]
    return found[0] if len(found) == 1 else None


def read_servo_bag(path: str | Path, motor: str | None = None) -> ServoRecording:
    """One joint's goals and present positions from a bag of ``retarget play --record`` (module docstring).

    Args:
        path: bag folder, or its ``.mcap`` / ``.db3`` file.
        motor: the joint; may be omitted when the joint_states hold one joint.

    Raises:
        RecordingError: not a readable bag; no joint_states or joint_commands topic (naming the topics found and
            how to record them); the joint not in both topics (naming the joints found); no samples.
    """
    from rosbags.highlevel import AnyReader

    path = Path(path)
    how = ("record the step test with `retarget play MOTION --record BAG --record-topics /joint_states "
           "/joint_commands`")
    try:
        with AnyReader([path], default_typestore=_typestore()) as reader:
            topics = {c.topic: c.msgtype for c in reader.connections}
            states_topic = _topic(topics, STATE_TOPIC, _JOINT_STATE)
            goals_topic = _topic(topics, GOAL_TOPIC, _JOINT_TRAJECTORY)
            if states_topic is None or goals_topic is None:
                lacking = [f"{n} ({ty})" for n, ty, t in ((STATE_TOPIC, _JOINT_STATE, states_topic),
                                                          (GOAL_TOPIC, _JOINT_TRAJECTORY, goals_topic)) if t is None]
                listed = ", ".join(f"{t} ({ty})" for t, ty in topics.items()) or "none"
                raise RecordingError(str(path), f"no {' and no '.join(lacking)} topic (the goals are not recorded "
                                     f"unless {GOAL_TOPIC} is); topics found: {listed}; {how}")
            states = [(ns, reader.deserialize(raw, c.msgtype)) for c, ns, raw in
                      reader.messages(connections=[c for c in reader.connections if c.topic == states_topic])]
            goals = [(ns, reader.deserialize(raw, c.msgtype)) for c, ns, raw in
                     reader.messages(connections=[c for c in reader.connections if c.topic == goals_topic])]
    except RecordingError:
        raise
    except Exception as exc:  # rosbags raises its own reader errors and various I/O errors
        raise RecordingError(str(path), f"cannot read it as a rosbag2 bag ({exc})") from exc
    if not states or not goals:
        raise RecordingError(str(path), f"{len(states)} messages on {states_topic} and {len(goals)} on "
                             f"{goals_topic}: both are needed; {how}")
    joints = [str(n) for n in states[0][1].name]
    if motor is None:
        if len(joints) != 1:
            raise RecordingError(str(path), f"the joint_states hold joints {', '.join(joints)}: name the one "
                                 "tested (--motor)")
        motor = joints[0]
    use_receive = any(_stamp_ns(m) == 0 for _, m in states) or any(_stamp_ns(m) == 0 for _, m in goals)
    t_ns: list[int] = []
    present: list[float] = []
    for ns, msg in states:
        names = [str(n) for n in msg.name]
        if motor not in names:
            raise RecordingError(str(path), f"no joint {motor!r} in {states_topic}; joints found: "
                                 f"{', '.join(names)}")
        t_ns.append(int(ns) if use_receive else _stamp_ns(msg))
        present.append(float(msg.position[names.index(motor)]))
    g_ns: list[int] = []
    goal: list[float] = []
    first_other: dict[str, float] = {}
    for ns, msg in goals:
        names = [str(n) for n in msg.joint_names]
        base = int(ns) if use_receive else _stamp_ns(msg)
        for point in msg.points:
            positions = [float(v) for v in point.positions]
            for n, v in zip(names, positions):
                if n != motor:
                    first_other.setdefault(n, v)
            if motor not in names:
                continue
            offset = int(point.time_from_start.sec) * 1_000_000_000 + int(point.time_from_start.nanosec)
            g_ns.append(base + offset)
            goal.append(positions[names.index(motor)])
    if not goal:
        raise RecordingError(str(path), f"no goal for joint {motor!r} in {goals_topic}")
    origin = min(t_ns[0], g_ns[0])
    t = (np.array(t_ns, dtype=np.int64) - origin) * 1e-9
    order = np.argsort(np.array(g_ns, dtype=np.int64), kind="stable")
    gt = (np.array(g_ns, dtype=np.int64)[order] - origin) * 1e-9
    gv = np.array(goal)[order]
    at = np.searchsorted(gt, t, side="right") - 1  # the last goal commanded at or before each sample
    g = gv[np.maximum(at, 0)]
    tt, gg, pp, dropped = _finite_rows(t, g, np.array(present))
    keep = np.concatenate([[True], np.diff(tt) > 0.0])  # a repeated stamp: keep the first sample
    return ServoRecording(tt[keep], gg[keep], pp[keep], f"{path}:{states_topic}+{goals_topic}", motor,
                          {k: v for k, v in first_other.items() if math.isfinite(v)},
                          dropped + int(np.sum(~keep)))
