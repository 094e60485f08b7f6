"""Access rules of one emulated XM430-W210's control table."""
from __future__ import annotations

import pytest

from retarget.dynamixel.control_table import load_control_table
from retarget.dynamixel.emulated_servo import EmulatedServo
from retarget.dynamixel.protocol import ErrorNumber


def le(value: int, size: int = 4) -> bytes:
    return value.to_bytes(size, "little", signed=True)


@pytest.fixture
def servo() -> EmulatedServo:
    return EmulatedServo(5, load_control_table(), position_rad=0.0)


def test_power_on_state(servo: EmulatedServo) -> None:
    assert servo.servo_id == 5 and servo.get("Model Number") == 1030
    assert servo.get("Goal Position") == servo.get("Present Position") == 2048
    assert not servo.torque_enabled and servo.return_delay_s == pytest.approx(500e-6)


def test_write_rules(servo: EmulatedServo) -> None:
    assert servo.write(116, le(1000)) == ErrorNumber.NONE and servo.get("Goal Position") == 1000
    assert servo.write(116, le(5000)) == ErrorNumber.DATA_LIMIT  # outside Max Position Limit 4095
    assert servo.write(118, le(0, 2)) == ErrorNumber.DATA_LENGTH  # half an item
    assert servo.write(132, le(0)) == ErrorNumber.ACCESS  # read-only
    assert servo.write(14, b"\x00") == ErrorNumber.ACCESS  # no item there
    assert servo.write(64, b"\x02") == ErrorNumber.DATA_RANGE
    assert servo.write(11, b"\x04") == ErrorNumber.NONE  # EEPROM with torque off
    assert servo.write(64, b"\x01") == ErrorNumber.NONE
    assert servo.write(11, b"\x03") == ErrorNumber.ACCESS  # EEPROM with torque on
    assert servo.write(116, le(5000)) == ErrorNumber.NONE  # extended position mode: no position limits
    assert servo.write(700, b"\x00") == ErrorNumber.ACCESS
    assert servo.get("Goal Position") == 5000


def test_multi_item_write_is_all_or_nothing(servo: EmulatedServo) -> None:
    before = servo.get("Profile Velocity")
    data = le(10) + le(20) + le(99999)  # accel, velocity, goal beyond the limit
    assert servo.write(108, data) == ErrorNumber.DATA_LIMIT
    assert servo.get("Profile Velocity") == before
    assert servo.write(108, le(10) + le(20) + le(3000)) == ErrorNumber.NONE
    assert (servo.get("Profile Acceleration"), servo.get("Profile Velocity"), servo.get("Goal Position")) == (10, 20, 3000)


def test_hardware_error_shutdown_and_reboot(servo: EmulatedServo) -> None:
    servo.write(64, b"\x01")
    servo.raise_hardware_error(0x20)
    assert servo.alert and servo.in_shutdown and not servo.torque_enabled
    assert servo.write(64, b"\x01") == ErrorNumber.RESULT_FAIL
    servo.reboot()
    assert not servo.alert and servo.write(64, b"\x01") == ErrorNumber.NONE
    # Input voltage is not in the default Shutdown mask: alert without torque off.
    servo.raise_hardware_error(0x01)
    assert servo.alert and servo.torque_enabled


def test_persistent_error_returns_after_reboot(servo: EmulatedServo) -> None:
    servo.faults.persistent_hardware_error = 0x04
    servo.raise_hardware_error(0x04)
    servo.reboot()
    assert servo.hardware_error == 0x04
    servo.faults.persistent_hardware_error = 0
    servo.reboot()
    assert servo.hardware_error == 0


def test_reg_write_action_and_factory_reset(servo: EmulatedServo) -> None:
    assert servo.action() == ErrorNumber.INSTRUCTION
    assert servo.reg_write(116, le(1500)) == ErrorNumber.NONE and servo.get("Registered Instruction") == 1
    assert servo.get("Goal Position") == 2048
    assert servo.action() == ErrorNumber.NONE and servo.get("Goal Position") == 1500
    servo.write(9, b"\x00")
    servo.factory_reset(0x01)
    assert servo.servo_id == 5 and servo.get("Return Delay Time") == 250
    servo.factory_reset(0xFF)
    assert servo.servo_id == 1
