"""``retarget record``: raw CDR from live subscriptions into rosbag2 bags that rosbags reads back, typed.

In process: several message types (standard, latched, and a project type defined only by its installed ``.msg``)
recorded and compared field by field. As processes: the twin mocap node recorded into MCAP and sqlite3 at once,
and a recording without ``--duration`` ended by SIGINT, which must still leave a complete bag.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ros_helpers import wait_for

from retarget.mocap.bags import POSE_STAMPED, bag_info, iter_messages, read_pose_series
from retarget.mocap.errors import BagError

pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")

from retarget.ros.record import RawBagWriter, message_class, record, recording_writer, register_record  # noqa: E402


def _no_partials(folder: Path) -> bool:
    return not any(p.name.startswith(".") and ".partial-" in p.name for p in folder.iterdir())


# -- the writer (no graph) ----------------------------------------------------------------------------------------


def test_writer_is_atomic_and_checks_its_path(tmp_path: Path) -> None:
    from std_msgs.msg import String

    from rclpy.serialization import serialize_message

    writer = RawBagWriter(tmp_path / "bag", "sqlite3")
    writer.add_topic("/chatter", "std_msgs/msg/String")
    writer.add_topic("/chatter", "std_msgs/msg/String")  # idempotent
    with pytest.raises(BagError, match="cannot also record"):
        writer.add_topic("/chatter", "std_msgs/msg/Int32")
    writer.write("/chatter", 1_000, serialize_message(String(data="hello")))
    assert not (tmp_path / "bag").exists()  # only the hidden partial folder so far
    writer.close()
    assert _no_partials(tmp_path)
    [(topic, msgtype, stamp, msg)] = list(iter_messages(tmp_path / "bag"))
    assert (topic, msgtype, stamp, msg.data) == ("/chatter", "std_msgs/msg/String", 1_000, "hello")

    with pytest.raises(BagError, match="already exists"):
        RawBagWriter(tmp_path / "bag")
    with pytest.raises(BagError, match="parent folder"):
        RawBagWriter(tmp_path / "missing" / "bag")
    with pytest.raises(BagError, match="not supported"):
        RawBagWriter(tmp_path / "other", "rosbag1")

    aborted = RawBagWriter(tmp_path / "aborted")
    aborted.add_topic("/chatter", "std_msgs/msg/String")
    aborted.abort()
    assert not (tmp_path / "aborted").exists() and _no_partials(tmp_path)


def test_types_outside_the_typestore_come_from_installed_msg_files(tmp_path: Path) -> None:
    pytest.importorskip("control_msgs.msg", reason="the project's control_msgs interface package is not built")
    with recording_writer(tmp_path / "bag") as writer:
        writer.add_topic("/tolerance", "control_msgs/msg/JointTolerance")
        with pytest.raises(BagError, match="no message definition for nosuch_msgs/msg/Thing"):
            writer.add_topic("/thing", "nosuch_msgs/msg/Thing")
    assert [t.msgtype for t in bag_info(tmp_path / "bag").topics] == ["control_msgs/msg/JointTolerance"]
    with pytest.raises(BagError, match="not installed"):
        message_class("nosuch_msgs/msg/Thing")
    assert message_class("geometry_msgs/PoseStamped").__name__ == "PoseStamped"


def test_register_record_parses_the_documented_options() -> None:
    parser = argparse.ArgumentParser()
    register_record(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["record", "--topics", "/a", "b", "--out", "x"])
    assert (args.topics, args.out, args.storage, args.duration, args.json) == (["/a", "b"], Path("x"), "mcap",
                                                                               None, False)
    args = parser.parse_args(["record", "--topics", "/a", "--out", "x", "--storage", "sqlite3", "--duration", "2"])
    assert (args.storage, args.duration) == ("sqlite3", 2.0)


# -- in process, against a live graph ------------------------------------------------------------------------------


def _record_in_thread(result: dict[str, Any], *args: Any, **kwargs: Any) -> threading.Thread:
    def run() -> None:
        try:
            result["summary"] = record(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_stopped_recorder_writes_what_its_subscriptions_already_hold() -> None:
    """_drain: after the stop, spin without waiting until three turns in a row take no message (a turn may run
    another callback: a timer, a guard condition), so nothing DDS delivered is lost."""
    from types import SimpleNamespace

    from retarget.ros.record import _drain

    held = ["m"] * 7
    writer = SimpleNamespace(message_count=0)
    turns: list[float] = []

    def spin_once(timeout_sec: float) -> None:
        turns.append(timeout_sec)
        if held and len(turns) % 3 != 0:  # every third turn runs another callback
            held.pop()
            writer.message_count += 1

    _drain(SimpleNamespace(spin_once=spin_once), writer)
    assert writer.message_count == 7 and not held
    assert set(turns) == {0.0} and len(turns) == 10 + 3  # 7 messages, 3 other callbacks, 3 idle turns
    always_busy = SimpleNamespace(spin_once=lambda timeout_sec: None)
    writer.message_count = 0

    def endless(timeout_sec: float) -> None:  # a flood: bounded by the time limit
        writer.message_count += 1

    _drain(SimpleNamespace(spin_once=endless), writer, limit_s=0.05)
    assert writer.message_count > 0
    _drain(always_busy, writer)  # nothing held: three idle turns and done


@pytest.mark.integration
def test_record_several_types_in_process(ros_context: Any, tmp_path: Path) -> None:
    """PoseStamped, JointState, JointTrajectory, DiagnosticArray, a latched topic and a project type."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from geometry_msgs.msg import PoseStamped
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    context, executor = ros_context
    suffix = f"{os.getpid()}_{time.monotonic_ns()}"
    node = Node(f"record_source_{suffix}", context=context)
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    pubs = {
        "/rec/pose": node.create_publisher(PoseStamped, "/rec/pose", 10),
        "/rec/joint_states": node.create_publisher(JointState, "/rec/joint_states", 10),
        "/rec/trajectory": node.create_publisher(JointTrajectory, "/rec/trajectory", 10),
        "/rec/diagnostics": node.create_publisher(DiagnosticArray, "/rec/diagnostics", 10),
        "/rec/robot_description": node.create_publisher(String, "/rec/robot_description", latched),
    }
    have_control_msgs = True
    try:
        from control_msgs.msg import JointTolerance

        pubs["/rec/tolerance"] = node.create_publisher(JointTolerance, "/rec/tolerance", 10)
    except ImportError:
        have_control_msgs = False
    pubs["/rec/robot_description"].publish(String(data="<robot name='rod'/>"))  # before the recorder exists
    executor.add_node(node)
    stop = threading.Event()
    result: dict[str, Any] = {}
    out = tmp_path / "several"
    thread = _record_in_thread(result, [*pubs, "rec/never"], out, "mcap", progress=False, stop=stop)
    try:
        wait_for(lambda: all(p.get_subscription_count() > 0 for p in pubs.values()), 10.0, "recorder subscriptions")
        for k in range(5):
            pose = PoseStamped()
            pose.header.stamp.sec, pose.header.frame_id = 100 + k, "world"
            pose.pose.position.x, pose.pose.orientation.w = 0.1 * k, 1.0
            pubs["/rec/pose"].publish(pose)
            pubs["/rec/joint_states"].publish(JointState(name=["shoulder", "elbow"], position=[0.5 * k, -0.25]))
            trajectory = JointTrajectory(joint_names=["shoulder"],
                                         points=[JointTrajectoryPoint(positions=[float(k)], velocities=[1.0])])
            pubs["/rec/trajectory"].publish(trajectory)
            pubs["/rec/diagnostics"].publish(DiagnosticArray(status=[DiagnosticStatus(name=f"s{k}", message="ok")]))
            if have_control_msgs:
                pubs["/rec/tolerance"].publish(JointTolerance(name="shoulder", position=0.01 * k))
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(10)
        executor.remove_node(node)
        node.destroy_node()
    assert "error" not in result, result.get("error")
    summary = result["summary"]
    assert summary.missing == ["/rec/never"] and summary.stopped_by == "caller"
    expected_types = {
        "/rec/pose": POSE_STAMPED,
        "/rec/joint_states": "sensor_msgs/msg/JointState",
        "/rec/trajectory": "trajectory_msgs/msg/JointTrajectory",
        "/rec/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
        "/rec/robot_description": "std_msgs/msg/String",
    }
    if have_control_msgs:
        expected_types["/rec/tolerance"] = "control_msgs/msg/JointTolerance"
    assert {t: c[0] for t, c in summary.topics.items()} == expected_types
    assert {t: c[1] for t, c in summary.topics.items()} == {t: 1 if "description" in t else 5 for t in expected_types}
    assert {t.name: (t.msgtype, t.count) for t in bag_info(out).topics} == summary.topics

    by_topic: dict[str, list[Any]] = {}
    for topic, _, _, msg in iter_messages(out):
        by_topic.setdefault(topic, []).append(msg)
    assert [m.pose.position.x for m in by_topic["/rec/pose"]] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert [m.header.stamp.sec for m in by_topic["/rec/pose"]] == [100, 101, 102, 103, 104]
    assert list(by_topic["/rec/joint_states"][3].name) == ["shoulder", "elbow"]
    np.testing.assert_allclose(by_topic["/rec/joint_states"][3].position, [1.5, -0.25])
    assert by_topic["/rec/trajectory"][2].points[0].positions.tolist() == [2.0]
    assert by_topic["/rec/diagnostics"][4].status[0].name == "s4"
    assert by_topic["/rec/robot_description"][0].data == "<robot name='rod'/>"
    if have_control_msgs:
        assert by_topic["/rec/tolerance"][4].position == pytest.approx(0.04)
    series = read_pose_series(out, "/rec/pose")
    np.testing.assert_allclose(series.time_s, [100, 101, 102, 103, 104])


