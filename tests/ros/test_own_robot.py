"""A robot of the user's own, brought up from its files: a rigid two-link arm on XM430-W350s (tests/model/fixtures;
no flexible parts; a URDF, its ``retarget:`` section and a ROS params file in a folder of the user's). ``retarget up
ARM.yaml`` runs the emulated bus as that servo model, the driver, the trajectory server and the planner, which finds
the robot by its file; ``retarget goal ARM.yaml --execute`` (the goal naming the robot by its file) plans and plays."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ros_helpers import retarget_up

pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")
pytest.importorskip("retarget_interfaces", reason="retarget_interfaces is not built (make setup)")

NAMESPACE = "/test_own_robot"
ARM = Path(__file__).resolve().parents[1] / "model" / "fixtures" / "rigid_arm.urdf"


def _files(folder: Path) -> Path:
    (folder / "arm.urdf").write_text(ARM.read_text())
    (folder / "arm.yaml").write_text("retarget:\n  urdf: arm.urdf\n  motors: [shoulder, elbow]\n"
                                     "  servo: {model: XM430-W350}\n  tracked_bodies: [{link: fore}]\n")
    (folder / "arm.params.yaml").write_text("/**:\n  ros__parameters:\n    robot_name: my_arm\n"
                                            "    joint_names: [shoulder, elbow]\n    dynamixel_ids: [11, 12]\n"
                                            "    servo_model: XM430-W350\n")
    t = np.arange(0.0, 0.81, 0.01)
    s = np.clip((t - 0.1) / 0.15, 0.0, 1.0)
    swing = np.degrees(0.6 * (3 * s**2 - 2 * s**3))
    rows = "\n".join(f"{a:.2f},{b:.4f},{-0.5 * b:.4f}" for a, b in zip(t, swing))
    (folder / "swing.csv").write_text(f"time [s],shoulder [deg],elbow [deg]\n{rows}\n")
    return folder / "arm.yaml"


@pytest.mark.integration
def test_retarget_up_and_goal_on_a_robot_given_by_its_files(tmp_path: Path) -> None:
    robot = _files(tmp_path)
    env = {**os.environ, "RETARGET_CACHE": str(tmp_path / "cache"), "RETARGET_MODELS": str(tmp_path / "models"),
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    with retarget_up([str(robot), "--namespace", NAMESPACE, "--mocap", "none", "--json"], env) as lines:
        emulator = next(json.loads(line.split("] ", 1)[1]) for line in lines
                        if line.startswith("[dynamixel_emulator] {"))
        assert emulator["model"] == "XM430-W350" and emulator["ids"] == [11, 12]
        out = subprocess.run([sys.executable, "-m", "retarget.cli", "goal", str(robot), "--motion",
                              str(tmp_path / "swing.csv"), "--execute", "--max-iterations", "5", "--namespace",
                              NAMESPACE, "--json", "--wait", "30"], capture_output=True, text=True, timeout=600,
                             env=env)
        log = "".join(lines[-60:])
        assert out.returncode == 0, out.stderr[-4000:] + log
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["ok"] and summary["status"] == "SUCCESSFUL" and summary["execute"], summary
        assert summary["metrics"]["model"]["source"] == "trained"  # nothing cached: trained for this robot here
        assert summary["optimized_peak_deviation_m"] < 0.5 * summary["naive_peak_deviation_m"]
        assert summary["points"] > 50 and "executing" in summary["stages"]
