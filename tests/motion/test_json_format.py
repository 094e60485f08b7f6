"""Tests of retarget.motion.json_format: round trips and malformed input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retarget.motion import Motion, MotionFormatError
from retarget.motion.json_format import motion_from_dict, motion_to_dict, read_json, write_json


def test_round_trip_is_exact(tmp_path: Path, motion: Motion) -> None:
    assert read_json(write_json(tmp_path / "m.json", motion)) == motion
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["unit"] == "rad" and data["joint_names"] == list(motion.joint_names)


def test_degrees(tmp_path: Path, motion: Motion) -> None:
    back = read_json(write_json(tmp_path / "m.json", motion, unit="deg"))
    np.testing.assert_allclose(back.positions, motion.positions, rtol=4e-16, atol=4e-16)


def _doc(**changes: object) -> dict:
    doc = {"joint_names": ["a", "b"], "time": [0.0, 0.1, 0.2], "positions": [[0, 1], [1, 2], [2, 3]]}
    doc.update(changes)
    return doc


@pytest.mark.parametrize(("doc", "message"), [
    (_doc(positions=[[0, 1], [1], [2, 3]]), "row 1: 1 positions for 2 joints: ragged row"),
    (_doc(positions=[[0, 1], [1, None], [2, 3]]), "row 1: joint 'b': expected a number, got None"),
    (_doc(positions=[[0, 1], [1, float("nan")], [2, 3]]), "row 1 .*joint 'b' is nan"),
    (_doc(time=[0.0, 0.2, 0.1]), "row 2: time goes backwards"),
    (_doc(time=[0.0, 0.1, 0.1]), "row 2: duplicate time"),
    (_doc(time=[0.0, 0.1]), "2 times but 3 position rows"),
    (_doc(unit="grad"), "unknown unit 'grad'"),
    ({"joint_names": ["a"], "time": [0]}, r"missing keys \['positions'\]"),
    (_doc(joint_names=["a", "a"]), "duplicate joint name 'a'"),
    ([1, 2], "expected a JSON object"),
])
def test_malformed_input(doc: object, message: str) -> None:
    with pytest.raises(MotionFormatError, match=message):
        motion_from_dict(doc, source="m.json")


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"joint_names": ["a"],\n "time": [0, }')
    with pytest.raises(MotionFormatError, match="line 2: not valid JSON"):
        read_json(path)


def test_dict_form(motion: Motion) -> None:
    assert motion_from_dict(motion_to_dict(motion))[0] == motion
