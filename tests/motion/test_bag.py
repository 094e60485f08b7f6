"""Tests of retarget.motion.bag: rosbag2 JointTrajectory / JointState topics in MCAP and sqlite3, via rosbags."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retarget.motion import Motion, MotionFormatError
from retarget.motion.bag import JOINT_STATE, JOINT_TRAJECTORY, bag_topics, read_bag, write_bag


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
@pytest.mark.parametrize("msgtype", [JOINT_TRAJECTORY, JOINT_STATE])
def test_round_trip(tmp_path: Path, motion: Motion, storage: str, msgtype: str) -> None:
    bag = write_bag(tmp_path / "bag", motion, topic="/arm", msgtype=msgtype, storage=storage,
                    start_time_ns=1_700_000_000_123_456_789)
    assert bag_topics(bag) == {"/arm": msgtype}
    back, label = read_bag(bag)
    np.testing.assert_array_equal(back.positions, motion.positions)
    expected = motion.time if msgtype == JOINT_TRAJECTORY else motion.time - motion.time[0]
    np.testing.assert_allclose(back.time, expected, rtol=0, atol=1e-9)
    assert label(2) in ("point 2", "message 2")
    single = next(bag.glob("*.mcap" if storage == "mcap" else "*.db3"))
    np.testing.assert_array_equal(read_bag(single)[0].positions, motion.positions)


def _joint_state_bag(path: Path, names_per_message: list[list[str]], stamps_ns: list[int]) -> Path:
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_KILTED)
    t = store.types
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/joint_states", JOINT_STATE, typestore=store)
        for i, (names, ns) in enumerate(zip(names_per_message, stamps_ns)):
            header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](
                sec=ns // 10**9, nanosec=ns % 10**9), frame_id="")
            msg = t[JOINT_STATE](header=header, name=names, position=np.arange(len(names), dtype=float) + i,
                                 velocity=np.zeros(0), effort=np.zeros(0))
            writer.write(conn, 5_000 + i, store.serialize_cdr(msg, JOINT_STATE))
    return path


def test_joint_states_in_any_name_order(tmp_path: Path) -> None:
    bag = _joint_state_bag(tmp_path / "b", [["a", "b"], ["b", "a"]], [10**9, 10**9 + 10**7])
    m, _ = read_bag(bag)
    np.testing.assert_allclose(m.time, [0.0, 0.01], atol=1e-12)
    np.testing.assert_array_equal(m.positions, [[0.0, 1.0], [2.0, 1.0]])


def test_zero_stamps_fall_back_to_bag_time(tmp_path: Path) -> None:
    m, _ = read_bag(_joint_state_bag(tmp_path / "b", [["a"], ["a"]], [0, 0]))
    np.testing.assert_allclose(m.time, [0.0, 1e-9], atol=1e-15)


@pytest.mark.parametrize(("names", "stamps", "message"), [
    ([["a", "b"], ["a"]], [1, 2], r"message 1: joints differ from message 0: missing \['b'\]"),
    ([["a", "b"], ["a", "c"]], [1, 2], r"message 1: .*missing \['b'\], unknown \['c'\]"),
    ([["a"], ["a"]], [5, 5], "message 1: duplicate time"),
    ([["a"], ["a"]], [5, 3], "message 1: time goes backwards"),
])
def test_malformed_joint_states(tmp_path: Path, names: list, stamps: list, message: str) -> None:
    bag = _joint_state_bag(tmp_path / "b", names, stamps)
    with pytest.raises(MotionFormatError, match=message):
        read_bag(bag)


def test_topic_selection_errors(tmp_path: Path, motion: Motion) -> None:
    bag = write_bag(tmp_path / "bag", motion)
    with pytest.raises(MotionFormatError, match="no topic '/nope'"):
        read_bag(bag, topic="/nope")
    with pytest.raises(MotionFormatError, match="message index 3 out of range"):
        read_bag(bag, index=3)
    with pytest.raises(MotionFormatError, match="unknown bag storage"):
        write_bag(tmp_path / "other", motion, storage="rosbag1")
    assert not (tmp_path / "other").exists()


def test_real_bags_without_joint_topics_are_refused_clearly(shared_data: Path) -> None:
    for name in ("talker_mcap", "talker_sqlite3", "franka_panda_tf_sqlite3"):
        with pytest.raises(MotionFormatError, match="no JointTrajectory/JointState topics in the bag"):
            read_bag(shared_data / "rosbag2" / name)
    with pytest.raises(MotionFormatError, match="has type std_msgs/msg/String"):
        read_bag(shared_data / "rosbag2" / "talker_mcap", topic="/topic")
