"""The servo model (:mod:`retarget.sim.servo`) in the full engine: its torque law against finite differences, the
exact and fast Newton paths with servo coordinates, and the servo's physics against theory."""
import numpy as np
import pytest

from sim_checks import assert_newton_jacobian_matches_fd, random_point

from retarget.model.servo import SERVO_MODELS
from retarget.sim.bdf import StepInputs
from retarget.sim.dae import residual_and_jacobian
from retarget.sim.integrator import solve_linearized
from retarget.sim.newton import build_newton_plan, factorize_fast, residual
from retarget.sim.scenarios import build_two_motor_rod
from retarget.sim.servo import SATURATION_BLEND, servo_torque, soft_saturation
from retarget.sim.system import build_system

XM430 = SERVO_MODELS["XM430-W210"]
#: Every term of the law switched on: integral, derivative, feedforward, friction.
FULL_LOOP = XM430.with_values(ki=40.0, kd=0.05, kff1=0.02, coulomb_friction=0.03, viscous_friction=0.01)


def _servo_rod():
    model = build_two_motor_rod(n_axial=2, n_around=6)
    return build_system(model.with_servos([FULL_LOOP, XM430]))


SERVO_SYSTEMS = {"rod_loop_servo": _servo_rod()}


def test_servo_layout_pairs_every_coordinate_with_its_rate():
    system = SERVO_SYSTEMS["rod_loop_servo"]
    lay = system.servo
    assert lay.n_servos == 2 and lay.size == 3  # two shafts, one integral state
    nb = len(system.rigid)
    assert np.all(lay.u_theta - 7 * nb == lay.v_omega - 6 * nb)
    k = int(np.flatnonzero(lay.u_iota >= 0)[0])
    assert lay.u_iota[k] - 7 * nb == lay.v_e[k] - 6 * nb
    assert system.n_u - 7 * nb == system.n_v - 6 * nb


@pytest.mark.parametrize("x", [0.2, 0.97, 0.99, 1.0, 1.02, 1.05, -0.985])
def test_soft_saturation_is_c1_and_exact_away_from_the_limit(x):
    y, dy = soft_saturation(x, 1.0)
    e = 1e-7
    assert dy == pytest.approx((soft_saturation(x + e, 1.0)[0] - soft_saturation(x - e, 1.0)[0]) / (2 * e), abs=1e-6)
    if abs(x) <= 1.0 - SATURATION_BLEND:
        assert y == x
    if abs(x) >= 1.0 + SATURATION_BLEND:
        assert y == np.sign(x)
    assert abs(y) <= 1.0


@pytest.mark.parametrize("point", [(0.1, 0.5, 0.05, 0.3, 0.001), (0.5, -2.0, 0.1, 1.5, 0.02), (0.05, 0.0, 0.0, 0.0, 0.0)])
def test_servo_torque_derivatives_match_central_differences(point):
    from retarget.sim.servo import pack_params

    par = pack_params([FULL_LOOP])[0]
    x = np.array(point, dtype=float)
    tau, d = servo_torque(par, *x)
    for k in range(5):
        e = np.zeros(5)
        e[k] = 1e-7
        fd = (servo_torque(par, *(x + e))[0] - servo_torque(par, *(x - e))[0]) / 2e-7
        assert d[k] == pytest.approx(fd, rel=1e-6, abs=1e-6)


def test_servo_torque_is_the_loop_in_its_linear_range():
    from retarget.sim.servo import pack_params

    par = pack_params([XM430])[0]
    tau, _ = servo_torque(par, 0.01, 0.0, 0.0, 0.0, 0.0)
    assert tau == pytest.approx(XM430.kp * 0.01)
    # Saturated: stall torque minus the back EMF at speed.
    tau, _ = servo_torque(par, 1.0, 0.0, 0.0, 2.0, 0.0)
    assert tau == pytest.approx(XM430.stall_torque * (1.0 - 2.0 / XM430.max_velocity))


def test_exact_jacobian_with_servos_matches_finite_differences():
    system = SERVO_SYSTEMS["rod_loop_servo"]
    s, ub, vb, th, thd = random_point(system, 1)
    assert_newton_jacobian_matches_fd(system, s, ub, vb, 1e-3, 50.0, th, thd)


def test_fast_residual_with_servos_equals_reference():
    system = SERVO_SYSTEMS["rod_loop_servo"]
    s, ub, vb, th, thd = random_point(system, 0)
    ref = residual_and_jacobian(system, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0), jacobian=False)
    for jac in (False, True):
        ours = residual(build_newton_plan(system), s, StepInputs(ub, vb, 1e-3, th, thd, 50.0), jac)
        r = np.concatenate([ours.r_u, ours.r_v, ours.r_lambda])
        assert np.allclose(r, ref.residual, rtol=0, atol=1e-12 * (1 + np.abs(ref.residual).max()))


@pytest.mark.parametrize("dense", [True, False])
def test_fast_newton_step_with_servos_equals_exact_step(dense):
    system = SERVO_SYSTEMS["rod_loop_servo"]
    s, ub, vb, th, thd = random_point(system, 3)
    lin = residual_and_jacobian(system, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0))
    ref = solve_linearized(system, lin)
    plan = build_newton_plan(system, dense=dense)
    res = residual(plan, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0), True, exact=True)
    ours = factorize_fast(plan, res).solve(res)
    assert np.linalg.norm(ours - ref) <= 1e-8 * np.linalg.norm(ref)


def test_an_infinitely_stiff_servo_is_the_ideal_position_source():
    """The perfect servo is the limit of infinite gain: the tip's path approaches the ideal motor's as 1/kp."""
    from retarget.model.servo import IDEAL
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.scenarios import build_rod_on_motor
    from retarget.sim.simulate import simulate

    model = build_rod_on_motor()
    goals = FunctionMotors(lambda t: [0.3 * np.sin(10 * t) ** 2], lambda t: [3.0 * np.sin(20 * t)])
    ideal = simulate(build_system(model.with_servos([SERVO_MODELS[IDEAL]])), goals, 0.1, 1e-3)
    gaps = []
    for scale in (1e2, 1e3, 1e4):
        # Stiffer loops on a motor strong and fast enough never to saturate.
        stiff = XM430.with_values(kp=XM430.kp * scale, stall_torque=1e4, max_velocity=1e4)
        run = simulate(build_system(model.with_servos([stiff])), goals, 0.1, 1e-3)
        gaps.append(np.abs(run.body_position("tip") - ideal.body_position("tip")).max())
        assert np.abs(run.shaft_angles - ideal.motor_values).max() < 10.0 / (XM430.kp * scale)
    assert gaps[1] < 0.2 * gaps[0] and gaps[2] < 0.2 * gaps[1]
    assert gaps[2] < 1e-5  # [m] of a 3 cm swing
