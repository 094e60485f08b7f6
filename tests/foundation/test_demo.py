"""``make demo`` (``python -m retarget.ros.demo``): tracking figures against theory; the demo as a process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from retarget.errors import InputError, RetargetError
from retarget.motion.motion import Motion
from retarget.ros.demo import LAG_GRID_S, demo_model, demo_model_path, excerpt, tracking_figures

JOINTS = ("a", "b")


def test_pure_delay_of_a_ramp() -> None:
    """Measurement = ramp delayed by d: the error is ω·d everywhere, and the lag estimate is d."""
    omega, delay = np.array([2.0, -1.0]), 0.04  # [rad/s], [s]
    t_ref = np.linspace(0.0, 2.0, 401)
    q_ref = np.outer(t_ref, omega)
    t = np.arange(0.1, 1.9, 0.01)
    measured = np.outer(t - delay, omega)
    fig = tracking_figures(JOINTS, t_ref, q_ref, t, measured)
    np.testing.assert_allclose([j.rms_deg for j in fig.joints], np.degrees(np.abs(omega) * delay), rtol=1e-9)
    np.testing.assert_allclose([j.peak_deg for j in fig.joints], np.degrees(np.abs(omega) * delay), rtol=1e-9)
    assert fig.samples == t.size and fig.duration_s == pytest.approx(2.0)
    assert fig.lag_s == pytest.approx(delay, abs=1e-12)
    assert fig.rms_lag_compensated_deg == pytest.approx(0.0, abs=1e-9)
    assert fig.median_interval_s == pytest.approx(0.01) and fig.max_interval_s == pytest.approx(0.01)


def test_the_longest_interval_between_joint_states_is_reported() -> None:
    """A driver tick 45 ms late on a loaded host: the samples' median interval stays the tick period."""
    t_ref = np.linspace(0.0, 2.0, 401)
    q_ref = np.outer(t_ref, [1.0, 1.0])
    t = np.concatenate([np.arange(0.1, 1.0, 0.01), np.arange(1.045, 1.9, 0.01)])
    fig = tracking_figures(JOINTS, t_ref, q_ref, t, np.outer(t, [1.0, 1.0]))
    assert fig.median_interval_s == pytest.approx(0.01) and fig.max_interval_s == pytest.approx(0.055)
    assert fig.as_dict()["max_interval_s"] == pytest.approx(0.055)


def test_sine_delay_matches_theory() -> None:
    """A sin(ω t) delayed by d: error 2 A sin(ω d / 2) cos(...), RMS over whole periods √2 A sin(ω d / 2)."""
    amplitude, omega, delay = 0.3, 2 * np.pi * 2.0, 0.03
    t_ref = np.linspace(0.0, 3.0, 30001)
    q_ref = np.column_stack([amplitude * np.sin(omega * t_ref)] * 2)
    t = np.arange(0.5, 2.5, 0.001)  # four whole periods
    measured = np.column_stack([amplitude * np.sin(omega * (t - delay))] * 2)
    fig = tracking_figures(JOINTS, t_ref, q_ref, t, measured)
    expected = np.degrees(np.sqrt(2.0) * amplitude * np.sin(omega * delay / 2))
    assert fig.rms_deg == pytest.approx(expected, rel=1e-3)
    assert fig.peak_deg == pytest.approx(np.degrees(2 * amplitude * np.sin(omega * delay / 2)), rel=1e-3)
    assert fig.lag_s == pytest.approx(delay, abs=1e-9)


def test_samples_outside_the_reference_are_ignored_and_errors_reported() -> None:
    rng = np.random.default_rng(7)
    t_ref = np.array([1.0, 2.0])
    q_ref = rng.normal(size=(2, 2))
    t = np.array([0.0, 1.5, 3.0])
    measured = np.vstack([q_ref[0] + 5.0, q_ref.mean(axis=0), q_ref[1] + 5.0])
    fig = tracking_figures(JOINTS, t_ref, q_ref, t, measured)
    assert fig.samples == 1 and fig.peak_deg == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(InputError, match="no sample"):
        tracking_figures(JOINTS, t_ref, q_ref, np.array([5.0]), q_ref[:1])
    with pytest.raises(InputError, match="shapes"):
        tracking_figures(("a",), t_ref, q_ref, t, measured)


def test_lag_grid_covers_servo_latencies() -> None:
    assert LAG_GRID_S[0] == 0.0 and LAG_GRID_S[-1] == pytest.approx(0.2) and np.all(np.diff(LAG_GRID_S) > 0)


