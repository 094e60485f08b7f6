"""The emulated bus byte for byte: raw packets in-process, the real SDK over a pseudo-terminal, the control
channel, and the ``python -m`` process with its signal handling."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dynamixel_sdk import COMM_SUCCESS, GroupSyncRead, GroupSyncWrite, PacketHandler, PortHandler

from retarget.dynamixel import protocol as p
from retarget.dynamixel.errors import CrcError
from retarget.dynamixel.emulator import EmulatedBus, PtyEmulator, parse_ids, send_control
from retarget.errors import InputError


class PatientPort(PortHandler):
    """The SDK's port with a 200 ms reply timeout: the emulator shares 2 cores with other test runs."""

    def setPacketTimeout(self, packet_length: int) -> None:  # noqa: N802 (SDK method name)
        self.packet_start_time = self.getCurrentTime()
        self.packet_timeout = 200.0


def ask(bus: EmulatedBus, packet: p.InstructionPacket) -> list[p.StatusPacket]:
    return [p.decode_status(r.data) for r in bus.handle(p.encode_instruction(packet))]


def test_ping_read_write_replies(emulated: EmulatedBus) -> None:
    (reply,) = ask(emulated, p.ping(2))
    assert reply == p.StatusPacket(2, 0, bytes.fromhex("06 04 26"))
    assert [r.servo_id for r in ask(emulated, p.ping(p.BROADCAST_ID))] == [1, 2, 3]
    assert ask(emulated, p.write(1, 116, (1000).to_bytes(4, "little"))) == [p.StatusPacket(1, 0)]
    (reply,) = ask(emulated, p.read(1, 116, 4))
    assert int.from_bytes(reply.params, "little") == 1000
    assert ask(emulated, p.ping(9)) == []  # absent servo: silence
    assert ask(emulated, p.write(p.BROADCAST_ID, 65, b"\x01")) == []  # broadcast write: no status
    assert all(s.get("LED") == 1 for s in emulated.servos.values())


def test_error_replies(emulated: EmulatedBus) -> None:
    (reply,) = ask(emulated, p.write(1, 132, b"\x00\x00\x00\x00"))
    assert reply.error == p.ErrorNumber.ACCESS
    (reply,) = ask(emulated, p.InstructionPacket(1, 0x77))
    assert reply.error == p.ErrorNumber.INSTRUCTION
    (reply,) = ask(emulated, p.InstructionPacket(1, p.Instruction.READ, b"\x84\x00"))
    assert reply.error == p.ErrorNumber.DATA_LENGTH
    frame = bytearray(p.encode_instruction(p.read(2, 132, 4)))
    frame[-1] ^= 0xFF
    (raw,) = emulated.handle(bytes(frame))
    assert p.decode_status(raw.data) == p.StatusPacket(2, p.ErrorNumber.CRC)
    broadcast = bytearray(p.encode_instruction(p.ping(p.BROADCAST_ID)))
    broadcast[-1] ^= 0xFF
    assert emulated.handle(bytes(broadcast)) == []


def test_status_return_level(emulated: EmulatedBus) -> None:
    ask(emulated, p.write(1, 68, b"\x01"))
    assert ask(emulated, p.write(1, 65, b"\x01")) == []
    assert len(ask(emulated, p.read(1, 65, 1))) == 1
    ask(emulated, p.write(1, 68, b"\x00"))
    assert ask(emulated, p.read(1, 65, 1)) == [] and len(ask(emulated, p.ping(1))) == 1


def test_sync_and_bulk_instructions(emulated: EmulatedBus) -> None:
    data = {i: (2048 + 100 * i).to_bytes(4, "little") for i in (1, 2, 3)}
    assert ask(emulated, p.sync_write(116, 4, data)) == []
    replies = ask(emulated, p.sync_read(116, 4, [3, 1]))
    assert [(r.servo_id, int.from_bytes(r.params, "little")) for r in replies] == [(3, 2348), (1, 2148)]
    ask(emulated, p.bulk_write([(1, 65, b"\x01"), (2, 116, (1000).to_bytes(4, "little"))]))
    replies = ask(emulated, p.bulk_read([(1, 65, 1), (2, 116, 4)]))
    assert [r.params for r in replies] == [b"\x01", (1000).to_bytes(4, "little")]


