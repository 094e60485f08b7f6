"""The discrete adjoint gradient (retarget.optimize.adjoint) against central finite differences of the discrete
objective, on both engines: a motor-driven double pendulum (position + orientation tracking, regularizers) and a
reduced rod on a motor."""
from __future__ import annotations

import numpy as np
import pytest
from rod_fixtures import double_pendulum

from retarget.optimize.adjoint import AdjointProblem, TrackedPoses, evaluate
from retarget.optimize.bspline import MotorProfiles, ProfileParametrization
from retarget.optimize.objective import MotorRegularizer, TrackingObjective
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule
from retarget.sim.adapters import AbsoluteEngine, ReferenceReducedEngine


def _problem(engine, link: str, dt: float, n: int, knot: float, start, seed: int = 0):
    template = MotorProfiles.constant([0.0], 0.0, n * dt, knot)
    par = ProfileParametrization(template.n_control, 1, np.array([0.0]), True)
    times = np.arange(n + 1) * dt
    body = TrackedBodyWeights(link, WeightSchedule.parse("step(0:1, 0.1:3)"), WeightSchedule.constant(0.5))
    i = engine.rigid_index(link)
    rng = np.random.default_rng(seed)
    c_bar = start.s[7 * i : 7 * i + 3][None, None, :] + 0.01 * rng.normal(size=(n + 1, 1, 3))
    r_bar = np.broadcast_to(np.eye(3), (n + 1, 1, 3, 3))
    tracking = TrackingObjective.build(times, [body], c_bar, r_bar)
    reg = MotorRegularizer.build(template, times, np.zeros((n + 1, 1)), 0.1, 1e-4)
    return AdjointProblem(engine, start, dt, n, template, par, tracking, TrackedPoses.build(engine, [link]), reg)


def _check(problem, x, rng, directions: int, eps: float, tol: float) -> float:
    ev = evaluate(problem, x)
    worst = 0.0
    for _ in range(directions):
        d = rng.normal(size=x.size)
        fd = (evaluate(problem, x + eps * d, gradient=False).value
              - evaluate(problem, x - eps * d, gradient=False).value) / (2 * eps)
        ad = float(ev.gradient @ d)
        worst = max(worst, abs(fd - ad) / abs(ad))
    assert worst < tol, worst
    return worst


@pytest.mark.parametrize("engine_kind", ["reduced", "absolute"])
def test_double_pendulum_gradient_matches_finite_differences(engine_kind):
    from retarget.sim.reduced.system import build_reduced_system
    from retarget.sim.system import build_system

    system = build_system(double_pendulum())
    engine = (ReferenceReducedEngine(build_reduced_system(system, [], [])) if engine_kind == "reduced"
              else AbsoluteEngine(system))
    problem = _problem(engine, "lower", 0.01, 20, 0.05, engine.reference_state())
    rng = np.random.default_rng(1)
    x = 0.3 * rng.normal(size=problem.parametrization.n_parameters)
    # Measured: 1e-10 (step 1e-5); the 1e-7 bound leaves room for round-off.
    _check(problem, x, rng, 2, 1e-5, 1e-7)


def test_both_engines_agree_on_a_rigid_system():
    from retarget.sim.reduced.system import build_reduced_system
    from retarget.sim.system import build_system

    system = build_system(double_pendulum())
    grads = []
    for engine in (ReferenceReducedEngine(build_reduced_system(system, [], [])), AbsoluteEngine(system)):
        problem = _problem(engine, "lower", 0.01, 15, 0.05, engine.reference_state())
        x = 0.3 * np.random.default_rng(2).normal(size=problem.parametrization.n_parameters)
        grads.append(evaluate(problem, x).gradient)
    # Same DAE in the same coordinates for rigid bodies: same discrete gradient up to the Newton tolerance.
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-7, atol=1e-9 * np.abs(grads[1]).max())


