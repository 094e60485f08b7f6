"""Reduced-vs-full diagnosis on the training motion itself: how much of the error is the basis, how much damping.

The reduced model is trained on a full run and replays the *same* motion, so a perfect reduction reproduces it
up to the BDF2 discretization difference (docs/reduced.md §3). Three material variants of the single rod are run
(shipped Rayleigh α, β; α only; undamped), each full and reduced with the same basis size. Prints one JSON object
per variant, then one with the damping effect in each engine (RMS/max tip difference damped − variant) [m].

Findings: docs/reduced.md "Stiffness-proportional damping with the current tangent". Thread settings are printed; run with
``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1`` on a shared machine.

Usage: ``python bench/bench_acceptance_reduced.py [--mesh-scale 0.05] [--dt 0.002] [--duration 1.2] [--modes 8]``
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: Rayleigh (α [1/s], β [s]) overrides per variant; None keeps the shipped material.
VARIANTS: dict[str, tuple[float | None, float | None] | None] = {"shipped": None, "alpha_only": (None, 0.0), "undamped": (0.0, 0.0)}


def _threads() -> dict[str, str]:
    return {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}


def _with_damping(model: Any, alpha: float | None, beta: float | None) -> Any:
    """``model`` with every flexible part's Rayleigh coefficients replaced (None keeps a coefficient)."""
    parts = []
    for p in model.flexible_parts:
        mat = p.material
        mat = dataclasses.replace(
            mat,
            rayleigh_alpha=mat.rayleigh_alpha if alpha is None else alpha,
            rayleigh_beta=mat.rayleigh_beta if beta is None else beta,
        )
        parts.append(dataclasses.replace(p, material=mat))
    return dataclasses.replace(model, flexible_parts=tuple(parts))


def _diff(a: NDArray[np.float64], b: NDArray[np.float64]) -> tuple[float, float]:
    """(RMS, max) over time of |a − b| for (n, 3) trajectories [m]."""
    d = np.linalg.norm(a - b, axis=1)
    return float(np.sqrt(np.mean(d**2))), float(np.max(d))


def main() -> None:
    from retarget.model.library import resolve_robot
    from retarget.model.loader import load_robot
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.engine import simulate_compiled
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robot", default="single_rod")
    parser.add_argument("--motion", default="single_rod/step_30")
    parser.add_argument("--mesh-scale", type=float, default=0.05, help="rods' axial layers (default 0.05: 1 125 DOFs)")
    parser.add_argument("--dt", type=float, default=0.002, help="time step of both engines [s]")
    parser.add_argument("--duration", type=float, default=1.2, help="simulated time [s] (step_30 rises at 0.5–0.7 s)")
    parser.add_argument("--modes", type=int, default=8, help="deformation modes per component")
    args = parser.parse_args()
    base = load_robot(resolve_robot(args.robot), mesh_scale=args.mesh_scale)
    tracked = [tb.link for tb in base.tracked_bodies]
    runs: dict[str, tuple[dict[str, NDArray], dict[str, NDArray]]] = {}
    for name, override in VARIANTS.items():
        model = base if override is None else _with_damping(base, *override)
        system = build_system(model)
        motors, _ = motors_from_motion(args.motion, model.motors)
        t0 = time.perf_counter()
        full = simulate(system, motors, args.duration, args.dt)
        wall_full = time.perf_counter() - t0
        rs, bases, cubs = build_from_result(system, full, n_modes=args.modes)
        red = simulate_compiled(rs, motors, args.duration, args.dt)
        xf = {n: full.body_position(n) for n in tracked}
        xr = {n: red.body_position(n) for n in tracked}
        runs[name] = (xf, xr)
        body = system.deformable[0]
        print(json.dumps({
            "bench": "reduced_replays_training_motion", "variant": name, "robot": args.robot, "motion": args.motion,
            "alpha": body.alpha, "beta": body.beta, "mesh_scale": args.mesh_scale, "dofs": system.n_deformable_dofs,
            "dt": args.dt, "duration": args.duration, "modes": args.modes,
            "cubature_elements": [int(len(c.elements)) for c in cubs],
            "captured_variance": [b.captured_variance for b in bases],
            "tracked_travel_m": {n: float(np.max(np.linalg.norm(xf[n] - xf[n][0], axis=1))) for n in tracked},
            "reduced_vs_full_m": {n: _diff(xr[n], xf[n]) for n in tracked},
            "wall_s_full": wall_full, "wall_s_reduced": red.wall_s, "threads": _threads(),
            "load_average": os.getloadavg()[0],
        }), flush=True)
    ref_f, ref_r = runs["shipped"]
    print(json.dumps({
        "bench": "damping_effect_per_engine",
        "note": "RMS/max [m] of the tracked body between the shipped material and each variant, per engine",
        **{f"{name}_full": {n: _diff(ref_f[n], runs[name][0][n]) for n in tracked} for name in VARIANTS if name != "shipped"},
        **{f"{name}_reduced": {n: _diff(ref_r[n], runs[name][1][n]) for n in tracked} for name in VARIANTS if name != "shipped"},
    }), flush=True)


if __name__ == "__main__":
    main()
