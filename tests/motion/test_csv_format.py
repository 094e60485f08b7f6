"""Tests of retarget.motion.csv_format: round trips and every malformed-input error."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retarget.motion import Motion, MotionFormatError
from retarget.motion.csv_format import format_csv, parse_csv, read_csv, write_csv


def test_round_trip_rad_is_exact(tmp_path: Path, motion: Motion) -> None:
    back = read_csv(write_csv(tmp_path / "m.csv", motion, unit="rad"))
    assert back == motion


@pytest.mark.parametrize(("unit", "time_unit"), [("deg", "s"), ("deg", "ms"), ("rad", "ms")])
def test_round_trip_with_unit_conversion_to_float_precision(tmp_path: Path, motion: Motion, unit: str,
                                                             time_unit: str) -> None:
    back = read_csv(write_csv(tmp_path / "m.csv", motion, unit=unit, time_unit=time_unit))
    assert back.joint_names == motion.joint_names
    np.testing.assert_allclose(back.positions, motion.positions, rtol=4e-16, atol=4e-16)
    np.testing.assert_allclose(back.time, motion.time, rtol=4e-16, atol=0)


def test_header_units_and_comments() -> None:
    text = "# exported by hand\ntime [ms], a [deg] ,b [rad]\n\n0,90,1\n500,180,2\n"
    m, label = parse_csv(text)
    np.testing.assert_allclose(m.time, [0.0, 0.5])
    np.testing.assert_allclose(m.positions, [[np.pi / 2, 1.0], [np.pi, 2.0]])
    assert m.joint_names == ("a", "b") and label(1) == "line 5"
    assert format_csv(m).splitlines()[0] == "time [s],a [deg],b [deg]"


@pytest.mark.parametrize(("text", "message"), [
    ("time [s],a [deg]\n0,1\n0.1,nan\n", r"line 3 \(t = 0.1 s\): joint 'a' is nan"),
    ("time [s],a [deg],b [deg]\n0,1,2\n0.1,1\n", "line 3: 2 values, expected 3 .*ragged row"),
    ("time [s],a [deg],b [deg]\n0,1,2\n0.1,1,2,3\n", "line 3: 4 values, expected 3"),
    ("time [s],a [deg]\n0,1\n0.2,1\n0.1,1\n", "line 4: time goes backwards"),
    ("time [s],a [deg]\n0,1\n0,1\n", "line 3: duplicate time"),
    ("time [s],a [degrees]\n0,1\n", r"header column 2 'a \[degrees\]': unknown unit \[degrees\]"),
    ("time [s],a\n0,1\n", "header column 2 'a' must be '<name> \\[unit\\]'"),
    ("time [min],a [deg]\n0,1\n", r"unknown unit \[min\]"),
    ("t [s],a [deg]\n0,1\n", "first column must be 'time"),
    ("time [s],a [deg],a [rad]\n0,1,2\n", "duplicate joint name 'a'"),
    ("time [s],a [deg]\n0,abc\n", "line 2: joint 'a': cannot read 'abc' as a number"),
    ("time [s],a [deg]\n0,\n", "line 2: joint 'a': cannot read '' as a number"),
    ("time [s]\n0\n", "header needs a time column and at least one joint"),
    ("", "empty CSV file"),
    ("time [s],a [deg]\n", "no samples"),
])
def test_malformed_input_names_line_and_joint(text: str, message: str) -> None:
    with pytest.raises(MotionFormatError, match=message):
        parse_csv(text, source="m.csv")


def test_error_carries_row_and_joint() -> None:
    with pytest.raises(MotionFormatError) as info:
        parse_csv("time [s],a [deg],b [deg]\n0,1,2\n1,2,inf\n", source="m.csv")
    assert info.value.row == "line 3" and info.value.joint == "b" and str(info.value).startswith("m.csv: ")


def test_unwritable_joint_name_writes_nothing(tmp_path: Path) -> None:
    m = Motion([0, 1], ("a,b",), [[0], [1]])
    with pytest.raises(MotionFormatError, match="cannot be written"):
        write_csv(tmp_path / "m.csv", m)
    assert list(tmp_path.iterdir()) == []
