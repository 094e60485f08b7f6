"""CLI: ``retarget plan``, ``retarget refine``, ``retarget check gradient``, ``retarget check profile-fit``,
``retarget check shaper``."""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from retarget.cliargs import add_motion, add_robot
from retarget.progress import progress_bar

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from retarget.motion.motion import Motion
    from retarget.planning.budget import PlanEstimate, StageEstimate
    from retarget.planning.model import PlanningModel
    from retarget.planning.options import PlanOptions
    from retarget.planning.variants import PlanResult


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
    from retarget.planning.options import PlanOptions as D

    p = sub.add_parser("profile-fit", help="fit C² cubic B-spline motor profiles to a motion: fit error per joint",
                       description="Least-squares fit of uniform cubic B-spline profiles (start and end at rest) "
                       "to a motion; reports max and RMS error per joint.")
    add_motion(p, "motion file or library name such as single_rod/step_30")
    p.add_argument("--knot-spacing", type=float, default=D.knot_spacing, help="knot spacing [s] (default 0.05)")
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

    g = sub.add_parser("gradient", help="adjoint gradient vs central finite differences on random directions",
                       description="Simulates a segment of the motion with the reduced model and compares the "
                       "discrete-adjoint gradient with central differences (step chosen by a sweep).")
    add_robot(g, "robot name or params YAML")
    g.add_argument("--motion", required=True, help="motion name (robot/motion) or file")
    g.add_argument("--start", type=float, default=0.0, help="segment start after the motion's start [s]")
    g.add_argument("--duration", type=float, default=0.8, help="segment length [s] (default 0.8)")
    g.add_argument("--knot-spacing", type=float, default=0.05, help="knot spacing [s] (default 0.05)")
    g.add_argument("--directions", type=int, default=10, help="random directions (default 10)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    _model_args(g)
    g.set_defaults(func=_check_gradient)


#: A tqdm progress callback ``(done, total)`` on stderr.
_bar = progress_bar


def _model_args(p: argparse._ActionsContainer, settings: bool = True) -> None:
    """The model options (``settings`` false: without ``--dt``, ``--reduced`` and ``--allow-unverified-model``,
    which ``retarget plan`` declares with the planner's settings, :mod:`retarget.planning.settings`)."""
    from retarget.planning.options import PlanOptions as D

    p.add_argument("--modes", type=int, default=D.modes,
                   help=f"at most N deformation modes per flexible part of a model trained here (default "
                        f"{D.modes})")
    if settings:
        p.add_argument("--dt", type=float, default=D.dt, help="simulation step of the planner [s] (default 0.005, "
                       "as the planner node; `retarget plan` re-simulates the result at a finer step, --verify-dt)")
    p.add_argument("--mesh-axial", type=int, default=D.mesh_axial,
                   help="rod mesh layers of the training mesh (default 20)")
    p.add_argument("--mesh-around", type=int, default=D.mesh_around, help="rod mesh corner nodes around (default 6)")
    p.add_argument("--dt-train", type=float, default=D.dt_train,
                   help="step of the full training simulation [s] (default "
                   "0.002)")
    if settings:
        p.add_argument("--reduced", default=None, metavar="FILE", help="reduced model to use: a `retarget reduce` "
                       "artifact (.npz, from `retarget reduce` or cached by `retarget plan`; its own mesh: the "
                       "--mesh-* options are ignored)")
        p.add_argument("--allow-unverified-model", action="store_true", help="plan even when a flexible part's "
                       "frequencies miss the model card's gate (expert use: the plan's figures then rest on a model "
                       "whose frequencies are wrong)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the reduced-model cache, nor "
                   "search the model folders ($RETARGET_MODELS, $RETARGET_CACHE/models, .cache-models/), nor use "
                   "the model shipped for the robot (retarget plan: a model is trained)")


def _motion_announcing_model(args: argparse.Namespace) -> Motion:
    """The motion of ``--motion`` (a file or a library name), after saying on stderr which model will be used."""
    from pathlib import Path

    from retarget.model import library
    from retarget.motion import load_motion

    path = Path(args.motion) if Path(args.motion).is_file() else library.resolve_motion(args.motion)
    motion = load_motion(path)
    if args.reduced:
        print(f"model: {args.robot}, reduced model {args.reduced}", file=sys.stderr)
        return motion
    shipped = _shipped_models(args)
    found = ("one cached or in the model folders, else the model shipped with retarget "
             f"({Path(shipped[0]).name}; `retarget reduce` builds your own), else one trained here: ") if shipped \
        else ""
    print(f"model: {args.robot}, {found}{args.modes} modes, training mesh {args.mesh_axial}x{args.mesh_around} "
          f"(stiffness calibrated), training dt {args.dt_train} s (cached by content hash)", file=sys.stderr)
    return motion


def _shipped_models(args: argparse.Namespace) -> tuple[str, ...]:
    """The models shipped with retarget for the robot (:func:`retarget.sim.reduced.store.shipped_candidates`): the
    plan's fallback before training, unless ``--reduced`` or ``--no-cache`` (which trains) is given."""
    from pathlib import Path

    from retarget.sim.reduced.store import shipped_candidates

    if getattr(args, "reduced", None) or getattr(args, "no_cache", False):
        return ()
    name = Path(args.robot).name.split(".")[0] if Path(args.robot).is_file() else str(args.robot)
    return tuple(str(p) for p in shipped_candidates(name))


def _load(args: argparse.Namespace) -> tuple[PlanningModel, Motion]:
    """The planning model (gated, its card printed) and the motion of ``retarget check gradient``'s arguments."""
    from retarget.errors import InputError
    from retarget.motion.limits import check_plan_input
    from retarget.planning.model import planning_model

    if not args.dt > 0:
        raise InputError(f"--dt must be positive, got {args.dt}")
    if getattr(args, "time_budget", None) is not None and not args.time_budget > 0:
        raise InputError(f"--time-budget must be positive, got {args.time_budget}")
    robot = args.robot
    motion = check_plan_input(robot, _motion_announcing_model(args))  # motors it leaves out hold their zero pose
    pm = planning_model(robot, motion, n_modes=args.modes, dt_train=args.dt_train, mesh_axial=args.mesh_axial,
                        mesh_around=args.mesh_around, reduced_file=args.reduced, use_cache=not args.no_cache,
                        progress=_bar("full training simulation"))
    from retarget.planning.verification import gate_model

    warning = gate_model(pm, getattr(args, "allow_unverified_model", False), lambda text: print(text, file=sys.stderr))
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return pm, motion


#: ``--quick``'s iterations (per window with windows), unless ``--max-iterations`` is given.
QUICK_ITERATIONS = 3


def _params_file_settings(robot: str) -> dict[str, object]:
    """The robot's params-file values (``config/<robot>.params.yaml``; file settings relative to its folder), or
    none when it has no params file."""
    from retarget.errors import InputError
    from retarget.planning.settings import robot_settings

    try:
        return robot_settings(robot)
    except InputError:  # a robot YAML without a params file beside it (unknown names fail later, with the list)
        return {}


def plan_options_from_args(args: argparse.Namespace) -> tuple[PlanOptions, list[str]]:
    """:class:`~retarget.planning.options.PlanOptions` from ``retarget plan``'s arguments over the robot's
    params-file planner settings (:func:`retarget.planning.settings.resolve_plan_options`), and one line per stage
    a budget-limited look (``--quick``, ``--max-iterations``) skips because the user did not ask for it.

    Raises:
        InputError: a setting out of its range, named as its flag.
    """
    from dataclasses import replace

    from retarget.errors import InputError
    from retarget.planning.options import ITERATION_BUDGET_SKIPS, PlanOptions, iteration_budgeted
    from retarget.planning.settings import parameters_from_flags, resolve_plan_options, setting

    for flag in ("dt", "time_budget", "max_iterations"):
        value = getattr(args, flag)
        if value is not None and not value > 0:
            raise InputError(f"--{flag.replace('_', '-')} must be positive, got {value}")
    if args.window is not None and args.window < 0:
        raise InputError(f"--window must be positive (or 0: the whole motion at once), got {args.window}")
    if args.verify_dt is not None and args.verify_dt < 0:
        raise InputError(f"--verify-dt must be positive (or 0: no verification), got {args.verify_dt}")
    quick = bool(getattr(args, "quick", False))
    flags = parameters_from_flags(args)
    if quick and args.max_iterations is None:
        flags["max_iterations"] = QUICK_ITERATIONS
    robust = args.robust if args.robust is not None else ("none" if quick else "0.9,1.1")
    try:
        options = resolve_plan_options(
            _params_file_settings(args.robot), flags, allow_training=True,
            knot_spacing=args.knot_spacing, relative_tolerance=args.relative_tolerance,
            deviation_weight=args.deviation_weight, acceleration_weight=args.acceleration_weight,
            duration=args.duration, first_step=args.first_step, start=args.start,
            stiffness_band=_factors(robust, "--robust"), band=_factors(args.band, "--band"),
            verify_full_dt=args.verify_full_dt, verify_full_max_s=args.verify_full_max_s,
            verify_full_band=_factors(args.verify_full_band or "none", "--verify-full-band"), modes=args.modes,
            dt_train=args.dt_train, mesh_axial=args.mesh_axial, mesh_around=args.mesh_around,
            use_cache=not args.no_cache, weights=tuple(args.weight or ()),
            fallback_models=_shipped_models(args))
    except InputError as exc:  # named as the node's parameter: say the flag
        name, _, why = str(exc).partition(" ")
        try:
            flag = setting(name).flag
        except KeyError:
            raise exc from None
        raise InputError(f"{flag or name} {why}") from None
    skipped: list[str] = []
    if quick or args.max_iterations is not None:
        look = "--quick" if quick else f"--max-iterations {args.max_iterations}"
        whole = options.window is None  # windows run neither the settle refinement nor the torque re-optimization
        keep = frozenset(name for name in ("settle_iterations", "verify_full_band") if getattr(args, name) is not None)
        options, budget_skips = iteration_budgeted(options, keep)
        how = {"settle_iterations": " (--settle-iterations N runs it)",
               "verify_full_band": " (--verify-full-band F,F runs them)"}
        skipped.extend(ITERATION_BUDGET_SKIPS[name] + how.get(name, "") for name in budget_skips)
        if quick and args.robust is None and PlanOptions.stiffness_band and whole:
            skipped.append("the robust objective's stiffness-scaled models (--robust F,F keeps them)")
        if quick and args.verify_model is None and options.verify_model == "auto":
            options = replace(options, verify_model="none")
            skipped.append("the verification in another model (--verify-model auto|full|FILE runs it)")
        skipped = [f"{look}: skipping {what}" for what in skipped]
    return options, skipped


def options_from_args(args: argparse.Namespace) -> PlanOptions:
    """:class:`~retarget.planning.options.PlanOptions` from ``retarget plan``'s arguments
    (:func:`plan_options_from_args`)."""
    return plan_options_from_args(args)[0]


def _plan_command(args: argparse.Namespace) -> int:
    """`retarget plan`: arguments → :class:`PlanOptions`, :func:`retarget.planning.plan`, outputs and exit status."""
    from pathlib import Path

    from tqdm import tqdm

    from retarget.errors import InputError
    from retarget.motion import save_motion
    from retarget.planning.run import PlanProgress, plan

    if args.out and Path(args.out).suffix.lower() not in (".csv", ".json", ".yaml", ".yml"):
        raise InputError(f"--out must end in .csv, .json or .yaml, got {args.out}")
    # The motion file against the robot's limits before anything else (plan() checks the Motion again, but only
    # the file knows its line numbers), and before the model line that announces minutes of training.
    from retarget.motion.limits import check_plan_input

    check_plan_input(args.robot, args.motion)
    options, skipped = plan_options_from_args(args)
    for line in skipped:
        print(line, file=sys.stderr)
    motion = _motion_announcing_model(args)
    # With windows, max_iterations is per window and their number is known only once the problem is built.
    bar = tqdm(total=None if options.window else options.max_iterations, desc="optimize", unit="it", file=sys.stderr)
    stage_bars: dict[str, Callable[[int, int], None]] = {}

    def steps(stage: str, k: int, n: int) -> None:
        if n <= 0:
            return
        if stage not in stage_bars:
            stage_bars[stage] = _bar(stage)
        stage_bars[stage](k, n)

    def iteration(it: dict) -> None:
        bar.update(1)
        where = {"window": f"{it['window']}/{it['windows']}"} if "window" in it else {}
        bar.set_postfix(**where, J=f"{it['objective']:.4e}", grad=f"{it['gradient_norm']:.2e}")

    def message(text: str) -> None:
        print(text, file=sys.stderr)

    def estimate(what: StageEstimate | PlanEstimate) -> None:
        from retarget.planning.budget import StageEstimate

        lines = [what.line()] if isinstance(what, StageEstimate) else what.lines()
        print("estimated before the work (rough; docs/optimize.md \"Cost\"):", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)

    result = plan(args.robot, motion, options, PlanProgress(steps=steps, iteration=iteration, message=message,
                                                            estimate=estimate))
    bar.close()
    metrics = result.to_json()
    out_motion = result.output_motion(motion)
    written = []
    if args.out:
        from retarget.planning.variants import plan_comments

        path = Path(args.out)
        csv_options = {"comments": plan_comments(result)} if path.suffix.lower() == ".csv" else {}
        written.append(save_motion(path, out_motion, **csv_options))
        if path.suffix.lower() not in (".yaml", ".yml"):
            written.append(save_motion(path.with_suffix(".yaml"), out_motion))
    if args.report:
        from retarget.report.plots import write_plan_report
        from retarget.report.views import ViewOptions, write_plan_views

        written.extend(write_plan_report(result, args.report))
        written.extend(write_plan_views(result, args.robot, args.report,
                                        ViewOptions(page=not args.no_page, video=not args.no_video,
                                                    mcap=not args.no_mcap)))
    metrics["files"] = [str(w) for w in written]
    # With --json stdout is the one JSON line; the summary goes to stderr.
    out = sys.stderr if args.json else sys.stdout
    print(f"{result.model_info.get('robot') or args.robot}: J {metrics['objective_initial']:.4e} -> "
          f"{metrics['objective_final']:.4e} in {metrics['iterations']} iterations ({metrics['wall_s']:.0f} s)",
          file=out)
    for name in ("naive", "speed_limited", "zv", "zvd", "optimized"):
        if name in metrics:
            m = metrics[name]
            lag = f", lag {m['lag_s']:.3f} s" if "lag_s" in m else ""
            print(f"  {name:13s} peak {1e3 * m['peak_deviation_m']:7.2f} mm  RMS {1e3 * m['rms_deviation_m']:7.2f} mm"
                  f"  torque {m['peak_torque_ratio']:.2f} x stall{lag}", file=out)
    _print_checks(result, out)
    if result.assumptions:
        print("  what the plan assumes of the hardware (not modelled):", file=out)
        for line in result.assumptions:
            print(f"    - {line}", file=out)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        from retarget.jsonsafe import dumps

        print(dumps(metrics, default=float))
    # The verdict's exit status: 3 without a meaningful cut or beyond the servos' stall torque (a cancelled plan,
    # not checked, exits 0 with its best iterate).
    if result.verdict is None:
        return 0
    if result.verdict.exit_message:
        print(f"error: {result.verdict.exit_message}", file=sys.stderr)
    return int(result.verdict.exit_status)


def _factors(text: str | None, option: str) -> tuple[float, ...]:
    """Stiffness factors from ``"0.9,1.1"`` ("" or "none": none)."""
    from retarget.errors import InputError

    if text is None or str(text).strip().lower() in ("", "none", "0"):
        return ()
    try:
        values = tuple(float(v) for v in str(text).split(","))
    except ValueError as exc:
        raise InputError(f"{option} takes comma-separated stiffness factors like 0.9,1.1, got {text!r}") from exc
    if not all(0.2 <= v <= 5.0 for v in values):
        raise InputError(f"{option}: stiffness factors must lie in [0.2, 5], got {text!r}")
    return values


def _print_checks(result: PlanResult, out: TextIO | None = None) -> None:
    """The verification and robustness figures of a :class:`~retarget.planning.variants.PlanResult`, after the
    planning model's, on ``out`` (default stdout)."""
    import builtins
    import functools

    print = functools.partial(builtins.print, file=sys.stdout if out is None else out)
    settle = result.settle
    if settle is not None:
        print(f"  settle refinement (stiffness x {', '.join(f'{f:g}' for f in settle.factors)}): largest ring-out "
              f"{1e3 * settle.ring_before_m:.2f} -> {1e3 * settle.ring_after_m:.2f} mm, peak "
              f"{1e3 * settle.peak_before_m:.2f} -> {1e3 * settle.peak_after_m:.2f} mm, "
              f"{settle.iterations} steps, {settle.wall_s:.0f} s ({settle.message})")
    checks = result.checks
    if checks is None:
        return
    ver = checks.verified
    if ver is not None:
        where = (f"{ver.model} ({ver.deformable_dofs} DOFs" if ver.deformable_dofs else
                 f"{ver.model}'s rigid-body engine (no flexible parts: rigid links on the servo loops")
        print(f"  verified in the {where}, dt {ver.dt_s:g} s):")
        for name, m in ver.runs.items():
            print(f"    {name:11s} peak {1e3 * m.peak_deviation_m:7.2f} mm  RMS "
                  f"{1e3 * m.rms_deviation_m:7.2f} mm  ring-out {1e3 * (m.ring_out_peak_m or 0.0):7.2f} mm  "
                  f"torque {m.peak_torque_ratio:.2f} x stall")
    for entry in checks.verified_band:
        if entry.peak_ratio is not None:
            ring = {n: 1e3 * (m.ring_out_peak_m or 0.0) for n, m in entry.runs.items()}
            print(f"  {entry.model}, stiffness x {entry.stiffness_factor:g}: optimized peak {entry.peak_ratio:.3f} x "
                  "naive; ring-out " + ", ".join(f"{n} {v:.1f} mm" for n, v in ring.items()))
    for band in checks.band.results if checks.band is not None else ():
        if band.peak_ratio is not None and band.naive is not None:
            zvd = f", ZVD {band.zvd.peak_deviation_m / band.naive.peak_deviation_m:.3f} x" if band.zvd else ""
            print(f"  stiffness x {band.stiffness_factor:g}: optimized peak {band.peak_ratio:.3f} x naive{zvd}")
    print(f"  headline: {checks.verdict.text}")


def _check_gradient(args: argparse.Namespace) -> int:
    import numpy as np
    from tqdm import tqdm

    from retarget.optimize.adjoint import evaluate
    from retarget.optimize.problem import build_plan_problem, limits_for
    from retarget.optimize.weights import parse_tracked_bodies
    from retarget.planning.options import PlanOptions
    from retarget.sim.adapters import reduced_engine

    started = time.perf_counter()
    pm, motion = _load(args)
    start = motion.time[0] + args.start
    keep = (motion.time >= start - 1e-12) & (motion.time <= start + args.duration + 1e-12)
    from retarget.motion.motion import Motion

    segment = Motion(motion.time[keep], motion.joint_names, motion.positions[keep])
    engine = reduced_engine(pm.reduced, tolerance=1e-12)
    options = PlanOptions(knot_spacing=args.knot_spacing, dt=args.dt, deviation_weight=1e-3,
                          acceleration_weight=1e-8)
    pp = build_plan_problem(engine, segment, parse_tracked_bodies(pm.config.get("tracked_bodies")),
                            limits_for(pm.model, pm.config), options)
    print(f"segment [{args.start}, {args.start + args.duration}] s of {args.motion}, dt {args.dt} s, "
          f"{pp.problem.n_steps} steps, {pp.fit.parametrization.n_parameters} parameters, "
          f"reduced unknowns {engine.n_state}, Newton tolerance 1e-12", file=sys.stderr)
    rng = np.random.default_rng(args.seed)
    # Evaluate at a perturbed point so that no term is stationary by construction.
    x = pp.fit.parameters + 0.02 * rng.normal(size=pp.fit.parametrization.n_parameters)
    t0 = time.perf_counter()
    ev = evaluate(pp.problem, x)
    wall_adjoint = time.perf_counter() - t0
    assert ev.gradient is not None
    directions = [rng.normal(size=x.size) for _ in range(args.directions)]
    steps = [1e-2, 1e-3, 1e-4, 1e-5, 1e-6]
    n_evals = 2 * len(steps) + 2 * (args.directions - 1)
    bar = tqdm(total=n_evals, desc="finite differences", unit="sim", file=sys.stderr)

    def central(d: NDArray[np.float64], eps: float) -> float:
        fp = evaluate(pp.problem, x + eps * d, gradient=False).value
        fm = evaluate(pp.problem, x - eps * d, gradient=False).value
        bar.update(2)
        return (fp - fm) / (2 * eps)

    # Step sweep on the first direction: the step where successive estimates agree best (no use of the adjoint).
    sweep = [central(directions[0], e) for e in steps]
    changes = [abs(sweep[i] - sweep[i + 1]) for i in range(len(steps) - 1)]
    best = int(np.argmin(changes))
    eps = steps[best + 1]
    rows = []
    for i, d in enumerate(directions):
        fd = sweep[best + 1] if i == 0 else central(d, eps)
        ad = float(ev.gradient @ d)
        rows.append({"adjoint": ad, "finite_difference": fd, "rel_error": abs(fd - ad) / max(abs(fd), abs(ad), 1e-300)})
    bar.close()
    out = {"robot": args.robot, "motion": str(args.motion), "segment_s": [args.start, args.start + args.duration],
           "dt": args.dt, "steps": pp.problem.n_steps, "parameters": int(x.size), "modes": args.modes,
           "reduced_unknowns": int(engine.n_state), "fd_step": eps,
           "fd_sweep": {str(e): v for e, v in zip(steps, sweep)},
           "max_rel_error": max(r["rel_error"] for r in rows), "directions": rows, "objective": ev.value,
           "gradient_norm": float(np.linalg.norm(ev.gradient)), "wall_s_adjoint_gradient": wall_adjoint,
           "wall_s": time.perf_counter() - started, "model": pm.info}
    print(f"{args.robot}: adjoint vs central differences (step {eps:g}) on {args.directions} random directions: "
          f"max relative error {out['max_rel_error']:.3e}")
    if args.json:
        print(json.dumps(out, default=float))
    return 0


#: ``retarget plan``'s exit statuses (its --help's epilog).
PLAN_EXIT_STATUSES = """exit status:
  0    the plan reached a meaningful cut within the servos' stall torque
  1    an unexpected error (a bug: the traceback says where)
  2    bad input (robot, motion, option) or nothing available: no model and no training, a time budget that ran
       out before the first result
  3    the plan reached no meaningful cut, or its optimized motion needs more than the servos' stall torque
  130  interrupted before there was a result (Ctrl-C during an optimization returns the best result so far)"""


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``retarget plan``: the planner's settings from :data:`~retarget.planning.settings.PLAN_SETTINGS` (over the
    robot's params file), the rest with :class:`~retarget.planning.options.PlanOptions`' defaults."""
    from retarget.planning.options import PlanOptions as D
    from retarget.planning.settings import add_setting_flags

    p = sub.add_parser("plan", help="optimize a motion so the robot follows it without vibrating",
                       description="Fits B-spline motor profiles to the motion, builds (or loads) the reduced "
                       "model, minimizes the tracking objective with adjoint gradients, and compares with naive "
                       "playback and ZV/ZVD input shaping. The planner's settings come from the robot's params file "
                       "(config/ROBOT.params.yaml, as its planner node uses them) unless a flag gives them. Says the "
                       "estimated time of each stage before the work. Ctrl-C returns the best result so far.",
                       epilog=PLAN_EXIT_STATUSES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("robot", help="robot name (e.g. single_rod) or params YAML")
    p.add_argument("--motion", required=True, help="motion name (robot/motion) or file")
    groups = {name: p.add_argument_group(title) for name, title in (
        ("model", "model (the reduced model planned on)"),
        ("objective", "objective (what is optimized)"),
        ("budget", "budget (how much optimization)"),
        ("verification", "verification (the checks after the optimization)"),
        ("output", "output"))}
    add_setting_flags(groups)
    model, objective, budget, checks, output = (groups[k] for k in ("model", "objective", "budget", "verification",
                                                                     "output"))
    _model_args(model, settings=False)
    objective.add_argument("--knot-spacing", type=float, default=D.knot_spacing,
                           help="B-spline knot spacing [s] (default 0.05)")
    objective.add_argument("--weight", action="append", metavar="LINK:pos=W[,ori=W]", help="tracked body weights "
                           "(repeatable; schedules like step(0:1, 2:10) allowed)")
    objective.add_argument("--deviation-weight", default=D.deviation_weight,
                           help="w_dev [1/(rad^2 s)] (default 1e-3)")
    objective.add_argument("--acceleration-weight", default=D.acceleration_weight,
                           help="w_acc [s^3/rad^2] (default 1e-8)")
    objective.add_argument("--duration", type=float, default=None, help="simulate only this much of the motion [s]")
    objective.add_argument("--start", choices=("feasible", "input"), default=D.start, help="where the optimizer "
                           "starts: feasible (default) = the input, with motors faster than their speed limit "
                           "replaced by their closest speed-feasible profiles (reported as the speed_limited variant; "
                           "naive still plays the input as authored); input = the input's fit as it is")
    objective.add_argument("--robust", default=None, metavar="F,F", help="stiffness factors of the robust "
                           "objective's other models: J is averaged over the nominal model and these (default "
                           "0.9,1.1: frequencies about -5 %% and +5 %%; 'none': the nominal model alone; not with "
                           "windows)")
    budget.add_argument("--quick", action="store_true", help=f"a first look: {QUICK_ITERATIONS} iterations (per "
                        "window) unless --max-iterations, no robust objective, no settle refinement, no verification "
                        "in another model, unless their flags are given (each skip is said on stderr). Any "
                        "--max-iterations also skips the settle refinement and the extra full-FEM runs unless asked")
    budget.add_argument("--relative-tolerance", type=float, default=D.relative_tolerance, help="stop when an "
                        f"iteration lowers J by less than this fraction of J at the start (default "
                        f"{D.relative_tolerance:g})")
    budget.add_argument("--first-step", type=float, default=None, metavar="RAD",
                        help="length of L-BFGS-B's first trial step over all parameters [rad] (default: measured "
                        "from the objective's curvature with one extra simulation)")
    checks.add_argument("--band", default="0.9,1.1", metavar="F,F", help="stiffness factors at which the plan's cut "
                        "is reported beside ZVD's (default 0.9,1.1; 'none': no band)")
    checks.add_argument("--verify-full-dt", type=float, default=D.verify_full_dt, metavar="S", help="step of the "
                        "full-FEM verification [s] (default 0.002)")
    checks.add_argument("--verify-full-max-s", type=float, default=D.verify_full_max_s, metavar="S", help="largest "
                        "estimated cost of the automatic full-FEM verification [s] (default 600)")
    checks.add_argument("--verify-full-band", default=None, metavar="F,F", help="repeat the full-FEM verification "
                        "with every flexible part's Young's modulus times these factors (e.g. 0.9,1.1; default none)")
    output.add_argument("--out", default=None, help="optimized motion (.csv, .json or .yaml JointTrajectory); "
                        "a JointTrajectory YAML is written beside a csv/json")
    output.add_argument("--report", default=None, metavar="DIR", help="write PNG plots, trajectories.npz and the "
                        "animation (animation.npz, .html page, .mp4 video, .mcap for Foxglove; `retarget view DIR`) "
                        "here")
    output.add_argument("--no-page", action="store_true", help="--report without the animated page")
    output.add_argument("--no-video", action="store_true", help="--report without the video (the slowest view)")
    output.add_argument("--no-mcap", action="store_true", help="--report without the MCAP recording")
    output.add_argument("--json", action="store_true", help="print one JSON object on stdout (the summary goes to "
                        "stderr)")
    p.set_defaults(func=_plan_command)
    _register_refine(sub)


def _register_refine(sub: argparse._SubParsersAction) -> None:
    """Add ``retarget refine`` (its defaults are :class:`~retarget.planning.refine.RefineOptions`')."""
    from retarget.planning.options import PlanOptions as D
    from retarget.planning.options import RefineOptions as R
    from retarget.planning.settings import setting

    p = sub.add_parser("refine", help="the next plan from a take of what the robot did while a plan played",
                       description="Aligns a motion-capture take (Motive CSV export or rosbag2) of the plan CURRENT "
                       "with the model's prediction, measures the tracked bodies' deviation from the input's intent, "
                       "and writes NEXT: a Gauss-Newton step of the planner's sensitivities on the measured deviation, "
                       "within a trust region, the servos' limits and stall torque (docs/refine.md). Takes and plans "
                       "that do not belong together are refused and nothing is written (exit 2).")
    p.add_argument("robot", help="robot name (e.g. single_rod) or params YAML")
    p.add_argument("--motion", required=True, help="the input motion the plan was made for (name or file)")
    p.add_argument("--plan", required=True, metavar="CURRENT", help="the plan that was played (as `retarget plan "
                   "--out` or `retarget refine --out` wrote it)")
    p.add_argument("--recording", required=True, metavar="TAKE", help="what the robot did while CURRENT played: a "
                   "Motive CSV export or a rosbag2 of PoseStamped topics")
    p.add_argument("--out", required=True, metavar="NEXT", help="the next plan (.csv, .json or .yaml; a "
                   "JointTrajectory YAML beside a csv/json, the history in NEXT.history.json)")
    p.add_argument("--body", action="append", metavar="LINK=NAME", help="a tracked body of the robot and its name in "
                   "the take: a rigid body or marker of the export, a bag's /mocap/NAME/pose or a /topic (repeatable; "
                   "default: every tracked body under its link name)")
    p.add_argument("--motion-start", type=float, default=None, metavar="S", help="the plan's motion started S "
                   "seconds after the take's first sample (a take on a clock shared with the robot): the time offset "
                   "is taken as given, so a latency is measured too (default: the start a bag of `retarget play "
                   "--record` stored, else found by alignment)")
    p.add_argument("--no-recorded-start", action="store_true", help="find the time offset by alignment even when "
                   "the take's bag stored the motion's start (a motion capture whose clock is not synchronized with "
                   "the robot's)")
    p.add_argument("--clock-snap", type=float, default=R.clock_snap_s, metavar="S", help="a time offset found within "
                   f"S of zero is taken as zero: the take's clock is read as the plan's (default {R.clock_snap_s:g} s; "
                   "0: never)")
    p.add_argument("--trust-region", type=float, default=R.trust_region_rad, metavar="RAD", help="the first trial's "
                   f"trust region: no control point moves by more (default {R.trust_region_rad:g} rad; later trials "
                   "take theirs from the history)")
    p.add_argument("--damping", type=float, default=R.damping, metavar="MU", help="Levenberg-Marquardt damping on "
                   f"diag(J^T J) (default {R.damping:g})")
    p.add_argument("--no-refit", action="store_true", help="take the step on the planning model as it is (default: "
                   "on the model with its stiffness and servo gain re-fitted to the take when that explains it "
                   "better)")
    p.add_argument("--robust", default="none", metavar="F,F", help="stiffness factors of further models the step's "
                   "sensitivities are averaged over (default none)")
    p.add_argument("--max-missing", type=float, default=R.max_missing, metavar="F", help="refuse a take with more "
                   f"than this fraction of its frames missing (default {R.max_missing:g})")
    p.add_argument("--knot-spacing", type=float, default=D.knot_spacing, help="the plan's knot spacing [s] when its "
                   f"file does not record it (default {D.knot_spacing:g})")
    p.add_argument("--rest-after", type=float, default=D.rest_after, metavar="S", help="the plan's --rest-after when "
                   f"its file does not record it (default {D.rest_after:g}; negative: none)")
    p.add_argument("--report", default=None, metavar="DIR", help="write the trials side by side (plots, page, JSON) "
                   "here")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line (on a refusal too)")
    servo = setting("servo_file")
    p.add_argument(servo.flag, default=None, metavar=servo.metavar, help=f"{servo.help}: the servos CURRENT was "
                   f"planned for (default: the params file's servo_file, else {servo.meaning})")
    _model_args(p)
    p.set_defaults(func=_refine_command)


def _refine_command(args: argparse.Namespace) -> int:
    """`retarget refine`: read CURRENT and TAKE, refine, write NEXT and its history; a refusal writes nothing."""
    from pathlib import Path

    import numpy as np

    from retarget.errors import InputError, RetargetError
    from retarget.jsonsafe import dumps
    from retarget.planning.options import RefineOptions
    from retarget.planning.refine import (
        History,
        RefineRefused,
        body_pairs,
        history_path,
        read_plan,
        read_take,
        refine,
        write_refinement,
    )

    try:
        if Path(args.out).resolve() == Path(args.plan).resolve():
            raise InputError("--out must differ from --plan: CURRENT stays as it was played")
        options = RefineOptions(trust_region_rad=args.trust_region, damping=args.damping,
                                robust=_factors(args.robust, "--robust"), max_missing=args.max_missing,
                                motion_start_s=args.motion_start, clock_snap_s=args.clock_snap,
                                recorded_start=not args.no_recorded_start, refit=not args.no_refit)
        flags = {"trust_region_rad": "--trust-region", "damping": "--damping", "max_missing": "--max-missing",
                 "clock_snap_s": "--clock-snap"}
        for name, why in options.out_of_range():
            raise InputError(f"{flags.get(name, name)} {why}")
        plan = read_plan(args.plan)
        take = read_take(args.recording, body_pairs(args.robot, args.body, option="--body takes"))
        motion = _motion_announcing_model(args)
        bars: dict[str, Callable[[int, int], None]] = {}

        def steps(stage: str, k: int, n: int) -> None:
            if n > 1:
                bars.setdefault(stage, _bar(stage))(k, n)

        result = refine(args.robot, motion, plan, take, options, _refine_plan_options(args),
                        History.load(history_path(args.plan)), say=lambda text: print(text, file=sys.stderr),
                        progress=steps)
    except RetargetError as exc:
        # Nothing is written before this point; the contract's last line says why.
        refused = isinstance(exc, RefineRefused)
        print(f"error: {'refused, ' if refused else ''}nothing written: {exc}", file=sys.stderr)
        if args.json:
            print(dumps({"refused": refused, "reason": exc.reason.value if refused else "error",
                         "message": str(exc), "files": []}))
        return 2
    written = list(write_refinement(result, args.out))
    if args.report:
        from retarget.report.refine import write_refine_report

        written.extend(write_refine_report(result, args.report))
    a, m, s = result.alignment, result.measurement, result.step
    angle = float(np.degrees(np.arccos(np.clip((np.trace(a.rotation) - 1.0) / 2.0, -1.0, 1.0))))
    print(f"take aligned: offset {a.offset_s:+.4f} s ({a.offset_source}), mocap -> robot rotation "
          f"{angle:.2f} deg, translation {np.round(a.translation, 4).tolist()} m; residual "
          f"{1e3 * a.residual_rms_m:.2f} mm RMS ({a.residual_ratio:.3f} x the travel); "
          f"{100 * a.missing_fraction:.1f} % frames missing")
    print(f"measured:  peak {1e3 * m.peak_deviation_m:7.2f} mm  RMS {1e3 * m.rms_deviation_m:7.2f} mm  ring-out "
          f"{1e3 * m.ring_out_peak_m:7.2f} mm   (the model predicted peak {1e3 * m.model_peak_deviation_m:.2f} mm)")
    print(f"next plan: peak {1e3 * s.predicted_peak_deviation_m:7.2f} mm  RMS {1e3 * s.predicted_rms_deviation_m:7.2f} "
          f"mm predicted (model alone {1e3 * s.model_peak_deviation_m:.2f} mm); torque {s.peak_torque_ratio:.2f} x "
          f"stall; step {s.step_rad:.4f} rad in a trust region of {s.trust_region_rad:.4f} rad ({s.limited_by})")
    print(f"route: {result.route}: {result.route_reason}")
    print(result.message)
    if result.stopped_improving:
        print(f"refine: {result.decision.value}", file=sys.stderr)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print("wrote " + ", ".join(str(w) for w in written))
    if args.json:
        print(dumps({**result.to_json(), "files": [str(w) for w in written]}))
    return 0


def _refine_plan_options(args: argparse.Namespace) -> PlanOptions:
    """The planner's settings ``retarget refine`` builds the plan's problem with (``retarget plan``'s defaults,
    the model options, and the knot spacing, step and rest the plan file does not record)."""
    from retarget.planning.options import PlanOptions
    from retarget.planning.settings import given_servo_file

    return PlanOptions(knot_spacing=args.knot_spacing, dt=args.dt,
                       rest_after=None if args.rest_after < 0 else args.rest_after, modes=args.modes,
                       dt_train=args.dt_train, mesh_axial=args.mesh_axial, mesh_around=args.mesh_around,
                       reduced_file=args.reduced, use_cache=not args.no_cache,
                       servo_file=given_servo_file(args.servo, _params_file_settings(args.robot)),
                       allow_unverified_model=args.allow_unverified_model)
