"""Errors raised by :mod:`retarget.motion`: malformed motions, motion files, BVH files and limit violations.

Every error names the offending item (file, row or line, joint) so a user can fix the input without a debugger,
and carries the same facts as attributes for programs.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from retarget.errors import InputError

if TYPE_CHECKING:
    from retarget.motion.limits import LimitViolation, RowLabel

__all__ = ["BvhError", "JointMismatchError", "MotionFormatError", "MotionLimitError"]


class MotionFormatError(InputError):
    """A motion (or motion file) is malformed: NaN, unsorted or duplicate times, ragged rows, bad units...

    Attributes:
        source: File or object the motion came from (``None`` for in-memory arrays).
        row: Where the problem is, as the user sees it (``"line 14"``, ``"row 12"``, ``"keyframe 3"``), or ``None``.
        joint: Offending joint name, or ``None``.
    """

    def __init__(self, message: str, *, source: str | None = None, row: str | None = None,
                 joint: str | None = None) -> None:
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + message)
        self.source = source
        self.row = row
        self.joint = joint


class JointMismatchError(MotionFormatError):
    """The joints of a motion do not match the expected set.

    Attributes:
        missing: Expected joints the motion lacks.
        unknown: Joints of the motion that are not expected.
    """

    def __init__(self, message: str, *, missing: Sequence[str] = (), unknown: Sequence[str] = (),
                 source: str | None = None) -> None:
        super().__init__(message, source=source)
        self.missing = tuple(missing)
        self.unknown = tuple(unknown)


class MotionLimitError(InputError):
    """A motion leaves the joint position or velocity limits.

    Attributes:
        violations: Every violation found (one per joint, kind and contiguous run of samples).
    """

    def __init__(self, violations: Sequence[LimitViolation], *, source: str | None = None,
                 row_label: RowLabel | None = None) -> None:
        self.violations = tuple(violations)
        self.source = source
        shown = "; ".join(v.describe(row_label) for v in self.violations[:5])
        more = f" (and {len(self.violations) - 5} more)" if len(self.violations) > 5 else ""
        prefix = f"{source}: " if source else ""
        super().__init__(f"{prefix}motion violates joint limits: {shown}{more}")


class BvhError(InputError):
    """A BVH file is malformed. The message names the file and line (or frame)."""
