"""Tests of retarget.motion.trajectory: JointTrajectory dicts, duck-typed messages and YAML."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from retarget.motion import Motion, MotionFormatError
from retarget.motion.trajectory import (duration_to_seconds, motion_from_trajectory, motion_to_trajectory_dict,
                                        parse_trajectory_yaml, read_trajectory_yaml, seconds_to_duration,
                                        write_trajectory_yaml)


def test_duration_conversion() -> None:
    assert seconds_to_duration(1.5) == {"sec": 1, "nanosec": 500_000_000}
    assert seconds_to_duration(0.005) == {"sec": 0, "nanosec": 5_000_000}
    assert seconds_to_duration(-0.25) == {"sec": -1, "nanosec": 750_000_000}
    assert duration_to_seconds({"sec": 2, "nanosec": 1}) == pytest.approx(2.000000001, abs=1e-15)


def test_yaml_round_trip_positions_exact_times_to_a_nanosecond(tmp_path: Path, motion: Motion) -> None:
    back = read_trajectory_yaml(write_trajectory_yaml(tmp_path / "t.yaml", motion, velocities=True))
    assert back.joint_names == motion.joint_names
    np.testing.assert_array_equal(back.positions, motion.positions)
    np.testing.assert_allclose(back.time, motion.time, rtol=0, atol=1e-9)


def test_yaml_layout_is_ros2_topic_echo(motion: Motion) -> None:
    from retarget.motion.trajectory import format_trajectory_yaml

    text = format_trajectory_yaml(motion)
    assert text.endswith("---\n") and text.startswith("header:\n  stamp:\n    sec: 0\n    nanosec: 0\n")
    doc = next(yaml.safe_load_all(text))
    assert list(doc) == ["header", "joint_names", "points"]
    assert list(doc["points"][0]) == ["positions", "velocities", "accelerations", "effort", "time_from_start"]


def test_echo_output_with_several_messages_reads_the_first() -> None:
    text = ("header:\n  stamp:\n    sec: 0\n    nanosec: 0\n  frame_id: ''\njoint_names:\n- a\npoints:\n"
            "- positions:\n  - 0.5\n  velocities: []\n  accelerations: []\n  effort: []\n  time_from_start:\n"
            "    sec: 1\n    nanosec: 250000000\n---\njoint_names: [b]\npoints: []\n---\n")
    m, _ = parse_trajectory_yaml(text)
    assert m.joint_names == ("a",) and m.time[0] == 1.25 and m.positions[0, 0] == 0.5


def test_duck_typed_message(motion: Motion) -> None:
    data = motion_to_trajectory_dict(motion)
    msg = SimpleNamespace(joint_names=data["joint_names"], points=[
        SimpleNamespace(positions=np.array(p["positions"]), time_from_start=SimpleNamespace(**p["time_from_start"]))
        for p in data["points"]])
    back, label = motion_from_trajectory(msg)
    np.testing.assert_array_equal(back.positions, motion.positions)
    assert label(3) == "point 3"


def _traj(points: list) -> dict:
    return {"joint_names": ["a", "b"], "points": points}


def _pt(t: float, *q: float) -> dict:
    return {"positions": list(q), "time_from_start": seconds_to_duration(t)}


@pytest.mark.parametrize(("msg", "message"), [
    (_traj([]), "has no points"),
    (_traj([_pt(0, 1, 2), _pt(1, 1)]), r"point 1: 1 positions for 2 joints \['a', 'b'\]"),
    (_traj([_pt(0, 1, 2), _pt(1, 1, float("nan"))]), "point 1 .*joint 'b' is nan"),
    (_traj([_pt(0, 1, 2), _pt(0, 1, 2)]), "point 1: duplicate time"),
    (_traj([_pt(1, 1, 2), _pt(0.5, 1, 2)]), "point 1: time goes backwards"),
    (_traj([_pt(0, 1, 2), {"positions": [1, 2]}]), "point 1: missing time_from_start"),
    (_traj([_pt(0, 1, 2), {"positions": [1, "x"], "time_from_start": {"sec": 1, "nanosec": 0}}]),
     "point 1: positions are not numbers"),
])
def test_malformed_trajectory(msg: dict, message: str) -> None:
    with pytest.raises(MotionFormatError, match=message):
        motion_from_trajectory(msg)


def test_not_a_trajectory_yaml() -> None:
    with pytest.raises(MotionFormatError, match="not a JointTrajectory"):
        parse_trajectory_yaml("joints: [a]\n")
    with pytest.raises(MotionFormatError, match="not valid YAML"):
        parse_trajectory_yaml("a: [1, 2\n")
