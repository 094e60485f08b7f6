"""``retarget emulate-bus``: emulated Dynamixel X-series servos on a pseudo-terminal (the digital twin's bus)."""
from __future__ import annotations

import argparse


def _emulate_bus(args: argparse.Namespace) -> int:
    from retarget.dynamixel.emulator import run

    return run(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``retarget emulate-bus``."""
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
