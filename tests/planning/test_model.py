"""Where the planner's reduced model comes from (retarget.planning.model): a `retarget reduce` artifact
given explicitly or found in a model folder, stale artifacts named in clear errors, and `retarget plan --reduced`
on an artifact. Real parts: the artifact is built by `retarget reduce` on the tiny robot of conftest.py."""
from __future__ import annotations

import json
import shutil

import pytest

from retarget.errors import InputError, NotAvailableError
from retarget.motion import load_motion
from retarget.planning.model import artifact_dirs, planning_model
from retarget.sim.reduced.errors import StaleReducedModelError


@pytest.fixture()
def isolated(tmp_path, monkeypatch):
    """No cache and no model folder outside ``tmp_path``."""
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    return tmp_path


def test_an_explicit_artifact_is_loaded(tiny_artifact, isolated):
    folder, npz = tiny_artifact
    pm = planning_model(folder / "tiny_rod.yaml", load_motion(folder / "ramp.csv"), reduced_file=npz,
                        allow_training=False)
    assert pm.info["source"] == "artifact" and pm.info["file"] == str(npz)
    assert tuple(pm.reduced.motors) == ("m",)
    assert pm.info["training"]["dt"] == 0.002
    assert [t["link"] for t in pm.config["tracked_bodies"]] == ["tip"]


def test_a_stale_artifact_is_an_input_error_naming_what_changed(tiny_artifact, isolated):
    folder, npz = tiny_artifact
    robot = isolated / "tiny_rod.yaml"
    shutil.copy(folder / "tiny_rod.urdf", isolated / "tiny_rod.urdf")
    # Another tracked-body weight: the material and mesh are unchanged, the robot description is not.
    robot.write_text((folder / "tiny_rod.yaml").read_text().replace("position_weight: 1.0", "position_weight: 2.0"))
    with pytest.raises(StaleReducedModelError) as info:
        planning_model(robot, load_motion(folder / "ramp.csv"), reduced_file=npz)
    assert isinstance(info.value, InputError)
    assert "robot_yaml" in info.value.changed and "retarget reduce" in str(info.value)


def test_the_model_folder_is_searched_and_stale_artifacts_are_skipped(tiny_artifact, isolated, monkeypatch):
    folder, npz = tiny_artifact
    motion = load_motion(folder / "ramp.csv")
    monkeypatch.setenv("RETARGET_MODELS", str(npz.parent))
    assert artifact_dirs() == [npz.parent]
    pm = planning_model(folder / "tiny_rod.yaml", motion, allow_training=False)
    assert pm.info["source"] == "artifact" and pm.info["skipped"] == []
    # The same artifact against a changed robot: skipped, and the error lists it with the reason.
    shutil.copy(folder / "tiny_rod.urdf", isolated / "tiny_rod.urdf")
    changed = isolated / "tiny_rod.yaml"
    changed.write_text((folder / "tiny_rod.yaml").read_text() + "# edited\n")
    with pytest.raises(NotAvailableError) as info:
        planning_model(changed, motion, allow_training=False)
    assert str(npz) in str(info.value) and "robot_yaml" in str(info.value)


def test_a_fallback_model_is_used_after_the_cache_and_the_folders_and_stale_ones_are_skipped(tiny_artifact,
                                                                                              isolated):
    """The planner node's shipped models: tried when none is given, cached or found, before training; a stale one
    is skipped, and without training the error names what was searched (NoPlanningModelError)."""
    from retarget.optimize.errors import NoPlanningModelError

    folder, npz = tiny_artifact
    motion = load_motion(folder / "ramp.csv")
    with pytest.raises(NoPlanningModelError) as info:
        planning_model(folder / "tiny_rod.yaml", motion, allow_training=False)
    assert info.value.robot == "tiny_rod" and str(isolated / "models") in info.value.searched
    pm = planning_model(folder / "tiny_rod.yaml", motion, allow_training=False, fallback=(str(npz),))
    assert pm.info["source"] == "fallback" and pm.info["file"] == str(npz)
    shutil.copy(folder / "tiny_rod.urdf", isolated / "tiny_rod.urdf")
    changed = isolated / "tiny_rod.yaml"
    changed.write_text((folder / "tiny_rod.yaml").read_text() + "# edited\n")
    with pytest.raises(NoPlanningModelError) as info:
        planning_model(changed, motion, allow_training=False, fallback=(str(npz),))
    assert any(str(npz) in line and "robot_yaml" in line for line in info.value.skipped)


def test_an_isolated_cache_sees_no_other_model_folder(isolated, monkeypatch):
    monkeypatch.delenv("RETARGET_MODELS")
    assert artifact_dirs() == [isolated / "cache" / "models"]


def test_unknown_model_file_types_are_rejected(tiny_artifact, isolated):
    folder, _ = tiny_artifact
    bad = isolated / "model.bin"
    bad.write_bytes(b"\0")
    with pytest.raises(InputError, match=r"\.npz"):
        planning_model(folder / "tiny_rod.yaml", load_motion(folder / "ramp.csv"), reduced_file=bad)


@pytest.mark.integration  # the robust objective's models run in forked workers
def test_plan_cli_runs_on_an_artifact_and_reports_stale_ones(tiny_artifact, isolated, capsys):
    from retarget.cli import main

    folder, npz = tiny_artifact
    argv = ["plan", str(folder / "tiny_rod.yaml"), "--motion", str(folder / "ramp.csv"), "--reduced", str(npz),
            "--max-iterations", "1", "--dt", "0.005", "--knot-spacing", "0.04", "--json",
            "--allow-unverified-model"]  # the tiny rod's 4-layer mesh misses the model card's gate
    code = main(argv)
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # Planned: exit 0, or 3 when the cut is not meaningful (this ramp on the coarse rod: 1.09 x naive, measured) or
    # the optimized motion needs more than the stall torque.
    assert code == (0 if report["cut_reached"] and report["within_stall"] else 3)
    assert report["model"]["source"] == "artifact"
    assert report["optimized"]["peak_deviation_m"] > 0 and report["budget_limited"] is False
    shutil.copy(folder / "tiny_rod.urdf", isolated / "tiny_rod.urdf")
    (isolated / "tiny_rod.yaml").write_text((folder / "tiny_rod.yaml").read_text() + "# edited\n")
    argv[1] = str(isolated / "tiny_rod.yaml")
    assert main(argv) == 2
    assert "stale" in capsys.readouterr().err
