"""The coupled servo–structure modes of the robots (the model card's servo rows, docs/fem.md "Servo modes").

Per robot: the full FEM at the given mesh scale (stiffness-calibrated, the robot's servos), linearized at the
reference pose (every goal 0), its lowest modes and per motor the mode with the most strain energy in its servo
spring (:func:`retarget.sim.servo_modes.servo_card`): frequency, damping ratio, share, the structure's own mode
(every servo ideal) and the reference where there is one (Euler–Bernoulli for a rod on one servo). With
``--reduced ROBOT=MODEL`` also that reduced model's rows against the full FEM on the model's mesh (as
``retarget check model ROBOT --reduced MODEL``).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python bench/bench_servo_modes.py \\
        single_rod two_rods dancer bartender rapper drummer boxer --mesh-scale 0.25 \\
        --reduced drummer=src/retarget/data/demo/drummer-boxer_boxing-mesh0.25-2s.npz

Prints one line per motor and as the last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robots", nargs="+")
    p.add_argument("--mesh-scale", type=float, default=1.0)
    p.add_argument("--reduced", action="append", default=[], metavar="ROBOT=MODEL",
                   help="also this reduced model's rows against the full FEM (repeatable)")
    args = p.parse_args()
    threads = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}; load {os.getloadavg()[0]:.1f}", flush=True)

    from retarget.model import library
    from retarget.model.loader import load_robot
    from retarget.sim.reduced.store import load_artifact
    from retarget.sim.servo_modes import servo_card

    runs = []
    jobs = [(robot, None) for robot in args.robots] + [tuple(r.split("=", 1)) for r in args.reduced]
    for robot, artifact in jobs:
        t0 = time.perf_counter()
        if artifact is None:
            model = load_robot(library.resolve_robot(robot), robot, mesh_scale=args.mesh_scale)
            rows = servo_card(model)
        else:
            planning = load_artifact(robot, artifact)
            rows = servo_card(planning.model, planning.reduced)
        wall = time.perf_counter() - t0
        for r in rows:
            ref = "-" if r.f_reference is None else f"{r.f_reference:.3f} ({100 * r.error:+.2f} %)"
            print(f"{robot:<11} {r.motor:<21} mode {r.mode:>2} {r.f_model:8.3f} Hz  zeta {r.damping_ratio or 0:.3f}  "
                  f"share {r.share:.3f}  ideal {r.f_ideal_servo or 0:8.3f} Hz  ref {ref}", flush=True)
        print(f"{robot}: {wall:.1f} s ({rows[0].model if rows else 'no modelled servo'})", flush=True)
        runs.append({"robot": robot, "mesh_scale": None if artifact else args.mesh_scale, "reduced": artifact,
                     "wall_time_s": round(wall, 1), "load_average": round(os.getloadavg()[0], 1),
                     "rows": [asdict(r) for r in rows]})
    print(json.dumps({"benchmark": "servo_modes", "threads": threads, "runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
