"""Waiting for an rclpy future from a thread that does not spin it (the clients' executor spins in its own thread).

rclpy itself is not imported: the commands that wait (``retarget play``, ``retarget tune``) import it only when they
run.
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rclpy.action.client import ClientGoalHandle
    from rclpy.task import Future

__all__ = ["POLL_S", "result_or_cancel", "wait_future"]

_T = TypeVar("_T")

#: How often :func:`wait_future` looks at the future (and calls its ``tick``) [s].
POLL_S = 0.05


def wait_future(future: Future[_T], timeout: float, what: str, *, tick: Callable[[], None] | None = None,
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
    (``wait``: its ``tick``, ``alive``, ``silence_s``, ``late_limit_s``); the server is never left running a goal
    nobody waits for.

    No result in time (TimeoutError) or anything raised while waiting (a Ctrl-C's KeyboardInterrupt, an error of
    ``tick``) cancels the goal first, waiting up to ``cancel_timeout_s`` [s] for the server's answer, then raises
    again: a TimeoutError as ``"{what} within {timeout} s; the goal was cancelled"`` or, unanswered, ``"…; its cancel
    was not confirmed (…), {unconfirmed}"``; anything else as it was, an unanswered cancel said on stderr.
    """
    try:
        return wait_future(handle.get_result_async(), timeout, what, **wait)
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
