"""One spelling for the arguments every ``retarget`` command shares: the robot is the first positional argument, the
motion is ``--motion``. Older spellings (``--robot R``, a positional motion) still parse; :func:`resolve_legacy`
rewrites them and says so on stderr (a deprecation note), so scripts keep working while they are updated.

No heavy imports here: ``retarget --help`` builds every parser.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable, Sequence

from retarget.errors import InputError

__all__ = ["add_motion", "add_robot", "parse_assignments", "resolve_legacy"]

#: ``args`` attribute of the per-command rewrite of an old spelling (``legacy(args) -> note or ""``).
_LEGACY = "legacy_form"


def add_robot(parser: argparse.ArgumentParser, help: str, default: str | None = None, required: bool = True) -> None:
    """The robot as the first positional argument (``default`` when not given; else required unless ``required``
    is false), and the old ``--robot R``, hidden from ``--help``, accepted with a deprecation note."""
    more = f" (default {default})" if default else ""
    parser.add_argument("robot", nargs="?", default=None, help=help + more)
    parser.add_argument("--robot", dest="robot_option", default=None, help=argparse.SUPPRESS)
    command = parser.prog

    def legacy(args: argparse.Namespace) -> str:
        note = ""
        if args.robot_option is not None:
            if args.robot is None:
                args.robot = args.robot_option
                note = (f"`{command} --robot {args.robot_option}` is deprecated: give the robot first, "
                        f"`{command} {args.robot_option} ...`")
            elif args.robot != args.robot_option:
                from retarget.errors import InputError

                raise InputError(f"two robots: {args.robot} and --robot {args.robot_option}")
        if args.robot is None:
            args.robot = default
        if args.robot is None and required:
            from retarget.errors import InputError

            raise InputError(f"which robot? give it first: `{command} ROBOT ...` (retarget robots)")
        return note

    _chain(parser, legacy)


def add_motion(parser: argparse.ArgumentParser, help: str, required: bool = True, positional: bool = True,
               **kwargs: object) -> None:
    """The motion as ``--motion M``; with ``positional`` the old spelling (the motion as a positional argument)
    is accepted with a deprecation note."""
    parser.add_argument("--motion", default=None, help=help, **kwargs)
    if positional:
        parser.add_argument("motion_positional", nargs="?", default=None, metavar="MOTION", help=argparse.SUPPRESS)
    command = parser.prog

    def legacy(args: argparse.Namespace) -> str:
        note = ""
        old = getattr(args, "motion_positional", None)
        if old is not None:
            if args.motion is not None:
                from retarget.errors import InputError

                raise InputError(f"two motions: {old} and --motion {args.motion}")
            args.motion = old
            note = (f"`{command} {old}` is deprecated: give the motion as `--motion {old}`")
        if args.motion is None and required:
            from retarget.errors import InputError

            raise InputError("which motion? give `--motion M` (retarget motions ROBOT)")
        return note

    _chain(parser, legacy)


def _chain(parser: argparse.ArgumentParser, legacy: Callable[[argparse.Namespace], str]) -> None:
    """Run ``legacy`` after the rewrites already set on ``parser``."""
    before = parser.get_default(_LEGACY)

    def both(args: argparse.Namespace) -> str:
        notes = [before(args)] if before is not None else []
        notes.append(legacy(args))
        return "; ".join(n for n in notes if n)

    parser.set_defaults(**{_LEGACY: both})


def resolve_legacy(args: argparse.Namespace) -> None:
    """Rewrite an old spelling in ``args`` (the command's own rewrite) and print its deprecation note on stderr.

    Raises:
        InputError: a required robot or motion is missing, or given twice differently.
    """
    legacy = getattr(args, _LEGACY, None)
    if legacy is None:
        return
    note = legacy(args)
    if note:
        print(f"retarget: deprecated: {note}", file=sys.stderr)


def parse_assignments(items: Iterable[str], names: Sequence[str], what: str, units: str = "") -> dict[str, float]:
    """``["alpha=0", " beta = 4e-5"]`` → ``{"alpha": 0.0, "beta": 4e-05}``: the ``NAME=VALUE`` arguments of an
    option such as ``--fix`` or ``--perturb`` (blank items skipped).

    Args:
        items: the ``NAME=VALUE`` texts.
        names: the names allowed, listed in the messages.
        what: how the messages name the option (``--fix``, ``perturbation``).
        units: said after "is not a number" (e.g. ``SI units``).

    Raises:
        InputError: an item that is not ``NAME=VALUE``, an unknown or repeated name, a value that is not a finite
            number — each naming ``what``, the item and the allowed names.
    """
    allowed = ", ".join(names)
    out: dict[str, float] = {}
    for item in items:
        if not item.strip():
            continue
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InputError(f"{what} {item.strip()!r}: expected NAME=VALUE (names: {allowed})")
        if name not in names:
            raise InputError(f"{what} {item.strip()!r}: unknown name {name!r} (names: {allowed})")
        if name in out:
            raise InputError(f"{what} {name!r} given twice")
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"{what} {item.strip()!r}: {text.strip()!r} is not a number"
                             + (f" ({units})" if units else "")) from None
        if not math.isfinite(value):
            raise InputError(f"{what} {item.strip()!r}: not a finite number")
        out[name] = value
    return out
