"""X-series control tables (XM430-W210, XM430-W350, XM540-W270): items, byte codecs, unit conversions, Hardware Error Status.

The tables ship as package data (``retarget/data/dynamixel/<model>.yaml``, derived from ROBOTIS'
``.model`` files, Apache-2.0; see the PROVENANCE.md beside them), one per model in :data:`SERVO_MODELS`, with
the model's ratings at 12 V. The models share the X-series layout and units, which follow the e-manual:

- position: 4096 ticks per revolution; tick 2048 is 0 rad (the ``.model`` offset of -π), so in position mode
  (ticks 0…4095) the servo angle spans [-π, π);
- velocity: 0.229 rev/min per unit; current: 2.69 mA per unit; profile acceleration: 214.577 rev/min² per unit.

Conversions here are the only place ticks and SI meet.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from retarget.errors import InputError

__all__ = [
    "CURRENT_A_PER_UNIT",
    "POSITION_RAD_PER_TICK",
    "POSITION_ZERO_TICK",
    "PROFILE_ACCELERATION_RAD_S2_PER_UNIT",
    "SERVO_MODELS",
    "TICKS_PER_REV",
    "VELOCITY_RAD_S_PER_UNIT",
    "ControlTable",
    "ControlTableItem",
    "DEFAULT_SERVO_MODEL",
    "HardwareErrorStatus",
    "OperatingMode",
    "ServoRatings",
    "BAUD_RATES",
    "DEFAULT_BAUD_RATE",
    "FACTORY_BAUD_RATE",
    "amperes_to_current",
    "baud_rate_index",
    "current_to_amperes",
    "load_control_table",
    "model_name",
    "position_to_radians",
    "profile_acceleration_to_rad_s2",
    "rad_s2_to_profile_acceleration",
    "rad_s_to_velocity",
    "radians_to_position",
    "velocity_to_rad_s",
]

TICKS_PER_REV = 4096
POSITION_RAD_PER_TICK = 2.0 * math.pi / TICKS_PER_REV
POSITION_ZERO_TICK = 2048
VELOCITY_RAD_S_PER_UNIT = 0.229 * 2.0 * math.pi / 60.0
CURRENT_A_PER_UNIT = 2.69e-3
PROFILE_ACCELERATION_RAD_S2_PER_UNIT = 214.577 * 2.0 * math.pi / 3600.0

#: Models with a packaged control table (``retarget/data/dynamixel/<model, lower case, _ for ->.yaml``).
SERVO_MODELS: tuple[str, ...] = ("XM430-W210", "XM430-W350", "XM540-W270")
#: The model a bus, the driver and the emulator assume when none is named (every shipped robot's servos).
DEFAULT_SERVO_MODEL = "XM430-W210"

#: Baud Rate item (8) value → bus speed [bit/s] (X series, e-manual). A servo leaves the factory at index 1.
BAUD_RATES: dict[int, int] = {0: 9600, 1: 57_600, 2: 115_200, 3: 1_000_000, 4: 2_000_000, 5: 3_000_000,
                              6: 4_000_000, 7: 4_500_000}
#: The speed servos leave the factory with [bit/s].
FACTORY_BAUD_RATE = 57_600
#: The speed the driver, the bring-up and the emulated bus use unless told otherwise [bit/s]: a 13-servo Sync Read
#: at 57 600 bit/s alone takes ≈ 50 ms, too slow for a 100 Hz loop (``retarget servos setup`` raises it).
DEFAULT_BAUD_RATE = 1_000_000


def baud_rate_index(baudrate: int) -> int:
    """The Baud Rate item value of a bus speed (``57600`` → 1).

    Raises:
        InputError: not one of :data:`BAUD_RATES`.
    """
    for index, rate in BAUD_RATES.items():
        if rate == int(baudrate):
            return index
    raise InputError(f"baud rate {baudrate} is not one an X-series servo supports "
                     f"({', '.join(str(r) for r in BAUD_RATES.values())})")


# The unit block of a table YAML, checked against the conversions below (they are module constants: a table in
# other units would be converted wrongly, so loading one is an error).
_UNITS = {
    "position_rad_per_tick": POSITION_RAD_PER_TICK,
    "position_zero_tick": POSITION_ZERO_TICK,
    "velocity_rev_per_min_per_unit": 0.229,
    "current_ampere_per_unit": CURRENT_A_PER_UNIT,
    "profile_acceleration_rev_per_min2_per_unit": 214.577,
}


class OperatingMode(enum.IntEnum):
    """Operating Mode (address 11) values of the X series."""

    CURRENT = 0
    VELOCITY = 1
    POSITION = 3
    EXTENDED_POSITION = 4
    CURRENT_BASED_POSITION = 5
    PWM = 16


class HardwareErrorStatus(enum.IntFlag):
    """Hardware Error Status (address 70) bits of the X series (bits 1, 6 and 7 are unused)."""

    INPUT_VOLTAGE = 0x01
    OVERHEATING = 0x04
    MOTOR_ENCODER = 0x08
    ELECTRICAL_SHOCK = 0x10
    OVERLOAD = 0x20

    def names(self) -> list[str]:
        """Readable names of the set bits, e.g. ``["overload"]``; unknown bits as ``"bit N"``."""
        out = []
        for bit in range(8):
            if int(self) & (1 << bit):
                out.append(_HW_NAMES.get(1 << bit, f"bit {bit}"))
        return out

    @classmethod
    def from_names(cls, names: list[str] | tuple[str, ...]) -> HardwareErrorStatus:
        """Inverse of :meth:`names`; also accepts the enum member names (``"OVERLOAD"``).

        Raises:
            InputError: an unknown name.
        """
        value = cls(0)
        lookup = {v: k for k, v in _HW_NAMES.items()}
        for name in names:
            key = name.strip().lower().replace("_", " ")
            if key in lookup:
                value |= cls(lookup[key])
            elif name.upper() in cls.__members__:
                value |= cls[name.upper()]
            else:
                raise InputError(f"unknown hardware error {name!r}; known: {sorted(lookup)}")
        return value


_HW_NAMES = {
    0x01: "input voltage",
    0x04: "overheating",
    0x08: "motor encoder",
    0x10: "electrical shock",
    0x20: "overload",
}


@dataclass(frozen=True)
class ControlTableItem:
    """One control table item.

    Attributes:
        name: e-manual name, e.g. ``"Goal Position"``.
        address: first byte.
        size: bytes (1, 2 or 4), little endian on the wire.
        access: ``"R"`` or ``"RW"``.
        area: ``"EEPROM"`` (writable only with torque off) or ``"RAM"``.
        initial: power-on value (raw units).
        minimum: lowest writable raw value, None when unchecked.
        maximum: highest writable raw value, None when unchecked.
        signed: two's complement on the wire.
    """

    name: str
    address: int
    size: int
    access: str
    area: str
    initial: int
    minimum: int | None = None
    maximum: int | None = None
    signed: bool = False

    def encode(self, value: int) -> bytes:
        """Raw integer → little-endian bytes of this item's size.

        Raises:
            InputError: the value does not fit the item's size and signedness.
        """
        try:
            return int(value).to_bytes(self.size, "little", signed=self.signed)
        except OverflowError as exc:
            raise InputError(f"{self.name}: {value} does not fit in {self.size} bytes") from exc

    def decode(self, data: bytes) -> int:
        """Little-endian bytes of this item's size → raw integer."""
        return int.from_bytes(bytes(data[: self.size]), "little", signed=self.signed)


