"""Waiting for an rclpy future from a thread that does not spin it (the clients' executor spins in its own thread).

rclpy itself is not imported: the commands that wait (``retarget play``, ``retarget tune``) import it only when they
run.
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from retarget.ros.action_client import LockedActionClient
    from rclpy.action.client import ClientGoalHandle

__all__ = ["ADOPT_AFTER_S", "ASK_AGAIN_AFTER_S", "ASK_UNTRACKED_EVERY_S", "POLL_S", "result_or_cancel", "send_goal",
           "wait_future"]

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)

#: How often :func:`wait_future` looks at the future (and calls its ``tick``) [s].
POLL_S = 0.05

#: How long [s] after a goal's first feedback :func:`send_goal` still waits for the goal's response before it takes
#: the feedback as the acceptance.
ADOPT_AFTER_S = 1.0

#: How long [s] after a goal's status says it has ended :func:`result_or_cancel` still waits for the result's
#: response before it asks for the result again.
ASK_AGAIN_AFTER_S = 2.0

#: How often [s] :func:`result_or_cancel` asks again for the result of a goal whose status it never learns (UNKNOWN:
#: a handle :func:`send_goal` adopted from the goal's feedback, which rclpy does not track). The server answers each
#: request once the goal has ended, so a request sent while the goal runs is only answered late, never wrongly.
ASK_UNTRACKED_EVERY_S = 10.0

#: The goal statuses of an ended goal (action_msgs/GoalStatus: SUCCEEDED, CANCELED, ABORTED).
_ENDED = frozenset({4, 5, 6})

#: action_msgs/GoalStatus STATUS_UNKNOWN: no status received for the goal.
_UNKNOWN = 0


class _Pending(Protocol[_T_co]):
    """What :func:`wait_future` waits on: an rclpy future, or a :class:`_ResultRequests`."""

    def done(self) -> bool: ...

    def result(self) -> _T_co | None: ...


class _ResultRequests:
    """A goal's result response, as a future: asked for again when the goal's status (the server's status topic)
    says the goal has ended and no response came within :data:`ASK_AGAIN_AFTER_S`, and every
    :data:`ASK_UNTRACKED_EVERY_S` while its status stays UNKNOWN (a handle rclpy does not track). The server keeps an
    ended goal's result and answers every request for it, so a response lost on the way is not waited for until the
    timeout (or for ever: the demo and ``retarget goal`` wait without one)."""

    def __init__(self, handle: ClientGoalHandle) -> None:
        self.handle = handle
        self.requests = [handle.get_result_async()]
        self.asked_at = time.monotonic()
        self.ended_at: float | None = None

    def done(self) -> bool:
        if any(request.done() for request in self.requests):
            return True
        now = time.monotonic()
        status = self.handle.status
        if status in _ENDED:
            if self.ended_at is None:
                self.ended_at = now
            elif now - self.ended_at > ASK_AGAIN_AFTER_S:
                self._ask(now)
                self.ended_at = now
        elif status == _UNKNOWN and now - self.asked_at > ASK_UNTRACKED_EVERY_S:
            self._ask(now)
        return False

    def _ask(self, now: float) -> None:
        self.requests.append(self.handle.get_result_async())
        self.asked_at = now

    def result(self) -> Any:
        return next(request for request in self.requests if request.done()).result()


def wait_future(future: _Pending[_T], timeout: float, what: str, *, tick: Callable[[], None] | None = None,
                alive: Callable[[], float] | None = None, silence_s: float = 0.0,
                late_limit_s: float = 0.0) -> _T:
    """The future's result, polling ``tick()`` (which may raise) every :data:`POLL_S`.

    Raises ``TimeoutError("{what} within {timeout} s")`` once ``timeout`` [s] has passed — or, when ``alive()`` (the
    monotonic instant the other side last showed it is at work, e.g. an action's feedback) is given, once the
    other side has also been silent for ``silence_s``, at most ``late_limit_s`` past the timeout.
    """
    deadline = time.monotonic() + timeout
    while not future.done():
        now = time.monotonic()
        if now > deadline:
            last = alive() if alive is not None else -math.inf
            if now - last > silence_s or now > deadline + late_limit_s:
                fed = "" if last == -math.inf else f" (waited {now - deadline:.1f} s more while its feedback came)"
                raise TimeoutError(f"{what} within {timeout:g} s{fed}")
        if tick is not None:
            tick()
        time.sleep(POLL_S)
    return future.result()


def result_or_cancel(handle: ClientGoalHandle, timeout: float, what: str, *, cancel_timeout_s: float = 5.0,
                     unconfirmed: str = "", **wait: Any) -> Any:
    """An action goal's result response (``.result``, ``.status``), waited for as :func:`wait_future` waits
    (``wait``: its ``tick``, ``alive``, ``silence_s``, ``late_limit_s``) and asked for again when the goal has ended
    without it (:data:`ASK_AGAIN_AFTER_S`); the server is never left running a goal nobody waits for.

    No result in time (TimeoutError) or anything raised while waiting (a Ctrl-C's KeyboardInterrupt, an error of
    ``tick``) cancels the goal first, waiting up to ``cancel_timeout_s`` [s] for the server's answer, then raises
    again: a TimeoutError as ``"{what} within {timeout} s; the goal was cancelled"`` or, unanswered, ``"…; its cancel
    was not confirmed (…), {unconfirmed}"``; anything else as it was, an unanswered cancel said on stderr.
    """
    try:
        return wait_future(_ResultRequests(handle), timeout, what, **wait)
    except BaseException as exc:
        try:
            wait_future(handle.cancel_goal_async(), cancel_timeout_s, "no cancel response")
        except TimeoutError as unanswered:
            tail = f", {unconfirmed}" if unconfirmed else ""
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"{exc}; its cancel was not confirmed ({unanswered}){tail}") from None
            print(f"{unanswered}: the goal's cancel was not confirmed{tail}", file=sys.stderr, flush=True)
            raise exc from None
        if isinstance(exc, TimeoutError):
            raise TimeoutError(f"{exc}; the goal was cancelled") from None
        raise


def send_goal(client: LockedActionClient, goal: object, timeout: float, what: str, *,
              feedback_callback: Callable[[Any], None] | None = None,
              warn: Callable[[str], None] | None = None) -> ClientGoalHandle:
    """Send ``goal`` on ``client`` (its executor spins in another thread) and return its handle once the server
    answers, or raise ``TimeoutError("{what} within {timeout} s")``.

    A goal response can go missing while the goal runs: on a loaded host (load 5–9 on 2 cores) 2 of 40 plays on the
    twin got no response to a goal whose feedback they received. rclpy's own client loses responses to a race
    (:mod:`retarget.ros.action_client`, which the clients here use); for any other loss, the feedback names the goal
    (its UUID, chosen here), so a goal whose feedback comes without a response for :data:`ADOPT_AFTER_S` is taken as
    accepted: the returned handle asks for its result and can cancel it as the server's own would, and ``warn``
    says so.
    """
    import uuid

    from rclpy.action.client import ClientGoalHandle
    from unique_identifier_msgs.msg import UUID

    goal_id = UUID(uuid=list(uuid.uuid4().bytes))
    first_feedback = [-math.inf]

    def on_feedback(message: object) -> None:
        if first_feedback[0] == -math.inf:
            first_feedback[0] = time.monotonic()
        if feedback_callback is not None:
            feedback_callback(message)

    future = client.send_goal_async(goal, feedback_callback=on_feedback, goal_uuid=goal_id)
    deadline = time.monotonic() + timeout
    while not future.done():
        now = time.monotonic()
        if first_feedback[0] > -math.inf and now - first_feedback[0] > ADOPT_AFTER_S:
            if warn is not None:
                warn(f"{what}, but the goal's feedback comes: taken as accepted")
            response = client.action_type.Impl.SendGoalService.Response(accepted=True)
            return ClientGoalHandle(client, goal_id, response)
        if now > deadline:
            raise TimeoutError(f"{what} within {timeout:g} s")
        time.sleep(POLL_S)
    return future.result()
