"""CLI: ``retarget simulate`` and the checks ``retarget check cantilever`` / ``retarget check fourbar``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from retarget.progress import progress_bar

__all__ = ["register", "register_check"]


def _emit(result: dict[str, object], as_json: bool, lines: list[str]) -> None:
    for line in lines:
        print(line)
    if as_json:
        print(json.dumps(result, default=float))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a robot (full-space FEM + rigid bodies, BDF2) following a motion",
        description="Simulate ROBOT_YAML following the motor angles of a motion file; writes an .npz result.",
    )
    p.add_argument("robot", metavar="ROBOT_YAML", help="config/<robot>.yaml (or a robot name)")
    p.add_argument("--motion", required=True, metavar="FILE", help="motion file (CSV, JSON, YAML; see docs)")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="[s] (default: the motion's length)")
    p.add_argument("--dt", type=float, default=5e-4, metavar="S", help="time step [s] (default 0.0005)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the result (.npz)")
    p.add_argument("--store-every", type=int, default=1, metavar="K", help="keep every K-th step")
    p.add_argument("--mesh-scale", type=float, default=1.0, metavar="S",
                   help="multiply every flexible part's axial element layer count (0.5: about half the DOFs, "
                   "faster, f1 slightly stiffer; see docs/physics.md) (default 1)")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.set_defaults(func=_simulate)


def _resolve_robot(name: str) -> Path:
    path = Path(name)
    if path.is_file():
        return path
    try:
        from retarget.model.library import resolve_robot  # written by the robots developer
    except ImportError as exc:
        from retarget.errors import InputError

        raise InputError(f"robot file {name!r} not found") from exc
    return resolve_robot(name)


def _simulate(args: argparse.Namespace) -> int:
    import time

    import numpy as np

    from retarget.errors import InputError
    from retarget.model.loader import load_robot
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    if args.dt <= 0:
        raise InputError(f"--dt must be positive, got {args.dt}")
    if not args.mesh_scale > 0:
        raise InputError(f"--mesh-scale must be positive, got {args.mesh_scale}")
    t0 = time.perf_counter()
    model = load_robot(_resolve_robot(args.robot), mesh_scale=args.mesh_scale)
    system = build_system(model)
    motors, motion_end = motors_from_motion(args.motion, model.motors,
                                            lambda line: print(f"retarget simulate: {line}", file=sys.stderr))
    duration = motion_end if args.duration is None else args.duration
    if not duration > 0:
        raise InputError(f"duration must be positive, got {duration}")
    result = simulate(system, motors, duration, args.dt, store_every=max(1, args.store_every), progress=progress_bar("simulate"))
    if args.out:
        result.save(args.out)
    summary = {
        "robot": model.name,
        "steps": int(round(duration / args.dt)),
        "dt": args.dt,
        "dofs": system.n_deformable_dofs,
        "mesh_scale": args.mesh_scale,
        "rigid_dofs": 6 * len(system.rigid),
        "constraints": system.n_lambda,
        "newton_iterations_mean": float(np.mean(result.newton_iterations[1:])) if len(result.time) > 1 else 0.0,
        "wall_s": time.perf_counter() - t0,
        "out": args.out,
    }
    for tb in model.tracked_bodies:
        pos = result.body_position(tb.link)
        summary[f"{tb.link}_max_excursion_m"] = float(np.max(np.linalg.norm(pos - pos[0], axis=1)))
    lines = [f"simulated {model.name}: {summary['steps']} steps of {args.dt} s, {summary['dofs']} FEM DOFs, "
             f"{summary['wall_s']:.1f} s wall" + (f", wrote {args.out}" if args.out else "")]
    _emit(summary, args.json, lines)
    return 0


def register_check(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cantilever",
        help="rod + tip mass vs Euler-Bernoulli: f1 from a BDF2 free vibration, static sag",
        description="A round rod clamped to a rigid base (coupling constraint) with a compact tip mass; f1 is "
        "measured from the simulated free vibration and compared with the exact Euler-Bernoulli value.",
    )
    p.add_argument("--length", type=float, required=True, help="[m]")
    p.add_argument("--diameter", type=float, required=True, help="[m]")
    p.add_argument("--tip-mass", type=float, required=True, help="[kg] (0: none)")
    p.add_argument("--youngs-modulus", type=float, default=200e9, help="[Pa] (default 200e9)")
    p.add_argument("--density", type=float, default=7850.0, help="[kg/m^3] (default 7850)")
    p.add_argument("--poisson", type=float, default=0.29, help="[-] (default 0.29)")
    p.add_argument("--orientation", choices=("horizontal", "vertical"), default="horizontal")
    p.add_argument("--gravity", type=float, default=9.81, help="[m/s^2] along -z (default 9.81)")
    p.add_argument("--elements-per-diameter", type=float, default=1.0 / 1.5,
                   help="axial element layers per rod diameter (default 2/3: one layer per 1.5 diameters)")
    p.add_argument("--n-around", type=int, default=8, help="corner nodes around the section (default 8)")
    p.add_argument("--steps-per-period", type=int, default=100, help="dt = theory period / this (default 100)")
    p.add_argument("--periods", type=float, default=4.0, help="simulated periods (default 4)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_check_cantilever)

    q = subparsers.add_parser(
        "fourbar",
        help="motor-driven four-bar of rigid links for 10 s: constraint violation",
        description="A four-bar (hinge, hinge, universal, ball) driven by one motor; reports the max violation.",
    )
    q.add_argument("--duration", type=float, default=10.0, help="[s] (default 10)")
    q.add_argument("--dt", type=float, default=2e-3, help="[s] (default 0.002)")
    q.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    q.set_defaults(func=_check_fourbar)


def _check_cantilever(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.sim.scenarios import CantileverSpec
    from retarget.sim.validation import cantilever_layers, run_cantilever

    for name in ("length", "diameter", "youngs_modulus", "density"):
        if not getattr(args, name) > 0:
            raise InputError(f"--{name.replace('_', '-')} must be positive")
    if args.tip_mass < 0 or args.gravity < 0:
        raise InputError("--tip-mass and --gravity must be non-negative")
    n_axial = cantilever_layers(args.length, args.diameter, args.elements_per_diameter)
    spec = CantileverSpec(
        args.length, args.diameter, args.tip_mass, args.youngs_modulus, args.density, args.poisson,
        args.orientation, args.gravity, n_axial, args.n_around,
    )
    print(f"mesh: {n_axial} axial layers x {args.n_around} around (quadratic tets); "
          f"dt = theory period / {args.steps_per_period}; {args.periods} periods", file=sys.stderr)
    result = run_cantilever(spec, periods=args.periods, steps_per_period=args.steps_per_period,
                            progress=progress_bar("cantilever"))
    result.pop("spec")
    lines = [
        f"mesh: {result['elements']} tets ({n_axial} x {args.n_around}), {result['dofs']} DOFs; dt = {result['dt']:.3e} s, "
        f"{result['steps']} steps, {result['wall_s']:.1f} s wall",
        f"f1 = {result['f1_hz']:.5g} Hz (Euler-Bernoulli {result['f1_theory_hz']:.5g} Hz, "
        f"error {100 * result['f1_relative_error']:+.2f} %)",
    ]
    if "static_tip_deflection_m" in result:
        lines.append(
            f"static tip deflection = {result['static_tip_deflection_m'] * 1e3:.4g} mm (beam theory "
            f"{result['static_tip_deflection_theory_m'] * 1e3:.4g} mm, error {100 * result['static_relative_error']:+.2f} %)"
        )
    lines.append(f"max constraint violation = {result['max_constraint_violation']:.2e} m")
    _emit(result, args.json, lines)
    return 0


def _check_fourbar(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.sim.validation import run_fourbar

    if not (args.duration > 0 and args.dt > 0):
        raise InputError("--duration and --dt must be positive")
    result = run_fourbar(args.duration, args.dt, progress=progress_bar("fourbar"))
    lines = [f"four-bar: {result['steps']} steps of {args.dt} s; max constraint violation "
             f"{result['max_constraint_violation']:.2e} m (orientation rows {result['max_orientation_violation']:.2e})"]
    _emit(result, args.json, lines)
    return 0
