"""The optimizer driver (retarget.optimize.lbfgs.optimize: L-BFGS-B, or Levenberg–Marquardt) on the reduced rod on a
motor: Ctrl-C returns the best point so far, the method choice, the time budget and its reserve, the first step
measured from the curvature along steepest descent or given, and projected steepest descent with its line search on
values alone."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from rod_plan import OPTIONS, ramp, recorded, rod_limits, tip
from virtual_clock import EVALUATION_S, VirtualClock

from retarget.errors import InputError
from retarget.optimize.adjoint import evaluate
from retarget.optimize.control import EVALUATION_FORWARD_RUNS, Deadline
from retarget.optimize.errors import OptimizeError, TimeBudgetError
from retarget.optimize.lbfgs import DESCENT_ARMIJO, FIRST_STEP_PROBE, optimize
from retarget.optimize.problem import build_plan_problem
from retarget.sim.adapters import reduced_engine
from retarget.sim.errors import SimulationError


@pytest.fixture(scope="module")
def rod_problem(rod_systems):
    """The ramp's plan problem on the reduced rod (position limits −0.2 … 0.3 rad)."""
    _, rs = rod_systems
    return build_plan_problem(reduced_engine(rs, 1e-10), ramp(), tip(), rod_limits(), OPTIONS)


@pytest.fixture(scope="module")
def wide_problem(rod_systems):
    """The same with wide limits (−1 … 1 rad): the first steps are not clipped."""
    _, rs = rod_systems
    return build_plan_problem(reduced_engine(rs, 1e-10), ramp(), tip(), rod_limits(-1.0, 1.0), OPTIONS)


@pytest.mark.parametrize("method", ["gauss-newton", "lbfgs"])
def test_keyboard_interrupt_returns_the_best_point(rod_problem, method):
    seen = []

    def callback(it: dict) -> None:
        seen.append(it)
        raise KeyboardInterrupt

    res = optimize(rod_problem, replace(OPTIONS, method=method), callback=callback)
    assert res.interrupted and res.interruption == "Ctrl-C" and "interrupted" in res.message
    assert len(seen) == 1 and set(seen[0]) == {"iteration", "objective", "gradient_norm"}
    assert res.objective_final <= res.objective_initial
    assert res.best.value == res.objective_final


def test_method_default_auto_and_unknown(rod_problem):
    assert optimize(rod_problem, replace(OPTIONS, max_iterations=1)).method == "lbfgs"  # the default
    assert optimize(rod_problem, replace(OPTIONS, max_iterations=1, method="auto")).method == "gauss-newton"
    with pytest.raises(InputError, match="unknown method 'newton': choose lbfgs, descent, gauss-newton, auto"):
        replace(OPTIONS, method="newton")


def test_time_budget_returns_the_best_iterate_flagged(rod_problem, monkeypatch):
    """On the virtual clock (an evaluation with its gradient 1 s): a budget of ten evaluations, all of it taken by
    the first iteration's callback; the optimizer stops right after it and starts no evaluation past the deadline."""
    pp = rod_problem
    clock = VirtualClock(monkeypatch)
    options = replace(OPTIONS, max_iterations=100, relative_tolerance=0.0, time_budget=10.0 * EVALUATION_S)
    seen, returned = [], []

    def slow_callback(it: dict) -> None:
        # The first iteration "takes" the whole budget, so the optimizer must stop right after it.
        seen.append(it)
        clock.advance(options.time_budget)
        returned.append(clock.now)

    res = optimize(pp, options, callback=slow_callback)
    assert res.budget_limited and not res.interrupted and "time budget" in res.message
    assert len(seen) == res.iterations == 1
    assert res.objective_final <= res.objective_initial and res.best.value == res.objective_final
    # The deadline is honoured: no evaluation starts once it has passed.
    assert clock.now == returned[0]
    assert res.initial.value == res.objective_initial


def test_time_budget_too_small_for_anything_is_a_clear_error(rod_problem):
    with pytest.raises(TimeBudgetError, match="first simulation") as info:
        optimize(rod_problem, replace(OPTIONS, time_budget=1e-9))
    assert info.value.stage == "optimization"


def test_the_reserve_is_kept_before_the_deadline(rod_systems, monkeypatch):
    """On the virtual clock (an evaluation with its gradient 1 s, a forward run alone a third of it): with a
    reserve of 4 evaluations the optimizer starts none that would end less than 4 of the latest evaluation's
    duration before the deadline; without one it goes on until less than one evaluation is left. (Knots every
    20 ms: 8 parameters, far from converged within the budget.)"""
    _, rs = rod_systems
    options = replace(OPTIONS, knot_spacing=0.02, max_iterations=100, relative_tolerance=0.0)
    fine = build_plan_problem(reduced_engine(rs, 1e-10), ramp(), tip(), rod_limits(), options)
    clock = VirtualClock(monkeypatch)
    shortest = EVALUATION_S / EVALUATION_FORWARD_RUNS
    budget, reserve = 12.0 * EVALUATION_S, 4.0
    started = clock.now
    res = optimize(recorded(fine), options, deadline=Deadline(started + budget), reserve_evaluations=reserve)
    assert res.budget_limited and res.evaluations >= 2
    # The last evaluation started only if it, plus the reserve, fitted: it ended by deadline − reserve × its own
    # duration (≥ a forward run's).
    assert clock.now - started <= budget - reserve * shortest, (clock.now - started, res.evaluations)
    started = clock.now
    unreserved = optimize(recorded(fine), options, deadline=Deadline(started + budget))
    assert unreserved.budget_limited and budget - reserve * shortest < clock.now - started <= budget
    assert unreserved.evaluations > res.evaluations


