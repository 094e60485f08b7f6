"""Tests of retarget.report.robot_render: geometry from the URDF and the YAML, and PNG output."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retarget.report.robot_render import SHOWCASE_POSES, render_robot, robot_polygons, save_robot_picture


def test_flexible_parts_are_drawn_from_the_yaml() -> None:
    faces, colours, lines, loops = robot_polygons("single_rod")
    assert len(faces) == len(colours) > 0 and loops == []
    (line,) = lines
    assert np.linalg.norm(line[1] - line[0]) == pytest.approx(0.70)
    assert line[1][2] > line[0][2] + 0.69  # vertical at rest


def test_joint_angles_move_the_rod_in_the_vertical_plane() -> None:
    _, _, (line,), _ = robot_polygons("single_rod", {"base_pitch": np.radians(30.0)})
    direction = (line[1] - line[0]) / 0.70
    assert direction == pytest.approx([np.sin(np.radians(30.0)), 0.0, np.cos(np.radians(30.0))], abs=1e-12)


def test_rapper_marks_its_loop_joint() -> None:
    _, _, lines, loops = robot_polygons("rapper", SHOWCASE_POSES["rapper"])
    assert len(lines) == 2 and len(loops) == 1


def test_render_writes_a_png(tmp_path: Path) -> None:
    path = save_robot_picture("two_rods", tmp_path / "two_rods.png", dpi=40)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = render_robot("two_rods", views=("front",))
    assert len(fig.axes) == 1
