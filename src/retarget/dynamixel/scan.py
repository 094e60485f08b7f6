"""What is on a servo bus: every servo at every usual baud rate, with the control-table items bring-up needs.

:func:`scan_bus` broadcast-pings the bus at each rate of :data:`SCAN_BAUD_RATES` (57 600 first: servos leave the
factory at it), then reads, from each servo that answered, the items ``retarget servos setup`` compares with a
robot's params file (:data:`SCAN_ITEMS`: Baud Rate, Return Delay Time, Drive Mode, Operating Mode, Homing Offset,
position limits, PWM Limit, Position P/I/D Gain, Torque Enable, Present Position, Hardware Error Status). Servos of
a model without a packaged control table are listed with their model number only.

Answers that arrive corrupt at one ID (two servos sharing that ID talk at once) are listed as collisions: such
servos cannot be told apart on one bus (docs/bringup.md: connect them one at a time).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from retarget.dynamixel.bus import DynamixelBus
from retarget.dynamixel.control_table import (
    BAUD_RATES,
    HardwareErrorStatus,
    OperatingMode,
    load_control_table,
    model_name,
    position_to_radians,
)
from retarget.dynamixel.errors import DynamixelError, PortGoneError
from retarget.errors import InputError

if TYPE_CHECKING:
    from dynamixel_sdk import PortHandler

__all__ = ["SCAN_BAUD_RATES", "SCAN_ITEMS", "FoundServo", "ScanResult", "scan_bus"]

#: The rates a scan tries, in order: the factory rate first, then the usual ones (bit/s). 4.5 Mbit/s (Baud Rate 7)
#: is missing: the SDK cannot open a port at it.
SCAN_BAUD_RATES: tuple[int, ...] = (57_600, 1_000_000, 115_200, 2_000_000, 3_000_000, 4_000_000, 9_600)

#: The control-table items read from every servo found (raw values).
SCAN_ITEMS: tuple[str, ...] = (
    "Baud Rate", "Return Delay Time", "Drive Mode", "Operating Mode", "Homing Offset", "Min Position Limit",
    "Max Position Limit", "PWM Limit", "Position P Gain", "Position I Gain", "Position D Gain", "Torque Enable",
    "Present Position", "Hardware Error Status",
)


@dataclass(frozen=True)
class FoundServo:
    """One servo that answered a scan.

    Attributes:
        servo_id: its ID.
        baudrate: the rate it answered at [bit/s].
        model_number: from its ping.
        model: the packaged model of that number (``XM430-W210``), or None (then ``items`` is empty).
        firmware: Firmware Version, from its ping.
        items: raw values of :data:`SCAN_ITEMS`.
        error: why the items could not be read ("" when they were).
    """

    servo_id: int
    baudrate: int
    model_number: int
    model: str | None
    firmware: int
    items: Mapping[str, int] = field(default_factory=dict)
    error: str = ""

    @property
    def key(self) -> tuple[int, int]:
        """``(ID, baud rate)``: what tells two servos apart on one bus."""
        return self.servo_id, self.baudrate

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: ``id``, ``model``, ``model_number``, ``baud_rate``, ``firmware``, ``gains`` (table units) and
        the other items (SI where it helps: the present position in rad, the return delay in µs)."""
        out: dict[str, object] = {"id": self.servo_id, "model": self.model, "model_number": self.model_number,
                               "baud_rate": self.baudrate, "firmware": self.firmware}
        items = self.items
        if items:
            out["gains"] = {"p": items["Position P Gain"], "i": items["Position I Gain"],
                            "d": items["Position D Gain"], "pwm_limit": items["PWM Limit"]}
            out["baud_rate_item"] = items["Baud Rate"]
            out["return_delay_us"] = 2 * items["Return Delay Time"]
            out["operating_mode"] = _mode_name(items["Operating Mode"])
            out["drive_mode"] = items["Drive Mode"]
            out["homing_offset"] = items["Homing Offset"]
            out["position_limits"] = [items["Min Position Limit"], items["Max Position Limit"]]
            out["torque_enabled"] = bool(items["Torque Enable"])
            out["present_position_rad"] = round(float(position_to_radians(items["Present Position"])), 5)
            out["hardware_error"] = HardwareErrorStatus(items["Hardware Error Status"]).names()
        if self.error:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class ScanResult:
    """Every servo a scan found on one port.

    Attributes:
        port: the port.
        baud_rates: the rates tried, in order [bit/s].
        servos: the servos, in the order found (by rate, then ID).
        collisions: ``(ID, baud rate)`` pairs whose answers arrived garbled (more than one servo at that ID).
    """

    port: str
    baud_rates: tuple[int, ...]
    servos: tuple[FoundServo, ...]
    collisions: tuple[tuple[int, int], ...] = ()

    def servo(self, servo_id: int, baudrate: int | None = None) -> FoundServo:
        """The servo at ``servo_id`` (at ``baudrate`` when given).

        Raises:
            InputError: none, or several at different rates and no rate given.
        """
        matches = [s for s in self.servos if s.servo_id == servo_id and baudrate in (None, s.baudrate)]
        if len(matches) != 1:
            where = f" at {baudrate} bit/s" if baudrate else ""
            raise InputError(f"{len(matches)} servos with ID {servo_id}{where} on {self.port}"
                             + (": give the rate as ID@BAUD" if len(matches) > 1 else ""))
        return matches[0]

    def as_dict(self) -> dict[str, object]:
        """JSON-ready (``retarget servos scan --json``)."""
        return {"port": self.port, "baud_rates": list(self.baud_rates),
                "servos": [s.as_dict() for s in self.servos],
                "collisions": [{"id": i, "baud_rate": b} for i, b in self.collisions]}

    def table(self) -> list[str]:
        """A table for people, one line per servo (and one per collision)."""
        lines = [f"{'ID':>3} {'baud':>8} {'model':<11} {'fw':>3} {'torque':<6} {'mode':<13} {'P':>5} {'I':>5} "
                 f"{'D':>5} {'PWM':>4} {'delay':>6} {'limits':>11} {'home':>5} {'drv':>3} {'pos [rad]':>9}  error"]
        for s in self.servos:
            model = s.model or f"#{s.model_number}"
            if not s.items:
                lines.append(f"{s.servo_id:>3} {s.baudrate:>8} {model:<11} {s.firmware:>3}  {s.error}")
                continue
            i = s.items
            errors = "+".join(HardwareErrorStatus(i["Hardware Error Status"]).names()) or "-"
            lines.append(
                f"{s.servo_id:>3} {s.baudrate:>8} {model:<11} {s.firmware:>3} "
                f"{'on' if i['Torque Enable'] else 'off':<6} {_mode_name(i['Operating Mode']):<13} "
                f"{i['Position P Gain']:>5} {i['Position I Gain']:>5} {i['Position D Gain']:>5} {i['PWM Limit']:>4} "
                f"{2 * i['Return Delay Time']:>4}us {i['Min Position Limit']:>5}-{i['Max Position Limit']:<5} "
                f"{i['Homing Offset']:>5} {i['Drive Mode']:>3} "
                f"{float(position_to_radians(i['Present Position'])):>9.4f}  {errors}")
        for servo_id, baudrate in self.collisions:
            lines.append(f"{servo_id:>3} {baudrate:>8} garbled answers: more than one servo has this ID (connect "
                         "them one at a time)")
        return lines


