"""CLI: ``retarget fit``, ``retarget fit-servo``, ``retarget twin-test``, ``retarget fit-motion``, ``retarget check
fit``, ``retarget check fit-surrogate`` and ``retarget check replay``."""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict, TypeVar

from retarget.cliargs import add_robot
from retarget.progress import counting_bar

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from retarget.fit.design import BurstChoice, IdentificationDesign
    from retarget.fit.fitter import FitResult
    from retarget.fit.rig import StepTestRig
    from retarget.fit.simulators import BeamEngine, ServoBeamEngine, StepTestSimulator
    from retarget.model.servo import ServoParams
    from retarget.motion.motion import Motion

__all__ = ["read_servo_file", "register", "register_check"]

#: The acceptance sets of ``retarget check fit``: (E [Pa], α [1/s], β [s]).
CHECK_SETS: tuple[tuple[float, float, float], ...] = ((200e9, 0.5, 4e-5), (185e9, 1.0, 1e-4), (215e9, 0.3, 2e-4))

#: Ranges of ``retarget check fit --random``: E [Pa] uniform, α [1/s] and β [s] log-uniform.
RANDOM_RANGES: dict[str, tuple[float, float]] = {"youngs_modulus": (150e9, 220e9), "alpha": (0.1, 2.0),
                                                 "beta": (1e-5, 3e-4)}

#: Motions of the acceptance run, per robot (``<robot>/<name>``): the step test and the identification motion.
CHECK_MOTIONS = "step_30,ident_mode2"

#: Default weight of the recorded tip orientation in ``retarget fit`` (:attr:`FitOptions.orientation_weight`).
ORIENTATION_WEIGHT = 1.0

#: The default rig of ``twin-test``, ``fit-motion`` and ``check fit``: single_rod's rod on an XM540-W270
#: (docs/fit.md, "The fitting rig").
DEFAULT_RIG = "fit_rig"

