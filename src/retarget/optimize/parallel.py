"""Both cores busy: independent simulations of one plan in forked worker processes.

The robust objective's models (:mod:`retarget.optimize.robust`), the full-FEM verification's variants and the
stiffness band's factors after a plan (:mod:`retarget.planning.verification`) are independent simulations. Worker processes are forked from the planning
process once its models are built and its kernels compiled, so they inherit both (nothing is pickled but the
parameters going out and the results coming back) and start in milliseconds. Each worker runs one job at a time
with the parent's thread settings (the benchmarks' ``NUMBA_NUM_THREADS=1`` etc.): on 2 cores, the parent and two
workers share the machine without oversubscribing it.

Fork is available on Linux and macOS; elsewhere (or with ``workers <= 1``) :func:`fork_pool` returns None and the
callers run the same jobs in-process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import numpy as np

__all__ = ["default_workers", "fork_pool", "run_shared"]

#: What the workers inherit: jobs registered before the fork, looked up by key in the child.
_SHARED: dict[int, object] = {}
_NEXT_KEY = [0]

_R = TypeVar("_R")
_V = TypeVar("_V")


def default_workers() -> int:
    """Worker processes for a plan: the machine's cores (at least 1)."""
    return max(1, os.cpu_count() or 1)


@contextmanager
def fork_pool(shared: object, workers: int, least: int = 2) -> Iterator[tuple[Executor, int] | None]:
    """A pool of ``workers`` forked processes that see ``shared`` (passed to :func:`run_shared` by key).

    ``least``: the fewest workers worth a pool (2: callers that count the planning process among their ``workers``;
    1 for one worker beside it).

    Yields:
        ``(executor, key)``, or None when forking is not possible or ``workers < least``.
    """
    if workers < max(1, least) or "fork" not in multiprocessing.get_all_start_methods():
        yield None
        return
    key = _NEXT_KEY[0]
    _NEXT_KEY[0] += 1
    _SHARED[key] = shared
    executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
    try:
        yield executor, key
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
        _SHARED.pop(key, None)


def run_shared(key: int, job: Callable[..., _R]) -> _R:
    """In a worker: ``job(shared)`` with the object registered under ``key`` before the fork."""
    return job(_SHARED[key])


def as_arrays(value: _V) -> _V:
    """Plain arrays for the way back (numpy views of shared memory are copied)."""
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value
