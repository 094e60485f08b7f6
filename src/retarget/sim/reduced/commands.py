"""CLI: ``retarget reduce`` (build the artifact), ``retarget simulate-reduced`` and ``retarget check reduced``."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from retarget.cliargs import add_robot
from retarget.progress import progress_bar

# The model store's robot loader (used by `reduce`, `simulate-reduced`, `check reduced`; importable from here too).
from retarget.sim.reduced.store import load_robot_system

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from retarget.model.robot import RobotModel
    from retarget.sim.motors import MotorTrajectory
    from retarget.sim.reduced.basis import ReducedBasis
    from retarget.sim.reduced.cubature import Cubature
    from retarget.sim.reduced.engine import CompiledRun
    from retarget.sim.reduced.system import ReducedSystem
    from retarget.sim.result import SimulationResult
    from retarget.sim.system import RigidBody, System

__all__ = ["register", "register_check"]


def _add_basis_options(p: argparse.ArgumentParser) -> None:
    """--modes, --variance, --replay-tolerance, --cubature-tolerance, --modal-derivatives, --cubature-points: how the
    basis and cubature are chosen (shared by `reduce` and `check reduced`)."""
    from retarget.sim.reduced.defaults import (
        DEFAULT_CUBATURE_TOLERANCE,
        DEFAULT_MAX_REPLAY_TRIALS,
        DEFAULT_REPLAY_TOLERANCE,
        DEFAULT_VARIANCE,
    )

    p.add_argument("--modes", type=int, default=None,
                   help="at most N PCA deformation modes per component, fewer when the training run supports fewer "
                        "(default: by --variance)")
    p.add_argument("--variance", type=float, default=DEFAULT_VARIANCE, metavar="F",
                   help="smallest fraction of the mass-weighted snapshot variance the PCA modes capture, in (0, 1] "
                        f"(default {DEFAULT_VARIANCE:g}; ignored with --modes)")
    p.add_argument("--replay-tolerance", type=float, default=DEFAULT_REPLAY_TOLERANCE, metavar="F",
                   help="replay the training motion with the reduced model and tighten --variance tenfold until the "
                        "tracked bodies' RMS error is within F x their peak travel (default "
                        f"{DEFAULT_REPLAY_TOLERANCE:g}; 0: no replay check); with --modes the mode count stays and "
                        "only the cubature is tightened")
    p.add_argument("--max-replay-trials", type=int, default=DEFAULT_MAX_REPLAY_TRIALS, metavar="N",
                   help="build and replay at most N models in the replay check; when none is within "
                        "--replay-tolerance the most accurate is kept and the command says so (default "
                        f"{DEFAULT_MAX_REPLAY_TRIALS})")
    p.add_argument("--cubature-tolerance", type=float, default=DEFAULT_CUBATURE_TOLERANCE, metavar="F",
                   help="relative training error of the cubature (default "
                        f"{DEFAULT_CUBATURE_TOLERANCE:g}); once --variance has all the modes the snapshots support "
                        "(or with --modes) and the replay is still off, the replay check tightens it tenfold per "
                        "trial, to 1e-6")
    p.add_argument("--modal-derivatives", type=int, default=0, metavar="K",
                   help="append the modal derivatives of each component's first K PCA modes (K(K+1)/2 more modes): "
                        "may transfer better to motions that deform the parts more than the training motion; "
                        "measured both ways "
                        "(docs/reduced.md §4; default 0: none)")
    p.add_argument("--cubature-points", action="store_true",
                   help="train the cubature on single quadrature points of elements instead of whole 4-point "
                        "elements: each point costs a quarter of an element, 1.2-1.35 x as many are needed; "
                        "measured 1.15-1.9 x faster, the error mixed (docs/reduced.md §4; default: elements)")


def register_check(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reduced",
        help="train a reduced model on one motion, simulate another full and reduced, compare tracked bodies",
        description="Builds the reduced model (mass-PCA + cubature) from a full simulation of --train-motion, "
        "simulates --test-motion with both engines and prints the tracked-body errors and speeds. "
        "JSON keys: tracked_rms_error_rel (RMS of |x_reduced - x_full| over time and tracked bodies, divided by the "
        "full run's peak deviation from the quasi-static targets), tracked_max_error_m, modes (per component), "
        "full_steps_per_s, reduced_steps_per_s, speedup, sim_seconds, wall_s_reduced, and more.",
    )
    add_robot(p, "robot name (e.g. single_rod) or config YAML path")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--train-motion", metavar="M1", action="append",
                     help="motion name (robot/motion) or file; repeat to train on several motions")
    src.add_argument("--model", metavar="FILE.npz", default=None,
                     help="use this reduced model (from `retarget reduce` or --save-model) instead of training one")
    p.add_argument("--test-motion", required=True, metavar="M2", help="motion name (robot/motion) or file")
    _add_basis_options(p)
    p.add_argument("--dt", type=float, default=1e-3, help="time step [s] of both engines (default 0.001)")
    p.add_argument("--duration", type=float, default=None, help="cap on each motion's simulated time [s]")
    p.add_argument("--mesh-scale", type=float, default=None,
                   help="scale the flexible parts' axial element layers (as `retarget reduce`; 0.5: f1 +0.31 %%)")
    p.add_argument("--targets", type=int, default=80, help="quasi-static target samples over the test motion")
    p.add_argument("--save-model", default=None, metavar="FILE.npz",
                   help="also write the trained reduced model (as `retarget reduce --out`)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_check_reduced)


def _resolve(kind: str, name: str) -> Path:
    if Path(name).is_file():
        return Path(name)
    from retarget.model import library

    return library.resolve_robot(name) if kind == "robot" else library.resolve_motion(name)


def _validate(dt: float, modes: int | None = None, duration: float | None = None,
              variance: float | None = None, replay_tolerance: float | None = None,
              cubature_tolerance: float | None = None, modal_derivatives: int = 0) -> None:
    from retarget.errors import InputError

    if modal_derivatives < 0:
        raise InputError(f"--modal-derivatives must be non-negative, got {modal_derivatives}")
    if cubature_tolerance is not None and not 0.0 < cubature_tolerance < 1.0:
        raise InputError(f"--cubature-tolerance must be in (0, 1), got {cubature_tolerance}")
    if variance is not None and not 0.0 < variance <= 1.0:
        raise InputError(f"--variance must be in (0, 1], got {variance}")
    if replay_tolerance is not None and not replay_tolerance >= 0.0:
        raise InputError(f"--replay-tolerance must be non-negative, got {replay_tolerance}")
    if not dt > 0:
        raise InputError(f"--dt must be positive, got {dt}")
    if modes is not None and modes < 0:
        raise InputError(f"--modes must be non-negative, got {modes}")
    if duration is not None and not duration > 0:
        raise InputError(f"--duration must be positive, got {duration}")


def max_position_violation(run: CompiledRun, motors: MotorTrajectory) -> float:
    """Largest |C| [m] over a compiled reduced run's samples, on the rows measured in metres.

    Joint points, coupling centroids and prismatic offsets (the rows of ``retarget.sim.validation``'s full-form
    check, so both forms are judged alike). ``C`` is the λ block of the compiled residual at zero velocities,
    zero θ̇ and Baumgarte factor 1, where it reduces to ``C(U, θ)`` exactly.
    """
    import numpy as np

    from retarget.sim.bdf import StepInputs
    from retarget.sim.reduced.engine import pack_system, residual_compiled
    from retarget.sim.validation import position_rows

    rs = run.system
    packed = pack_system(rs)
    rows = position_rows(rs)  # the reduced system keeps the absolute system's blocks and λ layout
    if len(rows) == 0:
        return 0.0
    nu, nv = rs.n_u, rs.n_v
    zero_u = np.zeros(nu)
    worst = 0.0
    for k, t in enumerate(run.time):
        s = run.states[k].copy()
        s[nu : nu + nv] = 0.0
        inputs = StepInputs.static(zero_u, nv, np.atleast_1d(motors.value(float(t))))
        lin = residual_compiled(packed, s, inputs, jacobian=False)
        worst = max(worst, float(np.max(np.abs(lin.residual[nu + nv :][rows]))))
    return worst


def _component_report(
    names: list[str], bases: list[ReducedBasis], cubs: list[Cubature], replay: list[dict[str, object]]
) -> dict[str, object]:
    """The per-component entries of the ``check reduced`` report (modes, variance, cubature), in report order."""
    return {
        "components": names,
        "modes": {n: b.size - b.n_rigid for n, b in zip(names, bases)},
        "modes_total": {n: b.size for n, b in zip(names, bases)},
        "modal_derivatives": {n: b.n_derivatives for n, b in zip(names, bases)},
        "captured_variance": {n: b.captured_variance for n, b in zip(names, bases)},
        "replay_checks": replay,
        "cubature_elements": {n: int(len(c.elements)) for n, c in zip(names, cubs)},
        "cubature_points": {n: c.points is not None for n, c in zip(names, cubs)},
        "cubature_error": {n: c.relative_error for n, c in zip(names, cubs)},
    }


def _check_reduced(args: argparse.Namespace) -> int:
    import numpy as np

    from retarget.errors import InputError
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.artifact import load_reduced
    from retarget.sim.reduced.engine import simulate_compiled
    from retarget.sim.reduced.training import compare_tracked
    from retarget.sim.simulate import simulate

    _validate(args.dt, args.modes, args.duration, args.variance, args.replay_tolerance, args.cubature_tolerance,
              args.modal_derivatives)
    if args.model and (args.save_model or args.modes is not None or args.modal_derivatives or args.cubature_points):
        raise InputError("--model uses a trained reduced model: --save-model, --modes, --modal-derivatives and "
                         "--cubature-points apply to training only")
    path, model, system = load_robot_system(args.robot, args.mesh_scale)
    test, t_test = motors_from_motion(_resolve("motion", args.test_motion), model.motors)
    if args.duration is not None:
        t_test = min(t_test, args.duration)
    tracked = tracked_links(model, system.rigid)
    t_train, wall_train = None, 0.0
    t0 = time.perf_counter()
    replay: list[dict[str, object]] = []
    if args.model:
        rs = load_reduced(args.model, system, path)
        bases, cubs = [b.basis for b in rs.bodies], [b.cubature for b in rs.bodies]
    else:
        full_train, train, t_train = _simulate_training(system, model, args)
        wall_train = time.perf_counter() - t0
        t0 = time.perf_counter()
        rs, bases, cubs, replay, kept = _train(system, full_train, train, tracked, args)
        del full_train  # the snapshots are in the bases now; the test run needs the memory
    wall_build = time.perf_counter() - t0
    saved = None
    if args.save_model:
        saved = _save_model(args.save_model, system, bases, cubs, path, model.name, args.train_motion, args.dt, t_train,
                            args.mesh_scale, args.modes, kept, args.replay_tolerance, args.modal_derivatives,
                            print_model_card(model))
    t0 = time.perf_counter()
    # Only the rigid poses of the test run are compared: float32 displacements halve the memory.
    full_test = simulate(system, test, t_test, args.dt, compact=True, progress=progress_bar("full (test)"))
    wall_full = time.perf_counter() - t0
    # Two steps first: the timed run must not include numba's compilation (or loading its cache).
    simulate_compiled(rs, test, 2 * args.dt, args.dt)
    red_test = simulate_compiled(rs, test, t_test, args.dt, progress=progress_bar("reduced (test)"))
    wall_red = red_test.wall_s
    ranges = _training_range(rs, red_test)
    # Quasi-static targets at sampled times, interpolated to every stored sample.
    ts = np.linspace(0.0, t_test, max(2, args.targets))
    t0 = time.perf_counter()
    target_samples, dropped = _quasi_static_targets(system, test, full_test, ts, tracked)
    wall_targets = time.perf_counter() - t0
    targets = {n: np.stack([np.interp(full_test.time, ts, target_samples[n][:, k]) for k in range(3)], axis=1)
               for n in tracked}
    metrics = compare_tracked(full_test, red_test, tracked, targets)  # overall and per body ("tracked")
    n_steps = int(round(t_test / args.dt))
    names = [b.name for b in system.deformable]
    out = {
        "robot": model.name,
        "train_motion": _motion_label(args.train_motion),
        "model": args.model,
        "test_motion": args.test_motion,
        **metrics,
        **_component_report(names, bases, cubs, replay),
        "training_range_ratio": ranges,
        "full_dofs": system.n_deformable_dofs,
        "reduced_dofs": int(sum(b.size for b in bases)),
        "mesh_scale": args.mesh_scale,
        "full_steps_per_s": n_steps / wall_full,
        "reduced_steps_per_s": n_steps / wall_red,
        "speedup": wall_full / wall_red,
        "sim_seconds": t_test,
        "train_seconds": t_train,
        "dt": args.dt,
        "wall_s_reduced": wall_red,
        "wall_s_full": wall_full,
        "wall_s_train": wall_train,
        "wall_s_build": wall_build,
        "wall_s_targets": wall_targets,
        "targets": len(ts),
        "targets_dropped": dropped,
        "reduced_newton_iterations_mean": float(np.mean(red_test.newton_iterations[1:])),
        "reduced_factorizations": red_test.factorizations,
        "reduced_max_position_violation_m": max_position_violation(red_test, test),
        "model_file": saved,
        "engine": "compiled reduced engine (numba time loop, condensed chord Newton)",
    }
    print(
        f"{model.name}: modes {out['modes']}, tracked RMS error {100 * metrics['tracked_rms_error_rel']:.2f} % of the "
        f"peak deviation ({metrics['peak_deviation_m'] * 1e3:.2f} mm), max {metrics['tracked_max_error_m'] * 1e3:.3f} mm; "
        f"full {out['full_steps_per_s']:.1f} steps/s, reduced {out['reduced_steps_per_s']:.1f} steps/s "
        f"(x{out['speedup']:.1f})" + (f"; model written to {saved}" if saved else "")
    )
    if args.json:
        print(json.dumps(out, default=float))
    return 0


def _quasi_static_targets(system: System, motors: MotorTrajectory, full: SimulationResult, ts: NDArray[np.float64],
                          tracked: list[str]) -> tuple[dict[str, NDArray[np.float64]], int]:
    """Centres of mass of the ``tracked`` bodies at the gravity equilibria along the motion, (len(ts), 3) [m] each,
    with every motor's shaft at the motion's angle (a modelled servo's sag is not part of the intent).

    Each solve starts from the full dynamic run's state at the nearest stored sample (a few cm from the
    equilibrium), then from the previous equilibrium. A sample where both fail is dropped and filled by linear
    interpolation between its neighbours (the count is returned); the targets only scale the error metric.

    Returns:
        (targets per body (len(ts), 3) [m], number of dropped samples).

    Raises:
        NewtonFailed: every sample failed.
    """
    import numpy as np

    from retarget.model.servo import IDEAL, SERVO_MODELS
    from retarget.sim.errors import NewtonFailed
    from retarget.sim.statics import solve_static
    from retarget.sim.system import with_servos

    # The targets hold the shafts at the motion's angles (as the planner's): ideal servos for the static solves.
    system = with_servos(system, [SERVO_MODELS[IDEAL]] * len(system.motors))
    good: list[int] = []
    rows: dict[str, list[NDArray[np.float64]]] = {n: [] for n in tracked}
    bar = progress_bar("quasi-static targets")
    u_prev, last_error = None, None
    for j, t in enumerate(ts):
        k = int(np.argmin(np.abs(full.time - t)))
        dynamic = np.concatenate([full.rigid_poses[k].ravel(), np.asarray(full.displacements[k], dtype=float)])
        u = None
        for start in (dynamic, u_prev):
            if start is None:
                continue
            try:
                u = solve_static(system, motors.value(float(t)), u0=start).u
                break
            except NewtonFailed as exc:
                last_error = exc
        if u is not None:
            u_prev = u
            good.append(j)
            for n in tracked:
                i = system.rigid_index(n)
                rows[n].append(u[7 * i : 7 * i + 3])
        bar(j + 1, len(ts))
    if not good:
        assert last_error is not None
        raise last_error
    ts_good = np.asarray(ts)[good]
    out = {n: np.stack([np.interp(ts, ts_good, np.asarray(v)[:, c]) for c in range(3)], axis=1) for n, v in rows.items()}
    return out, len(ts) - len(good)


def _motion_label(motions: list[str] | None) -> str | list[str] | None:
    """The training motion(s) as recorded in JSON and artifacts: one name, or the list of several."""
    if motions is None or len(motions) != 1:
        return motions
    return motions[0]


def _simulate_training(system: System, model: RobotModel, args: argparse.Namespace
                       ) -> tuple[list[SimulationResult], list[MotorTrajectory], float | list[float]]:
    """Full simulations of every ``--train-motion`` (each capped at ``--duration``): (results, motors, durations —
    one number for one motion)."""
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.simulate import simulate

    drives = [motors_from_motion(_resolve("motion", name), model.motors) for name in args.train_motion]
    results, durations = [], []
    for k, (name, (motors, t_end)) in enumerate(zip(args.train_motion, drives)):
        if args.duration is not None:
            t_end = min(t_end, args.duration)
        label = "full (train)" if len(drives) == 1 else f"full (train {k + 1}/{len(drives)}: {name})"
        results.append(simulate(system, motors, t_end, args.dt, progress=progress_bar(label)))
        durations.append(t_end)
    return results, [m for m, _ in drives], durations[0] if len(durations) == 1 else durations


def _train(
    system: System, full: list[SimulationResult], motors: list[MotorTrajectory], tracked: list[str],
    args: argparse.Namespace,
) -> tuple[ReducedSystem, list[ReducedBasis], list[Cubature], list[dict[str, object]], dict[str, float | None]]:
    """(reduced system, bases, cubatures, replay trials as dicts, the kept ``variance`` and ``cubature_tolerance``)
    by --modes or --variance, checked by replaying the training motion (unless --replay-tolerance 0)."""
    from dataclasses import asdict

    from retarget.sim.reduced.training import build_checked_by_replay, build_from_result

    if args.replay_tolerance == 0:
        built = build_from_result(system, full, n_modes=args.modes, variance=args.variance,
                                  cubature_tolerance=args.cubature_tolerance, modal_derivatives=args.modal_derivatives,
                                  cubature_points=args.cubature_points)
        return (*built, [], {"variance": args.variance, "cubature_tolerance": args.cubature_tolerance})
    if not args.max_replay_trials > 0:
        from retarget.errors import InputError

        raise InputError(f"--max-replay-trials must be positive, got {args.max_replay_trials}")
    rs, bases, cubs, trials = build_checked_by_replay(system, full, motors, args.dt, tracked, variance=args.variance,
                                                      tolerance=args.replay_tolerance, n_modes=args.modes,
                                                      max_trials=args.max_replay_trials,
                                                      log=lambda m: print(m, file=sys.stderr, flush=True),
                                                      cubature_tolerance=args.cubature_tolerance,
                                                      modal_derivatives=args.modal_derivatives,
                                                      cubature_points=args.cubature_points)
    kept = next(t for t in trials if t.kept)
    if kept.error_rel > args.replay_tolerance:
        print(f"warning: the replay check did not pass: the kept model replays its training motion with "
              f"{100 * kept.error_rel:.3g} % of the peak travel (tolerance {100 * args.replay_tolerance:.3g} %) after "
              f"{len(trials)} trials; more --modes, a gentler or longer training motion, or --max-replay-trials",
              file=sys.stderr, flush=True)
    return rs, bases, cubs, [asdict(t) for t in trials], {"variance": kept.variance,
                                                          "cubature_tolerance": kept.cubature_tolerance}


def _training_range(rs: ReducedSystem, run: CompiledRun) -> dict[str, float]:
    """Each part's largest deformation in ``run`` over its largest training one; warns on stderr beyond the limit."""
    from retarget.sim.reduced.training import training_range, training_range_warning

    ratios = training_range(rs, run.coordinates)
    warning = training_range_warning(ratios)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return ratios


