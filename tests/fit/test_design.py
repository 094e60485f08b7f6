"""Tests of retarget.fit.design: the identification motion, the predicted uncertainty and the load torque."""
from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fit.design import (
    burst_peak_torque,
    burst_torque_bound,
    choose_burst_count,
    design_identification_motion,
    load_torque,
    material_corners,
    predict_uncertainty,
    step_peak_torque,
    write_identification_motion,
)
from retarget.fit.rig import StepTestRig, load_rig
from retarget.fit.simulators import BeamEngine, TipTrajectory
from retarget.model.library import resolve_motion
from retarget.motion import Motion, load_motion


@pytest.fixture(scope="module")
def rig() -> StepTestRig:
    return load_rig("single_rod")


@pytest.fixture(scope="module")
def engine(rig: StepTestRig) -> BeamEngine:
    return BeamEngine(rig)


def test_bursts_are_timed_at_the_second_mode_within_the_speed_limit(rig: StepTestRig, engine: BeamEngine) -> None:
    design = design_identification_motion(rig, youngs_modulus=1.8e11, step_deg=30.0, cycles=4, bursts=3,
                                          torque_fraction=None)
    f2 = engine.model.natural_frequencies(1.8e11, theta=0.0)[1]
    assert design.frequencies_hz[1] == pytest.approx(f2, rel=1e-12)
    # Keyframes at the bursts' extremes are half a period of mode 2 apart; the bursts ride on the rest angle and
    # the step comes after them.
    extremes = np.flatnonzero(np.isclose(np.abs(design.angles_rad), design.amplitude_rad, rtol=1e-9))
    assert len(extremes) == 3 * 2 * 4
    assert design.times_s[extremes].max() < design.burst_end_s
    assert np.all(design.angles_rad[design.times_s <= design.burst_end_s] != design.step_rad)
    spacing = np.diff(design.times_s[extremes])
    inside = spacing < 0.1
    np.testing.assert_allclose(spacing[inside], 0.5 / f2, rtol=1e-12)
    # pchip between alternating extremes peaks at 3a/h: the sampled motion uses 90 % of 8.06 rad/s (±0.5 %).
    motion = design.motion()
    rate = np.abs(np.diff(motion.positions[:, 0]) / np.diff(motion.time))
    assert rate.max() == pytest.approx(0.9 * 8.06, rel=5e-3)
    assert design.peak_rate_rad_s <= 8.06
    lo, hi = rig.motor_limits
    assert lo < motion.positions.min() and motion.positions.max() < hi
    assert motion.positions[0, 0] == 0.0 and motion.positions[-1, 0] == pytest.approx(0.0, abs=1e-12)
    assert motion.positions[:, 0].max() == pytest.approx(design.step_rad)


def test_amplitude_is_set_by_the_torque_bound(rig: StepTestRig, engine: BeamEngine) -> None:
    """The bursts' amplitude is the largest whose torque bound is within 80 % of the stall torque, and the bound
    holds for the load torque actually simulated at several true moduli (the ringing of earlier bursts adds up in
    phase at some E only, e.g. near 210 GPa for the shipped motion)."""
    moduli = (1.5e11, 2.0e11, 2.2e11)
    design = design_identification_motion(rig, cycles=4, bursts=3, gap_s=0.5, hold_s=0.5, torque_moduli=moduli)
    limit = 0.8 * rig.stall_torque
    assert design.torque_limit_nm == pytest.approx(limit)
    assert 0.99 * limit <= design.burst_torque_nm <= limit
    speed_only = design_identification_motion(rig, cycles=4, bursts=3, gap_s=0.5, hold_s=0.5, torque_fraction=None)
    assert design.amplitude_rad < 0.2 * speed_only.amplitude_rad
    motion = design.motion()
    alpha, beta = design.torque_damping
    assert (alpha, beta) == (0.1, 1e-5)
    for e in (*moduli, 1.7e11, 2.1e11):
        peak = burst_peak_torque(engine, e, alpha, beta, motion, design.burst_end_s)
        assert 0.2 * limit < peak <= design.burst_torque_nm, e


