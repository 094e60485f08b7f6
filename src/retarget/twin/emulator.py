"""The emulated servo bus with the digital twin: ``python -m retarget.twin.emulator`` is
``python -m retarget.dynamixel.emulator`` whose ``--twin reduced`` runs the servos' loops in the reduced simulation
(:class:`~retarget.twin.servo.SimulationDrivenServos` with a twin worker process; docs/twin.md).

The twin builds on the emulator's servo loop, so the emulator is given :func:`reduced_twin` rather than importing
it.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from retarget.dynamixel.dynamics import ServoDynamics
from retarget.dynamixel.emulator import RobotBus
from retarget.dynamixel.emulator import main as emulator_main
from retarget.errors import InputError, RetargetError
from retarget.twin.model import find_reduced_model, robot_name
from retarget.twin.servo import (
    ChannelShafts,
    SimulationDrivenServos,
    joint_mapping,
    start_worker,
    stop_worker,
)

__all__ = ["main", "reduced_twin"]


def reduced_twin(args: argparse.Namespace, local: ServoDynamics,
                 robot: RobotBus | None) -> tuple[ServoDynamics, Callable[[], None]]:
    """``--twin reduced``: the servos' loops (``local``) driven by a twin worker process's reduced simulation, and
    a function that stops the worker. Without a reduced model (or without ``--robot``) one line on stderr says why
    and the servos' own loops run alone.
    """
    try:
        if robot is None:
            raise InputError("--twin reduced needs --robot")
        source = find_reduced_model(args.robot, args.reduced)
    except RetargetError as exc:
        print(f"twin: the servos' own loops only, no reduced simulation: {exc}", file=sys.stderr, flush=True)
        return local, lambda: None
    from retarget.model import library
    from retarget.model.loader import read_robot_yaml

    description = Path(args.robot) if Path(args.robot).is_file() else library.resolve_robot(args.robot)
    motors = [str(m) for m in read_robot_yaml(description).get("motors") or []]
    index, offset, direction = joint_mapping(robot.joints, motors, robot.offsets, robot.directions)
    channel = args.twin_channel or (f"{args.link}.poses" if args.link else f"/tmp/{robot_name(args.robot)}.poses")
    proc, sink = start_worker(args.robot, channel, source.path, dt=args.twin_dt, max_lag=args.twin_max_lag,
                              perturb=args.twin_perturb)
    print(f"twin: reduced simulation of {robot_name(args.robot)} ({source.describe()}) in worker pid {proc.pid}, "
          f"poses and servo shafts on {channel}", file=sys.stderr, flush=True)
    dynamics = SimulationDrivenServos(local, sink, ChannelShafts(channel, motors), index, offset, direction)
    return dynamics, lambda: stop_worker(proc)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m retarget.twin.emulator``: the emulator, with ``--twin reduced`` available."""
    return emulator_main(argv, twin=reduced_twin, prog="python -m retarget.twin.emulator")


if __name__ == "__main__":
    sys.exit(main())
