"""One emulated X-series servo: its control table memory and the rules a real one applies to reads and writes.

The rules (ROBOTIS e-manual, XM430-W210, XM540-W270 and Protocol 2.0 pages):

- an item is written whole or not at all; a write that covers part of an item is a Data Length error (0x05);
- writing a read-only item, an address no item covers, or any EEPROM item while Torque Enable is 1 is an Access
  error (0x07);
- a value outside the item's range is a Data Range error (0x04); a Goal Position outside Min/Max Position Limit
  in position mode is a Data Limit error (0x06);
- a write is validated in full before anything is applied;
- a hardware error latches bits in Hardware Error Status (70), sets the alert bit (0x80) of every status packet,
  and — for the bits enabled in Shutdown (63), default overload | electrical shock | overheating — clears
  Torque Enable. Only a reboot clears the latch. Writing Torque Enable = 1 during a shutdown is answered with
  Result Fail (0x01) and has no effect (the e-manual says reboot is the only way back; the exact error code a
  real servo returns here is not documented, this is an assumption);
- Goal Position accepts writes with torque off; the shaft only moves with torque on;
- at power-on and after a reboot the RAM area takes its initial values and Goal Position equals Present Position.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retarget.dynamixel.control_table import (
    ControlTable,
    OperatingMode,
    current_to_amperes,
    amperes_to_current,
    position_to_radians,
    profile_acceleration_to_rad_s2,
    rad_s_to_velocity,
    radians_to_position,
    velocity_to_rad_s,
)
from retarget.dynamixel.dynamics import ServoCommand, ServoFeedback
from retarget.dynamixel.protocol import ErrorNumber
from retarget.errors import InputError
from retarget.model.servo import PWM_FULL_SCALE

__all__ = ["COMMAND_ITEMS", "EmulatedServo", "ServoFaults", "command_from_raw", "feedback_to_raw"]

_EXTENDED_POSITION_LIMIT = 1_048_575


@dataclass
class ServoFaults:
    """Faults injected into one emulated servo.

    Attributes:
        drop_replies: process instructions but never answer (a reply lost on the wire).
        drop_next_replies: process instructions, and lose this many of the next replies (a short burst).
        corrupt_crc: answer with a wrong CRC.
        disconnected: ignore everything (unplugged).
        persistent_hardware_error: Hardware Error Status bits that come back after every reboot until cleared
            (the condition itself persists, e.g. the motor is still hot).
    """

    drop_replies: bool = False
    drop_next_replies: int = 0
    corrupt_crc: bool = False
    disconnected: bool = False
    persistent_hardware_error: int = 0


class EmulatedServo:
    """Control-table memory and access rules of one servo.

    Args:
        servo_id: its ID (0-252).
        table: the model's control table.
        position_rad: power-on shaft angle [rad].
    """

    def __init__(self, servo_id: int, table: ControlTable, position_rad: float = 0.0) -> None:
        self.table = table
        # Byte span and signedness of each item by name: the emulated bus reads ≈ 130 items per Sync Read of 13
        # servos, and this lookup is most of each read's cost.
        self._spans = {it.name: (it.address, it.address + it.size, it.signed) for it in table.items}
        self.faults = ServoFaults()
        self.registered: tuple[int, bytes] | None = None
        self.image = table.initial_image()
        self._set("ID", servo_id)
        self.power_on(position_rad)

    # --- raw access ------------------------------------------------------------------------------------------

    def get(self, name: str) -> int:
        """Raw value of an item."""
        try:
            start, end, signed = self._spans[name]
        except KeyError:
            raise InputError(f"{self.table.model}: no control table item {name!r}") from None
        return int.from_bytes(self.image[start:end], "little", signed=signed)

    def _set(self, name: str, value: int) -> None:
        item = self.table[name]
        self.image[item.address : item.address + item.size] = item.encode(value)

    @property
    def servo_id(self) -> int:
        return self.get("ID")

    @property
    def torque_enabled(self) -> bool:
        return self.get("Torque Enable") == 1

    @property
    def hardware_error(self) -> int:
        return self.get("Hardware Error Status")

    @property
    def alert(self) -> bool:
        """True while any Hardware Error Status bit is latched (sets bit 7 of every status ERR byte)."""
        return self.hardware_error != 0

    @property
    def return_delay_s(self) -> float:
        """Return Delay Time [s]."""
        return self.get("Return Delay Time") * 2e-6

    # --- life cycle ------------------------------------------------------------------------------------------

    def power_on(self, position_rad: float | None = None) -> None:
        """Reset the RAM area to initial values (EEPROM kept); Goal Position := Present Position."""
        keep_position = self.get("Present Position") if position_rad is None else radians_to_position(position_rad)
        fresh = self.table.initial_image()
        for item in self.table.items:
            if item.area == "RAM":
                self.image[item.address : item.address + item.size] = fresh[item.address : item.address + item.size]
        self._set("Present Position", keep_position)
        self._set("Position Trajectory", keep_position)
        self._set("Goal Position", keep_position)
        self.registered = None
        if self.faults.persistent_hardware_error:
            self.raise_hardware_error(self.faults.persistent_hardware_error)

    def reboot(self) -> None:
        """What the Reboot instruction does after its status packet: power-on, hardware errors cleared."""
        self.power_on(None)

    def factory_reset(self, option: int) -> None:
        """Reset to factory values; option 0x01 keeps the ID, 0x02 keeps the ID and the baud rate."""
        servo_id, baud = self.get("ID"), self.get("Baud Rate")
        position = self.get("Present Position")
        self.image = self.table.initial_image()
        if option in (0x01, 0x02):
            self._set("ID", servo_id)
        if option == 0x02:
            self._set("Baud Rate", baud)
        self.power_on(position_to_radians(position))

    def raise_hardware_error(self, bits: int) -> None:
        """Latch Hardware Error Status bits; shut down (torque off) for the bits enabled in Shutdown (63)."""
        self._set("Hardware Error Status", self.hardware_error | (bits & 0xFF))
        if bits & self.get("Shutdown"):
            self._set("Torque Enable", 0)

    @property
    def in_shutdown(self) -> bool:
        """True when a latched error is one that Shutdown (63) turns into torque off."""
        return bool(self.hardware_error & self.get("Shutdown"))

    # --- instruction semantics -------------------------------------------------------------------------------

    def read(self, address: int, length: int) -> tuple[int, bytes]:
        """Read ``length`` bytes at ``address``; returns (error number, data)."""
        if length <= 0 or address < 0 or address + length > self.table.size:
            return ErrorNumber.ACCESS, b""
        return ErrorNumber.NONE, bytes(self.image[address : address + length])

    def check_write(self, address: int, data: bytes) -> int:
        """Error number a write of ``data`` at ``address`` would get (0: it would be applied)."""
        length = len(data)
        if length == 0 or address < 0 or address + length > self.table.size:
            return ErrorNumber.ACCESS
        items = self.table.overlapping(address, length)
        covered = sum(it.size for it in items)
        for it in items:
            if it.address < address or it.address + it.size > address + length:
                return ErrorNumber.DATA_LENGTH
        if covered != length:
            return ErrorNumber.ACCESS
        for it in items:
            if it.access != "RW" or (it.area == "EEPROM" and self.torque_enabled):
                return ErrorNumber.ACCESS
        for it in items:
            value = it.decode(data[it.address - address : it.address - address + it.size])
            if it.minimum is not None and not it.minimum <= value <= it.maximum:
                return ErrorNumber.DATA_RANGE
            if it.name == "Goal Position":
                error = self._check_goal_position(value)
                if error:
                    return error
            if it.name == "Torque Enable" and value == 1 and self.in_shutdown:
                return ErrorNumber.RESULT_FAIL
        return ErrorNumber.NONE

    def _check_goal_position(self, value: int) -> int:
        mode = self.get("Operating Mode")
        if mode == OperatingMode.POSITION:
            if not self.get("Min Position Limit") <= value <= self.get("Max Position Limit"):
                return ErrorNumber.DATA_LIMIT
        elif not -_EXTENDED_POSITION_LIMIT <= value <= _EXTENDED_POSITION_LIMIT:
            return ErrorNumber.DATA_RANGE
        return ErrorNumber.NONE

    def write(self, address: int, data: bytes) -> int:
        """Validate and apply a write; returns the error number (nothing is applied unless it is 0)."""
        error = self.check_write(address, data)
        if error == ErrorNumber.NONE:
            self.image[address : address + len(data)] = data
        return error

    def reg_write(self, address: int, data: bytes) -> int:
        """Register a write for a later Action (validated now and again at Action time)."""
        error = self.check_write(address, data)
        if error == ErrorNumber.NONE:
            self.registered = (address, bytes(data))
            self._set("Registered Instruction", 1)
        return error

    def action(self) -> int:
        """Apply the registered write; Instruction error when none is registered."""
        if self.registered is None:
            return ErrorNumber.INSTRUCTION
        address, data = self.registered
        self.registered = None
        self._set("Registered Instruction", 0)
        return self.write(address, data)

    # --- coupling to the dynamics (SI) -----------------------------------------------------------------------

    def command_raw(self) -> tuple[int, ...]:
        """Raw values of :data:`COMMAND_ITEMS`, in that order (see :func:`command_from_raw`)."""
        return tuple(self.get(name) for name in COMMAND_ITEMS)

    def command_si(self) -> tuple[float, bool, float, float, float]:
        """(goal [rad], torque on, profile velocity [rad/s], profile acceleration [rad/s²], velocity limit [rad/s]).

        A profile value of 0 means unlimited (``inf``). Time-based profiles (Drive Mode bit 2) are not emulated.
        """
        command = command_from_raw(np.array([self.command_raw()]))
        return (
            float(command.goal_position[0]),
            bool(command.torque_enabled[0]),
            float(command.profile_velocity[0]),
            float(command.profile_acceleration[0]),
            float(command.velocity_limit[0]),
        )

    def present_si(self) -> tuple[float, float, float]:
        """(Present Position [rad], Present Velocity [rad/s], Present Current [A])."""
        return (
            float(position_to_radians(self.get("Present Position"))),
            float(velocity_to_rad_s(self.get("Present Velocity"))),
            float(current_to_amperes(self.get("Present Current"))),
        )

    def set_present_raw(self, position: int, velocity: int, current: int, tick_ms: int, pwm: int = 0) -> None:
        """Store the dynamics' feedback, in raw units (:func:`feedback_to_raw`), in the RAM area with the derived
        Moving flag and the Realtime Tick ``tick_ms`` [ms] (modulo 32768)."""
        self._set("Present Position", position)
        self._set("Present Velocity", velocity)
        self._set("Present Current", current)
        self._set("Present PWM", pwm)
        self._set("Moving", int(abs(velocity) > self.get("Moving Threshold")))
        self._set("Realtime Tick", tick_ms % 32768)


#: The items a servo's controller acts on, in the column order of :func:`command_from_raw`.
COMMAND_ITEMS = ("Goal Position", "Torque Enable", "Profile Velocity", "Profile Acceleration", "Velocity Limit",
                 "Position P Gain", "Position I Gain", "Position D Gain", "PWM Limit")


def command_from_raw(raw: np.ndarray) -> ServoCommand:
    """The command of ``n`` servos in SI from their raw :data:`COMMAND_ITEMS`, shape ``(n, 9)``.

    A profile value of 0 means unlimited (``inf``). Time-based profiles (Drive Mode bit 2) are not emulated. The
    gains and the PWM Limit stay in control-table units (the servo model converts them with its stall torque).
    """
    raw = np.asarray(raw, dtype=np.int64)
    goal, torque, profile_velocity, profile_acceleration, velocity_limit = raw[:, :5].T
    return ServoCommand(
        np.atleast_1d(position_to_radians(goal)),
        torque == 1,
        np.where(profile_velocity != 0, velocity_to_rad_s(profile_velocity), np.inf),
        np.where(profile_acceleration != 0, profile_acceleration_to_rad_s2(profile_acceleration), np.inf),
        np.atleast_1d(velocity_to_rad_s(velocity_limit)),
        raw[:, 5:8].astype(float),
        raw[:, 8].astype(float),
    )


def feedback_to_raw(feedback: ServoFeedback) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Present Position, Present Velocity, Present Current and Present PWM of ``n`` servos in raw units, each
    ``(n,)`` int (current and PWM clipped to their ranges; zero when the dynamics report none)."""
    position = np.atleast_1d(radians_to_position(feedback.position))
    velocity = np.atleast_1d(rad_s_to_velocity(feedback.velocity))
    n = len(position)
    current_a = feedback.current if len(feedback.current) else np.zeros(n)
    current = np.clip(np.atleast_1d(amperes_to_current(current_a)), -32768, 32767)
    duty = feedback.pwm if len(feedback.pwm) else np.zeros(n)
    pwm = np.clip(np.round(np.asarray(duty, dtype=float) * PWM_FULL_SCALE), -PWM_FULL_SCALE, PWM_FULL_SCALE)
    return position, velocity, current, np.atleast_1d(pwm).astype(np.int64)
