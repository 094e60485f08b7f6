"""The optimizer drivers (retarget.optimize.planner: Levenberg–Marquardt and L-BFGS-B) on a reduced rod on a motor: the objective goes down, limits
hold, Ctrl-C returns the best point so far, the ROS entry point validates its request."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.motion.motion import Motion
from retarget.optimize.adjoint import evaluate
from retarget.optimize.engines import reduced_engine
from retarget.optimize.limits import MotorLimits
from retarget.optimize.planner import PlanOptions, build_plan_problem, optimize, plan, run_plan
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule

OPTIONS = PlanOptions(knot_spacing=0.04, dt=0.005, max_iterations=2, baselines=False)


def _motion() -> Motion:
    t = np.linspace(0.0, 0.2, 41)
    return Motion(t, ("m",), (0.25 * np.clip(t / 0.1, 0.0, 1.0))[:, None])


def _bodies():
    return [TrackedBodyWeights("tip", WeightSchedule.constant(1.0), WeightSchedule.constant(0.0))]


@pytest.mark.parametrize("method", ["gauss-newton", "lbfgs"])
def test_plan_lowers_the_objective_and_respects_position_limits(rod_systems, method):
    from dataclasses import replace

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, replace(OPTIONS, method=method))
    opt = result.optimization
    assert opt.iterations >= 1 and opt.method == method
    assert opt.objective_final < 0.9 * opt.objective_initial
    assert np.all(result.profiles.control_points <= 0.3 + 1e-12)
    m = result.metrics()
    for key in ("objective_initial", "objective_final", "iterations", "wall_s", "optimized", "peak_torque_nm"):
        assert key in m
    assert m["optimized"]["peak_deviation_m"] > 0
    # Each variant reports how far it deforms the rod against the model's training run (0.08 s of a swing, up to
    # 0.16 rad; this ramp goes to 0.25 rad: ≈ 2 ×), and the plan warns when the optimized one is beyond 1.25 ×.
    part = rs.bodies[0].name
    for name in ("naive", "optimized"):
        assert list(m[name]["training_range_ratio"]) == [part] and m[name]["training_range_ratio"][part] > 0
    beyond = m["optimized"]["training_range_ratio"][part] > 1.25
    assert any(f"optimized trajectory: the motion deforms {part}" in w for w in result.warnings) == beyond


@pytest.mark.parametrize("method", ["gauss-newton", "lbfgs"])
def test_keyboard_interrupt_returns_the_best_point(rod_systems, method):
    from dataclasses import replace

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    seen = []

    def callback(it: dict) -> None:
        seen.append(it)
        raise KeyboardInterrupt

    res = optimize(pp, replace(OPTIONS, method=method), callback=callback)
    assert res.interrupted and "interrupted" in res.message
    assert len(seen) == 1 and set(seen[0]) == {"iteration", "objective", "gradient_norm"}
    assert res.objective_final <= res.objective_initial
    assert res.best.value == res.objective_final


def test_method_default_auto_and_unknown(rod_systems):
    from dataclasses import replace

    from retarget.optimize.errors import OptimizeError

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    assert optimize(pp, replace(OPTIONS, max_iterations=1)).method == "lbfgs"  # the default
    assert optimize(pp, replace(OPTIONS, max_iterations=1, method="auto")).method == "gauss-newton"
    with pytest.raises(OptimizeError, match="unknown method"):
        optimize(pp, replace(OPTIONS, method="newton"))


def test_plan_request_is_validated():
    with pytest.raises(InputError):
        plan({"robot": "single_rod", "time": [0.0, 1.0]}, None)


def test_time_budget_returns_the_best_iterate_flagged(rod_systems):
    import time
    from dataclasses import replace

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    options = replace(OPTIONS, max_iterations=100, relative_tolerance=0.0)
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options)
    evaluate(pp.problem, pp.fit.parameters)  # compiles the engine
    started = time.perf_counter()
    evaluate(pp.problem, pp.fit.parameters)
    # Room for a few evaluations, whatever the machine's load.
    options = replace(options, time_budget=10.0 * (time.perf_counter() - started) + 0.5)
    seen, returned = [], []

    def slow_callback(it: dict) -> None:
        # The first iteration "takes" the whole budget, so the optimizer must stop right after it.
        seen.append(it)
        time.sleep(options.time_budget)
        returned.append(time.perf_counter())

    res = optimize(pp, options, callback=slow_callback)
    after_deadline = time.perf_counter() - returned[0]
    assert res.budget_limited and not res.interrupted and "time budget" in res.message
    assert len(seen) == res.iterations == 1
    assert res.objective_final <= res.objective_initial and res.best.value == res.objective_final
    # The deadline is honoured: no evaluation starts once it has passed.
    assert after_deadline < 0.5 * res.evaluation_s
    assert res.initial.value == res.objective_initial


def test_time_budget_too_small_for_anything_is_a_clear_error(rod_systems):
    from dataclasses import replace

    from retarget.optimize.errors import TimeBudgetError

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    engine = reduced_engine(rs, 1e-10)
    pp = build_plan_problem(engine, _motion(), _bodies(), limits, OPTIONS)
    with pytest.raises(TimeBudgetError, match="first simulation") as info:
        optimize(pp, replace(OPTIONS, time_budget=1e-9))
    assert info.value.stage == "optimization"
    with pytest.raises(TimeBudgetError, match="targets"):
        run_plan(engine, _motion(), _bodies(), limits, replace(OPTIONS, time_budget=1e-9))


def test_naive_variant_is_the_first_evaluation(rod_systems):
    from retarget.optimize.planner import simulate_variant

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    again = simulate_variant(result.pp, "naive", result.pp.fit.profiles)
    naive = result.variants["naive"]
    np.testing.assert_allclose(naive.positions, again.positions, rtol=0, atol=1e-12)
    np.testing.assert_allclose(naive.torques, again.torques, rtol=0, atol=1e-9)
    np.testing.assert_allclose(naive.angles, again.angles, rtol=0, atol=1e-12)
    assert naive.metrics == again.metrics


def test_verify_plan_at_the_planning_step_reproduces_the_plan_and_runs_finer(rod_systems):
    """Re-simulated at the planning step the naive and optimized deviations are the plan's own; at a finer step
    the same profiles give a verdict (``holds``) from the two peak ratios."""
    from retarget.optimize.planner import verify_plan

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    same = verify_plan(result, OPTIONS.dt)
    assert same["steps"] == result.pp.problem.n_steps
    for name in ("naive", "optimized"):
        for key, value in result.variants[name].metrics.items():
            assert same[name][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, key)
    assert same["peak_ratio"] == pytest.approx(same["planning_peak_ratio"], rel=1e-9) and same["holds"]
    fine = verify_plan(result, OPTIONS.dt / 5)
    assert fine["steps"] == 5 * result.pp.problem.n_steps and fine["dt_s"] == OPTIONS.dt / 5
    ratio, planned = fine["peak_ratio"], fine["planning_peak_ratio"]
    assert fine["holds"] == (planned >= 1 or 1 - ratio >= 0.5 * (1 - planned))
    with pytest.raises(ValueError, match="positive"):
        verify_plan(result, 0.0)


def _tiny_request(tiny_artifact, monkeypatch, tmp_path, **extra):
    """A plan request for the tiny robot's ramp with its artifact (isolated cache and model folders)."""
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    folder, npz = tiny_artifact
    t = np.linspace(0.0, 0.2, 41)
    return {"robot": str(folder / "tiny_rod.yaml"), "joint_names": ["m"], "time": t.tolist(),
            "positions": (0.2 * np.clip(t / 0.1, 0, 1))[:, None].tolist(), "reduced_file": str(npz),
            "dt": 0.005, "knot_spacing": 0.04, "max_iterations": 1, **extra}


