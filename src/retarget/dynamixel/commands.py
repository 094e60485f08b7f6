"""``retarget emulate-bus`` (emulated servos on a pseudo-terminal) and ``retarget servos scan|setup|calibrate``
(hardware bring-up: docs/bringup.md)."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable


def _emulate_bus(args: argparse.Namespace) -> int:
    from retarget.dynamixel.emulator import run
    from retarget.twin.emulator import reduced_twin

    return run(args, twin=reduced_twin)


def _rates(text: str | None) -> tuple[int, ...]:
    from retarget.dynamixel.scan import SCAN_BAUD_RATES
    from retarget.errors import InputError

    if not text:
        return SCAN_BAUD_RATES
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"bad --baud {text!r}: comma-separated rates in bit/s, e.g. 57600,1000000") from None


def _say(args: argparse.Namespace) -> Callable[[str], None]:
    """Progress lines: to stderr with --json (stdout carries the JSON line), else to stdout."""
    stream = sys.stderr if getattr(args, "json", False) else sys.stdout
    return lambda line: print(line, file=stream, flush=True)


def _scan(args: argparse.Namespace) -> int:
    from retarget.dynamixel.scan import scan_bus

    say = _say(args)
    result = scan_bus(args.port, _rates(args.baud), latency_timer_ms=args.latency_ms, progress=say)
    for line in result.table():
        say(line)
    if not result.servos:
        say(f"no servo answered on {result.port} at {', '.join(map(str, result.baud_rates))} bit/s: check the "
            "servos' power, the cable and the port (docs/bringup.md)")
    if args.json:
        print(json.dumps(result.as_dict()), flush=True)
    return 0 if result.servos or result.collisions else 1


def _confirm(args: argparse.Namespace, question: str) -> bool:
    """--yes, or a person's answer on a terminal; refuses (InputError) on a pipe without --yes."""
    from retarget.errors import InputError

    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise InputError("nothing written: confirm with --yes (or --dry-run to only show the changes)")
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")


def _setup(args: argparse.Namespace) -> int:
    from retarget.dynamixel.commissioning import (
        SetupError,
        apply_setup,
        parse_assignments,
        plan_setup,
        robot_servos,
    )
    from retarget.dynamixel.scan import scan_bus

    say = _say(args)
    robot = robot_servos(args.robot)
    assign = parse_assignments(args.assign or [])
    scan = scan_bus(args.port, _rates(args.baud), latency_timer_ms=args.latency_ms, progress=say)
    plan = plan_setup(robot, scan, assign)
    for line in plan.lines():
        say(line)
    report: dict[str, object] = {"plan": plan.as_dict(), "applied": False}
    code = 0
    if plan.changes or plan.torque_off:
        if args.dry_run or not _confirm(args, f"write these {len(plan.changes)} change(s)?"):
            say("nothing written")
        else:
            try:
                done = apply_setup(plan, args.port, latency_timer_ms=args.latency_ms, progress=say)
                report.update(applied=True, done=[c.as_dict() for c in done.done])
            except SetupError as exc:
                report.update(done=[c.as_dict() for c in exc.done], error=str(exc))
                say(f"error: {exc}")
                code = 1
            if code == 0:
                # What the bus holds now, read again: the proof that it is as the params file says.
                after = scan_bus(args.port, (robot.baudrate,), latency_timer_ms=args.latency_ms)
                left = plan_setup(robot, after).changes
                report["bus"] = after.as_dict()
                report["remaining"] = [c.as_dict() for c in left]
                if left:
                    say("still different after setup: " + "; ".join(c.describe() for c in left))
                    code = 1
                else:
                    say(f"the bus is as {robot.params_file.name} says")
    if args.json:
        print(json.dumps(report), flush=True)
    return code


