"""The rigid first-order servo model against its closed-form behaviour."""
from __future__ import annotations

import math

import numpy as np
import pytest

from retarget.dynamixel.dynamics import (
    XM430_NO_LOAD_SPEED_RAD_S,
    CallbackDynamics,
    FirstOrderServo,
    ServoCommand,
    ServoFeedback,
)


def command(goal, on=True, pv=np.inf, pa=np.inf, vl=7.9) -> ServoCommand:
    goal = np.atleast_1d(np.asarray(goal, dtype=float))
    n = goal.size
    return ServoCommand(goal, np.full(n, on), np.full(n, pv), np.full(n, pa), np.full(n, vl))


def run(model: FirstOrderServo, cmd: ServoCommand, seconds: float, dt: float = 1e-3) -> list[ServoFeedback]:
    return [model.step(cmd, dt) for _ in range(int(round(seconds / dt)))]


def test_small_step_is_exponential_with_the_time_constant() -> None:
    model = FirstOrderServo(1, time_constant=0.02)
    model.reset(np.zeros(1))
    dt = 1e-4
    trace = run(model, command(0.05), 0.1, dt)
    t = dt * np.arange(1, len(trace) + 1)
    x = np.array([f.position[0] for f in trace])
    # Forward-Euler discretisation of x' = (g - x)/tau: x_k = g (1 - (1 - dt/tau)^k).
    exact = 0.05 * (1 - (1 - dt / 0.02) ** np.arange(1, len(trace) + 1))
    assert np.max(np.abs(x - exact)) < 1e-12
    assert x[-1] == pytest.approx(0.05 * (1 - math.exp(-t[-1] / 0.02)), rel=1e-2)


def test_large_step_saturates_at_no_load_speed_and_velocity_limit() -> None:
    model = FirstOrderServo(2)
    model.reset(np.zeros(2))
    cmd = ServoCommand(np.array([3.0, 3.0]), np.ones(2, bool), np.full(2, np.inf), np.full(2, np.inf),
                       np.array([100.0, 4.0]))
    trace = run(model, cmd, 0.2)
    v = np.array([f.velocity for f in trace])
    assert np.max(v[:, 0]) == pytest.approx(XM430_NO_LOAD_SPEED_RAD_S)
    assert np.max(v[:, 1]) == pytest.approx(4.0)
    assert XM430_NO_LOAD_SPEED_RAD_S == pytest.approx(8.0634, abs=1e-3)


def test_rated_servos_move_and_draw_current_by_their_model() -> None:
    from retarget.dynamixel.control_table import load_control_table

    ratings = load_control_table(model="XM540-W270").ratings
    model = FirstOrderServo.rated(1, ratings, time_constant=0.02)
    assert model.time_constant == 0.02
    model.reset(np.zeros(1))
    trace = run(model, command(3.0, vl=np.inf), 0.5)
    assert max(f.velocity[0] for f in trace) == pytest.approx(math.pi)  # 30 rev/min
    # At constant speed the current is the no-load share, a tenth of the stall current at full speed.
    assert trace[-1].current[0] == pytest.approx(0.1 * 4.4)
    assert max(abs(f.current[0]) for f in trace) <= 4.4
    with pytest.raises(ValueError, match="positive"):
        FirstOrderServo(1, stall_current=0.0)


def test_profile_velocity_and_acceleration_are_honoured() -> None:
    model = FirstOrderServo(1)
    model.reset(np.zeros(1))
    trace = run(model, command(2.0, pv=1.5, pa=10.0), 2.5)
    v = np.array([f.velocity[0] for f in trace])
    assert np.max(v) == pytest.approx(1.5)
    assert np.max(np.diff(v)) <= 10.0 * 1e-3 + 1e-12
    # Trapezoid ramp: reaching 1.5 rad/s at 10 rad/s² takes 0.15 s.
    assert np.argmax(v >= 1.5 - 1e-9) * 1e-3 == pytest.approx(0.15, abs=2e-3)
    assert trace[-1].position[0] == pytest.approx(2.0, abs=1e-3)


def test_torque_off_does_not_move_and_current_is_bounded() -> None:
    model = FirstOrderServo(1)
    model.reset(np.array([0.3]))
    trace = run(model, command(2.0, on=False), 0.2)
    assert trace[-1].position[0] == 0.3 and trace[-1].velocity[0] == 0.0
    model.reset(np.zeros(1))
    trace = run(model, command(2.0), 0.5)
    assert max(abs(f.current[0]) for f in trace) <= 2.3


def test_callback_dynamics_delegates() -> None:
    seen = []

    def step(cmd: ServoCommand, dt: float) -> ServoFeedback:
        seen.append((cmd.goal_position.copy(), dt))
        return ServoFeedback(cmd.goal_position.copy(), np.zeros(1), np.zeros(1))

    dyn = CallbackDynamics(step)
    assert dyn.reset(np.array([0.1])).position[0] == 0.1
    assert dyn.step(command(0.7), 0.005).position[0] == 0.7
    assert seen[0][1] == 0.005


@pytest.mark.parametrize("pa", [np.inf, 50.0])
def test_advance_equals_that_many_steps_also_across_the_rest_at_the_goal(pa: float) -> None:
    """FirstOrderServo.advance stops stepping at a fixed point: its state and feedback equal n plain steps, bit for
    bit, whether the servo moves, arrives or rests (every 0.1 s of a 3 s move, 50 steps of 2 ms at a time)."""
    plain, fast = FirstOrderServo(2), FirstOrderServo(2)
    for model in (plain, fast):
        model.reset(np.array([0.0, 0.3]))
    cmd = command(np.array([0.8, 0.3]), pa=pa)
    for _ in range(30):
        for _ in range(50):
            expected = plain.step(cmd, 0.002)
        got = fast.advance(cmd, 0.002, 50)
        for field in ("position", "velocity", "current"):
            np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))
    first, second = plain.step(cmd, 0.002), plain.step(cmd, 0.002)  # it came to rest: a fixed point was reached
    np.testing.assert_array_equal(second.position, first.position)
    np.testing.assert_array_equal(second.velocity, first.velocity)