@pytest.mark.integration
def test_duration_counts_from_the_first_message(ros_context: Any, tmp_path: Path) -> None:
    """A publisher that starts sending 1.5 s after the recorder subscribed still yields --duration s of messages."""
    from geometry_msgs.msg import PoseStamped
    from rclpy.node import Node

    context, executor = ros_context
    node = Node(f"record_late_{os.getpid()}_{time.monotonic_ns()}", context=context)
    pub = node.create_publisher(PoseStamped, "/rec_late/pose", 10)
    executor.add_node(node)
    result: dict[str, Any] = {}
    out = tmp_path / "late"
    thread = _record_in_thread(result, ["/rec_late/pose"], out, "mcap", duration_s=1.0, progress=False, wait_s=10.0)
    try:
        wait_for(lambda: pub.get_subscription_count() > 0, 10.0, "the recorder to subscribe")
        time.sleep(1.5)  # longer than the duration: counted from the subscription, nothing would be recorded
        deadline = time.monotonic() + 10.0
        while thread.is_alive() and time.monotonic() < deadline:
            pub.publish(PoseStamped())
            time.sleep(0.02)
    finally:
        thread.join(10)
        executor.remove_node(node)
        node.destroy_node()
    assert "error" not in result, result.get("error")
    assert result["summary"].stopped_by == "duration"
    bag_times = np.array([t for _, _, t, _ in iter_messages(out)]) * 1e-9
    assert bag_times[-1] - bag_times[0] >= 0.9 and len(bag_times) >= 20


