"""The mocap node: tracked rigid bodies from OptiTrack NatNet or the digital twin, published as PoseStamped.

A thin shell over :mod:`retarget.mocap`: a background thread loops over ``source.receive(timeout)`` (a
:class:`~retarget.mocap.client.NatNetClient` or a :class:`~retarget.mocap.twin.TwinSource`) and hands each frame
to the executor through a guard condition, so the executor is never blocked by the network and a frame is
published as soon as it arrives. For every tracked body of a frame the node publishes ``mocap/<body>/pose``
(geometry_msgs/PoseStamped, stamped with the frame's latency-corrected capture time, in ``frame_id``) and, when
``publish_tf`` is set and ``tf2_msgs`` is installed, one ``/tf`` message per frame. Malformed datagrams are counted
by the client and skipped; receive errors are counted and retried. Both, with rates and latency, are reported on
``/diagnostics`` once a second. Nothing a sender does can crash the node.

Run: ``python -m retarget.ros.mocap_node --ros-args -p source:=natnet -p server_address:=10.0.0.2 ...``.
The digital twin can also hand its own source to :class:`MocapNode` (``MocapNode(source=TwinSource(...))``);
``twin_motion: live:<channel>`` reads the running reduced simulation (:class:`~retarget.mocap.twin.LiveTwinSource`).
"""
from __future__ import annotations

import collections
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from numpy.typing import NDArray
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher

from retarget.errors import InputError, RetargetError
from retarget.mocap import (
    MocapFrame,
    MocapSource,
    NatNetClient,
    NatNetClientConfig,
    NatNetTimeoutError,
    TwinNoise,
    TwinSource,
    interpolated_poses,
)
from retarget.mocap.bags import pose_topic
from retarget.mocap.twin import LiveTwinSource, PoseFunction
from retarget.ros.params import declare
from retarget.ros.spinning import close_node, spin, stopping_on_signals

if TYPE_CHECKING:
    from geometry_msgs.msg import TransformStamped
    from tf2_msgs.msg import TFMessage

__all__ = ["MocapNode", "NodeStats", "load_twin_motion", "builtin_step_motion", "looped", "tf_frame_name", "main"]

#: Frames waiting for the executor; beyond this the oldest are dropped (and counted) rather than queued.
QUEUE_LENGTH = 256

#: Longest a single receive call may block the receive thread [s] (bounds shutdown time).
RECEIVE_TIMEOUT_S = 0.1


@dataclass
class NodeStats:
    """What the node did with the frames it got (the source keeps its own packet counters).

    Attributes:
        frames: frames taken from the source.
        published_frames: frames with at least one published pose.
        poses: PoseStamped messages published.
        dropped: frames dropped because the executor fell behind.
        receive_errors: exceptions raised by the source's ``receive`` (retried).
        last_error: text of the last receive error.
        last_latency_s: latency subtracted from the last frame's receive time [s].
        bodies: poses published per body name.
    """

    frames: int = 0
    published_frames: int = 0
    poses: int = 0
    dropped: int = 0
    receive_errors: int = 0
    last_error: str | None = None
    last_latency_s: float = math.nan
    bodies: dict[str, int] = field(default_factory=dict)


