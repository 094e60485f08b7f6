"""Benchmark of what a process pays to load a reduced model and take its first steps (a planner node, ``retarget
plan``, a twin, the demo's children all start so), with numba's cache warm.

Each repeat is a new Python process that imports the engine, loads the model (the robot's description and xacro, the
full system, the reduced one), packs it for the compiled engine and simulates a few steps; the process reports each
stage's wall and CPU time [s]. Prints the settings (threads included) and, as the last line, one JSON object with the
median of each stage over the repeats.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_model_load.py \\
        [--model FILE.npz] [--robot drummer] [--repeats 5]

Without ``--model``: the drummer's model shipped with retarget (``retarget/data/demo/``). Run it once first so that
numba's cache holds the kernels (the first process compiles them).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

#: The child: one process, one load; prints {"stage": [wall, cpu], ...} as JSON.
CHILD = r"""
import json, sys, time
t = [(time.perf_counter(), time.process_time())]
def mark():
    t.append((time.perf_counter(), time.process_time()))
import numpy as np
from retarget.sim.adapters import reduced_engine
from retarget.sim.motors import FunctionMotors
from retarget.sim.reduced.store import load_artifact
mark()
model = load_artifact(sys.argv[1], sys.argv[2]).reduced
mark()
engine = reduced_engine(model, 1e-10)
mark()
n = len(model.motors)
motors = FunctionMotors(lambda s: 0.1 * np.sin(6 * s) * np.ones(n), lambda s: 0.6 * np.cos(6 * s) * np.ones(n))
engine.simulate(engine.reference_state(), motors, 1e-3, 20)
mark()
names = ["import", "load_model", "pack_engine", "first_steps"]
out = {k: [t[i + 1][0] - t[i][0], t[i + 1][1] - t[i][1]] for i, k in enumerate(names)}
out["total"] = [t[-1][0] - t[0][0], t[-1][1] - t[0][1]]
print(json.dumps(out))
"""


def _shipped_model(robot: str) -> str:
    from retarget.sim.reduced.store import shipped_candidates

    found = shipped_candidates(robot)
    if not found:
        raise SystemExit(f"no shipped model of {robot}: pass --model FILE.npz")
    return str(found[0])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robot", default="drummer", help="the model's robot (default drummer)")
    p.add_argument("--model", default=None, metavar="FILE", help="reduced model (default: the robot's shipped one)")
    p.add_argument("--repeats", type=int, default=5, help="processes, one load each (default 5)")
    args = p.parse_args()
    model = args.model or _shipped_model(args.robot)
    settings = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    print(json.dumps({"settings": settings, "robot": args.robot, "model": model, "repeats": args.repeats}),
          file=sys.stderr)
    runs = []
    for _ in range(args.repeats):
        proc = subprocess.run([sys.executable, "-c", CHILD, args.robot, model], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    stages = {k: {"wall_s": round(statistics.median(r[k][0] for r in runs), 3),
                  "cpu_s": round(statistics.median(r[k][1] for r in runs), 3)} for k in runs[0]}
    print(json.dumps({"robot": args.robot, "model": os.path.basename(model), "repeats": args.repeats,
                      "settings": settings, "median": stages}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