def test_servos_move_only_with_torque_on(emulated: EmulatedBus, clock) -> None:
    ask(emulated, p.write(1, 116, (3072).to_bytes(4, "little")))  # +pi/2
    clock.tick(1.0)
    assert emulated.snapshot()["present_position"][0] == 0.0
    ask(emulated, p.write(1, 64, b"\x01"))
    clock.tick(0.1)
    moving = emulated.snapshot()
    # Velocity-limited at the Velocity Limit (330 units = 7.91 rad/s, below the 8.06 rad/s no-load speed).
    assert 0.5 < moving["present_position"][0] < np.pi / 2
    clock.tick(1.0)
    assert emulated.snapshot()["present_position"][0] == pytest.approx(np.pi / 2, abs=2e-3)


def test_faults_drop_corrupt_hardware_error_and_reboot(emulated: EmulatedBus, clock) -> None:
    emulated.set_fault(2, drop_replies=True)
    assert [r.servo_id for r in ask(emulated, p.sync_read(132, 4, [1, 2, 3]))] == [1, 3]
    emulated.set_fault(2, drop_replies=False, corrupt_crc=True)
    (raw,) = emulated.handle(p.encode_instruction(p.ping(2)))
    with pytest.raises(CrcError):
        p.decode_status(raw.data)
    emulated.clear_faults()
    ask(emulated, p.write(3, 64, b"\x01"))
    emulated.raise_hardware_error(3, ["overload"])
    (reply,) = ask(emulated, p.ping(3))
    assert reply.alert and reply.error_number == 0
    (reply,) = ask(emulated, p.read(3, 70, 1))
    assert reply.params == b"\x20" and reply.alert
    (reply,) = ask(emulated, p.read(3, 64, 1))
    assert reply.params == b"\x00"  # shutdown cleared Torque Enable
    (reply,) = ask(emulated, p.write(3, 64, b"\x01"))
    assert reply.error == 0x80 | p.ErrorNumber.RESULT_FAIL
    assert ask(emulated, p.reboot(3)) == [p.StatusPacket(3, 0x80)]  # answered before rebooting
    (reply,) = ask(emulated, p.read(3, 70, 1))
    assert reply.params == b"\x00" and not reply.alert


def test_boot_time_silence(clock) -> None:
    bus = EmulatedBus([1], clock=clock, return_delay_us=0, boot_time=0.1)
    assert len(ask(bus, p.reboot(1))) == 1
    assert ask(bus, p.ping(1)) == []
    clock.tick(0.11)
    assert len(ask(bus, p.ping(1))) == 1


def test_parse_ids() -> None:
    assert parse_ids("1,2,5-7") == [1, 2, 5, 6, 7]
    for bad in ("", "a", "1,1", "300"):
        with pytest.raises(InputError):
            parse_ids(bad)


@pytest.mark.integration
def test_real_sdk_over_pty(pty_emulator: PtyEmulator) -> None:
    port = PatientPort(pty_emulator.port)
    assert port.openPort() and port.setBaudRate(3_000_000)
    ph = PacketHandler(2.0)
    try:
        model, result, error = ph.ping(port, 1)
        assert (model, result, error) == (1030, COMM_SUCCESS, 0)
        assert ph.write1ByteTxRx(port, 2, 64, 1) == (COMM_SUCCESS, 0)
        value, result, error = ph.read1ByteTxRx(port, 2, 64)
        assert (value, result, error) == (1, COMM_SUCCESS, 0)
        # A goal whose bytes contain FF FF FD forces stuffing on the wire (-765 = 0xFFFFFD03 little endian).
        result, error = ph.write4ByteTxRx(port, 1, 20, 0xFFFFFD03)
        assert (result, error) == (COMM_SUCCESS, 0)
        assert ph.read4ByteTxRx(port, 1, 20)[0] == 0xFFFFFD03
        writer = GroupSyncWrite(port, ph, 116, 4)
        for i in (1, 2, 3):
            writer.addParam(i, list((2048 + 10 * i).to_bytes(4, "little")))
        assert writer.txPacket() == COMM_SUCCESS
        reader = GroupSyncRead(port, ph, 116, 4)
        for i in (1, 2, 3):
            reader.addParam(i)
        assert reader.txRxPacket() == COMM_SUCCESS
        assert [reader.getData(i, 116, 4) for i in (1, 2, 3)] == [2058, 2068, 2078]
        result, error = ph.reboot(port, 2)
        assert (result, error) == (COMM_SUCCESS, 0)
    finally:
        port.closePort()


