"""Engine adapters (retarget.sim.adapters): the reduced engine's ∂R/∂θ against finite differences of the
stepper's residual, motor rows, and the history products against the stepper's history_jacobian."""
from __future__ import annotations

import numpy as np

from retarget.sim.adapters import ReferenceReducedEngine
from retarget.sim.engine import motor_rows
from retarget.sim.motors import FunctionMotors


def _state(rs, seed):
    from retarget.sim.reduced.stepper import ReducedState

    rng = np.random.default_rng(seed)
    u = rs.reference_u()
    u[: 7 * rs.n_rigid] += 0.02 * rng.normal(size=7 * rs.n_rigid)
    u[7 * rs.n_rigid :] = 1e-4 * rng.normal(size=rs.n_u - 7 * rs.n_rigid)
    return ReducedState(0.01, u, rng.normal(size=rs.n_v), rng.normal(size=rs.n_lambda))


def test_reduced_r_theta_matches_finite_differences(rod_systems):
    from retarget.sim.bdf import StepInputs
    from retarget.sim.reduced.stepper import residual_and_jacobian

    _, rs = rod_systems
    engine = ReferenceReducedEngine(rs)
    new, prev = _state(rs, 0), _state(rs, 1)
    prev = type(prev)(0.0, prev.u, prev.v, prev.lam)
    dt = 0.002
    theta, theta_dot = 0.3, 1.7
    motors = FunctionMotors(lambda t: [theta], lambda t: [theta_dot])
    sens = engine.sensitivity(engine._wrap(new), engine._wrap(prev), None, dt, motors)

    def res(th, thd):
        inputs = StepInputs(prev.u, prev.v, dt, np.array([th]), np.array([thd]), 1.0 / dt)
        return residual_and_jacobian(rs, new.s, inputs, jacobian=False).residual

    eps = 1e-6
    fd_theta = (res(theta + eps, theta_dot) - res(theta - eps, theta_dot)) / (2 * eps)
    fd_theta_dot = (res(theta, theta_dot + eps) - res(theta, theta_dot - eps)) / (2 * eps)
    scale = np.abs(fd_theta).max()
    np.testing.assert_allclose(sens.r_theta[:, 0], fd_theta, atol=1e-7 * scale)
    np.testing.assert_allclose(sens.r_theta_dot[:, 0], fd_theta_dot, atol=1e-7 * np.abs(fd_theta_dot).max())


def test_history_products_match_the_stepper(rod_systems):
    from retarget.sim.bdf import BDF2
    from retarget.sim.reduced.stepper import history_jacobian, linearize

    _, rs = rod_systems
    engine = ReferenceReducedEngine(rs)
    s0, s1, s2 = _state(rs, 2), _state(rs, 3), _state(rs, 4)
    s0 = type(s0)(0.0, s0.u, s0.v, s0.lam)
    s1 = type(s1)(0.002, s1.u, s1.v, s1.lam)
    s2 = type(s2)(0.004, s2.u, s2.v, s2.lam)
    motors = FunctionMotors(lambda t: [0.1], lambda t: [0.0])
    sens = engine.sensitivity(engine._wrap(s2), engine._wrap(s1), engine._wrap(s0), 0.002, motors)
    lin = linearize(rs, s2, s1, s0, 0.002, motors)
    h = BDF2[2] * 0.002
    mu = np.random.default_rng(5).normal(size=engine.n_state)
    for k, coef in ((1, BDF2[0]), (2, BDF2[1])):
        np.testing.assert_allclose(sens.history_transposed(k, mu), history_jacobian(rs, lin, h, coef).T @ mu,
                                   rtol=1e-12, atol=1e-12)


def test_motor_rows_are_the_motor_blocks_last_rows(rod_systems):
    system, rs = rod_systems
    rows = motor_rows(rs.constraints, rs.lambda_offsets, 1)
    b = next(i for i, blk in enumerate(rs.constraints) if getattr(blk, "motor", -1) == 0)
    assert rows.tolist() == [rs.lambda_offsets[b + 1] - 1]
