"""``retarget emulate-bus``: emulated XM430-W210 servos on a pseudo-terminal (the digital twin's bus)."""
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
        help="emulated Dynamixel XM430-W210 servos on a pseudo-terminal (fault injection via a Unix socket)",
        description="Serve emulated XM430-W210 servos (Protocol 2.0) on a pseudo-terminal until Ctrl-C/SIGTERM. "
        "Open --link with dynamixel_sdk; inject faults with retarget.dynamixel.emulator.send_control on "
        "the control socket (default LINK.ctl). See docs/dynamixel.md.",
    )
    add_arguments(parser)
    parser.set_defaults(func=_emulate_bus)
