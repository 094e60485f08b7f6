"""Benchmark of the planner (issue #5 acceptance runs): naive vs ZV/ZVD vs optimized on a robot and motion.

Prints the settings (threads included) and, as the last line, one JSON object with the `retarget plan --json`
metrics plus the model's information and a ``summary``: peak and RMS deviation naive -> optimized (and ZVD), the
ratios, iterations, evaluations, wall time per stage, whether the iteration cap or the time budget stopped it, and
``projected_wall_s_full``: the optimization's wall time extrapolated to ``--projected-iterations`` at the measured
seconds per iteration. Optionally writes the report plots and an npz of the trajectories.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \
        .venv/bin/python bench/bench_plan.py single_rod single_rod/step_30 --dt 0.005 --max-iterations 30
    .venv/bin/python bench/bench_plan.py drummer drummer/drumming --reduced .cache-models/drummer-boxing.npz \
        --dt 0.005 --max-iterations 5 --time-budget 900 --no-baselines

Without ``--reduced`` the model comes from the planner's cache, a model folder, or in-process training (slow).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robot")
    p.add_argument("motion")
    p.add_argument("--dt", type=float, default=0.004)
    p.add_argument("--modes", type=int, default=None, help="deformation modes per part (default: the planner's)")
    p.add_argument("--knot-spacing", type=float, default=0.05)
    p.add_argument("--max-iterations", type=int, default=15)
    p.add_argument("--mesh-axial", type=int, default=20)
    p.add_argument("--mesh-around", type=int, default=6)
    p.add_argument("--dt-train", type=float, default=1e-3)
    p.add_argument("--reduced", default=None, metavar="FILE", help="reduced model (.npz artifact or cached .pkl)")
    p.add_argument("--time-budget", type=float, default=None, metavar="S", help="wall-time budget of the plan [s]")
    p.add_argument("--no-baselines", action="store_true", help="skip the ZV/ZVD simulations")
    p.add_argument("--lbfgs-memory", type=int, default=50, help="L-BFGS-B correction pairs (default 50)")
    p.add_argument("--method", choices=("lbfgs", "gauss-newton", "auto"), default="lbfgs",
                   help="optimizer (default lbfgs; auto: Gauss-Newton up to 200 parameters)")
    p.add_argument("--first-step", type=float, default=None, metavar="RAD",
                   help="L-BFGS-B's first trial step [rad] (default: measured from the curvature)")
    p.add_argument("--target-stride", type=int, default=1, help="solve the targets every N steps, interpolate between")
    p.add_argument("--window", type=float, default=None, metavar="S", help="receding-horizon windows [s] (default: "
                   "the whole motion at once)")
    p.add_argument("--window-tail", type=float, default=0.5, metavar="S", help="a window's objective tail [s]")
    p.add_argument("--window-overlap", type=float, default=0.0, metavar="S", help="windows' overlap [s]")
    p.add_argument("--torque-weight", type=float, default=0.0, help="torque penalty weight (default 0: off)")
    p.add_argument("--torque-margin", type=float, default=0.1, help="stall-torque fraction the penalty keeps free")
    p.add_argument("--duration", type=float, default=None, help="plan only this much of the motion [s]")
    p.add_argument("--start", choices=("feasible", "input"), default="feasible",
                   help="optimizer start: the speed-feasible projection of a too-fast input (default) or its fit")
    p.add_argument("--projected-iterations", type=int, default=30,
                   help="iterations the projected full wall time assumes (default 30)")
    p.add_argument("--report", default=None, help="folder for the plots and trajectories.npz")
    p.add_argument("--verify-dt", type=float, default=None,
                   help="also re-simulate the naive and optimized profiles at this finer step and report their "
                        "deviations (targets interpolated cubically): is the planning step fine enough?")
    args = p.parse_args()

    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.optimize.engines import reduced_engine
    from retarget.optimize.planner import PlanOptions, limits_for, run_plan
    from retarget.optimize.planning_model import DEFAULT_PLAN_MODES, planning_model
    from retarget.optimize.weights import parse_tracked_bodies

    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    started = time.perf_counter()
    motion = load_motion(library.resolve_motion(args.motion))
    args.modes = modes = DEFAULT_PLAN_MODES if args.modes is None else args.modes  # recorded in "settings"
    pm = planning_model(args.robot, motion, n_modes=modes, dt_train=args.dt_train, mesh_axial=args.mesh_axial,
                        mesh_around=args.mesh_around, reduced_file=args.reduced)
    wall_model = time.perf_counter() - started
    engine = reduced_engine(pm.reduced, tolerance=1e-10)
    options = PlanOptions(knot_spacing=args.knot_spacing, dt=args.dt, max_iterations=args.max_iterations,
                          baselines=not args.no_baselines, time_budget=args.time_budget, duration=args.duration,
                          lbfgs_memory=args.lbfgs_memory, target_stride=args.target_stride,
                          method=args.method, first_step=args.first_step, window=args.window,
                          window_tail=args.window_tail, window_overlap=args.window_overlap,
                          torque_weight=args.torque_weight, torque_margin=args.torque_margin, start=args.start)

    def callback(it: dict) -> None:
        where = f" (window {it['window']}/{it['windows']})" if "window" in it else ""
        print(f"iteration {it['iteration']}{where}: J = {it['objective']:.6e}, |g| = {it['gradient_norm']:.3e} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    from retarget.optimize.errors import TimeBudgetError

    stages: dict[str, list] = {}

    def progress(stage: str, k: int, n: int) -> None:
        stages[stage] = [k, n, time.perf_counter() - started]

    try:
        result = run_plan(engine, motion, parse_tracked_bodies(pm.config.get("tracked_bodies")),
                          limits_for(pm.model, pm.config), options, progress=progress, callback=callback)
    except TimeBudgetError as exc:
        # Still one JSON line: how far each stage got, so the full wall time can be projected.
        print(json.dumps({"robot": args.robot, "motion": args.motion, "error": str(exc), "stage": exc.stage,
                          "progress": {s: {"done": v[0], "total": v[1], "at_s": v[2]} for s, v in stages.items()},
                          "wall_s_model": wall_model, "wall_s_total": time.perf_counter() - started,
                          "load_average": os.getloadavg(), "threads": threads, "settings": vars(args)}))
        return 1
    metrics = result.metrics()
    if args.verify_dt:
        from retarget.optimize.planner import verify_plan

        metrics["verify"] = verify_plan(result, args.verify_dt)
    out = {"robot": args.robot, "motion": args.motion, **metrics, "model": pm.info,
           "wall_s_model": wall_model, "wall_s_total": time.perf_counter() - started, "threads": threads,
           "load_average": os.getloadavg(), "engine": f"{type(engine).__module__}.{type(engine).__name__}",
           "reduced_unknowns": int(engine.n_state), "motors": len(engine.motor_names), "settings": vars(args)}
    naive = result.variants["naive"].metrics
    opt = result.variants["optimized"].metrics
    out["peak_ratio_optimized_over_naive"] = opt["peak_deviation_m"] / naive["peak_deviation_m"]
    if "zvd" in result.variants:
        out["rms_ratio_optimized_over_zvd"] = opt["rms_deviation_m"] / result.variants["zvd"].metrics["rms_deviation_m"]
    wall_opt = result.timings.get("optimization", 0.0)
    per_iteration = wall_opt / max(metrics["iterations"], 1)
    stopped_by = ("time budget" if metrics["budget_limited"] else "interrupted" if metrics["interrupted"]
                  else "iteration cap" if metrics["iterations"] >= args.max_iterations else "converged")
    out["summary"] = {
        "peak_deviation_mm": {"naive": 1e3 * naive["peak_deviation_m"], "optimized": 1e3 * opt["peak_deviation_m"],
                              **({"zvd": 1e3 * result.variants["zvd"].metrics["peak_deviation_m"]}
                                 if "zvd" in result.variants else {})},
        "rms_deviation_mm": {"naive": 1e3 * naive["rms_deviation_m"], "optimized": 1e3 * opt["rms_deviation_m"],
                             **({"zvd": 1e3 * result.variants["zvd"].metrics["rms_deviation_m"]}
                                if "zvd" in result.variants else {})},
        "peak_ratio": out["peak_ratio_optimized_over_naive"],
        "iterations": metrics["iterations"], "evaluations": metrics["evaluations"], "stopped_by": stopped_by,
        "wall_s": {"model": wall_model, **result.timings, "total": out["wall_s_total"]},
        "seconds_per_iteration": per_iteration, "seconds_per_evaluation_last": metrics["evaluation_s"],
        "projected_wall_s_full": wall_model + result.timings.get("targets", 0.0) + result.timings.get("baselines", 0.0)
        + per_iteration * args.projected_iterations,
        "projected_iterations": args.projected_iterations,
        "wall_time_note": "measured on 2 shared cores under load from other developers (see load_average)",
    }
    if args.report:
        from retarget.report.plots import write_plan_report

        files = write_plan_report(result, args.report)
        out["report_files"] = [str(f) for f in files]
    print(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
