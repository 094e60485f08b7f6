"""Child processes that end with their parent: :func:`die_with_parent`, the ``preexec_fn`` that asks Linux to signal
a child when the process that started it dies (``prctl(PR_SET_PDEATHSIG)``), even by SIGKILL."""
from __future__ import annotations

import signal
from collections.abc import Callable

__all__ = ["die_with_parent"]

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
