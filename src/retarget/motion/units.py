"""Unit names accepted at the edges (files, CLI) and their factors to SI."""
from __future__ import annotations

import math

__all__ = ["ANGLE_UNITS", "TIME_UNITS", "angle_factor", "time_factor"]

#: Factor from each accepted angle unit to radians.
ANGLE_UNITS: dict[str, float] = {"rad": 1.0, "deg": math.pi / 180.0}
#: Factor from each accepted time unit to seconds.
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3}


def angle_factor(unit: str) -> float:
    """Radians per ``unit`` (``"rad"`` or ``"deg"``); raises ``KeyError`` for anything else."""
    return ANGLE_UNITS[unit]


def time_factor(unit: str) -> float:
    """Seconds per ``unit`` (``"s"`` or ``"ms"``); raises ``KeyError`` for anything else."""
    return TIME_UNITS[unit]