def _mode_name(value: int) -> str:
    try:
        return OperatingMode(value).name.lower()
    except ValueError:
        return str(value)


def scan_bus(port: str | PortHandler, baud_rates: Sequence[int] = SCAN_BAUD_RATES, *, latency_timer_ms: float = 16.0,
             wait_s: float | None = None, progress: Callable[[str], None] | None = None) -> ScanResult:
    """Find every servo on ``port`` at each of ``baud_rates``.

    Args:
        port: device path, or an SDK ``PortHandler`` (tests: a loopback port).
        baud_rates: rates to try [bit/s], in order.
        latency_timer_ms: the USB adapter's latency allowance in reply timeouts (``DynamixelBus``).
        wait_s: how long each broadcast ping listens [s] (default: the SDK's window at each rate).
        progress: called with a line per rate tried.

    Raises:
        InputError: a rate the servos or the SDK do not support.
        PortGoneError: the port cannot be opened (the message says what to do about permissions).
    """
    rates = tuple(int(b) for b in baud_rates)
    for rate in rates:
        if rate not in BAUD_RATES.values():
            raise InputError(f"baud rate {rate} is not one an X-series servo supports "
                             f"({', '.join(str(r) for r in BAUD_RATES.values())})")
    bus = DynamixelBus(port, [1], baudrate=rates[0], latency_timer_ms=latency_timer_ms)
    name = bus.port_name
    servos: list[FoundServo] = []
    collisions: list[tuple[int, int]] = []
    bus.open()
    try:
        for rate in rates:
            bus.set_baudrate(rate)
            answer = bus.broadcast_ping(wait_s)
            if progress is not None:
                progress(f"{rate:>8} bit/s: {len(answer.found)} servo(s)"
                         + (f", garbled answers at IDs {sorted(answer.garbled)}" if answer.garbled else ""))
            for servo_id in sorted(answer.found):
                number, firmware = answer.found[servo_id]
                servos.append(_describe(bus, servo_id, rate, number, firmware))
            collisions += [(servo_id, rate) for servo_id in sorted(answer.garbled)]
    finally:
        bus.close()
    return ScanResult(name, rates, tuple(servos), tuple(collisions))


def _describe(bus: DynamixelBus, servo_id: int, baudrate: int, number: int, firmware: int) -> FoundServo:
    """Read :data:`SCAN_ITEMS` of one servo through its model's table (nothing for an unknown model)."""
    model = model_name(number)
    if model is None:
        return FoundServo(servo_id, baudrate, number, None, firmware,
                          error="no packaged control table for this model number")
    reader = DynamixelBus(bus.port_handler, [servo_id], baudrate=baudrate, table=load_control_table(model=model))
    try:
        items = {name: reader.read(servo_id, name) for name in SCAN_ITEMS}
    except PortGoneError:
        raise
    except DynamixelError as exc:
        return FoundServo(servo_id, baudrate, number, model, firmware, error=str(exc))
    return FoundServo(servo_id, baudrate, number, model, firmware, items)