def test_torque_bound_of_one_burst_is_its_peak(rig: StepTestRig, engine: BeamEngine) -> None:
    """With a single burst the bound has one window: it equals the simulated peak (the triangle inequality is
    tight), and the step after the bursts does not change the torque before it."""
    kw = dict(cycles=4, bursts=1, gap_s=0.5, hold_s=0.5, torque_fraction=None)
    design = design_identification_motion(rig, **kw)
    half = 0.5 / design.frequencies_hz[1]
    bound = burst_torque_bound(rig, [2e11], (0.1, 1e-5), 0.5, half, design.amplitude_rad, 4, 1, 0.5)
    peak = burst_peak_torque(engine, 2e11, 0.1, 1e-5, design.motion(), design.burst_end_s)
    assert bound == pytest.approx(peak, rel=1e-9)
    flat = design_identification_motion(rig, step_deg=0.0, **kw)
    assert burst_peak_torque(engine, 2e11, 0.1, 1e-5, flat.motion(), flat.burst_end_s) == pytest.approx(peak,
                                                                                                        rel=1e-9)


@pytest.mark.slow
def test_step_ramps_are_lengthened_until_the_step_is_within_the_torque_limit() -> None:
    """The step after the bursts rises in the shortest ramp (speed-limited ramp x 1.15^k) whose predicted peak
    load torque is within the limit; the ramp before it is not. On the fitting rig (XM540-W270, 3.14 rad/s) the
    speed-limited 0.28 s ramp loads the horn above its 8.5 N m limit."""
    fit_rig = load_rig("fit_rig")
    moduli = (1.5e11, 2.0e11, 2.2e11)
    design = design_identification_motion(fit_rig, cycles=2, bursts=1, gap_s=0.5, torque_moduli=moduli)
    limit = 0.8 * fit_rig.stall_torque
    speed_ramp = 1.5 * math.radians(30.0) / (0.9 * fit_rig.max_velocity)
    k = round(math.log(design.step_ramp_s / speed_ramp) / math.log(1.15))
    assert k >= 1 and 0 <= design.step_ramp_s - speed_ramp * 1.15**k < 1e-3  # rounded up to 1 ms
    assert design.step_ramp_s == round(design.step_ramp_s, 3)
    damping, hold = design.torque_damping, design.times_s[-3] - design.times_s[-4]
    args = (fit_rig, moduli, damping, design.step_rad)
    assert design.step_torque_nm == pytest.approx(step_peak_torque(*args, design.step_ramp_s, hold, 1.0), rel=1e-12)
    previous = math.ceil(speed_ramp * 1.15 ** (k - 1) * 1e3 - 1e-9) / 1e3
    assert design.step_torque_nm <= limit < step_peak_torque(*args, previous, hold, 1.0)
    # The ramps are the step's: rise and return both take step_ramp_s.
    assert design.times_s[-4] - design.times_s[-5] == pytest.approx(design.step_ramp_s)
    assert f"step in {design.step_ramp_s:.3f} s" in design.description
    with pytest.raises(InputError, match="no step ramp"):
        design_identification_motion(fit_rig, cycles=2, bursts=1, gap_s=0.5, torque_moduli=moduli,
                                     stall_torque=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["single_rod", "fit_rig"])
def test_shipped_motion_is_the_design_for_the_rig(name: str) -> None:
    rig = load_rig(name)
    shipped = load_motion(resolve_motion(f"{name}/ident_mode2"))
    design = design_identification_motion(rig)
    fresh = design.motion()
    assert shipped.num_samples == fresh.num_samples
    # The file rounds keyframe times to 1e-5 s (an error of up to 5e-6 s times the motor speed) and angles to
    # 1e-5 deg.
    atol = math.radians(2e-4) + 5e-6 * design.peak_rate_rad_s
    np.testing.assert_allclose(shipped.positions, fresh.positions, atol=atol)
    assert design.burst_torque_nm <= 0.8 * rig.stall_torque
    assert design.step_torque_nm <= 0.8 * rig.stall_torque


def test_written_file_reads_back(rig: StepTestRig, tmp_path) -> None:
    design = design_identification_motion(rig, step_deg=0.0, cycles=2, bursts=1, torque_fraction=None)
    path = write_identification_motion(design, tmp_path / "ident.yaml")
    motion = load_motion(path)
    assert motion.joint_names == (rig.motor,)
    assert motion.duration == pytest.approx(design.duration_s, abs=1e-3)  # resampled on a 1 ms grid
    assert "second bending mode" in path.read_text()


def test_written_file_is_readable_like_any_other(rig: StepTestRig, tmp_path) -> None:
    """The motion file gets a new file's permissions (0644 under umask 022), not a private temporary file's 0600;
    nothing else is left in the folder."""
    design = design_identification_motion(rig, step_deg=0.0, cycles=2, bursts=1, torque_fraction=None)
    old = os.umask(0o022)
    try:
        path = write_identification_motion(design, tmp_path / "ident.yaml")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["ident.yaml"]