def test_excerpt_interpolates_its_end_and_keeps_short_motions() -> None:
    t = np.linspace(1.0, 3.0, 5)  # 0.5 s apart, starting at 1 s
    motion = Motion(t, ("a", "b"), np.column_stack([t, -2.0 * t]))
    part = excerpt(motion, 1.2)
    np.testing.assert_allclose(part.time, [1.0, 1.5, 2.0, 2.2])
    np.testing.assert_allclose(part.positions, np.column_stack([part.time, -2.0 * part.time]))
    assert part.joint_names == motion.joint_names
    on_a_sample = excerpt(motion, 1.0)
    np.testing.assert_allclose(on_a_sample.time, [1.0, 1.5, 2.0])
    for whole in (None, 0.0, -1.0, 2.0, 5.0):
        assert excerpt(motion, whole) is motion


def test_the_progress_bar_counts_iterations_over_the_windows_and_time_from_the_end_of_the_preparation() -> None:
    """The plan's budget is a count of iterations (per window): the demo's bar counts the feedback's iterations
    (a disabled bar keeps no count of its own) against iterations x windows (the window count corrected from the feedback), and the seconds from the first
    stage after the preparation (loading the model, compiling the kernels)."""
    from types import SimpleNamespace

    from retarget.planning.run import WARM_UP_STAGE
    from retarget.planning.stages import FEEDBACK_STAGES, TRAINING_STAGE
    from retarget.ros.demo import PREPARATION_STAGES, PlannerProgress

    assert WARM_UP_STAGE in PREPARATION_STAGES and TRAINING_STAGE not in PREPARATION_STAGES
    assert not PREPARATION_STAGES & set(FEEDBACK_STAGES.values())

    def fb(stage: str, elapsed: float, iteration: int = 0) -> SimpleNamespace:
        return SimpleNamespace(stage=stage, elapsed_time=elapsed, iteration=iteration, objective=1e-3)

    with PlannerProgress(2, 5, disable=True) as bar:
        assert bar.bar.total == 10
        for stage, elapsed in (("validating", 0.0), ("loading", 0.1), (WARM_UP_STAGE, 3.0), (WARM_UP_STAGE, 150.0)):
            bar(fb(stage, elapsed))
        assert bar.began is None and bar.spent == 0.0 and bar.iteration == 0
        bar(fb("targets", 160.0))
        bar(fb("optimizing window 1 of 6", 190.0, iteration=2))
        assert bar.began == 160.0 and bar.spent == pytest.approx(30.0)
        assert bar.bar.total == 12 and bar.iteration == 2
        bar(fb("optimizing window 2 of 6", 200.0, iteration=3))
        bar(fb("verifying", 260.0))  # no iteration: the count stays
        assert bar.iteration == 3


def test_window_count_matches_the_planners_windows() -> None:
    """The spans of optimize_windows: ``window`` long, one every ``window - overlap``, until one reaches the end."""
    from types import SimpleNamespace

    from retarget.ros.demo import DEMO_DURATION_S, _planned_windows, window_count

    assert window_count(3.0, 0.002, 1.0, 0.5) == 5  # 0-1, 0.5-1.5, 1-2, 1.5-2.5, 2-3 s
    assert window_count(10.0, 0.002, 1.0, 0.5) == 19
    assert window_count(3.0, 0.002, 1.0, 0.0) == 3 and window_count(3.1, 0.002, 1.0, 0.0) == 4
    assert window_count(3.0, 0.002, 0.0, 0.0) == 1 and window_count(0.5, 0.002, 1.0, 0.5) == 1
    params = yaml_parameters("config/drummer.params.yaml")
    plan = SimpleNamespace(nodes=(SimpleNamespace(name="driver", parameters={}),
                                  SimpleNamespace(name="planner", parameters=params)))
    assert _planned_windows(plan, DEMO_DURATION_S) == 5
    assert _planned_windows(SimpleNamespace(nodes=()), DEMO_DURATION_S) == 1
    no_windows = SimpleNamespace(nodes=(SimpleNamespace(name="planner", parameters={"dt": 0.0}),))
    assert _planned_windows(no_windows, DEMO_DURATION_S) == 1


def yaml_parameters(relative: str) -> dict:
    from pathlib import Path

    from retarget.model.library import read_ros_parameters

    return read_ros_parameters(Path(__file__).resolve().parents[2] / relative)