def test_plan_request_budget_too_small_for_the_targets(tiny_artifact, monkeypatch, tmp_path):
    from retarget.optimize.errors import TimeBudgetError

    request = _tiny_request(tiny_artifact, monkeypatch, tmp_path, time_budget=1e-6)
    with pytest.raises(TimeBudgetError, match="targets"):
        plan(request, None)


def test_plan_request_with_windows(tiny_artifact, monkeypatch, tmp_path):
    """The ROS entry point passes ``window`` / ``window_tail`` on (the planner node's parameters)."""
    request = _tiny_request(tiny_artifact, monkeypatch, tmp_path, window=0.1, window_tail=0.05)
    metrics = plan(request, None)["metrics"]
    assert metrics["method"] == "lbfgs-windows" and "2 windows of 0.1 s (+0.05 s tail)" in metrics["message"]
    assert metrics["objective_final"] <= metrics["objective_initial"]


def test_plan_request_cancelled_returns_the_best_iterate_so_far(tiny_artifact, monkeypatch, tmp_path):
    """The ROS action's cancel: the optimizer stops as on Ctrl-C, the request still answers with its best iterate."""
    import retarget.optimize.planner as planner

    monkeypatch.setattr(planner, "CANCEL_POLL_S", 0.0)
    request = _tiny_request(tiny_artifact, monkeypatch, tmp_path, max_iterations=50, relative_tolerance=1e-15)
    reports: list = []
    iterations: list = []

    def progress(info: dict) -> None:
        reports.append(info)
        if "iteration" in info:
            iterations.append(info)

    out = plan(request, progress, cancelled=lambda: bool(iterations))
    metrics = out["metrics"]
    assert metrics["cancelled"] and metrics["interrupted"] and metrics["iterations"] == 1 == len(iterations)
    assert reports[0] == {"stage": "targets"} and {"stage": "optimizing"} in reports
    assert "interrupted (cancel requested)" in metrics["message"]
    assert metrics["objective_final"] <= metrics["objective_initial"]
    assert len(out["time"]) == len(out["positions"]) > 10
    never = plan(request | {"max_iterations": 1}, None, cancelled=lambda: False)["metrics"]
    assert not never["cancelled"] and not never["interrupted"]


