"""Atomic writes: a file or directory appears complete at its final path, or not at all."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_text_atomic"]


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success move it onto ``target``, on error delete it.

    Args:
        target: Final path of the file or directory.
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
