"""``retarget servos scan|setup|calibrate`` as a person runs them, against ``retarget emulate-bus`` in its own
process: new servos at 57 600 bit/s with IDs that are not the robot's end up as the params file says, and the
calibration (guided, on stdin) makes the emulated servos' zero the robot's zero."""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retarget.dynamixel.emulator import send_control
from retarget.model.library import read_ros_parameters, share_dir

pytestmark = pytest.mark.integration

TICK = 2 * math.pi / 4096
ZERO_POSE = [0.3, -0.2, 0.5, -0.1]  # the shafts' angles with the robot in its zero pose [rad]
TURNS = {"base_yaw": 0.4, "shoulder_pitch": -0.35, "elbow_pitch": 0.3, "wrist_pitch": -0.5}  # by hand [rad]


def retarget(*args: str, stdin: str | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retarget.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def last_json(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def emulated_bus(tmp_path: Path):
    link = tmp_path / "ttyDXL"
    proc = subprocess.Popen([sys.executable, "-m", "retarget.cli", "emulate-bus", "--ids", "21,22,23,24", "--baud",
                             "57600", "--link", str(link), "--positions", ",".join(map(str, ZERO_POSE)), "--json"],
                            stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["baud"] == 57600 and ready["ids"] == [21, 22, 23, 24]
        yield link
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_scan_setup_and_guided_calibration_on_an_emulated_bus(emulated_bus: Path, tmp_path: Path) -> None:
    port = str(emulated_bus)
    config = tmp_path / "config"
    config.mkdir()
    for name in ("bartender.yaml", "bartender.params.yaml"):
        shutil.copy(share_dir() / "config" / name, config / name)
    robot = str(config / "bartender.yaml")

    found = last_json(retarget("servos", "scan", "--port", port, "--baud", "57600,1000000", "--json"))
    assert [(s["id"], s["baud_rate"], s["model"], s["firmware"]) for s in found["servos"]] == \
        [(i, 57600, "XM430-W210", 38) for i in (21, 22, 23, 24)]
    assert all(s["gains"] == {"p": 800, "i": 0, "d": 0, "pwm_limit": 885} for s in found["servos"])

    # --latency-ms 50: each reply may take 102 ms instead of 34 ms, room for the emulator's process when the machine
    # is loaded (a loaded run of the suite missed one reply at 34 ms); a servo on a real bus answers in microseconds.
    setup = last_json(retarget("servos", "setup", robot, "--port", port, "--baud", "57600,1000000", "--assign",
                               "21=base_yaw,22=shoulder_pitch", "--assign", "23@57600=elbow_pitch", "--yes", "--json",
                               "--latency-ms", "50"))
    assert setup["applied"] and setup["remaining"] == []
    assert [(s["id"], s["baud_rate"]) for s in setup["bus"]["servos"]] == [(i, 1_000_000) for i in (1, 2, 3, 4)]

    # Guided: Enter for the zero pose, then each joint turned by hand (the emulator's control socket) and Enter.
    proc = subprocess.Popen([sys.executable, "-m", "retarget.cli", "servos", "calibrate", robot, "--port", port,
                             "--guided", "--latency-ms", "50"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            for k, (joint, turn) in enumerate(TURNS.items()):
                if line.startswith(f"Turn {joint} "):
                    send_control(f"{port}.ctl", {"cmd": "turn", "id": k + 1, "by": turn})
            if line.startswith("Press Enter"):
                proc.stdin.write("\n")
                proc.stdin.flush()
        assert proc.wait(60) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    params = read_ros_parameters(config / "bartender.params.yaml")
    assert params["directions"] == [1, -1, 1, -1]
    assert params["offsets"] == pytest.approx(ZERO_POSE, abs=TICK / 2)

    # Setup again writes the position limits for the offsets; the driver's mapping then reads the robot's zero.
    again = last_json(retarget("servos", "setup", robot, "--port", port, "--baud", "1000000", "--yes", "--json",
                               "--latency-ms", "50"))
    assert {c["item"] for c in again["plan"]["changes"]} == {"Min Position Limit", "Max Position Limit"}
    assert again["remaining"] == []
    for k in range(4):  # put the joints back in the zero pose
        send_control(f"{port}.ctl", {"cmd": "turn", "id": k + 1, "position": ZERO_POSE[k]})
    from retarget.dynamixel.bus import DynamixelBus

    with DynamixelBus(port, [1, 2, 3, 4], baudrate=1_000_000, offsets=params["offsets"],
                      directions=params["directions"], latency_timer_ms=100) as bus:
        assert bus.read_state().position == pytest.approx([0.0] * 4, abs=TICK)
