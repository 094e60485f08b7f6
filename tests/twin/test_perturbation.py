"""Tests of the twin's perturbation (retarget.twin.perturbation) and its effect on the live twin (single_rod).

Parsing names every bad key and value. The effects, each against the unperturbed twin on the same goals: a
stiffness × s rings √s faster (the rod's clamped modes with the shaft held: ideal servo, no gravity, small
amplitude; the dominant frequency); a damping × d scales α and β, and more of it decays the ring faster; a servo P
gain × k sags 1/k as much under the same load (the P loop's sag τ/kp); a latency L is the unperturbed response
delayed by L.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.twin.perturbation import PERTURBATION_KEYS, TwinPerturbation, parse_perturbation
from retarget.twin.simulation import ServoSettings, TwinSimulation

BUS_PERIOD_S = 0.002


def test_parse_reads_every_key_and_round_trips() -> None:
    p = parse_perturbation("stiffness=1.07, damping=1.5,servo_kp=1.3,latency=0.01,marker_noise=0.0003,servo_kd=0")
    assert p == TwinPerturbation(1.07, 1.5, 1.3, 0.0, 0.01, 0.0003)
    assert parse_perturbation(p.to_text()) == p
    assert parse_perturbation("") == TwinPerturbation() and TwinPerturbation().is_identity
    assert not p.is_identity and TwinPerturbation(marker_noise=1e-3).is_identity
    assert set(p.to_json()) == set(PERTURBATION_KEYS)


@pytest.mark.parametrize(("text", "named"), [
    ("stifness=1.1", "unknown name 'stifness' (names: stiffness, damping, servo_kp, servo_kd, latency, marker_noise)"),
    ("stiffness=abc", "'stiffness=abc': 'abc' is not a number"),
    ("stiffness=0", "stiffness=0.0: must be a positive factor"),
    ("servo_kp=-1", "servo_kp=-1.0: must be a positive factor"),
    ("damping=-0.5", "damping=-0.5: must be a factor of 0 or more"),
    ("latency=2", "latency=2.0: must be within 0 and 1 s"),
    ("marker_noise=nan", "'marker_noise=nan': not a finite number"),
    ("stiffness", "'stiffness': expected NAME=VALUE"),
    ("damping=1,damping=2", "'damping' given twice"),
])
def test_parse_names_the_bad_key_or_value(text: str, named: str) -> None:
    with pytest.raises(InputError, match=None) as err:
        parse_perturbation(text)
    assert named in str(err.value)


def test_reduced_scales_stiffness_and_rayleigh_damping(rod_twin_model) -> None:
    rs = rod_twin_model.reduced
    out = TwinPerturbation(stiffness=1.21, damping=1.5).reduced(rs)
    b0, b1 = rs.bodies[0], out.bodies[0]
    assert np.allclose(b1.stiffness0, 1.21 * b0.stiffness0) and b1.cubature.mu == pytest.approx(1.21 * b0.cubature.mu)
    assert (b1.alpha, b1.beta) == pytest.approx((1.5 * b0.alpha, 1.5 * b0.beta))
    assert TwinPerturbation().reduced(rs) is rs


def _run(model, perturbation: TwinPerturbation, duration: float, goal_of, sample=None):
    """The tip's positions (n, 3) [m] at the simulation's steps, goals ``goal_of(t)`` sent every bus period."""
    sim = TwinSimulation(model, perturbation=perturbation)
    n = round(duration / BUS_PERIOD_S)
    sim.push(0.0, np.array([goal_of(0.0)]), np.zeros(1))
    sim.start()
    t, x = [sim.time], [sim.poses()[0, :3]]
    for k in range(1, n + 1):
        sim.push(k * BUS_PERIOD_S, np.array([goal_of(k * BUS_PERIOD_S)]), np.zeros(1))
        sim.advance(60.0, lambda tt, p, _s: (t.append(tt), x.append(p[0, :3])))
    return sim, np.array(t), np.array(x)


def _frequency(t: np.ndarray, x: np.ndarray, after: float) -> float:
    """The dominant frequency [Hz] of the tip's x after ``after`` [s] (Hann window, zero-padded FFT)."""
    keep = t > after
    xs = x[keep, 0] - x[keep, 0].mean()
    spectrum = np.abs(np.fft.rfft(xs * np.hanning(xs.size), 1 << 17))
    return float(np.fft.rfftfreq(1 << 17, t[1] - t[0])[np.argmax(spectrum)])


