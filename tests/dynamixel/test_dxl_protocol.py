"""Packet codecs against the e-manual's test vectors, exhaustive round trips, and malformed input."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from retarget.dynamixel import protocol as p
from retarget.dynamixel.errors import CrcError, MalformedPacketError


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# (frame, kind) from the ROBOTIS e-manual's Protocol 2.0 examples (XM430-W210, model 1030, firmware 38).
INSTRUCTION_VECTORS = {
    "ping 1": ("FF FF FD 00 01 03 00 01 19 4E", p.ping(1)),
    "ping broadcast": ("FF FF FD 00 FE 03 00 01 31 42", p.ping(p.BROADCAST_ID)),
    "read present position": ("FF FF FD 00 01 07 00 02 84 00 04 00 1D 15", p.read(1, 132, 4)),
    "write goal 512": ("FF FF FD 00 01 09 00 03 74 00 00 02 00 00 CA 89", p.write(1, 116, (512).to_bytes(4, "little"))),
    "reg write": (
        "FF FF FD 00 01 09 00 04 68 00 C8 00 00 00 AE 8E",
        p.InstructionPacket(1, p.Instruction.REG_WRITE, h("68 00 C8 00 00 00")),
    ),
    "action": ("FF FF FD 00 01 03 00 05 02 CE", p.InstructionPacket(1, p.Instruction.ACTION)),
    "factory reset": ("FF FF FD 00 01 04 00 06 01 A1 E6", p.factory_reset(1, 0x01)),
    "reboot": ("FF FF FD 00 01 03 00 08 2F 4E", p.reboot(1)),
    "clear": ("FF FF FD 00 01 08 00 10 01 44 58 4C 22 B1 DC", p.clear_multi_turn(1)),
    "sync read": ("FF FF FD 00 FE 09 00 82 84 00 04 00 01 02 CE FA", p.sync_read(132, 4, [1, 2])),
    "sync write": (
        "FF FF FD 00 FE 11 00 83 74 00 04 00 01 96 00 00 00 02 AA 00 00 00 82 87",
        p.sync_write(116, 4, {1: (150).to_bytes(4, "little"), 2: (170).to_bytes(4, "little")}),
    ),
    "bulk read": ("FF FF FD 00 FE 0D 00 92 01 90 00 02 00 02 92 00 01 00 1A 05", p.bulk_read([(1, 144, 2), (2, 146, 1)])),
}

STATUS_VECTORS = {
    "ping reply 1": ("FF FF FD 00 01 07 00 55 00 06 04 26 65 5D", p.StatusPacket(1, 0, h("06 04 26"))),
    "ping reply 2": ("FF FF FD 00 02 07 00 55 00 06 04 26 6F 6D", p.StatusPacket(2, 0, h("06 04 26"))),
    "read reply 166": ("FF FF FD 00 01 08 00 55 00 A6 00 00 00 8C C0", p.StatusPacket(1, 0, h("A6 00 00 00"))),
    "read reply 2079": ("FF FF FD 00 02 08 00 55 00 1F 08 00 00 BA BE", p.StatusPacket(2, 0, h("1F 08 00 00"))),
    "write ack": ("FF FF FD 00 01 04 00 55 00 A1 0C", p.StatusPacket(1, 0)),
    "bulk reply voltage": ("FF FF FD 00 01 06 00 55 00 77 00 C3 69", p.StatusPacket(1, 0, h("77 00"))),
    "bulk reply temperature": ("FF FF FD 00 02 05 00 55 00 24 8B A9", p.StatusPacket(2, 0, h("24"))),
}


@pytest.mark.parametrize("name", sorted(INSTRUCTION_VECTORS))
def test_instruction_vectors_encode_and_decode(name: str) -> None:
    frame, packet = INSTRUCTION_VECTORS[name]
    assert p.encode_instruction(packet) == h(frame)
    assert p.decode_instruction(h(frame)) == packet


@pytest.mark.parametrize("name", sorted(STATUS_VECTORS))
def test_status_vectors_encode_and_decode(name: str) -> None:
    frame, packet = STATUS_VECTORS[name]
    assert p.encode_status(packet) == h(frame)
    assert p.decode_status(h(frame)) == packet


def test_every_vector_of_the_shared_provenance_file(shared_data: Path) -> None:
    """Each `bytes` → CRC `lo hi` pair in PROVENANCE.md: our CRC matches, and the full frame decodes."""
    text = (shared_data / "dynamixel" / "PROVENANCE.md").read_text()
    pairs = re.findall(r"`((?:[0-9A-F]{2} )+[0-9A-F]{2})` → CRC `([0-9A-F]{2} [0-9A-F]{2})`", text)
    assert len(pairs) >= 4, "expected the ping, ping reply, read and write vectors"
    for body, crc in pairs:
        assert p.crc16(h(body)).to_bytes(2, "little") == h(crc), body
        frame = h(body) + h(crc)
        if frame[7] == 0x55:
            p.decode_status(frame)
        else:
            p.decode_instruction(frame)


def test_crc_known_value_and_continuation() -> None:
    data = h("FF FF FD 00 01 03 00 01")
    assert p.crc16(data) == 0x4E19
    assert p.crc16(data[4:], p.crc16(data[:4])) == 0x4E19
    assert p.crc16(b"") == 0


def test_stuffing_examples() -> None:
    assert p.stuff(h("FF FF FD")) == h("FF FF FD FD")
    assert p.stuff(h("01 FF FF FD 02 FF FF FD")) == h("01 FF FF FD FD 02 FF FF FD FD")
    assert p.stuff(h("FF FF FF FD")) == h("FF FF FF FD FD")
    assert p.unstuff(h("FF FF FD FD FD")) == h("FF FF FD FD")


def _nasty(rng: np.random.Generator, n: int) -> bytes:
    """Random bytes drawn mostly from FF/FD/00 so that header patterns occur often."""
    alphabet = np.array([0xFF, 0xFD, 0x00, 0x55, 0x01], dtype=np.uint8)
    return bytes(rng.choice(alphabet, size=n, p=[0.45, 0.3, 0.1, 0.05, 0.1]))


def test_stuffing_round_trip_exhaustive_short_and_random_long() -> None:
    symbols = (0xFF, 0xFD, 0x00)
    # Every string of length <= 7 over {FF, FD, 00}: 3^0 + ... + 3^7 = 3280 cases.
    for length in range(8):
        for code in range(3**length):
            body = bytes(symbols[(code // 3**k) % 3] for k in range(length))
            stuffed = p.stuff(body)
            assert p.unstuff(stuffed) == body
            assert b"\xff\xff\xfd\x00" not in stuffed
    rng = np.random.default_rng(7)
    for _ in range(300):
        body = _nasty(rng, int(rng.integers(0, 200)))
        assert p.unstuff(p.stuff(body)) == body


def test_packet_round_trips_with_header_patterns_in_payload() -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        params = _nasty(rng, int(rng.integers(0, 120)))
        servo_id = int(rng.integers(0, 253))
        frame = p.encode_instruction(p.InstructionPacket(servo_id, p.Instruction.WRITE, params))
        assert p.decode_instruction(frame) == p.InstructionPacket(servo_id, p.Instruction.WRITE, params)
        status = p.StatusPacket(servo_id, int(rng.integers(0, 256)), params)
        assert p.decode_status(p.encode_status(status)) == status
        # LEN counts the stuffed body: header(4) + ID + LEN(2) + LEN bytes.
        assert len(frame) == 7 + int.from_bytes(frame[5:7], "little")


def test_status_fields() -> None:
    status = p.StatusPacket(3, 0x80 | 0x07)
    assert status.alert and status.error_number == 7
    assert "access" in p.describe_error_number(status.error)
    assert "unknown" in p.describe_error_number(0x33)


def test_parsers_invert_builders() -> None:
    data = {1: h("01 02 03 04"), 7: h("FF FF FD 00")}
    assert p.parse_sync_write(p.sync_write(116, 4, data).params) == (116, 4, data)
    assert p.parse_sync_read(p.sync_read(126, 10, [3, 1, 2]).params) == (126, 10, [3, 1, 2])
    requests = [(1, 144, 2), (2, 146, 1)]
    assert p.parse_bulk_read(p.bulk_read(requests).params) == requests
    writes = [(1, 116, h("00 02 00 00")), (4, 64, h("01"))]
    assert p.parse_bulk_write(p.bulk_write(writes).params) == writes


@pytest.mark.parametrize(
    ("frame", "fragment"),
    [
        ("FF FF FD 00 01 03 00", "shorter"),
        ("FF FF FE 00 01 03 00 01 19 4E", "FF FF FD 00"),
        ("FF FF FD 00 01 04 00 01 19 4E", "LEN"),
        ("FF FF FD 00 FD 03 00 01 00 00", None),  # ID 253 (or its CRC) is rejected either way
    ],
)
def test_malformed_frames_are_rejected(frame: str, fragment: str | None) -> None:
    with pytest.raises(MalformedPacketError) as info:
        p.decode_instruction(h(frame))
    if fragment:
        assert fragment in str(info.value)


def test_crc_mismatch_names_servo_and_both_crcs() -> None:
    frame = bytearray(h("FF FF FD 00 05 03 00 01 00 00"))
    with pytest.raises(CrcError) as info:
        p.decode_instruction(bytes(frame))
    assert info.value.servo_id == 5
    assert info.value.received == 0 and info.value.expected == p.crc16(frame[:-2])
    assert "servo 5" in str(info.value)


def test_wrong_packet_kind_and_bad_builders() -> None:
    with pytest.raises(MalformedPacketError, match="status"):
        p.decode_instruction(h("FF FF FD 00 01 04 00 55 00 A1 0C"))
    with pytest.raises(MalformedPacketError, match="expected status"):
        p.decode_status(h("FF FF FD 00 01 03 00 01 19 4E"))
    with pytest.raises(MalformedPacketError):
        p.encode_instruction(p.InstructionPacket(253, p.Instruction.PING))
    with pytest.raises(MalformedPacketError):
        p.encode_status(p.StatusPacket(p.BROADCAST_ID))
    with pytest.raises(MalformedPacketError, match="expected 4"):
        p.sync_write(116, 4, {1: b"\x00"})
    with pytest.raises(MalformedPacketError):
        p.parse_sync_write(h("74 00 04 00 01 00"))
    with pytest.raises(MalformedPacketError):
        p.parse_bulk_write(h("01 74 00 04 00 00"))


def test_stream_splits_frames_across_chunks_and_skips_garbage() -> None:
    frames = [h(INSTRUCTION_VECTORS[k][0]) for k in ("ping 1", "sync write", "clear")]
    wire = b"\x00\x12\xff" + frames[0] + b"\xfe\xff\xff" + frames[1] + frames[2]
    stream = p.PacketStream()
    out: list[bytes] = []
    rng = np.random.default_rng(3)
    k = 0
    while k < len(wire):
        step = int(rng.integers(1, 6))
        out += stream.feed(wire[k : k + step])
        k += step
    assert out == frames