def test_plan_request_verifies_at_a_finer_step_unless_asked_not_to(tiny_artifact, monkeypatch, tmp_path):
    """As `retarget plan`: the ROS entry re-simulates at dt / 5 by default; a budget that runs out skips it."""
    import retarget.optimize.planner as planner

    request = _tiny_request(tiny_artifact, monkeypatch, tmp_path)
    stages: list = []
    metrics = plan(request, lambda info: stages.append(info.get("stage")))["metrics"]
    assert metrics["verify"]["dt_s"] == pytest.approx(0.001) and metrics["verify"]["steps"] == 200
    assert set(metrics["verify"]) >= {"naive", "optimized", "peak_ratio", "holds"} and stages[-1] == "verifying"
    assert "verify" not in plan(request | {"verify": False}, None)["metrics"]
    assert plan(request | {"verify_dt": 0.0025}, None)["metrics"]["verify"]["steps"] == 80

    def out_of_time(result, dt, progress=None):
        raise planner._BudgetExhausted

    monkeypatch.setattr(planner, "verify_plan", out_of_time)
    metrics = plan(request, None)["metrics"]
    assert "verify" not in metrics and "not verified at dt 0.001 s: the time budget ran out" in metrics["warnings"]


def test_plan_request_cancelled_before_any_result_raises(tiny_artifact, monkeypatch, tmp_path):
    from retarget.optimize.errors import PlanCancelled

    polled: list = []

    def cancelled() -> bool:
        polled.append(True)
        return True

    with pytest.raises(PlanCancelled, match="cancelled during targets") as info:
        plan(_tiny_request(tiny_artifact, monkeypatch, tmp_path), None, cancelled=cancelled)
    assert info.value.stage == "targets" and len(polled) == 1


def _training_request(tiny_artifact, monkeypatch, tmp_path, **extra):
    """:func:`_tiny_request` without a model: the plan trains one in-process (``allow_training``)."""
    request = _tiny_request(tiny_artifact, monkeypatch, tmp_path, allow_training=True, **extra)
    del request["reduced_file"]
    return request


def test_plan_request_cancelled_during_in_process_training(tiny_artifact, monkeypatch, tmp_path):
    """Training takes minutes to hours on a real robot: the cancel is polled per training step, the feedback names
    the stage, and no half-trained model is cached."""
    from retarget.optimize.errors import PlanCancelled
    from retarget.optimize.planner import TRAINING_STAGE

    stages: list = []
    with pytest.raises(PlanCancelled) as info:
        plan(_training_request(tiny_artifact, monkeypatch, tmp_path), stages.append, cancelled=lambda: True)
    assert info.value.stage == TRAINING_STAGE and stages == [{"stage": TRAINING_STAGE}]
    assert not list((tmp_path / "cache").rglob("*.pkl"))


def test_plan_request_budget_runs_out_during_in_process_training(tiny_artifact, monkeypatch, tmp_path):
    from retarget.optimize.errors import TimeBudgetError

    with pytest.raises(TimeBudgetError, match="while training the reduced model") as info:
        plan(_training_request(tiny_artifact, monkeypatch, tmp_path, time_budget=1e-6), None)
    assert info.value.stage == "training" and not list((tmp_path / "cache").rglob("*.pkl"))