def test_reduced_rod_gradient_matches_finite_differences(rod_systems):
    _, rs = rod_systems
    engine = ReferenceReducedEngine(rs)
    start = engine.solve_static(np.array([0.0]))
    problem = _problem(engine, "tip", 0.002, 25, 0.02, start)
    rng = np.random.default_rng(3)
    x = 0.1 * rng.normal(size=problem.parametrization.n_parameters)
    # Measured: 3e-13 at step 1e-5.
    _check(problem, x, rng, 1, 1e-5, 1e-7)


def test_absolute_rod_gradient_matches_finite_differences(rod_systems):
    system, _ = rod_systems
    engine = AbsoluteEngine(system)
    start = engine.solve_static(np.array([0.0]))
    problem = _problem(engine, "tip", 0.002, 16, 0.01, start)
    rng = np.random.default_rng(4)
    x = 0.1 * rng.normal(size=problem.parametrization.n_parameters)
    # The absolute engine's β-damping curvature is a central difference (physics.md): floor ~1e-8.
    _check(problem, x, rng, 1, 1e-5, 1e-6)


def test_tracked_pose_pullback_matches_finite_differences(rod_systems):
    _, rs = rod_systems
    engine = ReferenceReducedEngine(rs)
    poses = TrackedPoses.build(engine, ["tip", "horn"])
    rng = np.random.default_rng(5)
    s = engine.solve_static(np.array([0.2])).s.copy()
    s[: 7 * rs.n_rigid] += 0.05 * rng.normal(size=7 * rs.n_rigid)  # non-unit quaternions too
    dp, dr = rng.normal(size=(2, 3)), rng.normal(size=(2, 3, 3))

    def g(state):
        return float(np.sum(poses.positions(state[None])[0] * dp) + np.sum(poses.orientations(state[None])[0] * dr))

    grad = poses.pullback(s, dp, dr)
    for _ in range(5):
        d = rng.normal(size=s.size)
        fd = (g(s + 1e-6 * d) - g(s - 1e-6 * d)) / 2e-6
        assert abs(fd - grad @ d) <= 1e-8 * max(1.0, abs(fd))


def test_compiled_engine_gives_the_reference_gradient(rod_systems):
    from retarget.sim.adapters import reduced_engine

    _, rs = rod_systems
    grads = []
    for compiled in (False, True):
        engine = reduced_engine(rs, compiled=compiled)
        start = engine.solve_static(np.array([0.0]))
        problem = _problem(engine, "tip", 0.002, 25, 0.02, start)
        x = 0.1 * np.random.default_rng(3).normal(size=problem.parametrization.n_parameters)
        grads.append(evaluate(problem, x))
    assert grads[1].value == pytest.approx(grads[0].value, rel=1e-12)
    # Measured: 2e-12 relative (same discrete solution to the Newton tolerance).
    np.testing.assert_allclose(grads[1].gradient, grads[0].gradient, rtol=0, atol=1e-9 * np.abs(grads[0].gradient).max())


def test_threaded_linearizations_give_the_same_gradient_and_tangents(rod_systems, monkeypatch):
    """The compiled engine's backward pass on 2 threads (step_sensitivities) is bit-for-bit the sequential one."""
    import retarget.sim.adapters as engines
    from retarget.optimize.gauss_newton import tangent_least_squares
    from retarget.sim.adapters import reduced_engine, step_sensitivities

    _, rs = rod_systems
    engine = reduced_engine(rs)
    assert engine.concurrent_sensitivity
    start = engine.solve_static(np.array([0.0]))
    problem = _problem(engine, "tip", 0.002, 25, 0.02, start)
    x = 0.1 * np.random.default_rng(4).normal(size=problem.parametrization.n_parameters)
    out = {}
    for workers in (1, 2):
        monkeypatch.setattr(engines, "sensitivity_workers", lambda w=workers: w)
        ev = evaluate(problem, x)
        out[workers] = (ev, tangent_least_squares(problem, x, ev.rollout))
    np.testing.assert_array_equal(out[2][0].gradient, out[1][0].gradient)
    np.testing.assert_array_equal(out[2][1].hessian, out[1][1].hessian)
    # In the given order, each the step's own linearization, also when the consumer stops early.
    fwd = out[1][0].rollout
    seq = step_sensitivities(engine, fwd.states, problem.dt, problem.profiles(x), [7, 3, 12], workers=2)
    for k, sens in zip([7, 3, 12], seq):
        ref = engine.sensitivity(fwd.states[k], fwd.states[k - 1], fwd.states[k - 2], problem.dt, problem.profiles(x))
        np.testing.assert_array_equal(sens.r_theta, ref.r_theta)
    seq.close()


