"""Input shapers and vibration identification, against the analytic response of a base-driven 1-DOF oscillator."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.signal import lsim

from retarget.motion import Motion
from retarget.optimize.errors import ShapingError
from retarget.optimize.shaping import (
    identify_from_trajectory,
    identify_vibration,
    shape_motion,
    zv_shaper,
    zvd_shaper,
)

F, ZETA = 1.6, 0.02  # a rod-like first mode


def test_shaper_formulas() -> None:
    zv, zvd = zv_shaper(F, ZETA), zvd_shaper(F, ZETA)
    period = 1.0 / (F * math.sqrt(1 - ZETA ** 2))
    k = math.exp(-ZETA * math.pi / math.sqrt(1 - ZETA ** 2))
    np.testing.assert_allclose(zv.amplitudes, [1 / (1 + k), k / (1 + k)])
    np.testing.assert_allclose(zvd.times, [0.0, period / 2, period])
    for s in (zv, zvd):
        assert s.amplitudes.sum() == pytest.approx(1.0)
        assert s.residual_vibration(F, ZETA) < 1e-12
    undamped = zvd_shaper(F, 0.0)
    assert undamped.lag_s == pytest.approx(0.5 / F) and zv_shaper(F, 0.0).lag_s == pytest.approx(0.25 / F)
    assert zvd.duration == pytest.approx(2 * zv.duration)
    # ZVD is robust to frequency error: at ±15 % it leaves far less than ZV.
    for f in (0.85 * F, 1.15 * F):
        assert zvd.residual_vibration(f, ZETA) < 0.06 < zv.residual_vibration(f, ZETA)
    with pytest.raises(ShapingError):
        zv_shaper(0.0)
    with pytest.raises(ShapingError):
        zvd_shaper(1.0, 1.0)


def _oscillator(t: np.ndarray, base: np.ndarray, f: float = F, zeta: float = ZETA) -> np.ndarray:
    """x'' + 2ζω x' + ω² x = ω² y(t), at rest at y(0); exact for piecewise-linear y (first-order hold)."""
    w = 2 * math.pi * f
    _, x, _ = lsim(([w * w], [1.0, 2 * zeta * w, w * w]), base - base[0], t, interp=True)
    return x + base[0]


def _ramp_response(t: np.ndarray, f: float = F, zeta: float = ZETA) -> np.ndarray:
    """Analytic response to the unit ramp y = t (t ≥ 0)."""
    w = 2 * math.pi * f
    wd = w * math.sqrt(1 - zeta ** 2)
    tt = np.maximum(t, 0.0)
    return np.where(t > 0, tt - 2 * zeta / w + np.exp(-zeta * w * tt) * (
        2 * zeta / w * np.cos(wd * tt) - (1 - 2 * zeta ** 2) / wd * np.sin(wd * tt)), 0.0)


def _step_motion(rate: float = 1000.0) -> Motion:
    """0 → 0.5 rad in 0.2 s (constant speed), hold 4 s."""
    t = np.arange(int(4.2 * rate) + 1) / rate
    return Motion(t, ("m",), (0.5 * np.clip(t / 0.2, 0.0, 1.0))[:, None])


def test_oscillator_reference_matches_the_analytic_ramp_response() -> None:
    motion = _step_motion()
    t, y = motion.time, motion.positions[:, 0]
    analytic = 0.5 / 0.2 * (_ramp_response(t) - _ramp_response(t - 0.2))
    np.testing.assert_allclose(_oscillator(t, y), analytic, atol=1e-9)


def _residual(motion: Motion, f: float = F, zeta: float = ZETA) -> float:
    """Peak |x − y_final| once the command has stopped."""
    t, y = motion.time, motion.positions[:, 0]
    x = _oscillator(t, y, f, zeta)
    moving = np.flatnonzero(np.abs(np.diff(y)) > 1e-12)
    after = t > t[moving[-1] + 1]
    return float(np.abs(x[after] - y[-1]).max())


