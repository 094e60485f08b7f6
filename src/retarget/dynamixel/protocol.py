"""Dynamixel Protocol 2.0 byte codecs: CRC-16, byte stuffing, instruction and status packets.

Everything here is a pure function on bytes. Frame layout (ROBOTIS e-manual, Protocol 2.0)::

    FF FF FD 00 | ID | LEN_L LEN_H | INST | [ERR] params… | CRC_L CRC_H

``LEN`` counts INST, (ERR,) the parameters and the two CRC bytes *after* stuffing. Stuffing inserts ``FD`` after
every ``FF FF FD`` that appears from INST to the last parameter; the CRC (polynomial 0x8005, initial 0, not
reflected, no final XOR) covers the stuffed bytes from the first header byte to the last parameter and is sent
low byte first. Status packets carry INST 0x55 followed by the ERR byte (bit 7: alert, bits 0-6: error number).
"""
from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from retarget.dynamixel.errors import CrcError, MalformedPacketError

__all__ = [
    "ALERT_BIT",
    "BROADCAST_ID",
    "HEADER",
    "MAX_ID",
    "ErrorNumber",
    "Instruction",
    "InstructionPacket",
    "PacketStream",
    "StatusPacket",
    "bulk_read",
    "bulk_write",
    "clear_multi_turn",
    "crc16",
    "decode_instruction",
    "decode_status",
    "describe_error_number",
    "encode_instruction",
    "encode_status",
    "factory_reset",
    "parse_bulk_read",
    "parse_bulk_write",
    "parse_sync_read",
    "parse_sync_write",
    "ping",
    "read",
    "reboot",
    "stuff",
    "sync_read",
    "sync_write",
    "unstuff",
    "write",
]

#: Header and reserved byte that open every packet.
HEADER = b"\xff\xff\xfd\x00"
#: Packet ID that addresses every servo.
BROADCAST_ID = 0xFE
#: Highest unicast ID (253 = 0xFD and 255 = 0xFF are never used, they collide with the header).
MAX_ID = 252
#: Bit 7 of the ERR byte: the device has a hardware problem (see Hardware Error Status, address 70).
ALERT_BIT = 0x80
#: Size of a packet without parameters: header(4) + ID + LEN(2) + INST + CRC(2).
_MIN_INSTRUCTION_FRAME = 10
_STATUS = 0x55
_STUFF_PATTERN = b"\xff\xff\xfd"


class Instruction(enum.IntEnum):
    """Instruction byte values of Protocol 2.0."""

    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    FACTORY_RESET = 0x06
    REBOOT = 0x08
    CLEAR = 0x10
    STATUS = 0x55
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83
    FAST_SYNC_READ = 0x8A
    BULK_READ = 0x92
    BULK_WRITE = 0x93
    FAST_BULK_READ = 0x9A


class ErrorNumber(enum.IntEnum):
    """Bits 0-6 of a status packet's ERR byte."""

    NONE = 0
    RESULT_FAIL = 1
    INSTRUCTION = 2
    CRC = 3
    DATA_RANGE = 4
    DATA_LENGTH = 5
    DATA_LIMIT = 6
    ACCESS = 7


_ERROR_TEXT = {
    ErrorNumber.NONE: "no error",
    ErrorNumber.RESULT_FAIL: "result fail (instruction could not be processed)",
    ErrorNumber.INSTRUCTION: "instruction error (undefined instruction, or Action without Reg Write)",
    ErrorNumber.CRC: "CRC error (the servo received a packet whose CRC did not match)",
    ErrorNumber.DATA_RANGE: "data range error (value outside the item's range)",
    ErrorNumber.DATA_LENGTH: "data length error (write shorter than the item)",
    ErrorNumber.DATA_LIMIT: "data limit error (value outside the configured limit)",
    ErrorNumber.ACCESS: "access error (read-only/undefined address, or EEPROM write with torque on)",
}


def describe_error_number(number: int) -> str:
    """Readable text for an ERR byte's error number (bits 0-6); unknown numbers are shown in hex."""
    try:
        return _ERROR_TEXT[ErrorNumber(number & 0x7F)]
    except ValueError:
        return f"unknown error number 0x{number & 0x7F:02X}"


def _make_crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC_TABLE = _make_crc_table()