def _save_model(
    out: str, system: System, bases: list[ReducedBasis], cubs: list[Cubature], robot_yaml: Path, robot_name: str,
    train_motion: list[str], dt: float, duration: float | list[float], mesh_scale: float | None, modes: int | None,
    kept: dict[str, float | None], replay_tolerance: float, modal_derivatives: int = 0,
    model_card: dict[str, object] | None = None,
) -> str:
    """Write the artifact with the training settings `retarget reduce` records (``kept``: the variance and cubature
    tolerance of the model written; ``model_card``: the robot's card, stored in the meta); returns the path."""
    from retarget.sim.reduced.artifact import save_reduced

    by_variance = modes is None
    return str(save_reduced(out, system, bases, cubs, robot_yaml, robot_name, {
        "train_motion": _motion_label(train_motion), "dt": dt, "duration": duration, "mesh_scale": mesh_scale,
        "modes_cap": modes, "variance": kept["variance"] if by_variance else None,
        "replay_tolerance": replay_tolerance or None,
        "cubature_tolerance": kept["cubature_tolerance"], "modal_derivatives": modal_derivatives,
        "cubature_points": any(c.points is not None for c in cubs),
    }, model_card=model_card))


def print_model_card(model: RobotModel) -> dict[str, object]:
    """Print the robot's model card (:func:`retarget.fem.model_card.model_card`) and return it as a dict."""
    from retarget.fem.model_card import model_card

    card = model_card(model)
    print(card.format(), flush=True)
    return card.to_dict()


