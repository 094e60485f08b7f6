"""Errors of the Dynamixel layer: device-reported versus host-detected, each naming the servo.

The split follows the two ways a bus transaction fails:

- the servo answered, and its status packet says something is wrong (:class:`DeviceError`: the ERR byte's
  error number and/or its alert bit, with the decoded Hardware Error Status when it could be read);
- the host could not complete the exchange (:class:`HostError` and its subclasses: no reply, corrupt reply,
  malformed reply, the port vanished).

A codec failure on raw bytes (:class:`MalformedPacketError`, :class:`CrcError`) is host-detected too.
"""
from __future__ import annotations

from retarget.errors import InputError, RetargetError

__all__ = [
    "CommunicationError",
    "CrcError",
    "DeviceError",
    "DynamixelError",
    "GainMismatchError",
    "GainOutOfRangeError",
    "GoalOutOfRangeError",
    "HostError",
    "MalformedPacketError",
    "MalformedReplyError",
    "NoReplyError",
    "PortGoneError",
    "WrongModelError",
]


def _servo(servo_id: int | None) -> str:
    return "servo ?" if servo_id is None else f"servo {servo_id}"


class DynamixelError(RetargetError):
    """Root of every Dynamixel error. ``servo_id`` is the servo concerned (None for the port as a whole)."""

    servo_id: int | None = None


class HostError(DynamixelError):
    """The host side detected the failure (nothing, or nothing valid, came back)."""


class NoReplyError(HostError):
    """No status packet arrived before the SDK's packet timeout.

    Args:
        servo_id: the servo that stayed silent.
        instruction: what was asked, e.g. ``"ping"`` or ``"sync read 126+10"``.
    """

    def __init__(self, servo_id: int | None, instruction: str = "") -> None:
        self.servo_id = servo_id
        self.instruction = instruction
        what = f" to {instruction}" if instruction else ""
        super().__init__(f"{_servo(servo_id)}: no reply{what} (check power, ID, baud rate and wiring)")


class MalformedPacketError(HostError):
    """Bytes that are not a valid Protocol 2.0 packet (bad header, length, instruction or parameters).

    Args:
        reason: what is wrong.
        frame: the offending bytes (may be empty).
        servo_id: the packet's ID when it could be read.
    """

    def __init__(self, reason: str, frame: bytes = b"", servo_id: int | None = None) -> None:
        self.reason = reason
        self.frame = bytes(frame)
        self.servo_id = servo_id
        shown = self.frame[:32].hex(" ")
        more = " …" if len(self.frame) > 32 else ""
        super().__init__(f"{_servo(servo_id)}: malformed packet: {reason} [{shown}{more}]")


class CrcError(MalformedPacketError):
    """A packet whose CRC-16 does not match its bytes, or (from the SDK) a reply that came back corrupt.

    The SDK reports a CRC mismatch and a truncated reply with the same code (``COMM_RX_CORRUPT``); both end here.

    Args:
        servo_id: the packet's ID.
        expected: CRC computed over the received bytes (None when unknown).
        received: CRC carried by the packet (None when unknown).
        frame: the offending bytes.
    """

    def __init__(
        self,
        servo_id: int | None,
        expected: int | None = None,
        received: int | None = None,
        frame: bytes = b"",
    ) -> None:
        self.expected = expected
        self.received = received
        if expected is None or received is None:
            reason = "corrupt reply (CRC mismatch or truncated status packet)"
        else:
            reason = f"CRC mismatch: computed 0x{expected:04X}, packet carries 0x{received:04X}"
        super().__init__(reason, frame, servo_id)


class MalformedReplyError(MalformedPacketError):
    """A status packet that decoded but does not answer the question (wrong ID, wrong data length)."""


class PortGoneError(HostError):
    """The serial port cannot be opened, or vanished while in use (unplugged adapter, closed pseudo-terminal).

    Args:
        port: the port's path.
        reason: the OS or pyserial message.
        servo_id: the servo being addressed when it happened, if any.
    """

    def __init__(self, port: str, reason: str = "", servo_id: int | None = None) -> None:
        self.port = port
        self.reason = reason
        self.servo_id = servo_id
        at = f" while talking to {_servo(servo_id)}" if servo_id is not None else ""
        hint = ""
        if "Permission denied" in reason:
            hint = (" (this user may not open serial ports: add it to the dialout group, `sudo usermod -aG dialout "
                    "$USER`, and log in again; docs/bringup.md)")
        super().__init__(f"port {port} is gone{at}: {reason or 'no such device'}{hint}")


