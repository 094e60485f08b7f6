"""Editing a params file's text: comments and layout kept, values read back as written, nothing half-written."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from retarget.errors import InputError
from retarget.model.library import read_ros_parameters, share_dir
from retarget.model.params_file import format_value, set_ros_parameters

TEXT = """# header comment
/**:
  ros__parameters:
    robot_name: demo
    joint_names: [a, b,
                  c]
    dynamixel_ids: [1, 2, 3]   # wire order
    offsets: [0.0, 0.0,
              0.0]  # old comment

    # a section comment
    time_budget: 900.0
other_node:
  ros__parameters:
    offsets: [9.0]
"""


@pytest.fixture
def params(tmp_path: Path) -> Path:
    path = tmp_path / "demo.params.yaml"
    path.write_text(TEXT)
    path.chmod(0o640)
    return path


def test_a_key_is_replaced_in_place_and_everything_else_kept(params: Path) -> None:
    set_ros_parameters(params, {"offsets": [0.1, -0.25, 3.0]})
    text = params.read_text()
    assert "    offsets: [0.1, -0.25, 3.0]  # old comment\n" in text
    assert text.replace("    offsets: [0.1, -0.25, 3.0]  # old comment\n", "") == \
        TEXT.replace("    offsets: [0.0, 0.0,\n              0.0]  # old comment\n", "")
    assert yaml.safe_load(text)["other_node"]["ros__parameters"]["offsets"] == [9.0]
    assert stat.S_IMODE(params.stat().st_mode) == 0o640
    assert [p.name for p in params.parent.iterdir()] == [params.name]  # no temporary file left


def test_new_keys_go_after_the_anchor_in_order_with_their_comments(params: Path) -> None:
    set_ros_parameters(params, {"directions": [1, -1, 1], "baudrate": 57600}, after="dynamixel_ids",
                       comments={"directions": "measured"})
    lines = params.read_text().splitlines()
    at = lines.index("    dynamixel_ids: [1, 2, 3]   # wire order")
    assert lines[at + 1:at + 3] == ["    directions: [1, -1, 1]  # measured", "    baudrate: 57600"]
    values = read_ros_parameters(params)
    assert values["directions"] == [1, -1, 1] and values["joint_names"] == ["a", "b", "c"]
    set_ros_parameters(params, {"dt": 0.002})  # no anchor: the end of the block
    lines = params.read_text().splitlines()
    assert lines[lines.index("    time_budget: 900.0") + 1] == "    dt: 0.002"


def test_values_are_written_as_rcl_reads_them() -> None:
    assert format_value([0.0, 0.5]) == "[0.0, 0.5]" and format_value([1, -1]) == "[1, -1]"
    assert format_value(-0.0) == "0.0" and format_value(1e-9) == "0.0" and format_value(2.0) == "2.0"
    assert format_value("on") == "'on'" and format_value("drummer") == "drummer" and format_value(True) == "true"
    with pytest.raises(InputError, match="one type"):
        format_value([0, 0.5])
    with pytest.raises(InputError, match="nan"):
        format_value(float("nan"))


def test_an_edit_that_would_change_more_writes_nothing(params: Path, tmp_path: Path) -> None:
    broken = tmp_path / "odd.params.yaml"
    # A key written as a block sequence whose items sit at the key's own indentation: the text edit cannot see
    # where its value ends, and the check catches it.
    broken.write_text("/**:\n  ros__parameters:\n    offsets:\n    - 0.0\n    - 1.0\n    dt: 0.01\n")
    before = broken.read_text()
    with pytest.raises(InputError, match="nothing written"):
        set_ros_parameters(broken, {"offsets": [0.5, 0.5]})
    assert broken.read_text() == before
    with pytest.raises(InputError, match="ros__parameters"):
        (tmp_path / "empty.yaml").write_text("a: 1\n")
        set_ros_parameters(tmp_path / "empty.yaml", {"x": 1})


def test_every_shipped_params_file_takes_a_calibration(tmp_path: Path) -> None:
    for source in sorted((share_dir() / "config").glob("*.params.yaml")):
        path = tmp_path / source.name
        path.write_text(source.read_text())
        n = len(read_ros_parameters(path)["joint_names"])
        set_ros_parameters(path, {"offsets": [0.125] * n, "directions": [-1] * n}, after="dynamixel_ids")
        values = read_ros_parameters(path)
        assert values["offsets"] == [0.125] * n and values["directions"] == [-1] * n, source.name
        assert {k: v for k, v in values.items() if k not in ("offsets", "directions")} == \
            read_ros_parameters(source), source.name


def test_a_robot_without_a_params_file_is_told_one_to_start_from(tmp_path: Path) -> None:
    """The error names the missing file and gives its text, made of the robot's motors and servo model, which reads
    back as a params file (IDs 1..n as placeholders, said so)."""
    from retarget.model.library import ros_parameters

    (tmp_path / "arm.urdf").write_text((Path(__file__).parent / "fixtures" / "rigid_arm.urdf").read_text())
    robot = tmp_path / "arm.yaml"
    robot.write_text("retarget:\n  urdf: arm.urdf\n  motors: [shoulder, elbow]\n  servo: {model: XM430-W350}\n")
    with pytest.raises(InputError, match="no ROS 2 params file arm.params.yaml beside it") as info:
        ros_parameters(robot)
    text = str(info.value)
    assert "placeholders" in text and "retarget servos scan PORT" in text
    (tmp_path / "arm.params.yaml").write_text(text[text.index("/**:"):] + "\n")
    assert ros_parameters(robot) == {"robot_name": "arm", "joint_names": ["shoulder", "elbow"],
                                     "dynamixel_ids": [1, 2], "servo_model": "XM430-W350"}
