"""Tests of retarget.fit.recording: bags and Motive CSV exports."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.fit.errors import RecordingError
from retarget.fit.recording import read_recording
from retarget.mocap.bags import PoseSeries, write_pose_bag


def _bag(path, n=120, topic="/mocap/tip/pose"):
    t = 1.7e9 + np.arange(n) / 120
    pos = np.stack([np.sin(t - t[0]), np.zeros(n), np.ones(n)], axis=1)
    quat = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
    write_pose_bag(path, {topic: PoseSeries(t, pos, quat, "mocap")})
    return t, pos


def test_bag_topic_from_body_and_explicit(tmp_path) -> None:
    t, pos = _bag(tmp_path / "a")
    rec = read_recording(tmp_path / "a", "tip")
    np.testing.assert_allclose(rec.time_s, t, atol=1e-9)
    np.testing.assert_allclose(rec.position_m, pos, atol=1e-12)
    _bag(tmp_path / "b", topic="/vicon/rod_tip")
    assert len(read_recording(tmp_path / "b", "x", topic="/vicon/rod_tip").time_s) == 120


def test_errors_name_what_is_missing(tmp_path) -> None:
    _bag(tmp_path / "a", n=20)
    with pytest.raises(RecordingError, match="only 20 tracked samples"):
        read_recording(tmp_path / "a", "tip")
    with pytest.raises(RecordingError, match="no topic '/mocap/other/pose'"):
        read_recording(tmp_path / "a", "other")
    with pytest.raises(RecordingError, match="no such file"):
        read_recording(tmp_path / "missing", "tip")


def test_motive_csv(shared_data) -> None:
    path = shared_data / "optitrack" / "motive_v1.21_rigidbody_markers_sample_optitrack_take.csv"
    rec = read_recording(path, "Rigid Body 1")
    assert rec.position_m.shape == (250, 3) and rec.valid.all()
    assert rec.time_s[1] == pytest.approx(1 / 120, rel=1e-3)
    with pytest.raises(RecordingError, match="no rigid body 'tip'"):
        read_recording(path, "tip")
