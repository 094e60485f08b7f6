"""Full-space simulator benchmark: the paper's single rod (70 cm, 5 mm spring steel on one servo, 100 g tip).

Prints one JSON object per mesh (coarse and ~30 000 DOF): steps/s of BDF2 steps (dt = 0.5 ms) while the servo
turns, Newton iterations, factorizations and peak RSS. Thread settings are printed with the results; run with
``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1`` on a shared machine.

Usage: ``python bench/bench_sim.py [--steps N] [--only coarse|fine]``
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time

import numpy as np


def single_rod(n_axial: int, n_around: int):
    """The single-rod robot: servo at the origin (hinge about z), vertical rod, 100 g brass tip."""
    from retarget.fem.material import MATERIALS
    from retarget.fem.mesh import rod_mesh
    from retarget.model.robot import RobotBuilder
    from retarget.sim.scenarios import box_inertia, sphere_inertia

    length, diameter = 0.70, 0.005
    mesh = rod_mesh(length, diameter, n_axial, n_around)
    b = RobotBuilder("single_rod", gravity=(0, 0, -9.81))
    b.add_link("horn", 0.02, (0, 0, -0.005), box_inertia(0.02, (0.03, 0.03, 0.01)))
    b.add_joint("base_yaw", "hinge", None, "horn", (0, 0, 0), (0, 0, 1), motor=True)
    b.add_link("tip_mass", 0.1, (0, 0, length), sphere_inertia(0.1, 0.0145))
    b.add_flexible_part(
        "rod", mesh, MATERIALS["spring_steel"],
        [("horn", mesh.nodes_on_plane(2, 0.0)), ("tip_mass", mesh.nodes_on_plane(2, length))],
    )
    return b.build()


def run(label: str, n_axial: int, n_around: int, steps: int, dt: float) -> dict:
    from retarget.sim.integrator import FactorizationCache, StepOptions, step
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.statics import solve_static
    from retarget.sim.system import build_system

    t0 = time.perf_counter()
    system = build_system(single_rod(n_axial, n_around))
    build_s = time.perf_counter() - t0
    # Servo starts turning towards 30° (smooth C² ramp): the rod bends and swings.
    ramp = 0.5

    def theta(t: float) -> list[float]:
        s = min(t / ramp, 1.0)
        return [math.radians(30) * s**3 * (10 - 15 * s + 6 * s * s)]

    def theta_dot(t: float) -> list[float]:
        s = min(t / ramp, 1.0)
        return [math.radians(30) * 30 * s * s * (1 - s) ** 2 / ramp]

    motors = FunctionMotors(theta, theta_dot)
    t1 = time.perf_counter()
    state = solve_static(system, [0.0])
    static_s = time.perf_counter() - t1
    options = StepOptions()
    cache = FactorizationCache()
    prev2 = None
    iters = []
    t2 = time.perf_counter()
    for k in range(1, steps + 1):
        new, _, it = step(system, state, prev2, dt, motors, options, k, cache)
        prev2, state = state, new
        iters.append(it)
    wall = time.perf_counter() - t2
    return {
        "bench": "sim_full_single_rod",
        "mesh": label,
        "n_axial": n_axial,
        "n_around": n_around,
        "deformable_dofs": system.n_deformable_dofs,
        "rigid_dofs": 6 * len(system.rigid),
        "constraints": system.n_lambda,
        "dt": dt,
        "steps": steps,
        "steps_per_s": steps / wall,
        "newton_iterations_mean": float(np.mean(iters)),
        "factorizations": cache.factorizations,
        "build_s": build_s,
        "static_solve_s": static_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "threads": {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")},
        "cpu_count": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="BDF2 steps per mesh (default 40)")
    parser.add_argument("--only", choices=("coarse", "fine"), default=None)
    args = parser.parse_args()
    # coarse: one element layer per 4 diameters (5 325 DOFs); fine: 30 075 DOFs (paper: 30 390), one layer per
    # 0.7 diameters.
    meshes = {"coarse": (35, 8), "fine": (200, 8)}
    for label, (na, nr) in meshes.items():
        if args.only and label != args.only:
            continue
        print(json.dumps(run(label, na, nr, args.steps, 5e-4)), flush=True)


if __name__ == "__main__":
    main()
