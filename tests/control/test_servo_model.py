"""First-order servo: exact exponential when unsaturated, constant speed when saturated."""
from __future__ import annotations

import numpy as np

from retarget.control import ServoState, step_servos


def test_unsaturated_matches_exponential() -> None:
    s = ServoState.at_rest(np.zeros(2)).replace(goals=np.array([0.1, -0.2]))
    tau, dt = 0.05, 0.002
    for _ in range(50):
        s = step_servos(s, dt, tau, max_velocity=100.0)
    np.testing.assert_allclose(s.positions, np.array([0.1, -0.2]) * (1 - np.exp(-0.1 / tau)), rtol=1e-12)


def test_saturated_moves_at_max_velocity() -> None:
    s = ServoState.at_rest(np.zeros(1)).replace(goals=np.array([3.0]))
    for _ in range(100):
        s = step_servos(s, 0.01, 0.05, max_velocity=8.0)
    assert abs(s.positions[0] - 3.0) < 1e-3  # 3 rad at 8 rad/s takes 0.375 s, then the exponential tail
    s = ServoState.at_rest(np.zeros(1)).replace(goals=np.array([3.0]))
    s = step_servos(s, 0.01, 0.05, max_velocity=8.0)
    np.testing.assert_allclose(s.velocities, [8.0])
