"""Tests of retarget.motion.io: format detection, load/save dispatch, limits on load and save, atomicity."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retarget.motion import Motion, MotionFormatError, MotionLimitError, detect_format, load_motion, save_motion


@pytest.mark.parametrize(("name", "fmt", "kind"), [("m.csv", None, "csv"), ("m.json", None, "json"),
                                                   ("m.yaml", None, "trajectory"), ("m.yml", "keyframes",
                                                                                   "keyframes"),
                                                   ("bagdir", None, "bag"), ("m.mcap", None, "bag"),
                                                   ("m.db3", None, "bag")])
def test_every_format_round_trips_through_load_and_save(tmp_path: Path, motion: Motion, name: str,
                                                         fmt: str | None, kind: str) -> None:
    written = save_motion(tmp_path / name, motion, fmt, unit="rad" if kind == "csv" else None)
    assert detect_format(written) == kind
    back = load_motion(written)
    np.testing.assert_array_equal(back.positions, motion.positions)
    np.testing.assert_allclose(back.time - back.time[0], motion.time - motion.time[0], rtol=0, atol=1e-9)


def test_mcap_suffix_makes_a_bag_directory(tmp_path: Path, motion: Motion) -> None:
    out = save_motion(tmp_path / "take.mcap", motion)
    assert out == tmp_path / "take" and (out / "take.mcap").is_file() and (out / "metadata.yaml").is_file()


def test_limits_on_load_name_the_file_line_and_joint(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("time [s],elbow [deg]\n0,0\n1,10\n2,100\n3,0\n")
    limits = {"elbow": (np.radians(-90), np.radians(90), 8.06)}
    with pytest.raises(MotionLimitError, match=r"m.csv: .*joint 'elbow' at line 4 \(t = 2 s\): angle .*\(100 deg\)"):
        load_motion(path, joint_limits=limits)
    assert load_motion(path, joint_limits={"elbow": (-2.0, 2.0, 8.06)}).num_samples == 4


def test_limits_on_save_write_nothing(tmp_path: Path, motion: Motion) -> None:
    limits = {"elbow": (-0.01, 0.01, None)}
    for name in ("m.csv", "m.json", "m.yaml", "bag"):
        with pytest.raises(MotionLimitError, match="joint 'elbow'"):
            save_motion(tmp_path / name, motion, joint_limits=limits)
    assert list(tmp_path.iterdir()) == []


def test_unknown_and_ambiguous_inputs(tmp_path: Path, motion: Motion) -> None:
    with pytest.raises(MotionFormatError, match="unknown motion file type '.txt'"):
        (tmp_path / "m.txt").write_text("x")
        load_motion(tmp_path / "m.txt")
    (tmp_path / "clip.BVH").write_text("HIERARCHY\n")
    with pytest.raises(MotionFormatError, match=r"map it onto the robot first with `retarget import-bvh ROBOT .*clip"):
        load_motion(tmp_path / "clip.BVH")
    (tmp_path / "other.yaml").write_text("foo: 1\n")
    with pytest.raises(MotionFormatError, match="neither a JointTrajectory"):
        load_motion(tmp_path / "other.yaml")
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(MotionFormatError, match="not a rosbag2 bag"):
        load_motion(tmp_path / "emptydir")
    with pytest.raises(MotionFormatError, match="no such motion"):
        load_motion(tmp_path / "missing.csv")
    with pytest.raises(MotionFormatError, match="cannot tell the format"):
        save_motion(tmp_path / "m.txt2", motion)


def test_keyframes_sampled_rows_are_labelled_by_sample(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("unit: deg\ninterpolation: linear\nrate: 10\njoints: [a]\nkeyframes:\n"
                    "  - [0.0, 0.0]\n  - [1.0, 120.0]\n")
    with pytest.raises(MotionLimitError, match=r"joint 'a' at sample 10 \(t = 1 s\)"):
        load_motion(path, joint_limits={"a": (-1.0, 1.0, None)})
