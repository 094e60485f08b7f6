"""The emulated servo bus: X-series servos answering Protocol 2.0 on a pseudo-terminal, moving a servo model.

Three layers:

- :class:`EmulatedBus` — pure protocol: ``handle(frame) -> [Reply]`` for every instruction the driver uses
  (ping, read, write, reg write/action, factory reset, reboot, clear, sync read/write, bulk read/write), with the
  servos' access rules, the dynamics stepped on a clock, and fault injection;
- :class:`PtyEmulator` — owns a pseudo-terminal (``os.openpty``), optionally a symlink to its slave side that
  ``dynamixel_sdk.PortHandler`` opens, a reader thread, and a Unix-socket control channel so another process can
  inject faults (:func:`send_control`);
- :func:`main` — ``python -m retarget.dynamixel.emulator --ids 1,2,3 --link /tmp/ttyDXL [--model XM540-W270]``.

The servos are XM430-W210s unless another model of :data:`~retarget.dynamixel.control_table.SERVO_MODELS` is
named: its control table (model number, limits) answers the wire, and its servo model
(:func:`retarget.dynamixel.servo_loop.factory_servo`, or the robot's ``servo:`` section with ``--robot``) moves
the default servos, :class:`~retarget.dynamixel.servo_loop.ServoLoop`: the position loop the control table's
gains set, on each servo's rotor.

Bad CRC on an incoming unicast packet is answered with a status packet carrying error 0x03 (the e-manual's
"CRC Error: CRC of the sent packet does not match"); a broadcast with a bad CRC gets no answer. Status Return
Level (68) is honoured (0: ping only, 1: ping and reads, 2: all). Each reply waits the servo's Return Delay Time.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retarget.atomic import atomic_path
from retarget.dynamixel.control_table import (
    BAUD_RATES,
    DEFAULT_BAUD_RATE,
    DEFAULT_SERVO_MODEL,
    SERVO_MODELS,
    ControlTable,
    HardwareErrorStatus,
    baud_rate_index,
    load_control_table,
)
from retarget.dynamixel.dynamics import ServoCommand, ServoDynamics, ServoFeedback
from retarget.dynamixel.emulated_servo import EmulatedServo, command_from_raw, feedback_to_raw
from retarget.dynamixel.errors import CrcError, MalformedPacketError
from retarget.dynamixel.protocol import (
    ALERT_BIT,
    BROADCAST_ID,
    ErrorNumber,
    Instruction,
    PacketStream,
    StatusPacket,
    decode_instruction,
    encode_status,
    parse_bulk_read,
    parse_bulk_write,
    parse_sync_read,
    parse_sync_write,
)
from retarget.errors import InputError
from retarget.processes import realtime_priority

__all__ = [
    "EmulatedBus",
    "PtyEmulator",
    "Reply",
    "TWIN_CHOICES",
    "add_arguments",
    "main",
    "parse_ids",
    "pty_baudrate",
    "run",
    "send_control",
]


@dataclass(frozen=True)
class Reply:
    """One status packet to send.

    Attributes:
        servo_id: sender.
        data: the framed bytes.
        delay_s: Return Delay Time to wait before sending [s].
    """

    servo_id: int
    data: bytes
    delay_s: float


class EmulatedBus:
    """Several emulated servos on one bus, their dynamics and their faults.

    Args:
        ids: servo IDs, in the order of the dynamics' arrays.
        dynamics: the servo model; default :class:`~retarget.dynamixel.servo_loop.ServoLoop` of the table's
            model, unloaded.
        table: the control table (default: packaged XM430-W210).
        initial_positions: power-on shaft angles [rad], shape ``(n,)``; default 0.
        period: dynamics step [s].
        clock: monotonic time source [s]; tests pass a fake one.
        boot_time: how long a servo stays silent after Reboot / Factory Reset [s].
        return_delay_us: Return Delay Time to set at power-on [µs] (the factory value is 500 µs), None to keep it.
        baudrate: the servos' Baud Rate at power-on [bit/s] (one of
            :data:`~retarget.dynamixel.control_table.BAUD_RATES`); a servo answers only packets that come at its
            rate (:meth:`handle`).

    The servos are addressed by the ID their control table holds: a write of ID moves a servo to another address
    (and two servos given the same ID answer together, which garbles both replies, as on a real bus). The
    dynamics' arrays stay in the order of ``ids`` at power-on, whatever the servos' IDs become.
    """

    def __init__(
        self,
        ids: Sequence[int],
        dynamics: ServoDynamics | None = None,
        table: ControlTable | None = None,
        initial_positions: Sequence[float] | None = None,
        period: float = 0.002,
        clock: Callable[[], float] = time.monotonic,
        boot_time: float = 0.05,
        return_delay_us: float | None = None,
        baudrate: int = DEFAULT_BAUD_RATE,
    ) -> None:
        if len(set(ids)) != len(ids) or not ids:
            raise InputError(f"emulated bus needs distinct servo IDs, got {list(ids)}")
        self.table = table or load_control_table()
        baud_index = baud_rate_index(baudrate)
        n = len(ids)
        start = np.zeros(n) if initial_positions is None else np.asarray(initial_positions, dtype=float)
        if start.shape != (n,):
            raise InputError(f"expected {n} initial positions [rad], got {np.shape(initial_positions)}")
        # In the dynamics' order; a servo keeps its place when its ID changes.
        self._slots = [EmulatedServo(int(i), self.table, float(p)) for i, p in zip(ids, start)]
        for servo in self._slots:
            servo._set("Baud Rate", baud_index)
            if return_delay_us is not None:
                servo._set("Return Delay Time", int(round(return_delay_us / 2.0)))
        if dynamics is None:
            from retarget.dynamixel.servo_loop import ServoLoop  # numba: not for `retarget --help`

            dynamics = ServoLoop.for_table(n, self.table)
        self.dynamics = dynamics
        self.period = period
        self.clock = clock
        self.boot_time = boot_time
        self.lock = threading.RLock()
        self._t0 = clock()
        self._t = self._t0
        self._booting_until = [-np.inf] * n  # per slot
        feedback = self.dynamics.reset(start)
        self._store(feedback)
        self.received_frames = 0
        self.crc_errors_seen = 0
        self._baudrate: int | None = None  # of the packet being handled

    # --- time ------------------------------------------------------------------------------------------------

    def advance(self, now: float | None = None) -> None:
        """Step the dynamics in ``period`` increments up to ``now`` (a long gap is covered in ≤ 500 steps)."""
        with self.lock:
            now = self.clock() if now is None else now
            gap = now - self._t
            steps = int(gap / self.period)
            if steps <= 0:
                return
            dt = self.period
            if steps > 500:
                dt, steps = gap / 500, 500
            # No packet is processed during a catch-up, so the command is constant over it and only the last
            # feedback can ever be observed: build the one, store the other.
            feedback = self.dynamics.advance(self._command(), dt, steps)
            for _ in range(steps):
                self._t += dt  # summed as the steps were taken, not multiplied: the same clock to the last bit
            self._store(feedback)

    @property
    def ids(self) -> list[int]:
        """The servos' IDs now (their ID items), in the dynamics' order."""
        return [servo.servo_id for servo in self._slots]

    @property
    def servos(self) -> dict[int, EmulatedServo]:
        """The servos by their ID now (of servos sharing an ID, the last in the dynamics' order)."""
        return {servo.servo_id: servo for servo in self._slots}

    def _command(self) -> ServoCommand:
        # Raw values gathered per servo, converted for all at once (per-servo numpy conversions of scalars cost
        # most of an idle tick).
        return command_from_raw(np.array([servo.command_raw() for servo in self._slots], dtype=np.int64))

    def _store(self, feedback: ServoFeedback) -> None:
        tick_ms = int((self._t - self._t0) * 1000)
        position, velocity, current, pwm = feedback_to_raw(feedback)
        for k, servo in enumerate(self._slots):
            servo.set_present_raw(int(position[k]), int(velocity[k]), int(current[k]), tick_ms, int(pwm[k]))

    # --- faults ----------------------------------------------------------------------------------------------

    def set_fault(
        self,
        servo_id: int,
        *,
        drop_replies: bool | None = None,
        corrupt_crc: bool | None = None,
        disconnected: bool | None = None,
        drop_next_replies: int | None = None,
    ) -> None:
        """Switch communication faults of one servo on or off (None leaves a flag unchanged);
        ``drop_next_replies`` loses that many of its next replies (the instructions are still executed)."""
        with self.lock:
            faults = self._servo(servo_id).faults
            if drop_replies is not None:
                faults.drop_replies = drop_replies
            if drop_next_replies is not None:
                faults.drop_next_replies = int(drop_next_replies)
            if corrupt_crc is not None:
                faults.corrupt_crc = corrupt_crc
            if disconnected is not None:
                faults.disconnected = disconnected

    def raise_hardware_error(self, servo_id: int, bits: int | Iterable[str], persistent: bool = False) -> None:
        """Latch Hardware Error Status bits (e.g. ``["overload"]``) on one servo; ``persistent`` ones survive
        reboots until :meth:`clear_faults`."""
        if not isinstance(bits, int):
            bits = int(HardwareErrorStatus.from_names(list(bits)))
        with self.lock:
            servo = self._servo(servo_id)
            servo.raise_hardware_error(bits)
            if persistent:
                servo.faults.persistent_hardware_error |= bits

    def clear_faults(self, servo_id: int | None = None) -> None:
        """Remove every injected fault (latched hardware errors stay until a reboot, as on a real servo)."""
        with self.lock:
            for servo in [self._servo(servo_id)] if servo_id is not None else self._slots:
                servo.faults.drop_replies = servo.faults.corrupt_crc = servo.faults.disconnected = False
                servo.faults.drop_next_replies = 0
                servo.faults.persistent_hardware_error = 0

    def turn_by_hand(self, servo_id: int, position_rad: float) -> None:
        """Turn a servo's shaft to ``position_rad`` [rad] as a hand would (calibration): the servo must have its
        torque off; it stays there at rest.

        Raises:
            InputError: no such servo, its torque is on, or the dynamics cannot place shafts (the digital twin's
                shafts are the simulation's).
        """
        with self.lock:
            self.advance()
            servo = self._servo(servo_id)
            if servo.torque_enabled:
                raise InputError(f"servo {servo_id} has its torque on: it holds its goal, turn it off first")
            place = getattr(self.dynamics, "set_shafts", None)
            if place is None:
                raise InputError(f"the emulated servos' dynamics ({type(self.dynamics).__name__}) do not let a "
                                 "hand turn a shaft")
            k = self._slots.index(servo)
            n = len(self._slots)
            which = np.zeros(n, dtype=bool)
            which[k] = True
            position = np.zeros(n)
            position[k] = float(position_rad)
            place(position, np.zeros(n), which)
            feedback = self.dynamics.advance(self._command(), self.period, 1)
            self._store(feedback)

    def _servo(self, servo_id: int) -> EmulatedServo:
        found = [servo for servo in self._slots if servo.servo_id == servo_id]
        if not found:
            raise InputError(f"no emulated servo with ID {servo_id}; IDs: {self.ids}")
        if len(found) > 1:
            raise InputError(f"{len(found)} emulated servos share ID {servo_id}; IDs: {self.ids}")
        return found[0]

    def snapshot(self) -> dict:
        """Goal and present state of every servo, in SI, and the count of frames received, for tests and the control
        channel. Lists are in the dynamics' order; ``ids`` are the servos' IDs now, ``baud_rates`` [bit/s] theirs."""
        with self.lock:
            self.advance()
            out: dict = {"ids": self.ids, "time": self._t - self._t0, "received_frames": self.received_frames}
            rows = [(servo.command_si(), servo.present_si()) for servo in self._slots]
            out["goal_position"] = [row[0][0] for row in rows]
            out["torque_enabled"] = [row[0][1] for row in rows]
            out["present_position"] = [row[1][0] for row in rows]
            out["present_velocity"] = [row[1][1] for row in rows]
            out["present_current"] = [row[1][2] for row in rows]
            out["present_pwm"] = [servo.get("Present PWM") / 885.0 for servo in self._slots]
            out["hardware_error"] = [servo.hardware_error for servo in self._slots]
            out["baud_rates"] = [BAUD_RATES.get(servo.get("Baud Rate")) for servo in self._slots]
            return out

    # --- protocol --------------------------------------------------------------------------------------------

    def handle(self, frame: bytes, baudrate: int | None = None) -> list[Reply]:
        """Process one received frame (header through CRC) and return the status packets to send, in order.

        Args:
            frame: the bytes of one instruction packet.
            baudrate: the speed the frame came at [bit/s]: only servos whose Baud Rate is that speed hear it (a
                servo at another rate sees noise and stays silent); None: every servo hears it (in-process tests).
        """
        with self.lock:
            now = self.clock()
            self.advance(now)
            self.received_frames += 1
            self._baudrate = baudrate
            try:
                packet = decode_instruction(frame)
            except CrcError as exc:
                self.crc_errors_seen += 1
                servos = [s for s in self._live(exc.servo_id, now) if s.get("Status Return Level") != 0]
                return self._collide([r for s in servos for r in self._reply(s, ErrorNumber.CRC)])
            except MalformedPacketError:
                return []
            return self._dispatch(packet.servo_id, packet.instruction, packet.params, now)

    def _hears(self, k: int, now: float) -> bool:
        """Whether the servo in slot ``k`` receives the packet being handled."""
        servo = self._slots[k]
        if servo.faults.disconnected or now < self._booting_until[k]:
            return False
        return self._baudrate is None or BAUD_RATES.get(servo.get("Baud Rate")) == self._baudrate

    def _live(self, servo_id: int | None, now: float) -> list[EmulatedServo]:
        """The servos with ID ``servo_id`` that hear the packet (more than one when IDs collide)."""
        if servo_id is None:
            return []
        return [s for k, s in enumerate(self._slots) if s.servo_id == servo_id and self._hears(k, now)]

    @staticmethod
    def _collide(replies: list[Reply]) -> list[Reply]:
        """Replies of servos sharing an ID go out at the same moment and garble each other: the client sees one
        packet with a bad CRC (:class:`~retarget.dynamixel.errors.CrcError`)."""
        by_id: dict[int, list[Reply]] = {}
        for reply in replies:
            by_id.setdefault(reply.servo_id, []).append(reply)
        out: list[Reply] = []
        for reply in replies:
            same = by_id[reply.servo_id]
            if len(same) == 1:
                out.append(reply)
            elif reply is same[0]:
                data = reply.data[:-2] + bytes((reply.data[-2] ^ 0xA5, reply.data[-1] ^ 0x5A))
                out.append(Reply(reply.servo_id, data, max(r.delay_s for r in same)))
        return out

    def _reply(
        self, servo: EmulatedServo, error: int, params: bytes = b"", alert: bool | None = None,
        servo_id: int | None = None,
    ) -> list[Reply]:
        if servo.faults.drop_replies:
            return []
        if servo.faults.drop_next_replies > 0:
            servo.faults.drop_next_replies -= 1
            return []
        alert = servo.alert if alert is None else alert
        err = int(error) | (ALERT_BIT if alert else 0)
        sender = servo.servo_id if servo_id is None else servo_id
        data = encode_status(StatusPacket(sender, err, params))
        if servo.faults.corrupt_crc:
            data = data[:-2] + bytes((data[-2] ^ 0x5A, data[-1]))
        return [Reply(sender, data, servo.return_delay_s)]

    @staticmethod
    def _answers(level: int, kind: str) -> bool:
        """Whether Status Return Level ``level`` answers an instruction of ``kind`` (ping/read/write/reset)."""
        return kind == "ping" or (kind == "read" and level >= 1) or level >= 2

    def _dispatch(self, target: int, instruction: int, params: bytes, now: float) -> list[Reply]:
        broadcast = target == BROADCAST_ID
        if instruction == Instruction.SYNC_READ:
            return self._sync_read(params, now) if broadcast else []
        if instruction == Instruction.SYNC_WRITE:
            return self._sync_write(params, now) if broadcast else []
        if instruction == Instruction.BULK_READ:
            return self._bulk_read(params, now) if broadcast else []
        if instruction == Instruction.BULK_WRITE:
            return self._bulk_write(params, now) if broadcast else []
        replies: list[Reply] = []
        for k, servo in enumerate(self._slots):
            if not (broadcast or servo.servo_id == target) or not self._hears(k, now):
                continue
            # Reboot and factory reset answer first and reset afterwards: the reply shows the state before (and
            # an ID write answers from the ID the packet was sent to).
            alert_before, level_before, id_before = servo.alert, servo.get("Status Return Level"), servo.servo_id
            error, data, kind = self._unicast(servo, instruction, params, now)
            # Broadcast: only Ping answers (Read/Write never do, e-manual Protocol 2.0).
            if broadcast and instruction != Instruction.PING:
                continue
            if self._answers(level_before, kind):
                replies += self._reply(servo, error, data, alert_before if kind == "reset" else None, id_before)
            if instruction in (Instruction.REBOOT, Instruction.FACTORY_RESET) and error == ErrorNumber.NONE:
                self._booting_until[k] = now + self.boot_time
        return self._collide(replies)

    def _unicast(self, servo: EmulatedServo, instruction: int, params: bytes, now: float) -> tuple[int, bytes, str]:
        """Execute one instruction on one servo; return (error number, reply params, reply kind)."""
        if instruction == Instruction.PING:
            info = struct.pack("<HB", servo.get("Model Number"), servo.get("Firmware Version"))
            return ErrorNumber.NONE, info, "ping"
        if instruction == Instruction.READ:
            if len(params) != 4:
                return ErrorNumber.DATA_LENGTH, b"", "read"
            address, length = struct.unpack("<HH", params)
            error, data = servo.read(address, length)
            return error, data, "read"
        if instruction in (Instruction.WRITE, Instruction.REG_WRITE):
            if len(params) < 3:
                return ErrorNumber.DATA_LENGTH, b"", "write"
            (address,) = struct.unpack_from("<H", params)
            apply = servo.write if instruction == Instruction.WRITE else servo.reg_write
            return apply(address, params[2:]), b"", "write"
        if instruction == Instruction.ACTION:
            return servo.action(), b"", "write"
        if instruction == Instruction.REBOOT:
            servo.reboot()
            return ErrorNumber.NONE, b"", "reset"
        if instruction == Instruction.FACTORY_RESET:
            if len(params) != 1 or params[0] not in (0x01, 0x02, 0xFF):
                return ErrorNumber.DATA_RANGE, b"", "write"
            servo.factory_reset(params[0])
            return ErrorNumber.NONE, b"", "reset"
        if instruction == Instruction.CLEAR:
            if params != b"\x01\x44\x58\x4c\x22":
                return ErrorNumber.DATA_RANGE, b"", "write"
            moving = servo.get("Moving") == 1
            return (ErrorNumber.RESULT_FAIL if moving else ErrorNumber.NONE), b"", "write"
        return ErrorNumber.INSTRUCTION, b"", "write"

    def _sync_read(self, params: bytes, now: float) -> list[Reply]:
        try:
            address, length, ids = parse_sync_read(params)
        except MalformedPacketError:
            return []
        replies: list[Reply] = []
        for servo_id in ids:
            for servo in self._live(servo_id, now):
                if self._answers(servo.get("Status Return Level"), "read"):
                    error, data = servo.read(address, length)
                    replies += self._reply(servo, error, data)
        return self._collide(replies)

    def _sync_write(self, params: bytes, now: float) -> list[Reply]:
        try:
            address, _length, blocks = parse_sync_write(params)
        except MalformedPacketError:
            return []
        for servo_id, data in blocks.items():
            for servo in self._live(servo_id, now):
                servo.write(address, data)
        return []

    def _bulk_read(self, params: bytes, now: float) -> list[Reply]:
        try:
            requests = parse_bulk_read(params)
        except MalformedPacketError:
            return []
        replies: list[Reply] = []
        for servo_id, address, length in requests:
            for servo in self._live(servo_id, now):
                if self._answers(servo.get("Status Return Level"), "read"):
                    error, data = servo.read(address, length)
                    replies += self._reply(servo, error, data)
        return self._collide(replies)

    def _bulk_write(self, params: bytes, now: float) -> list[Reply]:
        try:
            writes = parse_bulk_write(params)
        except MalformedPacketError:
            return []
        for servo_id, address, data in writes:
            for servo in self._live(servo_id, now):
                servo.write(address, data)
        return []


# --- the pseudo-terminal ---------------------------------------------------------------------------------------


class PtyEmulator:
    """Serve an :class:`EmulatedBus` on a pseudo-terminal, for the real SDK to open.

    Args:
        bus: the emulated servos.
        link: optional symlink to create to the slave side (e.g. ``/tmp/ttyDXL``); replaced if it exists.
        control_path: optional Unix socket path for :func:`send_control`.
        honour_return_delay: sleep each servo's Return Delay Time before its reply.
        idle_period: how often the dynamics are advanced while no packet arrives [s] (they are always brought
            up to date before a packet is answered; this keeps a digital twin moving between commands).
        thread_priority: ``SCHED_FIFO`` priority of the serving thread (0: ordinary scheduling): a servo answers
            within its Return Delay Time however loaded the host is (:func:`retarget.processes.realtime_priority`).
    """

    def __init__(
        self,
        bus: EmulatedBus,
        link: str | Path | None = None,
        control_path: str | Path | None = None,
        honour_return_delay: bool = True,
        idle_period: float = 0.02,
        thread_priority: int = 0,
    ) -> None:
        self.bus = bus
        self.idle_period = idle_period
        self.thread_priority = thread_priority
        self.link = Path(link) if link else None
        self.control_path = Path(control_path) if control_path else None
        self.honour_return_delay = honour_return_delay
        self._master: int | None = None
        self._slave: int | None = None
        self.slave_name = ""
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._threads: list[threading.Thread] = []
        self._server: socket.socket | None = None
        self._io_lock = threading.Lock()
        # Port changes asked for while the serving thread runs: (action, done) pairs it executes itself, so a
        # descriptor number it still holds is never closed under it and reused (e.g. by a control connection).
        self._port_requests: list[tuple[Callable[[], None], threading.Event]] = []
        self._reader: threading.Thread | None = None

    @property
    def port(self) -> str:
        """The path a client opens: the symlink if any, else the slave device."""
        return str(self.link) if self.link else self.slave_name

    def start(self) -> PtyEmulator:
        """Create the pseudo-terminal (and link, control socket) and start serving."""
        self._open_pty()
        self._reader = threading.Thread(target=self._serve, name="dxl-emulator", daemon=True)
        self._reader.start()
        self._threads.append(self._reader)
        if self.control_path:
            self._start_control()
        return self

    def _open_pty(self) -> None:
        master, slave = os.openpty()
        tty.setraw(master)
        tty.setraw(slave)  # no echo, no line discipline: the client's bytes reach us verbatim
        with self._io_lock:
            self._master, self._slave = master, slave
            self.slave_name = os.ttyname(slave)
        if self.link:
            with atomic_path(self.link) as tmp:  # atomic: a client never sees a missing link during restore
                tmp.symlink_to(self.slave_name)  # an absolute target: the link means the same once moved
        self._wake()

    def _close_pty(self) -> None:
        with self._io_lock:
            for fd in (self._master, self._slave):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._master = self._slave = None
        self._wake()

    def vanish_port(self) -> None:
        """Close the pseudo-terminal and remove the link: the client's next I/O fails as for an unplugged adapter."""
        self._on_serving_thread(self._vanish)

    def restore_port(self) -> None:
        """Create a new pseudo-terminal (and re-point the link) after :meth:`vanish_port`."""
        self._on_serving_thread(self._restore)

    def _vanish(self) -> None:
        self._close_pty()
        if self.link:
            with contextlib.suppress(FileNotFoundError):
                self.link.unlink()

    def _restore(self) -> None:
        if self._master is None:
            self._open_pty()

    def _on_serving_thread(self, action: Callable[[], None], timeout: float = 5.0) -> None:
        """Run ``action`` (which opens or closes the pty) on the serving thread, or here if none is serving.

        The serving thread selects on, reads and writes the master descriptor; closing it from another thread
        would free its number for the next descriptor this process opens (a control connection, say), which the
        serving thread would then read from. Only the serving thread changes the pty while it runs.

        Raises:
            TimeoutError: the serving thread did not take the request within ``timeout`` seconds.
        """
        reader = self._reader
        if reader is None or not reader.is_alive() or threading.current_thread() is reader:
            action()
            return
        done = threading.Event()
        with self._io_lock:
            self._port_requests.append((action, done))
        self._wake()
        if not done.wait(timeout):
            raise TimeoutError(f"the emulator's serving thread did not change the port within {timeout} s")

    def _run_port_requests(self) -> bool:
        """Execute pending port changes (serving thread only); True if any ran (the master may have changed)."""
        with self._io_lock:
            requests, self._port_requests = self._port_requests, []
        for action, done in requests:
            try:
                action()
            finally:
                done.set()
        return bool(requests)

    def stop(self) -> None:
        """Stop serving, close everything, remove the link and the control socket."""
        self._stop.set()
        self._wake()
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self._run_port_requests()  # any asked for while stopping: nobody serves any more, release the waiters
        self._close_pty()
        for path in (self.link, self.control_path):
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    if path.is_symlink() or path.exists():
                        path.unlink()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> PtyEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _serve(self) -> None:
        refused = realtime_priority(self.thread_priority)
        if refused is not None:
            print(f"emulator: the bus is served with ordinary scheduling: {refused}", file=sys.stderr, flush=True)
        stream = PacketStream()
        while not self._stop.is_set():
            master = self._master
            fds = [self._wake_r] + ([master] if master is not None else [])
            try:
                ready, _, _ = select.select(fds, [], [], self.idle_period)
            except (OSError, ValueError):
                continue
            if self._wake_r in ready:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 1024)
                stream.clear()
                if self._run_port_requests():
                    continue  # the pty was closed or replaced: `master` is stale
            if master is None or master not in ready:
                self.bus.advance()
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:
                # EIO: no slave side is open (the client closed the port); wait for the next wake-up.
                time.sleep(self.bus.period)
                continue
            # The speed the client set on its side (master and slave share one termios): the servos hear only
            # what comes at their Baud Rate.
            baudrate = pty_baudrate(master)
            for frame in stream.feed(chunk):
                self._send(master, self.bus.handle(frame, baudrate))

    def _send(self, master: int, replies: list[Reply]) -> None:
        """Write one frame's status packets, each after its Return Delay Time.

        Packets with no delay before them go out in one write with the packets before them: a Sync Read of 13
        servos answered with Return Delay Time 0 is one system call and one wake-up of the reading driver, not 13.
        The byte stream is the same as with one write per packet.
        """
        pending = bytearray()
        for reply in replies:
            if self.honour_return_delay and reply.delay_s > 0:
                self._write(master, pending)
                pending.clear()
                time.sleep(reply.delay_s)
            pending += reply.data
        self._write(master, pending)

    @staticmethod
    def _write(master: int, data: bytes | bytearray) -> None:
        view = memoryview(bytes(data))
        with contextlib.suppress(OSError):
            while view:
                view = view[os.write(master, view):]

    # --- control channel -------------------------------------------------------------------------------------

    def _start_control(self) -> None:
        assert self.control_path is not None
        with contextlib.suppress(FileNotFoundError):
            self.control_path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.control_path))
        server.listen(4)
        self._server = server
        thread = threading.Thread(target=self._control_loop, name="dxl-emulator-control", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _control_loop(self) -> None:
        assert self._server is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10.0)  # generous: a loaded machine may pause the sender
                try:
                    line = conn.makefile("r").readline()
                    answer = self.control(json.loads(line))
                except Exception as exc:  # the channel must survive any bad request; the client sees the error
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                with contextlib.suppress(OSError):
                    conn.sendall((json.dumps(answer) + "\n").encode())

    def control(self, request: dict) -> dict:
        """Execute one control request (the same dicts :func:`send_control` sends).

        Commands: ``status``; ``fault`` (id, drop_replies, drop_next_replies, corrupt_crc, disconnected);
        ``hardware_error`` (id, errors: names, persistent); ``clear_faults`` (id optional);
        ``turn`` (id, position [rad] or by [rad]: a hand turns the shaft of a servo with torque off);
        ``vanish``; ``restore``. Servos are named by their ID now.

        Raises:
            InputError: unknown command or bad arguments.
        """
        cmd = request.get("cmd")
        if cmd == "status":
            return {"ok": True, "port": self.port, **self.bus.snapshot()}
        if cmd == "fault":
            self.bus.set_fault(
                int(request["id"]),
                drop_replies=request.get("drop_replies"),
                corrupt_crc=request.get("corrupt_crc"),
                disconnected=request.get("disconnected"),
                drop_next_replies=request.get("drop_next_replies"),
            )
        elif cmd == "hardware_error":
            self.bus.raise_hardware_error(
                int(request["id"]), list(request.get("errors", [])), bool(request.get("persistent", False))
            )
        elif cmd == "clear_faults":
            self.bus.clear_faults(request.get("id"))
        elif cmd == "turn":
            servo_id = int(request["id"])
            if "position" in request:
                target = float(request["position"])
            else:
                target = self.bus.snapshot()["present_position"][self.bus.ids.index(servo_id)] + float(request["by"])
            self.bus.turn_by_hand(servo_id, target)
        elif cmd == "vanish":
            self.vanish_port()
        elif cmd == "restore":
            self.restore_port()
        else:
            raise InputError(f"unknown emulator control command {cmd!r}")
        return {"ok": True}


