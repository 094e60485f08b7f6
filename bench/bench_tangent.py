"""One receding-horizon window's tangent-linear pass (the Levenberg–Marquardt Jacobian) on a character: the
block solve of all the parameters' columns per step (:func:`retarget.sim.reduced.compiled.condensed_solve_columns`:
one GEMM and one LAPACK ``getrs``) against the column loop it replaced (the single solve per column, compiled), and
the block solve with the steps' linearizations computed ahead on ``--workers`` threads
(:func:`retarget.sim.adapters.step_sensitivities`; the others run with one).

Both run in one process on the same window, point and rollout, and must give the same Jacobian (to the solve's
rounding on the badly scaled DAE). Prints the thread settings and one JSON object with the three wall times and
their ratios; writes it to ``bench/results/tangent-<robot>-<motion>.json``.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_tangent.py \\
        [--robot drummer --motion drummer/drumming --start 1.0 --window 1.0 --tail 0.5]

The character's planning model is its ``retarget reduce`` artifact in a model folder (bench/bench_examples.py), or
the file ``--reduced`` names (the drummer's shipped demo model: ``src/retarget/data/demo/drummer-*.npz``); the
window and time step are the drummer's planning settings (docs/optimize.md).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robot", default="drummer")
    p.add_argument("--motion", default="drummer/drumming")
    p.add_argument("--dt", type=float, default=0.002)
    p.add_argument("--start", type=float, default=1.0, help="the window's start [s]")
    p.add_argument("--window", type=float, default=1.0, help="the window's span [s]")
    p.add_argument("--tail", type=float, default=0.5, help="how far past its span the window simulates [s]")
    p.add_argument("--workers", type=int, default=2, help="linearization threads of the last row")
    p.add_argument("--reduced", default=None, help="the planning model's file (default: the robot's artifact in a "
                                                   "model folder), e.g. the drummer's shipped demo model")
    p.add_argument("--results", default=str(Path(__file__).parent / "results"))
    args = p.parse_args()
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    import numba
    import numpy as np

    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.optimize.adjoint import Window, evaluate, window_parameters
    from retarget.optimize.gauss_newton import tangent_least_squares
    from retarget.optimize.problem import build_plan_problem, limits_for
    from retarget.optimize.weights import parse_tracked_bodies
    from retarget.planning.model import planning_model
    from retarget.planning.options import PlanOptions
    from retarget.sim import adapters as engines
    from retarget.sim.adapters import planner_engine
    from retarget.sim.reduced import compiled as ck

    @numba.njit(cache=False)
    def column_loop(packed, ws, res):  # the single solve per column, as a tangent pass ran it before
        out = np.empty_like(res)
        for j in range(res.shape[1]):
            out[:, j] = ck.condensed_solve(packed, ws, np.ascontiguousarray(res[:, j]))
        return out

    motion = load_motion(library.resolve_motion(args.motion))
    options = PlanOptions(dt=args.dt)
    pm = planning_model(args.robot, motion, allow_training=False, reduced_file=args.reduced)
    engine = planner_engine(pm.reduced)
    pp = build_plan_problem(engine, motion, parse_tracked_bodies(pm.config.get("tracked_bodies")),
                            limits_for(pm.model, pm.config), options)
    problem, x = pp.problem, pp.fit.parameters
    a = int(round(args.start / args.dt))
    b = min(problem.n_steps, a + int(round(args.window / args.dt)))
    last = min(problem.n_steps, b + int(round(args.tail / args.dt)))
    states = evaluate(problem, x, gradient=False).rollout.states
    free = window_parameters(problem, a, b)
    window = replace(problem, window=Window(a, last, states[a], states[a - 1] if a > 0 else None, free, x.copy()))
    run = evaluate(window, x[free], gradient=False).rollout
    block = ck.condensed_solve_columns
    loop_kernels = ck.Kernels(engine.packed)  # the dispatch the engine's kernels use (no per-call typing)

    def loop(packed, ws, res):
        return loop_kernels(column_loop, ws, np.ascontiguousarray(res))

    workers = engines.sensitivity_workers

    def pass_with(solve, threads=1):  # the pass's wall time and Jacobian: ``solve`` as the block solve, ``threads``
        ck.condensed_solve_columns = solve
        engines.sensitivity_workers = lambda: threads
        try:
            t0 = time.perf_counter()
            ls = tangent_least_squares(window, x[free], run)
            return time.perf_counter() - t0, ls.jacobian
        finally:
            ck.condensed_solve_columns = block
            engines.sensitivity_workers = workers

    # Compile both paths once on a short window so neither pays for it.
    short = replace(problem, window=Window(0, 20, problem.start, None, window_parameters(problem, 0, 20), x.copy()))
    short_run = evaluate(short, x[short.window.free], gradient=False).rollout
    for solve in (block, loop):
        ck.condensed_solve_columns = solve
        tangent_least_squares(short, x[short.window.free], short_run)
    ck.condensed_solve_columns = block
    loop_s, loop_jac = pass_with(loop)
    block_s, block_jac = pass_with(block)
    threaded_s, threaded_jac = pass_with(block, args.workers)
    scale = np.max(np.abs(loop_jac), axis=0)
    difference = float(np.max(np.abs(block_jac - loop_jac) / np.where(scale > 0, scale, 1.0)))
    threads_identical = bool(np.array_equal(threaded_jac, block_jac))
    line = {"robot": args.robot, "motion": args.motion, "dt_s": args.dt, "window_s": [a * args.dt, b * args.dt],
            "simulated_to_s": last * args.dt, "steps": last - a, "parameters": int(free.size),
            "column_loop_s": loop_s, "block_solve_s": block_s, "speedup": loop_s / block_s,
            "workers": args.workers, "block_solve_threaded_s": threaded_s, "threaded_speedup": block_s / threaded_s,
            "threaded_jacobian_identical": threads_identical,
            "jacobian_max_relative_difference": difference, "threads": threads, "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "model": str(pm.info.get("file"))}
    text = json.dumps(line)
    out = Path(args.results) / f"tangent-{args.robot}-{args.motion.replace('/', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    return 0 if difference < 1e-6 and threads_identical else 1


if __name__ == "__main__":
    sys.exit(main())
