"""``retarget record``: record live ROS 2 topics into a rosbag2 bag (MCAP by default, sqlite3 on request).

A stand-in for ``ros2 bag record`` where no ROS 2 distro is installed (PyPI has no rosbag2 wheel). The recorder
subscribes to the requested topics as soon as they appear in the graph (their types are discovered there), takes
each message as serialized CDR (``raw=True``: no deserialize/serialize round trip), and writes it unchanged with
``rosbags``, with the message definitions and type hashes of the ROS 2 Kilted typestore (or, for project types,
the ``.msg`` files installed in ``share/``), so ``ros2 bag info`` / ``ros2 bag play`` and rosbags readers accept
the bag. The bag is written to a hidden sibling folder and renamed into place when recording ends: by
``--duration``, Ctrl-C (SIGINT) or SIGTERM, all of which finish the bag cleanly. Messages are stamped with their
receive time on the node's clock, as rosbag2 does.

Run as ``retarget record --topics /mocap/tip/pose /joint_states --out take1`` (once the CLI registers
:func:`register_record`) or ``python -m retarget.ros.record ...``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TypeAlias

from retarget.errors import RetargetError
from retarget.mocap.bags import STORAGES, RawBagWriter
from retarget.mocap.errors import BagError

if TYPE_CHECKING:
    from rclpy.executors import Executor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile
    from rclpy.subscription import Subscription
    from rosbags.typesys.store import Typestore
    from tqdm import tqdm

__all__ = [
    "NoTopicError",
    "RawBagWriter",
    "recording_writer",
    "RecordSummary",
    "TopicRecorder",
    "message_class",
    "record",
    "register_record",
    "main",
]

#: Field types of ``.msg`` files that are not messages (no definition to look up).
_BUILTIN_TYPES = {
    "bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
    "int64", "uint64", "string", "wstring", "time", "duration",
}
#: What ``signal.signal`` returns: the handler it replaced.
_SignalHandler: TypeAlias = "Callable[[int, FrameType | None], object] | int | signal.Handlers | None"

#: How often the graph is searched for requested topics that have not appeared yet [s].
_DISCOVERY_PERIOD_S = 0.25


class NoTopicError(RetargetError):
    """None of the requested topics appeared in the ROS graph in time, or (with a duration) they appeared but sent no
    message in time; nothing was recorded.

    Attributes:
        topics: the requested topics.
        wait_s: how long the recorder waited [s].
        seen: the topics that were in the graph (to spot a typo or a wrong namespace).
    """

    def __init__(self, topics: Sequence[str], wait_s: float, seen: Sequence[str], subscribed: bool = False) -> None:
        self.topics = list(topics)
        self.wait_s = wait_s
        self.seen = list(seen)
        if subscribed:
            message = (f"subscribed to {', '.join(self.topics)}, but no message arrived within {wait_s:g} s (is the "
                       "publisher sending? mocap: is Motive streaming?)")
        else:
            message = (f"none of {', '.join(self.topics)} was published within {wait_s:g} s (is the node running, "
                       f"with the same ROS_DOMAIN_ID?); topics seen: {', '.join(self.seen) or 'none'}")
            if any("/mocap/" in t for t in self.topics):
                message += ("; the mocap twin publishes a robot's tracked bodies only when its simulation feeds it "
                            "(`retarget up ROBOT --twin reduced`), else its built-in step test (servo, tip)")
        super().__init__(message)


def message_class(msgtype: str) -> type:
    """The rclpy message class of ``pkg/msg/Type`` (also accepts ``pkg/Type``).

    Raises:
        BagError: the package is not installed or has no such message.
    """
    parts = msgtype.split("/")
    package, name = parts[0], parts[-1]
    try:
        return getattr(importlib.import_module(f"{package}.msg"), name)
    except (ImportError, AttributeError) as exc:
        raise BagError(Path("."), f"message type {msgtype} is not installed here ({exc})") from None


def _share_dirs() -> list[Path]:
    import os

    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    return [Path(p) / "share" for p in [*prefixes, sys.prefix]]


def _definition_text(msgtype: str) -> str | None:
    package, _, name = msgtype.split("/")
    for share in _share_dirs():
        path = share / package / "msg" / f"{name}.msg"
        if path.is_file():
            return path.read_text()
    return None


def _register_definition(store: Typestore, msgtype: str, seen: set[str] | None = None) -> None:
    """Add ``msgtype`` (and the message types it uses) to the rosbags typestore from installed ``.msg`` files.

    Raises:
        BagError: no definition is installed for the type or one it depends on.
    """
    from rosbags.typesys import get_types_from_msg

    seen = set() if seen is None else seen
    if msgtype in store.types or msgtype in seen:
        return
    seen.add(msgtype)
    text = _definition_text(msgtype)
    if text is None:
        raise BagError(Path("."), f"no message definition for {msgtype} (neither in the rosbags Kilted typestore "
                       f"nor as share/{msgtype}.msg under {', '.join(map(str, _share_dirs()))})")
    package = msgtype.split("/")[0]
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        tokens = line.split()
        match = re.match(r"[A-Za-z][\w/]*", tokens[0]) if len(tokens) >= 2 else None
        if match is None or match.group(0) in _BUILTIN_TYPES:
            continue
        used = match.group(0)
        if used == "Header":
            used = "std_msgs/msg/Header"
        elif "/" not in used:
            used = f"{package}/msg/{used}"
        elif used.count("/") == 1:
            used = used.replace("/", "/msg/")
        _register_definition(store, used, seen)
    store.register(get_types_from_msg(text, msgtype))


def recording_writer(path: Path | str, storage: str = "mcap") -> RawBagWriter:
    """An atomic :class:`RawBagWriter` that also knows every message type installed as a ``.msg`` file."""
    return RawBagWriter(path, storage, resolve_type=_register_definition)


@dataclass
class RecordSummary:
    """What a recording wrote.

    Attributes:
        path: the bag folder.
        storage: "mcap" or "sqlite3".
        duration_s: wall time spent recording [s].
        topics: per recorded topic, ``(type, message count)``.
        missing: requested topics that never appeared in the graph.
        stopped_by: "duration", "signal" or "caller".
    """

    path: Path
    storage: str
    duration_s: float
    topics: dict[str, tuple[str, int]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    stopped_by: str = "caller"

    @property
    def message_count(self) -> int:
        """All messages in the bag."""
        return sum(count for _, count in self.topics.values())

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary."""
        return {
            "path": str(self.path),
            "storage": self.storage,
            "duration_s": round(self.duration_s, 3),
            "message_count": self.message_count,
            "topics": [{"name": n, "type": t, "count": c} for n, (t, c) in self.topics.items()],
            "missing": self.missing,
            "stopped_by": self.stopped_by,
        }