#: termios speed constants (``termios.B57600`` ...) → bit/s.
_TERMIOS_SPEEDS = {getattr(termios, name): int(name[1:]) for name in dir(termios)
                   if name.startswith("B") and name[1:].isdigit()}
_BOTHER = 0o010000  # Linux: the speed is in termios2's c_ispeed (a rate without a B constant)
_TCGETS2 = 0x802C542A  # Linux ioctl: struct termios2 (44 bytes; c_ispeed at offset 36)


def pty_baudrate(fd: int) -> int | None:
    """The input speed [bit/s] set on a terminal (either side of a pseudo-terminal: they share one termios), or
    None if it cannot be read."""
    try:
        code = termios.tcgetattr(fd)[4]
    except termios.error:
        return None
    if code == _BOTHER:
        try:
            raw = fcntl.ioctl(fd, _TCGETS2, bytes(44))
        except OSError:
            return None
        return struct.unpack_from("<I", raw, 36)[0]
    return _TERMIOS_SPEEDS.get(code)


def send_control(path: str | Path, request: dict, timeout: float = 10.0) -> dict:
    """Send one control request to a running emulator's Unix socket and return its JSON answer.

    Example: ``send_control("/tmp/ttyDXL.ctl", {"cmd": "hardware_error", "id": 3, "errors": ["overload"]})``.

    Raises:
        InputError: the emulator answered with an error.
        OSError: no emulator listens there.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall((json.dumps(request) + "\n").encode())
        answer = json.loads(sock.makefile("r").readline())
    if not answer.get("ok"):
        raise InputError(f"emulator refused {request}: {answer.get('error')}")
    return answer


# --- command line ------------------------------------------------------------------------------------------------


def parse_ids(text: str) -> list[int]:
    """``"1,2,5-7"`` → ``[1, 2, 5, 6, 7]``.

    Raises:
        InputError: malformed list or an ID outside 0-252.
    """
    ids: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-"))
                ids.extend(range(lo, hi + 1))
            elif part:
                ids.append(int(part))
    except ValueError as exc:
        raise InputError(f"bad servo ID list {text!r}: use e.g. 1,2,5-7") from exc
    if not ids or any(not 0 <= i <= 252 for i in ids) or len(set(ids)) != len(ids):
        raise InputError(f"bad servo ID list {text!r}: distinct IDs in 0-252 needed")
    return ids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The emulator's options, shared by ``python -m`` and ``retarget emulate-bus``."""
    parser.add_argument("--ids", required=True, help="servo IDs, e.g. 1,2,3 or 1-13")
    parser.add_argument("--model", default=DEFAULT_SERVO_MODEL, type=_servo_model,
                        help=f"servo model, one of {', '.join(SERVO_MODELS)} (default {DEFAULT_SERVO_MODEL}): its "
                             "control table and ratings")
    parser.add_argument("--link", help="symlink to create to the pseudo-terminal (e.g. /tmp/ttyDXL)")
    parser.add_argument("--control", help="Unix socket for fault injection (default: LINK.ctl when --link is set)")
    parser.add_argument("--return-delay-us", type=float, default=None,
                        help="Return Delay Time at power-on [µs] (factory value 500)")
    parser.add_argument("--baud", type=_baud_rate, default=DEFAULT_BAUD_RATE,
                        help=f"the servos' Baud Rate at power-on [bit/s] (default {DEFAULT_BAUD_RATE}, the driver's; "
                             "servos leave the factory at 57600): they answer only a client whose port is set to "
                             "that rate")
    parser.add_argument("--positions", default=None,
                        help="power-on shaft angles [rad], one per ID, e.g. 0.3,-0.5 (default 0: tick 2048)")
    parser.add_argument("--period", type=float, default=0.002, help="servo model step [s]")
    parser.add_argument("--thread-priority", type=int, default=50, choices=range(100), metavar="0-99",
                        help="SCHED_FIFO priority of the thread serving the bus (default 50: the servos it stands in "
                             "for answer within their Return Delay Time however loaded the host; 0: ordinary "
                             "scheduling)")
    parser.add_argument("--json", action="store_true", help="print the ready line as JSON")
    parser.add_argument("--robot", help="robot name or description YAML: the servos' joints, offsets and "
                                        "directions come from its params file (in --ids order), their models "
                                        "from its servo: section (default: the --model's factory servo)")
    twin = parser.add_argument_group("digital twin (docs/twin.md)")
    twin.add_argument("--twin", choices=TWIN_CHOICES, default="servo",
                      help="servo: each servo's loop on its rotor alone; reduced: the servos' loops run in the "
                           "robot's reduced simulation (needs --robot), which reports their shafts and writes the "
                           "body poses to --twin-channel (the servos run alone, with one log line, when there is "
                           "no reduced model)")
    twin.add_argument("--reduced", default=None, help="reduced model file (.npz from `retarget reduce` or "
                                                      "cached by retarget plan); default: the planner's cache")
    twin.add_argument("--twin-channel", default=None, help="channel file the simulation writes "
                                                           "(default: LINK.poses)")
    twin.add_argument("--twin-dt", type=float, default=None, help="reduced engine step [s] (default 0.001)")
    twin.add_argument("--twin-max-lag", type=float, default=5.0,
                      help="simulation lag behind the servos that drops the backlog and restarts it at rest [s]")
    twin.add_argument("--twin-perturb", default="", metavar="KEY=VALUE,...",
                      help="the simulation runs a perturbed model: stiffness, damping, servo_kp, servo_kd factors, "
                           "latency [s] (docs/twin.md \"A twin that differs from the planner's model\")")


