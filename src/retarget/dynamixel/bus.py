"""The Dynamixel driver core (no ROS): a bus of X-series servos of one model behind the real ``dynamixel_sdk``.

Layers, minimalmodbus style: public method → validate arguments (SI, joint space) → convert to ticks and frame
through the SDK (``PacketHandler(2.0)``, ``GroupSyncWrite``, ``GroupSyncRead``) → port I/O. Every SDK result is
mapped to an exception of :mod:`retarget.dynamixel.errors` naming the servo:

- ``COMM_RX_TIMEOUT`` → :class:`NoReplyError`; ``COMM_RX_CORRUPT`` → :class:`CrcError`;
- pyserial/OS errors (adapter unplugged, pseudo-terminal closed) → :class:`PortGoneError`;
- a status packet with a non-zero error number → :class:`DeviceError` (with the Hardware Error Status decoded
  when the alert bit is set and the register could be read);
- other SDK codes → :class:`CommunicationError`.

Protocol 2.0 status packets carry no sequence number, so a reply that comes after its request timed out (a busy
host, a USB adapter's latency timer) is read as the answer to the next request to that servo. The SDK checks only
the ID; every receive here also checks that the packet carries as many parameters as the request asks for
(:meth:`DynamixelBus._receive`) and skips the ones that do not, so a late one-byte reply is never decoded as a
two-byte model number or as an acknowledgement.

Alert-only status packets (bit 7 set, error number 0) mean the command was executed but the servo has a
latched hardware error. Writes and pings then succeed; :meth:`DynamixelBus.read_state` raises
:class:`DeviceError` (default) or reports them in :attr:`BusState.alert`.

Joint angles map to servo angles as ``servo = direction * joint + offset`` [rad], servo angle 0 = tick 2048.
"""
from __future__ import annotations

import math
import select
import termios
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import serial
from dynamixel_sdk import (
    COMM_RX_CORRUPT,
    COMM_RX_TIMEOUT,
    COMM_SUCCESS,
    DXL_MAKEWORD,
    GroupSyncRead,
    GroupSyncWrite,
    PacketHandler,
    PortHandler,
)

from retarget.dynamixel.control_table import (
    ControlTable,
    HardwareErrorStatus,
    OperatingMode,
    current_to_amperes,
    load_control_table,
    position_to_radians,
    rad_s2_to_profile_acceleration,
    rad_s_to_velocity,
    radians_to_position,
    velocity_to_rad_s,
)
from retarget.dynamixel.errors import (
    CommunicationError,
    CrcError,
    DeviceError,
    DynamixelError,
    GainMismatchError,
    GainOutOfRangeError,
    GoalOutOfRangeError,
    NoReplyError,
    PortGoneError,
    WrongModelError,
)
from retarget.dynamixel.protocol import (
    ALERT_BIT,
    BROADCAST_ID,
    PacketStream,
    decode_status,
    encode_instruction,
)
from retarget.dynamixel.protocol import ping as ping_packet
from retarget.errors import InputError
from retarget.model.servo import DEFAULT_CONTROL_PERIOD, ServoParams, table_from_si

__all__ = ["GAIN_ITEMS", "BroadcastPing", "BusState", "DynamixelBus", "servo_gain_values"]

#: The control-table items that set a servo's position loop, written by :meth:`DynamixelBus.write_servo_gains`.
GAIN_ITEMS: tuple[str, ...] = ("Position P Gain", "Position I Gain", "Position D Gain", "PWM Limit")

T = TypeVar("T")

# What a vanished port raises from inside pyserial: OSError/SerialException, termios.error from the ioctl behind
# in_waiting, TypeError when pyserial's fd is already None.
_PORT_ERRORS = (OSError, serial.SerialException, termios.error, TypeError)

# Present Current (126, 2 B), Present Velocity (128, 4 B), Present Position (132, 4 B): one contiguous block.
_STATE_ADDRESS = 126
_STATE_LENGTH = 10

