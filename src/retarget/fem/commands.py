"""``retarget check fem`` (the FEM rod against Euler-Bernoulli beam theory: tip deflection, frequencies) and
``retarget check model`` (a robot's model card: every flexible part's bending frequencies against a mesh-converged
reference, gated; and each modelled servo's coupled servo-structure mode against its reference, reported)."""

from __future__ import annotations

import argparse
import json


def register_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fem",
        help="clamped FEM rod vs Euler-Bernoulli: static tip deflection and bending frequencies",
        description="Builds a clamped rod (default: the paper's 70 cm x 5 mm spring-steel rod with the "
        "default mesh), solves a small tip load with Newton and the generalized eigenproblem K v = w^2 M v, "
        "and compares "
        "with F L^3 / (3 E I) and (beta L)^2 / (2 pi L^2) sqrt(E I / (rho A)).",
    )
    p.add_argument("--length", type=float, default=0.70, help="rod length [m] (default 0.70)")
    p.add_argument("--diameter", type=float, default=0.005, help="rod diameter [m] (default 0.005)")
    p.add_argument("--material", default="spring_steel", help="material library name (default spring_steel)")
    p.add_argument(
        "--n-axial", type=int, default=None, help="element layers along the rod (default: mesh rule)"
    )
    p.add_argument("--n-around", type=int, default=None, help="corner nodes around the section (default 8)")
    p.add_argument("--backend", choices=("auto", "numba", "numpy"), default="auto")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_check_fem)
    q = sub.add_parser(
        "model",
        help="model card: each flexible part's bending frequencies vs a mesh-converged reference (gated)",
        description="For every flexible part of the robot (clamped at its root interface), the first two bending "
        "frequencies per plane of the model's mesh after the stiffness calibration (f_model), the mesh-converged "
        "reference (Richardson over three refined meshes, f_reference), Euler-Bernoulli where it applies, and the "
        "relative errors. With modelled servos, per motor the coupled servo-structure mode (the mode of the robot "
        "linearized at its static equilibrium with the most strain energy in that motor's servo spring): its "
        "frequency, damping ratio and share, against Euler-Bernoulli theory for a rod on one servo, or, with "
        "--reduced, the reduced model's against the full FEM; flagged beyond 5 %, not gated. Exit status: 0 when "
        "every part is within the gate (|f1 error| <= 1 %, |f2 error| <= 2 %), 1 when one is not, 2 on bad "
        "input. The first card of a new part computes its reference (seconds to a minute; cached in "
        "$RETARGET_CACHE/cards or ~/.cache/retarget/cards); the servo modes cost a static solve and two "
        "eigenvalue solves of the full FEM (seconds).",
    )
    q.add_argument("robot", help="robot name (e.g. single_rod) or config YAML path")
    q.add_argument("--reduced", metavar="FILE.npz", default=None,
                   help="the card stored in this `retarget reduce` artifact (computed on the artifact's mesh when "
                        "the artifact stores none); the servo rows are its reduced model's, against the full FEM "
                        "of that mesh")
    q.add_argument("--mesh-scale", type=float, default=None,
                   help="scale the generated parts' axial element layers (as `retarget reduce --mesh-scale`)")
    q.add_argument("--mesh-axial", type=int, default=None,
                   help="element layers along every generated part (as `retarget plan --mesh-axial`)")
    q.add_argument("--mesh-around", type=int, default=None,
                   help="corner nodes around every rod (as `retarget plan --mesh-around`)")
    q.add_argument("--no-calibration", action="store_true",
                   help="the card of the uncalibrated mesh (stiffness factor 1)")
    q.add_argument("--servo-goals", metavar="RAD,...", default=None,
                   help="the motors' goals [rad] (comma-separated, motor order) of the equilibrium the servo modes "
                        "are linearized at (default: every goal 0, the reference pose)")
    q.add_argument("--no-servo-modes", action="store_true",
                   help="leave out the coupled servo-structure modes (the bending card only)")
    q.add_argument("--json", action="store_true", help="print the card as a JSON object as the last line")
    q.set_defaults(func=_check_model)


