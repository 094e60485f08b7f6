"""CLI: ``retarget reduce`` (build the artifact), ``retarget simulate-reduced`` and ``retarget check reduced``."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["register", "register_check"]


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
    from retarget.sim.reduced.engine import simulate_compiled
    from retarget.sim.reduced.training import build_from_result, compare_tracked
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
    red_test = simulate_compiled(rs, test, t_test, args.dt, progress=_progress("reduced (test)"))
    wall_red = red_test.wall_s
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
        "engine": "compiled reduced engine (numba time loop, condensed chord Newton)",
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


def _load(robot: str, mesh_scale: float | None) -> tuple[Any, Any, Any]:
    """(yaml path, model, absolute system); ``mesh_scale`` scales every rod's axial layer count."""
    from pathlib import Path

    from retarget.model.loader import load_robot
    from retarget.sim.system import build_system

    path = Path(_resolve("robot", robot))
    if mesh_scale is not None:
        import tempfile

        import yaml

        from retarget.errors import InputError
        from retarget.fem.mesh import DEFAULT_ROD_AROUND, default_rod_axial

        if not mesh_scale > 0:
            raise InputError(f"--mesh-scale must be positive, got {mesh_scale}")
        data = yaml.safe_load(path.read_text())
        for fp in data["retarget"].get("flexible_parts") or []:
            mesh = fp.get("mesh") or {}
            if mesh.get("generator") == "rod":
                axial = default_rod_axial(float(mesh["length"]), float(mesh["diameter"]))
                mesh["resolution"] = {"axial": max(2, round(mesh_scale * axial)), "around": DEFAULT_ROD_AROUND}
        # Next to nothing else: relative URDF names resolve through the repository's urdf/ folder.
        path = Path(tempfile.mkdtemp(prefix="retarget_")) / path.name
        path.write_text(yaml.safe_dump(data))
    model = load_robot(path)
    return path, model, build_system(model)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reduce",
        help="build a reduced model (mass-PCA bases + cubature) from a full simulation of a training motion",
    )
    p.add_argument("robot", help="robot name (e.g. single_rod) or config YAML path")
    p.add_argument("--train-motion", required=True, help="motion name (robot/motion) or file")
    p.add_argument("--modes", type=int, default=None, help="deformation modes per component (default: 99.99 %% variance)")
    p.add_argument("--dt", type=float, default=1e-3, help="full-simulation time step [s] (default 0.001)")
    p.add_argument("--duration", type=float, default=None, help="cap on the training motion [s]")
    p.add_argument("--mesh-scale", type=float, default=None, help="scale the rods' axial element layers (coarse meshes)")
    p.add_argument("--out", required=True, help="output .npz")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_reduce)
    q = subparsers.add_parser("simulate-reduced", help="simulate a motion with a reduced model (compiled engine)")
    q.add_argument("robot", help="robot name or config YAML path (must match the reduced model)")
    q.add_argument("--reduced", required=True, help="reduced model .npz from `retarget reduce`")
    q.add_argument("--motion", required=True, help="motion name (robot/motion) or file")
    q.add_argument("--dt", type=float, default=1e-3, help="time step [s] (default 0.001)")
    q.add_argument("--duration", type=float, default=None, help="cap on the simulated time [s]")
    q.add_argument("--mesh-scale", type=float, default=None, help="as given to `retarget reduce`")
    q.add_argument("--out", default=None, help="write time, rigid poses and z to this .npz")
    q.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    q.set_defaults(func=_simulate_reduced)


def _reduce(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.artifact import save_reduced
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.simulate import simulate

    if not args.dt > 0:
        raise InputError(f"--dt must be positive, got {args.dt}")
    path, model, system = _load(args.robot, args.mesh_scale)
    motors, t_end = motors_from_motion(_resolve("motion", args.train_motion), model.motors)
    if args.duration is not None:
        t_end = min(t_end, args.duration)
    t0 = time.perf_counter()
    full = simulate(system, motors, t_end, args.dt, progress=_progress("full (train)"))
    wall_full = time.perf_counter() - t0
    _, bases, cubs = build_from_result(system, full, n_modes=args.modes)
    out = save_reduced(args.out, system, bases, cubs, path, model.name, {
        "train_motion": args.train_motion, "dt": args.dt, "duration": t_end, "mesh_scale": args.mesh_scale,
    })
    res = {
        "robot": model.name, "out": str(out), "modes": [b.size - b.n_rigid for b in bases],
        "captured_variance": [b.captured_variance for b in bases],
        "cubature_elements": [int(len(c.elements)) for c in cubs], "full_dofs": system.n_deformable_dofs,
        "wall_s_full": wall_full,
    }
    print(f"{model.name}: wrote {out} (modes {res['modes']}, cubature elements {res['cubature_elements']})")
    if args.json:
        print(json.dumps(res, default=float))
    return 0


def _simulate_reduced(args: argparse.Namespace) -> int:
    import numpy as np

    from retarget.errors import InputError
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.artifact import load_reduced
    from retarget.sim.reduced.engine import simulate_compiled

    if not args.dt > 0:
        raise InputError(f"--dt must be positive, got {args.dt}")
    path, model, system = _load(args.robot, args.mesh_scale)
    rs = load_reduced(args.reduced, system, path)
    motors, t_end = motors_from_motion(_resolve("motion", args.motion), model.motors)
    if args.duration is not None:
        t_end = min(t_end, args.duration)
    run = simulate_compiled(rs, motors, t_end, args.dt, progress=_progress("reduced"))
    n = len(run.time) - 1
    if args.out:
        np.savez_compressed(args.out, time=run.time, rigid_poses=run.rigid_poses, z=run.coordinates,
                            bodies=np.array([b.name for b in rs.rigid]))
    res = {"robot": model.name, "sim_seconds": t_end, "dt": args.dt, "steps": n, "wall_s": run.wall_s,
           "steps_per_s": n / run.wall_s, "factorizations": run.factorizations,
           "newton_iterations_mean": float(np.mean(run.newton_iterations[1:])), "out": args.out}
    print(f"{model.name}: {t_end:.3g} s in {run.wall_s:.2f} s wall ({res['steps_per_s']:.0f} steps/s)")
    if args.json:
        print(json.dumps(res, default=float))
    return 0
