"""Where a new goal starts: the command the servos hold, else the measured state (``start_state``)."""
from __future__ import annotations

import numpy as np

from retarget.control import ExecutionState, start_state

COMMAND = np.array([0.5, -0.2])
SAGGED = ExecutionState(np.array([0.47, -0.21]), np.array([0.0, 0.0]))


def test_the_held_command_is_the_start_while_the_servos_hold_it() -> None:
    start = start_state(SAGGED, COMMAND, hold_within=0.2)
    np.testing.assert_array_equal(start.positions, COMMAND)
    assert start.velocities is None


def test_the_measured_state_is_the_start_when_far_replacing_off_or_without_a_command() -> None:
    pushed = ExecutionState(np.array([0.8, -0.2]))
    assert start_state(pushed, COMMAND, hold_within=0.2) is pushed
    assert start_state(SAGGED, COMMAND, hold_within=0.2, replacing=True) is SAGGED
    assert start_state(SAGGED, COMMAND, hold_within=0.0) is SAGGED
    assert start_state(SAGGED, None, hold_within=0.2) is SAGGED


def test_open_loop_starts_from_the_command_even_without_a_measurement() -> None:
    np.testing.assert_array_equal(start_state(None, COMMAND, open_loop=True).positions, COMMAND)
    assert start_state(None, COMMAND, hold_within=0.2) is None
    assert start_state(None, None, open_loop=True) is None
