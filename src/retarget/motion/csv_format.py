"""CSV motion files: a time column and one column per joint, each with its unit in the header.

::

    time [s],base_yaw [deg],elbow [deg]
    0.0,0.0,10.0
    0.005,0.12,10.0

Time may be in ``[s]`` or ``[ms]``, each joint in ``[deg]`` or ``[rad]``. Blank lines and lines starting with ``#``
are ignored. Errors name the line (1-based, as an editor shows it) and the joint.
"""
from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from retarget.atomic import write_text_atomic
from retarget.motion.errors import MotionFormatError
from retarget.motion.limits import RowLabel
from retarget.motion.motion import Motion, validate_motion_arrays
from retarget.motion.units import ANGLE_UNITS, TIME_UNITS

__all__ = ["format_csv", "parse_csv", "read_comments", "read_csv", "write_csv"]

_HEADER_CELL = re.compile(r"^\s*(?P<name>.*?)\s*\[\s*(?P<unit>[^\]]*?)\s*\]\s*$")


def _parse_header_cell(cell: str, column: int, allowed: dict[str, float], source: str | None) -> tuple[str, float]:
    match = _HEADER_CELL.match(cell)
    if not match or not match["name"]:
        raise MotionFormatError(f"line 1: header column {column + 1} '{cell}' must be '<name> [unit]' with unit "
                                f"in {list(allowed)}", source=source, row="line 1")
    unit = match["unit"]
    if unit not in allowed:
        raise MotionFormatError(f"line 1: header column {column + 1} '{cell}': unknown unit [{unit}], use one of "
                                f"{['[' + u + ']' for u in allowed]}", source=source, row="line 1",
                                joint=None if column == 0 else match["name"])
    return match["name"], allowed[unit]


def parse_csv(text: str, *, source: str | None = None) -> tuple[Motion, RowLabel]:
    """Parse CSV motion text.

    Args:
        text: File contents.
        source: File name for messages.

    Returns:
        The motion (SI units) and a function mapping a sample index to its ``"line N"`` label.

    Raises:
        MotionFormatError: Bad header or units, ragged rows, unreadable numbers, NaN, unsorted or duplicate times.
    """
    rows: list[tuple[int, list[str]]] = []
    for line_no, cells in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not cells or all(not c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
            continue
        rows.append((line_no, cells))
    if not rows:
        raise MotionFormatError("empty CSV file: expected a header 'time [s],<joint> [deg],...'", source=source)
    header_line, header = rows[0]
    if len(header) < 2:
        raise MotionFormatError(f"line {header_line}: header needs a time column and at least one joint column",
                                source=source, row=f"line {header_line}")
    time_name, t_scale = _parse_header_cell(header[0], 0, TIME_UNITS, source)
    if time_name.lower() != "time":
        raise MotionFormatError(f"line {header_line}: first column must be 'time [s]' or 'time [ms]', got "
                                f"'{header[0]}'", source=source, row=f"line {header_line}")
    names: list[str] = []
    scales: list[float] = []
    for col, cell in enumerate(header[1:], start=1):
        name, scale = _parse_header_cell(cell, col, ANGLE_UNITS, source)
        names.append(name)
        scales.append(scale)
    data = rows[1:]
    lines = [ln for ln, _ in data]
    values = np.empty((len(data), len(header)))
    for i, (line_no, cells) in enumerate(data):
        if len(cells) != len(header):
            raise MotionFormatError(f"line {line_no}: {len(cells)} values, expected {len(header)} (time + "
                                    f"{len(names)} joints): ragged row", source=source, row=f"line {line_no}")
        for col, cell in enumerate(cells):
            try:
                values[i, col] = float(cell)
            except ValueError:
                what = "time" if col == 0 else f"joint '{names[col - 1]}'"
                raise MotionFormatError(f"line {line_no}: {what}: cannot read '{cell.strip()}' as a number",
                                        source=source, row=f"line {line_no}",
                                        joint=None if col == 0 else names[col - 1]) from None

    def row_label(index: int) -> str:
        return f"line {lines[index]}"

    time = values[:, 0] * t_scale
    positions = values[:, 1:] * np.asarray(scales)
    t, n, q = validate_motion_arrays(time, names, positions, row_label=row_label, source=source)
    return Motion(t, n, q), row_label


def read_csv(path: str | os.PathLike[str]) -> Motion:
    """Read a CSV motion file; see :func:`parse_csv`."""
    path = Path(path)
    return parse_csv(path.read_text(encoding="utf-8"), source=str(path))[0]


def format_csv(motion: Motion, *, unit: str = "deg", time_unit: str = "s", comments: Sequence[str] = ()) -> str:
    """CSV text of a motion, with optional ``# `` comment lines before the header (readers skip them;
    :func:`read_comments` returns them).

    Numbers are written with Python's shortest round-trip ``repr``, so reading back gives the same floats (exactly
    for ``[rad]`` and ``[s]``; within one rounding of the unit conversion otherwise).

    Args:
        motion: Motion to write.
        unit: Angle unit of the joint columns, ``"deg"`` or ``"rad"``.
        time_unit: ``"s"`` or ``"ms"``.
    """
    if unit not in ANGLE_UNITS:
        raise MotionFormatError(f"unknown angle unit '{unit}', use one of {list(ANGLE_UNITS)}")
    if time_unit not in TIME_UNITS:
        raise MotionFormatError(f"unknown time unit '{time_unit}', use one of {list(TIME_UNITS)}")
    for name in motion.joint_names:
        if any(ch in name for ch in ',"[]\n'):
            raise MotionFormatError(f"joint name '{name}' cannot be written to a CSV header", joint=name)
    out = io.StringIO()
    for line in comments:
        for part in str(line).splitlines() or [""]:
            out.write(f"# {part}\n")
    out.write(",".join([f"time [{time_unit}]"] + [f"{n} [{unit}]" for n in motion.joint_names]) + "\n")
    t = motion.time / TIME_UNITS[time_unit]
    q = np.degrees(motion.positions) if unit == "deg" else motion.positions
    for ti, row in zip(t.tolist(), q.tolist()):
        out.write(",".join(repr(float(v)) if math.isfinite(v) else str(v) for v in [ti, *row]) + "\n")
    return out.getvalue()


def write_csv(path: str | os.PathLike[str], motion: Motion, *, unit: str = "deg", time_unit: str = "s",
              comments: Sequence[str] = ()) -> Path:
    """Write a CSV motion file atomically (see :func:`format_csv`); returns the path."""
    return write_text_atomic(path, format_csv(motion, unit=unit, time_unit=time_unit, comments=comments))


def read_comments(path: str | os.PathLike[str]) -> list[str]:
    """The ``# `` comment lines before a CSV motion file's header, without the ``# `` (empty when unreadable)."""
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                stripped = line.strip()
                if not stripped:
                    continue
                if not stripped.startswith("#"):
                    break
                out.append(stripped[1:].strip())
    except (OSError, UnicodeDecodeError):
        return []
    return out
