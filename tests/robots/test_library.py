"""Tests of retarget.model.library (named robots and motions) and its CLI commands."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from retarget.cli import main
from retarget.errors import InputError
from retarget.model import library
from retarget.model.library import UnknownNameError

ROBOTS = ["bartender", "boxer", "dancer", "drummer", "rapper", "single_rod", "two_rods"]
RIGS = ["fit_rig"]
MOTIONS = ["bartender/serve", "boxer/boxing", "boxer/boxing_servo", "dancer/wave", "drummer/drumming",
           "fit_rig/ident_mode2", "fit_rig/step_30", "rapper/rap", "single_rod/ident_mode2", "single_rod/step_20_fast",
           "single_rod/step_30", "single_rod/step_30_fast_return", "single_rod/step_30_servo",
           "single_rod/step_45_fast", "two_rods/swing_90"]
SINGLE_ROD = [m for m in MOTIONS if m.startswith("single_rod/")]


def test_share_dir_is_the_checkout_with_config_and_urdf() -> None:
    share = library.share_dir()
    assert (share / "config").is_dir() and (share / "urdf").is_dir()
    assert share == Path(__file__).resolve().parents[2]


def test_list_robots_gives_the_seven_robots() -> None:
    assert library.list_robots() == ROBOTS


def test_rigs_resolve_by_name_but_are_not_robots(tmp_path: Path) -> None:
    """The material-fitting rig is a robot file with ``kind: rig``: found by name, listed apart; its ROS params file
    (a bring-up on its XM540-W270) is optional for a rig."""
    assert library.list_rigs() == RIGS
    path = library.resolve_robot("fit_rig")
    assert path.name == "fit_rig.yaml"
    assert library.robot_config("fit_rig")["retarget"]["servo"]["model"] == "XM540-W270"
    assert 'name="fit_rig"' in library.urdf_xml("fit_rig")
    assert library.resolve_params("fit_rig") == path.with_name("fit_rig.params.yaml")
    bare = tmp_path / "my_rig.yaml"
    bare.write_text(path.read_text())
    with pytest.raises(InputError, match="params file"):
        library.resolve_params(bare)


def test_resolve_robot_by_name_and_by_path(tmp_path: Path) -> None:
    path = library.resolve_robot("drummer")
    assert path.name == "drummer.yaml" and path.is_file()
    copy = tmp_path / "mine.yaml"
    copy.write_text(path.read_text())
    assert library.resolve_robot(copy) == copy
    assert library.resolve_robot(str(copy)) == Path(str(copy))


def test_unknown_robot_lists_the_known_ones() -> None:
    with pytest.raises(UnknownNameError) as info:
        library.resolve_robot("robocop")
    assert isinstance(info.value, InputError)
    assert info.value.known == ROBOTS + RIGS
    assert "robocop" in str(info.value) and "single_rod" in str(info.value)


def test_resolve_urdf_finds_each_xacro() -> None:
    for robot in ROBOTS + RIGS:
        path = library.resolve_urdf(robot)
        assert path.is_file() and path.name == f"{robot}.urdf.xacro"


def test_urdf_xml_expands_xacro() -> None:
    xml = library.urdf_xml("single_rod")
    assert "<robot" in xml and "xacro:" not in xml and 'name="base_pitch"' in xml


def test_list_motions_names_and_filter() -> None:
    assert library.list_motions() == MOTIONS
    assert library.list_motions("single_rod") == SINGLE_ROD
    assert library.list_motions("nobody") == []


def test_resolve_motion_by_name_and_path() -> None:
    path = library.resolve_motion("single_rod/step_30")
    assert path == library.motions_dir() / "single_rod" / "step_30.yaml"
    assert library.resolve_motion(path) == path
    with pytest.raises(UnknownNameError) as info:
        library.resolve_motion("single_rod/step_99")
    assert "single_rod/step_30" in str(info.value)


def test_cli_robots_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["robots", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = listing["robots"]
    by_name = {r["name"]: r for r in rows}
    assert sorted(by_name) == ROBOTS
    assert [r["name"] for r in listing["rigs"]] == RIGS and listing["rigs"][0]["dof"] == 1
    assert by_name["drummer"]["dof"] == 13 and by_name["single_rod"]["dof"] == 1
    assert by_name["rapper"]["flexible_parts"] == ["upper_arm", "forearm"]
    assert by_name["boxer"]["mass_kg"] > by_name["drummer"]["mass_kg"]


def test_cli_motions_json_and_unknown_robot(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["motions", "single_rod", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["motions"]
    assert [r["name"] for r in rows] == SINGLE_ROD
    step = rows[SINGLE_ROD.index("single_rod/step_30")]
    assert step["duration_s"] == pytest.approx(4.0)
    assert "30 degrees" in step["description"]
    assert main(["motions", "robocop"]) == 2
    assert "known robots" in capsys.readouterr().err
