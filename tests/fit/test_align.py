"""Tests of retarget.fit.align: known transforms and time offsets are recovered."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.fit.align import align, detect_onset, difference_noise, kabsch, rest_pose, still_pose
from retarget.fit.errors import AlignmentError
from retarget.fit.recording import TipRecording
from retarget.fit.simulators import TipTrajectory


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q @ np.diag(np.sign(np.diag(r)))
    return q * np.sign(np.linalg.det(q))


def _synthetic_sim() -> TipTrajectory:
    """A tip swinging in the x-z plane: rest until 0.5 s, a 45° turn in 0.2 s, a damped 3 Hz ring."""
    t = np.arange(0.0, 4.0 + 1e-9, 1e-3)
    s = np.clip((t - 0.5) / 0.2, 0.0, 1.0)
    theta = np.radians(45) * s * s * (3 - 2 * s) + 0.3 * np.exp(-0.3 * t) * np.sin(2 * np.pi * 3 * t) * (t > 0.5)
    pos = np.stack([0.7 * np.sin(theta), np.full_like(t, 0.009), 0.035 + 0.7 * np.cos(theta)], axis=1)
    return TipTrajectory(t, pos, theta)


def test_kabsch_recovers_rigid_transform() -> None:
    rng = np.random.default_rng(1)
    src = rng.normal(size=(50, 3))
    rot, trans = _random_rotation(rng), rng.normal(size=3)
    r, t = kabsch(src, src @ rot.T + trans)
    np.testing.assert_allclose(r, rot, atol=1e-12)
    np.testing.assert_allclose(t, trans, atol=1e-12)
    assert np.linalg.det(r) == pytest.approx(1.0)


def test_rest_pose_and_onset() -> None:
    rng = np.random.default_rng(2)
    t = np.arange(0.0, 2.0, 1 / 120)
    pos = np.zeros((t.size, 3)) + rng.normal(0, 0.001, (t.size, 3))
    pos[:, 0] += np.where(t > 1.0, 0.5 * (t - 1.0), 0.0)
    pos[10] = np.nan
    rest = rest_pose(t, pos, 0.5)
    assert rest.noise_std_m == pytest.approx(0.001, rel=0.3)
    onset = detect_onset(t, pos, rest.position_m, 0.01)
    # The ramp reaches 10 mm 20 ms after its start (noise moves the crossing by a few ms).
    assert onset == pytest.approx(1.02, abs=0.01)
    with pytest.raises(AlignmentError, match="never leaves"):
        detect_onset(t, pos, rest.position_m, 5.0)


def test_align_recovers_offset_and_transform_with_occlusions() -> None:
    rng = np.random.default_rng(3)
    sim = _synthetic_sim()
    rot, trans, offset = _random_rotation(rng), np.array([0.3, -1.2, 0.8]), 1.7e9 + 0.4137
    t_rec = offset + np.arange(-0.3, 4.2, 1 / 120)
    true = sim.at(t_rec - offset)
    measured = (true - trans) @ rot + rng.normal(0, 0.001, true.shape)  # x_robot = R x_mocap + t
    measured[rng.random(t_rec.size) < 0.05] = np.nan
    al = align(TipRecording(t_rec, measured, "synthetic", "tip"), sim)
    assert al.offset_s - 1.7e9 == pytest.approx(0.4137, abs=5e-4)
    np.testing.assert_allclose(al.rotation, rot, atol=5e-3)
    np.testing.assert_allclose(al.translation, trans, atol=5e-3)
    assert al.rms_m < 0.002


def _mocap_view(sim: TipTrajectory, t_rec: np.ndarray, offset: float, seed: int, occlusion: float = 0.05
                ) -> tuple[TipRecording, np.ndarray, np.ndarray]:
    """The simulated tip seen by a mocap system in a rotated, offset frame, 1 mm noise, occlusions."""
    rng = np.random.default_rng(seed)
    rot, trans = _random_rotation(rng), np.array([0.3, -1.2, 0.8])
    true = sim.at(t_rec - offset)
    measured = (true - trans) @ rot + rng.normal(0, 0.001, true.shape)  # x_robot = R x_mocap + t
    measured[rng.random(t_rec.size) < occlusion] = np.nan
    return TipRecording(t_rec, measured, "synthetic", "tip"), rot, trans


def test_still_pose_finds_the_rest_anywhere_and_the_noise_of_a_moving_recording() -> None:
    # Swinging first, at rest only at the end: the rest window is found there.
    rng = np.random.default_rng(5)
    t = np.arange(0.0, 3.0, 1 / 120)
    pos = np.zeros((t.size, 3))
    pos[:, 0] = np.where(t < 2.0, 0.2 * np.sin(2 * np.pi * 3.0 * t) * (2.0 - t) / 2.0, 0.0)
    pos += rng.normal(0, 0.001, pos.shape)
    pos[rng.random(t.size) < 0.05] = np.nan
    rest = still_pose(t, pos, 0.3)
    assert rest.start_s >= 1.9 and rest.end_s <= 3.0
    np.testing.assert_allclose(rest.position_m, 0.0, atol=1e-3)
    assert rest.noise_std_m == pytest.approx(0.001, rel=0.15)
    # The noise of a recording that never rests, from its fourth differences (the 3 Hz swing of 0.3 m cancels).
    swing = 0.3 * np.sin(2 * np.pi * 3.0 * t)[:, None] * [1.0, 0.5, 0.0] + rng.normal(0, 0.001, (t.size, 3))
    assert difference_noise(t, swing) == pytest.approx(0.001, rel=0.15)


def test_align_a_recording_that_starts_with_the_motion() -> None:
    # The capture starts 0.6 s into the motion, after the step began: no rest at its start. The alignment
    # scans the offsets and uses the rest at the end.
    sim = _synthetic_sim()
    offset = 1.7e9 - 0.6
    t_rec = 1.7e9 + np.arange(0.0, 3.6, 1 / 120)
    rec, rot, trans = _mocap_view(sim, t_rec, offset, 6)
    al = align(rec, sim)
    assert al.offset_s - 1.7e9 == pytest.approx(-0.6, abs=5e-4)
    np.testing.assert_allclose(al.rotation, rot, atol=5e-3)
    np.testing.assert_allclose(al.translation, trans, atol=5e-3)
    assert al.rms_m < 0.002


def test_align_with_the_known_motion_start() -> None:
    sim = _synthetic_sim()
    t_rec = 50.0 + np.arange(0.0, 4.5, 1 / 120)
    rec, _, _ = _mocap_view(sim, t_rec, 50.0 + 0.3, 7)  # the motion started 0.3 s after the first frame
    al = align(rec, sim, motion_start_s=0.32)  # known to 20 ms
    assert al.offset_s - 50.0 == pytest.approx(0.3, abs=5e-4)
    with pytest.raises(AlignmentError, match="overlap"):
        align(rec, sim, motion_start_s=100.0)
