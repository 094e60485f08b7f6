"""Tests of retarget.fit.beam against Euler-Bernoulli theory and modal damping."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from retarget.fem.beam_theory import cantilever_first_frequency, cantilever_static_tip_deflection
from retarget.fit.beam import build_beam_model, rotation_about
from retarget.fit.rig import load_rig


@pytest.fixture(scope="module")
def point_tip_rig():
    """single_rod with the tip mass as a point at the rod's end (what the closed-form theory assumes)."""
    rig = load_rig("single_rod")
    return replace(rig, tip_com=rig.rod_base + rig.length * rig.rod_direction, tip_inertia_axis=0.0)


def test_rotation_about_matches_axis_angle() -> None:
    rot = rotation_about(np.array([0.0, 1.0, 0.0]), np.array([np.pi / 2]))[0]
    np.testing.assert_allclose(rot @ [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], atol=1e-15)


def test_first_frequency_matches_euler_bernoulli(point_tip_rig) -> None:
    rig = replace(point_tip_rig, gravity=np.zeros(3))
    model = build_beam_model(rig, 12)
    theory = cantilever_first_frequency(0.70, 0.005, 200e9, 7850.0, 0.1)
    assert model.natural_frequencies(200e9)[0] == pytest.approx(theory, rel=1e-6)
    # f ∝ √E without gravity.
    assert model.natural_frequencies(100e9)[0] == pytest.approx(theory / np.sqrt(2.0), rel=1e-6)


def test_gravity_softens_upright_and_stiffens_hanging_rod(point_tip_rig) -> None:
    free = build_beam_model(replace(point_tip_rig, gravity=np.zeros(3)), 12).natural_frequencies(200e9)[0]
    model = build_beam_model(point_tip_rig, 12)
    upright, hanging = model.natural_frequencies(200e9, 0.0)[0], model.natural_frequencies(200e9, np.pi)[0]
    assert upright < free < hanging
    # Tip load P = m g over the Euler buckling load of a cantilever: f² ≈ f₀² (1 − P/P_cr) to first order,
    # plus the rod's own weight; a 3-4 % drop for this rig.
    assert 0.95 < upright / free < 0.98


def test_static_deflection_of_horizontal_cantilever(point_tip_rig) -> None:
    # At θ = 90° the rod is horizontal: the static solve K q = f gives the tip deflection under weight.
    model = build_beam_model(point_tip_rig, 12)
    theta = np.pi / 2
    _, k, f = model.matrices(200e9, 0.0, 0.0, theta, 0.0, 0.0, model.gravity_local(np.array([theta]))[0])
    q = np.linalg.solve(k, f)
    theory = cantilever_static_tip_deflection(0.70, 0.005, 200e9, 7850.0, 0.1, 9.81)
    assert abs(q[-2]) == pytest.approx(theory, rel=1e-6)


def _free_decay(model, alpha: float, beta: float, duration: float = 3.0):
    """Release the rig from a first-mode shape at rest (motor held at 0) and return time, tip lateral motion."""
    from scipy.linalg import eigh

    _, k, _ = model.matrices(200e9, 0.0, 0.0, 0.0, 0.0, 0.0, model.gravity_local(np.zeros(1))[0])
    _, vecs = eigh(0.5 * (k + k.T), model.mass)
    t = np.arange(0.0, duration, 1e-3)
    zero = np.zeros_like(t)
    # Start from the static state plus the first mode: integrate with an initial displacement by adding it as
    # a constant offset of the equilibrium (linear system: superposition).
    q_static, _ = model.simulate(200e9, alpha, beta, t[:2], zero[:2], zero[:2], zero[:2])
    mode = vecs[:, 0] / vecs[-2, 0] * 0.01
    dt = t[1] - t[0]
    c, k, f = model.matrices(200e9, alpha, beta, 0.0, 0.0, 0.0, model.gravity_local(np.zeros(1))[0])
    q = q_static[0] + mode
    v = np.zeros_like(q)
    a = np.linalg.solve(model.mass, f - c @ v - k @ q)
    out = [q[-2]]
    lhs = model.mass + 0.5 * dt * c + 0.25 * dt * dt * k
    for _ in t[1:]:
        qp, vp = q + dt * v + 0.25 * dt * dt * a, v + 0.5 * dt * a
        a = np.linalg.solve(lhs, f - c @ vp - k @ qp)
        q, v = qp + 0.25 * dt * dt * a, vp + 0.5 * dt * a
        out.append(q[-2])
    return t, np.array(out) - q_static[0][-2], vecs[:, 0]


def test_trapezoidal_rule_keeps_undamped_amplitude() -> None:
    model = build_beam_model(load_rig("single_rod"), 8)
    _, w, _ = _free_decay(model, 0.0, 0.0)
    assert np.abs(w[-400:]).max() == pytest.approx(0.01, rel=2e-3)


def test_decay_matches_modal_rayleigh_damping() -> None:
    model = build_beam_model(load_rig("single_rod"), 8)
    alpha, beta = 0.8, 1e-4
    t, w, phi = _free_decay(model, alpha, beta)
    omega = 2 * np.pi * model.natural_frequencies(200e9)[0]
    # Modal damping ratio of mode 1: Rayleigh damping acts on the rod only (the tip body carries none).
    damping = alpha * model.mass_rod + beta * 200e9 * model.stiffness_unit
    zeta = phi @ damping @ phi / (2 * omega * phi @ model.mass @ phi)
    period = 2 * np.pi / omega
    peaks = [np.abs(w[(t >= s) & (t < s + period)]).max() for s in (0.0, 2.0)]
    measured = np.log(peaks[0] / peaks[1]) / (2.0 * omega)
    assert measured == pytest.approx(zeta, rel=0.03)


def test_compiled_time_loop_is_the_trapezoidal_rule_on_the_models_matrices() -> None:
    """simulate's compiled loop against the trapezoidal rule written out on :meth:`BeamModel.matrices` (the
    instantaneous damping, stiffness and load), on a swing with gravity, centrifugal and Euler terms all active."""
    rig = load_rig("single_rod")
    model = build_beam_model(rig, 6)
    t = np.arange(0.0, 0.4, 1e-3)
    theta = 0.6 * np.sin(7.0 * t) ** 2
    rate = np.gradient(theta, t)
    acc = np.gradient(rate, t)
    e, alpha, beta = 1.9e11, 0.7, 2e-5
    q, tip = model.simulate(e, alpha, beta, t, theta, rate, acc)
    g_loc = model.gravity_local(theta)
    dt, h2 = t[1] - t[0], 0.25 * (t[1] - t[0]) ** 2
    c, k, f = model.matrices(e, alpha, beta, theta[0], rate[0], acc[0], g_loc[0])
    ref = np.zeros_like(q)
    ref[0] = np.linalg.solve(k, f)
    v = np.zeros(model.n_dofs)
    a = np.linalg.solve(model.mass, f - k @ ref[0])
    for i in range(1, len(t)):
        c, k, f = model.matrices(e, alpha, beta, theta[i], rate[i], acc[i], g_loc[i])
        q_pred, v_pred = ref[i - 1] + dt * v + h2 * a, v + 0.5 * dt * a
        a = np.linalg.solve(model.mass + 0.5 * dt * c + h2 * k, f - c @ v_pred - k @ q_pred)
        ref[i], v = q_pred + h2 * a, v_pred + 0.5 * dt * a
    assert np.abs(ref).max() > 1e-4  # the swing bends the rod
    np.testing.assert_allclose(q, ref, rtol=0.0, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_allclose(tip, model.tip_positions(theta, ref), rtol=0.0, atol=1e-12)