# Protocol 2.0 framing (the SDK's packet layout): FF FF FD 00 ID LEN_L LEN_H INST ERR PARAM... CRC_L CRC_H, where
# LEN counts INST, ERR, the parameters and the CRC.
_ID, _LENGTH_L, _LENGTH_H, _INSTRUCTION, _ERROR, _PARAMETERS = 4, 5, 6, 7, 8, 9
_INST_PING = 0x01
_PING_PARAMETERS = 3  # model number (2 B), firmware version (1 B)
_STATUS_OVERHEAD = 11  # header, reserved, ID, LEN, INST, ERR, CRC


def servo_gain_values(table: ControlTable, ids: Sequence[int], servos: Sequence[ServoParams | None],
                      control_period: float = DEFAULT_CONTROL_PERIOD) -> dict[int, dict[str, int]]:
    """The control-table values of :data:`GAIN_ITEMS` that give each servo's loop, validated (pure).

    Args:
        table: the servos' control table (the items' ranges).
        ids: the servos' IDs.
        servos: per servo (``ids``' order) its parameters (:func:`retarget.model.servo.table_from_si`); None or an
            ideal one: nothing to write for that servo.
        control_period: the period the I and D gains assume [s].

    Returns:
        ``{id: {item: value}}`` of the servos that have gains.

    Raises:
        InputError: not one entry per servo. GainOutOfRangeError: a value outside its item's range (names the
            servo, item, value and range).
    """
    if len(servos) != len(ids):
        raise InputError(f"expected servo parameters for {len(ids)} servos, got {len(servos)}")
    out: dict[int, dict[str, int]] = {}
    for servo_id, params in zip(ids, servos):
        if params is None or params.ideal:
            continue
        values = table_from_si(params, control_period)
        for item in GAIN_ITEMS:
            spec = table[item]
            if spec.minimum is not None and not spec.minimum <= values[item] <= spec.maximum:
                raise GainOutOfRangeError(servo_id, item, values[item], spec.minimum, spec.maximum,
                                          params.describe())
        out[servo_id] = {item: values[item] for item in GAIN_ITEMS}
    return out


class _PortHandler(PortHandler):
    """The SDK's port with two changes that matter on a loaded host or a pseudo-terminal:

    - the reply timeout uses ``latency_timer_ms`` instead of the SDK's fixed 16 ms (its formula is
      ``bytes * byte_time + 2 * latency + 2`` [ms]); an emulator in another process on a busy 2-core machine can
      need more than the default 34 ms;
    - an empty read sleeps until the fd becomes readable or the reply is due (the SDK polls without waiting,
      spinning a whole core); the SDK's loop then reads what arrived or reports the timeout.
    """

    def __init__(self, port_name: str, latency_timer_ms: float) -> None:
        super().__init__(port_name)
        self.latency_timer_ms = latency_timer_ms

    def setPacketTimeout(self, packet_length: int) -> None:  # noqa: N802 (SDK method name)
        self.packet_start_time = self.getCurrentTime()
        self.packet_timeout = self.tx_time_per_byte * packet_length + 2.0 * self.latency_timer_ms + 2.0

    def readPort(self, length: int) -> bytes:  # noqa: N802
        if self.ser.in_waiting == 0:
            left_ms = self.packet_timeout - (self.getCurrentTime() - self.packet_start_time)
            select.select([self.ser.fileno()], [], [], min(max(left_ms, 0.0), 1000.0) * 1e-3)
        return self.ser.read(length)


@dataclass(frozen=True)
class BroadcastPing:
    """What answered a broadcast ping at one baud rate.

    Attributes:
        baudrate: the rate [bit/s].
        found: ``{ID: (model number, firmware version)}`` of the servos that answered.
        garbled: IDs whose answers arrived corrupt (two servos sharing an ID garble each other; or noise).
    """

    baudrate: int
    found: dict[int, tuple[int, int]]
    garbled: frozenset[int]


