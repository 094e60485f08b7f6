"""``send_goal``: a goal's handle from its response, or from its feedback when the response goes missing (unit tests
of the waiting with a stand-in action client; the futures and goal handles are rclpy's own)."""
from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("rclpy")


class _Client:
    """An action client whose server answers (``respond``) or not, and sends feedback (``feedback``) or not."""

    def __init__(self, respond: bool, feedback: bool) -> None:
        from control_msgs.action import FollowJointTrajectory

        self.action_type = FollowJointTrajectory
        self.respond, self.feedback = respond, feedback
        self.goal_ids: list[object] = []

    def send_goal_async(self, goal, feedback_callback=None, goal_uuid=None):
        from rclpy.action.client import ClientGoalHandle
        from rclpy.task import Future

        self.goal_ids.append(goal_uuid)
        future = Future()
        if self.respond:
            future.set_result(ClientGoalHandle(self, goal_uuid,
                                               self.action_type.Impl.SendGoalService.Response(accepted=True)))
        if self.feedback and feedback_callback is not None:
            def feed() -> None:
                for _ in range(40):
                    feedback_callback(self.action_type.Feedback())
                    time.sleep(0.05)
            threading.Thread(target=feed, daemon=True).start()
        return future


def _goal():
    from control_msgs.action import FollowJointTrajectory

    return FollowJointTrajectory.Goal()


def test_the_response_is_the_handle() -> None:
    from retarget.ros.futures import send_goal

    client = _Client(respond=True, feedback=False)
    handle = send_goal(client, _goal(), 1.0, "no goal response")
    assert handle.accepted and handle.goal_id == client.goal_ids[0]


def test_a_goal_whose_feedback_comes_without_a_response_is_taken_as_accepted() -> None:
    from retarget.ros.futures import ADOPT_AFTER_S, send_goal

    client, warned, fed = _Client(respond=False, feedback=True), [], []
    began = time.monotonic()
    handle = send_goal(client, _goal(), 10.0, "no goal response", feedback_callback=fed.append, warn=warned.append)
    assert handle.accepted and handle.goal_id == client.goal_ids[0]  # the UUID the feedback names
    assert ADOPT_AFTER_S <= time.monotonic() - began < 10.0
    assert fed and warned == ["no goal response, but the goal's feedback comes: taken as accepted"]


def test_no_response_and_no_feedback_times_out() -> None:
    from retarget.ros.futures import send_goal

    with pytest.raises(TimeoutError, match="no goal response within 0.3 s"):
        send_goal(_Client(respond=False, feedback=False), _goal(), 0.3, "no goal response")


class _Handle:
    """A goal handle whose first ``lost`` result requests are never answered (rclpy futures); the later ones are
    answered at once. Its status is the server's status topic's last word."""

    def __init__(self, status: int, lost: int) -> None:
        self.status, self.lost, self.requests, self.cancelled = status, lost, 0, False

    def get_result_async(self):
        from rclpy.task import Future

        self.requests += 1
        future = Future()
        if self.requests > self.lost:
            future.set_result(f"result of request {self.requests}")
        return future

    def cancel_goal_async(self):
        from rclpy.task import Future

        self.cancelled = True
        future = Future()
        future.set_result("cancelled")
        return future


def test_the_ended_statuses_are_action_msgs_own() -> None:
    from action_msgs.msg import GoalStatus

    from retarget.ros.futures import _ENDED, _UNKNOWN

    assert _ENDED == {GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_CANCELED, GoalStatus.STATUS_ABORTED}
    assert _UNKNOWN == GoalStatus.STATUS_UNKNOWN


def test_a_result_lost_after_the_goal_ended_is_asked_for_again(monkeypatch) -> None:
    import retarget.ros.futures as futures
    from action_msgs.msg import GoalStatus

    monkeypatch.setattr(futures, "ASK_AGAIN_AFTER_S", 0.1)
    handle = _Handle(GoalStatus.STATUS_SUCCEEDED, lost=2)
    assert futures.result_or_cancel(handle, 10.0, "no result") == "result of request 3"
    assert not handle.cancelled


def test_a_goal_whose_status_never_comes_is_asked_for_its_result_every_few_seconds(monkeypatch) -> None:
    """A handle adopted from feedback (send_goal): rclpy never updates its status."""
    import retarget.ros.futures as futures
    from action_msgs.msg import GoalStatus

    monkeypatch.setattr(futures, "ASK_UNTRACKED_EVERY_S", 0.1)
    handle = _Handle(GoalStatus.STATUS_UNKNOWN, lost=2)
    assert futures.result_or_cancel(handle, 10.0, "no result") == "result of request 3"
    assert not handle.cancelled


def test_a_running_goals_result_is_asked_for_once_and_the_goal_cancelled_at_the_timeout(monkeypatch) -> None:
    import retarget.ros.futures as futures
    from action_msgs.msg import GoalStatus

    monkeypatch.setattr(futures, "ASK_AGAIN_AFTER_S", 0.05)
    monkeypatch.setattr(futures, "ASK_UNTRACKED_EVERY_S", 0.05)
    handle = _Handle(GoalStatus.STATUS_EXECUTING, lost=1)
    with pytest.raises(TimeoutError, match="no result within 0.3 s; the goal was cancelled"):
        futures.result_or_cancel(handle, 0.3, "no result")
    assert handle.requests == 1 and handle.cancelled
