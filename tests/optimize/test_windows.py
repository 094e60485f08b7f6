"""Receding-horizon windows (retarget.optimize.windows.optimize_windows) on the reduced rod on a motor: the whole
objective falls, limits hold, windows overlap, an interrupt keeps what the earlier windows gained, a window without
time for one simulation is skipped (a window optimizer injected through ``window_optimizer``), the time shares do
not count the first step's compile time nor one slow start run, the checks' reserve grows with profiles slower to
simulate than the start's, and each window hands its curvature (and its
Levenberg–Marquardt tangent pass's time) on to the next; a tangent pass that cannot end in time stops early, its
pace counts the window's steps, and the trial after a pass runs even when the pass ran slower than its pace.

The budget's tests run on the virtual clock (virtual_clock.py): the computation takes no time there, and each
test paces the simulation steps it describes, so their decisions do not depend on the machine's load."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from rod_plan import OPTIONS, ramp, recorded, rod_limits, tip
from virtual_clock import EVALUATION_S, VirtualClock

from retarget.optimize.adjoint import Window, first_influence, window_parameters
from retarget.optimize.control import EVALUATION_FORWARD_RUNS, Deadline
from retarget.optimize.errors import OptimizeError, PlanCancelled, TimeBudgetError
from retarget.optimize.gauss_newton import PROJECT_AFTER, ensemble_gauss_newton
from retarget.optimize.lbfgs import optimize
from retarget.optimize.problem import build_plan_problem
from retarget.optimize.windows import optimize_windows
from retarget.planning.run import run_plan
from retarget.sim.adapters import reduced_engine

WINDOWS = replace(OPTIONS, window=0.08, window_tail=0.04, max_iterations=3)

#: Virtual seconds of one simulation step where a test does not pace it otherwise (the reduced rod's order).
STEP_S = 0.002


def paced(step_s: Callable[[Any, int, int], float], clock: VirtualClock):
    """A :data:`rod_plan.Hook` that advances ``clock`` by ``step_s(problem, call, k)`` at every step ``k`` of
    evaluation number ``call``."""

    def hook(problem: Any, call: int, progress: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
        def step(k: int, total: int) -> None:
            clock.advance(step_s(problem, call, k))
            if progress is not None:
                progress(k, total)

        return step

    return hook


@pytest.fixture(scope="module")
def engine(rod_systems):
    _, rs = rod_systems
    return reduced_engine(rs, 1e-10)


def _problem(engine, options=WINDOWS):
    return build_plan_problem(engine, ramp(), tip(), rod_limits(), options)


def test_windows_lower_the_whole_objective_and_respect_limits(engine):
    """Every window's parameters are optimized in turn; J over the whole motion falls, bounds hold, the callback
    says which window, and the reported best is the whole-motion evaluation."""
    seen = []
    result = run_plan(engine, ramp(), tip(), rod_limits(), WINDOWS, callback=lambda it: seen.append(it))
    opt = result.optimization
    assert opt.method == "lbfgs-windows" and "3 windows of 0.08 s" in opt.message
    assert {1, 2} <= {it["window"] for it in seen} <= {1, 2, 3} and {it["windows"] for it in seen} == {3}
    assert [it["iteration"] for it in seen] == list(range(1, len(seen) + 1)) and opt.iterations == len(seen)
    assert opt.objective_final < 0.9 * opt.objective_initial
    assert opt.best.value == opt.objective_final and opt.history == [opt.objective_initial, opt.objective_final]
    assert np.all(result.profiles.control_points <= 0.3 + 1e-12)
    assert result.variants["optimized"].positions.shape == result.variants["naive"].positions.shape
    windows = result.to_json()["windows"]
    assert [w["window"] for w in windows] == [1, 2, 3] and windows[0]["start_s"] == 0.0
    assert sum(w.get("iterations", 0) for w in windows) == opt.iterations
    assert all(w["objective_final"] <= w["objective_initial"] for w in windows if "objective_final" in w)
    # The windows' parameters partition the parameters that act on the grid.
    pp = result.pp
    parts = [window_parameters(pp.problem, a, b) for a, b in ((0, 16), (16, 32), (32, 41))]
    assert sum(p.size for p in parts) == len(np.unique(np.concatenate(parts)))


def test_gauss_newton_windows_lower_the_whole_objective_as_far_as_lbfgs_windows(engine):
    """Levenberg–Marquardt in each window (its exact tangent-linear Jacobian): the same windows, fewer iterations,
    and J over the whole motion at least as low as L-BFGS-B's windows reach."""
    lbfgs = run_plan(engine, ramp(), tip(), rod_limits(), WINDOWS).optimization
    gn = run_plan(engine, ramp(), tip(), rod_limits(), replace(WINDOWS, method="gauss-newton")).optimization
    assert gn.method == "gauss-newton-windows" and "3 windows of 0.08 s" in gn.message
    assert gn.objective_final < 0.9 * gn.objective_initial
    assert gn.objective_final <= 1.01 * lbfgs.objective_final
    assert gn.iterations <= lbfgs.iterations