def test_the_cut_is_judged_in_the_verification_model_and_missing_verification_is_no_cut() -> None:
    from retarget.planning.checks import ModelKind, RunFigures, Verification
    from retarget.ros.demo import DEMO_CUT, cut_verdict

    def verification(ratio: float | None, kind: ModelKind, file: str | None = None) -> Verification:
        runs = {"naive": RunFigures(0.1, 0.05, 0.5, 0.01)}
        if ratio is not None:
            runs["optimized"] = RunFigures(0.1 * ratio, 0.02, 0.6, 0.001)
        return Verification(runs, kind, 0.002, file=file)

    reached = cut_verdict(verification(0.29, ModelKind.REDUCED, "/models/verify/drummer-drumming.npz"))
    assert reached["reached"] and reached["limit"] == DEMO_CUT == 0.35
    assert "reaches the demo's cut: peak 0.29 x naive <= 0.35 x (in reduced model drummer-drumming.npz)" in \
        reached["verdict"]
    missed = cut_verdict(verification(1.0, ModelKind.FULL_FEM))
    assert not missed["reached"] and "does NOT reach" in missed["verdict"] and "full FEM" in missed["verdict"]
    for verified in (verification(None, ModelKind.FULL_FEM), None):
        unverified = cut_verdict(verified)
        assert not unverified["reached"] and unverified["peak_ratio"] is None and "NOT verified" in unverified["verdict"]


def test_the_shipped_verification_model_matches_the_drummer() -> None:
    """The demo's cut is judged in the shipped verification model: it must be there and fresh (else rebuild it with
    the command in retarget/data/demo/README.md)."""
    from retarget.ros.demo import SHIPPED_VERIFY_DIR, demo_verification_model

    path, why = demo_verification_model("drummer")
    assert path is not None and path.parent == SHIPPED_VERIFY_DIR, why


def test_the_demo_budgets_its_plan_by_iterations() -> None:
    """The plan's budget is the goal's iteration count; the wall-clock limit is a safety net well above it."""
    from retarget.ros import demo

    assert demo.DEMO_WINDOW_ITERATIONS >= 1 and demo.DEMO_PLAN_TIMEOUT_S >= 900.0
    assert demo.main(["--max-iterations", "0"]) == 2  # an option out of range: exit 2, nothing started


@pytest.mark.integration
def test_demo_model_without_training_and_a_failed_training_leave_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path))
    path = demo_model_path("single_rod", "single_rod/step_30", 0.05, 1.0)
    assert path.parent == tmp_path / "demo" and path.name == "single_rod-single_rod_step_30-mesh0.05-1s.npz"
    by_path = demo_model_path("/robots/my robot.yaml", "/m/../take 2.csv", 0.25, 2.0)
    assert by_path.parent == tmp_path / "demo"
    assert by_path.name == "robots_my_robot.yaml-m_.._take_2.csv-mesh0.25-2s.npz"
    assert demo_model("single_rod", "single_rod/step_30", mesh_scale=0.05, duration=1.0, train=False) is None
    # The child process fails (unknown motion): a clear error with its output, no file and no partial file left.
    with pytest.raises(RetargetError, match=r"(?s)training the demo model .* failed .*no_such_motion"):
        demo_model("single_rod", "single_rod/no_such_motion", mesh_scale=0.05, duration=1.0, quiet=True)
    assert not any((tmp_path / "demo").iterdir())


def test_demo_model_given_must_match_the_robot(tmp_path) -> None:
    bogus = tmp_path / "model.npz"
    bogus.write_bytes(b"not a model")
    with pytest.raises(InputError, match="unreadable reduced model"):
        demo_model("single_rod", "single_rod/step_30", mesh_scale=0.05, duration=1.0, given=str(bogus))


def test_the_shipped_drummer_model_matches_the_robot(tmp_path, monkeypatch) -> None:
    """A first demo plans on the shipped drummer model (no training): it must match the robot's description. When
    this fails, rebuild it with the command in src/retarget/data/demo/README.md."""
    from retarget.ros.demo import (
        DEMO_TRAIN_DURATION_S,
        DEMO_TRAIN_MESH_SCALE,
        DEMO_TRAINING_MOTION,
        SHIPPED_MODEL_DIR,
    )

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path))  # no cached demo model
    model = demo_model("drummer", DEMO_TRAINING_MOTION["drummer"], mesh_scale=DEMO_TRAIN_MESH_SCALE,
                       duration=DEMO_TRAIN_DURATION_S, train=False)
    assert model is not None, "the shipped drummer demo model is stale: see src/retarget/data/demo/README.md"
    assert model.source == "shipped" and model.path == SHIPPED_MODEL_DIR / "drummer-boxer_boxing-mesh0.25-2s.npz"
    assert model.path.stat().st_size < 4_000_000


