"""Benchmark of a control loop's tick timing on a loaded host: ``SCHED_FIFO`` against ordinary scheduling.

The Dynamixel driver runs its control loop on a thread of its own at ``rate`` (100 Hz) beside rclpy's executor in
the same Python process, and with ``thread_priority`` (default 50) puts that thread under ``SCHED_FIFO``
(:func:`retarget.processes.realtime_priority`; the emulated bus's serving thread likewise). This measures what that
buys: a loop of the driver's shape (sleep until due, a short tick, missed ticks skipped) at 100 Hz in this process,
a second Python thread busy in short bursts as an executor is, and ``--hogs`` CPU-bound processes beside it; per
priority (``--priorities``, 0 = ordinary) and round, the intervals between ticks: median, 99th percentile, longest,
and how many exceed twice the period.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_tick_jitter.py --seconds 20 --rounds 2 --result bench/results/tick-jitter.json

Prints the thread settings, and one JSON object as the last line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from retarget.processes import realtime_priority

PERIOD_S = 0.01


def _executor(stop: threading.Event) -> None:
    """Short bursts of Python work with waits between them, as rclpy's executor spends its time."""
    count = 0
    while not stop.is_set():
        for _ in range(2000):
            count += 1
        time.sleep(0.001)


def tick_intervals(priority: int, seconds: float) -> tuple[np.ndarray, str | None]:
    """The loop's intervals between ticks [s] over ``seconds``, its thread at ``priority``; and why FIFO was
    refused (None: it was not)."""
    stop = threading.Event()
    busy = threading.Thread(target=_executor, args=(stop,), daemon=True)
    busy.start()
    stamps: list[float] = []
    refused: list[str | None] = []

    def loop() -> None:
        refused.append(realtime_priority(priority))
        due = time.monotonic()
        end = due + seconds
        while time.monotonic() < end:
            stop.wait(max(0.0, due - time.monotonic()))
            stamps.append(time.monotonic())
            sum(range(300))  # the tick's own work
            due += PERIOD_S
            if due < time.monotonic() - PERIOD_S:
                due = time.monotonic()

    thread = threading.Thread(target=loop)
    thread.start()
    thread.join()
    stop.set()
    busy.join(1.0)
    return np.diff(stamps), refused[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="each run's length [s]")
    parser.add_argument("--rounds", type=int, default=2, help="runs per priority, interleaved")
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound processes beside the loop")
    parser.add_argument("--priorities", default="0,50", help="SCHED_FIFO priorities to compare (0: ordinary)")
    parser.add_argument("--result", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    threads = {k: os.environ.get(k, "") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}", file=sys.stderr)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    runs = []
    try:
        time.sleep(1.0)
        load_before = os.getloadavg()
        for _ in range(args.rounds):
            for priority in (int(p) for p in args.priorities.split(",")):
                gaps, refused = tick_intervals(priority, args.seconds)
                ms = gaps * 1e3
                runs.append({"priority": priority, "fifo_refused": refused, "ticks": int(len(ms)),
                             "median_ms": round(float(np.median(ms)), 3),
                             "p99_ms": round(float(np.percentile(ms, 99)), 3), "max_ms": round(float(ms.max()), 3),
                             "over_two_periods": int(np.sum(ms > 2e3 * PERIOD_S))})
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    result = {"benchmark": "tick_jitter", "period_s": PERIOD_S, "seconds": args.seconds, "hogs": args.hogs,
              "cpus": os.cpu_count(), "threads": threads, "load_average": [round(x, 2) for x in load_before],
              "runs": runs}
    line = json.dumps(result)
    if args.result is not None:
        args.result.write_text(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