@dataclass(frozen=True)
class ServoRatings:
    """A model's ratings at 12 V (e-manual specifications); the emulated servo moves and draws current by them.

    Attributes:
        no_load_speed: [rad/s].
        stall_torque: [N m].
        stall_current: current at the stall torque [A].
    """

    no_load_speed: float
    stall_torque: float
    stall_current: float


#: The XM430-W210's ratings (77 rev/min, 3.0 N m at 2.3 A): the default of a table YAML without a ``ratings`` block.
XM430_RATINGS = ServoRatings(77.0 * 2.0 * math.pi / 60.0, 3.0, 2.3)


class ControlTable:
    """A model's control table: items by name and by address, plus the model's identity and ratings."""

    def __init__(
        self,
        model: str,
        model_number: int,
        firmware_version: int,
        size: int,
        items: list[ControlTableItem],
        ratings: ServoRatings = XM430_RATINGS,
    ) -> None:
        self.model = model
        self.model_number = model_number
        self.firmware_version = firmware_version
        self.size = size
        self.ratings = ratings
        self.items = tuple(sorted(items, key=lambda it: it.address))
        self._by_name = {it.name: it for it in self.items}
        self._by_address = {it.address: it for it in self.items}

    def __getitem__(self, name: str) -> ControlTableItem:
        try:
            return self._by_name[name]
        except KeyError as exc:
            raise InputError(f"{self.model}: no control table item {name!r}") from exc

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def at(self, address: int) -> ControlTableItem | None:
        """The item starting at ``address``, or None."""
        return self._by_address.get(address)

    def overlapping(self, address: int, length: int) -> list[ControlTableItem]:
        """Items sharing at least one byte with ``[address, address + length)``."""
        end = address + length
        return [it for it in self.items if it.address < end and address < it.address + it.size]

    def initial_image(self) -> bytearray:
        """The whole table at power-on values, ``size`` bytes."""
        image = bytearray(self.size)
        for it in self.items:
            image[it.address : it.address + it.size] = it.encode(it.initial)
        return image


