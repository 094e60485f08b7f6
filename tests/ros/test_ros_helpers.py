"""The ROS tests' own helpers (tests/ros/ros_helpers.py), on stand-in goal handles: no DDS."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ros_helpers import result_of

pytest.importorskip("action_msgs", reason="action_msgs is not installed (make setup)")


class Handle:
    """A goal handle whose first ``lost`` result requests are never answered; the later ones are at once."""

    def __init__(self, status: int, lost: int) -> None:
        self.status, self.lost, self.requests = status, lost, 0

    def get_result_async(self) -> Any:
        self.requests += 1
        answered = self.requests > self.lost
        return SimpleNamespace(done=lambda: answered, result=lambda: SimpleNamespace(result="the result"))


def test_a_result_lost_after_the_goal_ended_is_requested_again() -> None:
    from action_msgs.msg import GoalStatus

    handle = Handle(GoalStatus.STATUS_SUCCEEDED, lost=2)
    assert result_of(handle, 5.0, lambda: "", ended_s=0.05) == "the result" and handle.requests == 3


def test_a_goal_that_does_not_end_fails_with_the_nodes_log() -> None:
    from action_msgs.msg import GoalStatus

    handle = Handle(GoalStatus.STATUS_EXECUTING, lost=1)
    with pytest.raises(AssertionError, match=r"(?s)waiting for the result \(goal status 2\).*planner log line"):
        result_of(handle, 0.2, lambda: "planner log line", ended_s=0.05)
    assert handle.requests == 1  # a running goal's request is not repeated
