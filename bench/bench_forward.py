"""A reduced model's forward run timed with this checkout's code against another revision's (or against another
model of the same robot), in one run.

A speed-up of the compiled engine is claimed as a ratio against the previous code path, on the same machine and
settings. This checks the other revision out (``git worktree``, removed afterwards) and runs the same forward
simulation — the planner's engine settings: tolerance 1e-10, the remaining-error stopping test — with each code in
its own process (each with its own numba cache), alternating ``--rounds`` times so that a change in the machine's
load falls on both. ``--against-model FILE`` instead runs this checkout's code on ``FILE`` (e.g. the same training
run reduced with element cubature, against ``--reduced`` with per-point cubature), and compares the final rigid
poses (the models' reduced coordinates differ). Each process reports the best CPU time of ``--repeats`` runs after a
warm-up, the factorizations and the Newton iterations per step; the counts do not depend on the load, the times do.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python bench/bench_forward.py boxer boxer/boxing \\
        --reduced .cache-models/boxer-boxing.npz --duration 3 --dt 0.002 --against HEAD~1
    ... python bench/bench_forward.py boxer boxer/boxing --reduced POINTS.npz --against-model ELEMENTS.npz

Prints the thread settings and, as the last line, one JSON object: per code path (``this``, ``against``) the CPU
times of the rounds, their least and median, factorizations and iterations per step; ``speedup_min`` and
``speedup_median`` (against / this) and the largest difference of the final rigid poses. On the 2-core development
machine one process of identical code can run 1.4 × slower than the next, for its whole life: the least time is
the steadier figure.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(args: argparse.Namespace) -> int:
    """One code path: time the forward run with the ``retarget`` package under ``--src``."""
    sys.path.insert(0, args.src)
    import time

    import numpy as np

    import retarget
    from retarget.model import library
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.engine import pack_system, simulate_compiled
    from retarget.sim.reduced.store import load_artifact

    if not str(Path(retarget.__file__).resolve()).startswith(str(Path(args.src).resolve())):
        raise SystemExit(f"imported retarget from {retarget.__file__}, not from {args.src}")
    model = load_artifact(args.robot, args.reduced)
    motors, _ = motors_from_motion(library.resolve_motion(args.motion), model.model.motors)
    packed = pack_system(model.reduced)
    simulate_compiled(model.reduced, motors, 10 * args.dt, args.dt, packed=packed, estimate=True)  # compiled
    best, run = None, None
    for _ in range(args.repeats):
        started = time.process_time()
        run = simulate_compiled(model.reduced, motors, args.duration, args.dt, packed=packed, estimate=True,
                                tol=1e-10)
        cpu = time.process_time() - started
        best = cpu if best is None else min(best, cpu)
    np.save(args.state, run.states[-1, : 7 * model.reduced.n_rigid])  # rigid poses: comparable across models
    print(json.dumps({"cpu_s": best, "factorizations": int(run.factorizations),
                      "newton_per_step": float(np.mean(run.newton_iterations[1:]))}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robot")
    p.add_argument("motion")
    p.add_argument("--reduced", required=True, metavar="FILE", help="reduced model (.npz artifact)")
    p.add_argument("--duration", type=float, default=3.0, help="simulated time [s]")
    p.add_argument("--dt", type=float, default=0.002)
    p.add_argument("--against", default="HEAD", help="the revision to compare with (default: HEAD, i.e. the "
                   "working tree's changes)")
    p.add_argument("--against-model", default=None, metavar="FILE", help="compare with this model (this checkout's "
                   "code) instead of another revision")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--src", help=argparse.SUPPRESS)
    p.add_argument("--state", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}", flush=True)
    revision = None if args.against_model else subprocess.run(
        ["git", "rev-parse", "--short", args.against], cwd=ROOT, check=True, capture_output=True,
        text=True).stdout.strip()
    models = {"this": Path(args.reduced).resolve(), "against": Path(args.against_model or args.reduced).resolve()}
    with tempfile.TemporaryDirectory(prefix="bench-forward-") as tmp:
        other = Path(tmp) / "against"
        if revision is not None:
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(other), revision], cwd=ROOT, check=True)
        try:
            sources = {"this": ROOT / "src", "against": ROOT / "src" if revision is None else other / "src"}
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
            for r in range(args.rounds):
                for name, src in sources.items():
                    env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / f"numba-{name}")}
                    cmd = [sys.executable, __file__, args.robot, args.motion, "--reduced", str(models[name]),
                           "--duration", str(args.duration), "--dt", str(args.dt), "--repeats",
                           str(args.repeats), "--child", "--src", str(src), "--state",
                           str(Path(tmp) / f"state-{name}.npy")]
                    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
                    runs[name].append(json.loads(out.strip().splitlines()[-1]))
                    print(f"round {r + 1} {name}: {runs[name][-1]}", flush=True)
            import numpy as np

            difference = float(np.max(np.abs(np.load(Path(tmp) / "state-this.npy")
                                             - np.load(Path(tmp) / "state-against.npy"))))
        finally:
            if revision is not None:
                subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)
    summary = {name: {"cpu_s": [round(x["cpu_s"], 3) for x in rs],
                      "min_cpu_s": round(min(x["cpu_s"] for x in rs), 3),
                      "median_cpu_s": round(statistics.median(x["cpu_s"] for x in rs), 3),
                      "factorizations": rs[-1]["factorizations"],
                      "newton_per_step": round(rs[-1]["newton_per_step"], 3)} for name, rs in runs.items()}
    print(json.dumps({"bench": "forward", "robot": args.robot, "motion": args.motion,
                      "reduced": models["this"].name, "duration_s": args.duration, "dt": args.dt,
                      "against_revision": revision,
                      "against_model": models["against"].name if revision is None else None,
                      "rounds": args.rounds, "repeats": args.repeats, "threads": threads,
                      "load_average": list(os.getloadavg()), **summary,
                      "speedup_min": round(summary["against"]["min_cpu_s"] / summary["this"]["min_cpu_s"], 3),
                      "speedup_median": round(summary["against"]["median_cpu_s"] / summary["this"]["median_cpu_s"],
                                              3),
                      "final_rigid_poses_max_difference": difference}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
