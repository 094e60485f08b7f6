"""Tests of the reduced-model lookup (retarget.twin.model) and the simulation-driven servos (retarget.twin.servo):
what the emulated bus sends the twin and reports back, and the acceptance test of the servo in the twin: a
horizontal rod's sag reported as Present Position."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from retarget.dynamixel.control_table import load_control_table
from retarget.dynamixel.emulator import EmulatedBus
from retarget.dynamixel.servo_loop import ServoLoop
from retarget.errors import InputError
from retarget.twin.channel import PoseSample
from retarget.twin.errors import TwinModelUnavailable
from retarget.twin.model import find_reduced_model
from retarget.twin.servo import SimulationDrivenServos, joint_mapping
from retarget.twin.worker import record_size, unpack_command


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    with pytest.raises(TwinModelUnavailable, match="planner cache") as err:
        find_reduced_model("single_rod")
    assert err.value.robot == "single_rod"
    with pytest.raises(InputError, match="does not exist"):
        find_reduced_model("single_rod", tmp_path / "missing.npz")
    folder = tmp_path / "cache" / "reduced"
    folder.mkdir(parents=True)
    old, new, other = folder / "single_rod-aaa.npz", folder / "single_rod-bbb.npz", folder / "two_rods-ccc.npz"
    for k, p in enumerate((old, new, other)):
        p.write_bytes(b"x")
        import os

        os.utime(p, (1000 + k, 1000 + k))
    found = find_reduced_model("single_rod")
    assert found.path == new.resolve() and found.origin == "planner_cache"
    given = tmp_path / "m.npz"
    given.write_bytes(b"x")
    assert find_reduced_model("single_rod", given).origin == "file"


def test_lookup_falls_back_to_the_planner_model_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import numpy as np

    from retarget.sim.reduced.artifact import FORMAT_VERSION

    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(models))
    stale, current = models / "drummer-old.npz", models / "drummer-boxing.npz"
    np.savez(stale, meta=np.array(json.dumps({"format_version": 1})))  # a format no longer read
    np.savez(current, meta=np.array(json.dumps({"format_version": FORMAT_VERSION})))
    import os

    os.utime(current, (1000, 1000))  # older than the stale one: the stale one is skipped, not preferred
    found = find_reduced_model("drummer")
    assert found.path == current.resolve() and found.origin == "artifact_dir"
    current.unlink()
    with pytest.raises(TwinModelUnavailable, match="no current drummer"):
        find_reduced_model("drummer")


def test_joint_mapping() -> None:
    index, offset, direction = joint_mapping(["a", "b", "c"], ["c", "a"], [0.1, 0.2, 0.3], [1, 1, -1])
    assert index.tolist() == [2, 0] and offset.tolist() == [0.3, 0.1] and direction.tolist() == [-1, 1]
    with pytest.raises(InputError, match="no emulated servo"):
        joint_mapping(["a"], ["z"])


def _bus_with(dynamics: SimulationDrivenServos, clock: list[float], **kwargs: object) -> EmulatedBus:
    return EmulatedBus([1, 2], dynamics=dynamics, clock=lambda: clock[0], **kwargs)


def test_servos_stream_goals_and_settings_and_report_the_simulated_shafts() -> None:
    """Servo 2 drives motor j2 (joint = −(servo − 0.5)); the records carry its goal and loop settings in joint
    space, the bus reports the simulated shaft in servo space (current by the XM430's torque constant), and the
    servos' own loops report while the simulation does not."""
    records: list[bytes] = []
    reported: list[PoseSample | None] = [None]
    index, offset, direction = joint_mapping(["j1", "j2"], ["j2"], [0.0, 0.5], [1.0, -1.0])
    local = ServoLoop.for_table(2, load_control_table())
    dynamics = SimulationDrivenServos(local, lambda r: records.append(r) or True, lambda: reported[0], index,
                                      offset, direction)
    clock = [0.0]
    bus = _bus_with(dynamics, clock)
    table = bus.table
    bus.servos[2].write(table["Torque Enable"].address, b"\x01")
    bus.servos[2].write(table["Position P Gain"].address, (1200).to_bytes(2, "little"))
    bus.servos[2].write(table["Goal Position"].address, (2048 + 512).to_bytes(4, "little"))  # +π/4 on the shaft
    clock[0] = 0.5
    bus.advance()
    size = record_size(1)
    assert all(len(r) == size for r in records)
    assert struct.unpack("<d", records[0][:8])[0] < -1e9  # −(wall-clock time of motor time 0)
    t, goal, rate, settings = unpack_command(records[-1], 1)
    assert t == pytest.approx(0.5) and goal[0] == pytest.approx(-(np.pi / 4 - 0.5)) and rate[0] == 0.0
    assert settings.torque_on.tolist() == [True] and settings.gains.tolist() == [[1200.0, 0.0, 0.0]]
    assert settings.pwm_limit.tolist() == [885.0]
    # No simulation yet: the local loop holds the goal (no load, no sag).
    assert bus.snapshot()["present_position"][1] == pytest.approx(np.pi / 4, abs=2e-3)
    assert dynamics.simulated_steps == 0 and dynamics.sent == len(records) - 1 and dynamics.dropped == 0
    # The simulation reports joint j2 at 0.1 rad, 0.2 rad/s, motor torque 0.6 N m, duty 0.3.
    reported[0] = PoseSample(1, 0.45, 0.0, 0.05, np.zeros((0, 7)), np.array([[0.1, 0.2, 0.6, 0.3]]))
    clock[0] = 0.6
    bus.advance()
    snap = bus.snapshot()
    assert snap["present_position"][1] == pytest.approx(0.4, abs=2e-3)  # −0.1 + 0.5
    assert snap["present_velocity"][1] == pytest.approx(-0.2, abs=0.03)
    assert snap["present_current"][1] == pytest.approx(-0.6 * 2.3 / 3.0, abs=3e-3)
    assert snap["present_pwm"][1] == pytest.approx(-0.3, abs=1.5e-3)
    assert dynamics.sim_time == 0.45
    # Gone again: the local loop takes over from the simulated shaft and moves toward its goal.
    reported[0] = None
    clock[0] = 0.602
    bus.advance()
    assert bus.snapshot()["present_position"][1] == pytest.approx(0.4, abs=5e-3)
    clock[0] = 1.5
    bus.advance()
    assert bus.snapshot()["present_position"][1] == pytest.approx(np.pi / 4, abs=2e-3)


def test_a_model_trained_without_the_servo_in_the_loop_is_refused(ideal_rod_artifact: Path) -> None:
    from retarget.sim.reduced.errors import StaleReducedModelError
    from retarget.twin.model import ReducedModelSource, load_twin_model

    with pytest.raises(StaleReducedModelError, match="servo_loop") as err:
        load_twin_model("single_rod", ReducedModelSource(ideal_rod_artifact, "file"))
    assert "train it again with the servos in the loop" in str(err.value)


@pytest.fixture(scope="module")
def full_fem_sag() -> float:
    """The full FEM's static prediction (:func:`retarget.sim.statics.solve_static`, the robot's XM430 at factory
    gains, mesh scale 0.05): how far the servo holding single_rod's rod horizontal (goal 90°) sags [rad]."""
    from retarget.sim.engine import SystemEngine
    from retarget.sim.reduced.store import load_robot_system
    from retarget.sim.statics import solve_static

    _path, _model, system = load_robot_system("single_rod", 0.05)
    goal = np.array([np.pi / 2])
    return float(SystemEngine(system).shaft_angles(solve_static(system, goal).s, goal)[0] - goal[0])


def test_the_twin_bus_reports_the_sag_of_a_horizontal_rod(rod_twin_model, full_fem_sag: float) -> None:
    """Acceptance: the emulated bus whose servo runs in the twin simulation (in process here: the worker's
    :class:`TwinSimulation` fed by the bus's records, its shafts read back), holding single_rod's rod horizontal
    at factory gains, reports a steady Present Position error equal to the full FEM's static sag (≈ 0.081 rad,
    53 ticks: the rod's moment over kp) within a tick and 2 %; Present Current and PWM report the moment."""
    from retarget.twin.simulation import TwinSimulation

    sim = TwinSimulation(rod_twin_model)

    def sink(record: bytes) -> bool:
        t, goal, rate, settings = unpack_command(record, 1)
        if t >= 0:
            sim.push(t, goal, rate, settings)
        return True

    def shafts() -> PoseSample | None:
        if not sim.started:
            sim.start()
        sim.advance(60.0)
        return PoseSample(sim.stats.steps, sim.time, 0.0, sim.lag_s, sim.poses(), sim.shafts())

    index, offset, direction = joint_mapping(["base_pitch"], ["base_pitch"])
    table = load_control_table()
    local = ServoLoop.for_table(1, table, list(sim.servos))
    dynamics = SimulationDrivenServos(local, sink, shafts, index, offset, direction)
    clock = [0.0]
    bus = EmulatedBus([1], dynamics=dynamics, clock=lambda: clock[0], initial_positions=[np.pi / 2 - 0.3])
    servo = bus.servos[1]
    servo.write(table["Torque Enable"].address, b"\x01")
    goal = 2048 + 1024
    servo.write(table["Goal Position"].address, goal.to_bytes(4, "little"))
    for _ in range(150):  # 3 s as a driver polls, 20 ms apart
        clock[0] += 0.02
        bus.advance()
    assert dynamics.simulated_steps > 1000 and sim.stats.failures == 0 and sim.stats.resyncs == 0
    tick = 2 * np.pi / 4096
    error = (servo.get("Present Position") - goal) * tick
    assert full_fem_sag == pytest.approx(0.081, rel=0.02)
    assert abs(error - full_fem_sag) <= tick + 0.02 * full_fem_sag
    # The moment the loop carries, τ = kp · sag, as current (torque constant 2.3 A / 3 N m) and duty (τ / 3 N m).
    kp = 13.81
    assert servo.get("Present Current") * 2.69e-3 == pytest.approx(-kp * error * 2.3 / 3.0, rel=0.03)
    assert servo.get("Present PWM") / 885 == pytest.approx(-kp * error / 3.0, rel=0.03)


@pytest.mark.integration
def test_the_worker_runs_in_a_session_of_its_own_and_ends_at_end_of_input(tmp_path: Path) -> None:
    # A stand-in for the worker's interpreter: it records its session and reads its input to the end, as the worker.
    import os
    import sys
    import time

    from retarget.twin.servo import start_worker, stop_worker

    seen = tmp_path / "session"
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\nimport os, sys\nopen({str(seen)!r}, 'w').write(str(os.getsid(0)))\n"
                      "sys.stdin.buffer.read()\n", encoding="utf-8")
    python.chmod(0o755)
    proc, sink = start_worker("single_rod", tmp_path / "twin.poses", python=str(python))
    try:
        assert sink(b"x" * 64)
        deadline = time.monotonic() + 30.0
        while not (seen.is_file() and seen.read_text()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert int(seen.read_text()) == proc.pid != os.getsid(0)
    finally:
        assert stop_worker(proc) == 0
