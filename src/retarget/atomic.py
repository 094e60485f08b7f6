"""Atomic writes: a file or directory appears complete at its final path, or not at all."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_bytes_atomic", "write_text_atomic"]


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success move it onto ``target``, on error delete it.

    The temporary path has the target's file name (so its suffix too) inside a fresh hidden folder beside the target
    that belongs to this call alone: a caller may put helper files there (a writer's scratch output), and the folder
    is deleted with everything left in it when the block ends. A file created at the path gets the permissions of
    any new file (``0o666`` less the umask).

    Args:
        target: Final path of the file or directory (or symbolic link).
        directory: The caller creates a directory (for example a rosbag2 bag) instead of a file. The yielded path
            does not exist yet.

    Yields:
        The temporary path to write to (same folder, so the final rename never crosses file systems).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    tmp = scratch / target.name
    try:
        yield tmp
        if directory:
            if target.exists():
                old = scratch / (target.name + ".old")
                os.replace(target, old)
            os.replace(tmp, target)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_text_atomic(target: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``target`` atomically and return the path."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(target)


def write_bytes_atomic(target: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``target`` atomically and return the path."""
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)
    return Path(target)