_T = TypeVar("_T")
_N = TypeVar("_N", int, float)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``fit``, ``fit-servo``, ``twin-test`` and ``fit-motion`` to the top-level parser."""
    _register_fit(subparsers)
    _register_twin_test(subparsers)
    register_fit_servo(subparsers)
    _register_fit_motion(subparsers)


def _register_fit(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget fit``."""
    p = subparsers.add_parser(
        "fit",
        help="fit Young's modulus and Rayleigh damping of a rig's flexible part to recorded step tests",
        description="Align recorded tip motion (rosbag2 PoseStamped or Motive CSV) with a simulated step test of "
        "the rig and fit E, alpha, beta by bounded least squares; prints the values with uncertainties.",
    )
    add_robot(p, "rig params YAML or robot name (one motor, one flexible part, a tip body), e.g. fit_rig or "
              "single_rod")
    p.add_argument("--recording", required=True, action="append", metavar="BAG_OR_CSV",
                   help="recording (bag folder or Motive CSV); repeat to fit several recordings jointly")
    p.add_argument("--body", required=True,
                   help="tracked tip body (Motive asset name; bag topic /mocap/<body>/pose)")
    p.add_argument("--topic", default=None, help="PoseStamped topic in the bag (default /mocap/<body>/pose)")
    p.add_argument("--motion", action="append", default=None, metavar="MOTION",
                   help="motion played per recording (file or <robot>/<motion>; one for all or one per "
                   "--recording; default <robot>/step_30)")
    p.add_argument("--params", default=None, help="parameters to fit, comma-separated (default: "
                   "youngs_modulus,alpha,beta without those given to --fix)")
    p.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                   help="hold a parameter not fitted at VALUE [SI: Pa, 1/s, s], e.g. --fix alpha=0; repeatable "
                   "(default: the rig material's value)")
    p.add_argument("--orientation-weight", type=float, default=ORIENTATION_WEIGHT, metavar="W",
                   help="weight of the tip body's recorded orientation against its positions, both weighted by "
                   f"their noise (default {ORIENTATION_WEIGHT:g}; 0: positions only, for a rigid body whose "
                   "orientation is unreliable)")
    p.add_argument("--motion-start", action="append", type=float, default=None, metavar="S",
                   help="when the motion's command started, in seconds after the recording's first frame "
                   "(negative: before it; to within 50 ms); one for all or one per --recording (default: the start a "
                   "bag of retarget play --record stored, else found from the recording)")
    p.add_argument("--engine", default="auto", help="simulator: auto|beam|servo-beam|reduced|full (default auto: "
                   "reduced with --reduced, else beam; beam prescribes the shaft, servo-beam drives it through the "
                   "rig's servo loop)")
    p.add_argument("--reduced", default=None, metavar="FILE.npz",
                   help="reduced model of the rig (retarget reduce) for the reduced engine")
    p.add_argument("--dt", type=float, default=None, metavar="S", help="engine time step [s] (default: the "
                   "engine's, 0.001 for beam)")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="write measured vs simulated tip motion")
    p.add_argument("--write", action="store_true", help="write the fitted material to the materials file")
    p.add_argument("--materials", default=None, metavar="FILE", help="materials file for --write (default "
                   "materials.yaml next to the rig file, i.e. config/materials.yaml)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_fit)


def _register_twin_test(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget twin-test``."""
    q = subparsers.add_parser(
        "twin-test",
        help="record a simulated step test with known E, alpha, beta (plus mocap noise) to a bag",
        description="Rehearse material fitting without hardware: simulate the rig's step test with known "
        "parameters and write what OptiTrack would record (noise, occlusion, a Y-up mocap frame, a clock offset).",
    )
    add_robot(q, "rig params YAML or robot name", default=DEFAULT_RIG)
    q.add_argument("--motion", default=None, help="motion (default <robot>/step_30)")
    q.add_argument("--youngs-modulus", type=float, default=None, help="true E [Pa] (default: the rig's material)")
    q.add_argument("--alpha", type=float, default=None, help="true Rayleigh alpha [1/s] (default: the rig's)")
    q.add_argument("--beta", type=float, default=None, help="true Rayleigh beta [s] (default: the rig's)")
    q.add_argument("--noise", type=float, default=0.001, help="position noise std per axis [m] (default 0.001)")
    q.add_argument("--rotation-noise", type=float, default=0.005,
                   help="orientation noise std per axis [rad] (default 0.005)")
    q.add_argument("--lead", type=float, default=0.37, metavar="S",
                   help="capture starts this long before the motion [s] (default 0.37; negative: that long after "
                   "the motion started, a recording without rest at its start)")
    q.add_argument("--frame-rpy", default=None, metavar="R,P,Y",
                   help="a mocap frame of your own instead of --mocap-frame: the robot frame's roll, pitch, yaw in "
                   "the mocap frame [deg] (with --frame-xyz)")
    q.add_argument("--frame-xyz", default="0,0,0", metavar="X,Y,Z",
                   help="with --frame-rpy: the robot origin in the mocap frame [m] (default 0,0,0)")
    q.add_argument("--occlusion", type=float, default=0.0, help="probability a frame is untracked (default 0)")
    q.add_argument("--rate", type=float, default=120.0, help="capture rate [Hz] (default 120)")
    q.add_argument("--body", default="tip", help="mocap body name (default tip)")
    q.add_argument("--mocap-frame", default="yup", help="yup (Motive default) or identity")
    q.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    q.add_argument("--engine", default="auto", help="simulator: auto|beam|servo-beam|reduced|full (default auto)")
    q.add_argument("--reduced", default=None, metavar="FILE.npz", help="reduced model (retarget reduce)")
    q.add_argument("--dt", type=float, default=None, metavar="S", help="engine time step [s]")
    q.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="bag storage (default mcap)")
    q.add_argument("--out", required=True, metavar="BAG_OR_CSV",
                   help="bag folder to create (must not exist), or a .csv: a Motive CSV export (format 1.23, mm)")
    q.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    q.set_defaults(func=_twin_test)


def _register_fit_motion(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget fit-motion``."""
    m = subparsers.add_parser(
        "fit-motion",
        help="design the identification motion of a step-test rig (excites the second bending mode)",
        description="Write a keyframes motion that separates Rayleigh alpha from beta: a step, then short bursts of "
        "motor oscillations at the rig's second bending frequency (from its beam model) within the servo's speed "
        "limit, with ring-outs between (docs/fit.md). Optionally predict the 1-sigma of a fit with it.",
    )
    add_robot(m, "rig params YAML or robot name", default=DEFAULT_RIG)
    m.add_argument("--youngs-modulus", type=float, default=None,
                   help="E [Pa] for the mode frequencies (default: the rig's material; better: a value fitted "
                   "from a step test)")
    m.add_argument("--step-deg", type=float, default=30.0, help="step the bursts ride on [deg] (default 30)")
    m.add_argument("--cycles", type=int, default=4, help="oscillation cycles per burst (default 4)")
    m.add_argument("--bursts", type=int, default=None, help="bursts (default: the shipped design's, 8)")
    m.add_argument("--gap", type=float, default=None, metavar="S",
                   help="ring-out after each burst [s] (default: the shipped design's, 2.0)")
    m.add_argument("--hold", type=float, default=None, metavar="S",
                   help="hold at the step angle after the bursts (first-mode ring-out) [s] (default 3)")
    m.add_argument("--torque-fraction", type=float, default=None,
                   help="fraction of the stall torque the bursts' predicted peak load torque may reach (default "
                   "0.8); 0: set the amplitude by the speed limit alone")
    m.add_argument("--stall-torque", type=float, default=None, metavar="NM",
                   help="servo stall torque [N m] (default: the rig file's servo.stall_torque)")
    m.add_argument("--speed-fraction", type=float, default=0.9,
                   help="fraction of the servo speed limit to use (default 0.9)")
    m.add_argument("--max-velocity", type=float, default=None, metavar="RAD_S",
                   help="servo speed limit [rad/s] (default: the rig file's servo.max_velocity)")
    m.add_argument("--choose", action="store_true",
                   help="choose the number of bursts (and the ring-out among --gaps) from the predicted 1-sigma at "
                   "the 8 corners of E 150-220 GPa, alpha 0.1-2 1/s, beta 1e-5-3e-4 s (minutes)")
    m.add_argument("--target-std", type=float, default=0.03,
                   help="--choose: relative 1-sigma aimed at for alpha and beta (default 0.03)")
    m.add_argument("--max-duration", type=float, default=30.0, metavar="S",
                   help="--choose: longest motion allowed [s] (default 30)")
    m.add_argument("--candidates", default="2,4,8,16,24", metavar="N1,N2",
                   help="--choose: burst counts to try (default 2,4,8,16,24)")
    m.add_argument("--gaps", default=None, metavar="S1,S2", help="--choose: ring-outs to try [s] (default: --gap)")
    m.add_argument("--step-motion", default=None, metavar="MOTION",
                   help="the rig's step test, compared and predicted with (file or <robot>/<motion>; default "
                   "<robot>/step_30 when the library has it, else none: the motion alone)")
    m.add_argument("--out", default=None, metavar="FILE.yaml", help="keyframes file to write")
    m.add_argument("--predict", action="store_true",
                   help="also predict the fit's 1-sigma (Cramer-Rao) with step_30 + this motion at the rig's "
                   "material, 120 Hz, 1 mm and 0.005 rad noise")
    m.add_argument("--predict-engine", choices=("beam", "servo-beam"), default="beam",
                   help="--predict on: beam (the shaft follows the motion exactly, as the design assumes; default) "
                   "or servo-beam (the rig's servo loop turns the shaft: also prints the servo plant's modes and "
                   "how much of their damping is the part's)")
    m.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    m.set_defaults(func=_fit_motion)


def register_fit_servo(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget fit-servo``."""
    from retarget.fit.servo_fit import FIT_PARAMETERS, MAX_DURATION_S
    from retarget.fit.servo_fit import ServoFitOptions as D
    from retarget.planning.options import PlanOptions

    p = subparsers.add_parser(
        "fit-servo",
        help="identify a servo's position loop (kp, ki, kd, rotor inertia, friction) from a recorded step test",
        description="Simulate the robot driven by the recorded goal with candidate servo parameters and fit them "
        "to the recorded present position by bounded least squares (docs/fit.md, \"Servo identification\"). "
        "The recording: a CSV with the columns 'time [s]', 'goal [rad]', 'present [rad]', or a bag of `retarget "
        "play MOTION --record BAG --record-topics /joint_states /joint_commands`. Writes a servo file for "
        "`retarget plan --servo` and the robot config's servo: section; prints which parameters it held and why.",
    )
    p.add_argument("robot", help="robot or rig name, or params YAML (the load the servo carried)")
    p.add_argument("--recording", required=True, metavar="CSV_OR_BAG", help="the step test: CSV or rosbag2 bag")
    p.add_argument("--motor", default=None, metavar="NAME",
                   help="the motor tested (default: the robot's only motor); the servo file then holds it under "
                   "servo.motors.NAME")
    p.add_argument("--out", default=None, metavar="SERVO.yaml", help="servo file to write (atomically; nothing is "
                   "written on error)")
    p.add_argument("--params", default=None, metavar="P1,P2",
                   help=f"parameters to fit among {','.join(FIT_PARAMETERS)} (default: all but ki when the servo "
                   "has no integral action configured, and those given to --fix)")
    p.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                   help="hold a servo parameter at VALUE [SI], e.g. --fix coulomb_friction=0; repeatable")
    p.add_argument("--engine", choices=("auto", "reduced", "full"), default=D.engine,
                   help="load model: reduced (trained here from one full-FEM run of the step test), full, or auto "
                   "(reduced with flexible parts; default)")
    p.add_argument("--mesh-axial", type=int, default=PlanOptions.mesh_axial, metavar="N",
                   help=f"element layers along each generated part of the load model (default {PlanOptions.mesh_axial}: "
                   "the planner's training mesh; stiffness-calibrated)")
    p.add_argument("--mesh-around", type=int, default=PlanOptions.mesh_around, metavar="N",
                   help=f"corner nodes around each generated rod (default {PlanOptions.mesh_around})")
    p.add_argument("--dt", type=float, default=D.dt, metavar="S", help=f"simulation step [s] (default {D.dt:g})")
    p.add_argument("--modes", type=int, default=D.modes, help=f"reduced model modes per part (default {D.modes})")
    p.add_argument("--duration", type=float, default=MAX_DURATION_S, metavar="S",
                   help=f"fit at most this long after the step [s] (default {MAX_DURATION_S:g})")
    p.add_argument("--no-model-check", action="store_true",
                   help="skip the full-FEM simulation of the fitted servo (reduced engine)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_fit_servo)


def _fit_servo(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.fit.servo_fit import (
        TICK_RAD,
        ServoFitOptions,
        fit_servo,
        parse_servo_fixed,
        prepare_step_test,
        servo_section,
    )
    from retarget.fit.servo_recording import read_servo_recording
    from retarget.jsonsafe import dumps
    from retarget.model.library import resolve_robot
    from retarget.model.servo_file import robot_servos, write_servo_file
    from retarget.sim.reduced.store import load_model

    if not (args.dt > 0 and args.duration > 0 and args.mesh_axial > 0 and args.mesh_around > 2 and args.modes > 0):
        raise InputError("--dt, --duration, --mesh-axial and --modes must be positive, --mesh-around at least 3")
    fixed = parse_servo_fixed(args.fix)
    params = None
    if args.params is not None:
        params = tuple(p.strip() for p in args.params.split(",") if p.strip())
    path = resolve_robot(args.robot)
    motors, _ = robot_servos(path)  # the motors, before any mesh work
    if args.motor is not None and args.motor not in motors:
        raise InputError(f"--motor {args.motor}: no such motor in {path.stem}; motors: {', '.join(motors)}")
    if args.motor is None and len(motors) != 1:
        raise InputError(f"{path.stem} has motors {', '.join(motors)}: name the one tested with --motor")
    motor = args.motor or motors[0]
    recording = read_servo_recording(args.recording, motor)
    if recording.motor is not None and recording.motor != motor:
        raise InputError(f"the recording is of joint {recording.motor!r}, the motor tested is {motor!r}")
    test = prepare_step_test(recording, args.duration)  # a bad recording is refused before the mesh is built
    print(f"recording {recording.source}: {recording.n_samples} samples"
          f"{f' ({recording.dropped} dropped)' if recording.dropped else ''}, goal step {test.step_rad:.4g} rad at "
          f"{test.onset_s:.3f} s, every {1e3 * test.sample_interval_s:.3g} ms", file=sys.stderr)
    model, _, _ = load_model(path, args.mesh_axial, args.mesh_around)
    options = ServoFitOptions(params=params, fixed=fixed, engine=args.engine, dt=args.dt, modes=args.modes,
                              max_duration=args.duration, check_model=not args.no_model_check)
    bar = counting_bar("fit-servo", "sim")
    try:
        result = fit_servo(model, recording, motor, options, progress=lambda: bar.update(1))
    finally:
        bar.close()
    units = {"kp": "N m/rad", "ki": "N m/(rad s)", "kd": "N m s/rad", "rotor_inertia": "kg m^2",
             "coulomb_friction": "N m", "viscous_friction": "N m s/rad", "kff1": "N m s/rad", "stall_torque": "N m",
             "max_velocity": "rad/s", "duty_limit": "-"}
    print(f"servo of {motor} on {model.name} ({result.servo.model}), {result.samples} samples, load model "
          f"{result.engine['name']}:")
    for name, unit in units.items():
        value = getattr(result.servo, name)
        if name in result.fitted:
            s = result.std.get(name)
            spread = f" ± {s:.2g}" if s is not None else " (at a bound)"
            print(f"  {name:17s} = {value:.6g}{spread} {unit}")
        else:
            print(f"  {name:17s} = {value:.6g} {unit}  ({result.held[name]})")
    shift_std = result.goal_shift_s[1]
    noise_ticks = result.noise_std_rad / TICK_RAD
    print(f"  residual RMS {result.residual_rms_rad / TICK_RAD:.2f} ticks (quantization {noise_ticks:.2f}); goal "
          f"timing {1e3 * result.goal_shift_s[0]:+.2f}"
          f"{f' ± {1e3 * shift_std:.2f}' if shift_std is not None else ''} ms; {result.evaluations} simulations, "
          f"{result.wall_s:.1f} s")
    if result.model_check_rad is not None:
        print(f"  full FEM at the fitted servo: {result.model_check_rad / TICK_RAD:.3f} ticks RMS from the reduced "
              "model")
    for text in result.warnings:
        print(f"  warning: {text}")
    summary = {"robot": model.name, **result.to_json()}
    if args.out:
        written = write_servo_file(args.out, servo_section(result, per_motor=args.motor is not None),
                                   comment=f"retarget fit-servo {model.name} --recording {args.recording}: the servo "
                                   f"of {motor} (SI); fitted {', '.join(result.fitted)}; held "
                                   f"{', '.join(result.held)}")
        summary["out"] = str(written)
        print(f"  wrote {written}")
    if args.json:
        print(dumps(summary))
    return 0


def register_check(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget check fit``."""
    p = subparsers.add_parser(
        "fit",
        help="twin round trip: recover known E, alpha, beta from noisy twin recordings",
        description="For each parameter set, record the step test and the identification motion with the twin "
        "(1 mm position noise, 0.005 rad orientation noise, 120 Hz), fit them jointly and compare with the truth "
        "(acceptance: E within 2 percent, alpha and beta within 10 percent). Minutes per set.",
    )
    add_robot(p, "rig params YAML or robot name", default=DEFAULT_RIG)
    p.add_argument("--noise", type=float, default=0.001, help="position noise std [m] (default 0.001)")
    p.add_argument("--sets", type=int, default=len(CHECK_SETS), help=f"how many of the {len(CHECK_SETS)} "
                   "built-in parameter sets to run")
    p.add_argument("--rate", type=float, default=120.0, help="capture rate [Hz] (default 120)")
    p.add_argument("--rotation-noise", type=float, default=0.005,
                   help="orientation noise std [rad] (default 0.005)")
    p.add_argument("--repeats", type=int, default=1, help="recordings of each step test per set (default 1)")
    p.add_argument("--motions", default=CHECK_MOTIONS, metavar="M1,M2",
                   help=f"motions recorded per set, <robot>/<name> or files (default {CHECK_MOTIONS})")
    p.add_argument("--set", action="append", default=None, metavar="E,ALPHA,BETA", dest="true_sets",
                   help="a true parameter set [Pa, 1/s, s] instead of the built-in ones; repeatable")
    p.add_argument("--random", type=int, default=0, metavar="N",
                   help="add N sets drawn at random (E 150-220 GPa, alpha 0.1-2 1/s, beta 1e-5-3e-4 s, the "
                   "damping log-uniform)")
    p.add_argument("--random-seed", type=int, default=0, help="seed of --random (default 0)")
    p.add_argument("--engine", default="auto", help="simulator (default auto)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_check_fit)
    register_surrogate_check(subparsers)
    register_replay_check(subparsers)


def _motion(name: str | None, robot_name: str) -> Motion:
    """The motion ``name`` (file or library name), by default the library's ``<robot>/step_30``.

    Raises:
        InputError: No name and no ``<robot>/step_30`` in the library (a rig of your own: give the motion played).
    """
    from retarget.errors import InputError
    from retarget.model.library import UnknownNameError, resolve_motion
    from retarget.motion import load_motion

    if name is None:
        try:
            return load_motion(resolve_motion(f"{robot_name}/step_30"))
        except UnknownNameError:
            raise InputError(f"the motion library has no {robot_name}/step_30: give the motion the rig played with "
                             "--motion FILE") from None
    return load_motion(resolve_motion(name))


def _step_motion(name: str | None, robot_name: str) -> Motion | None:
    """The step test ``name``, else the library's ``<robot>/step_30``, else None (a rig outside the library)."""
    from retarget.model.library import UnknownNameError, resolve_motion
    from retarget.motion import load_motion

    if name is not None:
        return _motion(name, robot_name)
    try:
        path = resolve_motion(f"{robot_name}/step_30")
    except UnknownNameError:
        return None
    return load_motion(path)


def _fmt(value: float, std: float | None, unit: str, scale: float = 1.0) -> str:
    text = f"{value / scale:.6g}"
    if std is not None:
        text += f" ± {std / scale:.2g}"
    return f"{text} {unit}"


def _fit(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.fit.fitter import (
        PARAMETERS,
        FitCase,
        FitOptions,
        check_fixed,
        fit_materials,
        parse_fixed,
        parse_params,
    )
    from retarget.fit.materials_file import default_materials_path, update_materials_file
    from retarget.fit.recording import read_recording
    from retarget.fit.rig import load_rig
    from retarget.fit.simulators import make_simulator

    fixed = parse_fixed(args.fix)
    if args.params is None:
        params = tuple(p for p in PARAMETERS if p not in fixed)
        if not params:
            raise InputError("every parameter is given to --fix: nothing to fit")
    else:
        params = parse_params(args.params)
    check_fixed(fixed, params)
    if not (math.isfinite(args.orientation_weight) and args.orientation_weight >= 0):
        raise InputError(f"--orientation-weight must be >= 0 (0: positions only), got {args.orientation_weight}")
    rig = load_rig(args.robot)
    motions = _per_recording(args.motion or [None], "--motion", len(args.recording))
    starts = _per_recording(args.motion_start or [None], "--motion-start", len(args.recording))
    simulator = make_simulator(args.engine, rig, args.dt, reduced=args.reduced)
    played = [_motion(m, rig.name) for m in motions]
    cases = [FitCase(read_recording(path, args.body, args.topic), motion, str(path), start)
             for path, motion, start in zip(args.recording, played, starts)]
    for case in cases:
        if case.motion_start_s is None and case.start_s is not None:
            print(f"{case.label}: the motion started {case.start_s:.3f} s after its first frame (stored by "
                  "retarget play --record; --motion-start to give another)", file=sys.stderr)
    bar = counting_bar("fit", "sim")
    try:
        result = fit_materials(simulator, cases, FitOptions(params=params, fixed=fixed,
                                                            orientation_weight=args.orientation_weight),
                               progress=lambda: bar.update(1))
    finally:
        bar.close()
    v, s = result.values, result.std
    engine = getattr(simulator, "name", args.engine)
    print(f"rig {rig.name}: material {rig.material_name!r} of part {rig.part!r}, engine {engine}, "
          f"{len(cases)} recording(s)")
    servo = getattr(simulator, "servo_assumption", "")  # engines that prescribe or model the shaft say which
    if servo:
        print(f"  servo: {servo}")
    units = {"youngs_modulus": ("GPa", 1e9), "alpha": ("1/s", 1.0), "beta": ("s", 1.0)}
    for name in PARAMETERS:
        unit, scale = units[name]
        how = ("" if name in result.fitted else
               "  (held: --fix)" if name in fixed else "  (held: the rig material's value; --fix to choose)")
        print(f"  {name:14s} = {_fmt(v[name], s.get(name), unit, scale)}{how}")
    print(f"  fitted {', '.join(result.fitted)}; residual RMS {1e3 * result.residual_rms_m:.3f} mm "
          f"(noise at rest {1e3 * result.noise_std_m:.3f} mm); {result.iterations} iterations, "
          f"{result.evaluations} simulations, {result.wall_s:.1f} s")
    _print_orientation(result, args.orientation_weight, len(cases))
    _print_fit_warnings(result, units)
    summary = {"robot": rig.name, "material": rig.material_name, "engine": engine,
               "servo": servo or None, **result.to_dict()}
    if args.plot:
        from retarget.fit.plot import plot_fit

        summary["plot"] = str(plot_fit(result, args.plot))
        print(f"  plot: {args.plot}")
    if args.write:
        target = args.materials or default_materials_path(rig.path)
        written = update_materials_file(
            target, rig.material_name, {p: v[p] for p in result.fitted},
            comment=f"fitted by retarget fit from {', '.join(args.recording)}")
        summary["materials_file"] = str(written)
        print(f"  wrote {rig.material_name} to {written}")
    if args.json:
        print(_dumps(summary))
    return 0


def _print_orientation(result: FitResult, weight: float, n_cases: int) -> None:
    """The fit report's line on the tip orientation: used or not, and a warning when it does not follow the model."""
    default = " (the default)" if weight == ORIENTATION_WEIGHT else ""
    n_used = sum(result.orientation_used)
    if weight == 0:
        print("  orientation: not used (--orientation-weight 0: positions only)")
    elif n_used == 0:
        print(f"  orientation: weight {weight:g}{default}, but no recording has a usable tip "
              "orientation: positions only")
    else:
        angle_noise = result.angle_noise_std_rad or float("nan")
        print(f"  orientation: used in {n_used} of {n_cases} recording(s), weight {weight:g}"
              f"{default} x noise ratio; angle residual RMS {1e3 * (result.angle_residual_rms_rad or 0.0):.2f} "
              f"mrad (angle noise {1e3 * angle_noise:.2f} mrad); --orientation-weight 0 fits positions only")
        if (result.angle_residual_rms_rad or 0.0) > ANGLE_MISMATCH * angle_noise:
            print(f"  warning: the recorded tip orientation does not follow the model (angle residual "
                  f"{result.angle_residual_rms_rad / angle_noise:.1f}x its noise): an unreliable rigid-body "
                  "orientation biases the damping; compare with --orientation-weight 0")


#: A fitted parameter whose 1σ is more than this fraction of its value is reported as not determined.
UNDETERMINED = 0.5


def _print_fit_warnings(result: FitResult, units: dict[str, tuple[str, float]]) -> None:
    """The fit report's warnings: a parameter at its bound, a parameter its 1σ does not determine, two fitted
    parameters strongly correlated."""
    for name in result.fitted:
        value, sd = result.values[name], result.std.get(name, float("nan"))
        if name not in result.at_bound and value > 0 and not sd <= UNDETERMINED * value:
            print(f"  warning: {name} is not determined by these recordings (1-sigma {100 * sd / value:.0f} % of "
                  f"its value): hold it with --fix {name}=VALUE, or add a recording that carries it (on a servo "
                  "plant the loop's damping can hide the part's: retarget fit-motion --predict --predict-engine "
                  "servo-beam)")
    for name, side in result.at_bound.items():
        lo, hi = result.bounds[name]
        unit, scale = units[name]
        print(f"  warning: {name} ended at its {side} bound ({(lo if side == 'lower' else hi) / scale:.3g} {unit}; "
              f"bounds {lo / scale:.3g}..{hi / scale:.3g} {unit}): not an estimate; the recordings push it "
              f"there or do not constrain it. Hold it with --fix {name}=VALUE, or add a recording that carries it")
    if len(result.fitted) > 1:
        c = result.correlation
        worst = max(((abs(c[i, j]), result.fitted[i], result.fitted[j]) for i in range(len(c))
                     for j in range(i + 1, len(c))), default=(0.0, "", ""))
        if worst[0] > 0.95:
            print(f"  warning: {worst[1]} and {worst[2]} are correlated ({worst[0]:.3f}): the recordings constrain "
                  "mainly a combination of them (see docs/fit.md)")


#: An angle residual this many times the angle noise flags an orientation that does not follow the model.
ANGLE_MISMATCH = 3.0


def _dumps(summary: Mapping[str, object]) -> str:
    """Strict JSON (never NaN or Infinity: such values are null)."""
    from retarget.jsonsafe import finite_or_none

    return json.dumps(finite_or_none(summary), allow_nan=False, default=float)


def _per_recording(values: list[_T], flag: str, n: int) -> list[_T]:
    """One value for all recordings or one per recording."""
    from retarget.errors import InputError

    if len(values) not in (1, n):
        raise InputError(f"give one {flag} for all recordings or one per recording ({n}), got {len(values)}")
    return values * n if len(values) == 1 else values


def _twin_test(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.fit.rig import load_rig
    from retarget.fit.simulators import make_simulator
    from retarget.fit.twin import record_twin_step_test

    rig = load_rig(args.robot)
    mat = rig.material
    e = mat.youngs_modulus if args.youngs_modulus is None else args.youngs_modulus
    a = mat.rayleigh_alpha if args.alpha is None else args.alpha
    b = mat.rayleigh_beta if args.beta is None else args.beta
    if not (e > 0 and a >= 0 and b >= 0 and args.noise >= 0 and args.rate > 0 and args.rotation_noise >= 0):
        raise InputError("need E > 0, alpha >= 0, beta >= 0, noise >= 0, rotation noise >= 0 and rate > 0")
    frame: str | tuple[NDArray[np.float64], list[float]] = args.mocap_frame
    if args.frame_rpy is not None:
        from scipy.spatial.transform import Rotation

        rpy = _numbers_signed(args.frame_rpy, "--frame-rpy")
        xyz = _numbers_signed(args.frame_xyz, "--frame-xyz")
        frame = (Rotation.from_euler("xyz", rpy, degrees=True).as_matrix(), xyz)
    simulator = make_simulator(args.engine, rig, args.dt, reduced=args.reduced)
    info = record_twin_step_test(simulator, _motion(args.motion, rig.name), args.out, e, a, b, body=args.body,
                                 noise_m=args.noise, rotation_noise_rad=args.rotation_noise,
                                 occlusion=args.occlusion, rate_hz=args.rate, lead_s=args.lead,
                                 mocap_frame=frame, seed=args.seed, storage=args.storage)
    engine = getattr(simulator, "name", args.engine)
    print(f"twin step test of {rig.name}: E = {e:.6g} Pa, alpha = {a:.6g} 1/s, beta = {b:.6g} s, engine {engine}; "
          f"{info.frames - info.occluded} of {info.frames} frames on {info.topic} -> {info.path}")
    servo = getattr(simulator, "servo_assumption", "")
    if servo:
        print(f"  servo: {servo}")
    if args.json:
        print(_dumps({"path": str(info.path), "topic": info.topic, "frames": info.frames, "engine": engine,
                      "servo": servo or None,
                      "occluded": info.occluded, "youngs_modulus": e, "alpha": a, "beta": b,
                      "noise_m": args.noise, "rotation_noise_rad": args.rotation_noise, "lead_s": info.lead_s}))
    return 0


def _numbers_signed(text: str, flag: str) -> list[float]:
    """Three comma-separated numbers (any sign)."""
    from retarget.errors import InputError

    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise InputError(f"{flag} {text!r}: expected three comma-separated numbers")
    return values


def check_sets(explicit: list[str] | None, n_builtin: int, n_random: int, seed: int
               ) -> list[tuple[float, float, float]]:
    """The true (E [Pa], α [1/s], β [s]) sets of ``retarget check fit``.

    Args:
        explicit: ``"E,ALPHA,BETA"`` strings (``--set``); when given, they replace the built-in sets.
        n_builtin: How many of :data:`CHECK_SETS` to use otherwise.
        n_random: Sets drawn from :data:`RANDOM_RANGES` and appended.
        seed: Seed of the random draw.

    Raises:
        InputError: A malformed or non-positive ``--set``.
    """
    import numpy as np

    from retarget.errors import InputError

    sets: list[tuple[float, float, float]] = []
    for text in explicit or []:
        try:
            e, a, b = (float(v) for v in text.split(","))
        except ValueError:
            raise InputError(f"--set {text!r}: expected three numbers E,ALPHA,BETA") from None
        if not (e > 0 and a > 0 and b > 0):
            raise InputError(f"--set {text!r}: E, alpha and beta must be positive")
        sets.append((e, a, b))
    if not explicit:
        sets.extend(CHECK_SETS[: max(0, n_builtin)])
    rng = np.random.default_rng(seed)
    for _ in range(max(0, n_random)):
        e = rng.uniform(*RANDOM_RANGES["youngs_modulus"])
        a = float(np.exp(rng.uniform(*np.log(RANDOM_RANGES["alpha"]))))
        b = float(np.exp(rng.uniform(*np.log(RANDOM_RANGES["beta"]))))
        sets.append((float(f"{e:.4g}"), float(f"{a:.3g}"), float(f"{b:.3g}")))
    if not sets:
        raise InputError("no parameter sets to check (--sets 0 and no --set or --random)")
    return sets


def _check_fit(args: argparse.Namespace) -> int:
    import os
    import tempfile
    import time

    from retarget.fit.fitter import FitCase, fit_materials
    from retarget.fit.recording import read_recording
    from retarget.fit.rig import load_rig
    from retarget.fit.simulators import make_simulator
    from retarget.fit.twin import record_twin_step_test

    rig = load_rig(args.robot)
    simulator = make_simulator(args.engine, rig)
    names = [m.strip() for m in args.motions.split(",") if m.strip()]
    motions = [m if ("/" in m or m.endswith((".yaml", ".csv", ".json"))) else f"{rig.name}/{m}" for m in names]
    loaded = {m: _motion(m, rig.name) for m in motions}
    sets = check_sets(args.true_sets, args.sets, args.random, args.random_seed)
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for k, (e, a, b) in enumerate(sets):
            cases = []
            for j, name in enumerate(motions * max(1, args.repeats)):
                motion = loaded[name]
                out = os.path.join(tmp, f"set{k}_{j}")
                record_twin_step_test(simulator, motion, out, e, a, b, noise_m=args.noise,
                                      rotation_noise_rad=args.rotation_noise, rate_hz=args.rate, seed=100 * k + j)
                cases.append(FitCase(read_recording(out, "tip"), motion, name))
            bar = counting_bar(f"set {k + 1}", "sim")
            try:
                res = fit_materials(simulator, cases, progress=lambda: bar.update(1))
            finally:
                bar.close()
            truth = {"youngs_modulus": e, "alpha": a, "beta": b}
            err = {p: res.values[p] / truth[p] - 1.0 for p in truth}
            rel_std = {p: res.std[p] / res.values[p] for p in res.std}
            ok = abs(err["youngs_modulus"]) <= 0.02 and abs(err["alpha"]) <= 0.10 and abs(err["beta"]) <= 0.10
            rows.append({"truth": truth, "fitted": {p: res.values[p] for p in truth},
                         "std": res.std, "relative_std": rel_std, "relative_error": err,
                         "residual_rms_m": res.residual_rms_m,
                         "correlation_alpha_beta": float(res.correlation[1, 2]), "simulations": res.evaluations,
                         "wall_s": res.wall_s, "pass": ok})
            print(f"set {k + 1} (E {e / 1e9:.1f} GPa, alpha {a:.3g} 1/s, beta {b:.3g} s): "
                  f"E {100 * err['youngs_modulus']:+.3f} %, alpha {100 * err['alpha']:+.2f} % "
                  f"(±{100 * rel_std['alpha']:.1f} %), beta {100 * err['beta']:+.2f} % "
                  f"(±{100 * rel_std['beta']:.1f} %), residual {1e3 * res.residual_rms_m:.3f} mm, "
                  f"{res.wall_s:.0f} s -> {'PASS' if ok else 'FAIL'}", flush=True)
    last = rows[-1]
    summary = {"robot": rig.name, "engine": getattr(simulator, "name", args.engine), "noise_m": args.noise,
               "rotation_noise_rad": args.rotation_noise, "rate_hz": args.rate, "repeats": args.repeats,
               "motions": motions, "sets": rows, "all_pass": all(r["pass"] for r in rows),
               "worst_relative_error": {p: max(abs(r["relative_error"][p]) for r in rows)
                                        for p in ("youngs_modulus", "alpha", "beta")},
               "youngs_modulus": last["fitted"]["youngs_modulus"], "alpha": last["fitted"]["alpha"],
               "beta": last["fitted"]["beta"], "residual_rms_m": last["residual_rms_m"],
               "wall_s": time.perf_counter() - t0,
               "threads": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}}
    if args.json:
        print(_dumps(summary))
    return 0 if summary["all_pass"] else 1


def _fit_motion(args: argparse.Namespace) -> int:
    import math
    from pathlib import Path

    from retarget.fit.design import (
        DEFAULT_BURSTS,
        DEFAULT_GAP_S,
        DEFAULT_HOLD_S,
        TORQUE_FRACTION,
        design_identification_motion,
    )
    from retarget.fit.rig import load_rig

    rig = load_rig(args.robot)
    step_motion = _step_motion(args.step_motion, rig.name)
    fraction = TORQUE_FRACTION if args.torque_fraction is None else args.torque_fraction
    gap = DEFAULT_GAP_S if args.gap is None else args.gap
    kwargs: _DesignArgs = dict(
        youngs_modulus=args.youngs_modulus, step_deg=args.step_deg, cycles=args.cycles,
        speed_fraction=args.speed_fraction, max_velocity=args.max_velocity,
        torque_fraction=fraction if fraction > 0 else None, stall_torque=args.stall_torque,
        hold_s=DEFAULT_HOLD_S if args.hold is None else args.hold)
    choice = None
    if args.choose:
        choice = _chosen_design(args, rig, step_motion, gap, kwargs)
        design = choice.design
    else:
        design = design_identification_motion(rig, bursts=DEFAULT_BURSTS if args.bursts is None else args.bursts,
                                              gap_s=gap, **kwargs)
    f1, f2 = design.frequencies_hz
    then = (f", then a {math.degrees(design.step_rad):.0f} deg step in {design.step_ramp_s:.3f} s" if design.step_rad
            else "")
    print(f"identification motion for {rig.name}: f1 = {f1:.3f} Hz, f2 = {f2:.2f} Hz at E = "
          f"{design.youngs_modulus / 1e9:.1f} GPa; {design.bursts} x {design.cycles} cycles of "
          f"±{math.degrees(design.amplitude_rad):.3f} deg about the rest angle{then}; peak "
          f"{design.peak_rate_rad_s:.2f} rad/s (limit {design.max_velocity:.2f}); {design.duration_s:.2f} s")
    ticks = _print_torque_bounds(design)
    summary: dict[str, object] = {
        "robot": rig.name, "youngs_modulus": design.youngs_modulus,
        "frequencies_hz": list(design.frequencies_hz), "amplitude_rad": design.amplitude_rad,
        "step_rad": design.step_rad, "cycles": design.cycles, "bursts": design.bursts,
        "peak_rate_rad_s": design.peak_rate_rad_s, "max_velocity": design.max_velocity,
        "duration_s": design.duration_s, "burst_torque_nm": design.burst_torque_nm,
        "torque_limit_nm": design.torque_limit_nm,
        "torque_damping": list(design.torque_damping), "amplitude_ticks": ticks,
        "step_ramp_s": design.step_ramp_s, "step_torque_nm": design.step_torque_nm}
    if choice is not None:
        summary["choice"] = {"target_std": choice.target_std, "met": choice.met, "rows": choice.rows}
    from retarget.fit.simulators import BeamEngine

    mat = rig.material
    values = (mat.youngs_modulus, mat.rayleigh_alpha, mat.rayleigh_beta)
    engine = BeamEngine(rig)
    summary["peak_load_torque_nm"] = _print_load_torques(engine, values, design, step_motion)
    summary["stall_torque_nm"] = design.stall_torque_nm
    if args.out:
        from retarget.fit.design import write_identification_motion

        path = write_identification_motion(design, Path(args.out))
        summary["path"] = str(path)
        print(f"  wrote {path}")
    if args.predict:
        predictor: StepTestSimulator = engine
        if args.predict_engine == "servo-beam":
            from retarget.fit.simulators import ServoBeamEngine

            predictor = ServoBeamEngine(rig)
            summary["servo_modes"] = _print_servo_modes(predictor, _predicted_at(values, design))
        summary["predict_engine"] = predictor.name
        summary["predicted"] = _predicted(predictor, values, design, step_motion)
    if args.json:
        print(_dumps(summary))
    return 0


class _DesignArgs(TypedDict):
    """The keyword arguments of ``fit-motion`` for :func:`retarget.fit.design.design_identification_motion`."""

    youngs_modulus: float | None
    step_deg: float
    cycles: int
    speed_fraction: float
    max_velocity: float | None
    torque_fraction: float | None
    stall_torque: float | None
    hold_s: float


def _chosen_design(args: argparse.Namespace, rig: StepTestRig, step_motion: Motion | None, gap: float,
                   kwargs: _DesignArgs) -> BurstChoice:
    """``fit-motion --choose``: the number of bursts (and the ring-out among ``--gaps``) from the predicted 1σ at
    the corners of the material ranges, each candidate printed."""
    import math

    from retarget.fit.design import choose_burst_count, material_corners

    candidates = _numbers(args.candidates, int, "--candidates")
    gaps = _numbers(args.gaps, float, "--gaps") if args.gaps else [gap]
    bar = counting_bar("predict", "prediction")
    try:
        choice = choose_burst_count(rig, [m for m in (step_motion,) if m is not None],
                                    target_std=args.target_std,
                                    max_duration_s=args.max_duration, candidates=candidates, gaps_s=gaps,
                                    progress=lambda: bar.update(1), **kwargs)
    finally:
        bar.close()
    print(f"choosing bursts: worst predicted 1-sigma over the {len(material_corners())} corners of the "
          f"material ranges (step_30 + the motion, 120 Hz, 1 mm, 0.005 rad), target {100 * args.target_std:g} %")
    for row in choice.rows:
        w = row["worst"]
        print(f"  {row['bursts']:3d} bursts, gap {row['gap_s']:.2f} s, {row['duration_s']:5.1f} s, "
              f"±{math.degrees(row['amplitude_rad']):.3f} deg: worst alpha {100 * w['alpha']:.2f} %, beta "
              f"{100 * w['beta']:.2f} % (hardest corner {_corner(row['worst_corner'])})"
              f"{'  <- chosen' if row.get('chosen') else ''}")
    if not choice.met:
        print(f"  target {100 * args.target_std:g} % not reached within {args.max_duration:g} s; chose the "
              "smallest worst case")
    return choice


def _print_torque_bounds(design: IdentificationDesign) -> float:
    """Print the design's load-torque bounds (and a warning for an amplitude below two position ticks); returns
    the burst amplitude in Dynamixel position ticks."""
    from retarget.dynamixel.control_table import POSITION_RAD_PER_TICK

    ticks = design.amplitude_rad / POSITION_RAD_PER_TICK
    stall_nm = design.stall_torque_nm  # the servo the design is for: --stall-torque overrides the rig file's
    if design.torque_limit_nm is not None:
        print(f"  bursts' load torque bound {design.burst_torque_nm:.2f} N m (limit {design.torque_limit_nm:.2f} N m "
              f"= {design.torque_limit_nm / stall_nm:.0%} of stall; any E in 150-220 GPa at alpha "
              f"{design.torque_damping[0]:g} 1/s, beta {design.torque_damping[1]:g} s)")
        if design.step_rad:
            print(f"  step's load torque {design.step_torque_nm:.2f} N m with {design.step_ramp_s:.3f} s ramps (same "
                  "limit, E and damping)")
    if ticks < 2.0:
        print(f"  warning: the burst amplitude is {ticks:.2f} position ticks of a Dynamixel (4096 per turn): a servo "
              "in position mode cannot render it faithfully (docs/fit.md)")
    return ticks


def _print_load_torques(engine: BeamEngine, values: tuple[float, float, float], design: IdentificationDesign,
                        step_motion: Motion | None) -> dict[str, float | None]:
    """The peak load torques [N m] of the step test and the identification motion in the beam model at the rig's
    material ``values`` (E, α, β), printed against the stall torque."""
    from retarget.fit.design import load_torque

    stall_nm = design.stall_torque_nm
    torques = {"step_30": None if step_motion is None
               else float(abs(load_torque(engine, *values, step_motion)[1]).max()),
               "identification": float(abs(load_torque(engine, *values, design.motion())[1]).max())}
    stall = "unknown" if stall_nm is None else f"{stall_nm:.2f} N m"
    step_text = "no step test (--step-motion)" if step_motion is None else f"step_30 {torques['step_30']:.1f} N m"
    print(f"  peak load torque (beam model, rod and tip only, rotor excluded): {step_text}, "
          f"this motion {torques['identification']:.1f} N m; servo stall torque {stall} (the twin drives the motor "
          "angle exactly, see docs/fit.md)")
    return torques


def _predicted_at(values: tuple[float, float, float], design: IdentificationDesign) -> tuple[float, float, float]:
    """The material a prediction is made at: the rig's, with the least damping of the design ranges when it has
    none (a prediction weighs log-parameters)."""
    return values if values[1] > 0 and values[2] > 0 else (values[0], *design.torque_damping)


def _print_servo_modes(engine: ServoBeamEngine, values: tuple[float, float, float]) -> list[dict[str, float]]:
    """``fit-motion --predict-engine servo-beam``: the servo plant's modes about the rest angle at ``values`` and
    the share of their damping ratios that the part's Rayleigh damping makes (the rest is the servo loop's)."""
    from dataclasses import replace

    import numpy as np

    plant = replace(engine.plant, youngs_modulus=values[0], alpha=values[1], beta=values[2])
    modes, bare = plant.modes(0.0), replace(plant, alpha=0.0, beta=0.0).modes(0.0)
    rows = []
    for k, (f, zeta) in enumerate(zip(modes.frequencies_hz, modes.damping_ratios)):
        # The same mode without the part's damping: the nearest in frequency (an overdamped one drops out).
        zeta0 = float(bare.damping_ratios[int(np.argmin(np.abs(bare.frequencies_hz - f)))])
        rows.append({"frequency_hz": float(f), "damping_ratio": float(zeta), "part_damping_ratio": float(zeta - zeta0)})
        print(f"  servo plant mode {k + 1}: {f:.2f} Hz, damping ratio {zeta:.4f}: the part's {zeta - zeta0:.4f}, "
              f"the servo loop's {zeta0:.4f}")
    return rows


def _predicted(engine: StepTestSimulator, values: tuple[float, float, float], design: IdentificationDesign,
               step_motion: Motion | None) -> dict[str, dict[str, object]]:
    """``fit-motion --predict``: the fit's predicted 1σ (Cramér–Rao) on ``engine`` with the step test, with it and
    this motion, or with this motion alone, printed; at the least damping of the design ranges when the rig's
    material has none."""
    from retarget.fit.design import predict_uncertainty

    predictions = {}
    if _predicted_at(values, design) != values:
        print(f"  the rig's material has alpha {values[1]:g} 1/s, beta {values[2]:g} s: "
              f"predicting at alpha {design.torque_damping[0]:g} 1/s, beta {design.torque_damping[1]:g} s")
        values = _predicted_at(values, design)
    if step_motion is not None:
        predictions["step_30"] = predict_uncertainty(engine, [step_motion], *values)
        predictions["step_30+motion"] = predict_uncertainty(engine, [step_motion, design.motion()], *values)
    else:
        predictions["motion"] = predict_uncertainty(engine, [design.motion()], *values)
    labels = {"step_30": "step_30 alone", "step_30+motion": "step_30 + this motion", "motion": "this motion"}
    for key, pred in predictions.items():
        r = pred.relative_std
        print(f"  predicted 1-sigma, {labels[key]}: E {100 * r['youngs_modulus']:.4f} %, alpha "
              f"{100 * r['alpha']:.2f} %, beta {100 * r['beta']:.2f} % (corr {pred.correlation[1, 2]:+.3f})")
    return {k: v.to_dict() for k, v in predictions.items()}


def _numbers(text: str, kind: type[_N], flag: str) -> list[_N]:
    from retarget.errors import InputError

    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected comma-separated numbers") from None
    if not values or min(values) <= 0:
        raise InputError(f"{flag} {text!r}: expected positive numbers")
    return values


def _corner(truth: Sequence[float]) -> str:
    e, a, b = truth
    return f"E {e / 1e9:.0f} GPa, alpha {a:g}, beta {b:g}"


def register_surrogate_check(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget check fit-surrogate`` (the beam surrogate against the full engine)."""
    p = subparsers.add_parser(
        "fit-surrogate",
        help="compare the fitter's beam surrogate with the full FEM engine on a step test",
        description="Simulate the start of a step test with the beam surrogate and with the full engine (coarse "
        "mesh) and report the tip difference and both first frequencies. Slow: minutes per simulated second.",
    )
    add_robot(p, "rig params YAML or robot name", default="single_rod")
    p.add_argument("--motion", default=None, help="motion (default <robot>/step_30)")
    p.add_argument("--duration", type=float, default=1.2, help="simulated time [s] (default 1.2)")
    p.add_argument("--axial", type=int, default=40, help="full engine: element layers along the rod (default 40)")
    p.add_argument("--around", type=int, default=6, help="full engine: nodes around the rod (default 6)")
    p.add_argument("--dt", type=float, default=1e-3, help="full engine step [s] (default 0.001)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_check_surrogate)


def _check_surrogate(args: argparse.Namespace) -> int:
    import os
    import time

    import numpy as np

    from retarget.fit.rig import load_rig
    from retarget.fit.simulators import BeamEngine, FullEngine

    rig = load_rig(args.robot)
    motion = _motion(args.motion, rig.name)
    mat = rig.material
    values = (mat.youngs_modulus, mat.rayleigh_alpha, mat.rayleigh_beta)
    t0 = time.perf_counter()
    beam = BeamEngine(rig).simulate(*values, motion)
    t_beam = time.perf_counter() - t0
    print(f"beam surrogate: {t_beam:.2f} s; full engine ({args.axial} x {args.around} mesh, dt {args.dt} s) "
          f"for {args.duration} s ...", file=sys.stderr)
    t0 = time.perf_counter()
    full = FullEngine(rig, dt=args.dt, store_every=1, resolution=(args.axial, args.around),
                      duration=args.duration).simulate(*values, motion)
    t_full = time.perf_counter() - t0
    diff = np.linalg.norm(beam.at(full.time_s) - full.position_m, axis=1)
    swing = np.linalg.norm(full.position_m - full.position_m[0], axis=1)
    freqs = BeamEngine(rig).model.natural_frequencies(mat.youngs_modulus)[:2]
    summary = {"robot": rig.name, "duration_s": args.duration, "mesh": [args.axial, args.around], "dt": args.dt,
               "beam_wall_s": t_beam, "full_wall_s": t_full,
               "tip_difference_rms_m": float(np.sqrt(np.mean(diff**2))),
               "tip_difference_max_m": float(diff.max()), "tip_excursion_max_m": float(swing.max()),
               "beam_frequencies_hz": [float(f) for f in freqs],
               "samples": {f"{t:.2f}": {"beam": beam.at(np.array([t]))[0].tolist(),
                                        "full": [float(np.interp(t, full.time_s, full.position_m[:, k]))
                                                 for k in range(3)]}
                           for t in np.linspace(0.0, args.duration, 7)},
               "threads": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}}
    print(f"tip difference beam vs full: RMS {1e3 * summary['tip_difference_rms_m']:.2f} mm, max "
          f"{1e3 * summary['tip_difference_max_m']:.2f} mm (tip excursion up to {1e3 * swing.max():.0f} mm)")
    if args.json:
        print(_dumps(summary))
    return 0


def register_replay_check(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget check replay`` (a plan and its naive input in the independent servo–beam plant)."""
    p = subparsers.add_parser(
        "replay",
        help="replay a plan and its input in an independent plant: a beam model with the Dynamixel loop",
        description="Plays the input motion (naive: its angles as the servo's goals) and a plan (the motion "
        "`retarget plan --out` writes) in the servo-beam plant of a single-rod robot: Euler-Bernoulli beam "
        "elements in the frame of the turning shaft, the shaft a degree of freedom driven by the Dynamixel position "
        "loop (re-implemented from its definition), the robot's geometry; not the model the plan was optimized "
        "on. Measures the tip's deviation from the intent (the quasi-static pose with the shaft at the input "
        "angle), peak and RMS, the ratio plan/naive, the peak servo error and torque. Seconds.",
    )
    p.add_argument("robot", help="a robot with one motor and one rod carrying a tip (single_rod, fit_rig, or a "
                   "config YAML)")
    p.add_argument("--motion", required=True, metavar="INPUT",
                   help="the input motion (file or <robot>/<motion>): the intent, and the naive goals")
    p.add_argument("--plan", required=True, metavar="PLAN.csv", help="the plan to replay (.csv, .json or .yaml)")
    p.add_argument("--servo", default=None, metavar="SERVO.yaml",
                   help="the servo: a YAML with a robot config's `servo:` keys (at the top or under `servo:`; "
                   "default: the robot's)")
    p.add_argument("--p-gain", type=float, default=None, metavar="P",
                   help="override the position P gain with this control-table value (800: factory; kp = P/128 x "
                   "4096/2pi / 885 x stall)")
    p.add_argument("--dt", type=float, default=1e-3, help="time step [s] (default 0.001)")
    p.add_argument("--tail", type=float, default=1.0,
                   help="time simulated after the later motion ends [s] (default 1)")
    p.add_argument("--elements", type=int, default=12, help="beam elements (default 12)")
    p.add_argument("--goal-period", type=float, default=0.0, metavar="S",
                   help="write the servo's goal every S seconds and hold it in between, as a bus does (0.01: the "
                   "trajectory server's and the driver's 100 Hz; default 0: a continuous goal)")
    p.add_argument("--goal-lead", type=float, default=0.0, metavar="S",
                   help="with --goal-period, each write takes the plan S seconds ahead (the driver's goal_lead: half "
                   "a period by default on the robot; default 0 here)")
    p.add_argument("--latency", type=float, default=0.0, metavar="S",
                   help="each goal reaches the servo S seconds after the plan's clock; the intent keeps its timing "
                   "(default 0)")
    p.add_argument("--stiffness-factor", type=float, default=1.0, metavar="F",
                   help="the plant's Young's modulus x F: a model error the plan did not see (default 1)")
    p.add_argument("--damping-factor", type=float, default=1.0, metavar="F",
                   help="the plant's Rayleigh damping x F (default 1)")
    p.add_argument("--tip-mass-factor", type=float, default=1.0, metavar="F",
                   help="the tip's mass and inertia x F (default 1)")
    p.add_argument("--intent-delay", type=float, default=0.0, metavar="S",
                   help="measure against the intent delayed by S seconds, the motion's timing set aside (--latency "
                   "plus half --goal-period: the delivery's mean delay; default 0: the authored timing)")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_check_replay)


def read_servo_file(path: str, motor: str) -> ServoParams:
    """The servo of ``motor`` from a YAML file holding a robot config's ``servo:`` keys (at the top level or under
    ``servo:``).

    Raises:
        InputError: Unreadable file, not a mapping, or invalid servo keys (:class:`ServoError`).
    """
    from pathlib import Path

    import yaml

    from retarget.errors import InputError
    from retarget.model.servo import servos_from_config

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"--servo {path}: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("servo"), dict):
        data = data["servo"]
    if not isinstance(data, dict):
        raise InputError(f"--servo {path}: expected a mapping of servo keys (model, kp, p_gain, stall_torque, ...)")
    return servos_from_config(data, [motor])[0]


def _check_replay(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.fit.replay import ACCEPTANCE_RATIO, replay
    from retarget.fit.rig import load_rig
    from retarget.model.servo import control_table_gains
    from retarget.motion import load_motion

    if args.elements < 2:
        raise InputError(f"--elements must be at least 2, got {args.elements}")
    rig = load_rig(args.robot)
    servo = read_servo_file(args.servo, rig.motor) if args.servo else rig.servo
    factors = (args.stiffness_factor, args.damping_factor, args.tip_mass_factor)
    rig = rig.scaled(*factors)
    if args.p_gain is not None:
        if not (args.p_gain > 0 and math.isfinite(args.p_gain)):
            raise InputError(f"--p-gain must be positive, got {args.p_gain}")
        if servo.ideal:
            raise InputError("--p-gain needs a modelled servo; this one is ideal")
        servo = servo.with_values(kp=control_table_gains(args.p_gain, 0.0, 0.0, servo.stall_torque)[0])
    input_motion = load_motion(args.motion)
    plan_motion = load_motion(args.plan)
    report = replay(rig, input_motion, plan_motion, servo=servo, dt=args.dt, tail=args.tail,
                    n_elements=args.elements, goal_period=args.goal_period, latency=args.latency,
                    intent_delay=args.intent_delay, goal_lead=args.goal_lead)
    print(f"{rig.name}: replay in the servo-beam plant ({report.n_elements} beam elements, trapezoidal rule, dt "
          f"{report.dt:g} s, {report.time_s[0]:.3f}-{report.time_s[-1]:.3f} s)")
    if report.goal_period or report.latency:
        print(f"  goals written every {1e3 * report.goal_period:g} ms, {1e3 * report.goal_lead:g} ms ahead, and "
              "held" if report.goal_period else "  goals continuous", end="")
        print(f", {1e3 * report.latency:g} ms after the plan's clock")
    if factors != (1.0, 1.0, 1.0):
        print(f"  the plant scaled: Young's modulus x {factors[0]:g}, damping x {factors[1]:g}, tip mass x "
              f"{factors[2]:g}")
    if report.intent_delay:
        print(f"  measured against the intent {1e3 * report.intent_delay:g} ms late (its timing set aside)")
    print(f"  servo {report.servo.describe()}")
    print(f"  {'':6s} {'peak':>9s} {'RMS':>9s} {'ring-out':>9s} {'servo error':>12s} {'torque':>17s} "
          f"{'clipped':>8s}")
    for run in (report.naive, report.plan):
        m = run.metrics
        torque = ("n/a (ideal)" if m.peak_torque_nm is None
                  else f"{m.peak_torque_nm:.3f} N m {m.peak_torque_ratio:.2f}x")
        print(f"  {run.name:6s} {1e3 * m.peak_deviation_m:6.2f} mm {1e3 * m.rms_deviation_m:6.2f} mm "
              f"{1e3 * m.ring_out_peak_m:6.2f} mm {math.degrees(m.peak_servo_error_rad):8.2f} deg "
              f"{torque:>17s} {m.clipped_s:6.3f} s")
    print(f"  plan / naive: peak {report.peak_ratio:.3f}, RMS {report.rms_ratio:.3f} (acceptance: peak ratio <= "
          f"{ACCEPTANCE_RATIO:g}: {'passes' if report.passes else 'does not pass'})")
    if args.json:
        out = report.to_dict()
        out.update(motion=str(args.motion), plan_file=str(args.plan), stiffness_factor=factors[0],
                   damping_factor=factors[1], tip_mass_factor=factors[2])
        print(_dumps(out))
    return 0
