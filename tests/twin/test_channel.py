"""Tests of the twin's channel (retarget.twin.channel): round trip of poses and servo shafts, the newest sample,
absent/restarted/stale writer, overrun."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from retarget.twin.channel import PoseRingReader, PoseRingWriter
from retarget.twin.errors import ChannelError


def _poses(k: int, n: int = 2) -> np.ndarray:
    rng = np.random.default_rng(k)
    p = rng.normal(size=(n, 7))
    p[:, 3:] /= np.linalg.norm(p[:, 3:], axis=1, keepdims=True)
    return p


def test_round_trip_in_order(tmp_path: Path) -> None:
    path = tmp_path / "twin.poses"
    reader = PoseRingReader(path)
    assert reader.poll() == [] and reader.state == "absent"
    with PoseRingWriter(path, ["servo", "tip"], n_slots=16) as writer:
        assert reader.poll() == [] and reader.state == "live" and reader.bodies == ("servo", "tip")
        for k in range(5):
            writer.write(0.001 * k, 1000.0 + 0.001 * k, _poses(k), lag_s=0.5)
        got = reader.poll()
        assert [s.sequence for s in got] == [1, 2, 3, 4, 5]
        for k, s in enumerate(got):
            assert s.sim_time_s == pytest.approx(0.001 * k, abs=0) and s.stamp_s == 1000.0 + 0.001 * k
            assert s.lag_s == 0.5 and np.array_equal(s.poses, _poses(k))
        assert reader.poll() == []
    # A clean writer exit removes the file: the reader reports the producer absent.
    assert not path.exists()
    assert reader.poll() == [] and reader.state == "absent"


def test_shafts_round_trip_and_the_newest_sample(tmp_path: Path) -> None:
    """Shaft rows (angle, speed, torque, duty per motor) travel with the poses; :meth:`latest` gives the newest
    sample without changing what :meth:`poll` returns next, and None once the writer is gone."""
    path = tmp_path / "twin.poses"
    reader = PoseRingReader(path)
    assert reader.latest() is None
    with PoseRingWriter(path, ["tip"], ["shoulder", "elbow"], n_slots=4) as writer:
        assert reader.latest() is None and reader.motors == ("shoulder", "elbow")
        for k in range(6):
            writer.write(0.001 * k, 0.0, _poses(k, 1), shafts=np.arange(8.0).reshape(2, 4) + k)
        newest = reader.latest()
        assert newest is not None and newest.sequence == 6 and newest.sim_time_s == pytest.approx(0.005)
        np.testing.assert_array_equal(newest.shafts, np.arange(8.0).reshape(2, 4) + 5)
        got = reader.poll()
        assert [s.sequence for s in got] == [4, 5, 6]  # a ring of 4 keeps the newest, less one slot of margin
        np.testing.assert_array_equal(got[0].shafts[1], [7.0, 8.0, 9.0, 10.0])
        writer.write(0.006, 0.0, _poses(6, 1))  # no shafts given: zeros
        assert np.all(reader.latest().shafts == 0.0)
    assert reader.latest() is None and reader.state == "absent"


def test_reader_that_falls_behind_skips_to_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "twin.poses"
    reader = PoseRingReader(path)
    with PoseRingWriter(path, ["tip"], n_slots=8) as writer:
        reader.poll()
        for k in range(30):
            writer.write(float(k), float(k), _poses(k, 1))
        got = reader.poll()
        # At most a ring (minus the one slot the writer may be filling) survives; what is read is intact.
        assert got[-1].sequence == 30 and len(got) == 7 and reader.skipped == 23
        assert all(np.array_equal(s.poses, _poses(s.sequence - 1, 1)) for s in got)


def test_writer_restart_is_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "twin.poses"
    reader = PoseRingReader(path)
    first = PoseRingWriter(path, ["tip"])
    reader.poll()
    first.write(0.0, 0.0, _poses(0, 1))
    assert len(reader.poll()) == 1
    gen = reader.generation
    # A new writer replaces the file (the old one was killed: its file is left behind and replaced).
    first.close(remove=False)
    second = PoseRingWriter(path, ["tip", "servo"])
    assert reader.poll() == [] and reader.generation != gen and reader.restarts == 1
    assert reader.bodies == ("tip", "servo")
    second.write(0.5, 0.5, _poses(1))
    (sample,) = reader.poll()
    assert sample.sequence == 1 and sample.poses.shape == (2, 7)
    second.close()


def test_stale_writer_and_foreign_file(tmp_path: Path) -> None:
    path = tmp_path / "twin.poses"
    writer = PoseRingWriter(path, ["tip"])
    reader = PoseRingReader(path, stale_after_s=0.5)
    reader.poll()
    assert reader.state == "live"
    # Age the heartbeat as a killed writer would leave it.
    with open(path, "r+b") as fh:
        fh.seek(48)
        fh.write(struct.pack("<d", 1.0))
    reader.poll()
    assert reader.state == "stale"
    writer.close(remove=False)
    bad = tmp_path / "bad.poses"
    bad.write_bytes(os.urandom(8192))
    with pytest.raises(ChannelError, match="pose channel"):
        PoseRingReader(bad).poll()