def _item(entry: dict) -> ControlTableItem:
    return ControlTableItem(
        name=str(entry["name"]),
        address=int(entry["address"]),
        size=int(entry["size"]),
        access=str(entry.get("access", "RW")),
        area=str(entry.get("area", "RAM")),
        initial=int(entry.get("initial") or 0),
        minimum=None if entry.get("min") is None else int(entry["min"]),
        maximum=None if entry.get("max") is None else int(entry["max"]),
        signed=bool(entry.get("signed", False)),
    )


def load_control_table(path: str | Path | None = None, *, model: str | None = None) -> ControlTable:
    """Load a control table: a YAML file, or a packaged model's (default :data:`DEFAULT_SERVO_MODEL`).

    Args:
        path: a YAML file in the format of ``retarget/data/dynamixel/xm430_w210.yaml``.
        model: a packaged model, one of :data:`SERVO_MODELS` (case-insensitive); not with ``path``.

    Raises:
        InputError: both given, an unknown model, a missing file, malformed content, or units other than the
            X series'.
    """
    if path is not None and model is not None:
        raise InputError("give a control table file or a servo model, not both")
    if path is None:
        return _packaged(_canonical_model(model or DEFAULT_SERVO_MODEL))
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read control table {path}: {exc}") from exc
    return _parse(text, str(path))


def model_name(model_number: int) -> str | None:
    """The packaged model with this model number (``1120`` → ``"XM540-W270"``), or None."""
    for model in SERVO_MODELS:
        if _packaged(model).model_number == model_number:
            return model
    return None


def _canonical_model(model: str) -> str:
    """The packaged model spelled as in :data:`SERVO_MODELS` (case and surrounding spaces ignored)."""
    known = {m.upper(): m for m in SERVO_MODELS}
    try:
        return known[str(model).strip().upper()]
    except KeyError:
        raise InputError(f"unknown servo model {model!r}; known: {', '.join(SERVO_MODELS)}") from None


@lru_cache(maxsize=None)
def _packaged(model: str) -> ControlTable:
    name = model.lower().replace("-", "_") + ".yaml"
    text = resources.files("retarget").joinpath("data", "dynamixel", name).read_text()
    table = _parse(text, f"retarget/data/dynamixel/{name}")
    if table.model != model:
        raise InputError(f"retarget/data/dynamixel/{name} describes {table.model}, not {model}")
    return table


