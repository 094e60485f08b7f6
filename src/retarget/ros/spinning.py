"""Spinning a node until Ctrl-C without a traceback: the shutdown race of rclpy's signal handler.

On SIGINT rclpy's signal handler shuts the context down from its own signal thread and wakes the executor, which
then ends with ``ExternalShutdownException``. The handler also passes the signal on to Python's, whose
KeyboardInterrupt lands at whatever bytecode the main thread is running: inside the executor's bookkeeping (a
half-built ``Future`` whose ``__del__`` prints "Exception ignored ... AttributeError"), inside ``take_message``
converting a message (``RuntimeError: Unable to convert call argument '0'``), or inside a callback. :func:`spin`
therefore puts a Python SIGINT handler that only notes the signal under rclpy's while the executor spins (from the
main thread, when rclpy handles SIGINT), so Ctrl-C ends spinning at the executor's wait alone; outside a node's
process (below) the previous handler is back before ``before_shutdown`` runs, so a second Ctrl-C can still
interrupt the clean-up. The executor's wait returns to Python every :data:`WAKE_S` (0.2 s), so a noted stop ends
spinning within that even when rclpy's wake-up of the executor does not come (on a loaded machine a node can be left
waiting in the executor past its stop timeout without it).

The executor can still fail while the context is torn down under it (``InvalidHandle``, ``RCLError``), and a
node's thread that triggers a guard condition gets ``InvalidHandle``. None of that is an error of the node: it was
stopping anyway. :func:`spin` absorbs it when a SIGINT was noted, a KeyboardInterrupt is in the exception's chain
(Ctrl-C outside the main thread's spin) or once the context is shut down (waiting up to :data:`SHUTDOWN_GRACE_S`
for that), and re-raises anything else.

A crash in native code (rclpy, the DDS) would end a node with nothing in its log but the exit code -11: :func:`spin`
turns on :mod:`faulthandler`, so the node prints every thread's Python stack to stderr when it dies of a fatal
signal, and its log says where.

A node's process (its ``main``) runs inside :func:`stopping_on_signals` and ends with :func:`close_node`, so that
the first SIGINT (or SIGTERM) always ends it within :data:`STOP_TIMEOUT_S`:

- from ``rclpy.init()`` on, not only while spinning, a signal only notes the stop (rclpy shuts the context down):
  no KeyboardInterrupt lands in the constructor's bus I/O or in a finalizer run by the garbage collector (where
  Python would print it as "Exception ignored" and drop it: the stop would be lost); a start-up that sees the
  context down stops early, and spinning does not begin; a second signal is noted too (the watchdog bounds the
  clean-up);
- the first signal arms a watchdog (:func:`faulthandler.dump_traceback_later`, a C thread that needs no GIL): if
  the process has not ended :data:`STOP_TIMEOUT_S` later, every thread's stack goes to stderr and the process
  exits with code 1 — before the supervisor's 8 s run out, so a node that hangs reports itself, with its stacks,
  instead of being killed;
- :func:`close_node` destroys the node (its publishers, subscriptions, services: DDS entities) and runs the
  garbage collector on the main thread, while the watchdog watches. Left to the interpreter's exit, rclpy's
  objects in reference cycles are destroyed by the collector in whatever order it finds them, after the context
  is shut down — a hang there shows as "Garbage-collecting" with no Python frame to say where.

``RETARGET_TEST_STOP_GC=1`` (tests only, :data:`TEST_STOP_GC_ENV`) forces a full collection in the signal path (the
handler runs it on the main thread wherever the signal interrupted it); the Dynamixel driver also forces one in the
middle of a bus exchange after the stop (``tests/ros/test_shutdown_cycles.py``).
"""
from __future__ import annotations

import faulthandler
import gc
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import (
    SignalHandlerOptions,
    get_current_signal_handlers_options,
    install_signal_handlers,
    uninstall_signal_handlers,
)

from retarget.processes import ordinary_scheduling

__all__ = ["STOP_TIMEOUT_S", "TEST_STOP_GC_ENV", "StopState", "close_node", "spin", "stop_requested",
           "stopping_on_signals"]

#: How long a failed spin waits for the context to be shut down before it calls the failure a real error: rclpy's
#: signal thread shuts the context down a moment after the signal (milliseconds; seconds on a loaded machine).
SHUTDOWN_GRACE_S = 3.0

#: Longest wait of the executor before it looks for a noted stop signal [s].
WAKE_S = 0.2

#: How long a node's process may take from its first SIGINT/SIGTERM to its end [s]; then the watchdog prints every
#: thread's stack and exits with code 1. Below the supervisor's 8 s (``Supervisor.stop``): a node that hangs is
#: reported by itself, not killed. A clean stop takes 0.2-1.1 s (docs/ros.md).
STOP_TIMEOUT_S = 6.0

#: Test hook: set to 1, a stop signal forces a full garbage collection in the signal path (and the driver one
#: in the middle of a bus exchange).
TEST_STOP_GC_ENV = "RETARGET_TEST_STOP_GC"


@dataclass
class StopState:
    """A node process's stop (:func:`stopping_on_signals`).

    Attributes:
        noted: the stop signals received, in order.
        watchdog_s: the stop watchdog's timeout [s], None: no watchdog.
        armed: whether the watchdog runs.
    """

    noted: list[int] = field(default_factory=list)
    watchdog_s: float | None = None
    armed: bool = False

    def note(self, signum: int, _frame: object = None) -> None:
        """The Python handler of a stop signal: note it, arm the watchdog on the first (never raises)."""
        self.noted.append(signum)
        if self.watchdog_s is not None and not self.armed:
            self.armed = True
            faulthandler.dump_traceback_later(self.watchdog_s, exit=True)
        if os.environ.get(TEST_STOP_GC_ENV):
            gc.collect()