def _absolute(topic: str) -> str:
    return topic if topic.startswith("/") else f"/{topic}"


class TopicRecorder:
    """A node that subscribes to topics as they appear and writes their raw messages to a :class:`RawBagWriter`.

    Args:
        node: an rclpy node to subscribe with (the recorder owns no executor; spin the node).
        topics: topic names (relative names are taken from the root namespace).
        writer: where messages go.
        depth: subscription history depth (messages buffered while the executor is busy).
    """

    def __init__(self, node: Node, topics: Iterable[str], writer: RawBagWriter, depth: int = 1000) -> None:
        self.node = node
        self.writer = writer
        self.depth = depth
        self.pending = [_absolute(t) for t in dict.fromkeys(topics)]
        self._subscriptions: dict[str, Subscription] = {}
        self._lock = threading.Lock()

    def discover(self) -> list[str]:
        """Subscribe to the requested topics that now have a publisher; return the ones newly subscribed."""
        if not self.pending:
            return []
        graph = dict(self.node.get_topic_names_and_types())
        found = []
        for topic in list(self.pending):
            types = graph.get(topic)
            if not types:
                continue
            if len(types) > 1:
                self.node.get_logger().warning(f"{topic} has several types {types}; recording {types[0]}")
            msgtype = types[0]
            self.writer.add_topic(topic, msgtype)
            qos = self._qos_for(topic)
            self._subscriptions[topic] = self.node.create_subscription(
                message_class(msgtype), topic, self._callback(topic), qos, raw=True
            )
            self.pending.remove(topic)
            found.append(topic)
        return found

    def _qos_for(self, topic: str) -> QoSProfile:
        """Reliable unless a publisher is best effort; transient-local only if every publisher is (latched)."""
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

        publishers = self.node.get_publishers_info_by_topic(topic)
        profiles = [info.qos_profile for info in publishers]
        best_effort = any(p.reliability == ReliabilityPolicy.BEST_EFFORT for p in profiles)
        latched = bool(profiles) and all(p.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in profiles)
        return QoSProfile(
            depth=self.depth,
            reliability=ReliabilityPolicy.BEST_EFFORT if best_effort else ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
        )

    def _callback(self, topic: str) -> Callable[[bytes], None]:
        def on_message(data: bytes) -> None:
            stamp_ns = self.node.get_clock().now().nanoseconds
            with self._lock:
                self.writer.write(topic, stamp_ns, data)

        return on_message

    def close(self) -> None:
        """Unsubscribe from everything (no more writes after this returns)."""
        with self._lock:
            for subscription in self._subscriptions.values():
                self.node.destroy_subscription(subscription)
            self._subscriptions.clear()


