"""``RobotClient.execute`` without a graph: a goal whose result does not come in time, or a Ctrl-C while waiting,
is cancelled before the error propagates (the robot must not go on moving with nobody waiting for it); a longer goal
is stamped further ahead."""
from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("control_msgs", reason="control_msgs is not built (make setup)")

from retarget.ros.player import RobotClient  # noqa: E402


class _Future:
    def __init__(self, value: Any = None, done: bool = True) -> None:
        self.value, self._done = value, done

    def done(self) -> bool:
        return self._done

    def result(self) -> Any:
        return self.value


class _Handle:
    def __init__(self, result: _Future, accepted: bool = True) -> None:
        self.accepted = accepted
        self.status = 2  # rclpy's handle's last status from the server: EXECUTING
        self._result = result
        self.cancelled = threading.Event()

    def get_result_async(self) -> _Future:
        return self._result

    def cancel_goal_async(self) -> _Future:
        self.cancelled.set()
        return _Future()


def _client(handle: _Handle) -> RobotClient:
    client = object.__new__(RobotClient)  # no rclpy context: only execute() is exercised
    client.follow = SimpleNamespace(send_goal_async=lambda goal, feedback_callback=None, goal_uuid=None: _Future(handle))
    return client


def _trajectory() -> Any:
    from trajectory_msgs.msg import JointTrajectory

    return JointTrajectory(joint_names=["a"])


def test_a_result_that_never_comes_cancels_the_goal() -> None:
    handle = _Handle(_Future(done=False))
    with pytest.raises(TimeoutError, match="no trajectory result within 0.2 s; the goal was cancelled"):
        _client(handle).execute(_trajectory(), 0.0, 0.2)
    assert handle.cancelled.is_set()


def test_ctrl_c_while_waiting_cancels_the_goal() -> None:
    handle = _Handle(_Future(done=False))

    def interrupt(_elapsed: float) -> None:
        raise KeyboardInterrupt

    client = _client(handle)
    client.now = lambda: 0.0
    with pytest.raises(KeyboardInterrupt):
        client.execute(_trajectory(), 0.0, 10.0, progress=interrupt)
    assert handle.cancelled.is_set()


def test_a_rejected_goal_is_a_runtime_error_and_a_result_is_returned() -> None:
    with pytest.raises(RuntimeError, match="did not accept"):
        _client(_Handle(_Future(), accepted=False)).execute(_trajectory(), 0.0, 1.0)
    done = SimpleNamespace(result=SimpleNamespace(error_code=0))
    assert _client(_Handle(_Future(done))).execute(_trajectory(), 0.0, 1.0).error_code == 0


class _DeafHandle(_Handle):
    """A server that never answers the cancel."""

    def cancel_goal_async(self) -> _Future:
        self.cancelled.set()
        return _Future(done=False)


def test_ctrl_c_stays_a_ctrl_c_when_the_cancel_goes_unanswered(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from retarget.ros import player

    monkeypatch.setattr(player, "CANCEL_TIMEOUT_S", 0.1)
    handle = _DeafHandle(_Future(done=False))

    def interrupt(_elapsed: float) -> None:
        raise KeyboardInterrupt

    client = _client(handle)
    client.now = lambda: 0.0
    with pytest.raises(KeyboardInterrupt):  # the command's exit 130, not a failure's 1
        client.execute(_trajectory(), 0.0, 10.0, progress=interrupt)
    assert handle.cancelled.is_set()
    assert "the goal's cancel was not confirmed, the robot may still be moving" in capsys.readouterr().err


def test_a_missing_result_with_an_unanswered_cancel_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from retarget.ros import player

    monkeypatch.setattr(player, "CANCEL_TIMEOUT_S", 0.1)
    with pytest.raises(TimeoutError, match="no trajectory result within 0.2 s; its cancel was not confirmed"):
        _client(_DeafHandle(_Future(done=False))).execute(_trajectory(), 0.0, 0.2)


class _Clock:
    """A monotonic clock that advances only when slept on."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_late_result_is_waited_for_while_the_servers_feedback_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A robot (or a twin running behind the bus) still settling past the timeout: the server's feedback keeps
    coming, so the result is waited for; once the feedback falls silent for FEEDBACK_SILENCE_S, the wait ends."""
    from retarget.ros import futures, player

    clock = _Clock()
    monkeypatch.setattr(player, "time", clock)
    monkeypatch.setattr(futures, "time", clock)
    result = _Future(done=False)
    handle = _Handle(result)
    feed: list[Any] = []
    client = object.__new__(RobotClient)

    def send(goal: Any, feedback_callback: Any = None, goal_uuid: Any = None) -> _Future:
        feed.append(feedback_callback)
        return _Future(handle)

    client.follow = SimpleNamespace(send_goal_async=send)
    client.now = lambda: clock.now

    def progress(_elapsed: float) -> None:  # feedback every tick until 30 s after the send, the result at 25 s
        if clock.now < 130.0:
            feed[0](object())
        if clock.now >= 125.0:
            result._done, result.value = True, SimpleNamespace(result="done")

    assert client.execute(_trajectory(), 0.0, 10.0, progress=progress) == "done"
    assert 125.0 <= clock.now < 125.2 and not handle.cancelled.is_set()

    clock.now, feed[:] = 100.0, []
    result._done = False

    def fed_until_30(_elapsed: float) -> None:
        if clock.now < 130.0:
            feed[0](object())

    with pytest.raises(TimeoutError, match=r"no trajectory result within 10 s \(waited 2\d\.\d s more while "
                       r"its feedback came\); the goal was cancelled"):
        client.execute(_trajectory(), 0.0, 10.0, progress=fed_until_30)
    assert 130.0 + player.FEEDBACK_SILENCE_S <= clock.now < 130.0 + player.FEEDBACK_SILENCE_S + 0.2
    assert handle.cancelled.is_set()


def test_a_longer_goal_is_stamped_further_ahead() -> None:
    from retarget.ros.player import LEAD_PER_POINT_S, START_LEAD_S, start_lead

    assert start_lead(1) == START_LEAD_S + LEAD_PER_POINT_S
    assert start_lead(22_223) == START_LEAD_S + 22_223 * LEAD_PER_POINT_S > 1.6
