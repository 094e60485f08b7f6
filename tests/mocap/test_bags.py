"""rosbag2 I/O: PoseStamped bags written and read back with rosbags, the real shared bags read."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retarget.mocap.bags import (
    MOTION_START_KEY,
    POSE_STAMPED,
    PoseBagWriter,
    PoseSeries,
    bag_info,
    iter_messages,
    pose_topic,
    read_pose_series,
    write_pose_bag,
)
from retarget.mocap.errors import BagError


def _series(n: int = 50, seed: int = 0) -> PoseSeries:
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return PoseSeries(1.7e9 + np.arange(n) / 120.0, rng.normal(size=(n, 3)), q, "optitrack")


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_write_and_read_back(tmp_path: Path, storage: str) -> None:
    tip, base = _series(50, 1), _series(30, 2)
    tip.position_m[7] = np.nan  # occluded sample: not written
    info = write_pose_bag(tmp_path / "bag", {"/mocap/tip/pose": tip, "/mocap/base/pose": base}, storage=storage)
    assert (info.storage, info.version, info.message_count) == (storage, 9, 79)
    assert {(t.name, t.msgtype, t.count) for t in info.topics} == {
        ("/mocap/tip/pose", POSE_STAMPED, 49),
        ("/mocap/base/pose", POSE_STAMPED, 30),
    }
    back = read_pose_series(tmp_path / "bag", "/mocap/tip/pose")
    keep = np.arange(50) != 7
    np.testing.assert_allclose(back.time_s, tip.time_s[keep], atol=1e-6)  # float64 at 1.7e9 s: 0.2 µs steps
    np.testing.assert_array_equal(back.position_m, tip.position_m[keep])
    np.testing.assert_array_equal(back.orientation_xyzw, tip.orientation_xyzw[keep])
    assert back.frame_id == "optitrack"
    # Messages are typed PoseStamped for any rosbags reader; bag time order across topics.
    stamps = [t for _, _, t, _ in iter_messages(tmp_path / "bag")]
    assert stamps == sorted(stamps)
    _, msgtype, _, msg = next(iter_messages(tmp_path / "bag", ["/mocap/base/pose"]))
    assert msgtype == POSE_STAMPED and msg.__msgtype__ == POSE_STAMPED


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_custom_data_is_stored_in_the_metadata_and_read_back(tmp_path: Path, storage: str) -> None:
    """rosbag2's ``custom_data`` string map (where ``retarget play --record`` stores the motion's start)."""
    info = write_pose_bag(tmp_path / "bag", {"/mocap/tip/pose": _series()}, storage=storage,
                          custom_data={MOTION_START_KEY: "1700000000123456789", "note": "a b"})
    assert info.custom_data == {MOTION_START_KEY: "1700000000123456789", "note": "a b"}
    assert info.to_dict()["custom_data"] == dict(info.custom_data)
    writer = PoseBagWriter(tmp_path / "raw", storage)
    writer.write_pose("/mocap/tip/pose", 1.0, (0, 0, 0), (0, 0, 0, 1))
    writer.custom_data["a"] = "1"
    writer.custom_data["b"] = "2"
    writer.close()
    assert bag_info(tmp_path / "raw").custom_data == {"a": "1", "b": "2"}
    write_pose_bag(tmp_path / "plain", {"/mocap/tip/pose": _series()}, storage=storage)
    assert bag_info(tmp_path / "plain").custom_data == {}


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), PoseBagWriter(tmp_path / "bag") as writer:
        writer.write_pose("/mocap/tip/pose", 1.0, (0, 0, 0), (0, 0, 0, 1))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_writer_refuses_existing_and_bad_storage(tmp_path: Path) -> None:
    (tmp_path / "bag").mkdir()
    with pytest.raises(BagError, match="already exists"):
        PoseBagWriter(tmp_path / "bag")
    with pytest.raises(BagError, match="storage 'ros1'"):
        PoseBagWriter(tmp_path / "other", storage="ros1")
    with pytest.raises(BagError, match="does not exist"):
        bag_info(tmp_path / "nope")
    with pytest.raises(BagError):
        PoseSeries(np.zeros(3), np.zeros((2, 3)), np.zeros((3, 4)))


def test_read_pose_series_errors(tmp_path: Path) -> None:
    write_pose_bag(tmp_path / "bag", {"/a/pose": _series(3)})
    with pytest.raises(BagError, match="no topic '/b/pose'"):
        read_pose_series(tmp_path / "bag", "/b/pose")


def test_pose_topic_names() -> None:
    assert pose_topic("Rigid Body 1") == "/mocap/Rigid_Body_1/pose"
    assert pose_topic("1tip", "/mc/") == "/mc/_1tip/pose"


@pytest.mark.parametrize(
    ("name", "storage", "counts"),
    [
        ("franka_panda_tf_sqlite3", "sqlite3", {"/tf": 110, "/tf_static": 2}),
        ("talker_sqlite3", "sqlite3", {"/topic": 10, "/rosout": 10}),
        ("talker_mcap", "mcap", {"/topic": 10, "/rosout": 10}),
    ],
)
def test_real_bags_are_read(rosbag_dir: Path, name: str, storage: str, counts: dict[str, int]) -> None:
    info = bag_info(rosbag_dir / name)
    assert info.storage == storage
    assert {t.name: t.count for t in info.topics if t.count} == counts
    messages = list(iter_messages(rosbag_dir / name))
    assert len(messages) == sum(counts.values())
    if name.startswith("talker"):
        texts = [m.data for topic, _, _, m in messages if topic == "/topic"]
        assert texts == [f"Hello, world! {i}" for i in range(10)]
    else:
        frames = {tf.child_frame_id for topic, _, _, m in messages for tf in m.transforms}
        assert {"panda_link1", "panda_hand"} <= frames
