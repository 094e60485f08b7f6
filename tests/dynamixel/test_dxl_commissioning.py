"""Hardware bring-up on the emulated bus, in-process (loopback port): scan, setup, calibration.

The robot is a copy of the bartender (4 joints, IDs 1-4) whose ``servo:`` section asks for non-factory gains;
its servos start as new ones do: at 57 600 bit/s, with IDs that are not the robot's.
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from retarget.dynamixel.bus import DynamixelBus
from retarget.dynamixel.calibration import MIN_GUIDED_TURN_RAD, calibrate, write_calibration
from retarget.dynamixel.commissioning import (
    LIMIT_MARGIN_RAD,
    SetupError,
    apply_setup,
    parse_assignments,
    plan_setup,
    robot_servos,
)
from retarget.dynamixel.control_table import position_to_radians, radians_to_position
from retarget.dynamixel.emulator import EmulatedBus
from retarget.dynamixel.loopback import LoopbackPort
from retarget.dynamixel.scan import scan_bus
from retarget.errors import InputError
from retarget.model.library import read_ros_parameters, share_dir
from retarget.model.servo import servos_from_config, table_from_si

CONFIG = share_dir() / "config"
SERVO = ("servo: {model: XM430-W210, max_velocity: 8.06, stall_torque: 3.0, p_gain: 1200, d_gain: 40, "
         "pwm_limit: 700, motors: {wrist_pitch: {p_gain: 900}}}")
RATES = (57_600, 1_000_000)
TICK = 2 * math.pi / 4096
#: Where the servos' shafts stand with the robot in its zero pose: the horns are not mounted at tick 2048.
ZERO_POSE = [0.3, -0.2, 0.5, -0.1]


@pytest.fixture
def robot(tmp_path: Path) -> Path:
    """A bartender copy (description + params file) whose servo: section sets gains."""
    folder = tmp_path / "config"
    folder.mkdir()
    text = (CONFIG / "bartender.yaml").read_text()
    start = text.index("servo:")
    end = text.index("\n", start)
    (folder / "bartender.yaml").write_text(text[:start] + SERVO + text[end:])
    shutil.copy(CONFIG / "bartender.params.yaml", folder / "bartender.params.yaml")
    return folder / "bartender.yaml"


def new_servos(ids: list[int], positions: list[float] | None = None, rate: int = 57_600) -> EmulatedBus:
    return EmulatedBus(ids, return_delay_us=500, boot_time=0.0, baudrate=rate, initial_positions=positions)


def scan(port: LoopbackPort, rates: tuple[int, ...] = RATES):
    return scan_bus(port, rates, wait_s=0.005)


def test_scan_finds_every_servo_at_its_rate_with_its_items() -> None:
    bus = new_servos([11, 12], [0.25, 0.0])
    bus.servos[12]._set("Baud Rate", 3)  # this one already runs at 1 Mbit/s
    bus.servos[12]._set("Position P Gain", 640)
    result = scan(LoopbackPort(bus))
    assert [(s.servo_id, s.baudrate) for s in result.servos] == [(11, 57_600), (12, 1_000_000)]
    first, second = (s.as_dict() for s in result.servos)
    assert first["model"] == "XM430-W210" and first["firmware"] == 38 and first["baud_rate_item"] == 1
    assert first["gains"] == {"p": 800, "i": 0, "d": 0, "pwm_limit": 885}
    assert first["present_position_rad"] == pytest.approx(0.25, abs=TICK)
    assert second["gains"]["p"] == 640 and second["return_delay_us"] == 500
    assert result.as_dict()["collisions"] == []


def test_servos_sharing_an_id_are_reported_and_setup_explains_one_at_a_time(robot: Path) -> None:
    bus = new_servos([1, 2])
    bus.servos[2]._set("ID", 1)  # two new servos, both ID 1
    result = scan(LoopbackPort(bus))
    assert result.servos == () and result.collisions == ((1, 57_600),)
    with pytest.raises(InputError, match="one at a time"):
        plan_setup(robot_servos(robot), result)


def test_setup_makes_the_bus_as_the_params_file_says(robot: Path) -> None:
    bus = new_servos([11, 12, 13, 14], ZERO_POSE)
    bus.servos[12]._set("Torque Enable", 1)
    port = LoopbackPort(bus)
    spec = robot_servos(robot)
    plan = plan_setup(spec, scan(port), parse_assignments(["11=base_yaw,12=shoulder_pitch", "13@57600=elbow_pitch"]))
    # The last servo left is the last joint left: no --assign needed.
    assert {j: s.servo_id for j, s in plan.assignment.items()} == {
        "base_yaw": 11, "shoulder_pitch": 12, "elbow_pitch": 13, "wrist_pitch": 14}
    assert plan.torque_off == ((12, 57_600),)
    kinds = [c.item for c in plan.changes]
    # Items first (at the old addresses), then IDs, then rates.
    assert kinds.index("ID") > max(k for k, item in enumerate(kinds) if item not in ("ID", "Baud Rate"))
    assert kinds.index("Baud Rate") > max(k for k, item in enumerate(kinds) if item == "ID")
    apply_setup(plan, port)
    assert bus.ids == [1, 2, 3, 4]
    after = scan(port)
    assert [(s.servo_id, s.baudrate) for s in after.servos] == [(1, 1_000_000), (2, 1_000_000), (3, 1_000_000),
                                                                 (4, 1_000_000)]
    assert plan_setup(spec, after).changes == ()
    import yaml

    section = yaml.safe_load(robot.read_text())["retarget"]
    servos = servos_from_config(section["servo"], list(section["motors"]))
    for found, servo in zip(after.servos, servos):
        wanted = table_from_si(servo)
        assert {k: found.items[k] for k in wanted} == wanted
        assert found.items["Return Delay Time"] == 0 and found.items["Torque Enable"] == 0
    assert after.servos[0].items["Position P Gain"] == 1200 and after.servos[3].items["Position P Gain"] == 900
    # Not calibrated yet: the factory position limits stay.
    assert {(s.items["Min Position Limit"], s.items["Max Position Limit"]) for s in after.servos} == {(0, 4095)}


def test_servos_swapping_ids_go_through_a_free_one(robot: Path) -> None:
    bus = new_servos([2, 1, 3, 4], rate=1_000_000)
    port = LoopbackPort(bus)
    assign = parse_assignments(["2=base_yaw", "1=shoulder_pitch"])
    plan = plan_setup(robot_servos(robot), scan(port, (1_000_000,)), assign)
    moves = [(c.old, c.new) for c in plan.changes if c.item == "ID"]
    assert moves == [(2, 252), (1, 2), (252, 1)]
    seen = []
    original = bus.handle

    def watch(frame: bytes, baudrate: int | None = None):
        replies = original(frame, baudrate)
        seen.append(sorted(bus.ids))
        return replies

    bus.handle = watch
    apply_setup(plan, port)
    assert bus.ids == [1, 2, 3, 4]
    assert all(len(set(ids)) == len(ids) for ids in seen)  # never two servos on one ID


def test_a_failed_write_stops_setup_saying_what_was_done_and_a_rerun_finishes(robot: Path) -> None:
    bus = new_servos([11, 12, 13, 14])
    port = LoopbackPort(bus)
    spec = robot_servos(robot)
    assign = parse_assignments(["11=base_yaw,12=shoulder_pitch,13=elbow_pitch,14=wrist_pitch"])
    plan = plan_setup(spec, scan(port), assign)
    bus.set_fault(13, drop_replies=True)
    with pytest.raises(SetupError, match="servo 13") as caught:
        apply_setup(plan, port)
    failed = caught.value
    assert failed.failed.servo_id == 13 and failed.done and all(c.servo_id != 13 for c in failed.done)
    assert failed.where["elbow_pitch"] == (13, 57_600)
    bus.clear_faults()
    again = plan_setup(spec, scan(port), assign)
    made = {(c.servo_id, c.item) for c in failed.done}
    assert not made & {(c.servo_id, c.item) for c in again.changes}  # what was done stays done
    apply_setup(again, port)
    assert plan_setup(spec, scan(port)).changes == ()


def test_unclaimed_servos_and_other_models_are_refused_before_anything_is_written(robot: Path) -> None:
    bus = new_servos([11, 12, 13, 14, 15])
    port = LoopbackPort(bus)
    with pytest.raises(InputError, match="no joint claims: ID 11 at 57600 bit/s, ID 12"):
        plan_setup(robot_servos(robot), scan(port))
    with pytest.raises(InputError, match="no joint 'elbow'"):
        plan_setup(robot_servos(robot), scan(port), parse_assignments(["11=elbow"]))
    with pytest.raises(InputError, match="ID@BAUD=JOINT"):
        parse_assignments(["eleven=base_yaw"])
    from retarget.dynamixel.control_table import load_control_table

    other = EmulatedBus([1], table=load_control_table(model="XM540-W270"), boot_time=0.0, baudrate=1_000_000)
    with pytest.raises(InputError, match="XM540-W270, the params file says XM430-W210"):
        plan_setup(robot_servos(robot), scan(LoopbackPort(other)))
    assert sent_writes(port) == []


def sent_writes(port: LoopbackPort) -> list[bytes]:
    from retarget.dynamixel import protocol as p

    return [raw for raw in port.sent if p.decode_instruction(raw).instruction == p.Instruction.WRITE]


def test_calibration_offsets_make_the_servos_zero_the_robots_zero(robot: Path) -> None:
    bus = new_servos([1, 2, 3, 4], ZERO_POSE, rate=1_000_000)
    port = LoopbackPort(bus)
    spec = robot_servos(robot)
    asked = []
    with DynamixelBus(port, [1, 2, 3, 4], baudrate=1_000_000) as raw:
        result = calibrate(spec, raw, asked.append, directions=[1, -1, 1, 1])
    assert "zero pose" in asked[0] and len(asked) == 1
    np.testing.assert_allclose(result.offsets, ZERO_POSE, atol=TICK / 2)
    write_calibration(spec.params_file, result)
    params = read_ros_parameters(spec.params_file)
    assert params["directions"] == [1, -1, 1, 1]
    assert "# [rad] servo angle at joint 0" in spec.params_file.read_text()
    # The driver's mapping with the written offsets: the robot's zero pose reads 0, and a joint goal lands where
    # direction * goal + offset says on the shaft.
    with DynamixelBus(port, [1, 2, 3, 4], baudrate=1_000_000, offsets=params["offsets"],
                      directions=params["directions"]) as driver:
        np.testing.assert_allclose(driver.read_state().position, 0.0, atol=TICK / 2)
        goal = np.array([0.2, 0.2, 0.2, 0.2])
        driver.write_goal_positions(goal)
    shaft_goals = [position_to_radians(bus.servos[i].get("Goal Position")) for i in (1, 2, 3, 4)]
    np.testing.assert_allclose(shaft_goals, np.array(ZERO_POSE) + np.array([1, -1, 1, 1]) * 0.2, atol=TICK)
    # Calibrated: setup now writes position limits, the URDF's range (and margin) through offset and direction.
    spec = robot_servos(robot)
    plan = plan_setup(spec, scan(port, (1_000_000,)))
    apply_setup(plan, port)
    for joint, servo_id in zip(spec.joints, (1, 2, 3, 4)):
        lo, hi = joint.limits
        ends = sorted(joint.direction * q + joint.offset for q in (lo - LIMIT_MARGIN_RAD, hi + LIMIT_MARGIN_RAD))
        servo = bus.servos[servo_id]
        assert (servo.get("Min Position Limit"), servo.get("Max Position Limit")) == \
            tuple(int(radians_to_position(a)) for a in ends)


def test_guided_directions_follow_the_turn_of_each_joint(robot: Path) -> None:
    bus = new_servos([1, 2, 3, 4], ZERO_POSE, rate=1_000_000)
    spec = robot_servos(robot)
    turns = {"base_yaw": 0.4, "shoulder_pitch": -0.35, "elbow_pitch": 0.3, "wrist_pitch": -0.5}

    def hand(instruction: str) -> None:
        for k, (joint, turn) in enumerate(turns.items()):
            if instruction.startswith(f"Turn {joint} "):
                bus.turn_by_hand(k + 1, ZERO_POSE[k] + turn)

    with DynamixelBus(LoopbackPort(bus), [1, 2, 3, 4], baudrate=1_000_000) as raw:
        result = calibrate(spec, raw, hand, guided=True)
    assert result.directions == (1, -1, 1, -1) and result.how == "measured"
    np.testing.assert_allclose(result.offsets, ZERO_POSE, atol=TICK / 2)

    def timid(instruction: str) -> None:
        if instruction.startswith("Turn base_yaw "):
            bus.turn_by_hand(1, ZERO_POSE[0] + 0.5 * MIN_GUIDED_TURN_RAD)

    bus = new_servos([1, 2, 3, 4], ZERO_POSE, rate=1_000_000)
    with DynamixelBus(LoopbackPort(bus), [1, 2, 3, 4], baudrate=1_000_000) as raw, \
            pytest.raises(InputError, match="too little to tell the direction"):
        calibrate(spec, raw, timid, guided=True)


def test_a_range_beyond_the_servos_turn_is_reported(robot: Path) -> None:
    # base_yaw spans ±2.67 rad: a horn 1 rad off leaves position mode's ±π.
    bus = new_servos([1, 2, 3, 4], [1.0, 0.0, 0.0, 0.0], rate=1_000_000)
    with DynamixelBus(LoopbackPort(bus), [1, 2, 3, 4], baudrate=1_000_000) as raw:
        result = calibrate(robot_servos(robot), raw, lambda _text: None)
    assert len(result.notes) == 1 and result.notes[0].startswith("base_yaw: its range")


def test_servos_left_over_are_matched_in_id_order_and_the_plan_says_so(robot: Path) -> None:
    bus = new_servos([31, 33, 32, 30])
    plan = plan_setup(robot_servos(robot), scan(LoopbackPort(bus)), parse_assignments(["33=base_yaw"]))
    assert {j: s.servo_id for j, s in plan.assignment.items()} == {
        "base_yaw": 33, "shoulder_pitch": 30, "elbow_pitch": 31, "wrist_pitch": 32}
    assert any(n.startswith("matched by ID order: servo 30 -> shoulder_pitch") for n in plan.notes)
