"""Tests of the live reduced simulation (retarget.twin.simulation) on single_rod, its servo in the loop.

The live twin, fed the servo's goal sample by sample in small bursts (as the emulated bus does), must be the same
physics as the offline compiled run of the same goal (:func:`simulate_compiled` through the same
:class:`MotorHistory`): equal tip trajectories to Newton tolerance, hence the same ringing frequency (the reduced
model's first bending frequency, identified from the offline ring-out). The control tables' values change the
servo's loop mid-run: P Gain the stiffness, I Gain the state layout, Torque Enable the drive.
"""
from __future__ import annotations

import numpy as np
import pytest

from retarget.twin.simulation import MotorHistory, ServoSettings, TwinSimulation, static_state

STEP_RAD = 0.3
BUS_PERIOD_S = 0.002


def _goal_run(duration: float, goal: float = STEP_RAD, start: float = 0.0,
              at: float = 0.05) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """Goal samples every bus period: ``start`` until ``at`` [s], then a step to ``goal`` (no profile: ġ = 0)."""
    n = int(round(duration / BUS_PERIOD_S))
    return [(k * BUS_PERIOD_S, np.array([goal if k * BUS_PERIOD_S >= at else start]), np.zeros(1))
            for k in range(n + 1)]


def test_motor_history_interpolates_and_forgets() -> None:
    h = MotorHistory(2)
    h.append(0.0, np.array([0.0, 1.0]), np.array([1.0, 0.0]))
    h.append(1.0, np.array([1.0, 3.0]), np.array([3.0, 0.0]))
    h.append(1.0, np.array([9.0, 9.0]), np.array([9.0, 9.0]))  # not newer: ignored
    assert np.allclose(h.value(0.25), [0.25, 1.5]) and np.allclose(h.derivative(0.5), [2.0, 0.0])
    assert np.allclose(h.value(5.0), [1.0, 3.0]) and h.latest_time == 1.0 and len(h) == 2
    h.append(2.0, np.array([2.0, 3.0]), np.zeros(2))
    h.drop_before(1.5)
    assert len(h) == 2 and np.allclose(h.value(1.5), [1.5, 3.0])


@pytest.fixture(scope="module")
def live_and_offline(rod_twin_model):
    """1.2 s of the servo step simulated live (bursts of 10 samples, as between driver packets) and offline."""
    from retarget.sim.reduced.engine import simulate_compiled

    samples = _goal_run(1.2)
    sim = TwinSimulation(rod_twin_model)
    sim.push(*samples[0])
    sim.start()
    start = sim.engine.solve_static(sim.history.value(0.0)).native
    live_t, live_x = [0.0], [sim.poses()[0, :3]]
    for k in range(1, len(samples), 10):
        for s in samples[k : k + 10]:
            sim.push(*s)
        sim.advance(60.0, lambda t, p, _shafts: (live_t.append(t), live_x.append(p[0, :3])))
    history = MotorHistory(1)
    for s in samples:
        history.append(*s)
    offline = simulate_compiled(rod_twin_model.reduced, history, 1.2, sim.dt, start=start)
    i = rod_twin_model.reduced.rigid_index(rod_twin_model.bodies[0])
    return sim, np.array(live_t), np.array(live_x), offline.time, offline.states[:, 7 * i : 7 * i + 3]


def test_live_twin_equals_offline_run(live_and_offline) -> None:
    sim, t_live, x_live, t_off, x_off = live_and_offline
    assert sim.stats.steps == len(t_off) - 1 and sim.stats.resyncs == 0 and sim.stats.failures == 0
    assert np.allclose(t_live, t_off, atol=1e-9)
    # Same physics: same states up to Newton tolerance (1e-10 on the update) accumulated over 1200 steps.
    assert np.max(np.abs(x_live - x_off)) < 1e-7
    assert sim.lag_s < sim.dt


