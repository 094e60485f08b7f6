"""rosbag2 recording core: write PoseStamped streams, read them back, summarize any bag (no ROS needed).

Bags are written with ``rosbags`` (rosbag2 format version 9, MCAP by default, sqlite3 on request), typed with the
ROS 2 Kilted typestore (message definitions and type hashes go into the bag, so ``ros2 bag info`` and ROS 2 readers
accept it). A bag is first written to a hidden sibling folder and renamed into place only when complete, so an
error never leaves a half-written bag at the requested path.
"""
from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypedDict

import numpy as np
from numpy.typing import NDArray

from retarget.mocap.errors import BagError

if TYPE_CHECKING:
    from rosbags.interfaces import Connection
    from rosbags.rosbag2 import Reader
    from rosbags.typesys.store import Typestore

__all__ = [
    "MOTION_START_KEY",
    "POSE_STAMPED",
    "STORAGES",
    "PoseSeries",
    "TopicInfo",
    "BagInfo",
    "BagSummary",
    "TopicSummary",
    "PoseBagWriter",
    "RawBagWriter",
    "typestore",
    "write_pose_bag",
    "read_pose_series",
    "bag_info",
    "iter_messages",
    "pose_topic",
]

POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
#: Key of a bag's ``custom_data`` holding the instant a played motion started, in ns on the clock of the ROS graph
#: that recorded it (``retarget play --record`` writes it; ``retarget refine`` aligns the take on it).
MOTION_START_KEY = "retarget.motion_start_ns"
STORAGES = ("mcap", "sqlite3")
_BAG_VERSION = 9


def typestore() -> Typestore:
    """The rosbags typestore used for every bag: ROS 2 Kilted (Jazzy if this rosbags has no Kilted)."""
    from rosbags.typesys import Stores, get_typestore

    store = getattr(Stores, "ROS2_KILTED", None) or Stores.ROS2_JAZZY
    return get_typestore(store)


def pose_topic(body: str, prefix: str = "mocap") -> str:
    """Topic of a body's poses: ``/<prefix>/<body>/pose``, with characters ROS forbids replaced by ``_``."""
    clean = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in body).strip("_") or "body"
    if clean[0].isdigit():
        clean = "_" + clean
    return f"/{prefix.strip('/')}/{clean}/pose"


@dataclass(frozen=True)
class PoseSeries:
    """Poses of one body over time (a PoseStamped topic).

    Attributes:
        time_s: header stamps [s since the epoch], ``(n,)``.
        position_m: ``(n, 3)`` [m].
        orientation_xyzw: ``(n, 4)`` unit quaternions.
        frame_id: the poses' reference frame.
    """

    time_s: NDArray[np.float64]
    position_m: NDArray[np.float64]
    orientation_xyzw: NDArray[np.float64]
    frame_id: str = "world"

    def __post_init__(self) -> None:
        n = np.shape(self.time_s)[0] if np.ndim(self.time_s) == 1 else -1
        if n < 0 or np.shape(self.position_m) != (n, 3) or np.shape(self.orientation_xyzw) != (n, 4):
            raise BagError(
                Path("."),
                f"pose series shapes {np.shape(self.time_s)}, {np.shape(self.position_m)}, "
                f"{np.shape(self.orientation_xyzw)} are not (n,), (n, 3), (n, 4)",
            )


@dataclass(frozen=True)
class TopicInfo:
    """One topic of a bag: name, message type and message count."""

    name: str
    msgtype: str
    count: int


class TopicSummary(TypedDict):
    """A topic of a bag as :meth:`BagInfo.to_dict` gives it."""

    name: str
    type: str
    count: int


class BagSummary(TypedDict):
    """:meth:`BagInfo.to_dict`: a bag's summary (``retarget mocap ... --json``); times in [ns] and [s]."""

    path: str
    storage: str
    version: int
    start_ns: int
    end_ns: int
    duration_s: float
    message_count: int
    topics: list[TopicSummary]
    custom_data: dict[str, str]


