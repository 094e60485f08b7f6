"""``retarget view DIR``: rebuilds missing views from animation.npz, keeps fresh ones, clear errors; ``retarget plan
--report`` skips the views it is told to."""
from __future__ import annotations

import json
import shutil

import pytest

from retarget.cli import main

# The plans these tests run fork worker processes (the full-FEM checks, the robust members).
pytestmark = pytest.mark.integration


def test_view_rebuilds_missing_views_only(tiny_report, tmp_path, capsys):
    folder = tmp_path / "report"
    shutil.copytree(tiny_report, folder)
    (folder / "animation.html").unlink()
    assert main(["view", str(folder), "--no-video", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["files"] == [str(folder / "animation.html")]  # the MCAP was newer than animation.npz: kept
    assert out["variants"] == ["naive", "zvd", "optimized"]
    assert main(["view", str(folder), "--rebuild", "--no-page", "--no-mcap", "--variants", "naive,optimized",
                 "--video", str(tmp_path / "two.gif"), "--fps", "20", "--width", "160", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["files"] == [str(tmp_path / "two.gif")] and out["variants"] == ["naive", "optimized"]


def test_view_errors_name_what_and_where(tmp_path, capsys):
    assert main(["view", str(tmp_path)]) == 2
    assert f"no animation at {tmp_path / 'animation.npz'}" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "missing")]) == 2
    assert "no report folder" in capsys.readouterr().err


def test_plan_report_skips_the_views_it_is_told_to(tiny_report, tmp_path):
    # The tiny report's robot and model (conftest), planned again with the page only.
    folder = tiny_report.parent
    report = tmp_path / "report"
    code = main(["plan", str(folder / "config" / "tiny_rod.yaml"), "--motion", str(folder / "ramp.csv"), "--reduced",
                 str(folder / "models" / "tiny_rod-ramp.npz"), "--max-iterations", "1", "--knot-spacing", "0.04",
                 "--verify-dt", "0", "--robust", "none", "--band", "none", "--verify-model", "none",
                 "--allow-unverified-model", "--report", str(report), "--no-video", "--no-mcap"])
    assert code in (0, 3)  # 3: no meaningful cut in one iteration; the report is written all the same
    assert (report / "animation.npz").is_file() and (report / "animation.html").is_file()
    assert not (report / "animation.mp4").exists() and not (report / "animation.mcap").exists()
