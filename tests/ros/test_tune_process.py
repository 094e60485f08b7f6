"""``retarget tune`` end to end through ROS on a twin that differs from the planner's model.

``retarget up single_rod --twin reduced --perturb ...`` runs the emulated bus whose servo's loop runs in the
reduced simulation of a perturbed copy of the planner's model (stiffness × 1.07, Rayleigh damping × 1.5, servo P
gain × 1.3, 10 ms latency on the goals) and a simulated Motive streaming the simulated bodies over NatNet to the
mocap node (0.3 mm of seeded marker noise); the planner node plans on the model itself. ``retarget tune --trials 3`` (a separate process) plans on the node, then per trial
plays the plan with ``retarget play --record`` (a rosbag2 of the tip's PoseStamped) and refines it on the node's
``~/refine`` action: the measured peak must fall from each trial to the next. Real processes, real DDS.

The model is the twin tests' cheap single_rod artifact (rigid + clamped-base modes on the coarse mesh, built in
seconds, tests/twin/conftest.py); the motion a 20° step in 0.3 s held 1 s (1.6 s in all). The twin steps at 2 ms
(a quarter of a core at 1 ms is more than a loaded 2-core machine gives it; the tip moves within 0.1 mm of the
1 ms run) and may lag 30 s before it restarts; the node plans 3 iterations and verifies in no other model.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ros_helpers import wait_for

from retarget.processes import die_with_parent

pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")
pytest.importorskip("retarget_interfaces.action", reason="retarget_interfaces is not built (make setup)")

pytestmark = pytest.mark.integration

NAMESPACE = "/test_tune"
PERTURB = "stiffness=1.07,damping=1.5,servo_kp=1.3,latency=0.01,marker_noise=0.0003"
MOTION = """robot: single_rod
description: A short servo step for the tune test (20 degrees in 0.3 s, held 1 s).
unit: deg
interpolation: pchip
rate: 200
joints: [base_pitch]
keyframes:
  - [0.000, 0]
  - [0.300, 0]
  - [0.600, 20]
  - [1.600, 20]
"""


def _twin_artifact(out: Path) -> Path:
    """The twin tests' single_rod artifact (tests/twin/conftest.py, not on this folder's import path)."""
    spec = importlib.util.spec_from_file_location("twin_test_model", Path(__file__).parents[1] / "twin" /
                                                  "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cantilever_reduced_artifact(out)


def test_without_a_running_robot_tune_exits_2_naming_the_actions_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "tune"
    env = {**os.environ, "ROS_DOMAIN_ID": str(100 + os.getpid() % 100), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    done = subprocess.run([sys.executable, "-m", "retarget.cli", "tune", "single_rod", "--motion",
                           "single_rod/step_30_servo", "--namespace", "/nobody", "--wait", "2", "--out", str(out),
                           "--json"], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    for action in ("/nobody/trajectory_server/follow_joint_trajectory", "/nobody/planner/retarget",
                   "/nobody/planner/refine"):
        assert action in summary["error"] and action in done.stderr
    assert not summary["ok"] and summary["trials"] == [] and not out.exists()
    bad = subprocess.run([sys.executable, "-m", "retarget.cli", "tune", "single_rod", "--motion",
                          "single_rod/step_30_servo", "--trials", "0"], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert bad.returncode == 2 and "--trials must be 1 or more" in bad.stderr


@pytest.mark.slow
def test_tune_lowers_the_measured_peak_on_a_perturbed_twin(tmp_path: Path) -> None:
    """Beside two CPU hogs (load 4-5) the trials measure 28.9-29.5, 12.6-14.6 and 5.0-7.8 mm; on an idle machine
    32.1, 16.2 and 4.8 mm; replays of one plan agree within 1.2-1.6 mm (docs/refine.md "Replays of one plan"). Under
    the test suite's own load a trial can measure above the one before it (docs/refine.md's table: 26.1, 16.9, 25.0
    mm; a CI run: 30.3, 32.6, 24.2 mm), and the loop's trust region answers a rise: what holds is that a later trial
    measures well below the first."""
    model = _twin_artifact(tmp_path / "single_rod_test.npz")
    motion = tmp_path / "step20.yaml"
    motion.write_text(MOTION, encoding="utf-8")
    env = {**os.environ, "RETARGET_CACHE": str(tmp_path / "cache"), "RETARGET_MODELS": str(tmp_path / "models")}
    up = subprocess.Popen([sys.executable, "-m", "retarget.cli", "up", "single_rod", "--namespace", NAMESPACE,
                           "--twin", "reduced", "--reduced", str(model), "--perturb", PERTURB, "--twin-dt", "0.002",
                           "--twin-max-lag", "30", "--verify-model", "none", "--mocap", "natnet", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          start_new_session=True,
                          preexec_fn=die_with_parent(signal.SIGINT))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(up.stdout), daemon=True).start()
    out = tmp_path / "tune"
    try:
        wait_for(lambda: any('"state": "ready"' in line for line in lines) or up.poll() is not None, 90.0,
                 "retarget up single_rod to be ready")
        assert up.poll() is None, "".join(lines[-40:])
        assert any("perturbed (stiffness=1.07" in line for line in lines), "".join(lines[-40:])
        assert any("a simulated Motive streams" in line for line in lines), "".join(lines[-40:])
        tune = subprocess.run([sys.executable, "-m", "retarget.cli", "tune", "single_rod", "--motion", str(motion),
                               "--trials", "3", "--all-trials", "--max-iterations", "3", "--no-refit", "--namespace", NAMESPACE,
                               "--out", str(out), "--json"],
                              capture_output=True, text=True, env=env, timeout=600, check=False)
        log = f"tune:\n{tune.stdout}\n{tune.stderr}\nup:\n{''.join(lines[-60:])}"
        assert tune.returncode == 0, log
        print(tune.stdout.strip().splitlines()[:3])  # the trials' lines (pytest -s): the measurement
        summary = json.loads(tune.stdout.strip().splitlines()[-1])
        peaks = [t["measured_peak_deviation_m"] for t in summary["trials"]]
        assert len(peaks) == 3 and min(peaks[1:]) < 0.9 * peaks[0], (peaks, log)
        # One line per trial, the history and each trial's plan, take (a rosbag2) and report.
        assert [line.split(":")[0] for line in tune.stdout.splitlines()[:3]] == ["trial 1", "trial 2", "trial 3"]
        assert json.loads((out / "history.json").read_text())["trials"] == summary["trials"]
        for k in (1, 2, 3):
            assert (out / f"plan{k}.csv").is_file() and (out / f"trial{k}.json").is_file()
            assert (out / f"take{k}" / "metadata.yaml").is_file()
        assert (out / "plan4.csv").is_file() and (out / "plan4.history.json").is_file()
        assert summary["trials"][0]["decision"] == "first trial"
    finally:
        os.killpg(up.pid, signal.SIGINT)
        try:
            up.wait(30.0)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(5.0)