@dataclass(frozen=True)
class BagInfo:
    """Summary of a bag.

    Attributes:
        path: the bag folder.
        storage: "mcap" or "sqlite3".
        version: rosbag2 metadata version.
        start_ns, end_ns: times of the first and the last message [ns since the epoch] (0 for an empty bag).
        message_count: total messages.
        topics: per topic, in metadata order.
        custom_data: the metadata's ``custom_data`` (string keys and values a recorder stored with the bag, such as
            :data:`MOTION_START_KEY`).
    """

    path: Path
    storage: str
    version: int
    start_ns: int
    end_ns: int
    message_count: int
    topics: tuple[TopicInfo, ...]
    custom_data: Mapping[str, str] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        """``end - start`` [s]."""
        return (self.end_ns - self.start_ns) * 1e-9

    @property
    def motion_start_s(self) -> float | None:
        """When the played motion started [s since the epoch, on the bag's clock]: :data:`MOTION_START_KEY` of a bag
        of ``retarget play --record``; None when the bag has none.

        Raises:
            BagError: the value is not an integer of nanoseconds.
        """
        start = self.custom_data.get(MOTION_START_KEY)
        if start is None:
            return None
        try:
            return int(start) * 1e-9
        except ValueError:
            raise BagError(self.path, f"its metadata's {MOTION_START_KEY} is {start!r}, not an integer of "
                                      "nanoseconds") from None

    def to_dict(self) -> BagSummary:
        """JSON-ready summary."""
        return {
            "path": str(self.path),
            "storage": self.storage,
            "version": self.version,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_s": self.duration_s,
            "message_count": self.message_count,
            "topics": [{"name": t.name, "type": t.msgtype, "count": t.count} for t in self.topics],
            "custom_data": dict(self.custom_data),
        }


def _stamp(time_s: float) -> tuple[int, int]:
    total_ns = int(round(time_s * 1e9))
    return total_ns // 1_000_000_000, total_ns % 1_000_000_000


class RawBagWriter:
    """Writes already-serialized (CDR) messages to a new rosbag2 bag, atomically.

    The bag is written to a hidden sibling folder and appears at ``path`` only when :meth:`close` succeeds (or the
    ``with`` block exits normally); :meth:`abort`, or an exception in the ``with`` block, deletes it.

    Args:
        path: bag folder to create; must not exist, its parent must.
        storage: "mcap" (default) or "sqlite3".
        resolve_type: called with the typestore and a message type name before a topic of a type the Kilted
            typestore lacks is added (for example to register it from an installed ``.msg`` file).

    Raises:
        BagError: bad storage, existing path, missing parent folder.
    """

    def __init__(
        self,
        path: Path | str,
        storage: str = "mcap",
        resolve_type: Callable[[Typestore, str], None] | None = None,
    ) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        self.path = Path(path)
        if storage not in STORAGES:
            raise BagError(self.path, f"storage {storage!r} not supported (one of {', '.join(STORAGES)})")
        if self.path.exists():
            raise BagError(self.path, "already exists; choose a new bag path")
        if not self.path.parent.is_dir():
            raise BagError(self.path, f"parent folder {self.path.parent} does not exist")
        self.storage = storage
        self._resolve_type = resolve_type
        self._tmp = self.path.parent / f".{self.path.name}.partial-{uuid.uuid4().hex[:8]}"
        self.store = typestore()
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = Writer(self._tmp, version=_BAG_VERSION, storage_plugin=plugin)
        self._writer.open()
        self._connections: dict[str, Connection] = {}
        self.types: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        #: Stored in the bag's metadata (rosbag2's ``custom_data`` string map) when it is closed.
        self.custom_data: dict[str, str] = {}

    def add_topic(self, topic: str, msgtype: str) -> None:
        """Declare a topic before writing to it (idempotent for the same type).

        Raises:
            BagError: the topic was declared with another type, or the type has no known definition.
        """
        if topic in self.types:
            if self.types[topic] != msgtype:
                raise BagError(self.path, f"topic {topic} is {self.types[topic]}, cannot also record {msgtype}")
            return
        if msgtype not in self.store.types and self._resolve_type is not None:
            self._resolve_type(self.store, msgtype)
        if msgtype not in self.store.types:
            raise BagError(self.path, f"no message definition for {msgtype} in the rosbags Kilted typestore")
        self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=self.store)
        self.types[topic] = msgtype
        self.counts[topic] = 0

    def write(self, topic: str, time_ns: int, data: bytes) -> None:
        """Append one serialized message received at ``time_ns`` [ns since the epoch]."""
        self._writer.write(self._connections[topic], int(time_ns), data)
        self.counts[topic] += 1
        self.first_ns = time_ns if self.first_ns is None else min(self.first_ns, time_ns)
        self.last_ns = time_ns if self.last_ns is None else max(self.last_ns, time_ns)

    @property
    def message_count(self) -> int:
        """Messages written so far."""
        return sum(self.counts.values())

    def close(self) -> Path:
        """Finish the bag, with :attr:`custom_data` in its metadata, and move it into place; return its path."""
        try:
            for key, value in self.custom_data.items():
                self._writer.set_custom_data(str(key), str(value))
            self._writer.close()
            self._tmp.rename(self.path)
        except Exception as exc:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise BagError(self.path, f"could not finish the bag: {exc}") from exc
        return self.path

    def abort(self) -> None:
        """Drop the partial bag."""
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - the bag is being discarded; its close error is irrelevant
            pass
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class PoseBagWriter(RawBagWriter):
    """Streaming writer of PoseStamped topics, for recorders that get poses one at a time (atomic, as
    :class:`RawBagWriter`).

    Args:
        path: bag folder to create; must not exist.
        storage: "mcap" (default) or "sqlite3".
    """

    def __init__(self, path: Path | str, storage: str = "mcap") -> None:
        super().__init__(path, storage)
        types = self.store.types
        self._pose_type = types[POSE_STAMPED]
        self._header_type = types["std_msgs/msg/Header"]
        self._time_type = types["builtin_interfaces/msg/Time"]
        self._point_type = types["geometry_msgs/msg/Point"]
        self._quat_type = types["geometry_msgs/msg/Quaternion"]
        self._pose_inner = types["geometry_msgs/msg/Pose"]

    def write_pose(
        self,
        topic: str,
        time_s: float,
        position_m: Iterable[float],
        orientation_xyzw: Iterable[float],
        frame_id: str = "world",
        record_time_s: float | None = None,
    ) -> None:
        """Append one PoseStamped.

        Args:
            topic: e.g. ``/mocap/tip/pose``.
            time_s: header stamp [s since the epoch].
            position_m: ``(3,)`` [m].
            orientation_xyzw: ``(4,)``.
            frame_id: header frame.
            record_time_s: bag (receive) time [s]; defaults to the header stamp.
        """
        self.add_topic(topic, POSE_STAMPED)
        x, y, z = (float(v) for v in position_m)
        qx, qy, qz, qw = (float(v) for v in orientation_xyzw)
        sec, nanosec = _stamp(time_s)
        msg = self._pose_type(
            header=self._header_type(stamp=self._time_type(sec=sec, nanosec=nanosec), frame_id=frame_id),
            pose=self._pose_inner(
                position=self._point_type(x=x, y=y, z=z), orientation=self._quat_type(x=qx, y=qy, z=qz, w=qw)
            ),
        )
        record_ns = int(round((time_s if record_time_s is None else record_time_s) * 1e9))
        self.write(topic, record_ns, self.store.serialize_cdr(msg, POSE_STAMPED))


