"""``retarget goal`` against a real bring-up: ``retarget up drummer`` on the emulated bus, then ``retarget goal drummer
--motion drummer/drumming --duration 2 --execute`` plans with no model passed (the planner falls back on the model
shipped with retarget: the cache and the model folders are empty here), shows its progress and plays the plan.

The plan's budget is one iteration per window (the drummer's params: 3 windows over the 2 s, each about 10 s of
optimization on the drummer: more windows would show the same progress again); with the numba cache warm the test
takes under 2 minutes on 2 cores. Also: no planner node answering is exit 2 naming what is missing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from ros_helpers import retarget_up

pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")
pytest.importorskip("retarget_interfaces", reason="retarget_interfaces is not built (make setup)")

NAMESPACE = "/test_goal"


@pytest.fixture(scope="module")
def isolated_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An empty model cache and model folder: the planner finds no model of the drummer but the shipped one."""
    cache = tmp_path_factory.mktemp("cache")
    return {**os.environ, "RETARGET_CACHE": str(cache), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def drummer(isolated_env: dict[str, str]) -> Iterator[list[str]]:
    """``retarget up drummer`` (emulated bus, planner, no mocap) for the module; yields its output lines."""
    with retarget_up(["drummer", "--namespace", NAMESPACE, "--mocap", "none", "--json"], isolated_env) as lines:
        yield lines


@pytest.mark.integration
@pytest.mark.slow
def test_goal_plans_with_no_model_passed_shows_progress_and_plays(drummer: list[str],
                                                                   isolated_env: dict[str, str]) -> None:
    out = subprocess.run([sys.executable, "-m", "retarget.cli", "goal", "drummer", "--motion", "drummer/drumming",
                          "--duration", "2", "--execute", "--max-iterations", "1", "--namespace", NAMESPACE,
                          "--json"], capture_output=True, text=True, timeout=1500, env=isolated_env)
    log = "".join(drummer[-60:])
    assert out.returncode == 0, out.stderr[-4000:] + log
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["ok"] and summary["status"] == "SUCCESSFUL" and summary["execute"]
    assert summary["action"] == f"{NAMESPACE}/planner/retarget"
    assert summary["duration_s"] == pytest.approx(2.0)
    # The model: none passed, none cached; the one shipped with retarget.
    model = summary["metrics"]["model"]
    assert model["source"] == "fallback" and "/data/demo/drummer-" in model["file"], model
    # Progress: the estimate before the work, then each of the 3 windows (one iteration each).
    stages = summary["stages"]
    assert any(s.startswith("estimated") for s in stages), stages
    assert "optimizing window 3 of 3" in stages, stages
    assert "executing" in stages, stages
    assert summary["iterations"] >= 3 and summary["points"] > 100
    assert summary["optimized_peak_deviation_m"] < summary["naive_peak_deviation_m"]
    assert "planner: estimated" in out.stderr  # the stages as lines where no bar is drawn


@pytest.mark.integration
def test_no_planner_node_is_exit_2_naming_what_is_missing(isolated_env: dict[str, str]) -> None:
    out = subprocess.run([sys.executable, "-m", "retarget.cli", "goal", "drummer", "--motion", "drummer/drumming",
                          "--namespace", "/nobody_plans_here", "--wait", "2", "--json"], capture_output=True,
                         text=True, timeout=120, env=isolated_env)
    assert out.returncode == 2, out.stderr
    assert "no planner node answers at /nobody_plans_here/planner/retarget within 2 s" in out.stderr
    assert "retarget up drummer" in out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["ok"] is False and "no planner node" in summary["error"]


@pytest.mark.integration
def test_a_motion_of_another_robot_is_exit_2(isolated_env: dict[str, str], tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "retarget.cli", "goal", "drummer", "--motion", "fit_rig/step_30",
                          "--namespace", "/nobody_plans_here", "--wait", "1"], capture_output=True, text=True,
                         timeout=120, env=isolated_env)
    assert out.returncode == 2 and "retarget: error:" in out.stderr, out.stderr


def test_the_result_as_plain_data_with_its_metrics() -> None:
    from retarget.ros.goal import goal_summary

    result = SimpleNamespace(error_code=-2, error_string="no model", iterations=0, objective_initial=0.0,
                             objective_final=0.0, naive_peak_deviation=0.0, optimized_peak_deviation=0.0,
                             naive_rms_deviation=0.0, optimized_rms_deviation=0.0, wall_time=1.5,
                             optimized=SimpleNamespace(points=[]), metrics_json="")
    summary = goal_summary(result)
    assert summary["status"] == "NOT_AVAILABLE" and summary["points"] == 0 and summary["metrics"] == {}
    result.error_code, result.metrics_json, result.optimized.points = 0, '{"iterations": 5}', [1, 2]
    summary = goal_summary(result)
    assert summary["status"] == "SUCCESSFUL" and summary["metrics"] == {"iterations": 5} and summary["points"] == 2
    json.dumps(summary)  # plain data


def test_progress_prints_each_new_stage_where_no_bar_is_drawn(capsys: pytest.CaptureFixture[str]) -> None:
    from retarget.ros.goal import PlannerProgress, preparing

    def fb(stage: str, elapsed: float, iteration: int = 0) -> SimpleNamespace:
        return SimpleNamespace(stage=stage, elapsed_time=elapsed, iteration=iteration, objective=1e-3)

    with PlannerProgress(1, 5, disable=True, lines=True) as shown:
        for stage, elapsed, it in (("validating", 0.0, 0), ("loading", 0.1, 0),
                                   ("training reduced model: full simulation 10 % (step 1 of 10)", 5.0, 0),
                                   ("training reduced model: full simulation 50 % (step 5 of 10)", 9.0, 0),
                                   ("estimated targets ~2 s; total ~1 min", 20.0, 0), ("targets", 21.0, 0),
                                   ("optimizing window 1 of 5", 30.0, 1), ("optimizing window 1 of 5", 31.0, 1)):
            shown(fb(stage, elapsed, it))
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "planner: validating (0 s)" and len(err) == 7  # the repeated stage once
    assert err[4] == "planner: estimated targets ~2 s; total ~1 min (20 s)"
    assert shown.began == 21.0 and shown.iteration == 1 and len(shown.stages) == 7
    assert preparing("estimated x") and preparing("training reduced model: ...") and not preparing("targets")