def test_gauss_newton_windows_hand_their_tangent_time_on(engine, monkeypatch):
    """Each window's Levenberg–Marquardt checks the budget for its tangent-linear pass against the previous
    window's measured pass (the first window's against a guess); with a pass longer than the time left it does not
    start one: the window ends after its evaluation, with no iteration (virtual clock: an evaluation 1 s, a
    forward run a third of it, a pass 2 s)."""
    clock = VirtualClock(monkeypatch)
    options = replace(WINDOWS, method="gauss-newton")
    pp = build_plan_problem(engine, ramp(), tip(), rod_limits(), options)
    given, measured = [], []

    def spy(*args, **kwargs):
        given.append(kwargs.get("tangent_s"))
        res = optimize(*args, **kwargs)
        measured.append(res.tangent_s)
        return res

    optimize_windows(pp, options, window_optimizer=spy)
    assert given[0] is None and all(t is not None and t > 0.0 for t in measured)
    assert given[1:] == measured[:-1]
    started = clock.now
    res = optimize(pp, options, deadline=Deadline(started + 60.0), tangent_s=1e6)
    assert res.budget_limited and res.iterations == 0 and res.evaluations == 1
    # The start's forward run and no pass.
    assert clock.now - started == pytest.approx(EVALUATION_S / EVALUATION_FORWARD_RUNS)