def test_the_measured_reserve_scales_with_the_profiles_simulation_time(rod_systems, monkeypatch):
    """``reserve_s`` is work measured on the start's profiles (the naive playback at the finer check's step): when
    the best point's profiles take three times as long per step to simulate as the start's, the optimizer keeps
    three times that reserve before the deadline (virtual clock; the steps' time charged in the progress calls)."""
    _, rs = rod_systems
    options = replace(OPTIONS, knot_spacing=0.02, max_iterations=100, relative_tolerance=0.0)
    fine = build_plan_problem(reduced_engine(rs, 1e-10), ramp(), tip(), rod_limits(), options)
    clock = VirtualClock(monkeypatch)

    def paced(problem, call, progress):
        def charged(k: int, total: int) -> None:
            clock.advance(0.01 if call == 1 else 0.03)
            if progress is not None:
                progress(k, total)

        return charged

    budget, reserve_s = 40.0, 6.0
    started = clock.now
    res = optimize(recorded(fine, paced), options, deadline=Deadline(started + budget), reserve_s=reserve_s)
    assert res.budget_limited and res.evaluations >= 2 and res.objective_final < res.objective_initial
    assert clock.now - started <= budget - 3.0 * reserve_s, (clock.now - started, res.evaluations)
    # Unscaled, the same work goes on until one reserve before the deadline.
    started = clock.now
    optimize(recorded(fine, lambda problem, call, progress: paced(problem, 1, progress)), options,
             deadline=Deadline(started + budget), reserve_s=reserve_s)
    assert budget - reserve_s - 2.0 * res.evaluation_s < clock.now - started <= budget - reserve_s


def test_first_step_is_measured_from_the_curvature_along_steepest_descent(wide_problem):
    """Default first step: the minimizer of the quadratic through J(x₀), its slope and a probe's gradient; J along
    that line is lower there than a third of the way or three times as far, and the first trial point lies there."""
    pp = recorded(wide_problem)
    seen = pp.seen
    res = optimize(pp, replace(OPTIONS, max_iterations=1))
    x0 = pp.fit.parameters
    assert np.allclose(seen[0], x0) and np.isclose(np.linalg.norm(seen[1] - x0), FIRST_STEP_PROBE)
    sigma = res.first_step
    assert 0.0 < sigma < 1.0 and res.evaluations >= 3  # x₀, the probe, at least one trial
    first, probe = evaluate(pp.problem, x0), evaluate(pp.problem, seen[1])
    u = -first.gradient / np.linalg.norm(first.gradient)
    # L-BFGS-B starts from the better of x₀ and the probe (evaluated once) and first tries σ along its −gradient.
    centre, at = (seen[1], probe) if probe.value < first.value else (x0, first)
    assert len(seen) == res.evaluations
    assert np.allclose(seen[2], centre - sigma * at.gradient / np.linalg.norm(at.gradient), atol=1e-12)

    def j(alpha: float) -> float:
        return evaluate(pp.problem, x0 + alpha * u, gradient=False).value

    assert j(sigma) < min(j(sigma / 3), j(3 * sigma), j(0.0))


def test_first_step_given_and_invalid(wide_problem):
    pp = recorded(wide_problem)
    res = optimize(pp, replace(OPTIONS, max_iterations=1, first_step=0.01))
    assert res.first_step == 0.01
    assert np.isclose(np.linalg.norm(pp.seen[1] - pp.fit.parameters), 0.01)  # no probe: the first trial is 0.01 away
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(OptimizeError, match="first step"):
            optimize(pp, replace(OPTIONS, first_step=bad))


def test_a_known_curvature_replaces_the_probe(rod_problem):
    """With ``curvature`` the first step is the minimizer of that quadratic along steepest descent, without the
    probe simulation; the secant curvature of the first trial is returned (test_windows.py: windows hand it on)."""
    pp = rod_problem
    options = replace(OPTIONS, max_iterations=1)
    probed = optimize(pp, options)
    assert probed.curvature is not None and probed.curvature > 0
    first = evaluate(pp.problem, pp.fit.parameters)
    lower = np.array([b[0] for b in pp.bounds])
    upper = np.array([b[1] for b in pp.bounds])
    direction = np.clip(pp.fit.parameters - first.gradient, lower, upper) - pp.fit.parameters
    slope = float(first.gradient @ direction) / np.linalg.norm(direction)
    given = optimize(pp, options, curvature=2.0 * probed.curvature)
    assert given.first_step == pytest.approx(min(1.0, -slope / (2.0 * probed.curvature)), rel=1e-12)
    assert given.evaluations < probed.evaluations + 1 and given.curvature is not None and given.curvature > 0


