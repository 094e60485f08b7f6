"""Tests of retarget.motion.keyframes: the authoring format of docs/robot-description.md."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from retarget.motion import Motion, MotionFormatError
from retarget.motion.keyframes import format_keyframes, parse_keyframes, read_keyframes, write_keyframes

STEP = """robot: single_rod
description: 30 degree step, hold 1.5 s, return
unit: deg
interpolation: pchip
rate: 200
joints: [base_yaw]
keyframes:
  - [0.0, 0.0]
  - [0.5, 0.0]
  - [0.7, 30.0]
  - [2.2, 30.0]
  - [2.4, 0.0]
  - [4.0, 0.0]
"""


def test_documented_example_samples_at_rate_without_overshoot(tmp_path: Path) -> None:
    path = tmp_path / "step.yaml"
    path.write_text(STEP)
    keys = read_keyframes(path)
    assert keys.robot == "single_rod" and keys.interpolation == "pchip" and keys.rate == 200.0
    m = keys.to_motion()
    assert m.num_samples == 801 and m.time[-1] == pytest.approx(4.0)
    np.testing.assert_allclose(np.diff(m.time), 0.005, atol=1e-12)
    q = np.degrees(m.positions[:, 0])
    assert q.max() == pytest.approx(30.0, abs=1e-12) and q.min() >= -1e-12
    hold = (m.time >= 0.7) & (m.time <= 2.2)
    np.testing.assert_allclose(q[hold], 30.0, atol=1e-12)
    np.testing.assert_allclose(m.sample(keys.times), keys.values, atol=1e-12)


@pytest.mark.parametrize("interpolation", ["linear", "cubic"])
def test_other_interpolations_pass_through_keyframes(interpolation: str) -> None:
    data = yaml.safe_load(STEP)
    data["interpolation"] = interpolation
    keys, _ = parse_keyframes(data)
    m = keys.to_motion()
    np.testing.assert_allclose(m.sample(keys.times), keys.values, atol=1e-12)


def test_round_trip_without_rate_is_exact(tmp_path: Path, motion: Motion) -> None:
    path = write_keyframes(tmp_path / "k.yaml", motion, robot="drummer", description="test")
    keys = read_keyframes(path)
    assert keys.rate is None and keys.robot == "drummer" and keys.to_motion() == motion


def test_tiny_numbers_survive_yaml_1_1() -> None:
    m = Motion([0.0, 1e-5, 2e-5], ("a",), [[1e-7], [-3e-20], [1e20]])
    keys, _ = parse_keyframes(yaml.safe_load(format_keyframes(m)))
    assert keys.to_motion() == m


def _doc(**changes: object) -> dict:
    data = yaml.safe_load(STEP)
    data.update(changes)
    return data


@pytest.mark.parametrize(("data", "message"), [
    (_doc(keyframes=[[0.0, 1.0], [0.5]]), r"keyframe 1: 1 values, expected 2 .*ragged row"),
    (_doc(keyframes=[[0.0, 1.0], [0.5, "x"]]), "keyframe 1: joint 'base_yaw': expected a number, got 'x'"),
    (_doc(keyframes=[[0.0, 1.0], [0.5, float("nan")]]), "keyframe 1 .*joint 'base_yaw' is nan"),
    (_doc(keyframes=[[0.0, 1.0], [0.0, 2.0]]), "keyframe 1: duplicate time"),
    (_doc(keyframes=[[1.0, 1.0], [0.5, 2.0]]), "keyframe 1: time goes backwards"),
    (_doc(unit="turns"), "unknown unit 'turns'"),
    (_doc(interpolation="bezier"), "unknown interpolation 'bezier'"),
    (_doc(rate=0), "rate must be a positive number"),
    (_doc(keyframes=[]), "keyframes must be a non-empty list"),
    ({"joints": ["a"]}, "not a keyframes file"),
])
def test_malformed_keyframes(data: dict, message: str) -> None:
    with pytest.raises(MotionFormatError, match=message):
        parse_keyframes(data, source="k.yaml")
