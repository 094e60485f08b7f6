"""The tangent-linear pass (retarget.optimize.gauss_newton): the residual Jacobian against central finite
differences of the residual, and its gradient ``Jᵣᵀ r`` + regularizers against the adjoint gradient, on all engines."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.optimize.adjoint import evaluate
from retarget.sim.adapters import AbsoluteEngine, ReferenceReducedEngine, reduced_engine
from retarget.optimize.gauss_newton import parameter_hessian, supports_tangent, tangent_least_squares
from rod_fixtures import double_pendulum
from tests.optimize.test_adjoint import _problem


def _check(problem, x, rng, eps, tol):
    ev = evaluate(problem, x)
    ls = tangent_least_squares(problem, x, ev.rollout)
    # ½|r|² is the tracking term.
    assert 0.5 * float(ls.residual @ ls.residual) == pytest.approx(ev.tracking, rel=1e-12)
    # Jᵣᵀ r + ∂Reg/∂x is the adjoint gradient (same discrete derivative, forward instead of reverse).
    g = ls.gradient + problem.parameter_terms(x)[1]
    np.testing.assert_allclose(g, ev.gradient, rtol=0, atol=tol * np.abs(ev.gradient).max())
    # The Jacobian itself against central differences of the residual along random directions.
    for _ in range(2):
        d = rng.normal(size=x.size)
        fd = (evaluate_residual(problem, x + eps * d) - evaluate_residual(problem, x - eps * d)) / (2 * eps)
        jd = ls.jacobian @ d
        assert np.max(np.abs(fd - jd)) <= tol * np.max(np.abs(jd)) + 1e-12


def evaluate_residual(problem, x):
    tr = problem.tracking
    ev = evaluate(problem, x, gradient=False)
    sq = np.sqrt(tr.quadrature[:, None] * tr.position_weights)
    pos = sq[:, :, None] * (ev.positions - tr.target_positions)
    if not tr.tracks_orientation:
        return pos.ravel()
    sq_o = np.sqrt(tr.quadrature[:, None] * tr.orientation_weights)
    rot = problem.poses.orientations(ev.rollout.matrix)
    ori = (sq_o[:, :, None, None] * (rot - tr.target_orientations)).reshape(*pos.shape[:2], 9)
    return np.concatenate([pos, ori], axis=2).ravel()


@pytest.mark.parametrize("engine_kind", ["reduced", "absolute"])
def test_double_pendulum_tangent_matches_differences_and_adjoint(engine_kind):
    from retarget.sim.reduced.system import build_reduced_system
    from retarget.sim.system import build_system

    system = build_system(double_pendulum())
    engine = (ReferenceReducedEngine(build_reduced_system(system, [], [])) if engine_kind == "reduced"
              else AbsoluteEngine(system))
    problem = _problem(engine, "lower", 0.01, 20, 0.05, engine.reference_state())
    assert supports_tangent(problem)
    rng = np.random.default_rng(1)
    x = 0.3 * rng.normal(size=problem.parametrization.n_parameters)
    _check(problem, x, rng, 1e-5, 1e-7)


@pytest.mark.parametrize("compiled", [False, True])
def test_reduced_rod_tangent_matches_differences_and_adjoint(rod_systems, compiled):
    _, rs = rod_systems
    engine = reduced_engine(rs, compiled=compiled)
    start = engine.solve_static(np.array([0.0]))
    problem = _problem(engine, "tip", 0.002, 25, 0.02, start)
    rng = np.random.default_rng(3)
    x = 0.1 * rng.normal(size=problem.parametrization.n_parameters)
    _check(problem, x, rng, 1e-5, 1e-6)


def test_parameter_hessian_is_the_regularizers_exact_hessian(rod_systems):
    _, rs = rod_systems
    engine = ReferenceReducedEngine(rs)
    problem = _problem(engine, "tip", 0.002, 25, 0.02, engine.solve_static(np.array([0.0])))
    rng = np.random.default_rng(7)
    x = 0.1 * rng.normal(size=problem.parametrization.n_parameters)
    h = parameter_hessian(problem, x)
    d = rng.normal(size=x.size)
    # Quadratic regularizers: the second-order expansion is exact.
    v0, g0, _ = problem.parameter_terms(x)
    v1 = problem.parameter_terms(x + d)[0]
    assert v1 == pytest.approx(v0 + g0 @ d + 0.5 * d @ h @ d, rel=1e-9)


@pytest.mark.parametrize(("first", "last", "stop"), [(0, 30, 20), (10, 30, 20), (12, 40, 40)])
def test_window_tangent_matches_differences_and_the_window_adjoint(rod_systems, first, last, stop):
    """A receding-horizon window's tangent pass (its parameters, its steps from the stored start states): ``½|r|²``
    is the window's tracking term, ``Jᵣᵀ r`` + regularizers its adjoint gradient, ``Jᵣ`` the central differences of
    its residual; the regularizers' Hessian on the window's parameters is exact for their quadratic."""
    from tests.optimize.test_adjoint import _rod_window_problem, _window

    problem, x, rng = _rod_window_problem(rod_systems, 9)
    sub, free, _ = _window(problem, x, first, last, stop)
    xw = x[free]
    tr = sub.tracking.window(first, last)

    def residual(y):
        ev = evaluate(sub, y, gradient=False)
        pos = np.sqrt(tr.quadrature[:, None] * tr.position_weights)[:, :, None] * (ev.positions - tr.target_positions)
        if not tr.tracks_orientation:
            return pos.ravel()
        rot = sub.poses.orientations(ev.rollout.matrix)
        ori = np.sqrt(tr.quadrature[:, None] * tr.orientation_weights)[:, :, None, None] * (rot - tr.target_orientations)
        return np.concatenate([pos, ori.reshape(*pos.shape[:2], 9)], axis=2).ravel()

    ev = evaluate(sub, xw)
    ls = tangent_least_squares(sub, xw, ev.rollout)
    assert ls.jacobian.shape == (residual(xw).size, free.size)
    assert 0.5 * float(ls.residual @ ls.residual) == pytest.approx(ev.tracking, rel=1e-12)
    g = ls.gradient + sub.parameter_terms(sub.window.full(xw))[1][free]
    np.testing.assert_allclose(g, ev.gradient, rtol=0, atol=1e-6 * np.abs(ev.gradient).max())
    for _ in range(2):
        d = rng.normal(size=xw.size)
        fd = (residual(xw + 1e-5 * d) - residual(xw - 1e-5 * d)) / 2e-5
        jd = ls.jacobian @ d
        assert np.max(np.abs(fd - jd)) <= 1e-6 * np.max(np.abs(jd)) + 1e-12
    h = parameter_hessian(sub, xw)
    d = rng.normal(size=xw.size)
    v0, g0 = sub.parameter_terms(sub.window.full(xw))[0], sub.parameter_terms(sub.window.full(xw))[1][free]
    assert sub.parameter_terms(sub.window.full(xw + d))[0] == pytest.approx(v0 + g0 @ d + 0.5 * d @ h @ d, rel=1e-9)


@pytest.mark.parametrize("windowed", [False, True])
def test_torque_penalty_rows_match_differences_and_the_adjoint(rod_systems, windowed):
    """The torque penalty's Gauss–Newton rows: ``½|r|²`` is tracking + penalty, ``Jᵣᵀ r`` + regularizers the adjoint
    gradient with the penalty, and each active row's derivative the central difference of ``√(wΔt)(|τ| − τ̄)``."""
    from dataclasses import replace

    from retarget.optimize.limits import TorquePenalty
    from tests.optimize.test_adjoint import _rod_window_problem, _window

    problem, x, rng = _rod_window_problem(rod_systems, 9)
    if windowed:
        problem, free, _ = _window(problem, x, 10, 30, 20)
        x = x[free]
    rows = np.asarray(problem.engine.motor_torque_index)
    tau = evaluate(problem, x, gradient=False).rollout.matrix[:, rows]
    # Threshold at half the (window's) peak: active over part of the run.
    penalty = TorquePenalty(problem.dt, 0.5 * np.abs(tau).max(axis=0), 1e3)
    problem = replace(problem, torque_penalty=penalty)
    ev = evaluate(problem, x)
    ls = tangent_least_squares(problem, x, ev.rollout)
    assert ev.parts["torque_penalty"] > 0.0
    assert 0.5 * float(ls.residual @ ls.residual) == pytest.approx(ev.tracking + ev.parts["torque_penalty"], rel=1e-12)
    whole = x if problem.window is None else problem.window.full(x)
    reg = problem.parameter_terms(whole)[1]
    g = ls.gradient + (reg if problem.window is None else reg[problem.window.free])
    np.testing.assert_allclose(g, ev.gradient, rtol=0, atol=1e-6 * np.abs(ev.gradient).max())

    def excess(y):
        t = evaluate(problem, y, gradient=False).rollout.matrix[:, rows]
        return np.sqrt(penalty.weight * penalty.dt) * (np.abs(t) - penalty.threshold)

    e0 = excess(x)
    active = e0 > 0.0
    n_tau = int(active.sum())
    assert n_tau > 0 and ls.residual.size > n_tau
    np.testing.assert_allclose(ls.residual[-n_tau:], e0[active], rtol=1e-12)
    clear = np.abs(e0[active]) > 1e-3 * np.abs(e0[active]).max()  # away from the hinge's kink
    for _ in range(2):
        d = rng.normal(size=x.size)
        fd = ((excess(x + 1e-5 * d) - excess(x - 1e-5 * d)) / 2e-5)[active]
        jd = ls.jacobian[-n_tau:] @ d
        assert np.max(np.abs(fd - jd)[clear]) <= 1e-6 * np.max(np.abs(jd)) + 1e-12
