"""Keyframes YAML: how motions are authored (see ``docs/robot-description.md``).

::

    robot: single_rod
    description: 30 degree step, hold 1.5 s, return
    unit: deg                  # of the keyframe values
    interpolation: pchip       # pchip | cubic (C2 natural spline) | linear
    rate: 200                  # [Hz] sampling rate when converted to a Motion
    joints: [base_yaw]
    keyframes:                 # [time [s], value per joint]
      - [0.0, 0.0]
      - [0.7, 30.0]

Without ``rate`` the keyframes themselves are the motion's samples (this is how :func:`write_keyframes` writes an
arbitrary motion so that it reads back unchanged).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from retarget.atomic import write_text_atomic
from retarget.motion.errors import MotionFormatError
from retarget.motion.limits import RowLabel
from retarget.motion.motion import INTERPOLATIONS, Motion, validate_motion_arrays
from retarget.motion.units import ANGLE_UNITS

__all__ = ["Keyframes", "format_keyframes", "is_keyframes_dict", "parse_keyframes", "read_keyframes",
           "write_keyframes"]


@dataclass(frozen=True)
class Keyframes:
    """An authored motion: keyframe times and values, interpolated and sampled on demand.

    Attributes:
        joints: Joint names, length ``m``.
        times: Keyframe times [s], shape ``(k,)``, strictly increasing.
        values: Keyframe values [rad], shape ``(k, m)``.
        interpolation: ``"pchip"``, ``"cubic"`` or ``"linear"``.
        rate: Sampling rate [Hz] of :meth:`to_motion`, or ``None`` to use the keyframes as samples.
        robot: Robot the motion is for (informational), or ``None``.
        description: Free text.
    """

    joints: tuple[str, ...]
    times: np.ndarray
    values: np.ndarray
    interpolation: str = "pchip"
    rate: float | None = 200.0
    robot: str | None = None
    description: str = ""

    def to_motion(self) -> Motion:
        """The motion sampled at :attr:`rate` on ``t0 + k / rate`` covering the last keyframe (see
        :meth:`Motion.resample`), or the keyframes themselves when ``rate`` is ``None``."""
        keys = Motion(self.times, self.joints, self.values)
        return keys if self.rate is None else keys.resample(self.rate, self.interpolation)


def _number(value: object, index: int, col: int, joints: list[str], source: str | None) -> float:
    """A keyframe entry as float; numeric strings are accepted because YAML 1.1 reads ``1e-3`` as a string."""
    if not isinstance(value, bool):
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    what = "time" if col == 0 else f"joint '{joints[col - 1]}'"
    raise MotionFormatError(f"keyframe {index}: {what}: expected a number, got {value!r}", source=source,
                            row=f"keyframe {index}", joint=None if col == 0 else joints[col - 1])


def _yaml_float(value: float) -> str:
    """Shortest round-trip text of a float that YAML 1.1 reads back as a float (needs a '.' before 'e')."""
    text = repr(float(value))
    if "e" in text and "." not in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def is_keyframes_dict(data: object) -> bool:
    """Whether a parsed YAML object looks like a keyframes file (has ``joints`` and ``keyframes``)."""
    return isinstance(data, dict) and "keyframes" in data and "joints" in data


def parse_keyframes(data: object, *, source: str | None = None) -> tuple[Keyframes, RowLabel]:
    """Validate a parsed keyframes YAML object.

    Returns:
        The keyframes (values in [rad]) and row labels (``"keyframe i"``) for its keyframes.

    Raises:
        MotionFormatError: Missing keys, unknown unit or interpolation, bad rate, ragged or non-numeric keyframes,
            NaN, unsorted or duplicate times; messages name the keyframe and joint.
    """
    if not is_keyframes_dict(data):
        raise MotionFormatError("not a keyframes file (expected 'joints' and 'keyframes')", source=source)
    unit = data.get("unit", "deg")
    if unit not in ANGLE_UNITS:
        raise MotionFormatError(f"unknown unit '{unit}', use one of {list(ANGLE_UNITS)}", source=source)
    interpolation = data.get("interpolation", "pchip")
    if interpolation not in INTERPOLATIONS:
        raise MotionFormatError(f"unknown interpolation '{interpolation}', use one of {list(INTERPOLATIONS)}",
                                source=source)
    rate = data.get("rate", None)
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0
                             or not math.isfinite(rate)):
        raise MotionFormatError(f"rate must be a positive number of Hz, got {rate!r}", source=source)
    joints = data["joints"]
    if not isinstance(joints, list) or not all(isinstance(j, str) for j in joints):
        raise MotionFormatError("joints must be a list of names", source=source)
    rows = data["keyframes"]
    if not isinstance(rows, list) or not rows:
        raise MotionFormatError("keyframes must be a non-empty list of [time, value per joint]", source=source)
    t = np.empty(len(rows))
    q = np.empty((len(rows), len(joints)))
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(joints) + 1:
            size = len(row) if isinstance(row, list) else type(row).__name__
            raise MotionFormatError(f"keyframe {i}: {size} values, expected {len(joints) + 1} (time + "
                                    f"{len(joints)} joints {joints}): ragged row", source=source,
                                    row=f"keyframe {i}")
        numbers = [_number(v, i, col, joints, source) for col, v in enumerate(row)]
        t[i] = numbers[0]
        q[i] = np.asarray(numbers[1:]) * ANGLE_UNITS[unit]

    def row_label(index: int) -> str:
        return f"keyframe {index}"

    tt, jj, qq = validate_motion_arrays(t, joints, q, row_label=row_label, source=source)
    keys = Keyframes(jj, tt, qq, interpolation, None if rate is None else float(rate),
                     data.get("robot"), str(data.get("description", "")))
    return keys, row_label


def read_keyframes(path: str | os.PathLike[str]) -> Keyframes:
    """Read a keyframes YAML file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise MotionFormatError(f"not valid YAML: {exc}", source=str(path)) from None
    return parse_keyframes(data, source=str(path))[0]


def format_keyframes(motion: Motion, *, unit: str = "rad", robot: str | None = None, description: str = "") -> str:
    """Keyframes YAML of a motion: every sample a keyframe, linear interpolation, no ``rate``.

    With ``unit="rad"`` it reads back to exactly the same motion.
    """
    if unit not in ANGLE_UNITS:
        raise MotionFormatError(f"unknown unit '{unit}', use one of {list(ANGLE_UNITS)}")
    q = motion.positions if unit == "rad" else np.degrees(motion.positions)
    doc: dict[str, str | list[str]] = {}
    if robot:
        doc["robot"] = robot
    doc.update({"description": description, "unit": unit, "interpolation": "linear",
                "joints": list(motion.joint_names)})
    head = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)
    lines = ["keyframes:"] + [f"  - [{', '.join(_yaml_float(v) for v in [t, *row])}]"
                              for t, row in zip(motion.time.tolist(), q.tolist())]
    return head + "\n".join(lines) + "\n"


def write_keyframes(path: str | os.PathLike[str], motion: Motion, **options: str | None) -> Path:
    """Write a keyframes YAML file atomically (see :func:`format_keyframes`); returns the path."""
    return write_text_atomic(path, format_keyframes(motion, **options))

