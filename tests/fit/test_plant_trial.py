"""Tests of retarget.fit.plant_trial: a plan on the servo–beam plant with a model error, and the take a capture
writes of it."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fit.plant_trial import (
    CaptureSettings,
    PlantPerturbation,
    capture_transform,
    play_trial,
    write_take,
)
from retarget.fit.replay import replay
from retarget.fit.rig import load_rig
from retarget.motion import Motion

MOTOR = "base_pitch"


@pytest.fixture(scope="module")
def rig():
    return load_rig("single_rod")


def step(duration: float = 1.0) -> Motion:
    t = np.arange(0.0, duration + 1e-9, 0.01)
    s = np.clip((t - 0.1) / 0.25, 0.0, 1.0)
    return Motion(t, (MOTOR,), (0.3 * (10 * s**3 - 15 * s**4 + 6 * s**5))[:, None])


def test_without_an_error_a_trial_is_the_replay(rig) -> None:
    """No perturbation: the plant of ``retarget check replay``, the same figures."""
    motion = step()
    trial = play_trial(rig, motion, motion, tail_s=0.5)
    report = replay(rig, motion, motion, tail=0.5)
    assert trial.metrics.peak_deviation_m == pytest.approx(report.plan.metrics.peak_deviation_m, rel=1e-12)
    assert trial.metrics.rms_deviation_m == pytest.approx(report.plan.metrics.rms_deviation_m, rel=1e-12)
    assert trial.metrics.peak_torque_ratio == pytest.approx(report.plan.metrics.peak_torque_ratio, rel=1e-12)


def test_a_latency_delays_the_whole_response(rig) -> None:
    """A latency on the goal is a pure delay: the tip is the undelayed one shifted by it (to the step), and the
    deviation against the intent delayed by it is the undelayed deviation."""
    motion = step()
    base = play_trial(rig, motion, motion, tail_s=0.5)
    late = play_trial(rig, motion, motion, PlantPerturbation(latency_s=0.02), tail_s=0.5)
    shift = 20  # 20 ms at dt 1 ms
    n = len(base.time_s)
    assert np.allclose(late.tip_position_m[shift:n], base.tip_position_m[: n - shift], atol=1e-9)
    assert late.metrics.delayed_peak_deviation_m == pytest.approx(base.metrics.peak_deviation_m, rel=1e-6)
    assert late.metrics.rms_deviation_m > base.metrics.rms_deviation_m  # against the intent in its own clock


def test_the_model_error_changes_the_plant(rig) -> None:
    """A stiffer loop sags less: the shaft holds the step closer to its goal."""
    motion = step()
    soft = play_trial(rig, motion, motion, tail_s=0.5)
    stiff = play_trial(rig, motion, motion, PlantPerturbation(kp_factor=2.0, youngs_factor=0.9), tail_s=0.5)
    assert abs(stiff.metrics.peak_deviation_m - soft.metrics.peak_deviation_m) > 1e-3
    with pytest.raises(InputError):
        PlantPerturbation(kp_factor=0.0).plant(rig)
    with pytest.raises(InputError):
        PlantPerturbation(latency_s=-0.01).plant(rig)


def test_the_take_is_the_tip_in_the_capture_frame_and_clock(rig, tmp_path) -> None:
    from retarget.mocap.motive_csv import read_motive_csv

    motion = step()
    trial = play_trial(rig, motion, motion, tail_s=0.5)
    capture = CaptureSettings(rate_hz=100.0, noise_m=0.0, rotation_rpy_deg=(10, -20, 30), offset_m=(0.5, 1.0, -2.0),
                              lead_s=0.3)
    take = read_motive_csv(write_take(trial, capture, tmp_path / "take.csv"))
    rot, trans = capture_transform(capture)
    assert np.allclose(rot @ rot.T, np.eye(3)) and np.linalg.det(rot) == pytest.approx(1.0)
    assert take.header.length_units == "Millimeters" and take.header.export_frame_rate_hz == 100.0
    pos = take.rigid_bodies["tip"].position_m
    assert take.time_s[0] == 0.0
    # The capture's 0.5 s is the trial's 0.2 s; before the trial the tip rests at its first position.
    k = 50
    expected = np.array([np.interp(0.2, trial.time_s, trial.tip_position_m[:, a]) for a in range(3)])
    assert np.allclose(pos[k], rot @ expected + trans, atol=1e-8)
    assert np.allclose(pos[0], rot @ trial.tip_position_m[0] + trans, atol=1e-8)
    late = read_motive_csv(write_take(trial, CaptureSettings(lead_s=-0.25, robot_clock=True, occlusion=0.3, seed=2),
                                      tmp_path / "late.csv"))
    assert late.time_s[0] == pytest.approx(0.25)
    assert 0.2 < np.mean(~late.rigid_bodies["tip"].tracked) < 0.4
