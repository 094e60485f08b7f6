"""``retarget.processes.realtime_priority``: a thread put under SCHED_FIFO, or the reason it could not be."""
from __future__ import annotations

import os
import threading

import pytest

from retarget.processes import realtime_priority


def _in_thread(priority: int) -> tuple[str | None, int, int]:
    """``realtime_priority(priority)`` in a fresh thread: its answer, and the thread's policy and priority after."""
    out: list[tuple[str | None, int, int]] = []

    def run() -> None:
        refused = realtime_priority(priority)
        tid = threading.get_native_id()
        out.append((refused, os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10.0)
    return out[0]


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no SCHED_FIFO on this system")
def test_a_thread_runs_fifo_where_permitted_and_is_told_why_not_elsewhere() -> None:
    refused, policy, priority = _in_thread(50)
    if refused is None:
        assert (policy, priority) == (os.SCHED_FIFO, 50)
    else:  # a user without an rtprio limit: the thread keeps its scheduling, the reason says what to change
        assert policy == os.SCHED_OTHER and "rtprio" in refused and "thread_priority 0" in refused
    # The caller's thread is not touched.
    assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER


def test_priority_zero_asks_for_nothing_and_an_impossible_priority_is_refused_with_its_reason() -> None:
    assert realtime_priority(0) is None
    if hasattr(os, "sched_setscheduler"):
        refused, policy, _ = _in_thread(120)
        assert policy == os.SCHED_OTHER and "priority 120 refused" in refused