class CommunicationError(HostError):
    """Any other SDK failure code (port busy, transmit failure), with the SDK's own text.

    Args:
        servo_id: the servo addressed.
        result_code: the SDK's ``COMM_*`` value.
        message: the SDK's description of it.
    """

    def __init__(self, servo_id: int | None, result_code: int, message: str) -> None:
        self.servo_id = servo_id
        self.result_code = result_code
        super().__init__(f"{_servo(servo_id)}: communication failed ({result_code}): {message}")


class DeviceError(DynamixelError):
    """The servo answered with a non-zero ERR byte.

    Args:
        servo_id: the reporting servo.
        error: the status packet's ERR byte (bit 7 alert, bits 0-6 error number).
        hardware_error: the Hardware Error Status (address 70) byte, None when it was not (or could not be) read.
        instruction: what was asked.
    """

    def __init__(
        self, servo_id: int, error: int, hardware_error: int | None = None, instruction: str = ""
    ) -> None:
        from retarget.dynamixel.control_table import HardwareErrorStatus
        from retarget.dynamixel.protocol import ALERT_BIT, describe_error_number

        self.servo_id = servo_id
        self.error = error
        self.hardware_error = hardware_error
        self.instruction = instruction
        self.alert = bool(error & ALERT_BIT)
        self.error_number = error & 0x7F
        self.hardware_errors: list[str] = (
            HardwareErrorStatus(hardware_error).names() if hardware_error is not None else []
        )
        parts = []
        if self.error_number:
            parts.append(describe_error_number(self.error_number))
        if self.alert:
            if hardware_error is None:
                parts.append("hardware alert (Hardware Error Status unread)")
            else:
                parts.append(f"hardware alert: {', '.join(self.hardware_errors) or 'no bit set'}")
        what = f" on {instruction}" if instruction else ""
        super().__init__(f"servo {servo_id}{what}: {'; '.join(parts) or f'error byte 0x{error:02X}'}")


class WrongModelError(DynamixelError):
    """A servo answered a ping with a model number other than the one configured.

    Args:
        servo_id: the servo.
        expected: configured model number (1030 for the XM430-W210).
        found: the model number it reported.
    """

    def __init__(self, servo_id: int, expected: int, found: int) -> None:
        from retarget.dynamixel.control_table import model_name

        self.servo_id = servo_id
        self.expected = expected
        self.found = found

        def named(number: int) -> str:
            name = model_name(number)
            return f"{number} ({name})" if name else str(number)

        super().__init__(f"servo {servo_id}: model number {named(found)}, expected {named(expected)} "
                         "(the servo model configured: the driver's servo_model parameter)")


class GoalOutOfRangeError(DynamixelError, InputError):
    """A commanded value is not finite or lies outside the servo's position limits; nothing was sent.

    Args:
        servo_id: the servo the value was meant for.
        value: the offending value (in the caller's units).
        low: lowest allowed value (same units).
        high: highest allowed value (same units).
        unit: unit label for the message.
    """

    def __init__(self, servo_id: int, value: float, low: float, high: float, unit: str = "rad") -> None:
        self.servo_id = servo_id
        self.value = value
        self.low = low
        self.high = high
        super().__init__(f"servo {servo_id}: goal {value!r} {unit} outside [{low:.4f}, {high:.4f}] {unit}")


class GainOutOfRangeError(DynamixelError, InputError):
    """A servo's parameters give a control-table value outside the item's range; nothing was written.

    Args:
        servo_id: the servo. item: the control table item (``"Position P Gain"``). value: the value the servo's
            parameters give [table units]. low, high: the item's range. source: what the value was converted from.
    """

    def __init__(self, servo_id: int, item: str, value: int, low: int, high: int, source: str = "") -> None:
        self.servo_id = servo_id
        self.item = item
        self.value = value
        self.low = low
        self.high = high
        origin = f" (from {source})" if source else ""
        super().__init__(f"servo {servo_id}: {item} {value}{origin} outside the control table's range "
                         f"[{low}, {high}]")


class GainMismatchError(DynamixelError):
    """A gain written to a servo reads back as another value (the servo did not take it).

    Args:
        servo_id: the servo. item: the control table item. written, read: the raw values.
    """

    def __init__(self, servo_id: int, item: str, written: int, read: int) -> None:
        self.servo_id = servo_id
        self.item = item
        self.written = written
        self.read = read
        super().__init__(f"servo {servo_id}: {item} written {written}, read back {read} (the servo runs a loop other "
                         "than the robot's servo parameters declare)")