def tracked_links(model: RobotModel, rigid: tuple[RigidBody, ...]) -> list[str]:
    """The robot's tracked links, or its last rigid body when it names none (the bodies the checks compare)."""
    return [tb.link for tb in model.tracked_bodies] or [rigid[-1].name]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reduce",
        help="build a reduced model (mass-PCA bases + cubature) from a full simulation of a training motion",
    )
    p.add_argument("robot", help="robot name (e.g. single_rod) or config YAML path")
    p.add_argument("--train-motion", required=True, action="append",
                   help="motion name (robot/motion) or file; repeat to train on several motions (the bases and the "
                        "cubature see all of them, the replay check replays each)")
    _add_basis_options(p)
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
    _validate(args.dt, args.modes, args.duration, args.variance, args.replay_tolerance, args.cubature_tolerance,
              args.modal_derivatives)
    path, model, system = load_robot_system(args.robot, args.mesh_scale)
    card = print_model_card(model)
    t0 = time.perf_counter()
    full, motors, t_end = _simulate_training(system, model, args)
    wall_full = time.perf_counter() - t0
    tracked = tracked_links(model, system.rigid)
    _, bases, cubs, replay, kept = _train(system, full, motors, tracked, args)
    out = _save_model(args.out, system, bases, cubs, path, model.name, args.train_motion, args.dt, t_end,
                      args.mesh_scale, args.modes, kept, args.replay_tolerance, args.modal_derivatives, card)
    res = {
        "robot": model.name, "out": str(out), "modes": [b.size - b.n_rigid for b in bases],
        "modal_derivatives": [b.n_derivatives for b in bases],
        "captured_variance": [b.captured_variance for b in bases],
        "cubature_elements": [int(len(c.elements)) for c in cubs], "full_dofs": system.n_deformable_dofs,
        "wall_s_full": wall_full, "replay_checks": replay,
        "replay_passed": not replay or any(t["kept"] and t["error_rel"] <= args.replay_tolerance for t in replay),
    }
    print(f"{model.name}: wrote {out} (modes {res['modes']}, cubature elements {res['cubature_elements']})")
    if args.json:
        print(json.dumps(res, default=float))
    return 0


