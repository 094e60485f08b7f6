"""The mocap node: twin motions, publishing and diagnostics in process, and the NatNet path across real processes.

The integration tests run a NatNet sender process (the stand-in Motive server answering with the shared Motive 2.1
server-info and model-definition packets and replaying the shared frame over 127.0.0.1 UDP, with truncated and
corrupted copies mixed in) and the node as its own process; a subscriber here checks the decoded ground truth of
``../shared/data/optitrack/PROVENANCE.md``.
"""
from __future__ import annotations

import math
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ros_helpers import wait_for

from retarget.errors import InputError
from retarget.mocap import BodyPose, MocapFrame, NatNetClient, NatNetClientConfig, TwinNoise, TwinSource

pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")

from retarget.ros.mocap_node import (  # noqa: E402 - after the skip when rclpy is missing
    MocapNode,
    builtin_step_motion,
    load_twin_motion,
    looped,
    tf_frame_name,
)

# Ground truth of mocapframe_packet_v3.bin / serverinfo_packet_v3.bin (PROVENANCE.md).
RACEQUAD_POSITION = (0.1744466, 1.4471314, -0.7343040)
RACEQUAD_ORIENTATION = (-0.05459423, 0.5099482, 0.04370357, -0.8573577)
FRAME_LATENCY_S = 18204 / 3312787  # transmit - mid-exposure ticks of that frame / the server's clock


# -- twin motions (no ROS) ---------------------------------------------------------------------------------------


def _tip_angle(pose_at: Any, t: float) -> float:
    position, _ = pose_at(t)["tip"]
    return math.atan2(position[0], position[2])


def test_builtin_step_rests_steps_and_rings_at_its_damped_frequency() -> None:
    pose_at, period = builtin_step_motion(step_deg=30.0, rod_length_m=0.7, frequency_hz=1.5, damping_ratio=0.03)
    assert period == 5.0
    tip0, quat0 = pose_at(0.0)["tip"]
    np.testing.assert_allclose(tip0, (0.0, 0.0, 0.7), atol=1e-12)
    np.testing.assert_allclose(quat0, (0.0, 0.0, 0.0, 1.0), atol=1e-12)
    # The servo holds 30 deg between the ramps; the tip swings about it (overshoot, then back).
    servo = pose_at(1.5)["servo"][1]
    assert 2 * math.degrees(math.asin(servo[1])) == pytest.approx(30.0, abs=1e-9)
    assert max(_tip_angle(pose_at, t) for t in np.arange(0.7, 2.2, 0.005)) > math.radians(40.0)
    # Free vibration after the return: zero crossings every half damped period, 1 / (2 f sqrt(1 - zeta^2)).
    t = np.arange(2.5, 5.0, 1e-3)
    angle = np.array([_tip_angle(pose_at, s) for s in t])
    crossings = t[np.flatnonzero(np.sign(angle[1:]) != np.sign(angle[:-1]))]
    half_period = 1.0 / (2 * 1.5 * math.sqrt(1 - 0.03**2))
    assert len(crossings) >= 5
    assert np.mean(np.diff(crossings)) == pytest.approx(half_period, rel=0.01)
    # Decay over n half periods: exp(-zeta omega t).
    peaks = [np.max(np.abs(angle[(t >= a) & (t < b)])) for a, b in zip(crossings[:-1], crossings[1:])]
    decay = peaks[-1] / peaks[0]
    expected = math.exp(-0.03 * 2 * math.pi * 1.5 * (len(peaks) - 1) * half_period)
    assert decay == pytest.approx(expected, rel=0.05)


def test_looped_repeats_the_motion() -> None:
    pose_at, period = builtin_step_motion()
    again = looped(pose_at, period)
    for t in (0.3, 1.7, 4.2):
        np.testing.assert_allclose(again(t + 2 * period)["tip"][0], pose_at(t)["tip"][0], atol=1e-12)
    assert looped(pose_at, 0.0) is pose_at


def _assert_same_rotation(q: np.ndarray, expected: np.ndarray) -> None:
    """Equal as rotations: q and -q are the same (interpolation aligns signs with the previous sample)."""
    assert abs(float(np.dot(q, expected))) == pytest.approx(1.0, abs=1e-12)


