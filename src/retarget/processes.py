"""Processes and threads on Linux: :func:`die_with_parent`, the ``preexec_fn`` that asks Linux to signal a child when
the process that started it dies (``prctl(PR_SET_PDEATHSIG)``), even by SIGKILL; :func:`realtime_priority`, a
thread scheduled ``SCHED_FIFO`` (a control loop's)."""
from __future__ import annotations

import signal
from collections.abc import Callable

__all__ = ["die_with_parent", "ordinary_scheduling", "realtime_priority"]

#: ``prctl``'s option that sets the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, or None where there is none (not Linux)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_LIBC_PRCTL = _prctl()


def die_with_parent(signum: signal.Signals) -> Callable[[], None] | None:
    """A ``subprocess.Popen`` ``preexec_fn`` that has the child receive ``signum`` when its parent dies; None where
    the system cannot (no ``prctl``).

    The signal is the one the child stops cleanly on: SIGINT for a ROS node (rclpy's shutdown, as a supervisor's
    stop sends it), SIGTERM for the twin's worker process.
    """
    prctl = _LIBC_PRCTL
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signum))

    return preexec


def realtime_priority(priority: int) -> str | None:
    """Put the calling thread under ``SCHED_FIFO`` at ``priority`` (1–99), as ros2_control's controller manager
    runs its update loop (``thread_priority``, default 50): it then preempts every ordinary process when its tick is
    due. Returns None when done (or ``priority`` is 0: nothing asked), else why not (a user without an ``rtprio``
    limit, a system without ``SCHED_FIFO``); the thread then keeps its ordinary scheduling.
    """
    import os
    import threading

    if priority == 0:
        return None
    if not hasattr(os, "sched_setscheduler"):
        return "this system has no SCHED_FIFO"
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(int(priority)))
    except (OSError, ValueError) as exc:
        return (f"SCHED_FIFO at priority {priority} refused ({exc}): allow it with an rtprio limit for this user "
                "(/etc/security/limits.d, as ros2_control's real-time set-up describes), or set thread_priority 0")
    return None


def ordinary_scheduling() -> None:
    """Put the calling thread back under ``SCHED_OTHER`` if it runs under a real-time policy (``SCHED_FIFO``,
    ``SCHED_RR``: :func:`realtime_priority`); nothing otherwise or where the system has no such policies."""
    import os
    import threading

    if not hasattr(os, "sched_getscheduler"):
        return
    tid = threading.get_native_id()
    try:
        if os.sched_getscheduler(tid) in (os.SCHED_FIFO, os.SCHED_RR):
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    except OSError:  # the thread keeps its policy
        pass
