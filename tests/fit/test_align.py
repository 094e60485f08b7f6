"""Tests of retarget.fit.align: known transforms and time offsets are recovered."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.fit.align import align, detect_onset, kabsch, rest_pose
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