def test_shaped_steps_leave_no_residual_vibration() -> None:
    motion = _step_motion()
    naive = _residual(motion)
    assert naive > 0.05  # 0.5 rad in 0.2 s rings strongly at 1.6 Hz
    for shaper in (zv_shaper(F, ZETA), zvd_shaper(F, ZETA)):
        shaped = shape_motion(motion, shaper)
        assert shaped.time[-1] >= motion.time[-1] + shaper.duration - 1e-9
        assert shaped.positions[-1, 0] == pytest.approx(0.5)
        # Measured: ZV 6e-6, ZVD 5e-6 of the naive residual (0.39 rad); the rest is sampling of the shifted copies.
        assert _residual(shaped) < 1e-3 * naive
    # Off-design (+15 %): measured ZV 0.22, ZVD 0.048 of the naive residual.
    zv = _residual(shape_motion(motion, zv_shaper(F, ZETA)), 1.15 * F)
    zvd = _residual(shape_motion(motion, zvd_shaper(F, ZETA)), 1.15 * F)
    assert zvd < 0.1 * naive and zvd < 0.5 * zv


def test_shaped_motion_lags_by_the_centroid() -> None:
    motion = _step_motion()
    shaper = zvd_shaper(F, ZETA)
    shaped = shape_motion(motion, shaper)
    # In the constant-speed part of the ramp (after the last impulse), the shaped command is the input delayed by
    # exactly lag_s.
    t = np.linspace(shaper.duration + 0.01, 0.19, 5)
    if t[0] < t[-1]:
        np.testing.assert_allclose(shaped.sample(t), motion.sample(t - shaper.lag_s), atol=1e-9)
    slow = Motion(np.linspace(0, 10, 1001), ("m",), np.linspace(0, 1, 1001)[:, None])
    shaped_slow = shape_motion(slow, shaper)
    np.testing.assert_allclose(shaped_slow.sample(5.0), slow.sample(5.0 - shaper.lag_s), atol=1e-9)


@pytest.mark.parametrize("f,zeta", [(0.8, 0.005), (1.7, 0.03), (3.0, 0.1)])
def test_identify_damped_sinusoid(f: float, zeta: float) -> None:
    rng = np.random.default_rng(int(100 * f))
    t = np.arange(0.0, 6.0, 1 / 500)
    w = 2 * math.pi * f
    y = 0.05 * np.exp(-zeta * w * t) * np.cos(w * math.sqrt(1 - zeta ** 2) * t + 0.4) + 0.2
    y += 5e-4 * rng.normal(size=t.size)  # 1 % noise
    est = identify_vibration(t, y)
    assert est.frequency_hz == pytest.approx(f, rel=0.01)
    assert est.damping_ratio == pytest.approx(zeta, rel=0.10)
    assert est.offset == pytest.approx(0.2, abs=1e-3)
    # A weaker second mode at 9 Hz does not disturb the first.
    y2 = y + 0.01 * np.exp(-0.05 * 2 * math.pi * 9 * t) * np.sin(2 * math.pi * 9 * t)
    est2 = identify_vibration(t, y2)
    assert est2.frequency_hz == pytest.approx(f, rel=0.01)
    assert est2.damping_ratio == pytest.approx(zeta, rel=0.10)


def test_identify_from_a_3d_trajectory_after_a_step() -> None:
    """The ring-out of the base-driven oscillator after the naive step, embedded in 3-D as a tip would move."""
    motion = _step_motion(rate=500.0)
    t = motion.time
    x = _oscillator(t, motion.positions[:, 0])
    direction = np.array([0.6, 0.0, 0.8])
    positions = np.array([0.0, 0.1, 0.7]) + x[:, None] * direction * 0.7
    est = identify_from_trajectory(t, positions, start_time=0.3)
    assert est.frequency_hz == pytest.approx(F, rel=0.01)
    assert est.damping_ratio == pytest.approx(ZETA, rel=0.10)


def test_identify_rejects_bad_input() -> None:
    t = np.linspace(0, 1, 10)
    with pytest.raises(ShapingError):
        identify_vibration(t, t)
    t = np.linspace(0, 2, 200)
    with pytest.raises(ShapingError):
        identify_vibration(t, np.full(200, 0.3))
