"""First-order servo state: the emulated bus's servo law (forward Euler of the first-order loop), saturated."""
from __future__ import annotations

import numpy as np

from retarget.control import ServoState, step_servos
from retarget.dynamixel.dynamics import FirstOrderServo, ServoCommand


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


def test_steps_like_the_emulated_bus_servo() -> None:
    """The same law as :class:`FirstOrderServo` with torque on and no profile limits, to the bit."""
    rng = np.random.default_rng(0)
    goals = rng.uniform(-2.0, 2.0, 3)
    s = ServoState.at_rest(np.zeros(3)).replace(goals=goals)
    servo = FirstOrderServo(3, time_constant=0.03, no_load_speed=5.0)
    servo.reset(np.zeros(3))
    command = ServoCommand(goals, np.ones(3, bool), np.full(3, np.inf), np.full(3, np.inf), np.zeros(3))
    for _ in range(200):
        s = step_servos(s, 0.004, 0.03, max_velocity=5.0)
        feedback = servo.step(command, 0.004)
        np.testing.assert_array_equal(s.positions, feedback.position)
        np.testing.assert_array_equal(s.velocities, feedback.velocity)
