"""Tests of retarget.atomic: nothing appears at the target on error, old content is replaced on success."""
from __future__ import annotations

from pathlib import Path

import pytest

from retarget.atomic import atomic_path, write_text_atomic


def test_file_written_and_replaced(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "a.txt"
    write_text_atomic(target, "one")
    write_text_atomic(target, "two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.txt"]


def test_error_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_directory_replaced(tmp_path: Path) -> None:
    target = tmp_path / "bag"
    for content in ("old", "new"):
        with atomic_path(target, directory=True) as tmp:
            tmp.mkdir()
            (tmp / "x").write_text(content)
    assert (target / "x").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["bag"]
