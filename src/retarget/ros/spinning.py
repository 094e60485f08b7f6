"""Spinning a node until Ctrl-C without a traceback: the shutdown race of rclpy's signal handler.

On SIGINT rclpy's signal handler shuts the context down at once, from the signal, while the executor may be inside
a wait or taking a message, and while a node's own threads may still use its handles. The executor then fails with
whatever the half-torn-down handles raise (``RuntimeError: Unable to convert call argument '0'`` from
``take_message``, ``InvalidHandle``, ``RCLError``); a thread that triggers a guard condition gets ``InvalidHandle``.
The signal can also land while a message is being converted inside ``take_message``: the KeyboardInterrupt then
surfaces as that RuntimeError, chained or not at all. rclpy shuts the context down from its own signal thread, so
when the executor fails the context may still be up for a moment. None of that is an error of the node: it was
stopping anyway. :func:`spin` absorbs it when a KeyboardInterrupt is in its chain or once the context is shut down
(waiting up to :data:`SHUTDOWN_GRACE_S` for that), and re-raises anything else.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node

__all__ = ["spin"]

#: How long a failed spin waits for the context to be shut down before it calls the failure a real error: rclpy's
#: signal thread shuts the context down a moment after the signal (milliseconds; seconds on a loaded machine).
SHUTDOWN_GRACE_S = 3.0


def spin(node: Node, executor: Executor | None = None, before_shutdown: Callable[[], None] | None = None) -> None:
    """Spin ``node`` until Ctrl-C or an external shutdown; return quietly then.

    Args:
        node: The node (its context is the one rclpy's signal handler shuts down).
        executor: The executor to use (default: a new :class:`SingleThreadedExecutor` on the node's context).
        before_shutdown: Called once spinning ends, before this returns (and so before the caller's
            ``with rclpy.init()`` block shuts the context down): stop the node's own threads here.

    Raises:
        Whatever spinning raised while the context was still up (a real error in a callback).
    """
    executor = executor or SingleThreadedExecutor(context=node.context)
    try:
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:
        if not _interrupted(exc) and not _shut_down_soon(node, SHUTDOWN_GRACE_S):
            raise
    finally:
        try:
            if before_shutdown is not None:
                before_shutdown()
        finally:
            executor.shutdown(timeout_sec=1.0)


def _shut_down_soon(node: Node, grace_s: float) -> bool:
    """Whether ``node``'s context is shut down now or within ``grace_s``."""
    deadline = time.monotonic() + grace_s
    while node.context.ok():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt or an external shutdown is in ``exc``'s chain of causes."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (KeyboardInterrupt, ExternalShutdownException)):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
