"""One spelling across the commands (:mod:`retarget.cliargs`): the robot first, the motion as ``--motion``; the
old spellings still parse, rewritten with a deprecation note on stderr."""
from __future__ import annotations

import argparse

import pytest

from retarget.cli import build_parser, main
from retarget.cliargs import resolve_legacy
from retarget.errors import InputError


def _parsed(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(list(argv))
    resolve_legacy(args)
    return args


def test_the_robot_comes_first_and_the_old_robot_flag_is_deprecated(capsys: pytest.CaptureFixture[str]) -> None:
    new = _parsed("check", "gradient", "single_rod", "--motion", "single_rod/step_30")
    assert new.robot == "single_rod" and capsys.readouterr().err == ""
    old = _parsed("check", "gradient", "--robot", "single_rod", "--motion", "single_rod/step_30")
    assert old.robot == "single_rod"
    assert ("retarget: deprecated: `retarget check gradient --robot single_rod` is deprecated: give the robot "
            "first, `retarget check gradient single_rod ...`") in capsys.readouterr().err
    with pytest.raises(InputError, match="which robot"):
        _parsed("check", "gradient", "--motion", "single_rod/step_30")
    with pytest.raises(InputError, match="two robots"):
        _parsed("check", "gradient", "two_rods", "--robot", "single_rod", "--motion", "m")
    assert _parsed("check", "reduced", "single_rod", "--model", "m.npz", "--test-motion", "m").robot == "single_rod"
    assert _parsed("fit", "fit_rig", "--recording", "r.csv", "--body", "tip").robot == "fit_rig"
    assert _parsed("twin-test", "--out", "t.csv").robot == "fit_rig"  # a rig command's default rig
    assert _parsed("twin-test", "single_rod", "--out", "t.csv").robot == "single_rod"


def test_the_motion_is_a_flag_and_the_old_positional_motion_is_deprecated(capsys: pytest.CaptureFixture[str]) -> None:
    assert _parsed("check", "profile-fit", "--motion", "single_rod/step_30").motion == "single_rod/step_30"
    assert capsys.readouterr().err == ""
    assert _parsed("check", "profile-fit", "single_rod/step_30").motion == "single_rod/step_30"
    assert "give the motion as `--motion single_rod/step_30`" in capsys.readouterr().err
    with pytest.raises(InputError, match="which motion"):
        _parsed("check", "profile-fit")


def test_play_takes_the_robot_first_and_the_old_forms(capsys: pytest.CaptureFixture[str]) -> None:
    new = _parsed("play", "fit_rig", "--motion", "fit_rig/step_30")
    assert (new.robot, new.motion) == ("fit_rig", "fit_rig/step_30") and capsys.readouterr().err == ""
    named = _parsed("play", "--motion", "fit_rig/step_30")  # the robot from the library name, later
    assert (named.robot, named.motion) == (None, "fit_rig/step_30")
    old = _parsed("play", "fit_rig/step_30")
    assert (old.robot, old.motion) == (None, "fit_rig/step_30")
    assert "`retarget play ROBOT --motion fit_rig/step_30`" in capsys.readouterr().err
    old_robot = _parsed("play", "take.csv", "--robot", "fit_rig")
    assert (old_robot.robot, old_robot.motion) == ("fit_rig", "take.csv")
    assert "`retarget play fit_rig --motion take.csv`" in capsys.readouterr().err


def test_import_bvh_takes_the_robot_first(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("--map", "m.yaml", "--out", "o.csv")
    new = _parsed("import-bvh", "drummer", "clip.bvh", *common)
    assert (new.robot, new.file) == ("drummer", "clip.bvh") and capsys.readouterr().err == ""
    old = _parsed("import-bvh", "clip.bvh", "--robot", "drummer", *common)
    assert (old.robot, old.file) == ("drummer", "clip.bvh")
    assert "`retarget import-bvh drummer clip.bvh ...`" in capsys.readouterr().err


def test_an_old_spelling_still_runs_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "profile-fit", "single_rod/step_30", "--json"]) == 0
    captured = capsys.readouterr()
    assert "retarget: deprecated:" in captured.err and captured.out.strip().splitlines()[-1].startswith("{")
    assert main(["check", "gradient", "--motion", "single_rod/step_30"]) == 2
    assert "which robot? give it first" in capsys.readouterr().err
