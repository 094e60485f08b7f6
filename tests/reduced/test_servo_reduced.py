"""The servo model in the reduced engines: the reference stepper's Jacobian and goal sensitivities against finite
differences, its full-space limit against the absolute engine with the same servos, and the compiled engine against
the reference stepper (:mod:`retarget.sim.servo`)."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.model.servo import SERVO_MODELS
from retarget.sim.bdf import StepInputs
from retarget.sim.integrator import initial_state, simulate_states
from retarget.sim.motors import FunctionMotors
from retarget.sim.reduced.basis import ReducedBasis, rigid_modes
from retarget.sim.reduced.cubature import Cubature, _element_rows
from retarget.sim.reduced.stepper import ReducedState, residual_and_jacobian, solve_static, step
from retarget.sim.reduced.system import build_reduced_system, reference_bodies
from retarget.sim.scenarios import build_two_motor_rod
from retarget.sim.statics import solve_static as absolute_static
from retarget.sim.system import build_system

XM430 = SERVO_MODELS["XM430-W210"]
FULL_LOOP = XM430.with_values(ki=40.0, kd=0.05, kff1=0.02, coulomb_friction=0.03, viscous_friction=0.01)


@pytest.fixture(scope="module")
def absolute():
    model = build_two_motor_rod(length=0.3, diameter=0.004, separation=0.3, n_axial=3, n_around=6)
    return build_system(model.with_servos([FULL_LOOP, XM430]))


def _all_elements(elastic) -> Cubature:
    g = elastic.geometry
    e = np.arange(elastic.mesh.n_tets)
    return lambda modes: Cubature(e, np.ones(len(e)), _element_rows(elastic.mesh.tets, modes), g.grad, g.weights,
                                  elastic.mu, elastic.lam, 0.0)


def _reduced(absolute, full: bool):
    body = absolute.deformable[0]
    local = body.rest_positions - absolute.rigid[reference_bodies(absolute)[0]].reference_com
    if full:
        modes = np.eye(body.n_dofs)
        basis = ReducedBasis(modes, 0, 1.0, np.zeros(0))
    else:
        extra = np.random.default_rng(0).normal(size=(body.n_dofs, 4)) * 1e-2
        modes = np.hstack([rigid_modes(local, body.mass_matrix), extra])
        basis = ReducedBasis(modes, 6, 1.0, np.zeros(4))
    return build_reduced_system(absolute, [basis], [_all_elements(body.elastic)(modes)])


def _goals():
    return FunctionMotors(lambda t: [0.3 * (1 - np.cos(20 * t)), -0.1 * t], lambda t: [6 * np.sin(20 * t), -0.1])


def _random_point(rs, seed):
    rng = np.random.default_rng(seed)
    u = rs.reference_u()
    nb = rs.n_rigid
    u[: 7 * nb] += rng.normal(size=7 * nb) * 0.05
    u[7 * nb :] = rng.normal(size=rs.n_u - 7 * nb) * 0.003
    u[7 * nb : 7 * nb + 6] *= 1e-3  # small rigid-mode amplitudes, as the stepper's own Jacobian test
    v = rng.normal(size=rs.n_v)
    lam = rng.normal(size=rs.n_lambda)
    s = np.concatenate([u, v, lam])
    return s, u + rng.normal(size=rs.n_u) * 1e-3, v + rng.normal(size=rs.n_v) * 0.1


def test_reduced_layout_puts_the_servos_after_the_modes(absolute):
    rs = _reduced(absolute, full=False)
    nb = rs.n_rigid
    assert rs.servo.size == 3
    assert np.all(rs.servo.u_theta == 7 * nb + rs.n_z + np.arange(2))
    assert np.all(rs.servo.v_omega == 6 * nb + rs.n_z + np.arange(2))
    assert rs.z_slice == slice(7 * nb, 7 * nb + rs.n_z)


def test_reduced_jacobian_and_goal_sensitivities_against_finite_differences(absolute):
    rs = _reduced(absolute, full=False)
    s, ub, vb = _random_point(rs, 4)
    goal, goal_dot = np.array([0.2, -0.1]), np.array([1.5, 0.3])
    h, a = 1e-3, 500.0

    def res(x, g=goal, gd=goal_dot):
        return residual_and_jacobian(rs, x, StepInputs(ub, vb, h, g, gd, a), jacobian=False).residual

    lin = residual_and_jacobian(rs, s, StepInputs(ub, vb, h, goal, goal_dot, a))
    # The stepper's own Jacobian test's stencil: 4th order, z steps scaled by the modes' size (test_stepper.py).
    fd = np.zeros_like(lin.jacobian)
    scale = np.ones(len(s))
    amp = np.abs(rs.bodies[0].basis.modes).max(axis=0)
    scale[rs.z_slice_u(0)] = 0.1 / np.maximum(1.0, amp)
    scale[rs.n_u + rs.z_slice_v(0).start : rs.n_u + rs.z_slice_v(0).stop] = 0.1 / np.maximum(1.0, amp)
    for k in range(len(s)):
        e = np.zeros(len(s))
        e[k] = 1e-4 * scale[k]
        fd[:, k] = (-res(s + 2 * e) + 8 * res(s + e) - 8 * res(s - e) + res(s - 2 * e)) / (12 * e[k])
    rel = np.abs(fd - lin.jacobian) / (np.abs(fd).max(axis=1, keepdims=True) + 1e-8)
    assert np.max(rel) < 5e-5, np.unravel_index(np.argmax(rel), rel.shape)
    # The servo rows and columns are exact to the stencil's round-off.
    nu = rs.n_u
    servo_idx = np.concatenate([rs.servo.u_theta, nu + rs.servo.v_omega])
    assert np.max(rel[servo_idx]) < 1e-7 and np.max(rel[:, servo_idx]) < 1e-7
    for m in range(2):
        e = np.zeros(2)
        e[m] = 1e-7
        d_goal = (res(s, goal + e) - res(s, goal - e)) / 2e-7
        d_rate = (res(s, goal, goal_dot + e) - res(s, goal, goal_dot - e)) / 2e-7
        assert np.allclose(lin.r_theta[:, m], d_goal, atol=1e-6 * (1 + np.abs(d_goal).max()))
        assert np.allclose(lin.r_theta_dot[:, m], d_rate, atol=1e-6 * (1 + np.abs(d_rate).max()))
    # The goal enters only the servo rows: the ω rows (and e, with integral action).
    rows = np.flatnonzero(np.any(lin.r_theta != 0.0, axis=1))
    assert set(rows) <= set(rs.n_u + rs.servo.v_omega) | set(rs.n_u + rs.servo.v_e[rs.servo.v_e >= 0])


@pytest.fixture(scope="module", params=["P", "PID"])
def rod_on_servo(request):
    from retarget.sim.scenarios import build_rod_on_motor

    servo = XM430 if request.param == "P" else FULL_LOOP
    return build_system(build_rod_on_motor().with_servos([servo]))


@pytest.mark.slow
def test_full_space_reduced_statics_and_dynamics_equal_absolute_with_servos(rod_on_servo):
    absolute = rod_on_servo
    rs = _reduced(absolute, full=True)
    goal = np.array([0.3])
    st_abs = absolute_static(absolute, goal)
    st_red = solve_static(rs, goal)
    sa, sr = absolute.servo, rs.servo
    # Shaft sag, integral state and the motor torques agree.
    assert np.allclose(st_red.u[sr.u_theta], st_abs.u[sa.u_theta], atol=1e-9)
    assert np.allclose(st_red.u[sr.u_iota[sr.u_iota >= 0]], st_abs.u[sa.u_iota[sa.u_iota >= 0]], atol=1e-9)
    assert np.allclose(st_red.lam, st_abs.lam, atol=1e-7 * (1 + np.abs(st_abs.lam).max()))
    # Against the loop's own law: an integrating servo reaches its goal, a P-only one sags by τ/kp.
    shaft = st_abs.u[sa.u_theta[0]]
    if sa.u_iota[0] >= 0:
        assert shaft == pytest.approx(goal[0], abs=1e-10)
    else:
        from retarget.sim.dae import motor_reactions

        (_, rx), = motor_reactions(absolute, st_abs.u, st_abs.lam, np.array([shaft]))
        assert goal[0] - shaft == pytest.approx(-rx.force / XM430.kp, rel=1e-9)
    dt, n = 1e-3, 40
    goals = FunctionMotors(lambda t: [0.3 + 0.3 * (1 - np.cos(20 * t))], lambda t: [6 * np.sin(20 * t)])
    rec = []
    simulate_states(absolute, initial_state(absolute, st_abs.u).replace(lam=st_abs.lam), goals, dt, n,
                    callback=lambda k, s, i: rec.append(s))
    prev2, prev, cache = None, ReducedState(0.0, st_red.u, np.zeros(rs.n_v), st_red.lam), {}
    for k in range(n):
        new, _ = step(rs, prev, prev2, dt, goals, cache, k + 1, tol=1e-12)
        prev2, prev = prev, new
    moved = abs(rec[-1].u[sa.u_theta[0]] - st_abs.u[sa.u_theta[0]])
    assert moved > 0.01
    assert np.allclose(prev.u[sr.u_theta], rec[-1].u[sa.u_theta], atol=1e-8)
    assert np.allclose(prev.v[sr.v_omega], rec[-1].v[sa.v_omega], atol=1e-6)


def test_compiled_residual_and_jacobian_equal_reference_with_servos(absolute):
    from retarget.sim.reduced.engine import pack_system, residual_compiled

    rs = _reduced(absolute, full=False)
    packed = pack_system(rs)
    goal, goal_dot = np.array([0.2, -0.1]), np.array([1.5, 0.3])
    for seed in (1, 2):
        s, ub, vb = _random_point(rs, seed)
        ref = residual_and_jacobian(rs, s, StepInputs(ub, vb, 1e-3, goal, goal_dot, 500.0))
        ours = residual_compiled(packed, s, StepInputs(ub, vb, 1e-3, goal, goal_dot, 500.0))
        scale = 1.0 + np.abs(ref.jacobian).max()
        assert np.allclose(ours.residual, ref.residual, rtol=0, atol=1e-12 * (1 + np.abs(ref.residual).max()))
        assert np.allclose(ours.jacobian, ref.jacobian, rtol=0, atol=1e-11 * scale)
        assert np.allclose(ours.r_theta, ref.r_theta, rtol=0, atol=1e-11 * scale)
        assert np.allclose(ours.r_theta_dot, ref.r_theta_dot, rtol=0, atol=1e-11 * scale)
        assert np.allclose(ours.mass, ref.mass, rtol=0, atol=1e-12 * (1 + np.abs(ref.mass).max()))
        res_only = residual_compiled(packed, s, StepInputs(ub, vb, 1e-3, goal, goal_dot, 500.0), jacobian=False)
        assert np.allclose(res_only.residual, ref.residual, rtol=0, atol=1e-12 * (1 + np.abs(ref.residual).max()))


def test_compiled_time_loop_and_statics_equal_reference_with_servos(rod_on_servo):
    from retarget.sim.reduced.engine import CompiledReducedEngine, simulate_compiled

    rs = _reduced(rod_on_servo, full=False)
    goals = FunctionMotors(lambda t: [0.3 * (1 - np.cos(20 * t))], lambda t: [6 * np.sin(20 * t)])
    engine = CompiledReducedEngine(rs)
    start = engine.solve_static(np.array([0.0]))
    ref_start = solve_static(rs, np.array([0.0]))
    assert np.allclose(start.s, ref_start.s, atol=1e-10)
    run = simulate_compiled(rs, goals, 0.06, 1e-3, start=ref_start, tol=1e-12, estimate=False)
    prev2, prev, cache = None, ref_start, {}
    for k in range(60):
        prev2, prev = prev, step(rs, prev, prev2, 1e-3, goals, cache, k + 1, tol=1e-12)[0]
    assert np.allclose(run.states[-1], prev.s, atol=1e-8 * (1 + np.abs(prev.s).max()))
    sv = rs.servo
    assert abs(run.states[-1][sv.u_theta[0]]) > 0.05  # the shaft moved