def builtin_step_motion(
    step_deg: float = 30.0, rod_length_m: float = 0.7, frequency_hz: float = 1.5, damping_ratio: float = 0.03
) -> tuple[PoseFunction, float]:
    """A single-rod step test as the twin's built-in motion: a servo steps, the rod tip rings and decays.

    The servo (body ``servo``) rotates about the world y axis by ``step_deg`` (smooth 0.2 s ramp at 0.5 s), holds
    1.5 s and returns; the tip (body ``tip``, at ``rod_length_m`` above the axis) follows as a damped oscillator
    of the given natural frequency and damping ratio, integrated on a 1 ms grid. It stands in for the simulator
    until the twin feeds simulated poses.

    Returns:
        The pose function and the motion's period [s].
    """
    period = 5.0
    dt = 1e-3
    t = np.arange(0.0, period + dt / 2, dt)

    def ramp(x: NDArray[np.float64]) -> NDArray[np.float64]:
        s = np.clip(x / 0.2, 0.0, 1.0)
        return s * s * (3 - 2 * s)

    servo = math.radians(step_deg) * (ramp(t - 0.5) - ramp(t - 2.2))
    omega = 2 * math.pi * frequency_hz
    tip = np.zeros_like(t)
    rate = 0.0
    for k in range(1, t.size):  # semi-implicit Euler: stable and accurate enough at 1 ms for a 1.5 Hz mode
        rate += dt * (omega**2 * (servo[k - 1] - tip[k - 1]) - 2 * damping_ratio * omega * rate)
        tip[k] = tip[k - 1] + dt * rate

    def about_y(angle: NDArray[np.float64]) -> NDArray[np.float64]:
        half = 0.5 * angle
        return np.stack([np.zeros_like(half), np.sin(half), np.zeros_like(half), np.cos(half)], axis=1)

    positions = {
        "servo": np.zeros((t.size, 3)),
        "tip": rod_length_m * np.stack([np.sin(tip), np.zeros_like(tip), np.cos(tip)], axis=1),
    }
    return interpolated_poses(t, positions, {"servo": about_y(servo), "tip": about_y(tip)}), period


def load_twin_motion(path: Path | str) -> tuple[PoseFunction, float]:
    """Body poses over time from a file, for the twin source.

    Formats:
        ``.npz``: ``time_s (n,)`` and, per body, ``<body>.position_m (n, 3)`` [m] and optionally
        ``<body>.orientation_xyzw (n, 4)``.
        ``.csv``: a header ``time_s,<body>.x,<body>.y,<body>.z[,<body>.qx,<body>.qy,<body>.qz,<body>.qw],...``
        then one row per sample (positions [m]).

    Returns:
        The pose function (interpolating, holding the end values) and the duration of the motion [s].

    Raises:
        InputError: missing file, unknown format, missing or misshapen columns.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"twin motion file {path} does not exist")
    positions: dict[str, NDArray[np.float64]] = {}
    orientations: dict[str, NDArray[np.float64]] = {}
    if path.suffix == ".npz":
        with np.load(path) as data:
            if "time_s" not in data:
                raise InputError(f"{path}: no 'time_s' array (arrays: {', '.join(data.files)})")
            time_s = np.asarray(data["time_s"], dtype=float)
            for key in data.files:
                body, _, kind = key.rpartition(".")
                if kind == "position_m" and body:
                    positions[body] = np.asarray(data[key], dtype=float)
                elif kind == "orientation_xyzw" and body:
                    orientations[body] = np.asarray(data[key], dtype=float)
    elif path.suffix == ".csv":
        header = path.read_text().splitlines()[0].split(",") if path.stat().st_size else []
        if not header or header[0].strip() != "time_s":
            raise InputError(f"{path}: the first column must be 'time_s' (header: {','.join(header)})")
        table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
        if table.shape[1] != len(header):
            raise InputError(f"{path}: {table.shape[1]} columns of data for {len(header)} header names")
        columns = {name.strip(): i for i, name in enumerate(header)}
        time_s = table[:, 0]
        for name in columns:
            body, _, axis = name.rpartition(".")
            if axis != "x" or not body:
                continue
            try:
                positions[body] = table[:, [columns[f"{body}.{a}"] for a in "xyz"]]
            except KeyError as exc:
                raise InputError(f"{path}: body {body!r} lacks column {exc.args[0]!r}") from None
            if f"{body}.qw" in columns:
                orientations[body] = table[:, [columns[f"{body}.q{a}"] for a in "xyzw"]]
    else:
        raise InputError(f"twin motion file {path}: unknown format {path.suffix!r} (use .npz or .csv)")
    if not positions:
        raise InputError(f"{path}: no body positions (expected <body>.position_m arrays or <body>.x columns)")
    pose_at = interpolated_poses(time_s, positions, orientations)
    return pose_at, float(time_s[-1] - time_s[0])


def tf_frame_name(body: str) -> str:
    """The TF frame of a body: its name with the characters ROS names forbid replaced, as in its topic."""
    return pose_topic(body, "mocap").split("/")[2]


def looped(pose_at: PoseFunction, period_s: float) -> PoseFunction:
    """``pose_at`` repeated with period ``period_s`` [s] (a live twin plays its motion in a loop)."""
    if period_s <= 0:
        return pose_at
    return lambda t: pose_at(math.fmod(t, period_s))


@dataclass(frozen=True)
class _SourceParameters:
    """The parameters of the node's mocap source (declared by :class:`MocapNode`, which describes each)."""

    server_address: str
    local_address: str
    multicast_address: str
    command_port: int
    data_port: int
    extra_latency_s: float
    connect_timeout_s: float
    reconnect_interval_s: float
    twin_motion: str
    twin_loop: bool
    twin_rate: float
    twin_position_noise_m: float
    twin_rotation_noise_rad: float
    twin_occlusion: float
    twin_latency_s: float
    twin_seed: int


