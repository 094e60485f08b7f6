"""Benchmark of a budgeted plan on a cold or warm numba cache: does the warm-up keep compiling out of the budget?

Runs :func:`retarget.planning.plan` with the robot's params file settings (as the planner node does), a reduced
model and a time budget on the first ``--duration`` seconds of a motion, and records when each feedback stage began
and how many numba compilations (``numba:compile`` events: compiled or loaded from the cache) had happened by then.
``--cold`` points numba at a new empty cache folder first (as after an install or an update). Prints the settings
(threads included) and, as the last line, one JSON object.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=2 .venv/bin/python bench/bench_warm_up.py drummer \\
        drummer/drumming --reduced ~/.cache/retarget/demo/drummer-boxer_boxing-mesh0.25-2s.npz --duration 3 \\
        --time-budget 210 --cold
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robot")
    p.add_argument("motion")
    p.add_argument("--reduced", required=True, metavar="FILE", help="reduced model (.npz of retarget reduce)")
    p.add_argument("--duration", type=float, default=3.0, help="plan the first S seconds of the motion (default 3)")
    p.add_argument("--time-budget", type=float, default=210.0, metavar="S", help="the plan's budget [s] (default 210)")
    p.add_argument("--max-iterations", type=int, default=100)
    p.add_argument("--cold", action="store_true", help="start from an empty numba cache (a new temporary folder)")
    args = p.parse_args()
    if args.cold:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="retarget-bench-numba-")
    settings = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS",
                                               "NUMBA_CACHE_DIR")}
    print(json.dumps({"settings": settings, "args": vars(args)}), file=sys.stderr)

    import numba.core.event as numba_event

    from retarget.ros.demo import excerpt
    from retarget.model.library import read_ros_parameters, resolve_params, resolve_robot
    from retarget.motion import load_motion
    from retarget.planning import PlanProgress, plan
    from retarget.planning.stages import FEEDBACK_STAGES
    from retarget.planning.options import options_from_parameters

    class Compiles(numba_event.Listener):
        count = 0

        def on_start(self, event: numba_event.Event) -> None:
            self.count += 1

        def on_end(self, event: numba_event.Event) -> None:
            pass

    compiles = Compiles()
    numba_event.register("numba:compile", compiles)
    params = read_ros_parameters(resolve_params(resolve_robot(args.robot)))
    motion = excerpt(load_motion(args.motion), args.duration)
    options = options_from_parameters(params, reduced_file=args.reduced, max_iterations=args.max_iterations,
                                      time_budget=args.time_budget)
    started = time.perf_counter()
    stages: list[dict] = []

    def steps(stage: str, done: int, total: int) -> None:
        name = FEEDBACK_STAGES.get(stage, stage)
        if not stages or stages[-1]["stage"] != name:
            stages.append({"stage": name, "at_s": round(time.perf_counter() - started, 1),
                           "numba_compiles": compiles.count})

    metrics = plan(args.robot, motion, options, PlanProgress(steps=steps)).to_json()
    wall = time.perf_counter() - started
    budget_start = next((s["at_s"] for s in stages if s["stage"] == "targets"), None)
    print(json.dumps({
        "robot": args.robot, "motion": args.motion, "duration_s": args.duration, "cold": args.cold,
        "settings": settings, "time_budget_s": args.time_budget, "stages": stages, "wall_s": round(wall, 1),
        "budget_start_s": budget_start, "numba_compiles": compiles.count,
        "numba_compiles_after_warm_up": compiles.count - next((s["numba_compiles"] for s in stages
                                                               if s["stage"] == "targets"), 0),
        "iterations": metrics["iterations"], "budget_limited": metrics.get("budget_limited"),
        "peak_naive_mm": round(1e3 * metrics["naive"]["peak_deviation_m"], 2),
        "peak_optimized_mm": round(1e3 * metrics["optimized"]["peak_deviation_m"], 2),
        "verify_peak_ratio": metrics.get("verify", {}).get("peak_ratio"), "warnings": metrics.get("warnings"),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
