"""``retarget play`` against a real bring-up: the fitting rig (one emulated XM540-W270) started by ``retarget up``,
every play a separate process talking DDS to it.

Checks: a library motion plays to SUCCESSFUL with tracking figures; ``--record`` takes the rest, the motion and a
tail into one bag; a motion starting away from the current pose is preceded by a move to it; Ctrl-C cancels the goal; bad input exits 2 and a missing robot 1, each with a message
that says what to do.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ros_helpers import retarget_up, wait_for


pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")
pytest.importorskip("control_msgs", reason="control_msgs is not built (make setup)")

pytestmark = pytest.mark.integration

NAMESPACE = "/test_play"


def _play(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retarget.cli", "play", *args, "--namespace", NAMESPACE,
                           "--no-progress"], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def _summary(out: subprocess.CompletedProcess) -> dict[str, Any]:
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rig() -> Iterator[list[str]]:
    """``retarget up fit_rig`` (no planner, no mocap) for the whole module; yields its output lines."""
    with retarget_up(["fit_rig", "--namespace", NAMESPACE, "--no-planner", "--mocap", "none", "--json"],
                     ready_s=60.0, stop_s=20.0) as lines:
        yield lines


def test_a_library_motion_plays_and_reports_its_tracking(rig: list[str]) -> None:
    out = _play("fit_rig", "--motion", "fit_rig/step_30", "--json")
    assert out.returncode == 0, out.stderr + "".join(rig[-20:])
    assert "deprecated" not in out.stderr
    summary = _summary(out)
    assert summary["ok"] and summary["robot"] == "fit_rig" and summary["goal"]["error_code"] == 0
    assert summary["action"] == f"{NAMESPACE}/trajectory_server/follow_joint_trajectory"
    assert summary["duration_s"] == pytest.approx(4.4)
    tracking = summary["tracking"]
    # 100 Hz joint_states over the 4.4 s; the 30 deg step followed up to the servo's lag (tens of ms). The emulated
    # bus plays in real time: on a loaded machine late ticks add jitter (1.4 deg RMS measured at load 6-8, under
    # 1 deg idle), so the bound is a tenth of the step; the end pose is reached either way.
    assert tracking["samples"] > 300
    assert tracking["rms_lag_compensated_deg"] < 3.0 and tracking["joints"]["base_pitch"]["final_deg"] < 1.0
    assert "tracking: goal SUCCESSFUL" in out.stdout


def test_record_takes_the_rest_the_motion_and_the_tail_into_one_bag(rig: list[str], tmp_path: Path) -> None:
    """The fitting workflow in one command: the rig's joint_states stand in for its mocap topic here."""
    from retarget.mocap.bags import MOTION_START_KEY, bag_info, iter_messages

    bag = tmp_path / "take30"
    topic = f"{NAMESPACE}/joint_states"
    out = _play("fit_rig", "--motion", "fit_rig/step_30", "--record", str(bag), "--record-topics", topic, "--record-lead", "0.5",
                "--record-tail", "0.5", "--json")
    assert out.returncode == 0, out.stderr
    summary = _summary(out)
    assert summary["ok"] and summary["record"]["path"] == str(bag) and summary["record"]["missing"] == []
    samples = [(stamp, msg.position[0]) for _, _, stamp, msg in iter_messages(bag, [topic])]
    times = [(t - samples[0][0]) * 1e-9 for t, _ in samples]
    angles = [q for _, q in samples]
    # 0.5 s lead + 0.5 s goal lead + 4.4 s motion + 0.5 s tail, at 100 Hz (a loaded host drops some).
    assert times[-1] > 5.4 and len(samples) > 400
    rest = [q for t, q in zip(times, angles) if t < 0.5]
    assert rest and max(abs(q) for q in rest) < 0.01  # at rest before the motion: what the fit's alignment needs
    assert max(angles) > 0.5  # the 30 deg step (0.524 rad) is in the take
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no partial bag left beside it
    # The motion's start, on the clock of the bag's stamps, in the bag's metadata (where `retarget refine` aligns a
    # take) and the summary; the step leaves its first pose within the next 0.1 s of the joint_states.
    start_ns = int(bag_info(bag).custom_data[MOTION_START_KEY])
    assert start_ns == round(summary["motion_start_s"] * 1e9)
    assert samples[0][0] < start_ns < samples[-1][0]
    moved = next(t for t, q in samples if abs(q - samples[0][1]) > 0.005)
    assert 0 < (moved - start_ns) * 1e-9 < 1.5
    assert summary["tracking"]["median_interval_s"] == pytest.approx(0.01, abs=0.003)


def test_a_recording_whose_topic_stays_silent_plays_nothing_and_leaves_no_bag(rig: list[str], tmp_path: Path) -> None:
    """Every topic must be in the take before the rest it needs is counted: a body that is not tracked (here a topic
    nobody publishes beside the live joint_states) fails the play before it moves, naming the topics."""
    bag = tmp_path / "take"
    out = _play("fit_rig", "--motion", "fit_rig/step_30", "--record", str(bag), "--record-topics",
                f"{NAMESPACE}/joint_states", "/mocap/untracked/pose", "--wait", "4", "--json")
    assert out.returncode == 1, out.stderr
    # (Discovery slower than --wait on a loaded host ends it earlier, with the topics named as well.)
    assert ("not every one of" in out.stderr or "none of" in out.stderr) and "/mocap/untracked/pose" in out.stderr, \
        out.stderr
    assert not _summary(out)["ok"] and "goal" not in _summary(out)
    assert list(tmp_path.iterdir()) == []


