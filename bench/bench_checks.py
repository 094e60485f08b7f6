"""The checks after a plan (`retarget.planning.verification.check_plan`: the finer-step check and the stiffness band)
run in the planning process alone (``workers=1``) against with one forked worker beside it (``workers=2``: the band's
factors split, the finer-step check here), alternated round by round on the same plan.

The plan is one iteration per window with the robot's planner parameters (its cut does not matter here; the checks'
runs cost the same), without checks; then each round times ``check_plan`` with the parameters' ``verify_dt`` and
``--band`` (verification model: none). ``--busy N`` keeps N CPU-bound processes running during the checks (the
demo's condition: one other job on a 2-core machine).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_checks.py drummer \\
        drummer/drumming --reduced src/retarget/data/demo/drummer-boxer_boxing-mesh0.25-2s.npz --duration 3 --busy 1

Prints the thread settings and, as the last line, one JSON object: each round's stage times, the median wall time
per setting and their ratio (``speedup``: one after another over split).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robot")
    p.add_argument("motion")
    p.add_argument("--reduced", default=None, metavar="FILE", help="planning model (.npz artifact)")
    p.add_argument("--duration", type=float, default=None, help="plan only this much of the motion [s]")
    p.add_argument("--band", default="0.9,1.1", help="stiffness factors of the band")
    p.add_argument("--rounds", type=int, default=2, help="rounds of (one after another, split)")
    p.add_argument("--busy", type=int, default=0, help="CPU-bound processes running during the checks")
    p.add_argument("--out", default=None, help="also write the JSON line here")
    args = p.parse_args()
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    import numpy as np

    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.planning import PlanProgress, plan
    from retarget.planning.model import planning_model
    from retarget.planning.options import options_from_parameters
    from retarget.planning.verification import check_plan
    from retarget.sim.adapters import planner_engine
    from retarget.sim.reduced.system import with_stiffness_scale

    motion = load_motion(library.resolve_motion(args.motion))
    params = library.read_ros_parameters(library.resolve_params(library.resolve_robot(args.robot)))
    options = options_from_parameters(params, verify_model="none", reduced_file=args.reduced, duration=args.duration)
    checks = replace(options, band=tuple(float(f) for f in args.band.split(",") if f))
    planned = replace(options, band=(), verify_dt=None, max_iterations=1, method="descent", time_budget=None,
                      verified_torque_rounds=0)
    started = time.perf_counter()
    result = plan(args.robot, motion, planned, PlanProgress(message=lambda text: print(text, file=sys.stderr)))
    plan_s = time.perf_counter() - started
    pm = planning_model(args.robot, motion, reduced_file=args.reduced, allow_training=False)
    engines: dict[float, object] = {}

    def factory(factor: float) -> object:
        if factor not in engines:
            engines[factor] = planner_engine(with_stiffness_scale(pm.reduced, factor))
        return engines[factor]

    for factor in checks.band:
        factory(factor)  # built (and compiled) before the timed rounds
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.busy)]
    rounds: list[dict] = []
    try:
        for r in range(args.rounds):
            for workers in (1, 2):
                t0 = time.perf_counter()
                out = check_plan(result, pm.model, replace(checks, workers=workers), factory)
                rounds.append({"round": r + 1, "workers": workers, "wall_s": time.perf_counter() - t0,
                               "stages_s": dict(out.timings_s),
                               "band_worst_peak_ratio": None if out.band is None else out.band.worst_peak_ratio,
                               "verify_peak_ratio": None if out.verify is None else out.verify.peak_ratio})
                print(json.dumps(rounds[-1]), file=sys.stderr)
    finally:
        for proc in busy:
            proc.kill()
    median = {w: float(np.median([x["wall_s"] for x in rounds if x["workers"] == w])) for w in (1, 2)}
    same = all(x["band_worst_peak_ratio"] == rounds[0]["band_worst_peak_ratio"] for x in rounds)
    line = {"benchmark": "checks", "robot": args.robot, "motion": args.motion, "duration_s": args.duration,
            "model": args.reduced, "dt": options.dt, "verify_dt": options.verify_dt, "band": list(checks.band),
            "busy_processes": args.busy, "threads": threads, "cpus": os.cpu_count(), "plan_s": plan_s,
            "rounds": rounds, "median_wall_s": {"one_after_another": median[1], "split": median[2]},
            "speedup": median[1] / median[2], "same_figures": same, "load_average": os.getloadavg()}
    text = json.dumps(line)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