def test_descent_takes_lbfgs_first_step_with_one_gradient(wide_problem):
    """One ``descent`` iteration is L-BFGS-B's first: the same first step (the quadratic's minimizer along the
    projected steepest descent, its curvature here from a value probe instead of a gradient probe) and the same J
    after it, but the probe and the trial points are forward runs only: one gradient in all."""
    options = replace(OPTIONS, max_iterations=1)
    lbfgs = optimize(recorded(wide_problem), options)
    pp = recorded(wide_problem)
    res = optimize(pp, replace(options, method="descent"))
    assert res.method == "descent" and res.iterations == 1
    assert res.evaluations == 1 and res.value_evaluations == len(pp.seen) - 1 >= 2
    assert pp.gradients == [True] + [False] * res.value_evaluations
    x0 = pp.fit.parameters
    assert np.isclose(np.linalg.norm(pp.seen[1] - x0), FIRST_STEP_PROBE)
    assert res.first_step == pytest.approx(lbfgs.first_step, rel=1e-3)
    assert res.objective_final == pytest.approx(lbfgs.objective_final, rel=1e-3)
    assert res.objective_final < res.objective_initial
    assert res.best.value == res.objective_final and np.array_equal(res.x, pp.seen[int(np.argmin(
        [evaluate(pp.problem, x, gradient=False).value for x in pp.seen]))])
    assert res.curvature is not None and res.curvature > 0


def test_descent_backs_off_a_step_too_long_until_j_falls_enough(wide_problem):
    """A first step far past the minimizer: the line search shrinks it (quadratic interpolation, at most ×0.5)
    until J falls by the Armijo fraction of the first-order prediction; every trial is on the same ray."""
    pp = recorded(wide_problem)
    res = optimize(pp, replace(OPTIONS, max_iterations=1, method="descent", first_step=1.0))
    x0 = pp.fit.parameters
    steps = [np.linalg.norm(x - x0) for x in pp.seen[1:]]
    assert steps[0] == pytest.approx(1.0) and len(steps) >= 2
    assert all(b <= 0.5 * a + 1e-12 for a, b in zip(steps, steps[1:]))
    first = evaluate(pp.problem, x0)
    s = res.x - x0
    assert res.iterations == 1 and res.objective_final <= first.value + DESCENT_ARMIJO * float(first.gradient @ s)
    direction = -first.gradient / np.linalg.norm(first.gradient)
    assert np.allclose(s / np.linalg.norm(s), direction)


def test_descent_iterations_each_start_from_a_gradient(rod_problem):
    """Three iterations: each starts with the gradient at the point the previous one accepted (its forward run
    once more), J falls at each, and the curvature of each step sets the next one's length (no further probe)."""
    pp = recorded(rod_problem)
    seen = []
    res = optimize(pp, replace(OPTIONS, max_iterations=3, relative_tolerance=0.0, method="descent"),
                   callback=seen.append)
    assert res.iterations == len(seen) == 3 and res.evaluations == 3
    assert [it["iteration"] for it in seen] == [1, 2, 3]
    assert all(b < a for a, b in zip(res.history, res.history[1:]))
    starts = [x for x, g in zip(pp.seen, pp.gradients) if g]
    assert all(any(np.array_equal(x, y) for y, g in zip(pp.seen, pp.gradients) if not g) for x in starts[1:])
    probes = [x for x in pp.seen if np.isclose(np.linalg.norm(x - pp.seen[0]), FIRST_STEP_PROBE)]
    assert len(probes) == 1


def test_descent_backs_off_a_point_the_model_cannot_simulate(wide_problem):
    """The first trial point cannot be simulated: counted as failed, the step shrinks to a quarter, and the
    iteration still lowers J."""
    def fail_first_trial(problem, call, progress):
        if call == 2:  # x₀ (with gradient), then the first trial (first_step given: no probe)
            raise SimulationError("diverged (test)")
        return progress

    pp = recorded(wide_problem, fail_first_trial)
    res = optimize(pp, replace(OPTIONS, max_iterations=1, method="descent", first_step=0.2))
    x0 = pp.fit.parameters
    assert res.failed_simulations == 1 and res.iterations == 1 and res.objective_final < res.objective_initial
    assert np.linalg.norm(pp.seen[2] - x0) == pytest.approx(0.25 * np.linalg.norm(pp.seen[1] - x0))


def test_descent_with_a_known_curvature_needs_no_probe(rod_problem):
    options = replace(OPTIONS, max_iterations=1, method="descent")
    probed = optimize(rod_problem, options)
    pp = recorded(rod_problem)
    given = optimize(pp, options, curvature=probed.curvature)
    assert not any(np.isclose(np.linalg.norm(x - pp.seen[0]), FIRST_STEP_PROBE) for x in pp.seen[1:])
    assert given.first_step == pytest.approx(probed.first_step, rel=1e-6)
    assert given.value_evaluations == probed.value_evaluations - 1