def test_bad_designs_are_rejected(rig: StepTestRig) -> None:
    with pytest.raises(InputError, match="joint limits"):
        design_identification_motion(rig, step_deg=100.0)
    with pytest.raises(InputError, match="cycle"):
        design_identification_motion(rig, cycles=0)
    with pytest.raises(InputError, match="max_velocity"):
        design_identification_motion(rig.__class__(**{**rig.__dict__, "max_velocity": None}))
    with pytest.raises(InputError, match="stall_torque"):
        design_identification_motion(rig.__class__(**{**rig.__dict__, "stall_torque": None}))
    with pytest.raises(InputError, match="torque_fraction"):
        design_identification_motion(rig, torque_fraction=1.5)


@pytest.mark.slow
def test_burst_count_is_chosen_from_the_predicted_uncertainty(rig: StepTestRig, engine: BeamEngine) -> None:
    kw = dict(cycles=4, gap_s=0.5, hold_s=0.3, tail_s=0.3, step_deg=10.0, torque_moduli=(2e11,))
    corner = [(2e11, 0.5, 4e-5)]
    easy = choose_burst_count(rig, [], target_std=10.0, candidates=(1, 2), corners=corner, simulator=engine,
                              gaps_s=(0.5,), **{k: v for k, v in kw.items() if k != "gap_s"})
    assert easy.met and easy.design.bursts == 1 and len(easy.rows) == 1 and easy.chosen["bursts"] == 1
    hard = choose_burst_count(rig, [], target_std=1e-9, candidates=(1, 2), corners=corner, simulator=engine,
                              gaps_s=(0.5,), **{k: v for k, v in kw.items() if k != "gap_s"})
    assert not hard.met and [r["bursts"] for r in hard.rows] == [1, 2]
    best = min(hard.rows, key=lambda r: max(r["worst"].values()))
    assert hard.chosen is best and hard.design.bursts == best["bursts"]
    # The row's worst case is the prediction at the (only) corner.
    pred = predict_uncertainty(engine, [hard.design.motion()], *corner[0])
    assert best["worst"]["beta"] == pytest.approx(pred.relative_std["beta"], rel=1e-9)
    with pytest.raises(InputError, match="fits in"):
        choose_burst_count(rig, [], max_duration_s=1.0, candidates=(1,), corners=corner, simulator=engine)
    assert len(material_corners()) == 8


@dataclass
class _LinearSimulator:
    """A tip linear in the parameters' logs: x(t) = Σ_k log p_k · g_k(t) (exact Jacobian known)."""

    rig: StepTestRig

    def simulate(self, youngs_modulus: float, alpha: float, beta: float, motion: object) -> TipTrajectory:
        t = np.arange(0.0, 2.0, 1e-3)
        logs = np.log([youngs_modulus / 2e11, alpha, beta / 1e-4])
        basis = np.stack([np.sin(2 * np.pi * t), np.cos(5 * t) * t, np.exp(-t)], axis=1) * 1e-2
        pos = np.zeros((len(t), 3))
        pos[:, 0] = basis @ logs
        return TipTrajectory(t, pos, np.zeros_like(t), None)


def test_prediction_equals_the_linear_least_squares_covariance(rig: StepTestRig) -> None:
    sim = _LinearSimulator(rig)
    pred = predict_uncertainty(sim, [object()], 2e11, 0.5, 1e-4, rate_hz=100.0, noise_m=1e-3,
                               rotation_noise_rad=None)
    t = np.arange(0.05, 2.0 - 1e-3 - 0.05, 0.01)
    basis = np.stack([np.sin(2 * np.pi * t), np.cos(5 * t) * t, np.exp(-t)], axis=1) * 1e-2 / 1e-3
    # The time-offset column: at the truth only α's term is non-zero (log E/E₀ = log β/β₀ = 0).
    velocity = 1e-2 * np.log(0.5) * (np.cos(5 * t) - 5 * t * np.sin(5 * t)) / 1e-3
    jac = np.column_stack([basis, -velocity])
    expected = np.sqrt(np.diag(np.linalg.inv(jac.T @ jac))[:3])
    got = [pred.relative_std[p] for p in ("youngs_modulus", "alpha", "beta")]
    np.testing.assert_allclose(got, expected, rtol=2e-3)
    doubled = predict_uncertainty(sim, [object()], 2e11, 0.5, 1e-4, rate_hz=100.0, noise_m=2e-3,
                                  rotation_noise_rad=None)
    assert doubled.relative_std["beta"] == pytest.approx(2 * pred.relative_std["beta"], rel=1e-9)