def write_pose_bag(path: Path | str, streams: Mapping[str, PoseSeries], storage: str = "mcap",
                   custom_data: Mapping[str, str] | None = None) -> BagInfo:
    """Write PoseStamped topics to a new bag, skipping samples with NaN (occluded) poses.

    Args:
        path: bag folder to create.
        streams: topic → poses.
        storage: "mcap" or "sqlite3".
        custom_data: stored in the bag's metadata (``custom_data``).

    Returns:
        The summary of the written bag.
    """
    rows: list[tuple[float, str, int]] = []
    for topic, series in streams.items():
        finite = np.isfinite(series.position_m).all(axis=1) & np.isfinite(series.orientation_xyzw).all(axis=1)
        finite &= np.isfinite(series.time_s)
        rows.extend((float(series.time_s[i]), topic, int(i)) for i in np.flatnonzero(finite))
    rows.sort()  # bag readers expect time order across topics
    with PoseBagWriter(path, storage) as writer:
        writer.custom_data.update(custom_data or {})
        for time_s, topic, i in rows:
            s = streams[topic]
            writer.write_pose(topic, time_s, s.position_m[i], s.orientation_xyzw[i], s.frame_id)
    return bag_info(path)


def _reader(path: Path) -> Reader:
    from rosbags.rosbag2 import Reader

    if not Path(path).exists():
        raise BagError(path, "does not exist")
    try:
        reader = Reader(path)
        reader.open()
    except Exception as exc:  # rosbags raises its own ReaderError and various I/O errors
        raise BagError(path, f"cannot open as rosbag2: {exc}") from None
    return reader