def _recorded_problem(rod_systems, monkeypatch):
    """The rod's plan problem (wide limits) and the list every point the optimizer evaluates is appended to."""
    import retarget.optimize.planner as planner

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-1.0, 1.0, 0.0)})
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    seen: list = []
    real = planner.evaluate

    def recording(problem, x, *args, **kwargs):
        seen.append(np.array(x, copy=True))
        return real(problem, x, *args, **kwargs)

    monkeypatch.setattr(planner, "evaluate", recording)
    return pp, seen


def test_first_step_is_measured_from_the_curvature_along_steepest_descent(rod_systems, monkeypatch):
    """Default first step: the minimizer of the quadratic through J(x₀), its slope and a probe's gradient; J along
    that line is lower there than a third of the way or three times as far, and the first trial point lies there."""
    from dataclasses import replace

    import retarget.optimize.planner as planner

    pp, seen = _recorded_problem(rod_systems, monkeypatch)
    res = optimize(pp, replace(OPTIONS, max_iterations=1))
    x0 = pp.fit.parameters
    assert np.allclose(seen[0], x0) and np.isclose(np.linalg.norm(seen[1] - x0), planner.FIRST_STEP_PROBE)
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


def test_first_step_given_and_invalid(rod_systems, monkeypatch):
    from dataclasses import replace

    from retarget.optimize.errors import OptimizeError

    pp, seen = _recorded_problem(rod_systems, monkeypatch)
    res = optimize(pp, replace(OPTIONS, max_iterations=1, first_step=0.01))
    assert res.first_step == 0.01
    assert np.isclose(np.linalg.norm(seen[1] - pp.fit.parameters), 0.01)  # no probe: the first trial is 0.01 away
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(OptimizeError, match="first step"):
            optimize(pp, replace(OPTIONS, first_step=bad))


def test_a_plan_beyond_the_training_range_is_reported(rod_systems):
    """The same model asked for a swing well beyond its training: the variants report it and the plan warns."""
    _, rs = rod_systems
    t = np.linspace(0.0, 0.2, 41)
    big = Motion(t, ("m",), (1.2 * np.clip(t / 0.05, 0.0, 1.0))[:, None])
    limits = MotorLimits.build(("m",), {"m": (-2.0, 2.0, 0.0)})
    from dataclasses import replace

    result = run_plan(reduced_engine(rs, 1e-10), big, _bodies(), limits, replace(OPTIONS, max_iterations=1))
    name = rs.bodies[0].name
    assert result.variants["naive"].training_range[name] > 2.5
    assert result.variants["optimized"].training_range[name] > 1.25
    assert any(f"optimized trajectory: the motion deforms {name}" in w for w in result.warnings)


@pytest.mark.parametrize("window", [None, 0.08])
def test_a_too_fast_input_starts_from_its_speed_feasible_projection(rod_systems, window, tmp_path):
    """The ramp (2.5 rad/s) on a 2 rad/s servo: the optimizer starts from the speed-feasible projection (the
    ``speed_limited`` variant), the naive baseline still plays the input as authored, and ``objective_initial`` is
    the naive J; with ``start="input"`` the fit is the start."""
    from dataclasses import replace

    from retarget.optimize.errors import OptimizeError
    from retarget.optimize.limits import ServoSpec, check_profile_limits

    _, rs = rod_systems
    engine = reduced_engine(rs, 1e-10)
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)}, ServoSpec("slow", 2.0, 3.0))
    options = replace(OPTIONS, window=window, window_tail=0.04)
    result = run_plan(engine, _motion(), _bodies(), limits, options)
    m = result.metrics()
    assert m["start"] == "speed-feasible" and list(result.variants)[:2] == ["naive", "speed_limited"]
    assert any("exceeds the speed limit of m" in w for w in result.warnings)
    pp = result.pp
    np.testing.assert_allclose(result.variants["naive"].angles, pp.fit.profiles.evaluate(pp.targets.times))
    start = result.variants["speed_limited"]
    assert np.abs(np.gradient(start.angles[:, 0], pp.targets.times)).max() < 2.0
    naive_j = evaluate(pp.problem, pp.fit.parameters, gradient=False).value
    assert m["objective_initial"] == pytest.approx(naive_j, rel=1e-12)
    assert m["objective_final"] <= m["objective_start"] < m["objective_initial"]
    assert [v for v in check_profile_limits(result.profiles, limits) if v.kind == "velocity"] == []
    assert "speed_limited" in m and m["speed_limited"]["peak_deviation_m"] > 0
    from retarget.report.plots import write_plan_report

    files = write_plan_report(result, tmp_path)
    assert "speed_limited_angles" in np.load(files[-1]) and all(f.stat().st_size > 0 for f in files)
    plain = run_plan(engine, _motion(), _bodies(), limits, replace(options, start="input", max_iterations=0))
    assert "speed_limited" not in plain.variants and plain.metrics()["start"] == "input"
    assert plain.metrics()["objective_initial"] == pytest.approx(naive_j, rel=1e-12)
    with pytest.raises(OptimizeError, match="unknown start"):
        run_plan(engine, _motion(), _bodies(), limits, replace(options, start="slow"))


