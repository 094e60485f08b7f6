"""Reduced-model accuracy against the number of PCA modes (issue #4: how many modes does a robot need?).

One full training run and one full test run of the absolute engine, then, for each mode count (or each variance
fraction, ``--variances``), a reduced model trained on the same snapshots (``build_from_result``) simulates the test motion with the compiled
engine; the tracked bodies are compared with the full test run sample by sample. Also reported per count: the
captured variance, the reduced DOFs and steps/s, so the variance criterion (``--variance``) can be read against
the accuracy it buys. ``--modal-derivatives 0,3`` tries every setting without and with the modal derivatives of
the first 3 PCA modes of each part (docs/reduced.md §4); ``--cubature-points 0,1`` every setting with whole-element
and per-point cubatures, ``--cubature-tolerance 1e-3,1e-4`` with each training tolerance.

The error is given in metres and relative to ``--peak`` when given (the full run's peak deviation from the
quasi-static targets, e.g. from ``retarget check reduced --json``), otherwise relative to the tracked bodies'
peak travel from their start (cheap: no static solves).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python bench/bench_modes.py single_rod \\
        single_rod/step_30 single_rod/step_45_fast --mesh-scale 0.25 --dt 0.001 --duration 1.5 --modes 1,2,3,4,6,8

Prints the thread settings, one line per count, and as the last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robot")
    p.add_argument("train_motion")
    p.add_argument("test_motion")
    p.add_argument("--modes", default="1,2,3,4,6,8", help="comma-separated PCA mode counts (caps) to try")
    p.add_argument("--variances", default=None,
                   help="comma-separated variance fractions to try instead of --modes (e.g. 0.9999,0.999999)")
    p.add_argument("--cubature-tolerance", default="1e-3",
                   help="comma-separated cubature training tolerances; every setting is tried with each (default 1e-3)")
    p.add_argument("--cubature-points", default="0",
                   help="comma-separated 0 (whole elements) / 1 (per-point cubature); every setting with each")
    p.add_argument("--modal-derivatives", default="0",
                   help="comma-separated counts K of leading PCA modes whose modal derivatives are appended; every "
                        "mode setting is tried with each (default 0: none)")
    p.add_argument("--mesh-scale", type=float, default=0.5)
    p.add_argument("--dt", type=float, default=1e-3)
    p.add_argument("--duration", type=float, default=None, help="cap both motions at this many seconds")
    p.add_argument("--train-duration", type=float, default=None, help="cap the training motion only [s]")
    p.add_argument("--peak", type=float, default=None, metavar="M",
                   help="denominator of the relative error [m] (default: the tracked bodies' peak travel)")
    args = p.parse_args()
    threads = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", flush=True)

    from retarget.model import library
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.commands import tracked_links
    from retarget.sim.reduced.store import load_robot_system
    from retarget.sim.reduced.engine import simulate_compiled
    from retarget.sim.reduced.training import build_from_result, tracked_distances
    from retarget.sim.simulate import simulate

    _, model, system = load_robot_system(args.robot, args.mesh_scale)
    tracked = tracked_links(model, system.rigid)
    runs = {}
    for role, name in (("train", args.train_motion), ("test", args.test_motion)):
        motors, t_end = motors_from_motion(library.resolve_motion(name), model.motors)
        for cap in (args.duration, args.train_duration if role == "train" else None):
            t_end = t_end if cap is None else min(t_end, cap)
        t0 = time.perf_counter()
        runs[role] = (motors, t_end, simulate(system, motors, t_end, args.dt, compact=role == "test"),
                      time.perf_counter() - t0)
        print(f"full {role} run ({name}, {t_end:g} s): {runs[role][3]:.0f} s", flush=True)
    test_motors, t_test, full_test, wall_full = runs["test"]
    travel = max(float(np.max(np.linalg.norm(x - x[0], axis=1)))
                 for x in (full_test.body_position(n) for n in tracked))
    peak = args.peak if args.peak else travel
    rows = []
    settings = ([{"n_modes": int(v)} for v in args.modes.split(",")] if args.variances is None
                else [{"variance": float(v)} for v in args.variances.split(",")])
    settings = [{**s, "modal_derivatives": int(k)} for s in settings for k in args.modal_derivatives.split(",")]
    settings = [{**s, "cubature_tolerance": float(c)} for s in settings for c in args.cubature_tolerance.split(",")]
    settings = [{**s, "cubature_points": bool(int(c))} for s in settings for c in args.cubature_points.split(",")]
    for setting in settings:
        t0 = time.perf_counter()
        rs, bases, cubs = build_from_result(system, runs["train"][2], **setting)
        wall_build = time.perf_counter() - t0
        simulate_compiled(rs, test_motors, 2 * args.dt, args.dt)  # compile / load the numba cache
        c0 = time.process_time()
        red = simulate_compiled(rs, test_motors, t_test, args.dt)
        cpu = time.process_time() - c0
        diff = np.concatenate(list(tracked_distances(full_test, red, tracked).values()))
        rms = float(np.sqrt(np.mean(diff**2)))
        row = {**setting, "modes": {b.name: bs.size - bs.n_rigid for b, bs in zip(system.deformable, bases)},
               "captured_variance": {b.name: bs.captured_variance for b, bs in zip(system.deformable, bases)},
               "cubature_elements": {b.name: int(len(c.elements)) for b, c in zip(system.deformable, cubs)},
               "reduced_dofs": int(sum(bs.size for bs in bases)), "rms_error_m": rms,
               "max_error_m": float(np.max(diff)), "rms_error_rel": rms / peak,
               "reduced_steps_per_s": int(round(t_test / args.dt)) / red.wall_s,
               "reduced_steps_per_cpu_s": int(round(t_test / args.dt)) / cpu,
               "newton_iterations_mean": float(np.mean(red.newton_iterations[1:])),
               "factorizations": red.factorizations, "wall_s_build": wall_build}
        rows.append(row)
        print(f"{setting}: modes {row['modes']}, RMS {rms * 1e3:.2f} mm ({100 * rms / peak:.2f} %), "
              f"max {row['max_error_m'] * 1e3:.2f} mm, {row['reduced_steps_per_s']:.0f} steps/s", flush=True)
    out = {"robot": args.robot, "train_motion": args.train_motion, "test_motion": args.test_motion,
           "mesh_scale": args.mesh_scale, "dt": args.dt, "sim_seconds": t_test, "train_seconds": runs["train"][1], "threads": threads,
           "denominator_m": peak, "denominator": "--peak" if args.peak else "tracked peak travel",
           "full_steps_per_s": int(round(t_test / args.dt)) / wall_full, "wall_s_full_train": runs["train"][3],
           "wall_s_full_test": wall_full, "rows": rows}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
