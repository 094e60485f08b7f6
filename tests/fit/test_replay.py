"""Tests of retarget.fit.replay and ``retarget check replay`` (the CLI contract)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from retarget.cli import main
from retarget.errors import InputError
from retarget.fit.beam_servo import build_servo_beam, quasi_static_tip
from retarget.fit.replay import ACCEPTANCE_RATIO, delivered_goals, goal_profile, replay
from retarget.fit.rig import load_rig
from retarget.motion import Motion, save_motion

MOTOR = "base_pitch"


@pytest.fixture(scope="module")
def rig():
    return load_rig("single_rod")


def step_motion(duration: float = 1.2, ramp: float = 0.25, amplitude: float = 0.35, rate: float = 100.0) -> Motion:
    """A quintic step of the single motor: rest 0.1 s, ramp, hold."""
    t = np.arange(0.0, duration + 1e-9, 1.0 / rate)
    s = np.clip((t - 0.1) / ramp, 0.0, 1.0)
    return Motion(t, (MOTOR,), (amplitude * (10 * s**3 - 15 * s**4 + 6 * s**5))[:, None])


def zvd_shaped(motion: Motion, frequency_hz: float, damping: float) -> Motion:
    """The motion convolved with the ZVD shaper of one mode (a stand-in plan: it cancels that mode's ringing)."""
    k = np.exp(-damping * np.pi / np.sqrt(1 - damping**2))
    half = 0.5 / (frequency_hz * np.sqrt(1 - damping**2))
    gains = np.array([1.0, 2 * k, k * k]) / (1 + k) ** 2
    t = motion.time
    dt = t[1] - t[0]
    grid = np.arange(t[0], t[-1] + 2 * half + dt, dt)
    q = motion.positions[:, 0]
    out = sum(a * np.interp(grid - i * half, t, q) for i, a in enumerate(gains))
    return Motion(grid, (MOTOR,), out[:, None])


def test_goal_profile_is_the_natural_spline_held_outside(rig) -> None:
    m = step_motion()
    grid = np.array([-0.5, 0.0, 0.2, 0.3, 1.2, 2.0])
    angle, rate, acc = goal_profile(m.time, m.positions[:, 0], grid)
    assert angle[0] == angle[1] == 0.0 and angle[-1] == pytest.approx(0.35)
    assert rate[0] == rate[-1] == acc[0] == acc[-1] == 0.0
    assert rate[3] == pytest.approx(0.35 * 30 * 0.8**2 * 0.2**2 / 0.25, rel=1e-3)  # s = 0.8 of the ramp


def test_delivered_goals_are_written_every_period_and_held_after_the_latency() -> None:
    m = step_motion()
    t, q = m.time, m.positions[:, 0]
    grid = np.arange(0.0, 1.0, 1e-3)
    continuous = goal_profile(t, q, grid)
    for got, want in zip(delivered_goals(t, q, grid), continuous):
        np.testing.assert_array_equal(got, want)
    delayed = delivered_goals(t, q, grid, latency=0.02)
    np.testing.assert_allclose(delayed[0][20:], continuous[0][:-20], atol=1e-15)
    np.testing.assert_allclose(delayed[1][20:], continuous[1][:-20], atol=1e-12)
    held, rate, acc = delivered_goals(t, q, grid, goal_period=0.01, latency=0.003)
    assert not rate.any() and not acc.any()  # a held goal does not move
    # Written at 0.003 + 0.01 k, the spline's value at 0.01 k, held until the next write.
    writes = 3 + 10 * np.arange(99)
    np.testing.assert_allclose(held[writes], goal_profile(t, q, grid[writes] - 0.003)[0], atol=1e-15)
    np.testing.assert_array_equal(held[writes[:-1] + 9], held[writes[:-1]])
    # Each write taking the profile half a period ahead: the value in the middle of its hold.
    led = delivered_goals(t, q, grid, goal_period=0.01, latency=0.003, goal_lead=0.005)[0]
    np.testing.assert_allclose(led[writes], goal_profile(t, q, grid[writes] - 0.003 + 0.005)[0], atol=1e-15)
    assert np.count_nonzero(np.diff(held)) <= 100 and np.ptp(held) > 0.3


def test_a_latency_delays_the_run_and_a_fine_goal_period_changes_little(rig) -> None:
    """Goals delivered ``latency`` late: the plant (time-invariant, at rest before the motion) does what it did,
    that much later, against the intent's authored timing. Written every replay step, held goals are nearly the
    continuous ones."""
    m = step_motion()
    base = replay(rig, m, m, dt=1e-3, tail=0.3)
    late = replay(rig, m, m, dt=1e-3, tail=0.3, latency=0.03)
    np.testing.assert_allclose(late.naive.tip_position_m[30:], base.naive.tip_position_m, atol=1e-9)
    np.testing.assert_allclose(late.intent_m[:len(base.intent_m)], base.intent_m, atol=1e-12)
    # Measured against the intent as late as the goals, the run is the undelayed one.
    shifted = replay(rig, m, m, dt=1e-3, tail=0.3, latency=0.03, intent_delay=0.03)
    np.testing.assert_allclose(shifted.naive.deviation_m[30:], base.naive.deviation_m, atol=1e-9)
    assert shifted.to_dict()["intent_delay_s"] == 0.03
    assert late.naive.metrics.rms_deviation_m > base.naive.metrics.rms_deviation_m
    assert late.to_dict()["latency_s"] == 0.03 and base.to_dict()["goal_period_s"] == 0.0
    same = replay(rig, m, m, dt=1e-3, tail=0.3, goal_period=1e-3)
    assert same.naive.metrics.peak_deviation_m == pytest.approx(base.naive.metrics.peak_deviation_m, rel=0.02)
    with pytest.raises(InputError, match="goal_period must be 0 or more"):
        replay(rig, m, m, goal_period=-1.0)
    from retarget.model.servo import IDEAL, SERVO_MODELS

    with pytest.raises(InputError, match="goal_period needs a modelled servo"):
        replay(rig, m, m, servo=SERVO_MODELS[IDEAL], goal_period=0.01)


def test_a_scaled_plant_changes_only_what_it_names(rig) -> None:
    """``StepTestRig.scaled``: the model errors a replay can carry (Young's modulus, Rayleigh damping, the tip's mass
    and inertia); a heavier tip lowers the plant's first mode as 1/sqrt of its share of the modal mass would."""
    scaled = rig.scaled(stiffness=1.1, damping=2.0, tip_mass=0.9)
    assert scaled.material.youngs_modulus == pytest.approx(1.1 * rig.material.youngs_modulus)
    assert scaled.material.rayleigh_alpha == 2.0 * rig.material.rayleigh_alpha
    assert scaled.material.rayleigh_beta == 2.0 * rig.material.rayleigh_beta
    assert scaled.tip_mass == pytest.approx(0.9 * rig.tip_mass)
    assert scaled.tip_inertia_axis == pytest.approx(0.9 * rig.tip_inertia_axis)
    assert scaled.material.density == rig.material.density and scaled.hub_mass == rig.hub_mass
    stiff = build_servo_beam(rig.scaled(stiffness=1.21)).modes(0.0).frequencies_hz
    heavy = build_servo_beam(rig.scaled(tip_mass=1.2)).modes(0.0).frequencies_hz
    nominal = build_servo_beam(rig).modes(0.0).frequencies_hz
    assert nominal[0] < stiff[0] and heavy[0] < nominal[0]
    with pytest.raises(InputError, match="tip_mass factor must be a positive number"):
        rig.scaled(tip_mass=0.0)


def test_replaying_the_input_as_its_own_plan_gives_ratio_one(rig) -> None:
    m = step_motion()
    report = replay(rig, m, m, dt=2e-3, tail=0.5)
    assert report.peak_ratio == 1.0 and report.rms_ratio == 1.0
    np.testing.assert_array_equal(report.naive.tip_position_m, report.plan.tip_position_m)
    # The intent: the static tip with the shaft at the input angle (not the servo's sagged shaft).
    plant = build_servo_beam(rig)
    goal = goal_profile(m.time, m.positions[:, 0], report.time_s)[0]
    np.testing.assert_allclose(report.intent_m, quasi_static_tip(plant.model, plant.youngs_modulus, goal))
    # At rest upright before the motion a P servo does not sag: the tip is on the intent.
    assert report.naive.deviation_m[0] < 1e-9


def test_a_shaped_plan_rings_less_than_the_naive_input(rig) -> None:
    m = step_motion()
    modes = build_servo_beam(rig).modes(0.2)
    plan = zvd_shaped(m, modes.frequencies_hz[0], modes.damping_ratios[0])
    report = replay(rig, m, plan, dt=2e-3, tail=1.0)
    naive, shaped = report.naive.metrics, report.plan.metrics
    assert shaped.ring_out_peak_m < 0.2 * naive.ring_out_peak_m
    assert shaped.peak_torque_nm < naive.peak_torque_nm
    assert shaped.stop_time_s > naive.stop_time_s  # the shaper lags by one period
    out = report.to_dict()
    assert out["peak_ratio"] == pytest.approx(shaped.peak_deviation_m / naive.peak_deviation_m)
    assert out["acceptance_ratio"] == ACCEPTANCE_RATIO and out["passes"] == (report.peak_ratio <= ACCEPTANCE_RATIO)
    json.dumps(out, allow_nan=False)


def test_motions_for_another_robot_are_refused(rig) -> None:
    m = step_motion()
    other = Motion(m.time, ("elbow",), m.positions)
    with pytest.raises(InputError, match="no joint 'base_pitch'.*it has elbow"):
        replay(rig, m, other)
    both = Motion(m.time, (MOTOR, "elbow"), np.hstack([m.positions, m.positions]))
    with pytest.raises(InputError, match="also drives elbow"):
        replay(rig, both, m)
    with pytest.raises(InputError, match="dt must be"):
        replay(rig, m, m, dt=0.0)


# -- the CLI -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("replay")
    m = step_motion(duration=1.0)
    save_motion(folder / "input.csv", m)
    modes = build_servo_beam(load_rig("single_rod")).modes(0.2)
    save_motion(folder / "plan.csv", zvd_shaped(m, modes.frequencies_hz[0], modes.damping_ratios[0]))
    return folder


def test_check_replay_prints_a_summary_and_json_last(files, capsys) -> None:
    assert main(["check", "replay", "single_rod", "--motion", str(files / "input.csv"), "--plan",
                 str(files / "plan.csv"), "--dt", "0.002", "--tail", "0.5", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("single_rod: replay in the servo-beam plant")
    assert any(line.lstrip().startswith("naive") for line in lines)
    assert "plan / naive: peak" in lines[-2]
    out = json.loads(lines[-1])
    for key in ("robot", "motor", "plant", "servo", "dt_s", "naive", "plan", "peak_ratio", "rms_ratio",
                "acceptance_ratio", "passes", "motion", "plan_file"):
        assert key in out
    for key in ("peak_deviation_m", "rms_deviation_m", "ring_out_peak_m", "peak_servo_error_rad", "peak_torque_nm",
                "peak_torque_ratio", "clipped_s", "stop_time_s"):
        assert key in out["naive"] and key in out["plan"]
    assert out["servo"]["model"] == "XM430-W210" and out["servo"]["kp"] == pytest.approx(13.81, rel=1e-3)
    assert out["plan"]["ring_out_peak_m"] < out["naive"]["ring_out_peak_m"]
    assert main(["check", "replay", "single_rod", "--motion", str(files / "input.csv"), "--plan",
                 str(files / "plan.csv"), "--dt", "0.002", "--tail", "0.5", "--goal-period", "0.01", "--latency",
                 "0.004", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1] == "  goals written every 10 ms, 0 ms ahead, and held, 4 ms after the plan's clock"
    assert json.loads(lines[-1])["goal_period_s"] == 0.01
    assert main(["check", "replay", "single_rod", "--motion", str(files / "input.csv"), "--plan",
                 str(files / "plan.csv"), "--dt", "0.002", "--tail", "0.5", "--intent-delay", "0.009"]) == 0
    assert "measured against the intent 9 ms late" in capsys.readouterr().out
    assert main(["check", "replay", "single_rod", "--motion", str(files / "input.csv"), "--plan",
                 str(files / "plan.csv"), "--dt", "0.002", "--tail", "0.5", "--tip-mass-factor", "1.1", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "the plant scaled: Young's modulus x 1, damping x 1, tip mass x 1.1" in lines[1]
    assert json.loads(lines[-1])["tip_mass_factor"] == 1.1


def test_check_replay_takes_a_servo_file_and_a_p_gain(files, capsys) -> None:
    servo = files / "servo.yaml"
    servo.write_text("servo: {model: XM430-W210, p_gain: 2400, max_velocity: 8.06}\n")
    common = ["check", "replay", "single_rod", "--motion", str(files / "input.csv"), "--plan",
              str(files / "plan.csv"), "--dt", "0.002", "--tail", "0.2", "--json"]
    assert main([*common, "--servo", str(servo)]) == 0
    from_file = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*common, "--p-gain", "2400"]) == 0
    from_flag = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert from_file["servo"]["kp"] == pytest.approx(3 * 13.8114, rel=1e-4) == from_flag["servo"]["kp"]
    assert from_file["naive"] == from_flag["naive"]
    ideal = files / "ideal.yaml"
    ideal.write_text("model: ideal\n")
    assert main([*common, "--servo", str(ideal)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["plant"].startswith("beam (ideal servo") and out["naive"]["peak_torque_nm"] is None


def test_check_replay_user_errors_exit_2(files, tmp_path, capsys) -> None:
    common = ["--motion", str(files / "input.csv"), "--dt", "0.002"]
    bad = tmp_path / "bad.csv"
    bad.write_text("time [s],base_pitch [deg]\n0.0,0\n0.01,abc\n")
    assert main(["check", "replay", "single_rod", *common, "--plan", str(bad)]) == 2
    assert "line 3" in capsys.readouterr().err
    other = tmp_path / "other.csv"
    other.write_text("time [s],elbow [deg]\n0.0,0\n0.01,1\n")
    assert main(["check", "replay", "single_rod", *common, "--plan", str(other)]) == 2
    assert "not a motion for this robot" in capsys.readouterr().err
    assert main(["check", "replay", "two_rods", *common, "--plan", str(files / "plan.csv")]) == 2
    assert "not a step-test rig" in capsys.readouterr().err
    servo = tmp_path / "servo.yaml"
    servo.write_text("servo: {model: XM430-W210, gain: 3}\n")
    assert main(["check", "replay", "single_rod", *common, "--plan", str(files / "plan.csv"), "--servo",
                 str(servo)]) == 2
    assert "unknown key gain" in capsys.readouterr().err
    assert main(["check", "replay", "single_rod", *common, "--plan", str(files / "plan.csv"), "--damping-factor",
                 "-1"]) == 2
    assert "damping factor must be a positive number" in capsys.readouterr().err