_ACTIVE: list[StopState] = []  # the stopping_on_signals blocks open, innermost last


def stop_requested() -> bool:
    """Whether a stop signal reached this process's :func:`stopping_on_signals` block."""
    return bool(_ACTIVE and _ACTIVE[-1].noted)


@contextmanager
def stopping_on_signals(stop_timeout: float | None = STOP_TIMEOUT_S) -> Iterator[StopState]:
    """Within the block (a node's ``main``, inside ``with rclpy.init()``), SIGINT and SIGTERM only stop the node:
    rclpy shuts the context down and Python's handler notes the signal (:class:`StopState`) — no
    KeyboardInterrupt — and the first one arms the stop watchdog (module docstring).

    Args:
        stop_timeout: the watchdog's timeout [s]; None: no watchdog.
    """
    state = StopState(watchdog_s=stop_timeout)
    if not faulthandler.is_enabled():
        faulthandler.enable()
    with _signals_noted(state.note):
        _ACTIVE.append(state)
        try:
            yield state
        finally:
            _ACTIVE.remove(state)


def close_node(node: Node) -> None:
    """Destroy ``node`` now and collect the garbage, on the main thread, at the end of a node's process (module
    docstring); a node already destroyed or torn down with its context is left as it is.

    The calling thread goes back to ordinary scheduling first (:func:`retarget.processes.ordinary_scheduling`): a
    node that ran its executor under ``SCHED_FIFO`` (the Dynamixel driver) would otherwise destroy its DDS entities
    ahead of the DDS's own threads that the destruction waits on."""
    ordinary_scheduling()
    try:
        node.destroy_node()
    except Exception:  # noqa: BLE001 - InvalidHandle, RCLError: torn down with the context; stopping anyway
        pass
    gc.collect()


def spin(node: Node, executor: Executor | Callable[..., Executor] | None = None,
         before_shutdown: Callable[[], None] | None = None) -> None:
    """Spin ``node`` until Ctrl-C or an external shutdown; return quietly then.

    Args:
        node: The node (its context is the one rclpy's signal handler shuts down).
        executor: The executor to use, or its class (made on the node's context; default
            :class:`SingleThreadedExecutor`). A class is made only when there is something to spin: an executor
            cannot be made on a context a stop signal already shut down.
        before_shutdown: Called once spinning ends, before this returns (and so before the caller's
            ``with rclpy.init()`` block shuts the context down): stop the node's own threads here. Called also
            when a stop came before spinning began.

    Raises:
        Whatever spinning raised while the context was still up (a real error in a callback).
    """
    if not faulthandler.is_enabled():
        faulthandler.enable()
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
        # A node that does not stop on SIGINT prints where it is when the supervisor asks (Supervisor.stop).
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    # In a node's process the stop signals are noted from rclpy.init() on (stopping_on_signals); elsewhere only
    # while spinning.
    state = _ACTIVE[-1] if _ACTIVE else StopState()
    noted = state.noted
    made: Executor | None = None
    try:
        if noted or not node.context.ok():  # stopped before spinning began (e.g. while the node started)
            return
        made = executor if isinstance(executor, Executor) else (executor or SingleThreadedExecutor)(
            context=node.context)
        with nullcontext() if _ACTIVE else _signals_noted(state.note, (signal.SIGINT,)):
            made.add_node(node)
            # Not made.spin(): the wait returns to Python every WAKE_S, so a noted stop ends spinning even when
            # rclpy's wake-up of the executor does not come. A signal that came while the handlers were swapped: no
            # spinning at all.
            while not noted and node.context.ok():
                made.spin_once(timeout_sec=WAKE_S)
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
            if made is not None:
                made.shutdown(timeout_sec=1.0)


@contextmanager
def _signals_noted(note: Callable[[int, object], None],
                   signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Within the block, a stop signal is rclpy's shutdown alone: Python's handler is ``note``.

    rclpy's C handler passes a signal on to the Python handler installed when it was installed itself, so its
    handlers are uninstalled, ``note`` put in, and they are installed again over it; on the way out the previous
    Python handlers are put back the same way. (Python's ``signal.signal`` while rclpy's handlers are installed
    would replace them, not chain under them: a SIGINT would then never wake the executor.) Nothing changes off
    the main thread (where Python sets no handler), and a signal rclpy does not handle keeps its handler (Ctrl-C
    would otherwise do nothing at all).
    """
    options = get_current_signal_handlers_options()
    handled = {SignalHandlerOptions.ALL: (signal.SIGINT, signal.SIGTERM), SignalHandlerOptions.SIGINT:
               (signal.SIGINT,), SignalHandlerOptions.SIGTERM: (signal.SIGTERM,)}.get(options, ())
    ours = [s for s in signals if s in handled]
    if not ours or threading.current_thread() is not threading.main_thread():
        yield
        return
    uninstall_signal_handlers()
    previous = {s: signal.signal(s, note) for s in ours}
    install_signal_handlers(options)
    try:
        yield
    finally:
        try:
            uninstall_signal_handlers()
        finally:  # Python's handlers are back whatever rclpy's teardown does meanwhile
            for s, handler in previous.items():
                signal.signal(s, handler)
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