def _calibrate(args: argparse.Namespace) -> int:
    from retarget.dynamixel.bus import DynamixelBus
    from retarget.dynamixel.calibration import calibrate, write_calibration
    from retarget.dynamixel.commissioning import robot_servos
    from retarget.dynamixel.control_table import load_control_table
    from retarget.errors import InputError

    say = _say(args)
    robot = robot_servos(args.robot)
    directions = None
    if args.directions:
        try:
            directions = [int(d) for d in args.directions.split(",")]
        except ValueError:
            raise InputError(f"bad --directions {args.directions!r}: e.g. 1,-1,1") from None

    def ask(instruction: str) -> None:
        say(instruction)
        if args.yes and not args.guided:
            return
        say("Press Enter when done.")
        if sys.stdin.readline():
            return
        if args.guided:
            raise InputError("stdin closed before the joint was turned: --guided needs a person at the terminal")
        # Nobody to ask (stdin closed): the robot is taken as it stands, as with --yes.
        say("stdin closed: the robot is taken to stand in its zero pose now (as --yes)")

    baudrate = int(args.baud) if args.baud else robot.baudrate
    bus = DynamixelBus(args.port, [j.servo_id for j in robot.joints], baudrate=baudrate,
                       table=load_control_table(model=robot.model), latency_timer_ms=args.latency_ms)
    with bus:
        result = calibrate(robot, bus, ask, guided=args.guided, directions=directions)
    for joint, offset, direction in zip(result.joints, result.offsets, result.directions):
        say(f"  {joint}: offset {offset:+.5f} rad, direction {direction:+d}")
    for note in result.notes:
        say(f"note: {note}")
    write_calibration(robot.params_file, result, write=not args.dry_run)
    say(("would write" if args.dry_run else "wrote") + f" offsets and directions ({result.how}) to "
        f"{robot.params_file}; next: `retarget servos setup {args.robot} --port {args.port}` writes the position "
        "limits for them")
    if args.json:
        print(json.dumps({"robot": robot.robot, "params_file": str(robot.params_file), "written": not args.dry_run,
                          **result.as_dict()}), flush=True)
    return 0


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``retarget emulate-bus`` and ``retarget servos``."""
    from retarget.dynamixel.emulator import add_arguments

    parser = sub.add_parser(
        "emulate-bus",
        help="emulated Dynamixel servos (XM430-W210, XM540-W270) on a pseudo-terminal (fault injection via a Unix "
        "socket)",
        description="Serve emulated Dynamixel servos (Protocol 2.0; --model, default XM430-W210) on a pseudo-terminal "
        "until Ctrl-C/SIGTERM. "
        "Open --link with dynamixel_sdk; inject faults with retarget.dynamixel.emulator.send_control on "
        "the control socket (default LINK.ctl). See docs/dynamixel.md.",
    )
    add_arguments(parser)
    parser.set_defaults(func=_emulate_bus)

    servos = sub.add_parser(
        "servos", help="hardware bring-up: find the servos on a port, set them up as a robot's params file says, "
        "calibrate its joint offsets and directions (docs/bringup.md)",
        description="Hardware bring-up of a robot's Dynamixel servos (docs/bringup.md): scan, setup, calibrate.")
    servos.set_defaults(func=lambda _args: _usage(servos))
    commands = servos.add_subparsers(dest="servos_command", metavar="COMMAND")

    def common(p: argparse.ArgumentParser, baud_help: str) -> None:
        p.add_argument("--port", required=True, help="serial port, e.g. /dev/ttyUSB0 (or an emulated bus's link)")
        p.add_argument("--baud", default=None, help=baud_help)
        p.add_argument("--latency-ms", type=float, default=16.0,
                       help="the USB adapter's latency timer [ms] in reply timeouts (raise it on a loaded machine)")
        p.add_argument("--json", action="store_true", help="a JSON summary as the last line of stdout")

    scan = commands.add_parser(
        "scan", help="every servo on the port at every usual baud rate: ID, model, baud rate, firmware, gains, "
        "limits", description="Broadcast-ping the port at 57600, 1000000, 115200, 2000000, 3000000, 4000000 and "
        "9600 bit/s and read each servo's items (about 10 s; --baud to try fewer rates).")
    common(scan, "rates to try, comma-separated [bit/s] (default: all the usual ones, 57600 first)")
    scan.set_defaults(func=_scan)

    setup = commands.add_parser(
        "setup", help="write IDs, baud rate, gains and limits from a robot's params file (shows the changes first)",
        description="Scan the port, compare each servo with what the robot's params file and servo: section "
        "declare, print the changes and, confirmed (--yes, or a prompt on a terminal), write them: items first, "
        "then IDs, then baud rates, each read back. A servo not at its joint's ID is matched by --assign, else, when "
        "as many servos as joints are left, in ID order (the plan says so).")
    setup.add_argument("robot", help="robot name or description YAML")
    common(setup, "rates to scan, comma-separated [bit/s] (default: all the usual ones)")
    setup.add_argument("--assign", action="append", metavar="ID[@BAUD]=JOINT",
                       help="the joint a servo drives, e.g. 1@57600=spine_pitch (repeat or comma-separate)")
    setup.add_argument("--yes", action="store_true", help="write without asking")
    setup.add_argument("--dry-run", action="store_true", help="only show the changes")
    setup.set_defaults(func=_setup)

    cal = commands.add_parser(
        "calibrate", help="measure joint offsets (and directions) in the robot's zero pose, write them to its params "
        "file", description="Torque off, the robot put in its zero pose by hand, the servos' angles read: they are "
        "the joints' offsets. Directions: --directions, or --guided (each joint turned by hand in its positive "
        "direction), else the params file's. Writes offsets and directions into config/<robot>.params.yaml (comments "
        "kept). Then run setup again: it writes the position limits for the offsets.")
    cal.add_argument("robot", help="robot name or description YAML")
    common(cal, "the servos' rate [bit/s] (default: the params file's baudrate, else 1000000)")
    cal.add_argument("--guided", action="store_true", help="measure each joint's direction by a turn by hand")
    cal.add_argument("--directions", default=None, help="the directions, +1/-1 per joint in joint_names order")
    cal.add_argument("--yes", action="store_true", help="the robot already stands in its zero pose: do not wait "
                     "(a closed stdin means the same)")
    cal.add_argument("--dry-run", action="store_true", help="measure and show, write nothing")
    cal.set_defaults(func=_calibrate)