def test_a_motion_away_from_the_current_pose_moves_there_first(rig: list[str], tmp_path: Path) -> None:
    motion = tmp_path / "tilted.csv"
    # It ends on a 0.3 s hold: the error at its last sample is where the servo settled, not its lag behind a moving
    # reference (the reference moves at 0.2 rad/s before the hold; a 66 ms lag under load is 0.76 deg of the 1 deg).
    motion.write_text("time [s],base_pitch [rad]\n0.0,0.4\n0.5,0.5\n1.0,0.4\n1.3,0.4\n")
    out = _play("fit_rig", "--motion", str(motion), "--move-to-start", "1.0", "--json")
    assert out.returncode == 0, out.stderr
    summary = _summary(out)
    assert summary["moved_to_start"] and summary["ok"]
    assert "moving to the first pose (22.9 deg away) in 1 s" in out.stderr
    assert abs(summary["tracking"]["joints"]["base_pitch"]["final_deg"]) < 1.0
    # Back at rest for the other tests: already at 0.4 rad, this one moves only to the start it is at.
    back = tmp_path / "back.csv"
    back.write_text("time [s],base_pitch [rad]\n0.0,0.4\n0.5,0.0\n")
    again = _play("fit_rig", "--motion", str(back), "--json")
    assert again.returncode == 0 and not _summary(again)["moved_to_start"], again.stderr


def test_ctrl_c_cancels_the_goal_and_the_servo_stops(rig: list[str]) -> None:
    """fit_rig/ident_mode2 lasts 22 s; SIGINT after 3 s ends the play (exit 130) having cancelled the goal (the
    trajectory server then holds the measured position), and the rig takes the next goal at once."""
    proc = subprocess.Popen([sys.executable, "-m", "retarget.cli", "play", "fit_rig", "--motion", "fit_rig/ident_mode2", "--namespace",
                             NAMESPACE, "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ.copy())
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("playing fit_rig/ident_mode2" in line for line in errors) or proc.poll() is not None,
                 30.0, "the play to start")
        time.sleep(3.0)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15.0) == 130, "".join(errors)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5.0)
    reader.join(5.0)
    # A new goal is accepted at once (the old one is gone) and the rig plays it from where it stopped.
    # The old spelling (the motion first) still plays, with a deprecation note.
    out = _play("fit_rig/step_30", "--json")
    assert out.returncode == 0, out.stderr
    assert _summary(out)["ok"]
    assert "retarget: deprecated: `retarget play fit_rig/step_30` is deprecated" in out.stderr


def test_bad_input_exits_2_and_a_missing_robot_1(rig: list[str], tmp_path: Path) -> None:
    wrong = _play("fit_rig", "--motion", "drummer/drumming")
    assert wrong.returncode == 2 and "missing joints ['base_pitch']" in wrong.stderr, wrong.stderr
    nameless = tmp_path / "m.csv"
    nameless.write_text("time [s],base_pitch [rad]\n0.0,0.0\n1.0,0.1\n")
    unnamed = _play("--motion", str(nameless))
    assert unnamed.returncode == 2 and "give it first, `retarget play ROBOT --motion" in unnamed.stderr, \
        unnamed.stderr
    clash = _play("fit_rig", "--motion", "fit_rig/step_30", "--record", str(tmp_path), "--record-topics", "/x")
    assert clash.returncode == 2 and "exists: give a new bag folder" in clash.stderr, clash.stderr
    half = _play("fit_rig", "--motion", "fit_rig/step_30", "--record", str(tmp_path / "bag"))
    assert half.returncode == 2 and "go together" in half.stderr, half.stderr
    absent = subprocess.run([sys.executable, "-m", "retarget.cli", "play", "fit_rig", "--motion", "fit_rig/step_30",
                             "--namespace", "/nobody_here", "--wait", "2", "--json"], capture_output=True, text=True,
                            timeout=60, env=os.environ.copy())
    assert absent.returncode == 1, absent.stderr
    assert "no trajectory server at /nobody_here/trajectory_server/follow_joint_trajectory within 2 s" in absent.stderr
    assert _summary(absent)["ok"] is False


def test_a_client_records_joint_states_only_from_record_on(rig: list[str]) -> None:
    """``RobotClient(record=False)`` (the demo's client while the planner plans) receives no ``joint_states`` until
    ``record()``, which then waits for the first one."""
    from retarget.model.library import ros_parameters
    from retarget.ros.player import RobotClient

    joints = [str(j) for j in ros_parameters("fit_rig")["joint_names"]]
    client = RobotClient(joints, f"{NAMESPACE}/joint_states", f"{NAMESPACE}/trajectory_server/follow_joint_trajectory",
                         node_name="test_play_recording", record=False)
    try:
        time.sleep(1.0)  # joint_states flow at 100 Hz meanwhile
        assert client.recorder.latest() is None
        assert client.record(wait=10.0)
        time.sleep(0.5)
        times, positions = client.recorder.arrays()
        assert len(times) >= 10 and positions.shape[1] == len(joints)
        assert client.record() is True  # subscribed once: a second call just reports
    finally:
        client.close()
