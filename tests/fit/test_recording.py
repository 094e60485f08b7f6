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


def test_a_bag_of_a_played_motion_gives_the_alignment_its_start(tmp_path) -> None:
    """``retarget play --record`` stores when the motion started (MOTION_START_KEY); the fit's alignment is given
    that start unless --motion-start is, and the start moves with the recording's clock."""
    from retarget.fit.errors import AlignmentError
    from retarget.fit.fitter import FitCase, FitOptions, fit_materials
    from retarget.fit.rig import load_rig
    from retarget.fit.simulators import make_simulator
    from retarget.mocap.bags import MOTION_START_KEY
    from retarget.motion import load_motion

    n = 120
    t = 1.7e9 + np.arange(n) / 120
    pos = np.stack([np.sin(t - t[0]), np.zeros(n), np.ones(n)], axis=1)
    series = {"/mocap/tip/pose": PoseSeries(t, pos, np.tile([0.0, 0.0, 0.0, 1.0], (n, 1)), "mocap")}
    write_pose_bag(tmp_path / "played", series, custom_data={MOTION_START_KEY: "1700000000250000000"})
    rec = read_recording(tmp_path / "played", "tip")
    assert rec.recorded_start_s == pytest.approx(1.7e9 + 0.25)
    assert rec.shifted(1.7e9).recorded_start_s == pytest.approx(0.25, abs=1e-6)
    _bag(tmp_path / "plain")
    assert read_recording(tmp_path / "plain", "tip").recorded_start_s is None
    assert FitCase(rec, None, "played").start_s == pytest.approx(0.25, abs=1e-6)
    assert FitCase(rec, None, "played", motion_start_s=0.5).start_s == 0.5
    # The stored start is used: one far after the recording leaves nothing to align (the search alone would try).
    write_pose_bag(tmp_path / "late", series, custom_data={MOTION_START_KEY: "1700000100000000000"})
    rig = load_rig("single_rod")
    motion = load_motion("single_rod/step_30")
    case = FitCase(read_recording(tmp_path / "late", "tip"), motion, "late")
    with pytest.raises(AlignmentError, match="hardly overlap"):
        fit_materials(make_simulator("beam", rig, 1e-3), [case], FitOptions(params=("youngs_modulus",)))
    write_pose_bag(tmp_path / "odd", series, custom_data={MOTION_START_KEY: "soon"})
    with pytest.raises(RecordingError, match="retarget.motion_start_ns is 'soon', not an integer of nanoseconds"):
        read_recording(tmp_path / "odd", "tip")