@pytest.mark.integration
def test_control_channel_and_vanish(pty_emulator: PtyEmulator, tmp_path: Path) -> None:
    ctl = tmp_path / "ttyDXL.ctl"
    status = send_control(ctl, {"cmd": "status"})
    assert status["ids"] == [1, 2, 3] and status["port"] == str(tmp_path / "ttyDXL")
    send_control(ctl, {"cmd": "hardware_error", "id": 2, "errors": ["overheating"]})
    assert send_control(ctl, {"cmd": "status"})["hardware_error"] == [0, 4, 0]
    with pytest.raises(InputError, match="unknown emulator control"):
        send_control(ctl, {"cmd": "explode"})
    send_control(ctl, {"cmd": "vanish"})
    assert not (tmp_path / "ttyDXL").exists()
    send_control(ctl, {"cmd": "restore"})
    assert (tmp_path / "ttyDXL").is_symlink()


@pytest.mark.integration
@pytest.mark.parametrize("model, number", [(None, 1030), ("XM430-W350", 1020), ("XM540-W270", 1120)])
def test_module_process_serves_and_cleans_up_on_sigterm(model: str | None, number: int, tmp_path: Path) -> None:
    link = tmp_path / "ttyDXL"
    proc = subprocess.Popen(
        [sys.executable, "-m", "retarget.dynamixel.emulator", "--ids", "1-3", "--link", str(link), "--json",
         "--return-delay-us", "0", *(["--model", model] if model else [])],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["port"] == str(link) and ready["ids"] == [1, 2, 3]
        assert ready["model"] == (model or "XM430-W210")
        port = PatientPort(str(link))
        port.openPort()
        answer, result, _ = PacketHandler(2.0).ping(port, 3)
        port.closePort()
        assert (answer, result) == (number, COMM_SUCCESS)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not link.exists() and not link.is_symlink()
    assert not Path(f"{link}.ctl").exists()


@pytest.mark.integration
def test_unknown_model_is_refused_before_anything_starts(tmp_path: Path) -> None:
    link = tmp_path / "ttyDXL"
    out = subprocess.run([sys.executable, "-m", "retarget.dynamixel.emulator", "--ids", "1", "--link", str(link),
                          "--model", "XL330-M288"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "unknown servo model 'XL330-M288'; known: XM430-W210, XM430-W350, XM540-W270" in out.stderr
    assert not link.exists() and not link.is_symlink()


def ask_at(bus: EmulatedBus, packet: p.InstructionPacket, baudrate: int) -> list[p.StatusPacket]:
    return [p.decode_status(r.data) for r in bus.handle(p.encode_instruction(packet), baudrate)]


def test_servos_hear_only_packets_at_their_baud_rate(clock) -> None:
    bus = EmulatedBus([1, 2], clock=clock, return_delay_us=0, boot_time=0.0, baudrate=57_600)
    assert [s.get("Baud Rate") for s in bus.servos.values()] == [1, 1]  # the e-manual's index of 57 600
    assert ask_at(bus, p.ping(1), 1_000_000) == []
    assert [r.servo_id for r in ask_at(bus, p.ping(p.BROADCAST_ID), 57_600)] == [1, 2]
    # Servo 2 goes to 1 Mbit/s: its reply still leaves at the old rate, from then on it listens at the new one.
    assert ask_at(bus, p.write(2, 8, b"\x03"), 57_600) == [p.StatusPacket(2, 0)]
    assert ask_at(bus, p.ping(2), 57_600) == []
    assert [r.servo_id for r in ask_at(bus, p.ping(p.BROADCAST_ID), 1_000_000)] == [2]
    assert bus.snapshot()["baud_rates"] == [57_600, 1_000_000]
    with pytest.raises(InputError, match="baud rate 12345"):
        EmulatedBus([1], clock=clock, baudrate=12_345)


def test_an_id_write_moves_the_servo_and_shared_ids_garble_the_replies(clock) -> None:
    bus = EmulatedBus([1, 2, 3], clock=clock, return_delay_us=0, boot_time=0.0, initial_positions=[0.1, 0.2, 0.3])
    assert ask(bus, p.write(1, 7, b"\x07")) == [p.StatusPacket(1, 0)]  # answered from the ID it was asked on
    assert ask(bus, p.ping(1)) == []
    assert ask(bus, p.ping(7))[0].servo_id == 7
    assert bus.ids == [7, 2, 3]
    # The dynamics keep their order: the servo now at 7 is the one that started at 0.1 rad.
    assert bus.snapshot()["present_position"][0] == pytest.approx(0.1, abs=2e-3)
    assert ask(bus, p.write(3, 7, b"\x02")) == [p.StatusPacket(3, 0)]  # now two servos answer to ID 2
    (raw,) = bus.handle(p.encode_instruction(p.ping(2)))
    with pytest.raises(CrcError):
        p.decode_status(raw.data)
    with pytest.raises(InputError, match="2 emulated servos share ID 2"):
        bus.set_fault(2, drop_replies=True)
    # Torque on: an EEPROM item, so the ID cannot change.
    assert ask(bus, p.write(7, 64, b"\x01")) == [p.StatusPacket(7, 0)]
    assert ask(bus, p.write(7, 7, b"\x09"))[0].error == p.ErrorNumber.ACCESS


def test_a_hand_turns_a_shaft_only_with_torque_off(clock) -> None:
    bus = EmulatedBus([4, 5], clock=clock, return_delay_us=0, boot_time=0.0)
    bus.turn_by_hand(5, 0.75)
    clock.tick(0.5)
    assert bus.snapshot()["present_position"] == pytest.approx([0.0, 0.75], abs=2e-3)
    (reply,) = ask(bus, p.read(5, 132, 4))
    assert int.from_bytes(reply.params, "little", signed=True) == 2048 + round(0.75 / (2 * np.pi / 4096))
    ask(bus, p.write(5, 64, b"\x01"))
    with pytest.raises(InputError, match="torque on"):
        bus.turn_by_hand(5, 0.0)


@pytest.mark.integration
def test_the_pty_emulator_answers_at_the_clients_termios_speed(tmp_path: Path) -> None:
    bus = EmulatedBus([1], return_delay_us=0, boot_time=0.02, baudrate=57_600)
    with PtyEmulator(bus, link=tmp_path / "ttyDXL", control_path=tmp_path / "ttyDXL.ctl") as emulator:
        port = PatientPort(emulator.port)
        handler = PacketHandler(2.0)
        try:
            assert port.openPort() and port.setBaudRate(1_000_000)
            assert handler.ping(port, 1)[1] != COMM_SUCCESS
            assert port.setBaudRate(57_600)
            assert handler.ping(port, 1)[:2] == (1030, COMM_SUCCESS)
        finally:
            port.closePort()
        send_control(tmp_path / "ttyDXL.ctl", {"cmd": "turn", "id": 1, "by": -0.5})
        assert send_control(tmp_path / "ttyDXL.ctl", {"cmd": "status"})["present_position"][0] == \
            pytest.approx(-0.5, abs=2e-3)