def _metadata(path: Path) -> dict[str, object]:
    import yaml

    try:
        document = yaml.safe_load((path / "metadata.yaml").read_text())
        return dict(document["rosbag2_bagfile_information"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise BagError(path, f"unreadable metadata.yaml: {exc}") from None


def bag_info(path: Path | str) -> BagInfo:
    """Summarize a rosbag2 folder (any storage rosbags reads: sqlite3, MCAP)."""
    path = Path(path)
    reader = _reader(path)
    try:
        topics = tuple(TopicInfo(c.topic, c.msgtype, int(c.msgcount)) for c in reader.connections)
        count = int(reader.message_count)
        start = int(reader.start_time) if count else 0
        end = int(reader.end_time) - 1 if count else 0  # rosbags reports the end as last message + 1 ns
    finally:
        reader.close()
    metadata = _metadata(path)
    storage = str(metadata.get("storage_identifier", ""))
    version = int(metadata.get("version", 0))
    custom = metadata.get("custom_data") or {}
    custom_data = {str(k): str(v) for k, v in custom.items()} if isinstance(custom, dict) else {}
    return BagInfo(path, storage, version, start, end, count, topics, custom_data)


def iter_messages(path: Path | str, topics: Iterable[str] | None = None) -> Iterator[tuple[str, str, int, object]]:
    """Deserialized messages of a bag in time order: ``(topic, msgtype, bag time [ns], message)``.

    Message types not in the typestore are registered from the definitions stored in the bag.
    """
    path = Path(path)
    store = typestore()
    reader = _reader(path)
    try:
        wanted = set(topics) if topics is not None else None
        connections = [c for c in _storage_connections(reader) if wanted is None or c.topic in wanted]
        if not connections:
            return
        _register_missing_types(store, connections)
        for connection, timestamp, raw in reader.messages(connections=connections):
            try:
                msg = store.deserialize_cdr(raw, connection.msgtype)
            except Exception as exc:  # corrupt payloads surface as assorted errors in rosbags
                reason = f"cannot deserialize a {connection.msgtype} on {connection.topic}: {exc}"
                raise BagError(path, reason) from None
            yield connection.topic, connection.msgtype, int(timestamp), msg
    finally:
        reader.close()


def _storage_connections(reader: Reader) -> list[Connection]:
    """Connections as the storage files declare them.

    rosbags matches the metadata.yaml connections to the storage's by topic, type *and* QoS; real bags (e.g.
    ros2/rosbag2's talker test bags) whose metadata QoS differs from the storage's then yield no messages at all.
    Asking with the storage-level connections themselves always matches.
    """
    storages = getattr(getattr(reader, "storage", None), "storages", None)
    if not storages:
        return list(reader.connections)
    return [c for storage in storages for c in storage.connections]


def _register_missing_types(store: Typestore, connections: list[Connection]) -> None:
    from rosbags.typesys import get_types_from_msg

    missing = {}
    for c in connections:
        if c.msgtype in store.types:
            continue
        definition = getattr(c, "msgdef", None)
        text = getattr(definition, "data", None) if definition is not None else None
        if text:
            missing.update(get_types_from_msg(text, c.msgtype))
    if missing:
        store.register(missing)


def read_pose_series(path: Path | str, topic: str) -> PoseSeries:
    """The PoseStamped messages of ``topic`` as arrays, ordered by header stamp.

    Raises:
        BagError: the topic is missing or not ``geometry_msgs/msg/PoseStamped``.
    """
    path = Path(path)
    info = bag_info(path)
    match = [t for t in info.topics if t.name == topic]
    if not match:
        raise BagError(path, f"no topic {topic!r} (topics: {', '.join(t.name for t in info.topics) or 'none'})")
    if match[0].msgtype != POSE_STAMPED:
        raise BagError(path, f"topic {topic!r} is {match[0].msgtype}, not {POSE_STAMPED}")
    stamps, positions, quats, frame_id = [], [], [], "world"
    for _, _, _, msg in iter_messages(path, [topic]):
        stamps.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
        p, q = msg.pose.position, msg.pose.orientation
        positions.append((p.x, p.y, p.z))
        quats.append((q.x, q.y, q.z, q.w))
        frame_id = msg.header.frame_id
    order = np.argsort(np.asarray(stamps, dtype=float), kind="stable")
    return PoseSeries(
        np.asarray(stamps, dtype=float)[order],
        np.asarray(positions, dtype=float).reshape(-1, 3)[order],
        np.asarray(quats, dtype=float).reshape(-1, 4)[order],
        frame_id,
    )
