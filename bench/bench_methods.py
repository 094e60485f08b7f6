"""The same plan with each of several optimizers, one after another in one process (same machine, same settings,
the engine compiled once): wall time of the optimization stage and the figures each reaches.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_methods.py \\
        --methods lbfgs,descent drummer --motion drummer/drumming --duration 3 \\
        --reduced src/retarget/data/demo/drummer-boxer_boxing-mesh0.25-2s.npz --max-iterations 1 --dt 0.002 \\
        --window 1 --window-tail 0.5 --window-overlap 0.5 --target-stride 5 --verify-dt 0.001 \\
        --verify-model src/retarget/data/demo/verify/drummer-drumming-3s-mesh0.5.npz

Every other argument is ``retarget plan``'s (``--method`` is set per run). A first, unmeasured plan of 0.1 s of the
motion compiles the kernels. Prints the thread settings and, as the last line, one JSON object: per method the
optimization's wall time, gradient and value-only evaluations, J before and after, the planning model's and the
verification model's peak ratios; and ``optimization_ratio``, each method's optimization time over the first's.
``--result FILE`` also writes that line to FILE.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import replace


def main() -> int:
    from bench_plan import emit, take_option

    argv = sys.argv[1:]
    result_file = take_option(argv, "--result")
    methods = [m for m in (take_option(argv, "--methods") or "lbfgs,descent").split(",") if m]
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr, flush=True)
    from retarget.cli import build_parser
    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.planning import PlanProgress, plan
    from retarget.planning.commands import options_from_args

    args = build_parser().parse_args(["plan", *argv])
    options = options_from_args(args)
    motion = load_motion(args.motion if os.path.isfile(args.motion) else library.resolve_motion(args.motion))
    quiet = PlanProgress(message=lambda text: None)
    plan(args.robot, motion, replace(options, duration=0.1, window=None, verify_dt=None, band=(), stiffness_band=(),
                                     verify_model="none", max_iterations=1), quiet)
    runs: dict[str, dict] = {}
    for method in methods:
        started = time.perf_counter()
        result = plan(args.robot, motion, replace(options, method=method), quiet)
        m = result.to_json()
        runs[method] = {"optimization_s": m["timings_s"]["optimization"], "plan_wall_s": time.perf_counter() - started,
                        "iterations": m["iterations"], "evaluations": m["evaluations"],
                        "value_evaluations": m.get("value_evaluations", 0), "objective_initial": m["objective_initial"],
                        "objective_final": m["objective_final"], "planning_peak_ratio": m.get("planning_peak_ratio"),
                        "verified_peak_ratio": m.get("verified_peak_ratio"), "load_average": os.getloadavg()}
        print(f"{method}: {runs[method]}", file=sys.stderr, flush=True)
    first = runs[methods[0]]["optimization_s"]
    out = {"example": f"{args.robot}/{os.path.basename(str(args.motion)).split('.')[0]}", "methods": runs,
           "optimization_ratio": {m: runs[m]["optimization_s"] / first for m in methods},
           "threads": threads, "argv": argv}
    emit(out, result_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
