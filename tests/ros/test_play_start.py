"""``retarget play`` moves to the motion's first pose before playing it: when the robot is farther than the start
tolerance, and always before a recorded take (unit test of the decision with a stand-in client)."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.motion.motion import Motion

pytest.importorskip("rclpy")


class _Client:
    def __init__(self) -> None:
        self.moves: list[tuple[list[float], float]] = []

    def move_to(self, positions, seconds):
        from types import SimpleNamespace

        self.moves.append((list(positions), seconds))
        return SimpleNamespace(error_code=0, error_string="")


def _trajectory():
    from retarget.ros.motion_convert import to_joint_trajectory_msg

    return to_joint_trajectory_msg(Motion(np.array([0.0, 0.5]), ("a",), np.array([[0.4], [0.5]])))


@pytest.mark.parametrize(("current", "always", "moved"), [(0.0, False, True), (0.399, False, False),
                                                          (0.399, True, True), (0.4, True, True)])
def test_a_take_always_starts_after_the_move_to_the_first_pose(current: float, always: bool, moved: bool) -> None:
    from retarget.ros.player import _move_to_start

    client, report = _Client(), {"moved_to_start": False}
    assert _move_to_start(client, _trajectory(), np.array([current]), 0.02, 2.0, report, always=always) is None
    assert report["moved_to_start"] is moved
    assert client.moves == ([([0.4], 2.0)] if moved else [])