def _decrement(t: np.ndarray, x: np.ndarray, after: float) -> float:
    """Log decrement per period of the tip's x about its mean: a line through the logarithms of its peaks."""
    keep = t > after
    xs = x[keep, 0] - x[keep, 0].mean()
    up = np.flatnonzero((xs[:-1] < 0) & (xs[1:] >= 0))
    peaks = np.array([np.max(xs[a:b]) for a, b in itertools.pairwise(up)])
    return -float(np.polyfit(np.arange(peaks.size), np.log(peaks), 1)[0])


@pytest.fixture(scope="module")
def held_rod(rod_twin_model):
    """The test model with its shaft held exactly (an ideal position source) and no gravity (an upright rod's
    weight softens it by a load that does not scale with the stiffness): the rod's own clamped modes."""
    from retarget.model.servo import IDEAL, SERVO_MODELS
    from retarget.sim.reduced.system import with_servos

    reduced = with_servos(rod_twin_model.reduced, [SERVO_MODELS[IDEAL]] * len(rod_twin_model.motors))
    return replace(rod_twin_model, reduced=replace(reduced, gravity=np.zeros(3)))


def _nudge(t: float) -> float:
    """A small, quick move (2 mrad in 10 ms) that sets the rod ringing in its first mode (linear amplitudes)."""
    return 0.002 * min(max((t - 0.01) / 0.01, 0.0), 1.0)


def test_stiffness_rings_sqrt_s_faster_and_damping_decays_faster(held_rod) -> None:
    runs = {name: _run(held_rod, p, 2.0, _nudge)[1:] for name, p in {
        "model": TwinPerturbation(), "stiffer": TwinPerturbation(stiffness=1.21),
        "undamped": TwinPerturbation(damping=0.0), "damped": TwinPerturbation(damping=20.0),
        "more damped": TwinPerturbation(damping=30.0)}.items()}
    f, f_k = _frequency(*runs["model"], 0.05), _frequency(*runs["stiffer"], 0.05)
    assert 3.0 < f < 7.0, f  # the rod's first clamped mode (the test model's basis varies a little between builds)
    assert f_k / f == pytest.approx(1.1, rel=0.02), (f, f_k)  # √1.21
    # More Rayleigh damping, faster decay (α and β themselves scale exactly: test_reduced_scales_…). The library's
    # α = 0.2 1/s hardly damps the mode in 2 s (α damps the rod's nodes; most of the mode's kinetic energy is the
    # rigid tip mass's), so the factors are 20 and 30; the decrement is not linear in them (the damping is not
    # proportional: the tip mass is undamped), and at damping 0 what is left is the beat with the other modes.
    delta = {name: _decrement(*runs[name], 0.05) for name in ("undamped", "damped", "more damped")}
    assert delta["more damped"] > delta["damped"] + 0.03 > delta["undamped"] + 0.06, delta


def test_servo_kp_scales_the_loop_and_its_sag(rod_twin_model) -> None:
    goal = np.array([np.pi / 2])  # the rod horizontal: the largest moment on the shaft
    sags = []
    for kp in (1.0, 2.0):
        sim = TwinSimulation(rod_twin_model, perturbation=TwinPerturbation(servo_kp=kp))
        sim.push(0.0, goal, np.zeros(1))
        sim.start()
        factory = sim.loop_servos(sim.settings)[0]
        assert sim.engine.servos.params[0][0] == pytest.approx(factory.kp)  # the running loop is the scaled one
        sags.append(sim.shafts()[0, 0] - goal[0])
        off = ServoSettings(np.array([False]), sim.settings.gains, sim.settings.pwm_limit)
        assert sim.loop_servos(off)[0].kp < 1e-9  # without drive there is no gain to scale
    assert sags[0] > 0.05 and sags[1] / sags[0] == pytest.approx(0.5, rel=0.02)


def test_latency_delays_the_response(rod_twin_model) -> None:
    def step(t: float) -> float:
        return 0.3 if t >= 0.05 else 0.0

    _s, t0, x0 = _run(rod_twin_model, TwinPerturbation(), 0.3, step)
    sim, t1, x1 = _run(rod_twin_model, TwinPerturbation(latency=0.02), 0.3, step)
    assert sim.lag_s < sim.dt  # the simulation keeps up with the bus; it only plays the goals late
    assert t1[-1] <= 0.3 + 1e-9
    later = np.interp(t1, t0 + 0.02, x0[:, 0], left=x0[0, 0])
    assert np.max(np.abs(x1[:, 0] - later)) < 1e-6
    assert np.max(np.abs(x1[:, 0] - np.interp(t1, t0, x0[:, 0]))) > 1e-2  # it does move in between
