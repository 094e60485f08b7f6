"""The optimizer's CLI checks through the real ``retarget`` entry point."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retarget.cli import main
from retarget.motion import Motion, save_motion


def test_profile_fit_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = np.linspace(0.0, 2.0, 401)
    path = tmp_path / "m.csv"
    save_motion(path, Motion(t, ("j1", "j2"), np.stack([np.sin(np.pi * t / 2) ** 4, 0 * t], axis=1)))
    assert main(["check", "profile-fit", str(path), "--knot-spacing", "0.05", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["control_points_per_motor"] == 43 and report["parameters"] == 2 * 38
    assert report["max_error_rad"]["j1"] < 1e-4 and report["max_error_rad"]["j2"] < 1e-12


def test_profile_fit_rejects_a_bad_spacing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.csv"
    save_motion(path, Motion(np.linspace(0, 1, 11), ("j",), np.zeros((11, 1))))
    assert main(["check", "profile-fit", str(path), "--knot-spacing", "0"]) == 2
    assert "knot spacing" in capsys.readouterr().err


def test_shaper_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "shaper", "--frequency", "2.0", "--damping", "0.05", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["zvd"]["residual_vibration"]["+0%"] < 1e-12
    assert report["zv"]["lag_s"] < report["zvd"]["lag_s"] < report["zvd"]["duration_s"]
