"""``retarget up ROBOT``: start a robot's node set without ``ros2 launch`` (and the ``record`` / ``play`` / ``tune``
commands).

The set is the one ``launch/<robot>.launch.py`` starts: both come from :func:`retarget.ros.bringup.describe`.
"""
from __future__ import annotations

import argparse


def _up(args: argparse.Namespace) -> int:
    import json
    import os
    import signal
    import sys
    import time

    from retarget.ros.bringup import BringupError, Supervisor, describe
    from retarget.twin.perturbation import parse_perturbation

    perturb = parse_perturbation(args.perturb) if args.perturb is not None else None
    plan = describe(args.robot, hardware=args.hardware, planner=not args.no_planner, mocap=args.mocap,
                    namespace=args.namespace, twin=args.twin, reduced=args.reduced, baudrate=args.baud,
                    mocap_server=args.mocap_server, mocap_local=args.mocap_local, perturb=perturb,
                    verify_model=args.verify_model, twin_dt=args.twin_dt, twin_max_lag=args.twin_max_lag)
    # The emulated bus and its nodes all live on this machine: keep discovery on loopback unless the user
    # chose otherwise.
    if "ROS_AUTOMATIC_DISCOVERY_RANGE" not in os.environ and plan.emulated:
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    stop_requested: list[int] = []

    def _on_signal(signum: int, _frame: object) -> None:
        stop_requested.append(signum)

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    # Log lines go to stderr so that stdout carries only the summary (and the JSON line with --json).
    sink = (lambda line: print(line, file=sys.stderr, flush=True)) if not args.quiet else (lambda line: None)
    supervisor = Supervisor(plan, sink=sink, log_path=args.log)
    status: dict[str, object] = {"robot": plan.robot, "namespace": plan.namespace, "emulated": plan.emulated,
                                 "port": plan.port, "run_dir": str(plan.run_dir),
                                 "domain_id": os.environ.get("ROS_DOMAIN_ID", "0")}
    code = 0
    try:
        supervisor.start()
        waited = supervisor.wait_ready(args.ready_timeout)
        print(f"retarget up: {plan.robot} ready in {waited:.1f} s "
              f"({'emulated bus' if plan.emulated else 'servos on ' + plan.port}); Ctrl-C stops everything",
              flush=True)
        for line in plan.summary():
            print(f"  {line}", flush=True)
        print(f"  pids: {supervisor.pids}", flush=True)
        status.update(ready_s=round(waited, 3), pids=supervisor.pids,
                      follow_joint_trajectory=plan.follow_joint_trajectory_action,
                      retarget=plan.retarget_action, control_socket=str(plan.control_socket or ""))
        if args.json:
            print(json.dumps({**status, "state": "ready"}), flush=True)
        deadline = time.monotonic() + args.duration if args.duration > 0 else None
        while not stop_requested and (deadline is None or time.monotonic() < deadline):
            supervisor.check_alive()
            time.sleep(0.1)
    except BringupError as exc:
        print(f"retarget up: error: {exc}", file=sys.stderr, flush=True)
        status["error"] = str(exc).splitlines()[0]
        status["failed"] = exc.process
        code = 1
    finally:
        # A second Ctrl-C while stopping must not leave children behind: finish stopping first.
        for s in previous:
            signal.signal(s, _on_signal)
        killed = supervisor.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    reason = f"signal {signal.Signals(stop_requested[0]).name}" if stop_requested else (
        "duration elapsed" if code == 0 else "failure")
    # A child's exit code and output tell whether it stopped cleanly: a non-zero code, a signal, a kill or a
    # traceback (a node's thread may print one and the process still exit 0) make this run a failure.
    unclean = [e.describe() for e in supervisor.unclean_exits()]
    if unclean:
        code = code or 1
    print(f"retarget up: stopped ({reason}); " + ("; ".join(unclean) if unclean else "all processes exited cleanly"),
          flush=True)
    if args.json:
        print(json.dumps({**status, "state": "stopped", "killed": killed, "unclean": unclean, "reason": reason}),
              flush=True)
    return code


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``retarget up``, ``retarget record``, ``retarget play``, ``retarget tune``, ``retarget goal`` and
    ``retarget demo``."""
    from retarget.ros.bringup import MOCAP_SOURCES, TWIN_DYNAMICS
    from retarget.ros.goal import register_goal
    from retarget.ros.player import register_play
    from retarget.ros.record import register_record
    from retarget.ros.tune import register_tune

    register_record(sub)
    register_play(sub)
    register_tune(sub)
    register_goal(sub)
    _register_demo(sub)

    parser = sub.add_parser(
        "up",
        help="start a robot's ROS 2 nodes (driver on real servos or the emulated bus, trajectory server, "
        "planner, mocap) until Ctrl-C",
        description="Start the same node set as `ros2 launch retarget ROBOT.launch.py`, as child processes "
        "of this command: the emulated Dynamixel bus (unless --hardware), dynamixel_driver, "
        "trajectory_server, planner, mocap. Waits until the action servers answer and joint_states flow, "
        "prints what runs, forwards the logs (prefixed, to stderr) and stops everything on Ctrl-C/SIGTERM. "
        "Exits 1 if a node dies, naming it.",
    )
    parser.add_argument("robot", help="robot name (retarget robots) or path to its params YAML")
    parser.add_argument("--hardware", metavar="PORT", default="",
                        help="serial port of the real servos, e.g. /dev/ttyUSB0 (default: the emulated bus)")
    parser.add_argument("--baud", type=int, default=None, metavar="BIT_S",
                        help="the servos' baud rate: the driver's (and the emulated bus's) (default: the params "
                        "file's baudrate, else 1000000; `retarget servos setup` sets the servos to it)")
    parser.add_argument("--no-planner", action="store_true", help="do not start the planner node")
    parser.add_argument("--twin", choices=TWIN_DYNAMICS, default="servo",
                        help="emulated servo dynamics: servo (each servo's loop on its rotor alone), or reduced (the "
                        "servos' loops run in the robot's reduced simulation, which reports their shafts; the mocap "
                        "twin shows the flexible parts; docs/twin.md)")
    parser.add_argument("--reduced", default=None, metavar="FILE",
                        help="reduced model for --twin reduced and the planner (default: the planner uses one cached "
                        "or in the model folders, else the one shipped for the robot, else trains one on the first "
                        "goal; the twin the newest fresh model it finds)")
    parser.add_argument("--perturb", default=None, metavar="KEY=VALUE,...",
                        help="with --twin reduced: the twin differs from the model the planner uses, e.g. "
                        "stiffness=1.07,damping=1.5,servo_kp=1.3,latency=0.01,marker_noise=0.0003 (factors on the "
                        "parts' stiffness, their Rayleigh damping, the servos' P gain (servo_kd: D gain); the goals' "
                        "latency [s]; the mocap twin's noise [m]; docs/twin.md)")
    parser.add_argument("--twin-dt", type=float, default=None, metavar="S",
                        help="with --twin reduced: the simulation's step [s] (default 0.001)")
    parser.add_argument("--twin-max-lag", type=float, default=None, metavar="S",
                        help="with --twin reduced: how far the simulation may run behind the servos before it "
                        "restarts at rest [s] (default 5); the trajectory server's goal_time_tolerance is raised to "
                        "it")
    parser.add_argument("--verify-model", default=None, metavar="auto|full|none|FILE.npz",
                        help="the planner node's verify_model: the model its plans are verified in (default: the "
                        "params file's, else auto)")
    parser.add_argument("--mocap", choices=MOCAP_SOURCES, default="twin",
                        help="mocap node source: twin (simulated), natnet (OptiTrack Motive) or none")
    parser.add_argument("--mocap-server", default=None, metavar="ADDRESS",
                        help="with --mocap natnet: Motive's IP address (the mocap node's server_address; default "
                        "the params file's, else 127.0.0.1)")
    parser.add_argument("--mocap-local", default=None, metavar="ADDRESS",
                        help="with --mocap natnet: this machine's IP address on the mocap network (local_address)")
    parser.add_argument("--namespace", default="", help="ROS namespace of every node (e.g. /drummer)")
    parser.add_argument("--duration", type=float, default=0.0,
                        help="stop after this many seconds once ready [s] (default: run until Ctrl-C)")
    parser.add_argument("--ready-timeout", type=float, default=60.0, help="longest wait for readiness [s]")
    parser.add_argument("--log", type=_path, default=None,
                        help="also append every node's output to this file")
    parser.add_argument("--quiet", action="store_true", help="do not forward the nodes' output")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON line when ready and one when stopped (the last line)")
    parser.set_defaults(func=_up)


def _register_demo(sub: argparse._SubParsersAction) -> None:
    """Add ``retarget demo`` (what ``make demo`` runs; the same as ``python -m retarget.ros.demo``)."""
    from retarget.ros.demo import add_demo_arguments

    parser = sub.add_parser(
        "demo", help="the drummer retargeted end to end on the emulated bus (what `make demo` runs)",
        description="Find (or train once) the demo's reduced model, bring up the robot's nodes on the emulated "
        "Dynamixel bus, ask the planner for an optimized trajectory of the motion's first seconds, play it and "
        "print the tracking figures, then stop every process (docs/ros.md \"make demo\"). Exit 0 only if every "
        "step worked and every process stopped cleanly.")
    add_demo_arguments(parser)
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from retarget.ros.demo import demo_command

    return demo_command(args)


def _path(text: str) -> object:
    from pathlib import Path

    return Path(text)
