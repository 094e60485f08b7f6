"""Errors raised by :mod:`retarget.mocap`: each carries the data needed to find the offending byte, cell or file."""
from __future__ import annotations

from pathlib import Path

from retarget.errors import InputError, RetargetError


class MocapError(RetargetError):
    """Root of the motion-capture errors."""


class NatNetDecodeError(MocapError):
    """A NatNet packet is truncated, corrupted or of an unsupported layout.

    Attributes:
        offset: byte offset in the packet (header included) where decoding stopped.
        reason: what was expected there.
        message_id: the packet's NatNet message id, or ``None`` if the header itself is unreadable.
    """

    def __init__(self, reason: str, offset: int, message_id: int | None = None) -> None:
        self.reason = reason
        self.offset = offset
        self.message_id = message_id
        where = f"message id {message_id}, " if message_id is not None else ""
        super().__init__(f"bad NatNet packet ({where}byte {offset}): {reason}")


class NatNetEncodeError(MocapError):
    """A value cannot be written in the NatNet wire format (e.g. a string longer than its fixed field)."""


class NatNetTimeoutError(MocapError):
    """The NatNet server did not answer a command within the timeout.

    Attributes:
        request: name of the request that went unanswered.
        timeout_s: how long the client waited [s].
    """

    def __init__(self, request: str, timeout_s: float, server: tuple[str, int]) -> None:
        self.request = request
        self.timeout_s = timeout_s
        self.server = server
        super().__init__(
            f"no answer to {request} from NatNet server {server[0]}:{server[1]} within {timeout_s:g} s "
            "(is Motive streaming, and are the server address and command port right?)"
        )


class MotiveCsvError(MocapError, InputError):
    """A Motive CSV export is malformed or of an unsupported kind.

    Attributes:
        path: the file.
        line: 1-based line number of the offending row, or ``None`` for whole-file problems.
    """

    def __init__(self, path: Path | str, reason: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {reason}")


class BagError(MocapError, InputError):
    """A rosbag2 cannot be read or written.

    Attributes:
        path: the bag folder (or file).
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")
