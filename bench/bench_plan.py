"""Benchmark of the planner (issue #5 acceptance runs): naive vs ZV/ZVD vs optimized on a robot and motion.

Prints the settings (threads included) and, as the last line, one JSON object with the `retarget plan --json`
metrics plus the model's training information. Optionally writes the report plots and an npz of the trajectories.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \
        .venv/bin/python bench/bench_plan.py single_rod single_rod/step_30 --dt 0.004 --modes 3 --max-iterations 15
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robot")
    p.add_argument("motion")
    p.add_argument("--dt", type=float, default=0.004)
    p.add_argument("--modes", type=int, default=3)
    p.add_argument("--knot-spacing", type=float, default=0.05)
    p.add_argument("--max-iterations", type=int, default=15)
    p.add_argument("--mesh-axial", type=int, default=20)
    p.add_argument("--mesh-around", type=int, default=6)
    p.add_argument("--dt-train", type=float, default=1e-3)
    p.add_argument("--report", default=None, help="folder for the plots and trajectories.npz")
    args = p.parse_args()

    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.optimize.engines import reduced_engine
    from retarget.optimize.planner import PlanOptions, limits_for, run_plan
    from retarget.optimize.planning_model import planning_model
    from retarget.optimize.weights import parse_tracked_bodies

    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    started = time.perf_counter()
    motion = load_motion(library.resolve_motion(args.motion))
    pm = planning_model(args.robot, motion, n_modes=args.modes, dt_train=args.dt_train, mesh_axial=args.mesh_axial,
                        mesh_around=args.mesh_around)
    wall_model = time.perf_counter() - started
    engine = reduced_engine(pm.reduced, tolerance=1e-10)
    options = PlanOptions(knot_spacing=args.knot_spacing, dt=args.dt, max_iterations=args.max_iterations)

    def callback(it: dict) -> None:
        print(f"iteration {it['iteration']}: J = {it['objective']:.6e}, |g| = {it['gradient_norm']:.3e} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    result = run_plan(engine, motion, parse_tracked_bodies(pm.config.get("tracked_bodies")),
                      limits_for(pm.model, pm.config), options, callback=callback)
    out = {"robot": args.robot, "motion": args.motion, **result.metrics(), "model": pm.info,
           "wall_s_model": wall_model, "wall_s_total": time.perf_counter() - started, "threads": threads,
           "engine": "reduced dense reference stepper (retarget.sim.reduced.stepper)",
           "reduced_unknowns": int(engine.n_state), "settings": vars(args)}
    naive = result.variants["naive"].metrics
    opt = result.variants["optimized"].metrics
    out["peak_ratio_optimized_over_naive"] = opt["peak_deviation_m"] / naive["peak_deviation_m"]
    if "zvd" in result.variants:
        out["rms_ratio_optimized_over_zvd"] = opt["rms_deviation_m"] / result.variants["zvd"].metrics["rms_deviation_m"]
    if args.report:
        from retarget.report.plots import write_plan_report

        files = write_plan_report(result, args.report)
        out["report_files"] = [str(f) for f in files]
    print(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
