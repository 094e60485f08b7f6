"""Tests of the reduced-model CLI (retarget.sim.reduced.commands): ``check reduced`` options and JSON contract.

Real parts throughout, kept cheap: the 12 cm test rod (tests/model/fixtures/mini_rod.yaml, 8 layers → 4 with
``--mesh-scale 0.5``, 513 DOFs) turned 10° in 40 ms, 0.1 s at dt 2 ms (50 steps per engine).
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from retarget.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "model" / "fixtures"
ROBOT = FIXTURES / "mini_rod.yaml"
MOTION = FIXTURES / "mini_rod_motion.csv"
COMMON = ["--dt", "0.002", "--modes", "2", "--mesh-scale", "0.5", "--replay-tolerance", "0"]

#: The keys the acceptance criteria of issue #4 read.
CONTRACT = ("tracked_rms_error_rel", "tracked_max_error_m", "modes", "full_steps_per_s", "reduced_steps_per_s",
            "speedup", "sim_seconds", "wall_s_reduced")


def _last_json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def check_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """One ``check reduced --mesh-scale 0.5 --save-model`` run: (its JSON, the saved model)."""
    model = tmp_path_factory.mktemp("check") / "mini.npz"
    # A module-scoped fixture cannot use capsys: capture stdout directly.
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["check", "reduced", str(ROBOT), "--train-motion", str(MOTION), "--test-motion",
                   str(MOTION), *COMMON, "--targets", "5", "--save-model", str(model), "--json"])
    assert rc == 0
    return json.loads(buf.getvalue().strip().splitlines()[-1]), model


def test_json_contract_and_modes_per_component(check_run: tuple[dict, Path]) -> None:
    out, _ = check_run
    missing = [k for k in CONTRACT if k not in out]
    assert not missing, f"JSON misses contract keys {missing}"
    assert out["components"] == ["rod"]
    assert out["modes"] == {"rod": 2} and out["modes_total"] == {"rod": 8}
    assert out["sim_seconds"] == pytest.approx(0.1) and out["dt"] == 0.002
    assert out["speedup"] == pytest.approx(out["wall_s_full"] / out["wall_s_reduced"])
    assert out["reduced_steps_per_s"] == pytest.approx(50 / out["wall_s_reduced"])
    for key in ("tracked_rms_error_rel", "tracked_max_error_m", "full_steps_per_s", "reduced_steps_per_s"):
        assert np.isfinite(out[key]) and out[key] >= 0
    # Per tracked body: RMS / max error and peak deviation, consistent with the overall figures.
    per_body = out["tracked"]
    assert per_body and all(set(v) == {"rms_error_m", "max_error_m", "peak_deviation_m"} for v in per_body.values())
    assert max(v["max_error_m"] for v in per_body.values()) == pytest.approx(out["tracked_max_error_m"], rel=1e-12)
    assert max(v["peak_deviation_m"] for v in per_body.values()) == pytest.approx(out["peak_deviation_m"], rel=1e-12)
    # The reduced run keeps its couplings closed (position rows, metres).
    assert out["reduced_max_position_violation_m"] < 1e-8
    # Tested on its own training motion: it deforms the rod about as much as the training run did.
    assert list(out["training_range_ratio"]) == ["rod"] and 0.5 < out["training_range_ratio"]["rod"] < 1.5


def test_mesh_scale_coarsens_the_full_model(check_run: tuple[dict, Path]) -> None:
    from retarget.model.loader import load_robot
    from retarget.sim.system import build_system

    out, _ = check_run
    assert out["mesh_scale"] == 0.5
    assert out["full_dofs"] == build_system(load_robot(ROBOT, mesh_scale=0.5)).n_deformable_dofs
    assert out["full_dofs"] < build_system(load_robot(ROBOT)).n_deformable_dofs


def test_saved_model_equals_retarget_reduce_and_is_reusable(
    check_run: tuple[dict, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, saved = check_run
    assert out["model_file"] == str(saved) and saved.is_file()
    ref = tmp_path / "reduce.npz"
    assert main(["reduce", str(ROBOT), "--train-motion", str(MOTION), *COMMON, "--out", str(ref)]) == 0
    a, b = np.load(saved), np.load(ref)
    assert sorted(a.files) == sorted(b.files)
    meta_a, meta_b = json.loads(str(a["meta"])), json.loads(str(b["meta"]))
    assert meta_a["hashes"] == meta_b["hashes"]
    # Same training settings recorded, except how the motion was named on each command line (identical here).
    assert meta_a["extra"] == meta_b["extra"] == {"train_motion": str(MOTION), "dt": 0.002, "duration": 0.1,
                                                  "mesh_scale": 0.5, "modes_cap": 2, "variance": None,
                                                  "replay_tolerance": None, "cubature_tolerance": 1e-3,
                                                  "modal_derivatives": 0, "cubature_points": False}
    for key in a.files:
        if key != "meta":
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    capsys.readouterr()
    # Reusable by simulate-reduced with the same mesh scale; stale (exit 2, named) on the default mesh.
    args = ["simulate-reduced", str(ROBOT), "--reduced", str(saved), "--motion", str(MOTION), "--dt", "0.002", "--json"]
    assert main(args + ["--mesh-scale", "0.5"]) == 0
    res = _last_json(capsys)
    assert res["steps"] == 50 and list(res["training_range_ratio"]) == ["rod"]
    assert main(args) == 2
    assert "mesh:rod" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [["--mesh-scale", "0"], ["--mesh-scale", "-1"], ["--duration", "0"], ["--dt", "0"],
                                 ["--modes", "-1"], ["--variance", "0"], ["--variance", "1.5"],
                                 ["--replay-tolerance", "-1"], ["--cubature-tolerance", "0"],
                                 ["--cubature-tolerance", "1"], ["--modal-derivatives", "-1"]])
def test_bad_arguments_exit_2(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["check", "reduced", str(ROBOT), "--train-motion", str(MOTION), "--test-motion", str(MOTION)]
    assert main(args + bad) == 2
    assert "must be" in capsys.readouterr().err


def test_position_violation_is_the_constraint_value() -> None:
    """``max_position_violation`` reads C from the compiled residual (V = 0, θ̇ = 0, a = 1): it must equal the
    reference stepper's constraint rows, evaluated independently, at a perturbed (violating) state."""
    from retarget.model.loader import load_robot
    from retarget.sim.bdf import StepInputs
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.basis import ReducedBasis, rigid_modes
    from retarget.sim.reduced.commands import max_position_violation
    from retarget.sim.reduced.cubature import train_cubature
    from retarget.sim.reduced.engine import CompiledRun
    from retarget.sim.reduced.stepper import residual_and_jacobian, solve_static
    from retarget.sim.reduced.system import build_reduced_system, reference_bodies
    from retarget.sim.system import build_system
    from retarget.sim.validation import position_rows

    system = build_system(load_robot(ROBOT, mesh_scale=0.5))
    body = system.deformable[0]
    local = body.rest_positions - system.rigid[reference_bodies(system)[0]].reference_com
    modes = rigid_modes(local, body.mass_matrix)
    cub = train_cubature(body.elastic, modes, np.zeros((2, 6)) + 1e-9, tolerance=1e-2)
    rs = build_reduced_system(system, [ReducedBasis(modes, 6, 1.0, np.array([1.0]))], [cub])
    motors, _ = motors_from_motion(MOTION, ("base_yaw",))
    st = solve_static(rs, motors.value(0.05))
    rng = np.random.default_rng(3)
    s = np.concatenate([st.u, st.v, st.lam])
    s[: rs.n_u] += 1e-4 * rng.normal(size=rs.n_u)  # violate every constraint a little
    run = CompiledRun(rs, np.array([0.05]), s[None, :], np.zeros(1, dtype=np.int64), 0, 1.0)
    inputs = StepInputs(np.zeros(rs.n_u), np.zeros(rs.n_v), 1.0, np.atleast_1d(motors.value(0.05)), np.zeros(1), 1.0)
    ref = residual_and_jacobian(rs, np.concatenate([s[: rs.n_u], np.zeros(rs.n_v), s[rs.n_u + rs.n_v :]]), inputs,
                                jacobian=False)
    c = ref.residual[rs.n_u + rs.n_v :][position_rows(rs)]
    assert np.max(np.abs(c)) > 1e-6  # the perturbation is visible
    assert max_position_violation(run, motors) == pytest.approx(float(np.max(np.abs(c))), rel=1e-10, abs=1e-15)


