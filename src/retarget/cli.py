"""The ``retarget`` command.

Each subpackage owns its commands in a ``commands`` module that defines ``register(subparsers)`` (top-level
commands such as ``retarget simulate``) and/or ``register_check(subparsers)`` (validation commands under
``retarget check``). A handler is set with ``parser.set_defaults(func=...)`` and returns an exit code.
Command modules import heavy dependencies inside their handlers, so ``retarget --help`` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from retarget import __version__
from retarget.errors import RetargetError

#: Subpackages whose ``commands`` module is listed first in ``--help``; others follow alphabetically.
PREFERRED_ORDER: tuple[str, ...] = ("model", "motion", "sim", "optimize", "fit", "mocap", "dynamixel", "ros")


def command_modules() -> list[str]:
    """``retarget.info`` plus every ``retarget.<subpackage>.commands`` module that exists."""
    import pkgutil

    import retarget

    found = [m.name for m in pkgutil.iter_modules(retarget.__path__) if m.ispkg]
    ordered = [p for p in PREFERRED_ORDER if p in found] + sorted(set(found) - set(PREFERRED_ORDER))
    names = ["retarget.info"]
    for pkg in ordered:
        if importlib.util.find_spec(f"retarget.{pkg}.commands") is not None:
            names.append(f"retarget.{pkg}.commands")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retarget",
        description="Make robot characters with flexible parts move like their animations: simulate, "
        "optimize motor trajectories against vibration, play them on Dynamixel servos, fit materials.",
    )
    parser.add_argument("--version", action="version", version=f"retarget {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = sub.add_parser(
        "check",
        help="validation runs against theory and reference simulations (JSON with --json)",
        description="Validation runs: each prints a report and, with --json, a JSON object as its last line.",
    )
    check_sub = check.add_subparsers(dest="check", metavar="CHECK")
    check.set_defaults(func=lambda args: _missing(check))
    for name in command_modules():
        module = importlib.import_module(name)
        if hasattr(module, "register"):
            module.register(sub)
        if hasattr(module, "register_check"):
            module.register_check(check_sub)
    return parser


def _missing(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        return _missing(parser)
    try:
        return int(args.func(args) or 0)
    except RetargetError as exc:
        print(f"retarget: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("retarget: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
