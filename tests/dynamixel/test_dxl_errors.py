"""Every Dynamixel error names its servo and derives from RetargetError; device vs host errors are distinct."""
from __future__ import annotations

from retarget.dynamixel import errors as e
from retarget.errors import InputError, RetargetError


def test_messages_name_the_servo_and_hierarchy() -> None:
    cases = [
        e.NoReplyError(4, "ping"),
        e.CrcError(5, 0x1234, 0x4321),
        e.CrcError(6),
        e.MalformedReplyError("short", b"\x01", 7),
        e.DeviceError(8, 0x80 | 0x07, 0x20, "write Torque Enable=1"),
        e.PortGoneError("/dev/ttyUSB0", "EIO", 9),
        e.CommunicationError(10, -1000, "Port is in use!"),
        e.WrongModelError(11, 1030, 1020),
        e.GoalOutOfRangeError(12, 4.0, -3.1, 3.1),
    ]
    for exc, servo_id in zip(cases, range(4, 13)):
        assert isinstance(exc, e.DynamixelError) and isinstance(exc, RetargetError)
        assert exc.servo_id == servo_id
        assert f"servo {servo_id}" in str(exc)
    for exc in cases[:4] + cases[5:7]:
        assert isinstance(exc, e.HostError) and not isinstance(exc, e.DeviceError)
    assert isinstance(cases[8], InputError)


def test_device_error_decodes_alert_and_error_number() -> None:
    exc = e.DeviceError(3, 0x80 | 0x01, 0x24)
    assert exc.alert and exc.error_number == 1
    assert exc.hardware_errors == ["overheating", "overload"]
    assert "result fail" in str(exc) and "overload" in str(exc)
    unread = e.DeviceError(3, 0x80)
    assert unread.hardware_errors == [] and "unread" in str(unread)
    assert "CRC" in str(e.CrcError(1, 1, 2)) and "0x0001" in str(e.CrcError(1, 1, 2))