def _check_fem(args: argparse.Namespace) -> int:
    import math
    import time

    import numpy as np

    from retarget.fem.cantilever import (
        clamped_dofs,
        euler_bernoulli_frequencies,
        euler_bernoulli_tip_deflection,
        natural_frequencies,
        tip_load_deflection,
    )
    from retarget.fem.elastic import ElasticBody
    from retarget.fem.material import get_material
    from retarget.fem.mesh import rod_mesh

    t0 = time.perf_counter()
    material = get_material(args.material)
    mesh = rod_mesh(args.length, args.diameter, n_axial=args.n_axial, n_around=args.n_around)
    body = ElasticBody(mesh, material, backend=args.backend)
    second_moment = math.pi * args.diameter**4 / 64.0
    area = math.pi * args.diameter**2 / 4.0
    e = material.youngs_modulus
    # A load whose beam-theory deflection is 1e-4 L keeps the check in the linear range.
    force = 1e-4 * args.length * 3.0 * e * second_moment / args.length**3
    deflection, sol = tip_load_deflection(body, args.length, np.array([force, 0.0, 0.0]))
    expected_deflection = euler_bernoulli_tip_deflection(force, args.length, e, second_moment)
    freqs = natural_frequencies(body, clamped_dofs(body), n_modes=4)
    expected_freqs = euler_bernoulli_frequencies(args.length, e, second_moment, material.density, area, 2)
    report = {
        "check": "fem_cantilever",
        "n_dofs": mesh.n_dofs,
        "n_tets": mesh.n_tets,
        "backend": body.backend,
        "tip_force_n": force,
        "tip_deflection_m": deflection,
        "euler_bernoulli_tip_deflection_m": expected_deflection,
        "tip_deflection_rel_error": deflection / expected_deflection - 1.0,
        "newton_iterations": len(sol.residual_norms) - 1,
        "frequencies_hz": freqs.tolist(),
        "euler_bernoulli_frequencies_hz": expected_freqs.tolist(),
        "first_frequency_rel_error": float(freqs[0] / expected_freqs[0] - 1.0),
        "second_bending_frequency_rel_error": float(freqs[2] / expected_freqs[1] - 1.0),
        "wall_time_s": round(time.perf_counter() - t0, 3),
    }
    ok = abs(report["tip_deflection_rel_error"]) < 0.02 and abs(report["first_frequency_rel_error"]) < 0.01
    report["ok"] = ok
    print(
        f"rod {args.length} m x {args.diameter * 1e3:g} mm {material.name}: "
        f"{mesh.n_dofs} DOF ({body.backend})\n"
        f"  tip deflection {deflection:.6e} m vs beam theory {expected_deflection:.6e} m "
        f"({100 * report['tip_deflection_rel_error']:+.3f} %)\n"
        f"  f1 {freqs[0]:.4f} Hz vs beam theory {expected_freqs[0]:.4f} Hz "
        f"({100 * report['first_frequency_rel_error']:+.3f} %)\n"
        f"  {'PASS' if ok else 'FAIL'} (tolerances 2 % static, 1 % frequency)"
    )
    if args.json:
        print(json.dumps(report))
    return 0 if ok else 1


def model_resolution(model_yaml: object, mesh_axial: int | None, mesh_around: int | None) -> dict[str, dict[str, int]]:
    """Per generated flexible part of the robot YAML, the resolution override of ``--mesh-axial``/``--mesh-around``
    (``around`` applies to rods only)."""
    from retarget.model.loader import read_robot_yaml

    out: dict[str, dict[str, int]] = {}
    for part in read_robot_yaml(model_yaml).get("flexible_parts") or []:  # type: ignore[arg-type]
        mesh = part.get("mesh") or {}
        if "file" in mesh:
            continue
        res: dict[str, int] = {}
        if mesh_axial is not None:
            res["axial"] = int(mesh_axial)
        if mesh_around is not None and mesh.get("generator") == "rod":
            res["around"] = int(mesh_around)
        if res:
            out[str(part.get("name", ""))] = res
    return out


def _check_model(args: argparse.Namespace) -> int:
    from pathlib import Path

    from retarget.errors import InputError
    from retarget.fem.model_card import ModelCard, model_card
    from retarget.model import library
    from retarget.model.loader import load_robot

    for name in ("mesh_axial", "mesh_around"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InputError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    if args.mesh_scale is not None and not args.mesh_scale > 0:
        raise InputError(f"--mesh-scale must be positive, got {args.mesh_scale}")
    goals = None
    if args.servo_goals is not None:
        try:
            goals = [float(x) for x in args.servo_goals.split(",")]
        except ValueError as exc:
            raise InputError(f"--servo-goals: comma-separated numbers [rad], got {args.servo_goals!r}") from exc
    path = Path(args.robot) if Path(args.robot).is_file() else library.resolve_robot(args.robot)
    card = None
    model = None
    note = ""
    scale = args.mesh_scale
    if args.reduced is not None:
        if args.mesh_axial is not None or args.mesh_around is not None or args.no_calibration:
            raise InputError("--reduced uses the artifact's own mesh and calibration: drop --mesh-axial, "
                             "--mesh-around and --no-calibration")
        from retarget.sim.reduced.store import artifact_meta

        meta = artifact_meta(args.reduced)  # an unreadable file: StaleReducedModelError, an InputError
        if meta.get("model_card"):
            card = ModelCard.from_dict(meta["model_card"])
            note = f"(stored in {args.reduced})"
        else:
            scale = (meta.get("extra") or {}).get("mesh_scale") if scale is None else scale
            note = f"({args.reduced} stores no model card: computed for the robot on its mesh, scale {scale or 1.0:g})"
    if card is None:
        resolution = model_resolution(path, args.mesh_axial, args.mesh_around)
        model = load_robot(path, path.stem.split(".")[0], mesh_scale=1.0 if scale is None else float(scale),
                           resolution=resolution or None, stiffness_calibration=not args.no_calibration)
        card = model_card(model)
    if not args.no_servo_modes:
        from dataclasses import replace

        from retarget.sim.servo_modes import servo_card

        if args.reduced is not None:
            from retarget.sim.reduced.store import load_artifact

            planning = load_artifact(path, args.reduced)
            rows = servo_card(planning.model, planning.reduced, goals)
        else:
            rows = servo_card(model, None, goals)
        card = replace(card, servo_modes=rows)
    print(card.format() + (f"\n  {note}" if note else ""))
    if args.json:
        print(card.to_json())
    return 0 if card.passed else 1