def record(
    topics: Sequence[str],
    out: Path | str,
    storage: str = "mcap",
    duration_s: float | None = None,
    progress: bool = True,
    stop: threading.Event | None = None,
    ros_args: Sequence[str] = (),
    wait_s: float = 10.0,
    first_message: threading.Event | None = None,
    custom_data: Mapping[str, str] | None = None,
) -> RecordSummary:
    """Record ``topics`` into a new bag at ``out`` until ``duration_s`` passes, SIGINT/SIGTERM, or ``stop`` is set.

    Initializes its own rclpy context (without rclpy's signal handlers: a signal only sets the stop flag, so the
    bag is always finished cleanly). Signal handlers are installed only when called from the main thread.

    Args:
        topics: topic names to record.
        out: bag folder to create.
        storage: "mcap" or "sqlite3".
        duration_s: how long to record [s], counted from the first message received (discovering a running node
            and matching with it can take seconds on a loaded machine: the bag still holds the seconds asked for);
            ``None``: until stopped.
        progress: show a tqdm progress bar on stderr.
        stop: an event that ends the recording when set (for callers in other threads).
        ros_args: extra ROS arguments (``--ros-args`` ones) for the recorder node.
        wait_s: give up if none of the topics appeared within this time [s], and, with a ``duration_s``, if no
            message arrived within this time of the first subscription (``None``: wait until stopped).
        first_message: set once every topic has a message in the bag (for callers that start something then).
        custom_data: the bag's metadata ``custom_data``, read at its close (another thread may add to it meanwhile).

    Returns:
        The summary of the written bag.

    Raises:
        BagError: bad output path or storage, or a topic type without definition.
        InputError: no topics, or a non-positive duration.
        NoTopicError: none of the topics appeared within ``wait_s``, or with a ``duration_s`` none sent a message
            within ``wait_s`` of subscribing (no bag is left behind).
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from retarget.errors import InputError

    if not topics:
        raise InputError("give at least one topic to record (--topics /mocap/tip/pose ...)")
    if duration_s is not None and duration_s <= 0:
        raise InputError(f"--duration must be > 0 s, got {duration_s}")
    stop = stop or threading.Event()
    reason = {"value": "caller"}

    def on_signal(signum: int, _frame: object) -> None:
        reason["value"] = "signal"
        stop.set()

    previous: dict[int, _SignalHandler] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, on_signal)
    writer = recording_writer(out, storage)
    context = rclpy.Context()
    started = time.monotonic()
    try:
        # Explicit args: with None rclpy parses sys.argv, and the recorder's own options there broke discovery.
        rclpy.init(args=["retarget_record", "--ros-args", *ros_args], context=context,
                   signal_handler_options=SignalHandlerOptions.NO)
        node = rclpy.create_node(f"recorder_{uuid.uuid4().hex[:6]}", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        recorder = TopicRecorder(node, topics, writer)
        bar = _progress_bar(duration_s) if progress else None
        try:
            if _spin_until_done(executor, recorder, stop, started=started, duration_s=duration_s, wait_s=wait_s,
                                first_message=first_message, bar=bar):
                reason["value"] = "duration"
            _drain(executor, recorder.writer)
        finally:
            if bar is not None:
                bar.close()
            recorder.close()
            executor.shutdown()
            node.destroy_node()
    except BaseException:
        writer.abort()
        raise
    finally:
        if context.ok():
            rclpy.shutdown(context=context)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    elapsed = time.monotonic() - started
    writer.custom_data.update(custom_data or {})
    return RecordSummary(path=writer.close(), storage=storage, duration_s=elapsed,
                         topics={t: (writer.types[t], writer.counts[t]) for t in writer.types},
                         missing=list(recorder.pending), stopped_by=reason["value"])


#: How long a stopped recorder keeps taking the messages its subscriptions already hold [s] (:func:`_drain`).
DRAIN_LIMIT_S = 2.0


def _drain(executor: Executor, writer: RawBagWriter, limit_s: float = DRAIN_LIMIT_S, idle_spins: int = 3) -> None:
    """Write the messages the recorder's subscriptions hold when it stops: spin without waiting until
    ``idle_spins`` turns in a row take none, or ``limit_s`` [s] passed. A stop (Ctrl-C, a caller's, the end of
    ``duration_s``) then loses no message DDS has already delivered; on a busy machine the recorder's thread can be
    seconds behind its subscriptions."""
    deadline = time.monotonic() + limit_s
    idle = 0
    while idle < idle_spins and time.monotonic() < deadline:
        before = writer.message_count
        executor.spin_once(timeout_sec=0.0)
        idle = idle + 1 if writer.message_count == before else 0


def _spin_until_done(executor: Executor, recorder: TopicRecorder, stop: threading.Event, *, started: float,
                     duration_s: float | None, wait_s: float | None, first_message: threading.Event | None,
                     bar: tqdm | None) -> bool:
    """Spin the recorder's node, subscribing to topics as they appear, until ``stop`` is set or ``duration_s`` [s]
    has passed since the first message (arguments: :func:`record`'s; ``started``: its start on the monotonic
    clock [s]). Returns whether the duration ended it.

    Raises:
        NoTopicError: None of the topics appeared within ``wait_s``, or with a ``duration_s`` none sent a message
            within ``wait_s`` of subscribing.
    """
    node, writer = recorder.node, recorder.writer
    next_discovery = 0.0
    # The duration counts from the first message: discovery and the DDS match with a running publisher take
    # ~1 s on an idle machine and have taken ~3 s on two loaded cores.
    first_subscription: float | None = None
    first_at: float | None = None
    while not stop.is_set():
        now = time.monotonic()
        if first_at is None and writer.message_count:
            first_at = now
        if first_message is not None and not first_message.is_set() and not recorder.pending \
                and all(writer.counts.values()):
            first_message.set()
        if first_subscription is None:
            if wait_s is not None and now - started >= wait_s:
                raise NoTopicError(recorder.pending, wait_s, [t for t, _ in node.get_topic_names_and_types()])
        elif first_at is None:
            if duration_s is not None and wait_s is not None and now - first_subscription >= wait_s:
                raise NoTopicError(list(writer.types), wait_s, [], subscribed=True)
        elif duration_s is not None and now - first_at >= duration_s:
            return True
        if now >= next_discovery:
            for topic in recorder.discover():
                node.get_logger().info(f"recording {topic} ({writer.types[topic]})")
                if first_subscription is None:
                    first_subscription = time.monotonic()
            next_discovery = now + _DISCOVERY_PERIOD_S
        executor.spin_once(timeout_sec=0.05)
        if bar is not None:
            recorded = 0.0 if first_at is None else now - first_at
            bar.n = round(min(recorded, duration_s), 1) if duration_s else writer.message_count
            bar.set_postfix(messages=writer.message_count, refresh=False)
            bar.refresh()
    return False


def _progress_bar(duration_s: float | None) -> tqdm:
    from tqdm import tqdm

    if duration_s is not None:
        return tqdm(total=duration_s, unit="s", desc="recording", file=sys.stderr, mininterval=0.5,
                    bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s {postfix}")
    return tqdm(unit="msg", desc="recording (Ctrl-C to stop)", file=sys.stderr, mininterval=0.5)


def register_record(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget record`` to the top-level ``retarget`` parser."""
    p = subparsers.add_parser(
        "record",
        help="record ROS 2 topics into a rosbag2 bag (MCAP or sqlite3), like 'ros2 bag record'",
        description="Subscribe to the given topics (types are discovered from the ROS graph; topics may appear "
        "later) and write their messages to a new rosbag2 bag. Ends after --duration, or on Ctrl-C/SIGTERM; "
        "either way the bag is finished cleanly and appears at --out only when complete.",
    )
    p.add_argument("--topics", nargs="+", required=True, metavar="TOPIC", help="topics to record")
    p.add_argument("--out", type=Path, required=True, help="bag folder to create (must not exist)")
    p.add_argument("--storage", choices=STORAGES, default="mcap", help="bag storage (default mcap)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop S seconds after the first message arrived (default: until Ctrl-C)")
    p.add_argument("--wait", type=float, default=10.0, metavar="S",
                   help="fail if none of the topics is published within S seconds, and with --duration if "
                   "none sends a message within S seconds of subscribing (default 10; 0: wait forever)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.set_defaults(func=_record_command)


def _record_command(args: argparse.Namespace) -> int:
    summary = record(args.topics, args.out, args.storage, args.duration, progress=not args.no_progress,
                     wait_s=args.wait if args.wait > 0 else None)
    print(f"bag {summary.path} ({summary.storage}, {summary.duration_s:.1f} s, "
          f"{summary.message_count} messages, stopped by {summary.stopped_by})")
    for name, (msgtype, count) in summary.topics.items():
        print(f"  {name:40s} {msgtype:40s} {count:8d}")
    for name in summary.missing:
        print(f"  {name:40s} never published: not recorded", file=sys.stderr)
    if args.json:
        print(json.dumps(summary.to_dict()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m retarget.ros.record``: the same as ``retarget record``."""
    from retarget.errors import RetargetError

    parser = argparse.ArgumentParser(prog="python -m retarget.ros.record")
    register_record(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["record", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except RetargetError as exc:
        print(f"retarget record: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