def test_windows_lower_the_whole_objective_and_respect_limits(rod_systems):
    """Receding-horizon windows: every window's parameters are optimized in turn; J over the whole motion falls,
    bounds hold, the callback says which window, and the reported best is the whole-motion evaluation."""
    from dataclasses import replace

    from retarget.optimize.adjoint import window_parameters

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    options = replace(OPTIONS, window=0.08, window_tail=0.04, max_iterations=3)
    seen = []
    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options,
                      callback=lambda it: seen.append(it))
    opt = result.optimization
    assert opt.method == "lbfgs-windows" and "3 windows of 0.08 s" in opt.message
    assert {1, 2} <= {it["window"] for it in seen} <= {1, 2, 3} and {it["windows"] for it in seen} == {3}
    assert [it["iteration"] for it in seen] == list(range(1, len(seen) + 1)) and opt.iterations == len(seen)
    assert opt.objective_final < 0.9 * opt.objective_initial
    assert opt.best.value == opt.objective_final and opt.history == [opt.objective_initial, opt.objective_final]
    assert np.all(result.profiles.control_points <= 0.3 + 1e-12)
    assert result.variants["optimized"].positions.shape == result.variants["naive"].positions.shape
    windows = result.metrics()["windows"]
    assert [w["window"] for w in windows] == [1, 2, 3] and windows[0]["start_s"] == 0.0
    assert sum(w.get("iterations", 0) for w in windows) == opt.iterations
    assert all(w["objective_final"] <= w["objective_initial"] for w in windows if "objective_final" in w)
    # The windows' parameters partition the parameters that act on the grid.
    pp = result.pp
    parts = [window_parameters(pp.problem, a, b) for a, b in ((0, 16), (16, 32), (32, 41))]
    assert sum(p.size for p in parts) == len(np.unique(np.concatenate(parts)))


def test_overlapping_windows_optimize_part_of_each_span_again(rod_systems):
    from dataclasses import replace

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    options = replace(OPTIONS, window=0.08, window_tail=0.04, window_overlap=0.04, max_iterations=2)
    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options)
    opt = result.optimization
    # Windows start every 0.04 s (steps 0, 8, 16, 24, 32) and stop after the one that reaches the end.
    assert [w["start_s"] for w in opt.windows] == pytest.approx([0.0, 0.04, 0.08, 0.12])
    assert "4 windows of 0.08 s (+0.04 s tail, 0.04 s overlap)" in opt.message
    assert opt.objective_final < opt.objective_initial


def test_windows_interrupted_keep_the_fit_after_the_window(rod_systems):
    from dataclasses import replace

    from retarget.optimize.planner import optimize_windows

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    options = replace(OPTIONS, window=0.08, window_tail=0.04, max_iterations=3)
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options)

    def callback(it: dict) -> None:
        raise KeyboardInterrupt

    res = optimize_windows(pp, options, callback=callback)
    assert res.interrupted and "window 1 of 3" in res.message
    assert res.objective_final <= res.objective_initial
    from retarget.optimize.adjoint import window_parameters

    later = window_parameters(pp.problem, 16, pp.problem.n_steps + 1)
    np.testing.assert_array_equal(res.x[later], pp.fit.parameters[later])


def test_windows_interrupted_before_a_window_simulated_keep_the_earlier_windows(rod_systems, monkeypatch):
    """Ctrl-C (or a cancel) during the second window's first simulation: the first window's result stands."""
    from dataclasses import replace

    import retarget.optimize.planner as planner

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    options = replace(OPTIONS, window=0.08, window_tail=0.04, max_iterations=3)
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options)
    real, calls = planner._first_evaluation, []

    def first_evaluation(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the whole motion, window 1, then window 2
            raise planner.PlanCancelled("evaluation")
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "_first_evaluation", first_evaluation)
    res = planner.optimize_windows(pp, options)
    assert res.interrupted and "interrupted (cancel requested) in window 2 of 3 before its first" in res.message
    assert [w.get("stopped") for w in res.windows][1] == "interrupted before its first simulation"
    assert res.objective_final < res.objective_initial  # window 1's improvement is kept
    assert not np.array_equal(res.x, pp.fit.parameters)