def test_a_stale_shipped_model_is_skipped(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    name = demo_model_path("single_rod", "single_rod/step_30", 0.05, 1.0).name
    (shipped / name).write_bytes(b"not a model")
    assert demo_model("single_rod", "single_rod/step_30", mesh_scale=0.05, duration=1.0, train=False,
                      shipped=shipped) is None
    assert f"the one in {shipped / name} no longer matches the robot" in capsys.readouterr().out


@pytest.mark.integration
def test_demo_runs_end_to_end() -> None:
    pytest.importorskip("rclpy", reason="rclpy is not installed (make setup)")
    env = os.environ.copy()
    # Its own domain: the demo's nodes use the root namespace.
    env["ROS_DOMAIN_ID"] = str(1 + (int(os.environ["ROS_DOMAIN_ID"]) + 50) % 100)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    started = time.monotonic()
    # The whole 10 s drumming; no model training and not the shipped model (tests/conftest.py isolates the cache: no
    # model is found, so the planner answers NOT_AVAILABLE and the input is executed). The planned path: the
    # single_rod test below.
    proc = subprocess.run([sys.executable, "-m", "retarget.ros.demo", "--json", "--no-progress", "--no-train",
                           "--no-shipped-model", "--duration", "0"], capture_output=True, text=True, env=env,
                          timeout=170)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["ok"] and report["goal"]["error_code"] == 0 and report["move_to_start"]["error_code"] == 0
    assert report["stopped"] == {"killed": [], "died": [], "unclean": [], "stacks": {}}
    planner = report["planner"]
    if planner["error_code"] == -2:  # NOT_AVAILABLE: the demo must say it plays the input
        assert report["executed"] == "input animation" and "executing the INPUT animation" in out
    else:
        assert planner["error_code"] == 0 and report["executed"] == "optimized trajectory"
    assert "tracking: goal SUCCESSFUL" in out
    tracking = report["tracking"]
    assert len(tracking["joints"]) == 13 and all(f"  {j} " in out for j in tracking["joints"])
    # joint_states at ~100 Hz over the 10 s motion; the servos lag the reference by tens of ms, not seconds.
    assert tracking["samples"] > 300
    assert 0.0 < tracking["lag_s"] <= 0.2
    assert tracking["rms_deg"] < 10.0
    print(f"demo wall time {wall:.1f} s, RMS {tracking['rms_deg']:.2f} deg, "
          f"lag {tracking['lag_s'] * 1e3:.0f} ms")


@pytest.mark.integration
@pytest.mark.slow
def test_demo_trains_its_model_plans_and_executes_the_optimized_trajectory(tmp_path) -> None:
    """The demo's main job on the single rod (a small robot, coarse mesh): train the model in a child process,
    plan over ROS within the budget, execute the optimized trajectory; a second demo reuses the model.

    No verification model (``--verify-model none``): re-simulating the plan in the full FEM takes half a minute here
    and is tested in tests/planning/test_run.py, the demo's verdict on a verification in
    ``test_the_cut_is_judged_in_the_verification_model_and_missing_verification_is_no_cut``."""
    pytest.importorskip("rclpy", reason="rclpy is not installed (make setup)")
    env = os.environ.copy()
    env["ROS_DOMAIN_ID"] = str(1 + (int(os.environ["ROS_DOMAIN_ID"]) + 70) % 100)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["RETARGET_CACHE"] = str(tmp_path)
    command = [sys.executable, "-m", "retarget.ros.demo", "single_rod", "--json", "--no-progress",
               "--motion", "single_rod/step_30", "--duration", "1.5", "--train-duration", "1.5",
               "--train-mesh-scale", "0.05", "--max-iterations", "5", "--verify-model", "none", "--plan-timeout", "200"]
    # A fresh install compiles the full and reduced engines (training) and the planner's kernels first: minutes.
    # The plan's 180 s budget: the default robust objective evaluates three models; with the 60 s of an 80 s
    # timeout the first evaluation (14.8 s, measured under load) and the verification's reserve left no iteration.
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    model = report["model"]
    assert model["source"] == "trained" and model["train_s"] > 0
    assert model["file"] == str(tmp_path / "demo" / "single_rod-single_rod_step_30-mesh0.05-1.5s.npz")
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == [os.path.basename(model["file"])]
    planner = report["planner"]
    assert planner["error_code"] == 0, planner
    assert planner["max_iterations_per_window"] == 5 and planner["windows"] == 1
    assert planner["iterations"] > 0  # 5, and as many again per torque round (PlanOptions.torque_rounds)
    assert {"targets", "optimization"} <= set(planner["stages_s"])  # where the plan's time went
    assert report["executed"] == "optimized trajectory" and "tracking: goal SUCCESSFUL" in proc.stdout
    assert planner["optimized_peak_deviation_m"] < planner["naive_peak_deviation_m"]
    assert "naive ->" in proc.stdout
    if "verify" in planner:  # skipped (with a warning) when the budget ran out first
        assert planner["verify"]["peak_ratio"] < 1.0 and "re-simulated at" in proc.stdout
    # The second demo finds the model and says so; it does not train again (one iteration in a short budget:
    # optimized or not, the demo goes on).
    again_command = [*command[:-1], "30"]
    again_command[again_command.index("--max-iterations") + 1] = "1"
    again = subprocess.run(again_command, capture_output=True, text=True, env=env, timeout=200)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "reduced model (cached)" in again.stdout and "training it once" not in again.stdout
