"""The pluggable servo-dynamics interface: the twin's callback adapter."""
from __future__ import annotations

import numpy as np

from retarget.dynamixel.dynamics import CallbackDynamics, ServoCommand, ServoFeedback


def command(goal: float) -> ServoCommand:
    g = np.atleast_1d(np.asarray(goal, dtype=float))
    n = g.size
    return ServoCommand(g, np.ones(n, bool), np.full(n, np.inf), np.full(n, np.inf), np.full(n, 7.9))


def test_callback_dynamics_delegates() -> None:
    seen = []

    def step(cmd: ServoCommand, dt: float) -> ServoFeedback:
        seen.append((cmd.goal_position.copy(), dt))
        return ServoFeedback(cmd.goal_position.copy(), np.zeros(1), np.zeros(1))

    dyn = CallbackDynamics(step)
    assert dyn.reset(np.array([0.1])).position[0] == 0.1
    assert dyn.step(command(0.7), 0.005).position[0] == 0.7
    assert seen[0][1] == 0.005
    assert dyn.advance(command(0.2), 0.002, 3).position[0] == 0.2 and len(seen) == 4
