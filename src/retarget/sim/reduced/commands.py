"""CLI: ``retarget check reduced`` (reduced vs full on a test motion, after training on another motion)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["register_check"]


def _progress(label: str) -> Any:
    from tqdm import tqdm

    bar: dict[str, Any] = {}

    def update(k: int, n: int) -> None:
        if "bar" not in bar:
            bar["bar"] = tqdm(total=n, desc=label, unit="step", file=sys.stderr, leave=False)
        bar["bar"].update(1)
        if k == n:
            bar["bar"].close()

    return update


def register_check(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reduced",
        help="train a reduced model on one motion, simulate another full and reduced, compare tracked bodies",
        description="Builds the reduced model (mass-PCA + cubature) from a full simulation of --train-motion, "
        "simulates --test-motion with both engines and prints the tracked-body errors and speeds.",
    )
    p.add_argument("--robot", required=True, help="robot name (e.g. single_rod) or config YAML path")
    p.add_argument("--train-motion", required=True, metavar="M1", help="motion name (robot/motion) or file")
    p.add_argument("--test-motion", required=True, metavar="M2", help="motion name (robot/motion) or file")
    p.add_argument("--modes", type=int, default=None, help="deformation modes per component (default: 99.99 %% variance)")
    p.add_argument("--dt", type=float, default=1e-3, help="time step [s] of both engines (default 0.001)")
    p.add_argument("--duration", type=float, default=None, help="cap on each motion's simulated time [s]")
    p.add_argument("--targets", type=int, default=80, help="quasi-static target samples over the test motion")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_check_reduced)


def _resolve(kind: str, name: str) -> Any:
    from pathlib import Path

    if Path(name).is_file():
        return Path(name)
    from retarget.model import library

    return library.resolve_robot(name) if kind == "robot" else library.resolve_motion(name)


def _check_reduced(args: argparse.Namespace) -> int:
    import numpy as np

    from retarget.errors import InputError
    from retarget.model.loader import load_robot
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.training import build_from_result, compare_tracked, simulate_reduced
    from retarget.sim.simulate import simulate
    from retarget.sim.statics import solve_static
    from retarget.sim.system import build_system

    if not args.dt > 0:
        raise InputError(f"--dt must be positive, got {args.dt}")
    if args.modes is not None and args.modes < 0:
        raise InputError(f"--modes must be non-negative, got {args.modes}")
    model = load_robot(_resolve("robot", args.robot))
    system = build_system(model)
    train, t_train = motors_from_motion(_resolve("motion", args.train_motion), model.motors)
    test, t_test = motors_from_motion(_resolve("motion", args.test_motion), model.motors)
    if args.duration is not None:
        t_train, t_test = min(t_train, args.duration), min(t_test, args.duration)
    t0 = time.perf_counter()
    full_train = simulate(system, train, t_train, args.dt, progress=_progress("full (train)"))
    wall_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    rs, bases, cubs = build_from_result(system, full_train, n_modes=args.modes)
    wall_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    full_test = simulate(system, test, t_test, args.dt, progress=_progress("full (test)"))
    wall_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    red_test = simulate_reduced(rs, test, t_test, args.dt, progress=_progress("reduced (test)"))
    wall_red = time.perf_counter() - t0
    tracked = [tb.link for tb in model.tracked_bodies] or [system.rigid[-1].name]
    # Quasi-static targets at sampled times (warm-started), interpolated to every stored sample.
    ts = np.linspace(0.0, t_test, max(2, args.targets))
    u = None
    samples: dict[str, list] = {n: [] for n in tracked}
    for t in ts:
        st = solve_static(system, test.value(t), u0=u)
        u = st.u
        for n in tracked:
            i = system.rigid_index(n)
            samples[n].append(u[7 * i : 7 * i + 3])
    targets = {
        n: np.stack([np.interp(full_test.time, ts, np.asarray(samples[n])[:, k]) for k in range(3)], axis=1)
        for n in tracked
    }
    metrics = compare_tracked(full_test, red_test, tracked, targets)
    n_steps = int(round(t_test / args.dt))
    out = {
        "robot": model.name,
        **metrics,
        "modes": [b.size - b.n_rigid for b in bases],
        "modes_total": [b.size for b in bases],
        "captured_variance": [b.captured_variance for b in bases],
        "cubature_elements": [int(len(c.elements)) for c in cubs],
        "cubature_error": [c.relative_error for c in cubs],
        "full_dofs": system.n_deformable_dofs,
        "full_steps_per_s": n_steps / wall_full,
        "reduced_steps_per_s": n_steps / wall_red,
        "speedup": wall_full / wall_red,
        "sim_seconds": t_test,
        "dt": args.dt,
        "wall_s_reduced": wall_red,
        "wall_s_full": wall_full,
        "wall_s_train": wall_train,
        "wall_s_build": wall_build,
        "reduced_newton_iterations_mean": float(np.mean(red_test.newton_iterations[1:])),
        "reduced_factorizations": red_test.factorizations,
        "engine": "reduced dense reference stepper (python + numba body kernels)",
    }
    print(
        f"{model.name}: modes {out['modes']}, tracked RMS error {100 * metrics['tracked_rms_error_rel']:.2f} % of the "
        f"peak deviation ({metrics['peak_deviation_m'] * 1e3:.2f} mm), max {metrics['tracked_max_error_m'] * 1e3:.3f} mm; "
        f"full {out['full_steps_per_s']:.1f} steps/s, reduced {out['reduced_steps_per_s']:.1f} steps/s "
        f"(x{out['speedup']:.1f})"
    )
    if args.json:
        print(json.dumps(out, default=float))
    return 0