def test_identification_motion_separates_alpha_from_beta(rig: StepTestRig, engine: BeamEngine) -> None:
    """The claim behind the motion: step_30 alone leaves α, β correlated −1 (hundreds of %); the torque-limited
    identification motion brings their predicted 1σ at set 1 of the acceptance run to 0.8 % and 4.6 %."""
    step = load_motion(resolve_motion("single_rod/step_30"))
    ident = load_motion(resolve_motion("single_rod/ident_mode2"))
    alone = predict_uncertainty(engine, [step], 2e11, 0.5, 4e-5)
    both = predict_uncertainty(engine, [step, ident], 2e11, 0.5, 4e-5)
    assert abs(alone.correlation[1, 2]) > 0.999 and alone.relative_std["beta"] > 1.0
    assert both.relative_std["alpha"] < 0.02 and both.relative_std["beta"] < 0.10
    assert abs(both.correlation[1, 2]) < 0.99
    assert both.relative_std["youngs_modulus"] < 1e-4


def test_load_torque_at_rest_is_the_gravity_moment(rig: StepTestRig, engine: BeamEngine) -> None:
    theta = math.radians(30.0)
    hold = Motion(np.array([0.0, 0.5]), (rig.motor,), np.array([[theta], [theta]]))
    _, tau = load_torque(engine, 2e11, 0.5, 4e-5, hold)
    rho_a = rig.material.density * rig.area
    a0 = float((rig.rod_base - rig.pivot) @ rig.rod_direction)
    arm_tip = float((rig.tip_com - rig.pivot) @ rig.rod_direction)
    rigid = 9.81 * math.sin(theta) * (rho_a * rig.length * (a0 + rig.length / 2) + rig.tip_mass * arm_tip)
    # The motor holds against gravity (negative about +y); the rod's sag under gravity lengthens the lever ~3 %.
    assert np.median(tau) == pytest.approx(-rigid, rel=0.05)
    assert np.median(tau) < -rigid


def test_load_torque_of_a_stiff_rod_is_rigid_body_dynamics(rig: StepTestRig, engine: BeamEngine) -> None:
    t = np.arange(0.0, 0.6, 1e-3)
    accel = 4.0
    motion = Motion(t, (rig.motor,), (0.5 * accel * t**2)[:, None])
    # Stiff (f₁ ≈ 100 Hz) and strongly damped (ζ₁ ≈ 0.3), so the onset transient is gone after 0.1 s.
    time, tau = load_torque(engine, 2e14, 0.0, 1e-3, motion)
    rho_a = rig.material.density * rig.area
    a0 = float((rig.rod_base - rig.pivot) @ rig.rod_direction)
    arm_tip = float((rig.tip_com - rig.pivot) @ rig.rod_direction)
    inertia = (rho_a * ((a0 + rig.length) ** 3 - a0**3) / 3 + rig.tip_mass * arm_tip**2 + rig.tip_inertia_axis)
    theta = 0.5 * accel * time**2
    gravity = 9.81 * np.sin(theta) * (rho_a * rig.length * (a0 + rig.length / 2) + rig.tip_mass * arm_tip)
    inner = (time > 0.1) & (time < 0.5)
    np.testing.assert_allclose(tau[inner], inertia * accel - gravity[inner], rtol=0.02, atol=5e-3)


def test_fitting_rig_step_test_is_within_its_servo() -> None:
    """fit_rig/step_30 is slowed (0.37 s ramps) so that its XM540-W270 can play it: within the speed limit and,
    for any E in the design range at the least damping, within 80 % of the stall torque."""
    fit_rig = load_rig("fit_rig")
    step = load_motion(resolve_motion("fit_rig/step_30"))
    rate = np.abs(np.diff(step.positions[:, 0]) / np.diff(step.time))
    assert rate.max() <= 0.9 * fit_rig.max_velocity
    engine = BeamEngine(fit_rig)
    peaks = [np.abs(load_torque(engine, e, 0.1, 1e-5, step)[1]).max() for e in np.linspace(1.5e11, 2.2e11, 5)]
    assert max(peaks) <= 0.8 * fit_rig.stall_torque
