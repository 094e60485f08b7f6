"""What the benchmarks that replay one plan in the independent servo-beam plant share (bench_gain_tolerance,
bench_goal_delivery, bench_plant_errors): the thread settings they print, the plan they make once (or take), and
the result file they write. Not a benchmark itself."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bench_servo_plan import retarget_json  # noqa: E402  (beside this script)

__all__ = ["plan_once", "replay_figures", "retarget_json", "thread_settings", "write_result"]


def thread_settings() -> dict[str, str]:
    """The thread variables as this process sees them, printed as the first JSON line."""
    threads = {v: os.environ.get(v, "unset") for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(json.dumps({"threads": threads}), flush=True)
    return threads


def plan_once(robot: str, motion: str, plan: str | None, folder: Path, out: dict[str, object]) -> str:
    """``plan`` when given; else plan ``motion`` for ``robot`` into ``folder`` (``retarget plan ... --verify-model
    none --out PLAN.csv``) and record in ``out`` how long it took, the command and its ratio in the planning model."""
    if plan is not None:
        return plan
    path = str(folder / "plan.csv")
    started = time.perf_counter()
    planned = retarget_json("plan", robot, "--motion", motion, "--verify-model", "none", "--out", path)
    out["plan_s"] = round(time.perf_counter() - started, 1)
    out["plan_command"] = f"retarget plan {robot} --motion {motion} --verify-model none --out PLAN.csv --json"
    out["planning_peak_ratio"] = planned.get("planning_peak_ratio")  # in the model it was optimized on
    return path


def replay_figures(replayed: dict, suffix: str = "") -> dict[str, float]:
    """One ``retarget check replay --json`` run's figures: the naive and planned peak [m], their ratio, the plan's
    ring-out [m]; each key with ``suffix`` before its unit (``plan_peak_delayed_intent_m``)."""
    return {f"naive_peak{suffix}_m": replayed["naive"]["peak_deviation_m"],
            f"plan_peak{suffix}_m": replayed["plan"]["peak_deviation_m"],
            f"peak_ratio{suffix}": replayed["peak_ratio"],
            f"plan_ring_out{suffix}_m": replayed["plan"]["ring_out_peak_m"]}


def write_result(prefix: str, robot: str, out: dict[str, object]) -> None:
    """Print ``out`` as the last JSON line and keep it as ``bench/results/<prefix>-<robot>.json``."""
    print(json.dumps(out))
    name = Path(robot).name.split(".")[0]
    target = Path(__file__).resolve().parent / "results" / f"{prefix}-{name}.json"
    target.write_text(json.dumps(out, indent=1) + "\n")