@pytest.mark.parametrize("window, tail, overlap, runs_after", [(0.08, 0.04, 0.04, True), (0.06, 0.0, 0.0, False)])
def test_a_window_without_time_for_one_simulation_is_skipped(rod_systems, monkeypatch, window, tail, overlap,
                                                             runs_after):
    """Window 2's share does not cover its first simulation: it keeps the start and the later windows go on while
    the stored states reach their starts (overlapping windows), else they stop there."""
    from dataclasses import replace

    import retarget.optimize.planner as planner_module
    from retarget.optimize.errors import TimeBudgetError

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    options = replace(OPTIONS, knot_spacing=0.02, window=window, window_tail=tail, window_overlap=overlap,
                      max_iterations=2)
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options)
    real, calls = planner_module.optimize, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise TimeBudgetError("no time", stage="optimization", elapsed_s=0.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(planner_module, "optimize", flaky)
    res = planner_module.optimize_windows(pp, options)
    stopped = [w.get("stopped") for w in res.windows]
    assert stopped[1] == "skipped: no time for its first simulation" and res.budget_limited
    assert "window 2 of" in res.message and "did not cover one simulation" in res.message
    if runs_after:
        assert len(calls) == sum(w["parameters"] > 0 for w in res.windows) >= 3
        assert stopped[2] == "converged or iteration cap"
    else:
        assert len(calls) == 2 and stopped[2] == "skipped: no simulated start" and "left no start state" in res.message
    assert res.objective_final <= res.objective_initial


def test_window_shares_do_not_count_the_first_steps_compile_time(rod_systems, monkeypatch):
    """The windows' time shares keep a reserve of whole-motion forward runs, timed on the first one; a slow first
    step (numba compiling, the first plan after an install) must not be counted into that estimate, or it eats
    every window's share (measured: a 900 s drummer plan left 300 s unused)."""
    import time
    from dataclasses import replace

    import retarget.optimize.planner as planner

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    options = replace(OPTIONS, window=0.08, window_tail=0.04, max_iterations=1, time_budget=4.0)
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options)
    planner.optimize_windows(pp, replace(options, time_budget=None))  # compiled and warm
    real, calls = planner._first_evaluation, []

    def slow_first_step(problem, x, gradient, progress):
        calls.append(1)
        if len(calls) > 1:
            return real(problem, x, gradient, progress)

        def compiling(k: int, total: int) -> None:
            if k == 1:
                time.sleep(2.5)
            if progress is not None:
                progress(k, total)

        return real(problem, x, gradient, compiling)

    monkeypatch.setattr(planner, "_first_evaluation", slow_first_step)
    res = planner.optimize_windows(pp, options, reserve_evaluations=1.6)
    stopped = [w.get("stopped") for w in res.windows]
    # Counted in, the 2.5 s step would have left 4 - 2.5 - 2.5 x 5.8 < 0 s: every window skipped.
    assert "skipped: no time left" not in stopped, stopped
    assert res.evaluations >= 1


def test_windows_need_a_positive_window(rod_systems):
    from dataclasses import replace

    from retarget.optimize.errors import OptimizeError
    from retarget.optimize.planner import optimize_windows

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    with pytest.raises(OptimizeError, match="positive window"):
        optimize_windows(pp, replace(OPTIONS, window=0.0))
    with pytest.raises(OptimizeError, match="tail"):
        optimize_windows(pp, replace(OPTIONS, window=0.1, window_tail=-1.0))
    from retarget.optimize.errors import TimeBudgetError

    with pytest.raises(OptimizeError, match="overlap"):
        optimize_windows(pp, replace(OPTIONS, window=0.1, window_overlap=0.1))
    with pytest.raises(TimeBudgetError, match="first simulation"):
        optimize_windows(pp, replace(OPTIONS, window=0.1, time_budget=1e-9))


