"""First-order servo state (the servo twin node's stand-in law): forward Euler of the first-order loop, saturated."""
from __future__ import annotations

import numpy as np

from retarget.control import ServoState, step_servos


def test_unsaturated_is_the_euler_first_order_loop() -> None:
    s = ServoState.at_rest(np.zeros(2)).replace(goals=np.array([0.1, -0.2]))
    tau, dt = 0.05, 0.002
    for _ in range(50):
        s = step_servos(s, dt, tau, max_velocity=100.0)
    # Forward Euler of q' = (g - q) / tau: q_k = g (1 - (1 - dt/tau)^k), within 4 % of the exponential here.
    np.testing.assert_allclose(s.positions, np.array([0.1, -0.2]) * (1 - (1 - dt / tau) ** 50), rtol=1e-12)
    np.testing.assert_allclose(s.positions, np.array([0.1, -0.2]) * (1 - np.exp(-0.1 / tau)), rtol=0.04)


def test_saturated_moves_at_max_velocity() -> None:
    s = ServoState.at_rest(np.zeros(1)).replace(goals=np.array([3.0]))
    for _ in range(100):
        s = step_servos(s, 0.01, 0.05, max_velocity=8.0)
    assert abs(s.positions[0] - 3.0) < 1e-3  # 3 rad at 8 rad/s takes 0.375 s, then the first-order tail
    s = ServoState.at_rest(np.zeros(1)).replace(goals=np.array([3.0]))
    s = step_servos(s, 0.01, 0.05, max_velocity=8.0)
    np.testing.assert_allclose(s.velocities, [8.0])


def test_never_overshoots_and_torque_off_holds() -> None:
    from retarget.control.servo_model import first_order_step

    x, v = first_order_step(np.array([0.0]), np.zeros(1), np.array([0.01]), 0.1, 0.02, 100.0)
    assert x[0] == 0.01  # the remaining distance, not (g - x) dt / tau = 0.05
    x, v = first_order_step(np.array([0.3]), np.array([1.0]), np.array([2.0]), 0.01, 0.02, 8.0,
                            torque_enabled=False)
    assert x[0] == 0.3 and v[0] == 0.0
