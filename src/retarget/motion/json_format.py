"""JSON motion files: ``{"joint_names": [...], "time": [...], "positions": [[...], ...], "unit": "rad"}``.

``time`` is in seconds; ``unit`` (``"rad"`` or ``"deg"``, default ``"rad"``) applies to ``positions``, one row per
sample. Errors name the row (0-based index into ``positions``) and the joint.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TypedDict

import numpy as np

from retarget.atomic import write_text_atomic
from retarget.motion.errors import MotionFormatError
from retarget.motion.limits import RowLabel, default_row_label
from retarget.motion.motion import Motion, validate_motion_arrays
from retarget.motion.units import ANGLE_UNITS

__all__ = ["MotionDict", "format_json", "motion_from_dict", "motion_to_dict", "read_json", "write_json"]


class MotionDict(TypedDict):
    """The JSON object form of a motion (module docstring): times [s], one position row per sample in ``unit``."""

    joint_names: list[str]
    time: list[float]
    positions: list[list[float]]
    unit: str


def _number(value: object, where: str, source: str | None, row: str, joint: str | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MotionFormatError(f"{where}: expected a number, got {value!r}", source=source, row=row, joint=joint)
    return float(value)


def motion_from_dict(data: object, *, source: str | None = None) -> tuple[Motion, RowLabel]:
    """Build a motion from the JSON object form.

    Returns:
        The motion and its row labels (``"row i"``).

    Raises:
        MotionFormatError: Missing keys, bad unit, ragged or non-numeric rows, NaN, unsorted or duplicate times.
    """
    if not isinstance(data, dict):
        raise MotionFormatError("expected a JSON object with joint_names, time, positions", source=source)
    missing = [k for k in ("joint_names", "time", "positions") if k not in data]
    if missing:
        raise MotionFormatError(f"missing keys {missing}", source=source)
    unit = data.get("unit", "rad")
    if unit not in ANGLE_UNITS:
        raise MotionFormatError(f"unknown unit '{unit}', use one of {list(ANGLE_UNITS)}", source=source)
    names = data["joint_names"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise MotionFormatError("joint_names must be a list of strings", source=source)
    times, rows = data["time"], data["positions"]
    if not isinstance(times, list) or not isinstance(rows, list):
        raise MotionFormatError("time and positions must be lists", source=source)
    if len(times) != len(rows):
        raise MotionFormatError(f"{len(times)} times but {len(rows)} position rows", source=source)
    t = np.empty(len(times))
    q = np.empty((len(rows), len(names)))
    for i, (ti, row) in enumerate(zip(times, rows)):
        t[i] = _number(ti, f"row {i}: time", source, f"row {i}", None)
        if not isinstance(row, list) or len(row) != len(names):
            size = len(row) if isinstance(row, list) else type(row).__name__
            raise MotionFormatError(f"row {i}: {size} positions for {len(names)} joints: ragged row",
                                    source=source, row=f"row {i}")
        for j, v in enumerate(row):
            q[i, j] = _number(v, f"row {i}: joint '{names[j]}'", source, f"row {i}", names[j])
    t, n, q = validate_motion_arrays(t, names, q * ANGLE_UNITS[unit], source=source)
    return Motion(t, n, q), default_row_label


def motion_to_dict(motion: Motion, *, unit: str = "rad") -> MotionDict:
    """The JSON object form of a motion (plain Python lists and floats)."""
    if unit not in ANGLE_UNITS:
        raise MotionFormatError(f"unknown unit '{unit}', use one of {list(ANGLE_UNITS)}")
    q = motion.positions if unit == "rad" else np.degrees(motion.positions)
    return {"joint_names": list(motion.joint_names), "time": motion.time.tolist(), "positions": q.tolist(),
            "unit": unit}


def read_json(path: str | os.PathLike[str]) -> Motion:
    """Read a JSON motion file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MotionFormatError(f"line {exc.lineno}: not valid JSON: {exc.msg}", source=str(path)) from None
    return motion_from_dict(data, source=str(path))[0]


def format_json(motion: Motion, *, unit: str = "rad") -> str:
    """JSON text of a motion; floats use the shortest round-trip representation."""
    if not all(math.isfinite(v) for v in motion.time.tolist()):
        raise MotionFormatError("cannot write non-finite times")
    return json.dumps(motion_to_dict(motion, unit=unit), allow_nan=False) + "\n"


def write_json(path: str | os.PathLike[str], motion: Motion, *, unit: str = "rad") -> Path:
    """Write a JSON motion file atomically; returns the path."""
    return write_text_atomic(path, format_json(motion, unit=unit))
