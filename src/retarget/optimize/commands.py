"""``retarget check profile-fit`` and ``retarget check shaper``: the optimizer's simulator-free building blocks.

(``retarget plan`` and ``retarget check gradient`` come with the adjoint and the L-BFGS driver.)
"""
from __future__ import annotations

import argparse
import json
import math
import time


def _profile_fit(args: argparse.Namespace) -> int:
    from retarget.motion.io import load_motion
    from retarget.optimize.bspline import fit_profiles

    motion = load_motion(args.motion)
    started = time.perf_counter()
    fit = fit_profiles(motion, args.knot_spacing, smoothing=args.smoothing, hold_start=not args.free_start,
                       hold_end=not args.free_end)
    wall = time.perf_counter() - started
    report = {"motion": str(args.motion), "samples": motion.num_samples, "duration_s": motion.duration,
              **fit.summary(), "wall_s": wall}
    print(f"{args.motion}: {motion.num_joints} joints, {motion.duration:.3f} s; knot spacing {args.knot_spacing} s, "
          f"{fit.profiles.n_control} control points per motor, {fit.parametrization.n_parameters} parameters")
    print(f"{'joint':24s} {'max error [deg]':>16s} {'RMS error [deg]':>16s}")
    for name, e_max, e_rms in zip(fit.joint_names, fit.max_error, fit.rms_error):
        print(f"{name:24s} {math.degrees(e_max):16.4f} {math.degrees(e_rms):16.4f}")
    if args.json:
        print(json.dumps(report))
    return 0


def _shaper(args: argparse.Namespace) -> int:
    from retarget.optimize.shaping import zv_shaper, zvd_shaper

    report = {}
    for shaper in (zv_shaper(args.frequency, args.damping), zvd_shaper(args.frequency, args.damping)):
        robustness = {f"{s:+.0%}": shaper.residual_vibration(args.frequency * (1 + s), args.damping)
                      for s in (-0.2, -0.1, 0.0, 0.1, 0.2)}
        report[shaper.name.lower()] = {"amplitudes": shaper.amplitudes.tolist(), "times_s": shaper.times.tolist(),
                                       "duration_s": shaper.duration, "lag_s": shaper.lag_s,
                                       "residual_vibration": robustness}
        amplitudes = [round(float(a), 4) for a in shaper.amplitudes]
        times = [round(float(t), 4) for t in shaper.times]
        print(f"{shaper.name:4s} A = {amplitudes}  t = {times} s  duration {shaper.duration:.4f} s  "
              f"lag {shaper.lag_s:.4f} s")
        table = "  ".join(f"{k}: {v:.3f}" for k, v in robustness.items())
        print(f"     residual vibration at frequency error {table}")
    if args.json:
        print(json.dumps({"frequency_hz": args.frequency, "damping_ratio": args.damping, **report}))
    return 0


def register_check(sub: argparse._SubParsersAction) -> None:
    """Add the optimizer's checks under ``retarget check``."""
    p = sub.add_parser("profile-fit", help="fit C² cubic B-spline motor profiles to a motion: fit error per joint",
                       description="Least-squares fit of uniform cubic B-spline profiles (start and end at rest) "
                       "to a motion; reports max and RMS error per joint.")
    p.add_argument("motion", help="motion file or library name such as single_rod/step_30")
    p.add_argument("--knot-spacing", type=float, default=0.05, help="knot spacing [s] (default 0.05)")
    p.add_argument("--smoothing", type=float, default=0.0, help="acceleration smoothing weight [s^4] (default 0)")
    p.add_argument("--free-start", action="store_true", help="do not hold the first pose at rest")
    p.add_argument("--free-end", action="store_true", help="do not come to rest at the end")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_profile_fit)

    q = sub.add_parser("shaper", help="ZV/ZVD input shapers for a mode: impulses, lag, robustness",
                       description="Impulse amplitudes and times of the ZV and ZVD shapers for a mode, their lag "
                       "(impulse centroid) and the residual vibration under frequency errors.")
    q.add_argument("--frequency", type=float, required=True, help="natural frequency [Hz]")
    q.add_argument("--damping", type=float, default=0.0, help="damping ratio (default 0)")
    q.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    q.set_defaults(func=_shaper)
