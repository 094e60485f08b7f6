"""The CLI entry points (short runs)."""
import json
from pathlib import Path

from retarget.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "model" / "fixtures"


def test_check_fourbar_json_contract(capsys):
    assert main(["check", "fourbar", "--duration", "0.1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["steps"] == 50 and out["max_constraint_violation"] < 1e-6


def test_simulate_writes_result(tmp_path, capsys):
    out_file = tmp_path / "r.npz"
    rc = main(["simulate", str(FIXTURES / "mini_rod.yaml"), "--motion", str(FIXTURES / "mini_rod_motion.csv"),
               "--duration", "0.01", "--dt", "0.001", "--out", str(out_file), "--json"])
    assert rc == 0 and out_file.is_file()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 10 and summary["dofs"] > 0


def test_bad_arguments_exit_2(capsys):
    assert main(["check", "cantilever", "--length", "-1", "--diameter", "0.004", "--tip-mass", "0"]) == 2


def test_simulate_mesh_scale_coarsens_the_mesh(capsys):
    args = ["simulate", str(FIXTURES / "mini_rod.yaml"), "--motion", str(FIXTURES / "mini_rod_motion.csv"),
            "--duration", "0.005", "--dt", "0.001", "--json"]
    assert main(args) == 0
    full = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(args + ["--mesh-scale", "0.5"]) == 0
    half = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert half["mesh_scale"] == 0.5 and 0.4 < half["dofs"] / full["dofs"] < 0.6
    assert main(args + ["--mesh-scale", "0"]) == 2
