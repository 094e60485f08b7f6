"""Waiting for an rclpy future from a thread that does not spin it (the clients' executor spins in its own thread).

rclpy itself is not imported: the commands that wait (``retarget play``, ``retarget tune``) import it only when they
run.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rclpy.task import Future

__all__ = ["POLL_S", "wait_future"]

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