def test_twin_motion_from_npz_and_csv(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    time_s = np.linspace(0.0, 2.0, 21)
    position = rng.normal(size=(21, 3))
    quat = rng.normal(size=(21, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    np.savez(tmp_path / "m.npz", time_s=time_s, **{"tip.position_m": position, "tip.orientation_xyzw": quat,
                                                    "base.position_m": np.zeros((21, 3))})
    pose_at, duration = load_twin_motion(tmp_path / "m.npz")
    assert duration == pytest.approx(2.0)
    assert set(pose_at(0.0)) == {"tip", "base"}
    np.testing.assert_allclose(pose_at(time_s[7])["tip"][0], position[7], atol=1e-12)
    _assert_same_rotation(pose_at(time_s[7])["tip"][1], quat[7])
    np.testing.assert_allclose(pose_at(0.05)["tip"][0], 0.5 * (position[0] + position[1]), atol=1e-12)

    header = "time_s,tip.x,tip.y,tip.z,tip.qx,tip.qy,tip.qz,tip.qw,hand.x,hand.y,hand.z"
    table = np.column_stack([time_s, position, quat, position * 2])
    np.savetxt(tmp_path / "m.csv", table, delimiter=",", header=header, comments="")
    pose_at, duration = load_twin_motion(tmp_path / "m.csv")
    assert set(pose_at(0.0)) == {"tip", "hand"}
    np.testing.assert_allclose(pose_at(time_s[4])["hand"][0], 2 * position[4], atol=1e-12)
    np.testing.assert_allclose(pose_at(time_s[4])["hand"][1], (0, 0, 0, 1), atol=1e-12)
    _assert_same_rotation(pose_at(time_s[4])["tip"][1], quat[4])


def test_twin_motion_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_twin_motion(tmp_path / "missing.npz")
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(InputError, match="unknown format"):
        load_twin_motion(tmp_path / "m.txt")
    (tmp_path / "bad.csv").write_text("t,tip.x\n0,1\n")
    with pytest.raises(InputError, match="first column must be 'time_s'"):
        load_twin_motion(tmp_path / "bad.csv")
    (tmp_path / "partial.csv").write_text("time_s,tip.x,tip.y\n0,1,2\n1,1,2\n")
    with pytest.raises(InputError, match="lacks column 'tip.z'"):
        load_twin_motion(tmp_path / "partial.csv")
    np.savez(tmp_path / "nobody.npz", time_s=np.arange(3.0))
    with pytest.raises(InputError, match="no body positions"):
        load_twin_motion(tmp_path / "nobody.npz")


def test_tf_frame_names_follow_topic_names() -> None:
    assert tf_frame_name("RaceQuad") == "RaceQuad"
    assert tf_frame_name("rod tip-1") == "rod_tip_1"


# -- the node in this process (real rclpy, injected sources) ------------------------------------------------------


class Listener:
    """A subscriber node on the test's executor."""

    def __init__(self, ros_context: tuple[Any, Any], topics: list[str]) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PoseStamped
        from rclpy.node import Node

        context, executor = ros_context
        self.executor = executor
        self.node = Node(f"mocap_listener_{os.getpid()}_{time.monotonic_ns()}", context=context)
        self.poses: dict[str, list[tuple[float, Any]]] = {t: [] for t in topics}
        self.diagnostics: list[Any] = []
        for topic in topics:
            self.node.create_subscription(PoseStamped, topic,
                                          lambda m, t=topic: self.poses[t].append((time.time(), m)), 100)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, 100)
        executor.add_node(self.node)

    def mocap_status(self, name: str) -> Any | None:
        for array in reversed(self.diagnostics):
            for status in array.status:
                if status.name == name:
                    return status
        return None

    def close(self) -> None:
        self.executor.remove_node(self.node)
        self.node.destroy_node()


def _values(status: Any) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


@pytest.fixture
def node_factory(ros_context: tuple[Any, Any]) -> Iterator[Any]:
    from rclpy.parameter import Parameter

    context, executor = ros_context
    made: list[MocapNode] = []

    def make(source: Any, **params: Any) -> MocapNode:
        overrides = [Parameter(k, value=v) for k, v in params.items()]
        node = MocapNode(source=source, context=context, parameter_overrides=overrides)
        executor.add_node(node)
        made.append(node)
        return node

    yield make
    for node in made:
        executor.remove_node(node)
        node.shutdown()
        node.destroy_node()


def _still(name: str, position: tuple[float, float, float]) -> Any:
    return lambda t: {name: (np.array(position), np.array([0.0, 0.0, 0.0, 1.0]))}


@pytest.mark.integration
def test_node_publishes_valid_bodies_with_latency_corrected_stamps(ros_context: Any, node_factory: Any) -> None:
    """A frame with a tracked, an untracked, a non-finite and a filtered-out body: only the first is published."""
    source = TwinSource(_still("unused", (0.0, 0.0, 0.0)), rate_hz=1.0, realtime=True,
                        start_time_s=time.time() + 3600)  # its own frames come an hour from now
    node = node_factory(source, bodies=["arm", "hand", "bad"], frame_id="mocap_world", topic_prefix="test_a")
    listener = Listener(ros_context, ["test_a/arm/pose", "test_a/hand/pose", "test_a/bad/pose", "test_a/leg/pose"])
    try:
        frame = MocapFrame(
            frame_number=7, stamp_s=1234.5678, receive_time_s=1234.5778, latency_s=0.01,
            bodies=(
                BodyPose("arm", (0.1, -0.2, 0.3), (0.0, 0.6, 0.0, 0.8)),
                BodyPose("hand", (1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 1.0), tracking_valid=False),
                BodyPose("bad", (math.nan, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
                BodyPose("leg", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
            ),
        )
        assert node.publish_frame(frame) == 1  # publisher created now
        wait_for(lambda: node.count_subscribers("test_a/arm/pose") > 0, 5.0, "listener to match")
        node.publish_frame(frame)
        wait_for(lambda: len(listener.poses["test_a/arm/pose"]) >= 1, 5.0, "the arm pose")
        msg = listener.poses["test_a/arm/pose"][-1][1]
        assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (1234, 567800000)
        assert msg.header.frame_id == "mocap_world"
        p, q = msg.pose.position, msg.pose.orientation
        assert (p.x, p.y, p.z, q.x, q.y, q.z, q.w) == (0.1, -0.2, 0.3, 0.0, 0.6, 0.0, 0.8)
        time.sleep(0.2)
        assert not any(listener.poses[t] for t in ("test_a/hand/pose", "test_a/bad/pose", "test_a/leg/pose"))
        assert node.stats.poses == 2 and node.stats.bodies == {"arm": 2}
    finally:
        listener.close()


@pytest.mark.integration
def test_node_streams_a_live_twin_source(ros_context: Any, node_factory: Any) -> None:
    """The receive thread feeds the executor: ~rate frames a second, stamps = capture times, diagnostics OK."""
    source = TwinSource(_still("tip", (0.0, 0.0, 0.7)), rate_hz=100.0, noise=TwinNoise(latency_s=0.004),
                        seed=1, realtime=True)
    listener = Listener(ros_context, ["test_b/tip/pose"])
    try:
        node = node_factory(source, topic_prefix="test_b")
        wait_for(lambda: len(listener.poses["test_b/tip/pose"]) >= 50, 10.0, "50 twin poses")
        received = listener.poses["test_b/tip/pose"][-20:]
        for arrival, msg in received:
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            assert 0.004 <= arrival - stamp < 0.5
            assert (msg.pose.position.x, msg.pose.position.z) == (0.0, 0.7)
        wait_for(lambda: listener.mocap_status("mocap: twin") is not None, 3.0, "diagnostics")
        status = listener.mocap_status("mocap: twin")
        values = _values(status)
        assert values["latency_ms"] == "4.000" and int(values["frames"]) >= 50
        assert status.hardware_id == "twin" and status.level == status.OK
        assert node.stats.dropped == 0 and node.stats.receive_errors == 0
    finally:
        listener.close()


@pytest.mark.integration
def test_tf_carries_the_same_poses(ros_context: Any, node_factory: Any) -> None:
    """publish_tf: one /tf message per frame, frame_id -> body (skipped where tf2_msgs is not installed)."""
    tf2 = pytest.importorskip("tf2_msgs.msg", reason="no tf2_msgs here (no PyPI wheel): TF is disabled")
    from rclpy.node import Node

    source = TwinSource(_still("unused", (0.0, 0.0, 0.0)), rate_hz=1.0, realtime=True,
                        start_time_s=time.time() + 3600)
    node = node_factory(source, publish_tf=True, frame_id="optitrack", topic_prefix="test_tf")
    watcher = Node(f"tf_watcher_{os.getpid()}", context=ros_context[0])
    got: list[Any] = []
    watcher.create_subscription(tf2.TFMessage, "/tf", got.append, 10)
    ros_context[1].add_node(watcher)
    try:
        frame = MocapFrame(1, 10.25, 10.26, 0.01, (BodyPose("rod tip", (0.1, 0.2, 0.3), (0.0, 0.0, 0.6, 0.8)),))
        wait_for(lambda: node.count_subscribers("/tf") > 0, 5.0, "tf subscriber")
        node.publish_frame(frame)
        wait_for(lambda: bool(got), 5.0, "a /tf message")
        [transform] = got[-1].transforms
        assert (transform.header.frame_id, transform.child_frame_id) == ("optitrack", "rod_tip")
        assert (transform.header.stamp.sec, transform.header.stamp.nanosec) == (10, 250000000)
        assert (transform.transform.translation.z, transform.transform.rotation.w) == (0.3, 0.8)
    finally:
        ros_context[1].remove_node(watcher)
        watcher.destroy_node()


@pytest.mark.integration
def test_malformed_datagrams_are_counted_and_reported(node_factory: Any) -> None:
    """Garbage into the client's decode path: counted, the status turns WARN and names the count."""
    client = NatNetClient(NatNetClientConfig(command_port=9, data_port=0, multicast_address=None))
    client.open()
    node = node_factory(client, reconnect_interval_s=60.0, connect_timeout_s=0.05)
    node.diagnostic_status()  # baseline
    for datagram in (b"\x07\x00\xff\x00garbage", b"\x01", b"\x07\x00\x04\x00\xff\xff\xff\xff"):
        assert client.handle_datagram(datagram, time.time()) is None
    status = node.diagnostic_status()
    values = _values(status)
    assert values["malformed"] == "3" and "bad NatNet packet" in values["last_decode_error"]
    assert status.level == status.WARN
    assert "3 malformed packets skipped" in status.message and "Motive has not answered" in status.message
    assert values["server"] == "not connected"


@pytest.mark.integration
def test_unknown_source_is_rejected(ros_context: Any) -> None:
    from rclpy.parameter import Parameter

    with pytest.raises(InputError, match="use natnet or twin"):
        MocapNode(context=ros_context[0], parameter_overrides=[Parameter("source", value="vicon")])


# -- the node as a process, fed by a NatNet sender process (real sockets, shared packets) --------------------------

SENDER = r"""
import struct, sys, time
from pathlib import Path
from retarget.mocap.natnet import decode_packet
from retarget.mocap.server import NatNetServer

packets, data_port, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
info = decode_packet((packets / "serverinfo_packet_v3.bin").read_bytes())
models = decode_packet((packets / "modeldef_packet_v3.bin").read_bytes())
frame = bytearray((packets / "mocapframe_packet_v3.bin").read_bytes())
first = struct.unpack_from("<i", frame, 4)[0]
with NatNetServer(info, models) as server:
    server.add_data_destination(("127.0.0.1", data_port))  # the real server info is multicast: no auto unicast
    print(server.command_address[1], flush=True)
    deadline = time.monotonic() + seconds
    k = 0
    try:
        while time.monotonic() < deadline:
            struct.pack_into("<i", frame, 4, first + k)  # a fresh frame number, else the client drops repeats
            server.send_raw(bytes(frame))
            if k % 10 == 3:
                server.send_raw(bytes(frame[: len(frame) // 2]))  # truncated copy
            if k % 10 == 6:
                server.send_raw(bytes(frame[:8]) + b"\xff" * (len(frame) - 8))  # corrupted counts
            k += 1
            time.sleep(0.01)
    except KeyboardInterrupt:
        pass
print("sent", k, flush=True)
"""


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Sender:
    """The NatNet sender as a child process (replays for at most ``seconds``, stops on SIGINT)."""

    def __init__(self, packets: Path, data_port: int, tmp: Path, seconds: float = 60.0) -> None:
        script = tmp / "natnet_sender.py"
        script.write_text(SENDER)
        self.proc = subprocess.Popen([sys.executable, str(script), str(packets), str(data_port), str(seconds)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ.copy(),
                                     start_new_session=True)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 15.0)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.strip().isdigit():
            self.stop()
            raise AssertionError(f"NatNet sender did not start: {line!r}")
        self.command_port = int(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def natnet_node(shared_data: Path, start_module_node: Any,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Sender]]:
    packets = shared_data / "optitrack" / "natnet_v3_packets"
    if not (packets / "mocapframe_packet_v3.bin").is_file():
        pytest.skip(f"{packets} has no NatNet packets")
    data_port = _free_udp_port()
    sender = Sender(packets, data_port, tmp_path_factory.mktemp("sender"))
    try:
        node = start_module_node("retarget.ros.mocap_node", {
            "source": "natnet", "server_address": "127.0.0.1", "local_address": "127.0.0.1",
            "multicast_address": "", "command_port": sender.command_port, "data_port": data_port,
            "connect_timeout_s": 0.5, "reconnect_interval_s": 0.5,
        }, name="mocap_natnet")
        yield node, sender
    finally:
        sender.stop()


@pytest.mark.integration
def test_replayed_natnet_packets_arrive_as_pose_stamped(natnet_node: Any, ros_context: Any) -> None:
    node, _ = natnet_node
    listener = Listener(ros_context, ["mocap/RaceQuad/pose"])
    try:
        wait_for(lambda: len(listener.poses["mocap/RaceQuad/pose"]) >= 20, 15.0,
                 f"RaceQuad poses (node log: {node.log_path})")
        assert node.proc.poll() is None
        for arrival, msg in listener.poses["mocap/RaceQuad/pose"][-10:]:
            assert msg.header.frame_id == "world"
            p, q = msg.pose.position, msg.pose.orientation
            np.testing.assert_allclose((p.x, p.y, p.z), RACEQUAD_POSITION, atol=1e-6)
            np.testing.assert_allclose((q.x, q.y, q.z, q.w), RACEQUAD_ORIENTATION, atol=1e-6)
            # Stamped at capture: at least Motive's reported latency before it reached us.
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            assert FRAME_LATENCY_S <= arrival - stamp < 0.5
    finally:
        listener.close()


@pytest.mark.integration
def test_malformed_packets_do_not_stop_the_node_and_show_in_diagnostics(natnet_node: Any,
                                                                       ros_context: Any) -> None:
    node, _ = natnet_node
    listener = Listener(ros_context, ["mocap/RaceQuad/pose"])
    try:
        def reported() -> bool:
            status = listener.mocap_status("mocap: natnet")
            return status is not None and int(_values(status).get("malformed", "0")) >= 10

        wait_for(reported, 15.0, f"malformed packets on /diagnostics (node log: {node.log_path})")
        values = _values(listener.mocap_status("mocap: natnet"))
        assert values["server"] == "Motive NatNet 3.0.0.0"
        assert values["bodies"] == "RaceQuad"
        assert "bad NatNet packet" in values["last_decode_error"]
        assert int(values["packets"]) > int(values["malformed"]) > 0
        # Still streaming after all that garbage.
        count = len(listener.poses["mocap/RaceQuad/pose"])
        wait_for(lambda: len(listener.poses["mocap/RaceQuad/pose"]) > count + 10, 5.0, "more poses")
        assert node.proc.poll() is None
    finally:
        listener.close()


@pytest.mark.integration
def test_record_the_natnet_node_into_mcap(natnet_node: Any, tmp_path: Path) -> None:
    """``retarget record`` in its own process: the bag holds the decoded RaceQuad poses, correctly typed."""
    from retarget.mocap.bags import POSE_STAMPED, bag_info, read_pose_series

    node, _ = natnet_node
    out = tmp_path / "natnet_take"
    run = subprocess.run(
        [sys.executable, "-m", "retarget.ros.record", "--topics", "mocap/RaceQuad/pose", "--out", str(out),
         "--duration", "2.5", "--wait", "20", "--no-progress", "--json"],
        capture_output=True, text=True, timeout=30, env=os.environ.copy(),
    )
    assert run.returncode == 0, run.stderr
    info = bag_info(out)
    assert info.storage == "mcap" and [(t.name, t.msgtype) for t in info.topics] == [("/mocap/RaceQuad/pose",
                                                                                     POSE_STAMPED)]
    series = read_pose_series(out, "/mocap/RaceQuad/pose")
    assert len(series.time_s) >= 20  # ~100 Hz for 2.5 s; a low bound, as other test runs may share the cores
    np.testing.assert_allclose(series.position_m, np.tile(RACEQUAD_POSITION, (len(series.time_s), 1)), atol=1e-6)
    np.testing.assert_allclose(series.orientation_xyzw, np.tile(RACEQUAD_ORIENTATION, (len(series.time_s), 1)),
                               atol=1e-6)
    assert series.frame_id == "world" and np.all(np.diff(series.time_s) > 0)
    assert node.proc.poll() is None


@pytest.mark.integration
def test_configuration_errors_exit_with_code_2(tmp_path: Path) -> None:
    """A bad twin motion file stops the node process at start with a one-line reason, not a traceback."""
    run = subprocess.run([sys.executable, "-m", "retarget.ros.mocap_node", "--ros-args", "-p", "source:=twin",
                          "-p", f"twin_motion:={tmp_path / 'missing.npz'}"], capture_output=True, text=True,
                         timeout=30, env=os.environ.copy())
    assert run.returncode == 2
    assert "mocap: error: twin motion file" in run.stderr and "Traceback" not in run.stderr
