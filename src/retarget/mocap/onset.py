"""Where a tracked body leaves its rest: the first run of frames beyond a distance, and when it crossed it.

Both the material fit's alignment (:func:`retarget.fit.align.detect_onset`) and a plan's refinement
(``retarget refine``'s onset offset) find a recording's motion onset this way.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["crossing_time", "departure"]


def departure(dist: NDArray[np.float64], threshold: float, consecutive: int = 3) -> int | None:
    """The index of the first of ``consecutive`` samples in a row farther than ``threshold`` (``dist`` (n,), a
    distance from the rest [m]); None when there is no such run."""
    run = np.convolve((dist > threshold).astype(int), np.ones(consecutive, dtype=int), mode="valid") == consecutive
    return int(np.argmax(run)) if run.any() else None


def crossing_time(t: NDArray[np.float64], dist: NDArray[np.float64], k: int, threshold: float) -> float:
    """When ``dist`` crosses ``threshold`` between samples ``k − 1`` (at or below it) and ``k`` (beyond it) of times
    ``t`` [s], interpolated linearly."""
    return float(t[k - 1] + (threshold - dist[k - 1]) / max(dist[k] - dist[k - 1], 1e-15) * (t[k] - t[k - 1]))