@pytest.mark.integration
def test_a_silent_topic_with_a_duration_fails_and_leaves_no_bag(ros_context: Any, tmp_path: Path) -> None:
    from geometry_msgs.msg import PoseStamped
    from rclpy.node import Node

    from retarget.ros.record import NoTopicError

    context, executor = ros_context
    node = Node(f"record_silent_{os.getpid()}_{time.monotonic_ns()}", context=context)
    node.create_publisher(PoseStamped, "/rec_silent/pose", 10)  # in the graph, never publishes
    executor.add_node(node)
    result: dict[str, Any] = {}
    out = tmp_path / "silent"
    try:
        # wait_s also bounds the recorder's discovery of the publisher: 1.5 s was once too short at load 6 on 2 cores
        # (the error then said the topic was never published).
        thread = _record_in_thread(result, ["/rec_silent/pose"], out, "mcap", duration_s=0.5, progress=False,
                                   wait_s=5.0)
        thread.join(30)
    finally:
        executor.remove_node(node)
        node.destroy_node()
    assert isinstance(result.get("error"), NoTopicError), result
    assert "subscribed to /rec_silent/pose, but no message arrived within 5 s" in str(result["error"])
    assert not out.exists() and _no_partials(tmp_path)


# -- as processes ---------------------------------------------------------------------------------------------------

TIP_POSITION = (0.05, -0.02, 0.7)
TIP_ORIENTATION = (0.0, 0.25881904510252074, 0.0, 0.9659258262890683)  # 30 deg about y


