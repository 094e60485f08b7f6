"""The ``retarget`` command.

Each subpackage owns its commands in a ``commands`` module that defines ``register(subparsers)`` (top-level
commands such as ``retarget simulate``) and/or ``register_check(subparsers)`` (validation commands under
``retarget check``). A handler is set with ``parser.set_defaults(func=...)`` and returns an exit code.
Command modules import heavy dependencies inside their handlers, so ``retarget --help`` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from retarget import __version__
from retarget.cliargs import resolve_legacy
from retarget.errors import RetargetError

#: Subpackages whose ``commands`` module is listed first in ``--help``; others follow alphabetically.
PREFERRED_ORDER: tuple[str, ...] = ("model", "motion", "sim", "planning", "fit", "mocap", "dynamixel", "ros")


def command_modules() -> list[str]:
    """``retarget.info`` plus every ``commands`` module one or two package levels down
    (``retarget.<pkg>.commands``, ``retarget.<pkg>.<sub>.commands``), found on disk without importing."""
    from pathlib import Path

    import retarget

    root = Path(retarget.__file__).parent
    found = sorted(p.relative_to(root).with_suffix("") for p in (*root.glob("*/commands.py"),
                                                                 *root.glob("*/*/commands.py")))

    def rank(rel: Path) -> tuple[int, str]:
        top = rel.parts[0]
        order = PREFERRED_ORDER.index(top) if top in PREFERRED_ORDER else len(PREFERRED_ORDER)
        return order, str(rel)

    return ["retarget.info"] + ["retarget." + ".".join(rel.parts) for rel in sorted(found, key=rank)]


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
        resolve_legacy(args)  # an old spelling (--robot R, a positional motion): rewritten, with a note
        return int(args.func(args) or 0)
    except RetargetError as exc:
        print(f"retarget: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("retarget: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