class MocapNode(Node):
    """Publishes the tracked bodies of a mocap source as PoseStamped (and optionally TF).

    Args:
        source: a ready source (the digital twin passes its own); ``None`` builds one from the parameters.
        **kwargs: passed to :class:`rclpy.node.Node`.
    """

    def __init__(self, source: MocapSource | None = None, **kwargs: Any) -> None:
        super().__init__("mocap", **kwargs)
        T = Parameter.Type
        self.source_kind = declare(self, "source", T.STRING, "natnet", "natnet (OptiTrack Motive) | twin")
        self.frame_id = declare(self, "frame_id", T.STRING, "world", "header frame_id of the poses (mocap frame)")
        self.prefix = declare(self, "topic_prefix", T.STRING, "mocap", "poses go to <topic_prefix>/<body>/pose")
        self.publish_tf = declare(self, "publish_tf", T.BOOL, False, "also publish each body as a /tf transform "
                                  "frame_id -> <body> (needs tf2_msgs)")
        self.body_filter = set(declare(self, "bodies", T.STRING_ARRAY, [], "bodies to publish; empty = all"))
        self._source_params = self._declare_source_parameters()
        self.stats = NodeStats()
        self.source: MocapSource = source if source is not None else self._build_source()
        if source is not None:  # what was injected, not the parameter, names the source in logs and diagnostics
            self.source_kind = {NatNetClient: "natnet", TwinSource: "twin", LiveTwinSource: "twin"}.get(
                type(source), type(source).__name__)
        self._natnet = self.source if isinstance(self.source, NatNetClient) else None
        self._tf_publisher, self._transform_type = self._make_tf_publisher()
        # Per body: its publisher and its message, reused from frame to frame (only the stamp and the pose change).
        self._pose_publishers: dict[str, tuple[Publisher, PoseStamped]] = {}
        self._queue: collections.deque[MocapFrame] = collections.deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._next_connect = 0.0
        self._last_report: tuple[float, int, int] = (time.monotonic(), 0, 0)
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._wake = self.create_guard_condition(self._drain)
        self.create_timer(1.0, self._publish_diagnostics)
        self._thread = threading.Thread(target=self._receive_loop, name="mocap-receive", daemon=True)
        self._thread.start()
        self.get_logger().info(f"mocap node: source {self.source_kind}, poses on {self.prefix}/<body>/pose "
                               f"in frame {self.frame_id!r}")

    # -- set-up ----------------------------------------------------------------------------------------------

    def _declare_source_parameters(self) -> _SourceParameters:
        T = Parameter.Type
        return _SourceParameters(
            server_address=declare(self, "server_address", T.STRING, "127.0.0.1", "Motive's IP address"),
            local_address=declare(self, "local_address", T.STRING, "127.0.0.1",
                                  "this machine's IP address on the mocap network"),
            multicast_address=declare(self, "multicast_address", T.STRING, "239.255.42.99",
                                      "multicast group of the stream; '' = unicast"),
            command_port=declare(self, "command_port", T.INTEGER, 1510, "Motive's command port", low=1,
                                 high=65535),
            data_port=declare(self, "data_port", T.INTEGER, 1511, "data port frames arrive on", low=1,
                              high=65535),
            extra_latency_s=declare(self, "extra_latency_s", T.DOUBLE, 0.0,
                                    "network transit added to Motive's reported latency [s]", low=0.0, high=1.0),
            connect_timeout_s=declare(self, "connect_timeout_s", T.DOUBLE, 0.5,
                                      "wait for each answer of Motive [s]", low=0.01, high=10.0),
            reconnect_interval_s=declare(self, "reconnect_interval_s", T.DOUBLE, 2.0,
                                         "retry period while Motive does not answer [s]", low=0.1, high=60.0),
            twin_motion=declare(self, "twin_motion", T.STRING, "builtin:step",
                                "twin body poses: builtin:step, a .npz/.csv file (see load_twin_motion), or "
                                "live:<channel file> (the running reduced simulation, docs/twin.md)"),
            twin_loop=declare(self, "twin_loop", T.BOOL, True, "repeat the twin motion when it ends"),
            twin_rate=declare(self, "twin_rate", T.DOUBLE, 120.0, "twin capture rate [Hz]", low=1.0,
                              high=2000.0),
            twin_position_noise_m=declare(self, "twin_position_noise_m", T.DOUBLE, 0.0005,
                                          "std of the twin's position noise per axis [m]", low=0.0, high=1.0),
            twin_rotation_noise_rad=declare(self, "twin_rotation_noise_rad", T.DOUBLE, 0.0,
                                            "std of the twin's rotation noise per axis [rad]", low=0.0,
                                            high=1.0),
            twin_occlusion=declare(self, "twin_occlusion", T.DOUBLE, 0.0,
                                   "probability that a twin body is untracked in a frame", low=0.0, high=1.0),
            twin_latency_s=declare(self, "twin_latency_s", T.DOUBLE, 0.005, "twin capture latency [s]",
                                   low=0.0, high=1.0),
            twin_seed=declare(self, "twin_seed", T.INTEGER, 0, "seed of the twin's noise"),
        )

    def _build_source(self) -> MocapSource:
        p = self._source_params
        if self.source_kind == "natnet":
            config = NatNetClientConfig(
                server_address=p.server_address,
                local_address=p.local_address,
                command_port=p.command_port,
                data_port=p.data_port,
                multicast_address=p.multicast_address or None,
                extra_latency_s=p.extra_latency_s,
            )
            client = NatNetClient(config)
            try:
                client.open()  # a port conflict must fail now, at start, not in the thread
            except OSError as exc:
                raise InputError(f"cannot listen on {config.local_address}:{config.data_port} (data port) "
                                 f"{'unicast' if config.multicast_address is None else config.multicast_address}"
                                 f": {exc}") from None
            return client
        if self.source_kind == "twin":
            motion = p.twin_motion
            noise = TwinNoise(p.twin_position_noise_m, p.twin_rotation_noise_rad, p.twin_occlusion,
                              p.twin_latency_s)
            if motion.startswith("live:"):
                # The running reduced simulation (docs/twin.md): poses from its channel file.
                return LiveTwinSource(motion[len("live:"):], p.twin_rate, noise, seed=p.twin_seed,
                                      log=lambda line: self.get_logger().info(line))
            if motion == "builtin:step":
                pose_at, period = builtin_step_motion()
            elif motion.startswith("builtin:"):
                raise InputError(f"twin_motion {motion!r}: the only built-in motion is builtin:step")
            else:
                pose_at, period = load_twin_motion(motion)
            return TwinSource(looped(pose_at, period) if p.twin_loop else pose_at, p.twin_rate, noise,
                              seed=p.twin_seed, realtime=True)
        raise InputError(f"parameter 'source' is {self.source_kind!r}; use natnet or twin")

    def _make_tf_publisher(self) -> tuple[Publisher | None, tuple[type[TFMessage], type[TransformStamped]] | None]:
        if not self.publish_tf:
            return None, None
        try:
            from geometry_msgs.msg import TransformStamped
            from tf2_msgs.msg import TFMessage
        except ImportError:
            self.get_logger().warning("publish_tf is set but tf2_msgs is not installed: publishing poses only")
            return None, None
        return self.create_publisher(TFMessage, "/tf", 100), (TFMessage, TransformStamped)

    # -- receiving (background thread) -----------------------------------------------------------------------

    def _receive_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self._natnet is not None:
                    self._ensure_connected(self._natnet)
                frame = self.source.receive(RECEIVE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - any source failure is reported and retried, never fatal
                self.stats.receive_errors += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                self.get_logger().error(f"mocap receive failed: {self.stats.last_error}", throttle_duration_sec=5.0)
                self._stop.wait(0.5)
                continue
            if frame is None:
                continue
            with self._lock:
                if len(self._queue) >= QUEUE_LENGTH:
                    self._queue.popleft()
                    self.stats.dropped += 1
                self._queue.append(frame)
            try:
                self._wake.trigger()
            except Exception:  # noqa: BLE001 - see below
                # On SIGINT rclpy's signal handler shuts the context down (and its guard conditions with it) before
                # main() can stop this thread: that is the end of the node, not an error.
                if self._stop.is_set() or not self.context.ok():
                    return
                raise

    def _ensure_connected(self, client: NatNetClient) -> None:
        """Ask Motive for its server info and model definitions until it has answered both (rate limited)."""
        if client.server_info is not None and client.model_definitions is not None:
            return
        now = time.monotonic()
        if now < self._next_connect:
            return
        self._next_connect = now + self._source_params.reconnect_interval_s
        timeout = self._source_params.connect_timeout_s
        try:
            if client.server_info is None:
                info = client.connect(timeout_s=timeout)
                version = ".".join(str(v) for v in info.sender.natnet_version)
                self.get_logger().info(f"connected to {info.sender.app_name} (NatNet {version}, "
                                       f"clock {info.high_resolution_clock_hz} Hz)")
            definitions = client.request_model_definitions(timeout_s=timeout)
            self.get_logger().info(f"rigid bodies: {definitions.rigid_body_names()}")
        except NatNetTimeoutError as exc:
            self.get_logger().warning(str(exc), throttle_duration_sec=10.0)

    # -- publishing (executor) -------------------------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    return
                frame = self._queue.popleft()
            self.publish_frame(frame)

    def _publisher(self, body: str) -> tuple[Publisher, PoseStamped]:
        entry = self._pose_publishers.get(body)
        if entry is None:
            # Relative topic, so the node's namespace applies.
            topic = pose_topic(body, self.prefix).lstrip("/")
            publisher = self.create_publisher(PoseStamped, topic, 10)
            msg = PoseStamped()
            msg.header.frame_id = self.frame_id
            entry = self._pose_publishers[body] = (publisher, msg)
            self.get_logger().info(f"publishing {body!r} on {publisher.topic_name}")
        return entry

    def publish_frame(self, frame: MocapFrame) -> int:
        """Publish the tracked bodies of one frame; return how many poses were published."""
        self.stats.frames += 1
        self.stats.last_latency_s = frame.latency_s
        total_ns = int(round(frame.stamp_s * 1e9))
        sec, nanosec = divmod(total_ns, 1_000_000_000)
        transforms = []
        count = 0
        for body in frame.valid_bodies:
            if self.body_filter and body.name not in self.body_filter:
                continue
            publisher, msg = self._publisher(body.name)
            msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
            p, q = msg.pose.position, msg.pose.orientation
            p.x, p.y, p.z = (float(v) for v in body.position_m)
            q.x, q.y, q.z, q.w = (float(v) for v in body.orientation_xyzw)
            publisher.publish(msg)
            self.stats.bodies[body.name] = self.stats.bodies.get(body.name, 0) + 1
            count += 1
            if self._tf_publisher is not None:
                transform = self._transform_type[1]()
                transform.header.stamp.sec, transform.header.stamp.nanosec = sec, nanosec
                transform.header.frame_id = self.frame_id
                transform.child_frame_id = tf_frame_name(body.name)
                t, r = transform.transform.translation, transform.transform.rotation
                t.x, t.y, t.z = p.x, p.y, p.z
                r.x, r.y, r.z, r.w = q.x, q.y, q.z, q.w
                transforms.append(transform)
        if transforms:
            self._tf_publisher.publish(self._transform_type[0](transforms=transforms))
        if count:
            self.stats.published_frames += 1
            self.stats.poses += count
        return count

    def diagnostic_status(self) -> DiagnosticStatus:
        """The node's health: source counters, rates and latency; WARN without frames or with bad packets."""
        now = time.monotonic()
        last_time, last_frames, last_malformed = self._last_report
        client_stats = getattr(self.source, "stats", None)
        malformed = int(getattr(client_stats, "malformed", 0))
        elapsed = max(now - last_time, 1e-9)
        rate = (self.stats.frames - last_frames) / elapsed
        self._last_report = (now, self.stats.frames, malformed)
        hardware = (f"{self._source_params.server_address}:{self._source_params.command_port}"
                    if self._natnet is not None else "twin")
        status = DiagnosticStatus(name=f"mocap: {self.source_kind}", hardware_id=hardware)
        values = {
            "frame_rate_hz": f"{rate:.1f}",
            "frames": self.stats.frames,
            "poses_published": self.stats.poses,
            "dropped": self.stats.dropped,
            "receive_errors": self.stats.receive_errors,
            "latency_ms": f"{self.stats.last_latency_s * 1e3:.3f}",
            "bodies": ",".join(sorted(self.stats.bodies)),
        }
        if client_stats is not None:
            values.update(packets=client_stats.packets, malformed=client_stats.malformed,
                          ignored=client_stats.ignored, last_decode_error=client_stats.last_error or "")
        if self._natnet is not None:
            info = self._natnet.server_info
            values["server"] = (f"{info.sender.app_name} NatNet {'.'.join(map(str, info.sender.natnet_version))}"
                                if info is not None else "not connected")
        if self.stats.last_error:
            values["last_receive_error"] = self.stats.last_error
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        problems = []
        if rate == 0:
            problems.append("no frames")
        if malformed > last_malformed:
            problems.append(f"{malformed - last_malformed} malformed packets skipped")
        if self._natnet is not None and self._natnet.server_info is None:
            problems.append("Motive has not answered")
        status.level = DiagnosticStatus.WARN if problems else DiagnosticStatus.OK
        status.message = "; ".join(problems) if problems else f"streaming {rate:.0f} Hz"
        return status

    def _publish_diagnostics(self) -> None:
        msg = DiagnosticArray(status=[self.diagnostic_status()])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diagnostics.publish(msg)

    def shutdown(self) -> None:
        """Stop the receive thread and close the source (called by :func:`main` on exit; idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        self.source.close()


def main(args: list[str] | None = None) -> None:
    """Run the mocap node until Ctrl-C or external shutdown; a configuration error exits with code 2."""
    node: MocapNode | None = None
    try:
        with rclpy.init(args=args), stopping_on_signals():
            node = MocapNode()
            # The receive thread stops before the context goes (it triggers a guard condition of the context).
            spin(node, before_shutdown=node.shutdown)
            close_node(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RetargetError as exc:
        # Bad parameters, a bad motion file or a busy port are the user's to fix: say so, no traceback.
        print(f"mocap: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        if node is not None:
            node.shutdown()


if __name__ == "__main__":
    main()