@pytest.fixture(scope="module")
def twin_node(start_module_node: Any, ros_context: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The mocap node with a noise-free twin holding one known pose, once its topic is in the graph."""
    from rclpy.node import Node

    folder = tmp_path_factory.mktemp("twin")
    motion = folder / "still.npz"
    np.savez(motion, time_s=np.array([0.0, 1.0]), **{
        "tip.position_m": np.tile(TIP_POSITION, (2, 1)), "tip.orientation_xyzw": np.tile(TIP_ORIENTATION, (2, 1))})
    node = start_module_node("retarget.ros.mocap_node", {
        "source": "twin", "twin_motion": str(motion), "twin_rate": 100.0, "twin_position_noise_m": 0.0,
        "twin_latency_s": 0.003, "frame_id": "optitrack"}, name="mocap_twin")
    probe = Node(f"twin_probe_{os.getpid()}", context=ros_context[0])
    try:
        wait_for(lambda: probe.count_publishers("/mocap/tip/pose") > 0, 20.0, f"the twin node ({node.log_path})")
    finally:
        probe.destroy_node()
    return node


def _record_process(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "retarget.ros.record", "--no-progress", *args],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, env=os.environ.copy(),
                            start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        raise


@pytest.mark.integration
def test_record_twin_node_into_mcap_and_sqlite3(twin_node: Any, tmp_path: Path) -> None:
    # The duration counts from the first message (on two loaded cores the DDS match of the new reader with the
    # running writer has taken ~3 s: counted from the subscription, a CI run recorded 18 messages in 3 s).
    procs = {storage: _record_process(["--topics", "mocap/tip/pose", "--out", str(tmp_path / storage),
                                       "--storage", storage, "--duration", "3", "--wait", "20", "--json"],
                                      tmp_path / f"{storage}.log")
             for storage in ("mcap", "sqlite3")}
    for storage, proc in procs.items():
        assert _finish(proc, 27) == 0, (tmp_path / f"{storage}.log").read_text()
    for storage in procs:
        log = (tmp_path / f"{storage}.log").read_text().strip().splitlines()
        summary = json.loads(log[-1])
        assert summary["storage"] == storage and summary["stopped_by"] == "duration" and summary["missing"] == []
        info = bag_info(tmp_path / storage)
        assert info.storage == storage and info.version == 9
        assert [(t.name, t.msgtype) for t in info.topics] == [("/mocap/tip/pose", POSE_STAMPED)]
        # 100 Hz for 3 s; a low bound, as other test runs may share the two cores.
        assert info.message_count == summary["message_count"] >= 90
        series = read_pose_series(tmp_path / storage, "/mocap/tip/pose")
        n = len(series.time_s)
        np.testing.assert_allclose(series.position_m, np.tile(TIP_POSITION, (n, 1)), atol=1e-12)
        np.testing.assert_allclose(series.orientation_xyzw, np.tile(TIP_ORIENTATION, (n, 1)), atol=1e-12)
        assert series.frame_id == "optitrack"
        # Twin frames are captured every 10 ms: stamps on that grid, bag times after the stamps (latency).
        np.testing.assert_allclose(np.diff(series.time_s), 0.01, atol=1e-6)
        bag_times = np.array([t for _, _, t, _ in iter_messages(tmp_path / storage)]) * 1e-9
        assert np.all(bag_times - series.time_s >= 0.003 - 1e-6)
    assert _no_partials(tmp_path) and twin_node.proc.poll() is None


@pytest.mark.integration
def test_sigint_finishes_the_bag(twin_node: Any, ros_context: Any, tmp_path: Path) -> None:
    from rclpy.node import Node

    out = tmp_path / "interrupted"
    proc = _record_process(["--topics", "/mocap/tip/pose", "--out", str(out), "--wait", "20", "--json"],
                           tmp_path / "rec.log")
    watcher = Node(f"record_watcher_{os.getpid()}", context=ros_context[0])
    try:
        wait_for(lambda: watcher.count_subscribers("/mocap/tip/pose") >= 1, 15.0, "the recorder to subscribe")
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        assert _finish(proc, 10) == 0, (tmp_path / "rec.log").read_text()
    finally:
        watcher.destroy_node()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    summary = json.loads((tmp_path / "rec.log").read_text().strip().splitlines()[-1])
    assert summary["stopped_by"] == "signal" and summary["message_count"] >= 10
    assert bag_info(out).message_count == summary["message_count"]
    assert _no_partials(tmp_path)


def _run_record(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retarget.ros.record", "--no-progress", *args], capture_output=True,
                          text=True, timeout=30, env=os.environ.copy())


@pytest.mark.integration
def test_user_errors_exit_with_code_2_and_leave_no_bag(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    run = _run_record(["--topics", "/x", "--out", str(tmp_path / "taken"), "--duration", "1"])
    assert run.returncode == 2 and "already exists" in run.stderr
    run = _run_record(["--topics", "/never_published", "--out", str(tmp_path / "empty"), "--wait", "0.5"])
    assert run.returncode == 2 and "none of /never_published was published within 0.5 s" in run.stderr
    assert not (tmp_path / "empty").exists() and _no_partials(tmp_path)


def test_a_missing_mocap_topic_says_where_a_robots_bodies_come_from() -> None:
    from retarget.ros.record import NoTopicError

    text = str(NoTopicError(["/arm/mocap/fore/pose"], 15.0, ["/arm/mocap/tip/pose"]))
    assert "topics seen: /arm/mocap/tip/pose" in text and "retarget up ROBOT --twin reduced" in text
    assert "--twin reduced" not in str(NoTopicError(["/never_published"], 0.5, []))