def _parse(text: str, where: str) -> ControlTable:
    try:
        doc = yaml.safe_load(text)
        items = [_item(e) for e in doc["items"]]
        for key, value in (doc.get("units") or {}).items():
            if key in _UNITS and not math.isclose(float(value), _UNITS[key], rel_tol=1e-9):
                raise InputError(f"control table {where}: {key} is {value}, but retarget converts with the X "
                                 f"series' {_UNITS[key]}")
        rated = doc.get("ratings")
        ratings = XM430_RATINGS if rated is None else ServoRatings(
            no_load_speed=float(rated["no_load_speed_rev_per_min"]) * 2.0 * math.pi / 60.0,
            stall_torque=float(rated["stall_torque_newton_metre"]),
            stall_current=float(rated["stall_current_ampere"]),
        )
        return ControlTable(
            model=str(doc["model"]),
            model_number=int(doc["model_number"]),
            firmware_version=int(doc.get("firmware_version", 38)),
            size=int(doc["size"]),
            items=items,
            ratings=ratings,
        )
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, yaml.YAMLError) as exc:
        raise InputError(f"malformed control table {where}: {exc}") from exc


# --- unit conversions (SI at the edges) ---------------------------------------------------------------------------


def position_to_radians(ticks: np.ndarray | int) -> np.ndarray | float:
    """Position ticks → servo angle [rad]; tick 2048 is 0 rad. Shape preserved."""
    out = (np.asarray(ticks, dtype=float) - POSITION_ZERO_TICK) * POSITION_RAD_PER_TICK
    return float(out) if out.ndim == 0 else out


def radians_to_position(angle_rad: np.ndarray | float) -> np.ndarray | int:
    """Servo angle [rad] → nearest position tick (not clipped: callers check limits). Shape preserved."""
    out = np.rint(np.asarray(angle_rad, dtype=float) / POSITION_RAD_PER_TICK + POSITION_ZERO_TICK).astype(np.int64)
    return int(out) if out.ndim == 0 else out


def velocity_to_rad_s(raw: np.ndarray | int) -> np.ndarray | float:
    """Velocity units (0.229 rev/min) → [rad/s]."""
    out = np.asarray(raw, dtype=float) * VELOCITY_RAD_S_PER_UNIT
    return float(out) if out.ndim == 0 else out


def rad_s_to_velocity(velocity_rad_s: np.ndarray | float) -> np.ndarray | int:
    """[rad/s] → nearest velocity unit (0.229 rev/min)."""
    out = np.rint(np.asarray(velocity_rad_s, dtype=float) / VELOCITY_RAD_S_PER_UNIT).astype(np.int64)
    return int(out) if out.ndim == 0 else out


def current_to_amperes(raw: np.ndarray | int) -> np.ndarray | float:
    """Current units (2.69 mA) → [A]."""
    out = np.asarray(raw, dtype=float) * CURRENT_A_PER_UNIT
    return float(out) if out.ndim == 0 else out


def amperes_to_current(current_a: np.ndarray | float) -> np.ndarray | int:
    """[A] → nearest current unit (2.69 mA)."""
    out = np.rint(np.asarray(current_a, dtype=float) / CURRENT_A_PER_UNIT).astype(np.int64)
    return int(out) if out.ndim == 0 else out


def profile_acceleration_to_rad_s2(raw: np.ndarray | int) -> np.ndarray | float:
    """Profile Acceleration units (214.577 rev/min²) → [rad/s²]."""
    out = np.asarray(raw, dtype=float) * PROFILE_ACCELERATION_RAD_S2_PER_UNIT
    return float(out) if out.ndim == 0 else out


def rad_s2_to_profile_acceleration(acceleration_rad_s2: np.ndarray | float) -> np.ndarray | int:
    """[rad/s²] → nearest Profile Acceleration unit (214.577 rev/min²)."""
    out = np.rint(np.asarray(acceleration_rad_s2, dtype=float) / PROFILE_ACCELERATION_RAD_S2_PER_UNIT)
    out = out.astype(np.int64)
    return int(out) if out.ndim == 0 else out
