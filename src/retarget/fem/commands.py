"""``retarget check fem``: the FEM rod against Euler-Bernoulli beam theory (tip deflection, frequencies)."""

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
