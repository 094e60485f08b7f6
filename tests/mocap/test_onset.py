"""Where a tracked body leaves its rest: the first run beyond a distance and its interpolated crossing."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.mocap.onset import crossing_time, departure


def test_departure_is_the_first_run_of_three_beyond_the_threshold() -> None:
    dist = np.array([0.0, 2.0, 0.0, 2.0, 2.0, 0.0, 2.0, 2.0, 2.0, 2.0])  # a single and a double spike, then away
    assert departure(dist, 1.0) == 6
    assert departure(dist, 1.0, consecutive=1) == 1
    assert departure(dist, 5.0) is None


def test_crossing_time_is_exact_on_a_linear_ramp() -> None:
    t = np.linspace(0.0, 1.0, 11)
    dist = 3.0 * t  # crosses 1.0 at t = 1/3
    k = departure(dist, 1.0)
    assert k == 4
    assert crossing_time(t, dist, k, 1.0) == pytest.approx(1.0 / 3.0, abs=1e-12)
