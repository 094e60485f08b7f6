"""Tests of retarget.fit.beam_servo (the turning beam on a servo-driven shaft) against theory and references."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import eigh
from scipy.optimize import brentq

from retarget.fit.beam import build_beam_model, rotation_about
from retarget.fit.beam_servo import (
    DynamixelLoop,
    PlantError,
    PlantState,
    build_servo_beam,
    quasi_static_tip,
)
from retarget.fit.rig import load_rig
from retarget.model.servo import SERVO_MODELS, ServoParams

XM430 = SERVO_MODELS["XM430-W210"]
#: single_rod's servo: the XM430-W210 at P 800 with the robot file's no-load speed (8.06 rad/s).
SERVO = load_rig("single_rod").servo


@pytest.fixture(scope="module")
def rig():
    return load_rig("single_rod")


def smooth_step(t: np.ndarray, start: float, ramp: float, amplitude: float):
    """A quintic step from 0 to ``amplitude`` over ``ramp`` from ``start``: angle, rate, acceleration."""
    s = np.clip((t - start) / ramp, 0.0, 1.0)
    inside = (s > 0) & (s < 1)
    g = amplitude * (10 * s**3 - 15 * s**4 + 6 * s**5)
    gd = np.where(inside, amplitude * (30 * s**2 - 60 * s**3 + 30 * s**4) / ramp, 0.0)
    gdd = np.where(inside, amplitude * (60 * s - 180 * s**2 + 120 * s**3) / ramp**2, 0.0)
    return g, gd, gdd


def rigid_inertia_and_moment(rig, rotor: float):
    """Rotary inertia about the motor axis [kg m²] and the gravity moment θ → [N m] of the undeformed rig, from
    its world geometry (rod, tip, hub)."""
    rho_a = rig.material.density * rig.area
    a0 = float((rig.rod_base - rig.pivot) @ rig.rod_direction)
    length = rig.length

    def perp(r):
        r = r - (r @ rig.axis) * rig.axis
        return float(r @ r)

    tip, hub = rig.tip_com - rig.pivot, rig.hub_com - rig.pivot
    inertia = (rotor + rho_a * ((a0 + length) ** 3 - a0**3) / 3.0 + rig.tip_mass * perp(tip) + rig.tip_inertia_axis
               + rig.hub_mass * perp(hub) + rig.hub_inertia_axis)
    rod_centre = rig.rod_base + 0.5 * length * rig.rod_direction - rig.pivot

    def moment(theta: float) -> float:
        rot = rotation_about(rig.axis, np.array([theta]))[0]
        total = sum(m * np.cross(rot @ r, rig.gravity) for m, r in
                    ((rho_a * length, rod_centre), (rig.tip_mass, tip), (rig.hub_mass, hub)))
        return float(total @ rig.axis)

    return inertia, moment


# -- the loop ------------------------------------------------------------------------------------------------------
def test_loop_is_the_dynamixel_law_and_agrees_with_the_engines_implementation() -> None:
    from retarget.sim.servo import pack_params, servo_torque

    full = XM430.with_values(ki=40.0, kd=0.05, kff1=0.02, coulomb_friction=0.03, viscous_friction=0.01,
                             duty_limit=0.8)
    loop = DynamixelLoop.from_params(full)
    par = pack_params([full])[0]
    rng = np.random.default_rng(3)
    for _ in range(200):
        g, gd, th, w, iota = rng.normal(0.0, [0.2, 1.0, 0.2, 1.0, 0.01])
        u = full.kp * (g - th) + full.ki * iota + full.kd * (gd - w) + full.kff1 * gd
        duty = np.clip(u / full.stall_torque, -0.8, 0.8)
        expected = (full.stall_torque * (duty - w / full.max_velocity) - 0.03 * np.tanh(w / 0.02) - 0.01 * w)
        assert loop.torque(g, gd, th, w, iota) == pytest.approx(expected, rel=1e-12, abs=1e-14)
        # The engines smooth the clip over ±3 % of the limit; away from it both laws are the same.
        if abs(abs(u / full.stall_torque) - 0.8) > 0.03 * 0.8:
            assert servo_torque(par, g, gd, th, w, iota)[0] == pytest.approx(expected, rel=1e-12, abs=1e-14)
    with pytest.raises(PlantError, match="ideal"):
        DynamixelLoop.from_params(SERVO_MODELS["ideal"])


def test_fast_assembly_equals_the_beam_models_matrices(rig) -> None:
    plant = build_servo_beam(rig)
    m = plant.model
    for theta, rate, acc in ((0.0, 0.0, 0.0), (0.7, -2.0, 30.0), (-1.3, 5.0, -200.0)):
        expected = m.matrices(plant.youngs_modulus, plant.alpha, plant.beta, theta, rate, acc,
                              m.gravity_local(np.array([theta]))[0])
        got = plant._assembly.matrices(rate, acc, plant._assembly.gravity_local(theta))
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


# -- (c) statics ---------------------------------------------------------------------------------------------------
def test_static_sag_of_the_horizontal_rod_balances_gravity(rig) -> None:
    plant = build_servo_beam(rig)
    _, moment = rigid_inertia_and_moment(rig, 0.0)
    # kp δθ = gravity moment: the goal that holds the rod horizontal (where its sag does not move its weight
    # along gravity) is π/2 − M(π/2)/kp.
    horizontal = np.pi / 2
    goal = horizontal - moment(horizontal) / SERVO.kp
    rest = plant.equilibrium(goal)
    assert rest.shaft == pytest.approx(horizontal, abs=1e-9)
    assert horizontal - goal == pytest.approx(0.0811, abs=5e-4)  # 1.12 N m over 13.8 N m/rad
    # Held at π/2 itself, the shaft sags past horizontal and the bent rod's weight moves: within 0.3 % still.
    rest = plant.equilibrium(horizontal)
    assert SERVO.kp * (rest.shaft - horizontal) == pytest.approx(moment(rest.shaft), rel=3e-3)
    # The static beam is the prescribed model's static solve at the sagged shaft.
    m = plant.model
    _, k, f = m.matrices(plant.youngs_modulus, 0, 0, rest.shaft, 0, 0, m.gravity_local(np.array([rest.shaft]))[0])
    np.testing.assert_allclose(rest.q, np.linalg.solve(k, f), rtol=1e-10)
    # Integral action carries the load: the shaft holds the goal itself.
    pi_rest = build_servo_beam(rig, SERVO.with_values(ki=20.0)).equilibrium(horizontal)
    assert pi_rest.shaft == horizontal
    assert 20.0 * pi_rest.integral == pytest.approx(-moment(horizontal), rel=1e-9)


def test_a_pose_beyond_the_holding_torque_is_refused(rig) -> None:
    weak = XM430.with_values(stall_torque=1.0)
    plant = build_servo_beam(rig, weak)
    plant.equilibrium(0.3)  # 0.4 N m: held
    with pytest.raises(PlantError, match="more than the servo gives"):
        plant.equilibrium(np.pi / 2)  # 1.12 N m


def test_intent_is_the_static_tip_at_the_input_angle(rig) -> None:
    plant = build_servo_beam(rig)
    angles = np.array([0.0, 0.4, -1.0])
    tips = plant.intent(angles)
    for theta, tip in zip(angles, tips):
        q = plant.static_deflection(np.array([theta]))
        np.testing.assert_allclose(tip, plant.model.tip_positions(np.array([theta]), q)[0])
    np.testing.assert_allclose(quasi_static_tip(plant.model, plant.youngs_modulus, angles), tips)
    # Upright the rod does not bend; tilted it sags away from the rigid pose.
    rigid = plant.model.tip_positions(angles, np.zeros((3, plant.n_dofs)))
    assert np.linalg.norm(tips[0] - rigid[0]) < 1e-12
    assert np.linalg.norm(tips[1] - rigid[1]) > 1e-3


# -- (a) the rigid limit -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("servo", [SERVO, XM430.with_values(ki=40.0, kd=0.05, kff1=0.02, coulomb_friction=0.03,
                                                                viscous_friction=0.01)], ids=["P", "PID+friction"])
def test_the_compiled_loop_is_the_python_step_to_round_off(rig, servo) -> None:
    """:meth:`ServoBeam.simulate` (compiled) against :meth:`ServoBeam.simulate_reference` (one Python step per
    point): a fast step that clips the duty, then the ring-out; every term of the loop in the second case."""
    plant = build_servo_beam(rig, servo)
    t = np.arange(0.0, 0.8, 1e-3)
    g, gd, _ = smooth_step(t, 0.05, 0.1, 0.5)
    run, ref = plant.simulate(t, g, gd), plant.simulate_reference(t, g, gd)
    assert np.sum(np.abs(run.duty) >= servo.duty_limit) > 10  # the clip is crossed
    for name, scale in (("shaft", 1.0), ("speed", 10.0), ("q", 1.0), ("tip_position_m", 1.0), ("torque", 3.0),
                        ("integral", 1.0)):
        assert np.max(np.abs(getattr(run, name) - getattr(ref, name))) < 1e-10 * scale, name
    # The shaft's acceleration is the secant iteration's unknown: equal to its tolerance (1e-9 relative).
    assert np.max(np.abs(run.shaft_acc - ref.shaft_acc)) < 1e-8 * (1.0 + np.abs(ref.shaft_acc).max())


def test_a_step_the_compiled_loop_cannot_solve_is_a_plant_error_naming_when(rig) -> None:
    """A shaft row without slope (a negative inertia) stops both loops at the first point, with the same words."""
    plant = build_servo_beam(rig)
    broken = replace(plant, shaft=replace(plant.shaft, inertia=-1.0))
    t = np.arange(0.0, 0.05, 1e-3)
    for simulate in (broken.simulate, broken.simulate_reference):
        with pytest.raises(PlantError, match=r"at t = 0\.0000 s: the shaft equation lost its slope"):
            simulate(t, np.zeros_like(t), np.zeros_like(t))


def test_rigid_rod_follows_the_one_degree_of_freedom_shaft_ode(rig) -> None:
    plant = build_servo_beam(rig, youngs_modulus=200e9 * 1e4)  # rod modes ~100x higher: a rigid arm
    inertia, moment = rigid_inertia_and_moment(rig, SERVO.rotor_inertia)
    assert plant.shaft.inertia == pytest.approx(inertia, rel=1e-12)
    t = np.arange(0.0, 1.0, 1e-3)
    g, gd, _ = smooth_step(t, 0.05, 0.15, 0.8)  # fast enough to clip the duty for ~0.4 s
    run = plant.simulate(t, g, gd)
    assert np.sum(np.abs(run.duty) >= 1.0) * 1e-3 > 0.3

    def rhs(time, y):
        gg, _, _ = smooth_step(np.array([time]), 0.05, 0.15, 0.8)
        duty = np.clip(SERVO.kp * (gg[0] - y[0]) / SERVO.stall_torque, -1.0, 1.0)
        tau = SERVO.stall_torque * (duty - y[1] / SERVO.max_velocity)
        return [y[1], (tau + moment(y[0])) / inertia]

    ode = solve_ivp(rhs, (0.0, t[-1]), [0.0, 0.0], method="DOP853", rtol=1e-11, atol=1e-12, t_eval=t)
    assert np.abs(ode.y[0] - run.shaft).max() < 1e-4  # of a 1.2 rad swing


def test_saturated_motor_runs_up_exponentially_to_its_no_load_speed(rig) -> None:
    # No gravity, a rigid rod, a goal far away: the duty stays at its limit and J ω̇ = stall (1 − ω/no_load).
    plant = build_servo_beam(replace(rig, gravity=np.zeros(3)), youngs_modulus=200e9 * 1e4)
    dt = 5e-4
    t = np.arange(0.0, 0.4, dt)
    run = plant.simulate(t, np.where(t > 0, 4.0, 0.0), np.zeros_like(t))
    assert run.duty[1:].min() == 1.0
    tau_m = plant.shaft.inertia * SERVO.max_velocity / SERVO.stall_torque
    # The trapezoidal rule sees the goal's jump as a ramp over the first step: the run-up starts dt/2 late.
    theory = SERVO.max_velocity * (1.0 - np.exp(-np.maximum(t - 0.5 * dt, 0.0) / tau_m))
    # The torque's jump first rings the rotor against the stiff rod (a 1.4 kHz mode, gone in ~20 ms).
    settled = t >= 0.05
    assert np.abs(run.speed - theory)[settled].max() < 2e-5 * SERVO.max_velocity
    assert run.torque[-1] == pytest.approx(SERVO.stall_torque * (1 - run.speed[-1] / SERVO.max_velocity))


# -- (b) the coupled frequencies -----------------------------------------------------------------------------------
def hub_beam_frequencies(ei: float, rho_a: float, length: float, tip_mass: float, hub_inertia: float, spring: float,
                         guesses_hz: np.ndarray) -> np.ndarray:
    """Exact natural frequencies [Hz] of a uniform Euler–Bernoulli beam clamped to a hub of inertia ``hub_inertia``
    on a torsion spring ``spring`` at x = 0 (pinned there), with a point mass at x = L: the roots of the 4 × 4
    boundary determinant of W = A cosh βx + B sinh βx + C cos βx + D sin βx, bracketed ±10 % around guesses.

    W(0) = 0, (k − ω²J) W'(0) = EI W''(0), W''(L) = 0, −EI W'''(L) = ω² m W(L)."""

    def det(w: float) -> float:
        b = (rho_a * w * w / ei) ** 0.25
        ch, sh, c, s = np.cosh(b * length), np.sinh(b * length), np.cos(b * length), np.sin(b * length)
        hub = spring - w * w * hub_inertia
        eb3, mw2 = ei * b**3, w * w * tip_mass
        rows = np.array([
            [1.0, 0.0, 1.0, 0.0],
            [-ei * b**2, hub * b, ei * b**2, hub * b],
            [ch, sh, -c, -s],
            [-eb3 * sh - mw2 * ch, -eb3 * ch - mw2 * sh, -eb3 * s - mw2 * c, eb3 * c - mw2 * s],
        ])
        return float(np.linalg.det(rows / np.abs(rows).max(axis=1, keepdims=True)))

    out = []
    for f in guesses_hz:
        grid = 2 * np.pi * f * np.linspace(0.9, 1.1, 401)
        values = np.array([det(w) for w in grid])
        i = np.flatnonzero(np.sign(values[:-1]) != np.sign(values[1:]))[0]
        out.append(brentq(det, grid[i], grid[i + 1], xtol=1e-13) / (2 * np.pi))
    return np.array(out)


def test_coupled_hub_beam_frequencies_match_the_exact_frequency_equation(rig) -> None:
    # The theory's idealization: rod clamped on the axis, a point tip, no horn, no gravity.
    ideal = replace(rig, rod_base=rig.pivot.copy(), tip_com=rig.pivot + rig.length * rig.rod_direction,
                    tip_inertia_axis=0.0, hub_mass=0.0, hub_inertia_axis=0.0, gravity=np.zeros(3))
    for kp in (SERVO.kp, 3 * SERVO.kp):
        plant = build_servo_beam(ideal, SERVO.with_values(kp=kp))
        model_hz = plant.modes(0.0).undamped_hz
        theory = hub_beam_frequencies(plant.youngs_modulus * rig.second_moment, rig.material.density * rig.area,
                                      rig.length, rig.tip_mass, SERVO.rotor_inertia, kp, model_hz)
        for got, exact, tol in zip(model_hz, theory, (1e-7, 1e-5, 1e-4)):
            assert got == pytest.approx(exact, rel=tol)
    # On the SERVO at P 800 the shaft is not stiff: f₁ is 1.87 Hz, against 3.29 Hz clamped.
    assert build_servo_beam(ideal).modes(0.0).undamped_hz[0] == pytest.approx(1.868, abs=2e-3)


def test_simulated_ring_out_has_the_linearized_frequency_and_damping(rig) -> None:
    plant = build_servo_beam(rig)
    modes = plant.modes(0.0)
    t = np.arange(0.0, 2.5, 1e-3)
    g, gd, _ = smooth_step(t, 0.05, 0.1, 0.02)
    run = plant.simulate(t, g, gd)
    frequency, zeta = fitted_ring(t, run.tip_position_m @ rig.lateral_direction, 0.3)
    assert frequency == pytest.approx(modes.frequencies_hz[0], rel=2e-3)
    assert zeta == pytest.approx(modes.damping_ratios[0], rel=0.02)


# -- consistency of the coupling -----------------------------------------------------------------------------------
def test_stiff_loop_approaches_the_prescribed_angle_mode(rig) -> None:
    beam = build_beam_model(rig)
    mat = rig.material
    t = np.arange(0.0, 1.0, 1e-3)
    g, gd, gdd = smooth_step(t, 0.1, 0.3, 0.5)
    _, prescribed = beam.simulate(mat.youngs_modulus, mat.rayleigh_alpha, mat.rayleigh_beta, t, g, gd, gdd)
    swing = np.ptp(prescribed[:, 0])
    gaps = []
    for factor in (1e3, 1e4):
        stiff = SERVO.with_values(kp=SERVO.kp * factor, stall_torque=3.0 * factor, max_velocity=8.06 * factor)
        run = build_servo_beam(rig, stiff).simulate(t, g, gd)
        gaps.append(np.abs(run.tip_position_m - prescribed).max())
        # Fed the shaft the servo produced, the prescribed mode gives the same beam exactly.
        _, same = beam.simulate(mat.youngs_modulus, mat.rayleigh_alpha, mat.rayleigh_beta, t, run.shaft, run.speed,
                                run.shaft_acc)
        np.testing.assert_allclose(same, run.tip_position_m, atol=1e-12)
    assert gaps[1] < 1e-3 * swing
    assert gaps[0] / gaps[1] == pytest.approx(10.0, rel=0.05)  # the compliance τ/kp: first order in 1/kp


def test_free_shaft_conserves_angular_momentum(rig) -> None:
    """No gravity, no servo torque, a rod released bent: the shaft turns against the rod so that the angular
    momentum about the axis, summed from world kinematics (rotor, hub, rod by quadrature, tip), stays zero."""
    from retarget.fit.beam import _hermite

    offset = replace(rig, gravity=np.zeros(3), rod_base=rig.rod_base + 0.03 * rig.lateral_direction,
                     tip_com=rig.tip_com + 0.03 * rig.lateral_direction)
    free = SERVO.with_values(kp=1e-12, stall_torque=1e-9, max_velocity=1e12)
    plant = build_servo_beam(offset, free, n_elements=8)
    m = plant.model
    _, vecs = eigh(plant.youngs_modulus * m.stiffness_unit, m.mass)
    q0 = vecs[:, 0] / vecs[-2, 0] * 0.01  # 10 mm at the rod's end
    zero = np.zeros_like(q0)
    t = np.arange(0.0, 1.0, 5e-4)
    run = plant.simulate(t, np.zeros_like(t), np.zeros_like(t), start=PlantState(q0, zero, zero, 0.0, 0.0, 0.0))
    assert np.ptp(run.shaft) > 0.01

    rho_a = offset.material.density * offset.area
    rel = offset.rod_base - offset.pivot
    a0, b0 = rel @ offset.rod_direction, rel @ offset.lateral_direction
    le = offset.length / m.n_elements
    xg, wg = np.polynomial.legendre.leggauss(4)
    hub = offset.hub_com - offset.pivot
    hub_r2 = float(hub @ hub - (hub @ offset.axis) ** 2)

    def momentum(i: int) -> float:
        q = np.concatenate([[0.0, 0.0], run.q[i]])
        qd = np.concatenate([[0.0, 0.0], run.q_rate[i]])
        w = run.speed[i]
        total = (SERVO.rotor_inertia + offset.hub_inertia_axis + offset.hub_mass * hub_r2) * w
        for e in range(m.n_elements):
            for x, wt in zip(xg, wg):
                xi = 0.5 * (x + 1)
                n = _hermite(xi, le)[0]
                r = np.array([a0 + (e + xi) * le, b0 + n @ q[2 * e:2 * e + 4]])
                rd = np.array([0.0, n @ qd[2 * e:2 * e + 4]]) + w * np.array([-r[1], r[0]])
                total += rho_a * (r[0] * rd[1] - r[1] * rd[0]) * 0.5 * wt * le
        # The tip: mass at its world centre of mass (velocity by central differences), inertia at its angle.
        x_t = run.tip_position_m[i] - offset.pivot
        v_t = (run.tip_position_m[i + 1] - run.tip_position_m[i - 1]) / (t[i + 1] - t[i - 1])
        total += offset.tip_mass * float(np.cross(x_t, v_t) @ offset.axis)
        total += offset.tip_inertia_axis * (w + run.q_rate[i, -1])
        return total

    samples = range(1, len(t) - 1, 97)
    h = np.array([momentum(i) for i in samples])
    exchanged = np.abs(run.speed).max() * plant.shaft.inertia
    assert np.abs(h).max() < 5e-4 * exchanged  # measured 1e-4: the terms of second order in the deflection


# -- time step -----------------------------------------------------------------------------------------------------
def test_step_refinement_converges_at_second_order(rig) -> None:
    plant = build_servo_beam(rig)
    tips = {}
    for dt in (2e-3, 1e-3, 5e-4):
        t = np.arange(0.0, 1.5 + 1e-12, dt)
        g, gd, _ = smooth_step(t, 0.1, 0.3, 0.5)
        run = plant.simulate(t, g, gd)
        tips[dt] = run.tip_position_m[np.searchsorted(t, [0.5, 1.0, 1.5] - np.array(1e-9))]
    coarse = np.abs(tips[2e-3] - tips[1e-3]).max()
    fine = np.abs(tips[1e-3] - tips[5e-4]).max()
    assert coarse / fine == pytest.approx(4.0, rel=0.25)
    assert fine < 2e-5  # [m]: dt = 1 ms is converged to ~10 µm on a 0.5 m swing


def test_a_plant_needs_a_servo_with_a_loop(rig) -> None:
    with pytest.raises(PlantError, match="ideal"):
        build_servo_beam(rig, ServoParams("ideal"))
    with pytest.raises(PlantError, match="no servo"):
        build_servo_beam(replace(rig, servo=None))


def fitted_ring(time: np.ndarray, x: np.ndarray, start: float) -> tuple[float, float]:
    """Damped frequency [Hz] and damping ratio of a decaying oscillation after ``start`` (least squares)."""
    from scipy.optimize import curve_fit

    keep = time >= start

    def decay(tt, a, zeta, w, phase, c):
        return a * np.exp(-zeta * w * (tt - start)) * np.cos(w * np.sqrt(1 - zeta**2) * (tt - start) + phase) + c

    y = x[keep]
    fits = []
    for phase in np.linspace(-3, 3, 7):
        try:
            p, _ = curve_fit(decay, time[keep], y, p0=[np.ptp(y) / 2, 0.1, 2 * np.pi * 1.7, phase, y[-1]],
                             maxfev=20000)
        except RuntimeError:
            continue
        fits.append((np.sum((decay(time[keep], *p) - y) ** 2), p))
    _, (_, zeta, w, _, _) = min(fits, key=lambda f: f[0])
    return w * np.sqrt(1 - zeta**2) / (2 * np.pi), zeta


@pytest.mark.slow
def test_small_step_matches_the_full_fem_with_the_servo(rig) -> None:
    """The same goal step in the full FEM of single_rod (its own servo rows, BDF2, a 1/4-scale calibrated mesh) and
    in the servo–beam plant: a different code, the same physics (~2 min)."""
    from retarget.model.library import resolve_robot
    from retarget.model.loader import load_robot
    from retarget.sim import FunctionMotors, build_system, simulate

    duration, dt = 1.6, 1e-3

    def goal(t: float) -> np.ndarray:
        return np.array([smooth_step(np.array([t]), 0.05, 0.1, 0.05)[0][0]])

    def goal_rate(t: float) -> np.ndarray:
        return np.array([smooth_step(np.array([t]), 0.05, 0.1, 0.05)[1][0]])

    fem = simulate(build_system(load_robot(resolve_robot("single_rod"), mesh_scale=0.25)),
                   FunctionMotors(goal, goal_rate), duration, dt)
    t = np.arange(0.0, duration + 1e-9, dt)
    g, gd, _ = smooth_step(t, 0.05, 0.1, 0.05)
    run = build_servo_beam(rig).simulate(t, g, gd)
    x_beam = run.tip_position_m @ rig.lateral_direction
    x_fem = np.interp(t, fem.time, fem.body_position(rig.tip_link) @ rig.lateral_direction)
    assert np.ptp(x_beam) > 0.06
    assert np.abs(x_beam - x_fem).max() < 1e-3  # [m] of a 70 mm swing
    assert np.abs(run.shaft - np.interp(t, fem.time, fem.shaft_angles[:, 0])).max() < 1e-3  # [rad]
    f_beam, zeta_beam = fitted_ring(t, x_beam, 0.3)
    f_fem, zeta_fem = fitted_ring(t, x_fem, 0.3)
    assert f_beam == pytest.approx(f_fem, rel=5e-3)
    assert zeta_beam == pytest.approx(zeta_fem, rel=0.05)