def test_torque_penalty_keeps_the_plan_nearer_the_stall_torque(rod_systems):
    """With a servo whose stall torque is below what the input needs, the penalty keeps the plan within it; the
    same plan with the penalty off (weight 0, the default: only reported and warned) exceeds it."""
    from dataclasses import replace

    from retarget.optimize.limits import ServoSpec

    _, rs = rod_systems
    engine = reduced_engine(rs, 1e-10)
    free = MotorLimits.build(("m",), {"m": (-1.0, 1.0, 0.0)})
    naive = run_plan(engine, _motion(), _bodies(), free, replace(OPTIONS, max_iterations=0))
    stall = 0.6 * np.abs(naive.variants["naive"].torques).max()
    weak = MotorLimits.build(("m",), {"m": (-1.0, 1.0, 0.0)}, ServoSpec("weak", 8.0, stall))
    options = replace(OPTIONS, max_iterations=6)
    off = run_plan(engine, _motion(), _bodies(), weak, replace(options, torque_weight=0.0))
    on = run_plan(engine, _motion(), _bodies(), weak, replace(options, torque_weight=1e3))
    peak_off, peak_on = (r.metrics()["peak_torque_nm"]["m"] for r in (off, on))
    # Measured: naive 0.541 N m, stall 0.325, off 0.336, on 0.294 (about the threshold, 0.9 x stall = 0.292).
    assert peak_off > stall and peak_on <= stall
    for result in (off, on):  # the input itself is beyond this servo, and each plan says so
        assert any(w.startswith("input as authored (naive playback): motor 'm' needs") for w in result.warnings)
        assert result.metrics()["naive"]["peak_torque_ratio"] == pytest.approx(1 / 0.6, rel=1e-9)
    assert any(w.startswith("motor 'm' needs") for w in off.warnings)
    assert not any(w.startswith("motor 'm' needs") for w in on.warnings)
    assert on.metrics()["optimized"]["peak_torque_ratio"] <= 1.0 < off.metrics()["optimized"]["peak_torque_ratio"]


def test_plan_request_passes_the_torque_penalty_on(tiny_artifact, monkeypatch, tmp_path):
    """The ROS entry point maps ``torque_weight`` / ``torque_margin`` (the planner node's parameters) to the
    options; 0 keeps the penalty off (the default) rather than meaning "default"."""
    import retarget.optimize.planner as planner_module

    seen = []

    class Captured(Exception):
        pass

    def capture(engine, motion, bodies, limits, options, *args, **kwargs):
        seen.append(options)
        raise Captured

    monkeypatch.setattr(planner_module, "run_plan", capture)
    for extra, expected in (({"torque_weight": 10.0, "torque_margin": 0.2}, (10.0, 0.2)),
                            ({"torque_weight": 0.0}, (0.0, 0.1)), ({}, (0.0, 0.1))):
        with pytest.raises(Captured):
            plan(_tiny_request(tiny_artifact, monkeypatch, tmp_path, **extra), None)
        assert (seen[-1].torque_weight, seen[-1].torque_margin) == expected


def test_a_known_curvature_replaces_the_probe_and_windows_hand_it_on(rod_systems):
    """With ``curvature`` the first step is the minimizer of that quadratic along steepest descent, without the
    probe simulation; the secant curvature of the first trial is returned, and windows after the first use the
    previous one's."""
    from dataclasses import replace

    from retarget.optimize.planner import optimize_windows

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    options = replace(OPTIONS, max_iterations=1)
    pp = build_plan_problem(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options)
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
    res = optimize_windows(pp, replace(options, window=0.08, window_tail=0.04, max_iterations=2))
    sources = [w["curvature_from"] for w in res.windows if "curvature_from" in w]
    assert sources[0] == "probe" and set(sources[1:]) == {"previous window"} and len(sources) >= 2


@pytest.mark.parametrize(("end", "expected"), [(3.0, "the simulation ends at 3.00 s, before the motion stops moving "
                                                     "(9.00 s)"),
                                               (9.2, "only 0.20 s of ring-out after the motion stops")])
def test_no_shaped_baselines_without_ring_out_says_why(end: float, expected: str) -> None:
    """A simulation cut before the motion stops (``--duration``) has no ring-out at all: said so, not as a
    negative ring-out."""
    from types import SimpleNamespace

    from retarget.optimize.planner import _shaped_baselines

    t = np.linspace(0.0, 10.0, 101)
    motion = Motion(t, ("a",), np.minimum(t, 9.0)[:, None])
    pp = SimpleNamespace(motion=motion, targets=SimpleNamespace(times=np.linspace(0.0, end, 51)))
    warnings: list[str] = []
    assert _shaped_baselines(pp, None, None, warnings) == {}  # type: ignore[arg-type]
    assert len(warnings) == 1 and expected in warnings[0]