def _simulate_reduced(args: argparse.Namespace) -> int:
    import numpy as np

    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.artifact import load_reduced
    from retarget.sim.reduced.engine import simulate_compiled

    _validate(args.dt, None, args.duration)
    path, model, system = load_robot_system(args.robot, args.mesh_scale)
    rs = load_reduced(args.reduced, system, path)
    motors, t_end = motors_from_motion(_resolve("motion", args.motion), model.motors)
    if args.duration is not None:
        t_end = min(t_end, args.duration)
    run = simulate_compiled(rs, motors, t_end, args.dt, progress=progress_bar("reduced"))
    n = len(run.time) - 1
    ranges = _training_range(rs, run)
    if args.out:
        np.savez_compressed(args.out, time=run.time, rigid_poses=run.rigid_poses, z=run.coordinates,
                            bodies=np.array([b.name for b in rs.rigid]))
    res = {"robot": model.name, "sim_seconds": t_end, "dt": args.dt, "steps": n, "wall_s": run.wall_s,
           "steps_per_s": n / run.wall_s, "factorizations": run.factorizations,
           "newton_iterations_mean": float(np.mean(run.newton_iterations[1:])), "training_range_ratio": ranges,
           "out": args.out}
    print(f"{model.name}: {t_end:.3g} s in {run.wall_s:.2f} s wall ({res['steps_per_s']:.0f} steps/s)")
    if args.json:
        print(json.dumps(res, default=float))
    return 0