def _rod_window_problem(rod_systems, seed: int):
    """A 40-step rod problem with knots every 2.5 steps (14 parameters) and small random parameters."""
    from retarget.sim.adapters import reduced_engine

    _, rs = rod_systems
    engine = reduced_engine(rs, compiled=True)
    problem = _problem(engine, "tip", 0.002, 40, 0.005, engine.solve_static(np.array([0.0])))
    rng = np.random.default_rng(seed)
    return problem, 0.01 * rng.normal(size=problem.parametrization.n_parameters), rng


def _window(problem, x, first: int, last: int, stop: int):
    """The problem restricted to steps first … last and the parameters whose influence begins in (first, stop]."""
    from dataclasses import replace

    from retarget.optimize.adjoint import Window, window_parameters

    full = evaluate(problem, x, gradient=False)
    free = window_parameters(problem, first, stop)
    states = full.rollout.states
    window = Window(first, last, states[first], states[first - 1] if first else None, free, x.copy())
    return replace(problem, window=window), free, full


def test_window_parameters_leave_the_states_before_the_window_unchanged(rod_systems):
    from retarget.optimize.adjoint import first_influence

    problem, x, _ = _rod_window_problem(rod_systems, 6)
    start = first_influence(problem)
    assert start.min() > 0 and np.all(np.diff(start[: problem.parametrization.n_free]) >= 0)
    sub, free, full = _window(problem, x, 12, 40, 25)
    assert free.size and np.all((start[free] > 12) & (start[free] <= 25))
    moved = sub.window.full(x[free] + 0.01)
    after = evaluate(problem, moved, gradient=False)
    np.testing.assert_array_equal(after.rollout.matrix[:13], full.rollout.matrix[:13])
    assert np.abs(after.rollout.matrix[14:] - full.rollout.matrix[14:]).max() > 1e-6


