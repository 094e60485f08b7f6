"""Spinning a node until Ctrl-C without a traceback: the shutdown race of rclpy's signal handler.

On SIGINT rclpy's signal handler shuts the context down from its own signal thread and wakes the executor, which
then ends with ``ExternalShutdownException``. The handler also passes the signal on to Python's, whose
KeyboardInterrupt lands at whatever bytecode the main thread is running: inside the executor's bookkeeping (a
half-built ``Future`` whose ``__del__`` prints "Exception ignored ... AttributeError"), inside ``take_message``
converting a message (``RuntimeError: Unable to convert call argument '0'``), or inside a callback. :func:`spin`
therefore puts a Python SIGINT handler that only notes the signal under rclpy's while the executor spins (from the
main thread, when rclpy handles SIGINT), so Ctrl-C ends spinning at the executor's wait alone; the previous handler
is back before ``before_shutdown`` runs, so a second Ctrl-C can still interrupt the clean-up.

The executor can still fail while the context is torn down under it (``InvalidHandle``, ``RCLError``), and a
node's thread that triggers a guard condition gets ``InvalidHandle``. None of that is an error of the node: it was
stopping anyway. :func:`spin` absorbs it when a SIGINT was noted, a KeyboardInterrupt is in the exception's chain
(Ctrl-C outside the main thread's spin) or once the context is shut down (waiting up to :data:`SHUTDOWN_GRACE_S`
for that), and re-raises anything else.

A crash in native code (rclpy, the DDS) would end a node with nothing in its log but the exit code -11: :func:`spin`
turns on :mod:`faulthandler`, so the node prints every thread's Python stack to stderr when it dies of a fatal
signal, and its log says where.
"""
from __future__ import annotations

import faulthandler
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import (
    SignalHandlerOptions,
    get_current_signal_handlers_options,
    install_signal_handlers,
    uninstall_signal_handlers,
)

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
    if not faulthandler.is_enabled():
        faulthandler.enable()
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
        # A node that does not stop on SIGINT prints where it is when the supervisor asks (Supervisor.stop).
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    executor = executor or SingleThreadedExecutor(context=node.context)
    noted: list[int] = []
    try:
        with _sigint_noted(noted):
            executor.add_node(node)
            if not noted:  # a SIGINT while the handlers were swapped shut nothing down: do not start
                executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:
        if not noted and not _interrupted(exc) and not _shut_down_soon(node, SHUTDOWN_GRACE_S):
            raise
    finally:
        try:
            if before_shutdown is not None:
                before_shutdown()
        finally:
            executor.shutdown(timeout_sec=1.0)


@contextmanager
def _sigint_noted(noted: list[int]) -> Iterator[None]:
    """Within the block, SIGINT is rclpy's shutdown alone: Python's handler appends the signal to ``noted``.

    rclpy's C handler passes a signal on to the Python handler installed when it was installed itself, so its
    handlers are uninstalled, the noting handler put in, and they are installed again over it; on the way out the
    previous Python handler is put back the same way. Nothing changes off the main thread (where Python sets no
    handler) or when rclpy handles no SIGINT (Ctrl-C would then do nothing at all).
    """
    options = get_current_signal_handlers_options()
    if options not in (SignalHandlerOptions.ALL, SignalHandlerOptions.SIGINT) or \
            threading.current_thread() is not threading.main_thread():
        yield
        return
    uninstall_signal_handlers()
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    install_signal_handlers(options)
    try:
        yield
    finally:
        try:
            uninstall_signal_handlers()
        finally:  # Python's handler is back whatever rclpy's teardown does meanwhile
            signal.signal(signal.SIGINT, previous)
            install_signal_handlers(options)


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