def _ring_frequency(t: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """Dominant frequency [Hz] and peak-to-peak [m] of the tip's x after the servo has settled (t > 0.3 s)."""
    keep = t > 0.3
    xs = x[keep, 0] - x[keep, 0].mean()
    freqs = np.fft.rfftfreq(xs.size, t[1] - t[0])
    spectrum = np.abs(np.fft.rfft(xs * np.hanning(xs.size)))
    return float(freqs[1 + np.argmax(spectrum[1:])]), float(np.ptp(xs))


def test_step_makes_the_tip_ring_at_the_models_first_frequency(live_and_offline) -> None:
    _sim, t_live, x_live, t_off, x_off = live_and_offline
    f_live, p2p = _ring_frequency(t_live, x_live)
    f_off, _ = _ring_frequency(t_off, x_off)
    # Within one FFT bin (the two windows may differ by a sample at the 0.3 s cut).
    assert f_live == pytest.approx(f_off, abs=1.0 / (t_off[-1] - 0.3))
    # It does ring, about the rotated rest pose: the tip's COM sits ~0.72 m above the shaft axis, which the servo
    # holds at the goal plus its sag under the rod's moment, so it moves ~0.72 sin(0.3 + sag) m sideways.
    assert p2p > 1e-3
    sim = live_and_offline[0]
    static = sim.engine.solve_static(np.array([STEP_RAD])).s
    shaft = sim.engine.shaft_angles(static, np.array([STEP_RAD]))[0]
    # The P loop's sag: the moment the structure takes from the shaft (its motor row's multiplier) over kp.
    assert shaft - STEP_RAD == pytest.approx(sim.engine.motor_torques(static)[0] / sim.servos[0].kp, rel=1e-6)
    assert shaft - STEP_RAD == pytest.approx(0.026, abs=1e-3)
    assert x_live[-200:, 0].mean() == pytest.approx(0.72 * np.sin(shaft), rel=0.05)


def test_falling_too_far_behind_restarts_at_rest(rod_twin_model) -> None:
    lines: list[str] = []
    sim = TwinSimulation(rod_twin_model, max_lag_s=0.05, log=lines.append)
    samples = _goal_run(0.3)
    sim.push(*samples[0])
    sim.start()
    for s in samples[1:]:
        sim.push(*s)
    assert sim.lag_s == pytest.approx(0.3)
    steps = sim.advance(60.0)
    assert sim.stats.resyncs == 1 and sim.stats.dropped_s == pytest.approx(0.3)
    assert steps == 0 and sim.time == pytest.approx(0.3) and "behind the servos" in lines[0]


def test_training_range_is_tracked_and_warned_once(rod_twin_model, live_and_offline) -> None:
    """With the training range recorded at half the largest deformation of the servo step, the live twin reports
    2x for the rod and logs one warning (the test artifact's cantilever basis records none: not tracked)."""
    from dataclasses import replace

    from retarget.sim.reduced.engine import simulate_compiled

    sim0 = live_and_offline[0]
    assert sim0.stats.training_range == {}
    rs = rod_twin_model.reduced
    body = rs.bodies[0]
    sl = rs.z_slice_u(0)
    samples = _goal_run(0.4)
    history = MotorHistory(1)
    for s in samples:
        history.append(*s)
    start = sim0.engine.solve_static(history.value(0.0)).native
    run = simulate_compiled(rs, history, 0.4, sim0.dt, start=start)
    z_def = run.states[:, sl.start + body.basis.n_rigid : sl.stop]
    largest = float(np.max(np.linalg.norm(z_def, axis=1)))
    basis = replace(body.basis, training_norm=0.5 * largest)
    model = replace(rod_twin_model, reduced=replace(rs, bodies=(replace(body, basis=basis),)))
    lines: list[str] = []
    sim = TwinSimulation(model, log=lines.append)
    sim.push(*samples[0])
    sim.start()
    for s in samples[1:]:
        sim.push(*s)
    sim.advance(60.0)
    assert sim.stats.training_range[body.name] == pytest.approx(2.0, rel=1e-6)
    warned = [line for line in lines if "training deformation" in line]
    assert len(warned) == 1 and body.name in warned[0] and "extrapolates" in warned[0]


def _feed(sim: TwinSimulation, t0: float, t1: float, goal: float, settings: ServoSettings) -> None:
    for t in np.arange(t0, t1 - 1e-9, BUS_PERIOD_S):
        sim.push(float(t), np.array([goal]), np.zeros(1), settings)


@pytest.fixture(scope="module")
def horizontal(rod_twin_model):
    """single_rod held horizontal (goal 90°) from rest at factory gains, then P Gain 1600, then I Gain 1000 (a
    new integral state), then torque off: the shaft trace per phase ``(t, angle, speed, torque, duty)``."""
    goal = np.pi / 2
    sim = TwinSimulation(rod_twin_model)
    factory = ServoSettings.of(sim.servos)
    static_sag = sim.engine.shaft_angles(static_state(sim.engine, np.array([goal])).s, np.array([goal]))[0] - goal
    phases = {"factory": factory,
              "p1600": ServoSettings(factory.torque_on, np.array([[1600.0, 0.0, 0.0]]), factory.pwm_limit),
              "i1000": ServoSettings(factory.torque_on, np.array([[800.0, 1000.0, 0.0]]), factory.pwm_limit),
              "off": ServoSettings(np.array([False]), np.array([[800.0, 1000.0, 0.0]]), factory.pwm_limit)}
    durations = {"factory": 1.0, "p1600": 2.5, "i1000": 2.0, "off": 0.3}
    sim.push(0.0, np.array([goal]), np.zeros(1), factory)
    sim.start()
    traces, t = {}, 0.0
    for name, settings in phases.items():
        _feed(sim, t + BUS_PERIOD_S, t + durations[name] + BUS_PERIOD_S, goal, settings)
        rows: list[np.ndarray] = []
        sim.advance(600.0, lambda ts, _p, shafts, rows=rows: rows.append(np.r_[ts, shafts[0]]))
        traces[name] = np.array(rows)
        t += durations[name]
    return sim, goal, static_sag, traces


def test_the_servo_holds_the_horizontal_rod_at_its_static_sag(horizontal) -> None:
    """Started quasi-static, the servo stays at the static sag (τ/kp) and reports the moment as torque and duty."""
    sim, goal, sag, traces = horizontal
    tr = traces["factory"]
    assert sag == pytest.approx(0.081, rel=0.01)
    assert np.max(np.abs(tr[:, 1] - goal - sag)) < 1e-3 * sag
    kp = sim.servos[0].kp
    assert tr[-1, 3] == pytest.approx(-kp * sag, rel=1e-3) and tr[-1, 4] == pytest.approx(-kp * sag / 3.0, rel=1e-3)


def test_p_gain_written_mid_run_halves_the_sag(horizontal) -> None:
    _sim, goal, sag, traces = horizontal
    tr = traces["p1600"]
    assert tr[-1, 1] - goal == pytest.approx(sag / 2, rel=0.02)
    assert np.ptp(tr[-250:, 1]) < 1e-3  # settled


def test_i_gain_adds_the_integral_state_and_removes_the_sag(horizontal) -> None:
    sim, goal, sag, traces = horizontal
    tr = traces["i1000"]
    assert abs(tr[-1, 1] - goal) < 0.02 * sag
    assert sim.stats.failures == 0 and sim.stats.resyncs == 0


def test_torque_off_lets_the_rod_fall_against_the_back_emf_alone(horizontal) -> None:
    """No drive: zero duty, the motor torque is the back EMF's −stall ω / no-load, and gravity pulls the rod on."""
    sim, goal, _sag, traces = horizontal
    tr = traces["off"][1:]  # the first step (1 ms) ends before the first sample with torque off (2 ms)
    servo = sim.servos[0]
    assert np.max(np.abs(tr[:, 4])) < 1e-9
    np.testing.assert_allclose(tr[:, 3], -servo.stall_torque * tr[:, 2] / servo.max_velocity, atol=1e-9)
    assert tr[-1, 1] - goal > 0.3 and tr[-1, 2] > 1.0  # falling on, past the horizontal
