"""`retarget plan` end to end on a tiny robot written to disk (``tiny_robot`` in conftest.py: a 20 cm rod on one
motor with a tip mass, coarse mesh, a short motion)."""
from __future__ import annotations

import json

import pytest


def _run(argv):
    from retarget.cli import main

    return main(argv)


@pytest.mark.slow
@pytest.mark.integration  # the robust objective's models run in forked workers
def test_plan_cli_prints_the_contract_keys_and_writes_files(tiny_robot, capsys):
    out_csv = tiny_robot / "optimized.csv"
    code = _run(["plan", str(tiny_robot / "tiny_rod.yaml"), "--motion", str(tiny_robot / "ramp.csv"), "--json",
                 "--max-iterations", "1", "--dt", "0.005", "--modes", "2", "--mesh-axial", "4", "--dt-train", "0.002",
                 "--knot-spacing", "0.04", "--out", str(out_csv), "--report", str(tiny_robot / "report"),
                 "--allow-unverified-model"])  # the tiny rod's 4-layer mesh misses the model card's gate
    captured = capsys.readouterr()
    # --json: stdout is the one JSON line; the summary, the estimate and the skipped stages go to stderr.
    assert len(captured.out.strip().splitlines()) == 1, captured.out
    report = json.loads(captured.out)
    assert "estimated before the work" in captured.err and "\n  total: about " in captured.err
    assert "training: about " in captured.err  # the model is trained here: its cost is said first
    assert "--max-iterations 1: skipping the settle refinement" in captured.err
    assert "naive         peak" in captured.err
    # Planned: exit 0, or 3 when the cut is not meaningful (this ramp on the coarse rod: 1.09 x naive, measured) or
    # the optimized motion needs more than the stall torque.
    assert code == (0 if report["cut_reached"] and report["within_stall"] else 3)
    for key in ("objective_initial", "objective_final", "iterations", "wall_s"):
        assert key in report
    for variant in ("naive", "optimized"):
        assert {"peak_deviation_m", "rms_deviation_m"} <= set(report[variant])
    # 0.1 s of ring-out is too short to identify a mode: no shaped baselines, and the report says why.
    assert "zvd" not in report and any("ZV/ZVD" in w for w in report["warnings"])
    # Verified at the default finer step, dt / 5.
    assert report["verify"]["dt_s"] == pytest.approx(0.001) and isinstance(report["verify"]["holds"], bool)
    assert out_csv.is_file() and out_csv.with_suffix(".yaml").is_file()
    for name in ("tracked_bodies.png", "deviation.png", "motors.png", "trajectories.npz"):
        assert (tiny_robot / "report" / name).is_file()
    # The trained model went to the cache and is reused.
    assert len(list((tiny_robot / "cache" / "reduced").glob("*.npz"))) == 1


