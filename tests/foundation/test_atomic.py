"""Tests of retarget.atomic: nothing appears at the target on error, old content is replaced on success."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from retarget.atomic import atomic_path, write_bytes_atomic, write_text_atomic


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


def test_bytes_written_and_replaced(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "a.bin"
    assert write_bytes_atomic(target, b"\x00one") == target
    write_bytes_atomic(target, b"\x00two")
    assert target.read_bytes() == b"\x00two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.bin"]


def test_error_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    write_text_atomic(target, "old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("partial")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_temporary_path_keeps_the_name_and_its_folder_is_private(tmp_path: Path) -> None:
    """Writers that choose the format by the suffix see the target's; helper files beside it go with the folder."""
    target = tmp_path / "video.MP4"
    with atomic_path(target) as tmp:
        assert tmp.name == "video.MP4" and tmp.parent.parent == tmp_path and tmp.parent.name.startswith(".")
        assert list(tmp.parent.iterdir()) == []
        (tmp.parent / "scratch.bag").mkdir()
        (tmp.parent / "scratch.bag" / "x").write_text("helper")
        tmp.write_text("video")
    assert [p.name for p in tmp_path.iterdir()] == ["video.MP4"]


def test_new_file_has_the_umask_permissions(tmp_path: Path) -> None:
    """Not mkstemp's private 0600: a written file is readable like any other new file."""
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "a.txt", "x")
        write_bytes_atomic(tmp_path / "b.bin", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.bin").stat().st_mode) == 0o644


def test_symbolic_link_replaced(tmp_path: Path) -> None:
    link = tmp_path / "port"
    for name in ("one", "two"):
        (tmp_path / name).write_text(name)
        with atomic_path(link) as tmp:
            tmp.symlink_to(tmp_path / name)
    assert link.is_symlink() and link.read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "port", "two"]