def crc16(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-16 of Protocol 2.0 (poly 0x8005, MSB first, initial ``crc``, no final XOR).

    Args:
        data: bytes from the first header byte to the last parameter (already stuffed).
        crc: running value, to continue a previous computation.

    Returns:
        The 16-bit CRC.
    """
    for byte in bytes(data):
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[((crc >> 8) ^ byte) & 0xFF]
    return crc


def stuff(body: bytes) -> bytes:
    """Insert a ``FD`` after every ``FF FF FD`` in ``body`` (instruction or status byte through last parameter)."""
    return bytes(body).replace(_STUFF_PATTERN, _STUFF_PATTERN + b"\xfd")


def unstuff(body: bytes) -> bytes:
    """Remove the stuffing ``FD`` after every ``FF FF FD``; the inverse of :func:`stuff`."""
    return bytes(body).replace(_STUFF_PATTERN + b"\xfd", _STUFF_PATTERN)


@dataclass(frozen=True)
class InstructionPacket:
    """An instruction packet before stuffing.

    Attributes:
        servo_id: target ID, 0-252, or :data:`BROADCAST_ID`.
        instruction: instruction byte.
        params: parameters, unstuffed.
    """

    servo_id: int
    instruction: int
    params: bytes = b""


@dataclass(frozen=True)
class StatusPacket:
    """A status (return) packet before stuffing.

    Attributes:
        servo_id: the answering servo.
        error: the ERR byte (bit 7 alert, bits 0-6 error number).
        params: parameters (read data, ping info), unstuffed.
    """

    servo_id: int
    error: int = 0
    params: bytes = b""

    @property
    def alert(self) -> bool:
        """True when the device flags a hardware problem (bit 7 of ERR)."""
        return bool(self.error & ALERT_BIT)

    @property
    def error_number(self) -> int:
        """Bits 0-6 of ERR: 0 when the instruction was processed."""
        return self.error & 0x7F


def _frame(servo_id: int, body: bytes) -> bytes:
    stuffed = stuff(body)
    length = len(stuffed) + 2
    if length > 0xFFFF:
        raise MalformedPacketError(f"packet too long ({length} bytes after stuffing)", b"", servo_id)
    head = HEADER + bytes((servo_id,)) + struct.pack("<H", length)
    crc = crc16(head + stuffed)
    return head + stuffed + struct.pack("<H", crc)


def _check_id(servo_id: int, allow_broadcast: bool = True) -> None:
    valid = 0 <= servo_id <= MAX_ID or (allow_broadcast and servo_id == BROADCAST_ID)
    if not valid:
        raise MalformedPacketError(f"invalid packet ID {servo_id}", b"", None)


def encode_instruction(packet: InstructionPacket) -> bytes:
    """Frame an instruction packet: header, ID, length, stuffed body, CRC.

    Raises:
        MalformedPacketError: invalid ID or instruction byte.
    """
    _check_id(packet.servo_id)
    if not 0 <= packet.instruction <= 0xFF or packet.instruction == _STATUS:
        raise MalformedPacketError(f"invalid instruction 0x{packet.instruction:X}", b"", packet.servo_id)
    return _frame(packet.servo_id, bytes((packet.instruction,)) + bytes(packet.params))


def encode_status(packet: StatusPacket) -> bytes:
    """Frame a status packet (INST 0x55, ERR, params).

    Raises:
        MalformedPacketError: invalid ID or ERR byte.
    """
    _check_id(packet.servo_id, allow_broadcast=False)
    if not 0 <= packet.error <= 0xFF:
        raise MalformedPacketError(f"invalid ERR byte {packet.error}", b"", packet.servo_id)
    return _frame(packet.servo_id, bytes((_STATUS, packet.error)) + bytes(packet.params))


def _split(frame: bytes) -> tuple[int, bytes]:
    """Check header, length and CRC of one complete frame; return (ID, unstuffed body)."""
    frame = bytes(frame)
    if len(frame) < _MIN_INSTRUCTION_FRAME:
        raise MalformedPacketError(f"frame of {len(frame)} bytes is shorter than 10", frame)
    if frame[:4] != HEADER:
        raise MalformedPacketError("frame does not start with FF FF FD 00", frame)
    servo_id = frame[4]
    (length,) = struct.unpack_from("<H", frame, 5)
    if length < 3 or len(frame) != 7 + length:
        raise MalformedPacketError(f"LEN field {length} does not match frame size {len(frame)}", frame, servo_id)
    (received,) = struct.unpack_from("<H", frame, len(frame) - 2)
    expected = crc16(frame[:-2])
    if expected != received:
        raise CrcError(servo_id, expected, received, frame)
    return servo_id, unstuff(frame[7:-2])


def decode_instruction(frame: bytes) -> InstructionPacket:
    """Parse one complete instruction frame (header through CRC).

    Raises:
        CrcError: CRC mismatch.
        MalformedPacketError: bad header, length, ID or a status packet.
    """
    servo_id, body = _split(frame)
    _check_id(servo_id)
    if body[0] == _STATUS:
        raise MalformedPacketError("expected an instruction packet, got a status packet", frame, servo_id)
    return InstructionPacket(servo_id, body[0], body[1:])


def decode_status(frame: bytes) -> StatusPacket:
    """Parse one complete status frame (header through CRC).

    Raises:
        CrcError: CRC mismatch.
        MalformedPacketError: bad header, length, ID, not a status packet, or no ERR byte.
    """
    servo_id, body = _split(frame)
    if body[0] != _STATUS:
        raise MalformedPacketError(f"expected status 0x55, got instruction 0x{body[0]:02X}", frame, servo_id)
    if len(body) < 2:
        raise MalformedPacketError("status packet without ERR byte", frame, servo_id)
    _check_id(servo_id, allow_broadcast=False)
    return StatusPacket(servo_id, body[1], body[2:])


class PacketStream:
    """Incremental splitter of a byte stream into complete frames (for the emulator's receive side).

    Bytes before a header are discarded, as a servo does; a frame is returned once ``LEN`` bytes have arrived.
    CRC and contents are checked by the decoder, not here.
    """

    def __init__(self, max_length: int = 4096) -> None:
        self._buffer = bytearray()
        self._max_length = max_length

    def feed(self, data: bytes) -> list[bytes]:
        """Append ``data``; return every complete frame now available, in order."""
        self._buffer.extend(data)
        frames = []
        while True:
            start = self._find_header()
            if start < 0:
                # Keep a possible partial header at the end; drop the rest.
                keep = 3 if self._buffer.endswith(b"\xff\xff\xfd") else (
                    2 if self._buffer.endswith(b"\xff\xff") else (1 if self._buffer.endswith(b"\xff") else 0)
                )
                del self._buffer[: len(self._buffer) - keep]
                return frames
            del self._buffer[:start]
            if len(self._buffer) < 7:
                return frames
            (length,) = struct.unpack_from("<H", self._buffer, 5)
            if length < 3 or length > self._max_length:
                del self._buffer[:1]
                continue
            if len(self._buffer) < 7 + length:
                return frames
            frames.append(bytes(self._buffer[: 7 + length]))
            del self._buffer[: 7 + length]

    def _find_header(self) -> int:
        return self._buffer.find(HEADER)

    def clear(self) -> None:
        """Drop buffered bytes."""
        self._buffer.clear()


# --- builders of the instruction packets the driver and the emulator use ---------------------------------------


def ping(servo_id: int) -> InstructionPacket:
    """Ping ``servo_id`` (or every servo with :data:`BROADCAST_ID`)."""
    return InstructionPacket(servo_id, Instruction.PING)


def read(servo_id: int, address: int, length: int) -> InstructionPacket:
    """Read ``length`` bytes from ``address``."""
    return InstructionPacket(servo_id, Instruction.READ, struct.pack("<HH", address, length))


def write(servo_id: int, address: int, data: bytes) -> InstructionPacket:
    """Write ``data`` at ``address``."""
    return InstructionPacket(servo_id, Instruction.WRITE, struct.pack("<H", address) + bytes(data))


def reboot(servo_id: int) -> InstructionPacket:
    """Reboot ``servo_id`` (clears a hardware-error shutdown)."""
    return InstructionPacket(servo_id, Instruction.REBOOT)


def factory_reset(servo_id: int, option: int = 0x02) -> InstructionPacket:
    """Factory reset: option 0xFF all, 0x01 all but ID, 0x02 all but ID and baud rate."""
    return InstructionPacket(servo_id, Instruction.FACTORY_RESET, bytes((option,)))


def clear_multi_turn(servo_id: int) -> InstructionPacket:
    """Clear instruction, option 0x01: reset the multi-turn position to within one revolution."""
    return InstructionPacket(servo_id, Instruction.CLEAR, b"\x01\x44\x58\x4c\x22")


def sync_read(address: int, length: int, ids: Iterable[int]) -> InstructionPacket:
    """Sync Read of ``length`` bytes at ``address`` from every servo in ``ids`` (replies in that order)."""
    return InstructionPacket(BROADCAST_ID, Instruction.SYNC_READ, struct.pack("<HH", address, length) + bytes(ids))


def sync_write(address: int, length: int, data: Mapping[int, bytes]) -> InstructionPacket:
    """Sync Write of ``length`` bytes at ``address``: ``data`` maps servo ID to its bytes.

    Raises:
        MalformedPacketError: a servo's data is not ``length`` bytes long.
    """
    params = bytearray(struct.pack("<HH", address, length))
    for servo_id, chunk in data.items():
        if len(chunk) != length:
            raise MalformedPacketError(f"sync write data of {len(chunk)} bytes, expected {length}", b"", servo_id)
        params.append(servo_id)
        params.extend(chunk)
    return InstructionPacket(BROADCAST_ID, Instruction.SYNC_WRITE, bytes(params))


def bulk_read(requests: Iterable[tuple[int, int, int]]) -> InstructionPacket:
    """Bulk Read: ``requests`` is (servo ID, address, length) per servo."""
    params = b"".join(struct.pack("<BHH", i, a, n) for i, a, n in requests)
    return InstructionPacket(BROADCAST_ID, Instruction.BULK_READ, params)


def bulk_write(writes: Iterable[tuple[int, int, bytes]]) -> InstructionPacket:
    """Bulk Write: ``writes`` is (servo ID, address, data) per servo."""
    params = b"".join(struct.pack("<BHH", i, a, len(d)) + bytes(d) for i, a, d in writes)
    return InstructionPacket(BROADCAST_ID, Instruction.BULK_WRITE, params)


# --- parameter parsers (the emulator's side) --------------------------------------------------------------------


def parse_sync_read(params: bytes) -> tuple[int, int, list[int]]:
    """Split Sync Read parameters into (address, length, IDs).

    Raises:
        MalformedPacketError: fewer than 4 parameter bytes.
    """
    if len(params) < 4:
        raise MalformedPacketError("sync read needs address and length", params)
    address, length = struct.unpack_from("<HH", params)
    return address, length, list(params[4:])


def parse_sync_write(params: bytes) -> tuple[int, int, dict[int, bytes]]:
    """Split Sync Write parameters into (address, length, {ID: data}).

    Raises:
        MalformedPacketError: parameters do not divide into (ID + length bytes) blocks.
    """
    if len(params) < 4:
        raise MalformedPacketError("sync write needs address and length", params)
    address, length = struct.unpack_from("<HH", params)
    rest = params[4:]
    block = length + 1
    if length == 0 or len(rest) % block:
        raise MalformedPacketError(f"sync write data of {len(rest)} bytes is not a multiple of {block}", params)
    return address, length, {rest[k]: bytes(rest[k + 1 : k + block]) for k in range(0, len(rest), block)}


def parse_bulk_read(params: bytes) -> list[tuple[int, int, int]]:
    """Split Bulk Read parameters into [(ID, address, length), ...].

    Raises:
        MalformedPacketError: not a multiple of 5 bytes.
    """
    if not params or len(params) % 5:
        raise MalformedPacketError(f"bulk read parameters of {len(params)} bytes", params)
    return [struct.unpack_from("<BHH", params, k) for k in range(0, len(params), 5)]


def parse_bulk_write(params: bytes) -> list[tuple[int, int, bytes]]:
    """Split Bulk Write parameters into [(ID, address, data), ...].

    Raises:
        MalformedPacketError: a block runs past the end.
    """
    out = []
    k = 0
    while k < len(params):
        if k + 5 > len(params):
            raise MalformedPacketError("truncated bulk write block header", params)
        servo_id, address, length = struct.unpack_from("<BHH", params, k)
        if k + 5 + length > len(params):
            raise MalformedPacketError(f"bulk write block for ID {servo_id} runs past the end", params)
        out.append((servo_id, address, bytes(params[k + 5 : k + 5 + length])))
        k += 5 + length
    return out