def test_the_budget_keeps_time_for_the_verification(rod_systems, tiny_artifact, monkeypatch, tmp_path):
    """With a verify_dt the optimizer's reserve grows by two forward runs at verify_dt (2 dt / verify_dt forward
    runs at the planning step, an evaluation being about three): the ROS entry and `retarget plan` set it."""
    from dataclasses import replace

    import retarget.optimize.planner as planner
    from retarget.optimize.planner import VERIFY_COST_FACTOR as F
    from retarget.optimize.planner import verification_reserve

    assert verification_reserve(OPTIONS) == 0.0
    assert verification_reserve(replace(OPTIONS, verify_dt=0.0)) == 0.0
    assert verification_reserve(replace(OPTIONS, dt=0.002, verify_dt=0.001)) == pytest.approx(F * 4.0 / 3.0)
    assert F >= 1.0
    seen: list[float] = []
    real = planner.optimize

    def spy(*args, **kwargs):
        seen.append(kwargs["reserve_evaluations"])
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "optimize", spy)
    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    engine = reduced_engine(rs, 1e-10)
    run_plan(engine, _motion(), _bodies(), limits, OPTIONS)
    run_plan(engine, _motion(), _bodies(), limits, replace(OPTIONS, verify_dt=0.001))
    assert seen == [0.0, pytest.approx(F * 2.0 * 0.005 / 0.001 / 3.0)]
    # The ROS entry passes its verification step (default dt / 5: 10 forward runs, 10 / 3 evaluations), or none.
    request = _tiny_request(tiny_artifact, monkeypatch, tmp_path)
    seen.clear()
    plan(request, None)
    plan(request | {"verify": False}, None)
    assert seen == [pytest.approx(F * 10.0 / 3.0), 0.0]


def test_the_budget_starts_after_the_warm_up(tiny_artifact, monkeypatch, tmp_path):
    """A budgeted request first plans a short excerpt for one iteration (numba compiles there, reported as
    `compiling kernels`), then starts its clock: a warm-up longer than the whole budget leaves it intact."""
    import time

    import retarget.optimize.planner as planner

    calls: list = []
    real = planner.warm_up

    def slow_warm_up(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        time.sleep(2.5)  # a cold numba cache: longer than the budget below
        return calls[-1]

    monkeypatch.setattr(planner, "warm_up", slow_warm_up)
    stages: list = []
    request = _tiny_request(tiny_artifact, monkeypatch, tmp_path, time_budget=2.0)
    out = plan(request, lambda info: stages.append(info.get("stage")))
    assert len(calls) == 1 and calls[0] > 0.0
    assert stages[0] == planner.WARM_UP_STAGE and "targets" in stages and len(out["positions"]) > 10
    assert "verify" in out["metrics"]
    calls.clear()
    plan(_tiny_request(tiny_artifact, monkeypatch, tmp_path), None)  # no budget: no warm-up
    assert calls == []


def test_warm_up_runs_a_short_plan_and_stops_on_a_cancel_or_ctrl_c(rod_systems):
    from dataclasses import replace

    import retarget.optimize.planner as planner
    from retarget.optimize.errors import PlanCancelled

    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    engine = reduced_engine(rs, 1e-10)
    long = Motion(np.linspace(0.0, 1.0, 201), ("m",), 0.2 * np.sin(np.linspace(0.0, 1.0, 201))[:, None])
    seen: list = []
    assert planner.warm_up(engine, long, _bodies(), limits, replace(OPTIONS, verify_dt=0.001),
                           lambda stage, k, n: seen.append((stage, n))) > 0.0
    # 0.2 s of the 1 s motion at dt 5 ms (40 steps; an evaluation's bar counts forward + adjoint), then verified.
    assert ("targets", 41) in seen and ("evaluation (forward + adjoint)", 80) in seen and ("verifying", 200) in seen
    assert not any(n > 200 for _, n in seen)
    for interrupt in (PlanCancelled("x"), KeyboardInterrupt()):
        starts: list = []

        def progress(stage, k, n, interrupt=interrupt, starts=starts):
            if stage.startswith("evaluation") and k == 1:
                starts.append(1)
                if len(starts) == 2:  # after the first evaluation: the optimizer returns its best point
                    raise interrupt

        with pytest.raises(type(interrupt)):
            planner.warm_up(engine, long, _bodies(), limits, OPTIONS, progress)
        assert len(starts) == 2


def test_a_cancel_during_the_warm_up_ends_the_request(tiny_artifact, monkeypatch, tmp_path):
    import retarget.optimize.planner as planner
    from retarget.optimize.errors import PlanCancelled

    monkeypatch.setattr(planner, "CANCEL_POLL_S", 0.0)
    with pytest.raises(PlanCancelled, match="cancelled during compiling kernels"):
        plan(_tiny_request(tiny_artifact, monkeypatch, tmp_path, time_budget=60.0), None, cancelled=lambda: True)
