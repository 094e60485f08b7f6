"""``retarget view DIR``: rebuilds missing views from animation.npz, keeps fresh ones, clear errors."""
from __future__ import annotations

import json
import shutil

from retarget.cli import main


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