def test_check_with_a_saved_model_reproduces_the_training_run(
    check_run: tuple[dict, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--model`` skips training: the saved model gives the same reduced run, so the same errors."""
    out, saved = check_run
    args = ["check", "reduced", str(ROBOT), "--model", str(saved), "--test-motion", str(MOTION),
            "--dt", "0.002", "--mesh-scale", "0.5", "--targets", "5", "--json"]
    assert main(args) == 0
    again = _last_json(capsys)
    assert again["model"] == str(saved) and again["train_seconds"] is None and again["modes"] == out["modes"]
    assert again["tracked_max_error_m"] == pytest.approx(out["tracked_max_error_m"], rel=1e-9, abs=1e-15)
    assert main(args + ["--save-model", str(saved.with_name("x.npz"))]) == 2
    assert main(args + ["--modes", "3"]) == 2


def test_reduce_with_modes_tightens_only_the_cubature(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --modes the replay check keeps the mode count and tightens the cubature tenfold per trial (an unreachable
    tolerance walks 1e-3 ... 1e-6 and keeps the most accurate model)."""
    out = tmp_path / "by_modes.npz"
    assert main(["reduce", str(ROBOT), "--train-motion", str(MOTION), "--dt", "0.002", "--mesh-scale", "0.5",
                 "--modes", "2", "--replay-tolerance", "1e-12", "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    trials = json.loads(captured.out.strip().splitlines()[-1])["replay_checks"]
    assert [t["modes"] for t in trials] == [[2]] * len(trials) and {t["variance"] for t in trials} == {None}
    assert "replay check: at most 2 modes, PCA modes [2]" in captured.err
    assert [t["cubature_tolerance"] for t in trials] == pytest.approx([1e-3, 1e-4, 1e-5, 1e-6])
    kept = [t for t in trials if t["kept"]]
    assert kept == [min(trials, key=lambda t: t["error_rel"])]
    extra = json.loads(str(np.load(out)["meta"]))["extra"]
    assert extra["modes_cap"] == 2 and extra["variance"] is None and extra["replay_tolerance"] == 1e-12
    assert extra["cubature_tolerance"] == pytest.approx(kept[0]["cubature_tolerance"])


def test_reduce_by_variance_runs_the_replay_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --modes the modes come from --variance, checked by replaying the training motion (recorded)."""
    out = tmp_path / "by_variance.npz"
    assert main(["reduce", str(ROBOT), "--train-motion", str(MOTION), "--dt", "0.002", "--mesh-scale", "0.5",
                 "--replay-tolerance", "0.01", "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out.strip().splitlines()[-1])
    trials = res["replay_checks"]
    assert trials and set(trials[0]) == {"variance", "modes", "error_rel", "error_m", "message", "kept",
                                         "cubature_tolerance", "errors_rel"}
    assert "replay check: variance" in captured.err
    extra = json.loads(str(np.load(out)["meta"]))["extra"]
    assert extra["replay_tolerance"] == 0.01 and extra["modes_cap"] is None
    # Exactly one trial is kept: the first within tolerance (the last trial), else the most accurate; its variance
    # is the one recorded.
    kept = [t for t in trials if t["kept"]]
    expected = trials[-1] if trials[-1]["error_rel"] <= 0.01 else min(trials, key=lambda t: t["error_rel"])
    assert kept == [expected] and extra["variance"] == expected["variance"]
    assert extra["cubature_tolerance"] == expected["cubature_tolerance"]


def test_reduce_trains_on_several_motions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--train-motion repeated: every motion is simulated, each replay is checked, both are recorded."""
    larger = tmp_path / "larger.csv"
    larger.write_text("time [s],base_yaw [deg]\n0.0,0.0\n0.02,0.0\n0.06,-15.0\n0.08,-15.0\n")
    out = tmp_path / "two.npz"
    assert main(["reduce", str(ROBOT), "--train-motion", str(MOTION), "--train-motion", str(larger), "--dt", "0.002",
                 "--mesh-scale", "0.5", "--replay-tolerance", "0.01", "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out.strip().splitlines()[-1])
    assert all(len(t["errors_rel"]) == 2 and t["error_rel"] == max(t["errors_rel"]) for t in res["replay_checks"])
    assert "full (train 2/2" in captured.err and "per motion" in captured.err
    extra = json.loads(str(np.load(out)["meta"]))["extra"]
    assert extra["train_motion"] == [str(MOTION), str(larger)] and extra["duration"] == pytest.approx([0.1, 0.08])
    # The model covers the larger motion: simulate-reduced finds it within the training range (its reduced run
    # can exceed the full training run's largest snapshot by a little).
    assert main(["simulate-reduced", str(ROBOT), "--reduced", str(out), "--motion", str(larger), "--dt", "0.002",
                 "--mesh-scale", "0.5", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["training_range_ratio"]["rod"] < 1.05
    assert "warning" not in captured.err


def test_reduce_with_cubature_points_records_and_reloads_them(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """--cubature-points: the artifact keeps each unit's quadrature point and reloads the same cubature, which
    simulate-reduced runs; a trained model cannot be switched to points afterwards."""
    from retarget.sim.reduced.artifact import load_reduced
    from retarget.sim.reduced.store import load_robot_system

    out = tmp_path / "points.npz"
    assert main(["reduce", str(ROBOT), "--train-motion", str(MOTION), *COMMON, "--cubature-points",
                 "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    data = np.load(out)
    assert json.loads(str(data["meta"]))["extra"]["cubature_points"] is True
    assert data["b0_points"].shape == data["b0_elements"].shape and np.all(data["b0_points"] >= 0)
    path, _, system = load_robot_system(str(ROBOT), 0.5)
    cub = load_reduced(out, system, path).bodies[0].cubature
    np.testing.assert_array_equal(cub.points, data["b0_points"])
    geo = system.deformable[0].elastic.geometry
    np.testing.assert_array_equal(cub.grad[:, 0], geo.grad[cub.elements, cub.points])
    assert main(["simulate-reduced", str(ROBOT), "--reduced", str(out), "--motion", str(MOTION), "--dt", "0.002",
                 "--mesh-scale", "0.5", "--json"]) == 0
    capsys.readouterr()
    args = ["check", "reduced", str(ROBOT), "--model", str(out), "--test-motion", str(MOTION),
            "--mesh-scale", "0.5", "--dt", "0.002", "--cubature-points"]
    assert main(args) == 2
    assert "--cubature-points" in capsys.readouterr().err


def test_reduce_with_modal_derivatives_records_and_reloads_them(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--modal-derivatives K appends up to K(K+1)/2 modes per part; the artifact keeps the count; a trained model
    cannot be given derivatives afterwards."""
    from retarget.sim.reduced.artifact import load_reduced
    from retarget.sim.reduced.store import load_robot_system

    out = tmp_path / "md.npz"
    assert main(["reduce", str(ROBOT), "--train-motion", str(MOTION), *COMMON, "--modal-derivatives", "2",
                 "--out", str(out), "--json"]) == 0
    res = _last_json(capsys)
    assert res["modes"] == [2 + 3] and res["modal_derivatives"] == [3]
    assert json.loads(str(np.load(out)["meta"]))["extra"]["modal_derivatives"] == 2
    path, _, system = load_robot_system(str(ROBOT), 0.5)
    basis = load_reduced(out, system, path).bodies[0].basis
    assert basis.n_derivatives == 3 and basis.n_pca == 2 and basis.size == 6 + 5
    # A trained model cannot be given derivatives afterwards.
    args = ["check", "reduced", str(ROBOT), "--model", str(out), "--test-motion", str(MOTION),
            "--mesh-scale", "0.5", "--dt", "0.002", "--modal-derivatives", "1"]
    assert main(args) == 2
    assert "--modal-derivatives" in capsys.readouterr().err