def test_window_continues_the_run_and_its_gradient_is_the_whole_gradient(rod_systems):
    """A window to the end (e = N) continues the BDF2 run from the stored states (same states to the Newton
    tolerance) and differs from J by the fixed tracking before it: its gradient is the whole problem's gradient
    restricted to the window's parameters."""
    problem, x, _ = _rod_window_problem(rod_systems, 7)
    sub, free, full = _window(problem, x, 12, 40, 40)
    whole = evaluate(problem, x)
    part = evaluate(sub, x[free])
    # The Newton starts differ (the continued run's first predictor has one state less): same solution to the
    # Newton tolerance. Measured: 2.4e-10 (a multiplier of size 0.7), gradient 1.7e-13 relative.
    np.testing.assert_allclose(part.rollout.matrix, full.rollout.matrix[12:], rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(part.gradient, whole.gradient[free], rtol=0, atol=1e-6 * np.abs(whole.gradient).max())


def test_window_gradient_matches_finite_differences(rod_systems):
    problem, x, rng = _rod_window_problem(rod_systems, 8)
    sub, free, _ = _window(problem, x, 10, 30, 20)
    _check(sub, x[free], rng, 2, 1e-5, 1e-7)


def test_torque_penalty_gradient_matches_finite_differences(rod_systems):
    """The torque penalty is a term on the states (the motor rows of λ): its gradient comes through the adjoint."""
    from dataclasses import replace

    from retarget.optimize.limits import TorquePenalty

    problem, x, rng = _rod_window_problem(rod_systems, 9)
    tau = evaluate(problem, x, gradient=False).rollout.matrix[:, problem.engine.motor_torque_index]
    # Threshold at half the peak: the hinge is active over part of the run, so its kink is sampled too.
    penalty = TorquePenalty(problem.dt, 0.5 * np.abs(tau).max(axis=0), 1e3)
    with_penalty = replace(problem, torque_penalty=penalty)
    ev = evaluate(with_penalty, x)
    plain = evaluate(problem, x)
    value, _, _ = penalty.evaluate(tau)
    assert value > 0.01 * plain.value and ev.parts["torque_penalty"] == pytest.approx(value)
    assert ev.value == pytest.approx(plain.value + value)
    # Measured: 2.1e-8 at step 1e-5 (the penalty 1.8x the rest of J; the hinge kink limits the difference quotient).
    _check(with_penalty, x, rng, 2, 1e-5, 1e-6)


def test_run_time_ratio_compares_the_same_steps_without_the_first_steps_compile():
    """A rollout's step times compared with a reference run's on the same steps: the reference's first step (numba
    compiling) counts as its median step; runs without timings (or none measurable) give no ratio."""
    from retarget.optimize.adjoint import Rollout, run_time_ratio, steady_step_times

    reference = Rollout([], np.zeros((0, 1)), np.array([5.0, 1.0, 1.0, 2.0, 2.0]))
    steps = steady_step_times(reference)
    assert steps is not None and np.array_equal(steps, [1.5, 1.0, 1.0, 2.0, 2.0])
    later = Rollout([], np.zeros((0, 1)), np.array([3.0, 6.0]))  # the reference's steps 3 and 4, from grid step 2
    assert run_time_ratio(steps, 2, later) == pytest.approx(3.0)
    assert run_time_ratio(steps, 0, Rollout([], np.zeros((0, 1)))) is None
    assert run_time_ratio(None, 0, later) is None
    assert run_time_ratio(steps, 0, Rollout([], np.zeros((0, 1)), np.zeros(2))) is None
    assert steady_step_times(Rollout([], np.zeros((0, 1)))) is None


@pytest.mark.parametrize("engine_kind", ["reference", "compiled", "absolute"])
def test_gradient_through_the_servo_loop_matches_finite_differences(servo_rod_systems, engine_kind):
    """The controls reach the structure through the servo's loop (goal → PID → torque → shaft → rod): the adjoint
    differentiates it exactly, on every engine."""
    from retarget.sim.adapters import reduced_engine

    system, rs = servo_rod_systems
    engine = (AbsoluteEngine(system) if engine_kind == "absolute"
              else reduced_engine(rs, compiled=engine_kind == "compiled"))
    start = engine.solve_static(np.array([0.0]))
    n = 16 if engine_kind == "absolute" else 25
    problem = _problem(engine, "tip", 0.002, n, 0.01 if engine_kind == "absolute" else 0.02, start)
    rng = np.random.default_rng(7)
    x = 0.1 * rng.normal(size=problem.parametrization.n_parameters)
    _check(problem, x, rng, 1, 1e-5, 1e-6 if engine_kind == "absolute" else 1e-7)


def test_speed_dependent_torque_penalty_gradient_matches_finite_differences(servo_rod_systems):
    """A modelled servo's torque threshold falls with its simulated shaft speed while motoring: the penalty's
    gradient comes through the adjoint in both the torque and the shaft speed."""
    from dataclasses import replace

    from retarget.optimize.limits import TorquePenalty
    from retarget.sim.adapters import reduced_engine

    _, rs = servo_rod_systems
    engine = reduced_engine(rs, compiled=False)
    problem = _problem(engine, "tip", 0.002, 25, 0.02, engine.solve_static(np.array([0.0])))
    rng = np.random.default_rng(8)
    x = 0.3 * rng.normal(size=problem.parametrization.n_parameters)
    run = evaluate(problem, x, gradient=False).rollout.matrix
    tau = run[:, engine.motor_torque_index]
    speed = run[:, engine.shaft_speed_index]
    penalty = TorquePenalty(problem.dt, 0.6 * np.abs(tau).max(axis=0), 1e3, np.array([0.5]), engine.shaft_speed_index)
    thr, motoring = penalty.thresholds(tau, speed)
    assert motoring.any() and np.any((np.abs(tau) > thr) & motoring)
    with_penalty = replace(problem, torque_penalty=penalty)
    assert evaluate(with_penalty, x).parts["torque_penalty"] > 0.0
    _check(with_penalty, x, rng, 2, 1e-5, 1e-6)