def _baud_rate(text: str) -> int:
    """``--baud``: a rate of :data:`~retarget.dynamixel.control_table.BAUD_RATES` [bit/s]."""
    try:
        value = int(text)
        baud_rate_index(value)
    except (ValueError, InputError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _positions(text: str | None, n: int) -> list[float] | None:
    """``--positions``: ``n`` comma-separated angles [rad]."""
    if text is None:
        return None
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError as exc:
        raise InputError(f"bad --positions {text!r}: comma-separated angles [rad]") from exc
    if len(values) != n:
        raise InputError(f"--positions has {len(values)} angles for {n} servos")
    return values


def _servo_model(text: str) -> str:
    """``--model``: a packaged model's name, case-insensitive (argparse reports the InputError's text)."""
    try:
        return load_control_table(model=text).model
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: Values of ``--twin``.
TWIN_CHOICES: tuple[str, ...] = ("servo", "reduced")


@dataclass(frozen=True)
class RobotBus:
    """What a robot's files say about the emulated servos, in the bus's ``--ids`` order.

    Attributes:
        joints: the joint of each servo. offsets: servo angle at joint 0 [rad]. directions: ±1.
        servos: each servo's model (the robot's ``servo:`` section; its ideal motors get the table model's factory
            servo: the bus emulates a servo loop).
    """

    joints: tuple[str, ...]
    offsets: tuple[float, ...]
    directions: tuple[float, ...]
    servos: tuple


def robot_bus(robot: str | Path, ids: Sequence[int], table: ControlTable) -> RobotBus:
    """The servos of ``robot`` on the IDs ``ids``: its params file's ``joint_names``, ``dynamixel_ids``,
    ``offsets``, ``directions`` and its description's servos.

    Raises:
        InputError: ``ids`` are not the robot's ``dynamixel_ids``, unknown robot, invalid ``servo:`` section.
    """
    from retarget.dynamixel.robot_servos import servos_for_joints
    from retarget.dynamixel.servo_loop import factory_servo
    from retarget.model.library import read_ros_parameters, resolve_params

    params = read_ros_parameters(resolve_params(robot))
    joints = [str(j) for j in params.get("joint_names") or []]
    robot_ids = [int(i) for i in params.get("dynamixel_ids") or []]
    if sorted(robot_ids) != sorted(ids):
        raise InputError(f"--ids {list(ids)} are not the robot's dynamixel_ids {robot_ids}")
    at = [robot_ids.index(i) for i in ids]
    servo_joints = tuple(joints[k] for k in at)
    # The driver maps servo = direction * joint + offset; unset means 0 and +1 (docs/ros.md).
    offsets = tuple(float((params.get("offsets") or [0.0] * len(joints))[k]) for k in at)
    directions = tuple(float((params.get("directions") or [1.0] * len(joints))[k]) for k in at)
    factory = factory_servo(table)
    servos = tuple(s if s is not None and not s.ideal else factory for s in servos_for_joints(robot, servo_joints))
    return RobotBus(servo_joints, offsets, directions, servos)


#: What starts ``--twin reduced``: ``twin(args, local, robot)`` → the servo dynamics and a function that stops what it
#: started (:func:`retarget.twin.emulator.reduced_twin`; the twin builds on this package, so it is passed in).
TwinStart = Callable[[argparse.Namespace, ServoDynamics, RobotBus | None], tuple[ServoDynamics, Callable[[], None]]]


def _twin_dynamics(args: argparse.Namespace, local: ServoDynamics, robot: RobotBus | None,
                   twin: TwinStart | None) -> tuple[ServoDynamics, Callable[[], None]]:
    """The servo dynamics for ``--twin`` and a function that stops what it started: the servos' own loops
    (``local``), or for ``reduced`` what ``twin`` starts (without one, one line on stderr says where it runs)."""
    if args.twin != "reduced":
        return local, lambda: None
    if twin is None:
        print("twin: the servos' own loops only: --twin reduced runs in `python -m retarget.twin.emulator` "
              "(or `retarget emulate-bus`)", file=sys.stderr, flush=True)
        return local, lambda: None
    return twin(args, local, robot)


def run(args: argparse.Namespace, twin: TwinStart | None = None) -> int:
    """Start the emulator from parsed arguments and serve until SIGINT/SIGTERM (``twin``: what starts
    ``--twin reduced``)."""
    from retarget.dynamixel.servo_loop import ServoLoop

    ids = parse_ids(args.ids)
    control = args.control or (f"{args.link}.ctl" if args.link else None)
    table = load_control_table(model=args.model)
    robot = robot_bus(args.robot, ids, table) if args.robot else None
    local = ServoLoop.for_table(len(ids), table, robot.servos if robot else None)
    dynamics, stop_twin = _twin_dynamics(args, local, robot, twin)
    bus = EmulatedBus(ids, dynamics=dynamics, table=table, period=args.period, return_delay_us=args.return_delay_us,
                      baudrate=args.baud, initial_positions=_positions(args.positions, len(ids)))
    emulator = PtyEmulator(bus, link=args.link, control_path=control, thread_priority=args.thread_priority)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    emulator.start()
    try:
        ready = {"port": emulator.port, "device": emulator.slave_name, "control": control, "ids": ids,
                 "model": table.model, "baud": args.baud}
        print(json.dumps(ready) if args.json else f"emulating {table.model} {ids} at {args.baud} bit/s on "
              f"{emulator.port} (device {emulator.slave_name}, control {control}); Ctrl-C to stop", flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        emulator.stop()
        stop_twin()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


def main(argv: Sequence[str] | None = None, twin: TwinStart | None = None,
         prog: str = "python -m retarget.dynamixel.emulator") -> int:
    """``python -m retarget.dynamixel.emulator`` (``twin``: what starts ``--twin reduced``,
    :mod:`retarget.twin.emulator`)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Emulated Dynamixel X-series servos (XM430-W210 by default) answering Protocol 2.0 on a "
                    "pseudo-terminal.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args, twin)
    except InputError as exc:
        print(f"emulator: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