def test_a_tangent_pass_that_cannot_end_in_time_stops_at_its_own_pace(engine, monkeypatch):
    """A pass whose pace (after a twentieth of its steps) says it ends past the deadline stops there, not at the
    deadline, and reports its projected time for the next window."""
    clock = VirtualClock(monkeypatch, evaluation_s=0.0, tangent_s=0.0)
    options = replace(WINDOWS, method="gauss-newton")
    pp = build_plan_problem(engine, ramp(), tip(), rod_limits(), options)
    n = pp.problem.n_steps

    def slow_pass(done: int, total: int) -> None:  # 0.2 s per step of the tangent pass, none in the simulations
        if total == 2 * n and done > n:
            clock.advance(0.2)

    started = clock.now
    res = optimize(pp, options, step_progress=slow_pass, deadline=Deadline(started + 4.0), tangent_s=1e-9)
    assert res.budget_limited and res.iterations == 0
    # Stopped at the pace check, well before the deadline, projecting the whole pass at its pace.
    assert clock.now - started == pytest.approx(0.2 * max(1, n // PROJECT_AFTER))
    assert res.tangent_s == pytest.approx(0.2 * n)


def test_the_first_trial_after_a_slow_tangent_pass_still_runs(engine, monkeypatch):
    """A pass that looked affordable at its pace check but ran slower ends with too little time for a trial: the
    trial runs all the same (its cost was committed with the pass), so the pass is not paid for and thrown away."""
    clock = VirtualClock(monkeypatch, evaluation_s=0.0, tangent_s=0.0)
    options = replace(WINDOWS, method="gauss-newton", max_iterations=1)
    pp = build_plan_problem(engine, ramp(), tip(), rod_limits(), options)
    n = pp.problem.n_steps
    evaluation_s, pass_s = 0.8, 1.0

    def slow(done: int, total: int) -> None:
        if total == n and done == n // 2:  # a forward run (the start, the trials)
            clock.advance(evaluation_s)
        if total == 2 * n and done > n + n // 2:  # the pass's second half, after its pace check
            clock.advance(pass_s / (n - n // 2))

    started = clock.now
    # Time enough for the start run, the pass as guessed (0.3 s) and a trial, but not for the trial after the pass
    # as it runs (1 s).
    res = optimize(pp, options, step_progress=slow, deadline=Deadline(started + evaluation_s + pass_s + 0.5),
                   tangent_s=0.3)
    # The start run, the pass as it ran, and the trial after it past the deadline.
    assert clock.now - started == pytest.approx(2 * evaluation_s + pass_s)
    assert res.iterations == 1 and res.evaluations == 2
    assert res.objective_final < res.objective_initial


def test_a_window_tangent_pass_reports_its_own_steps(engine):
    """A window's pass runs over the window's steps, and its progress says so: the pace check projects the pass
    from that count, not from the whole motion's steps (which would project it as long as a whole-motion pass)."""
    options = replace(WINDOWS, method="gauss-newton")
    pp = _problem(engine, options)
    problem, x = pp.problem, pp.fit.parameters
    states = pp.evaluate(x, gradient=False).rollout.states
    a, last = 8, 24
    free = window_parameters(problem, a, 16, first_influence(problem))
    sub = replace(pp, problem=replace(problem, window=Window(a, last, states[a], states[a - 1], free, x.copy())),
                  bounds=[pp.bounds[i] for i in free], ensemble=None)
    seen: list[tuple[int, int]] = []
    ensemble_gauss_newton(sub, x[free], sub.evaluate(x[free], gradient=False).rollout,
                          lambda done, total: seen.append((done, total)))
    assert seen[-1] == (last - a, last - a) < (problem.n_steps, problem.n_steps)


def test_overlapping_windows_optimize_part_of_each_span_again(engine):
    options = replace(WINDOWS, window_overlap=0.04, max_iterations=2)
    opt = run_plan(engine, ramp(), tip(), rod_limits(), options).optimization
    # Windows start every 0.04 s (steps 0, 8, 16, 24, 32) and stop after the one that reaches the end.
    assert [w["start_s"] for w in opt.windows] == pytest.approx([0.0, 0.04, 0.08, 0.12])
    assert "4 windows of 0.08 s (+0.04 s tail, 0.04 s overlap)" in opt.message
    assert opt.objective_final < opt.objective_initial


def test_parameters_acting_only_after_the_simulated_duration_are_in_no_window(engine):
    """A plan of the motion's first 0.1 s: the knots that act only after it change nothing the objective sees, so
    no window frees them (a Levenberg–Marquardt window would pay a tangent pass for each) and they keep the fit."""
    options = replace(WINDOWS, duration=0.1, knot_spacing=0.02)
    pp = _problem(engine, options)
    n, influence = pp.problem.n_steps, first_influence(pp.problem)
    beyond = np.flatnonzero(influence > n)
    assert beyond.size > 0
    res = optimize_windows(pp, options)
    assert sum(w["parameters"] for w in res.windows) == np.count_nonzero((influence > 0) & (influence <= n))
    np.testing.assert_array_equal(res.x[beyond], pp.fit.parameters[beyond])
    assert res.objective_final < res.objective_initial


def test_windows_interrupted_keep_the_fit_after_the_window(engine):
    pp = _problem(engine)

    def callback(it: dict) -> None:
        raise KeyboardInterrupt

    res = optimize_windows(pp, WINDOWS, callback=callback)
    assert res.interrupted and "window 1 of 3" in res.message
    assert res.objective_final <= res.objective_initial
    later = window_parameters(pp.problem, 16, pp.problem.n_steps + 1)
    np.testing.assert_array_equal(res.x[later], pp.fit.parameters[later])


def test_windows_interrupted_before_a_window_simulated_keep_the_earlier_windows(engine):
    """A cancel during the second window's first simulation: the first window's result stands."""

    def cancel_in_window_2(problem, call, progress):
        window = problem.problem.window
        if window is not None and window.first > 0:
            raise PlanCancelled("evaluation")
        return progress

    pp = recorded(_problem(engine), cancel_in_window_2)
    res = optimize_windows(pp, WINDOWS)
    assert res.interrupted and "interrupted (cancel requested) in window 2 of 3 before its first" in res.message
    assert [w.get("stopped") for w in res.windows][1] == "interrupted before its first simulation"
    assert res.objective_final < res.objective_initial  # window 1's improvement is kept
    assert not np.array_equal(res.x, pp.fit.parameters)


@pytest.mark.parametrize("window, tail, overlap, runs_after", [(0.08, 0.04, 0.04, True), (0.06, 0.0, 0.0, False)])
def test_a_window_without_time_for_one_simulation_is_skipped(engine, window, tail, overlap, runs_after):
    """Window 2's share does not cover its first simulation: it keeps the start and the later windows go on while
    the stored states reach their starts (overlapping windows), else they stop there."""
    options = replace(OPTIONS, knot_spacing=0.02, window=window, window_tail=tail, window_overlap=overlap,
                      max_iterations=2)
    pp = build_plan_problem(engine, ramp(), tip(), rod_limits(), options)
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise TimeBudgetError("no time", stage="optimization", elapsed_s=0.0)
        return optimize(*args, **kwargs)

    res = optimize_windows(pp, options, window_optimizer=flaky)
    stopped = [w.get("stopped") for w in res.windows]
    assert stopped[1] == "skipped: no time for its first simulation" and res.budget_limited
    assert "window 2 of" in res.message and "did not cover one simulation" in res.message
    if runs_after:
        assert len(calls) == sum(w["parameters"] > 0 for w in res.windows) >= 3
        assert stopped[2] == "converged or iteration cap"
    else:
        assert len(calls) == 2 and stopped[2] == "skipped: no simulated start" and "left no start state" in res.message
    assert res.objective_final <= res.objective_initial


def test_window_shares_do_not_count_the_first_steps_compile_time(engine, monkeypatch):
    """The windows' time shares keep a reserve of whole-motion forward runs, timed on the first one; a slow first
    step (numba compiling, the first plan after an install) must not be counted into that estimate, or it eats
    every window's share."""
    clock = VirtualClock(monkeypatch, evaluation_s=0.0, tangent_s=0.0)
    options = replace(WINDOWS, max_iterations=1, time_budget=4.0)
    compiling_first_step = paced(lambda problem, call, k: 2.5 if call == 1 and k == 1 else STEP_S, clock)
    res = optimize_windows(recorded(_problem(engine, options), compiling_first_step), options,
                           reserve_evaluations=1.6)
    stopped = [w.get("stopped") for w in res.windows]
    # Counted in, the 2.5 s step would have left 4 - 2.5 - 2.5 x 5.8 < 0 s: every window skipped.
    assert "skipped: no time left" not in stopped, stopped
    optimized = [w for w in res.windows if w["parameters"]]
    assert all("share_s" in w for w in optimized) and res.evaluations >= len(optimized) >= 2, res.windows


def test_a_slow_start_run_does_not_set_every_windows_reserve(engine, monkeypatch):
    """The reserve for the checks is timed per forward step by the median of the whole-motion start run and the
    Levenberg–Marquardt windows' runs: a start run slowed by another job (0.02 s per step, ten times the others)
    shrinks the first shares only."""
    clock = VirtualClock(monkeypatch, evaluation_s=0.0, tangent_s=0.0)
    options = replace(WINDOWS, method="gauss-newton", max_iterations=1, time_budget=60.0)
    slow_start = paced(lambda problem, call, k: 0.02 if call == 1 else STEP_S, clock)
    pp = recorded(_problem(engine, options), slow_start)
    res = optimize_windows(pp, options, reserve_evaluations=3.0)
    # The time left for the windows when each started (its share times the windows still to do).
    left = [w["share_s"] * (len(res.windows) - i) for i, w in enumerate(res.windows) if "share_s" in w]
    slow_reserve = 0.02 * pp.problem.n_steps * (1.0 + 3.0 * 3.0)
    # Window 2 times the reserve by the median of the slow run and window 1's: about half of it comes back.
    assert len(left) >= 2 and left[1] > left[0] + 0.3 * slow_reserve, (left, slow_reserve)


def test_profiles_slower_to_simulate_than_the_start_grow_the_reserve(engine, monkeypatch):
    """Rough optimized profiles take more Newton iterations per step than the start's, and the checks after the plan
    run them: L-BFGS-B windows whose points away from the window's start take three times as long per step
    to simulate scale the reserve (its evaluations and ``reserve_s``) by that, so the later windows get less."""
    clock = VirtualClock(monkeypatch, evaluation_s=0.0, tangent_s=0.0)
    options = replace(WINDOWS, max_iterations=1, time_budget=60.0)

    def at_start(problem: Any) -> bool:
        window = problem.problem.window
        return window is None or np.array_equal(problem.seen[-1], window.base[window.free])

    slower_later = paced(lambda problem, call, k: 0.004 if at_start(problem) else 0.012, clock)
    pp = recorded(_problem(engine, options), slower_later)
    reserve_s = 2.0
    res = optimize_windows(pp, options, reserve_evaluations=3.0, reserve_s=reserve_s)
    ratios = [w["forward_ratio"] for w in res.windows if "forward_ratio" in w]
    assert len(ratios) >= 2 and ratios == pytest.approx([3.0] * len(ratios)), ratios
    left = [w["share_s"] * (len(res.windows) - i) for i, w in enumerate(res.windows) if "share_s" in w]
    reserve = 0.004 * pp.problem.n_steps * (1.0 + 3.0 * 3.0) + reserve_s
    # Window 2's time left: window 1's time spent and about twice the reserve more (scaled from 1 to about 3).
    assert left[1] < left[0] - res.windows[0]["wall_s"] - 1.5 * reserve, (left, reserve)


def test_windows_need_a_positive_window(engine):
    pp = _problem(engine, OPTIONS)
    with pytest.raises(OptimizeError, match="positive window"):
        optimize_windows(pp, replace(OPTIONS, window=0.0))
    with pytest.raises(OptimizeError, match="tail"):
        optimize_windows(pp, replace(OPTIONS, window=0.1, window_tail=-1.0))
    with pytest.raises(OptimizeError, match="overlap"):
        optimize_windows(pp, replace(OPTIONS, window=0.1, window_overlap=0.1))
    with pytest.raises(TimeBudgetError, match="first simulation"):
        optimize_windows(pp, replace(OPTIONS, window=0.1, time_budget=1e-9))


def test_windows_hand_the_curvature_on(engine):
    """The first window measures the curvature with the probe; every later one starts from the previous one's
    secant (test_lbfgs.py: a known curvature replaces the probe)."""
    res = optimize_windows(_problem(engine), replace(WINDOWS, max_iterations=2))
    sources = [w["curvature_from"] for w in res.windows if "curvature_from" in w]
    assert sources[0] == "probe" and set(sources[1:]) == {"previous window"} and len(sources) >= 2


def test_descent_windows_take_one_gradient_per_window_iteration(engine):
    """``descent`` in each window with one iteration: the whole J falls about as far as L-BFGS-B's windows take it,
    with one gradient per window (the trial points are forward runs), and the curvature handed on."""
    options = replace(WINDOWS, max_iterations=1)
    lbfgs = optimize_windows(_problem(engine, options), options)
    pp = recorded(_problem(engine, options))
    res = optimize_windows(pp, replace(options, method="descent"))
    assert res.method == "descent-windows"
    ran = [w for w in res.windows if "evaluations" in w]
    assert res.evaluations == len(ran) == sum(pp.gradients) and all(w["evaluations"] == 1 for w in ran)
    assert res.value_evaluations == sum(w.get("value_evaluations", 0) for w in ran) == pp.gradients.count(False) - 2
    assert res.objective_final < 0.9 * res.objective_initial
    assert res.objective_final == pytest.approx(lbfgs.objective_final, rel=0.05)
    assert [w["curvature_from"] for w in ran][1:] == ["previous window"] * (len(ran) - 1)
