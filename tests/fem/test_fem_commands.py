"""Tests of retarget.fem.commands: ``retarget check fem`` through the real CLI."""

from __future__ import annotations

import json

import pytest

from retarget.cli import main


def test_check_fem_prints_a_passing_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "fem", "--length", "0.1", "--diameter", "0.005", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    report = json.loads(out[-1])
    assert code == 0 and report["ok"] is True
    assert abs(report["first_frequency_rel_error"]) < 0.01
    assert abs(report["tip_deflection_rel_error"]) < 0.02


def test_check_fem_rejects_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "fem", "--material", "unobtainium"]) == 2
    assert "unknown material" in capsys.readouterr().err