@dataclass(frozen=True)
class BusState:
    """One Sync Read of all servos, in joint space. Arrays have shape ``(n,)`` in the bus's servo order.

    Attributes:
        stamp: host monotonic time of the read [s].
        position: joint angles [rad].
        velocity: joint rates [rad/s].
        current: motor currents [A] (sign follows the joint direction).
        alert: servos whose status packet carried the alert bit (latched hardware error).
    """

    stamp: float
    position: np.ndarray
    velocity: np.ndarray
    current: np.ndarray
    alert: np.ndarray


class DynamixelBus:
    """A set of servos of one model (its control table) on one serial port.

    Args:
        port: device path (e.g. ``/dev/ttyUSB0`` or an emulator's link), or a ``PortHandler`` instance (tests
            pass a :class:`~retarget.dynamixel.loopback.LoopbackPort`).
        ids: servo IDs, in joint order.
        baudrate: [bit/s]; must match the servos' Baud Rate.
        offsets: servo angle at joint angle 0, shape ``(n,)`` [rad]; default 0.
        directions: +1 or -1 per joint, shape ``(n,)``; default +1.
        table: control table of the servos' model (default: packaged XM430-W210); :meth:`check_models` refuses
            servos of another model.
        boot_timeout: how long :meth:`reboot` waits for the servo to answer again [s].
        latency_timer_ms: USB latency allowance in the reply timeout (SDK default 16 ms: 34 ms per reply);
            raise it for an emulated bus on a loaded machine. Only used when ``port`` is a path.
    """

    def __init__(
        self,
        port: str | PortHandler,
        ids: Sequence[int],
        baudrate: int = 1_000_000,
        offsets: Sequence[float] | None = None,
        directions: Sequence[int] | None = None,
        table: ControlTable | None = None,
        boot_timeout: float = 1.0,
        latency_timer_ms: float = 16.0,
    ) -> None:
        self.ids = [int(i) for i in ids]
        n = len(self.ids)
        if n == 0 or len(set(self.ids)) != n or any(not 0 <= i <= 252 for i in self.ids):
            raise InputError(f"servo IDs must be distinct values in 0-252, got {list(ids)}")
        self.offsets = np.zeros(n) if offsets is None else np.asarray(offsets, dtype=float).reshape(-1)
        self.directions = np.ones(n) if directions is None else np.asarray(directions, dtype=float).reshape(-1)
        if self.offsets.shape != (n,) or not np.all(np.isfinite(self.offsets)):
            raise InputError(f"offsets must be {n} finite angles [rad], got {offsets}")
        if self.directions.shape != (n,) or not np.all(np.isin(self.directions, (-1.0, 1.0))):
            raise InputError(f"directions must be {n} values of +1 or -1, got {directions}")
        self.table = table or load_control_table()
        self.baudrate = int(baudrate)
        self.boot_timeout = boot_timeout
        if isinstance(port, str):
            self.port_name = port
            self._port: PortHandler = _PortHandler(port, latency_timer_ms)
        else:
            self.port_name = port.getPortName()
            self._port = port
        self._packet = PacketHandler(2.0)
        item = self.table["Goal Position"]
        self._goal_address, self._goal_size = item.address, item.size
        # Position-mode limits in ticks per servo; refreshed from the servos by configure().
        lo, hi = self.table["Min Position Limit"].initial, self.table["Max Position Limit"].initial
        self._tick_limits = {i: (lo, hi) for i in self.ids}

    # --- port --------------------------------------------------------------------------------------------------

    def open(self) -> DynamixelBus:
        """Open the port at :attr:`baudrate`.

        Raises:
            PortGoneError: the device does not exist or cannot be opened.
            InputError: the baud rate is not one the SDK supports.
        """
        if self._port.getCFlagBaud(self.baudrate) <= 0:
            raise InputError(f"baud rate {self.baudrate} is not supported by dynamixel_sdk")
        self._port.baudrate = self.baudrate
        try:
            self._port.openPort()
        except _PORT_ERRORS as exc:
            self._port.is_open = False
            raise PortGoneError(self.port_name, str(exc)) from exc
        return self

    def close(self) -> None:
        """Close the port; never raises (the device may already be gone)."""
        try:
            if self._port.is_open:
                self._port.closePort()
        except (*_PORT_ERRORS, AttributeError):
            pass
        self._port.is_open = False
        self._port.is_using = False

    def reopen(self) -> None:
        """Close and open again (after the port vanished and came back)."""
        self.close()
        self.open()

    def set_baudrate(self, baudrate: int) -> None:
        """Talk at ``baudrate`` [bit/s] from now on (the port is reopened at it if open).

        Raises:
            InputError: not a rate the SDK supports. PortGoneError.
        """
        if self._port.getCFlagBaud(int(baudrate)) <= 0:
            raise InputError(f"baud rate {baudrate} is not supported by dynamixel_sdk")
        self.baudrate = int(baudrate)
        if self.is_open:
            self.reopen()

    @property
    def port_handler(self) -> PortHandler:
        """The SDK port this bus talks through (another :class:`DynamixelBus`, e.g. with another model's table,
        can share it)."""
        return self._port

    @property
    def is_open(self) -> bool:
        return bool(self._port.is_open)

    def __enter__(self) -> DynamixelBus:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- SDK call wrapper -------------------------------------------------------------------------------------

    def _io(self, servo_id: int | None, fn: Callable[..., T], *args: object) -> T:
        """Run one SDK call; turn OS/pyserial failures into PortGoneError and release the SDK's port lock."""
        if not self._port.is_open:
            raise PortGoneError(self.port_name, "port is not open", servo_id)
        try:
            return fn(*args)
        except _PORT_ERRORS as exc:
            self._port.is_using = False
            self.close()
            raise PortGoneError(self.port_name, str(exc) or type(exc).__name__, servo_id) from exc

    def _check(self, servo_id: int, result: int, error: int, what: str, alert_is_error: bool = False) -> None:
        """Map one SDK (result, error byte) pair to an exception, or return when all is well."""
        if result == COMM_SUCCESS:
            number = error & 0x7F
            if number or (alert_is_error and error & ALERT_BIT):
                hardware = self._hardware_error_or_none(servo_id) if error & ALERT_BIT else None
                raise DeviceError(servo_id, error, hardware, what)
            return
        self._flush()
        if result == COMM_RX_TIMEOUT:
            raise NoReplyError(servo_id, what)
        if result == COMM_RX_CORRUPT:
            raise CrcError(servo_id)
        raise CommunicationError(servo_id, result, self._packet.getTxRxResult(result))

    def _send(self, servo_id: int, fn: Callable[..., int], *args: object) -> None:
        """Send one instruction packet through the SDK (``fn`` returns its result code)."""
        result = self._io(servo_id, fn, *args)
        if result != COMM_SUCCESS:
            self._flush()
            raise CommunicationError(servo_id, result, self._packet.getTxRxResult(result))

    def _receive(self, servo_id: int, parameters: int, what: str) -> bytes:
        """The parameters of ``servo_id``'s status packet answering ``what`` (see :meth:`_receive_status`); a
        status with an error number raises :class:`DeviceError`."""
        data, error = self._receive_status(servo_id, parameters, what)
        self._check(servo_id, COMM_SUCCESS, error, what)
        return data

    def _receive_status(self, servo_id: int, parameters: int, what: str) -> tuple[bytes, int]:
        """Receive ``servo_id``'s status packet with ``parameters`` parameter bytes within the packet timeout
        already set; return its parameters and error byte.

        Status packets from other servos, and from this one with another parameter count (a reply that came after
        its own request timed out), are skipped. A status with an error number carries no parameters, so one
        answering a read is returned as an empty block with its error byte.

        Raises:
            NoReplyError, CrcError, CommunicationError (the port's result), PortGoneError.
        """
        while True:
            packet, result = self._io(servo_id, self._packet.rxPacket, self._port, False)
            if result != COMM_SUCCESS:
                self._check(servo_id, result, 0, what)
            if packet[_ID] != servo_id:
                continue
            count = DXL_MAKEWORD(packet[_LENGTH_L], packet[_LENGTH_H]) - 4
            error = int(packet[_ERROR])
            if count == parameters:
                return bytes(packet[_PARAMETERS:_PARAMETERS + count]), error
            if count == 0 and error & 0x7F:
                return b"", error

    def _flush(self) -> None:
        """After a failed exchange, let late bytes arrive and drop them so the next reply is not misread."""
        time.sleep(0.002)
        try:
            if self._port.is_open:
                self._port.clearPort()
        except _PORT_ERRORS:
            pass
        self._port.is_using = False

    def _hardware_error_or_none(self, servo_id: int) -> int | None:
        """Read Hardware Error Status without raising (used while building another error)."""
        item = self.table["Hardware Error Status"]
        try:
            self._send(servo_id, self._packet.readTx, self._port, servo_id, item.address, item.size)
            data, _ = self._receive_status(servo_id, item.size, "read Hardware Error Status")
        except DynamixelError:
            return None
        return item.decode(data) if len(data) == item.size else None

    # --- single-servo access ------------------------------------------------------------------------------------

    def ping(self, servo_id: int) -> int:
        """Ping one servo; return its model number.

        Raises:
            NoReplyError, CrcError, PortGoneError, DeviceError.
        """
        packet = [0] * 10
        packet[_ID], packet[_LENGTH_L], packet[_LENGTH_H], packet[_INSTRUCTION] = servo_id, 3, 0, _INST_PING
        self._send(servo_id, self._packet.txPacket, self._port, packet)
        self._port.setPacketTimeout(_STATUS_OVERHEAD + _PING_PARAMETERS)
        params = self._receive(servo_id, _PING_PARAMETERS, "ping")
        return DXL_MAKEWORD(params[0], params[1])

    def check_models(self) -> dict[int, int]:
        """Ping every servo and check it is the configured model; return {ID: firmware version}.

        Raises:
            WrongModelError: a servo of another model answered.
        """
        firmware = {}
        for servo_id in self.ids:
            model = self.ping(servo_id)
            if model != self.table.model_number:
                raise WrongModelError(servo_id, self.table.model_number, model)
            firmware[servo_id] = self.read(servo_id, "Firmware Version")
        return firmware

    def read(self, servo_id: int, name: str) -> int:
        """Read one control table item (raw units).

        Raises:
            InputError: unknown item. NoReplyError, CrcError, PortGoneError, DeviceError.
        """
        item = self.table[name]
        # readTx sets the packet timeout for a reply of item.size bytes.
        self._send(servo_id, self._packet.readTx, self._port, servo_id, item.address, item.size)
        return item.decode(self._receive(servo_id, item.size, f"read {name}"))

    def write(self, servo_id: int, name: str, value: int) -> None:
        """Write one control table item (raw units) and wait for the status packet.

        Raises:
            InputError: unknown item or value out of the item's size. NoReplyError, CrcError, PortGoneError,
            DeviceError (e.g. access error for an EEPROM item with torque on).
        """
        item = self.table[name]
        data = list(item.encode(value))
        self._send(servo_id, self._packet.writeTxOnly, self._port, servo_id, item.address, item.size, data)
        self._port.setPacketTimeout(_STATUS_OVERHEAD)
        self._receive(servo_id, 0, f"write {name}={value}")

    def scan(self) -> dict[int, int]:
        """Broadcast ping; return {ID: model number} of every servo that answered (takes ~1 s, SDK timeout)."""
        found, result = self._io(None, self._packet.broadcastPing, self._port)
        if result not in (COMM_SUCCESS, COMM_RX_TIMEOUT, COMM_RX_CORRUPT):
            raise CommunicationError(None, result, self._packet.getTxRxResult(result))
        return {int(i): int(v[0]) for i, v in found.items()}

    def broadcast_ping(self, wait_s: float | None = None) -> BroadcastPing:
        """Ping every ID at once (Protocol 2.0 broadcast ping) and collect the answers at this baud rate.

        Unlike the SDK's ``broadcastPing`` this keeps the IDs of answers that arrive corrupt: two servos sharing an
        ID answer together and garble each other, and that is worth saying (``retarget servos scan``).

        Args:
            wait_s: how long to listen [s]; default the SDK's window for 253 answers of 14 bytes at this rate
                plus 3 ms per ID (1.4 s at 57 600 bit/s, 0.8 s at 1 Mbit/s, 4.5 s at 9 600 bit/s).

        Raises:
            PortGoneError.
        """
        if wait_s is None:
            byte_ms = 10_000.0 / self.baudrate
            wait_s = (14 * 253 * byte_ms + 3.0 * 253 + 16.0) * 1e-3
        frame = encode_instruction(ping_packet(BROADCAST_ID))
        self._io(None, self._port.clearPort)
        self._io(None, self._port.writePort, list(frame))
        stream = PacketStream()
        found: dict[int, tuple[int, int]] = {}
        garbled: set[int] = set()
        deadline = time.monotonic() + wait_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._port.packet_start_time = self._port.getCurrentTime()
            self._port.packet_timeout = left * 1e3
            chunk = self._io(None, self._port.readPort, 4096)
            if not chunk and not isinstance(self._port, _PortHandler):
                time.sleep(min(left, 0.005))  # a port that does not wait for bytes (the loopback port)
            for raw in stream.feed(bytes(chunk)):
                try:
                    status = decode_status(raw)
                except CrcError as exc:
                    if exc.servo_id is not None:
                        garbled.add(int(exc.servo_id))
                    continue
                except DynamixelError:
                    continue
                if len(status.params) == _PING_PARAMETERS:
                    found[status.servo_id] = (DXL_MAKEWORD(status.params[0], status.params[1]), status.params[2])
        self._port.is_using = False
        return BroadcastPing(self.baudrate, found, frozenset(garbled - set(found)))

    # --- all servos ---------------------------------------------------------------------------------------------

    def configure(
        self,
        operating_mode: OperatingMode = OperatingMode.POSITION,
        return_delay_us: float | None = None,
        profile_velocity: float | None = None,
        profile_acceleration: float | None = None,
    ) -> None:
        """Torque off, then set operating mode, return delay and motion profile on every servo.

        Args:
            operating_mode: only position modes are supported by :meth:`write_goal_positions`.
            return_delay_us: Return Delay Time [µs] (0-508, steps of 2); None leaves it.
            profile_velocity: [rad/s], 0 for unlimited; None leaves it.
            profile_acceleration: [rad/s²], 0 for unlimited; None leaves it.

        Raises:
            InputError: out-of-range arguments. Bus errors as in :meth:`write`.
        """
        if return_delay_us is not None and not 0 <= return_delay_us <= 508:
            raise InputError(f"return delay {return_delay_us} µs outside 0-508 µs")
        for value, label in ((profile_velocity, "profile velocity"), (profile_acceleration, "profile acceleration")):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InputError(f"{label} must be finite and >= 0, got {value}")
        self.set_torque(False)
        for servo_id in self.ids:
            if self.read(servo_id, "Operating Mode") != int(operating_mode):
                self.write(servo_id, "Operating Mode", int(operating_mode))
            if return_delay_us is not None:
                self.write(servo_id, "Return Delay Time", int(round(return_delay_us / 2.0)))
            if profile_velocity is not None:
                self.write(servo_id, "Profile Velocity", int(rad_s_to_velocity(profile_velocity)))
            if profile_acceleration is not None:
                self.write(servo_id, "Profile Acceleration", int(rad_s2_to_profile_acceleration(profile_acceleration)))
            self._tick_limits[servo_id] = (
                self.read(servo_id, "Min Position Limit"),
                self.read(servo_id, "Max Position Limit"),
            )

    def servo_gains(self, servos: Sequence[ServoParams | None],
                    control_period: float = DEFAULT_CONTROL_PERIOD) -> dict[int, dict[str, int]]:
        """The control-table values of :data:`GAIN_ITEMS` that give each servo's loop, validated (pure):
        :func:`servo_gain_values` for this bus's servos and table."""
        return servo_gain_values(self.table, self.ids, servos, control_period)

    def write_servo_gains(self, servos: Sequence[ServoParams | None],
                          control_period: float = DEFAULT_CONTROL_PERIOD) -> dict[int, dict[str, int]]:
        """Write each servo's Position P/I/D Gain and PWM Limit from its parameters and read them back.

        Every value is converted and checked before anything is written (:meth:`servo_gains`). PWM Limit is an
        EEPROM item: call this with torque off (after :meth:`configure`); a servo with torque on answers an access
        error (:class:`DeviceError`).

        Returns:
            ``{id: {item: value}}`` as written and read back.

        Raises:
            GainOutOfRangeError: nothing written. GainMismatchError: a value read back differs from the one written.
            NoReplyError, CrcError, PortGoneError, DeviceError.
        """
        wanted = self.servo_gains(servos, control_period)
        for servo_id, values in wanted.items():
            for item, value in values.items():
                self.write(servo_id, item, value)
        for servo_id, values in wanted.items():
            for item, value in values.items():
                got = self.read(servo_id, item)
                if got != value:
                    raise GainMismatchError(servo_id, item, value, got)
        return wanted

    def set_torque(self, enabled: bool, ids: Sequence[int] | None = None) -> None:
        """Torque Enable on (1) or off (0) for ``ids`` (default all), one acknowledged write each.

        Raises:
            DeviceError: e.g. Result Fail when enabling a servo in hardware-error shutdown (reboot it first).
            NoReplyError, CrcError, PortGoneError.
        """
        for servo_id in self.ids if ids is None else ids:
            self.write(servo_id, "Torque Enable", 1 if enabled else 0)

    def safe_torque_off(self, attempts: int = 2) -> dict[int, DynamixelError]:
        """Best effort torque off on every servo; never raises.

        A write whose reply is lost or corrupt has usually been executed all the same, so the servo's Torque
        Enable is read back before it counts as failed; the write and the read are tried ``attempts`` times.

        Returns:
            The last error of each servo whose torque state is unknown (it could not be written nor read back as
            off; with the port gone, every servo not yet done); an empty dict: torque is off on every servo.
        """
        failed: dict[int, DynamixelError] = {}
        for servo_id in self.ids:
            error = self._torque_off_one(servo_id, attempts)
            if error is not None:
                failed[servo_id] = error
                if isinstance(error, PortGoneError):
                    for rest in self.ids:
                        failed.setdefault(rest, error)
                    break
        return failed

    def _torque_off_one(self, servo_id: int, attempts: int) -> DynamixelError | None:
        """Torque Enable = 0 on one servo, confirmed by its reply or by reading it back; the last error if neither
        worked."""
        error: DynamixelError | None = None
        for _ in range(max(1, attempts)):
            try:
                self.write(servo_id, "Torque Enable", 0)
                return None
            except PortGoneError as exc:
                return exc
            except DynamixelError as exc:
                error = exc
            try:
                if self.read(servo_id, "Torque Enable") == 0:
                    return None
            except PortGoneError as exc:
                return exc
            except DynamixelError as exc:
                error = exc
        return error

    def joint_to_ticks(self, joint_positions: np.ndarray) -> np.ndarray:
        """Joint angles [rad] (n,) → Goal Position ticks (n,), validated against each servo's limits.

        Raises:
            GoalOutOfRangeError: a value is not finite or lies outside the servo's position limits.
        """
        q = np.asarray(joint_positions, dtype=float).reshape(-1)
        if q.shape != (len(self.ids),):
            raise InputError(f"expected {len(self.ids)} joint positions, got shape {np.shape(joint_positions)}")
        servo = self.directions * q + self.offsets
        ticks = radians_to_position(np.where(np.isfinite(servo), servo, 0.0))
        for k, servo_id in enumerate(self.ids):
            lo, hi = self._tick_limits[servo_id]
            if not math.isfinite(q[k]) or not lo <= ticks[k] <= hi:
                bounds = sorted(
                    self.directions[k] * (position_to_radians(t) - self.offsets[k]) for t in (lo, hi)
                )
                raise GoalOutOfRangeError(servo_id, float(q[k]), bounds[0], bounds[1])
        return ticks

    def write_goal_positions(self, joint_positions: np.ndarray) -> None:
        """Sync Write Goal Position of every servo (one broadcast packet, no reply).

        Args:
            joint_positions: (n,) joint angles [rad] in the bus's servo order.

        Raises:
            GoalOutOfRangeError: nothing is sent when any value is invalid.
            PortGoneError, CommunicationError.
        """
        ticks = self.joint_to_ticks(joint_positions)
        group = GroupSyncWrite(self._port, self._packet, self._goal_address, self._goal_size)
        for servo_id, tick in zip(self.ids, ticks):
            group.addParam(servo_id, list(int(tick).to_bytes(4, "little", signed=True)))
        result = self._io(None, group.txPacket)
        if result != COMM_SUCCESS:
            self._flush()
            raise CommunicationError(None, result, self._packet.getTxRxResult(result))

    def read_state(self, raise_on_alert: bool = True) -> BusState:
        """Sync Read present current, velocity and position of every servo.

        Args:
            raise_on_alert: raise :class:`DeviceError` (Hardware Error Status decoded) for the first servo whose
                reply carries the alert bit; False reports it in :attr:`BusState.alert` instead.

        Raises:
            NoReplyError / CrcError naming the first servo whose reply is missing or corrupt; DeviceError;
            PortGoneError.
        """
        group = GroupSyncRead(self._port, self._packet, _STATE_ADDRESS, _STATE_LENGTH)
        for servo_id in self.ids:
            group.addParam(servo_id)
        stamp = time.monotonic()
        result = self._io(None, group.txPacket)
        if result != COMM_SUCCESS:
            self._flush()
            raise CommunicationError(None, result, self._packet.getTxRxResult(result))
        n = len(self.ids)
        raw = np.zeros((n, 3), dtype=np.int64)
        alert = np.zeros(n, dtype=bool)
        errors = np.zeros(n, dtype=np.int64)
        for k, servo_id in enumerate(self.ids):
            # Per-servo receive (not group.rxPacket) to keep each servo's ERR byte and to name the silent one.
            block, error = self._receive_status(servo_id, _STATE_LENGTH,
                                                f"sync read {_STATE_ADDRESS}+{_STATE_LENGTH}")
            raw[k] = (
                int.from_bytes(block[0:2], "little", signed=True),
                int.from_bytes(block[2:6], "little", signed=True),
                int.from_bytes(block[6:10], "little", signed=True),
            )
            alert[k] = bool(error & ALERT_BIT)
            errors[k] = error
        if raise_on_alert and alert.any():
            k = int(np.argmax(alert))
            servo_id = self.ids[k]
            raise DeviceError(servo_id, int(errors[k]), self._hardware_error_or_none(servo_id), "sync read")
        servo_position = position_to_radians(raw[:, 2])
        return BusState(
            stamp=stamp,
            position=self.directions * (servo_position - self.offsets),
            velocity=self.directions * velocity_to_rad_s(raw[:, 1]),
            current=self.directions * current_to_amperes(raw[:, 0]),
            alert=alert,
        )

    def read_hardware_errors(self) -> dict[int, HardwareErrorStatus]:
        """Hardware Error Status of every servo, decoded (``.names()`` gives readable text).

        Raises:
            NoReplyError, CrcError, PortGoneError.
        """
        return {i: HardwareErrorStatus(self.read(i, "Hardware Error Status")) for i in self.ids}

    def reboot(self, servo_id: int) -> None:
        """Reboot one servo (clears a hardware-error shutdown; torque comes back off) and wait until it answers.

        Raises:
            NoReplyError: it did not answer within :attr:`boot_timeout`. CrcError, PortGoneError, DeviceError.
        """
        result, error = self._io(servo_id, self._packet.reboot, self._port, servo_id)
        self._check(servo_id, result, error, "reboot")
        deadline = time.monotonic() + self.boot_timeout
        while True:
            time.sleep(0.01)
            try:
                self.ping(servo_id)
                return
            except (NoReplyError, CrcError):
                if time.monotonic() > deadline:
                    raise
