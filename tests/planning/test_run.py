"""The planning chain (retarget.planning.run): :func:`run_plan` on the reduced rod on a motor (targets,
optimization, the torque penalty's continuation, the speed-feasible start, the budget's reserve for the
verification, :func:`warm_up`), and :func:`plan` — the one entry of ``retarget plan``, the planner node and the
benchmarks — on the tiny robot and its ``retarget reduce`` artifact (input check, model gate, budget, cancel,
windows, in-process training, verification at a finer step, warm-up)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rod_plan import OPTIONS, ramp, rod_limits, tip
from virtual_clock import EVALUATION_S, VirtualClock

from retarget.errors import InputError
from retarget.motion.motion import Motion
from retarget.optimize.adjoint import evaluate
from retarget.optimize.control import EVALUATION_FORWARD_RUNS
from retarget.optimize.errors import OptimizeError, PlanCancelled, TimeBudgetError
from retarget.optimize.limits import ServoSpec, check_profile_limits
from retarget.planning.checks import RunFigures, Verification
from retarget.planning.options import PlanOptions
from retarget.planning.settings import options_from_parameters
from retarget.planning.run import WARM_UP_STAGE, PlanProgress, plan, run_plan, warm_up
from retarget.planning.stages import FEEDBACK_STAGES, TRAINING_STAGE
from retarget.planning.verification import verify_plan
from retarget.sim.adapters import reduced_engine


@pytest.fixture(scope="module")
def engine(rod_systems):
    _, rs = rod_systems
    return reduced_engine(rs, 1e-10)


# --- run_plan on the reduced rod -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["gauss-newton", "lbfgs"])
def test_plan_lowers_the_objective_and_respects_position_limits(rod_systems, engine, method):
    _, rs = rod_systems
    result = run_plan(engine, ramp(), tip(), rod_limits(), replace(OPTIONS, method=method))
    opt = result.optimization
    assert opt.iterations >= 1 and opt.method == method
    assert opt.objective_final < 0.9 * opt.objective_initial
    assert np.all(result.profiles.control_points <= 0.3 + 1e-12)
    m = result.to_json()
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


def test_run_plan_budget_too_small_for_the_targets(engine):
    with pytest.raises(TimeBudgetError, match="targets") as info:
        run_plan(engine, ramp(), tip(), rod_limits(), replace(OPTIONS, time_budget=1e-9))
    assert info.value.stage == "targets"


def test_a_plan_beyond_the_training_range_is_reported(rod_systems, engine):
    """The same model asked for a swing well beyond its training: the variants report it and the plan warns."""
    _, rs = rod_systems
    t = np.linspace(0.0, 0.2, 41)
    big = Motion(t, ("m",), (1.2 * np.clip(t / 0.05, 0.0, 1.0))[:, None])
    result = run_plan(engine, big, tip(), rod_limits(-2.0, 2.0), replace(OPTIONS, max_iterations=1))
    name = rs.bodies[0].name
    assert result.variants["naive"].training_range[name] > 2.5
    assert result.variants["optimized"].training_range[name] > 1.25
    assert any(f"optimized trajectory: the motion deforms {name}" in w for w in result.warnings)


@pytest.mark.parametrize("window", [None, 0.08])
def test_a_too_fast_input_starts_from_its_speed_feasible_projection(engine, window, tmp_path):
    """The ramp (2.5 rad/s) on a 2 rad/s servo: the optimizer starts from the speed-feasible projection (the
    ``speed_limited`` variant), the naive baseline still plays the input as authored, and ``objective_initial`` is
    the naive J; with ``start="input"`` the fit is the start."""
    limits = rod_limits(servo=ServoSpec("slow", 2.0, 3.0))
    options = replace(OPTIONS, window=window, window_tail=0.04)
    result = run_plan(engine, ramp(), tip(), limits, options)
    m = result.to_json()
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
    plain = run_plan(engine, ramp(), tip(), limits, replace(options, start="input", max_iterations=0))
    assert "speed_limited" not in plain.variants and plain.to_json()["start"] == "input"
    assert plain.to_json()["objective_initial"] == pytest.approx(naive_j, rel=1e-12)
    # Its optimum is the too-fast input itself: returned on the speed-feasible projection, re-simulated.
    assert any("the optimum exceeded the speed limit of m: returned on the closest speed-feasible profiles" in w
               for w in plain.warnings)
    assert [v for v in check_profile_limits(plain.profiles, limits) if v.kind == "velocity"] == []
    projected = evaluate(pp.problem, plain.optimization.x, gradient=False).value
    assert plain.to_json()["objective_final"] == pytest.approx(projected, rel=1e-12)
    np.testing.assert_allclose(plain.variants["optimized"].angles, plain.profiles.evaluate(pp.targets.times))
    with pytest.raises(InputError, match="unknown start"):
        replace(options, start="slow")


def _weak_servo(engine) -> tuple:
    """Limits with a servo whose stall torque is 0.6 × the naive playback's peak torque (wide position limits)."""
    naive = run_plan(engine, ramp(), tip(), rod_limits(-1.0, 1.0), replace(OPTIONS, max_iterations=0))
    stall = 0.6 * np.abs(naive.variants["naive"].torques).max()
    return stall, rod_limits(-1.0, 1.0, ServoSpec("weak", 8.0, stall))


def test_torque_penalty_keeps_the_plan_nearer_the_stall_torque(engine):
    """With a servo whose stall torque is below what the input needs, the penalty keeps the plan within it; the
    same plan with the penalty off (weight 0: only reported and warned) exceeds it."""
    stall, weak = _weak_servo(engine)
    options = replace(OPTIONS, max_iterations=6)
    off = run_plan(engine, ramp(), tip(), weak, replace(options, torque_weight=0.0))
    on = run_plan(engine, ramp(), tip(), weak, replace(options, torque_weight=1e3))
    peak_off, peak_on = (r.to_json()["peak_torque_nm"]["m"] for r in (off, on))
    # Measured: naive 0.541 N m, stall 0.325, off 0.336, on 0.294 (about the threshold, 0.9 x stall = 0.292).
    assert peak_off > stall and peak_on <= stall
    for result in (off, on):  # the input itself is beyond this servo, and each plan says so
        assert any(w.startswith("input as authored (naive playback): motor 'm' needs") for w in result.warnings)
        assert result.to_json()["naive"]["peak_torque_ratio"] == pytest.approx(1 / 0.6, rel=1e-9)
    assert any(w.startswith("motor 'm' needs") for w in off.warnings)
    assert not any(w.startswith("motor 'm' needs") for w in on.warnings)
    assert on.to_json()["optimized"]["peak_torque_ratio"] <= 1.0 < off.to_json()["optimized"]["peak_torque_ratio"]


def test_the_default_torque_penalty_keeps_the_plan_within_stall_and_continues_when_it_does_not(engine):
    """On by default (weight 10): the plan stays within the weak servo's stall torque. A penalty too light for
    that (weight 0.01: 1.009 x stall after one round, measured) is continued: the optimum is optimized again with
    the weight x 10 (at most ``torque_rounds`` times, said in a warning) and ends within stall; iterations and
    evaluations add up over the rounds and ``objective_initial`` stays the naive playback's."""
    defaults = PlanOptions()
    assert (defaults.torque_weight, defaults.torque_rounds) == (10.0, 2)
    _, weak = _weak_servo(engine)
    options = replace(OPTIONS, max_iterations=6)
    assert (options.torque_weight, options.torque_rounds) == (defaults.torque_weight, defaults.torque_rounds)
    default = run_plan(engine, ramp(), tip(), weak, options)
    assert default.to_json()["optimized"]["peak_torque_ratio"] <= 1.0
    assert not any("optimizing again" in w for w in default.warnings)
    light = replace(options, torque_weight=0.01)
    single = run_plan(engine, ramp(), tip(), weak, replace(light, torque_rounds=0))
    assert single.to_json()["optimized"]["peak_torque_ratio"] > 1.0
    result = run_plan(engine, ramp(), tip(), weak, light)
    rounds = [w for w in result.warnings if "optimizing again with the torque penalty's weight at" in w]
    assert 1 <= len(rounds) <= 2 and rounds[0].endswith("weight at 0.1")
    opt = result.optimization
    assert opt.iterations > single.optimization.iterations and len(opt.history) == opt.iterations + 1 + len(rounds)
    assert opt.objective_initial == pytest.approx(result.objective_naive, rel=1e-12)
    assert result.to_json()["optimized"]["peak_torque_ratio"] <= 1.0


def test_the_budget_keeps_time_for_the_verification(engine, monkeypatch):
    """With a ``verify_dt`` a budgeted plan runs the naive playback at ``verify_dt`` first and keeps its measured
    time for the verification's optimized run: at dt 5 ms and verify_dt 0.5 ms a run is 10 forward runs, 3.3
    evaluations, more than a budget of 6 evaluations leaves after the naive run and the first evaluation — the
    optimizer stops there; without it, it goes on. The verification reuses that naive run. A band of many factors
    keeps its runs the same way (``checks_reserve``). On the virtual clock (one evaluation with its adjoint is 1 s,
    a forward run a third of it, a tangent pass 2 s), so the machine's load does not move it."""
    options = replace(OPTIONS, max_iterations=100, relative_tolerance=0.0)
    steps = int(round(float(ramp().time[-1]) / options.dt))
    clock = VirtualClock(monkeypatch, forward_step_s=EVALUATION_S / EVALUATION_FORWARD_RUNS / steps)
    budget = 6.0 * EVALUATION_S
    kept = run_plan(engine, ramp(), tip(), rod_limits(), replace(options, time_budget=budget, verify_dt=0.0005))
    assert kept.optimization.budget_limited and kept.optimization.evaluations == 1
    assert kept.verify_naive is not None and kept.verify_naive.wall_s == pytest.approx(10.0 / 3.0)
    started = clock.now
    check = verify_plan(kept, 0.0005)
    assert check.naive == kept.verify_naive.naive  # reused, and only the optimized run simulated
    assert clock.now - started == pytest.approx(10.0 / 3.0)
    spent = run_plan(engine, ramp(), tip(), rod_limits(), replace(options, time_budget=budget))
    assert spent.optimization.budget_limited and spent.optimization.evaluations >= 3 and spent.verify_naive is None
    # The band's runs after the plan: naive and optimized per factor, 45 factors, 90 runs = 30 evaluations.
    band = tuple(float(f) for f in np.linspace(0.8, 1.2, 46) if abs(f - 1.0) > 1e-9)[:45]
    banded = run_plan(engine, ramp(), tip(), rod_limits(), replace(options, time_budget=budget, band=band))
    assert banded.optimization.budget_limited and banded.optimization.evaluations == 1


def test_the_verification_reserve_is_nominal_work_beside_the_robust_objective(rod_systems, engine, monkeypatch):
    """The verification re-simulates the nominal model alone: beside the robust objective over three models (in
    turn: ``workers=1``) its 10 nominal evaluations are 3.3 of the optimizer's, which is the reserve the optimizer
    gets (uncorrected, 10 of its evaluations would be kept). Checked on the reserve handed to the optimizer, not on
    a wall-clock budget: the evaluations' durations vary by more than the difference between the two."""
    import inspect

    import retarget.planning.run as planning
    from retarget.sim.reduced.system import with_stiffness_scale

    _, rs = rod_systems

    def factory(factor: float):
        return reduced_engine(with_stiffness_scale(rs, factor), 1e-10)

    reserves: list[float] = []
    real = planning._optimize_within_torque

    def spy(*args, **kwargs):
        reserves.append(inspect.signature(real).bind(*args, **kwargs).arguments["reserve"])
        return real(*args, **kwargs)

    monkeypatch.setattr(planning, "_optimize_within_torque", spy)
    robust = replace(OPTIONS, max_iterations=1, stiffness_band=(0.9, 1.1), workers=1, verify_dt=0.0005)
    result = run_plan(engine, ramp(), tip(), rod_limits(), robust, engine_factory=factory)
    assert result.pp.ensemble is not None and result.pp.ensemble.size == 3
    nominal = run_plan(engine, ramp(), tip(), rod_limits(), replace(robust, stiffness_band=()))
    assert nominal.pp.ensemble is None
    assert reserves == [pytest.approx(10.0 / 3.0), pytest.approx(10.0)]


def test_settle_weight_scales_the_tracking_after_the_input_stops_and_lowers_the_ring_out(engine):
    """``settle_weight`` multiplies the tracked bodies' weights from the input's last move on (the ramp stops at
    0.1 s); planned with it, the ring-out left after the motion is lower than without it."""
    from retarget.optimize.problem import build_plan_problem, motion_stop_time

    base = build_plan_problem(engine, ramp(), tip(), rod_limits(), OPTIONS)
    heavy = build_plan_problem(engine, ramp(), tip(), rod_limits(), replace(OPTIONS, settle_weight=30.0))
    t = base.problem.tracking.times
    stop = motion_stop_time(ramp())
    assert stop == pytest.approx(0.1)
    ratio = heavy.problem.tracking.position_weights[:, 0] / base.problem.tracking.position_weights[:, 0]
    assert np.all(ratio[t < stop - 1e-9] == 1.0) and np.all(ratio[t >= stop] == 30.0)
    with pytest.raises(OptimizeError, match="settle_weight"):
        build_plan_problem(engine, ramp(), tip(), rod_limits(), replace(OPTIONS, settle_weight=0.0))

    def ring_out(result) -> float:
        naive = result.pp.targets
        opt = result.variants["optimized"]
        after = naive.times >= stop
        return float(np.linalg.norm(opt.positions[after] - naive.positions[after], axis=-1).max())

    options = replace(OPTIONS, max_iterations=30, relative_tolerance=0.0)
    plain = run_plan(engine, ramp(), tip(), rod_limits(), options)
    settled = run_plan(engine, ramp(), tip(), rod_limits(), replace(options, settle_weight=30.0))
    assert ring_out(settled) < ring_out(plain)


def test_warm_up_runs_a_short_plan_and_stops_on_a_cancel_or_ctrl_c(engine):
    long = Motion(np.linspace(0.0, 1.0, 201), ("m",), 0.2 * np.sin(np.linspace(0.0, 1.0, 201))[:, None])
    seen: list = []
    assert warm_up(engine, long, tip(), rod_limits(), replace(OPTIONS, verify_dt=0.001),
                   lambda stage, k, n: seen.append((stage, n))) > 0.0
    # 0.2 s of the 1 s motion at dt 5 ms (40 steps; an evaluation's bar counts forward + adjoint), then verified.
    assert ("targets", 41) in seen and ("evaluation (forward + adjoint)", 80) in seen and ("verifying", 200) in seen
    assert not any(n > 200 for _, n in seen)
    # A robust plan's warm-up plans on the nominal model alone: no engine factory needed.
    assert warm_up(engine, long, tip(), rod_limits(), replace(OPTIONS, stiffness_band=(0.9, 1.1))) > 0.0
    for interrupt in (PlanCancelled("x"), KeyboardInterrupt()):
        starts: list = []

        def progress(stage, k, n, interrupt=interrupt, starts=starts):
            if stage.startswith("evaluation") and k == 1:
                starts.append(1)
                if len(starts) == 2:  # after the first evaluation: the optimizer returns its best point
                    raise interrupt

        with pytest.raises(type(interrupt)):
            warm_up(engine, long, tip(), rod_limits(), OPTIONS, progress)
        assert len(starts) == 2


# --- plan() on the tiny robot -------------------------------------------------------------------------------------


@pytest.fixture()
def tiny(tiny_artifact, monkeypatch, tmp_path):
    """(robot YAML, fast options with its artifact): isolated cache and model folders. The tiny robot's 4-layer rod
    misses the model card's gate (f2 +5 %): these plans opt out of it explicitly."""
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    folder, npz = tiny_artifact
    options = PlanOptions(dt=0.005, knot_spacing=0.04, max_iterations=1, reduced_file=str(npz),
                          allow_unverified_model=True, stiffness_band=(), band=(), verify_model="none")
    return folder / "tiny_rod.yaml", options


def _tiny_ramp() -> Motion:
    t = np.linspace(0.0, 0.2, 41)
    return Motion(t, ("m",), (0.2 * np.clip(t / 0.1, 0, 1))[:, None])


def _training(options: PlanOptions, **changes) -> PlanOptions:
    """``options`` without a model: the plan trains one in-process, on the artifact's mesh."""
    return replace(options, reduced_file=None, allow_training=True, modes=2, dt_train=0.002, mesh_axial=4,
                   **changes)


def test_plan_refuses_a_motion_without_the_robots_motors_before_any_model_work(tiny):
    robot, options = tiny
    t = np.linspace(0.0, 0.2, 41)
    steps: list = []
    with pytest.raises(InputError, match="m"):
        plan(robot, Motion(t, ("elbow",), np.zeros((41, 1))), _training(options), PlanProgress(steps=lambda *a:
                                                                                                  steps.append(a)))
    assert steps == []


def test_plan_stops_on_a_model_outside_the_fidelity_gate_unless_allowed(tiny):
    """The tiny robot's coarse rod misses the model card's gate: no plan unless the caller allows it, and then the
    plan says so in a warning."""
    from retarget.fem.model_card import ModelFidelityError

    robot, options = tiny
    messages: list[str] = []
    with pytest.raises(ModelFidelityError, match="rod"):
        plan(robot, _tiny_ramp(), replace(options, allow_unverified_model=False), PlanProgress(message=messages.append))
    assert any("model card" in m for m in messages)
    result = plan(robot, _tiny_ramp(), replace(options, max_iterations=0))
    assert any(w.startswith("planning on a model outside the fidelity gate (allowed by the caller)")
               for w in result.warnings)


@pytest.mark.integration
def test_plan_with_the_node_defaults(tiny):
    """The planner node's defaults (no parameter set but the gate's opt-out and the model): the robust objective
    over stiffness x0.9 and x1.1, verification at dt / 5, the stiffness band and, the tiny rod's full FEM being
    cheap, the full-FEM check as the headline."""
    robot, fast = tiny
    options = options_from_parameters({"allow_unverified_model": True, "reduced_file": fast.reduced_file},
                                      knot_spacing=0.04, max_iterations=1)
    assert (options.stiffness_band, options.band, options.verify_model) == ((0.9, 1.1), (0.9, 1.1), "auto")
    result = plan(robot, _tiny_ramp(), options)
    assert result.pp.ensemble is not None and result.pp.ensemble.factors == (0.9, 1.1)
    m = result.to_json()
    assert m["verify"]["dt_s"] == pytest.approx(0.001) and m["verify"]["steps"] == 200
    assert {"x0.9", "x1.1"} <= set(m["band"]) and m["verification_model"] == "full FEM"
    assert m["verified_peak_ratio"] == pytest.approx(m["verified"]["peak_ratio"], rel=1e-12)
    assert isinstance(m["cut_reached"], bool) and m["cut_verdict"].startswith("optimized peak deviation")
    assert m["model"]["source"] and not m["cancelled"] and m["objective_final"] <= m["objective_initial"]
    assert set(m["check_timings_s"]) == {"verify", "band", "verified"} and min(m["check_timings_s"].values()) > 0
    assert m["check_timings_s"]["verified"] >= m["verified"]["wall_s"]
    # The torque is judged where the cut is: the full FEM's optimized run.
    torque = m["verified"]["optimized"]["peak_torque_ratio"]
    assert m["within_stall"] == (torque <= 1.0)
    assert ("cannot play it as planned" in m["cut_verdict"]) == (torque > 1.0)


def test_plan_budget_too_small_for_the_targets(tiny):
    robot, options = tiny
    with pytest.raises(TimeBudgetError, match="targets"):
        plan(robot, _tiny_ramp(), replace(options, time_budget=1e-6))


def test_plan_with_windows(tiny):
    robot, options = tiny
    result = plan(robot, _tiny_ramp(), replace(options, window=0.1, window_tail=0.05))
    m = result.to_json()
    assert m["method"] == "lbfgs-windows" and "2 windows of 0.1 s (+0.05 s tail)" in m["message"]
    assert m["objective_final"] <= m["objective_initial"]


def test_plan_cancelled_returns_the_best_iterate_so_far(tiny):
    """The ROS action's cancel: the optimizer stops as on Ctrl-C, the plan still answers with its best iterate."""
    robot, options = tiny
    options = replace(options, max_iterations=50, relative_tolerance=1e-15)
    stages: list[str] = []
    iterations: list = []

    def steps(stage: str, done: int, total: int) -> None:
        if not stages or stages[-1] != stage:
            stages.append(stage)

    progress = PlanProgress(steps=steps, iteration=iterations.append, cancelled=lambda: bool(iterations),
                            cancel_poll_s=0.0)
    result = plan(robot, _tiny_ramp(), options, progress)
    m = result.to_json()
    assert m["cancelled"] and m["interrupted"] and m["iterations"] == 1 == len(iterations)
    # A modelled servo's naive playback is a run of its own (the optimizer starts from its holding goals).
    after = [s for s in stages[1:] if s != "naive playback"]
    assert stages[0] == "targets" and FEEDBACK_STAGES[after[0]] == "optimizing"
    assert "interrupted (cancel requested)" in m["message"]
    assert m["objective_final"] <= m["objective_initial"]
    names, times, positions = result.trajectory(0.0)
    assert names == ("m",) and len(times) == len(positions) > 10
    never = plan(robot, _tiny_ramp(), replace(options, max_iterations=1),
                 PlanProgress(cancelled=lambda: False, cancel_poll_s=0.0)).to_json()
    assert not never["cancelled"] and not never["interrupted"]


def test_plan_verifies_at_a_finer_step_as_the_node_asks(tiny):
    """The node verifies at dt / 5 unless asked not to (``verify: false``) or at another ``verify_dt``; the
    verification is the last stage."""
    robot, fast = tiny
    node = {"dt": 0.005, "reduced_file": fast.reduced_file, "allow_unverified_model": True}
    extra = {"knot_spacing": 0.04, "max_iterations": 1, "stiffness_band": (), "band": (), "verify_model": "none"}
    stages: list[str] = []
    result = plan(robot, _tiny_ramp(), options_from_parameters(node, **extra),
                  PlanProgress(steps=lambda stage, k, n: stages.append(stage)))
    m = result.to_json()
    assert m["verify"]["dt_s"] == pytest.approx(0.001) and m["verify"]["steps"] == 200
    assert set(m["verify"]) >= {"naive", "optimized", "peak_ratio", "holds"} and stages[-1] == "verifying"
    assert "verify" not in plan(robot, _tiny_ramp(), options_from_parameters(node | {"verify": False},
                                                                              **extra)).to_json()
    finer = plan(robot, _tiny_ramp(), options_from_parameters(node | {"verify_dt": 0.0025}, **extra))
    assert finer.to_json()["verify"]["steps"] == 80


def test_plan_cancelled_before_any_result_raises(tiny):
    robot, options = tiny
    polled: list = []

    def cancelled() -> bool:
        polled.append(True)
        return True

    with pytest.raises(PlanCancelled, match="cancelled during targets") as info:
        plan(robot, _tiny_ramp(), options, PlanProgress(cancelled=cancelled))
    assert info.value.stage == "targets" and len(polled) == 1


def _cached_models(cache: Path) -> list[Path]:
    """Reduced models (and partly written ones) in a cache folder."""
    return [p for p in cache.rglob("*") if p.is_file() and (p.suffix in (".npz", ".pkl") or "partial" in p.name)]


def test_plan_cancelled_during_in_process_training(tiny, tmp_path):
    """Training takes minutes to hours on a real robot: the cancel is polled per training step, the steps name the
    stage, and no half-trained model is cached."""
    robot, options = tiny
    steps: list = []
    with pytest.raises(PlanCancelled) as info:
        plan(robot, _tiny_ramp(), _training(options),
             PlanProgress(steps=lambda *a: steps.append(a), cancelled=lambda: True))
    assert info.value.stage == TRAINING_STAGE and [s[0] for s in steps] == [TRAINING_STAGE]
    assert not _cached_models(tmp_path / "cache")


def test_plan_budget_runs_out_during_in_process_training(tiny, tmp_path):
    robot, options = tiny
    with pytest.raises(TimeBudgetError, match="while training the reduced model") as info:
        plan(robot, _tiny_ramp(), _training(options, time_budget=1e-6))
    assert info.value.stage == "training" and not _cached_models(tmp_path / "cache")


def test_the_budget_starts_after_the_warm_up(tiny, monkeypatch):
    """A budgeted plan first plans a short excerpt for one iteration (numba compiles there, reported as
    `compiling kernels`), then starts its clock: a warm-up longer than the whole budget leaves it intact. The
    plan's timings report the warm-up and the model's loading before its own stages. On the virtual clock, so
    the machine's load does not move it."""
    robot, options = tiny
    options = replace(options, verify_dt=0.001)
    stages: list[str] = []
    slept: list[float] = []
    clock = VirtualClock(monkeypatch)

    def steps(stage: str, k: int, n: int) -> None:
        stages.append(stage)
        if stage == WARM_UP_STAGE and not slept:
            clock.advance(2.5)  # a cold numba cache: longer than the budget below
            slept.append(2.5)

    result = plan(robot, _tiny_ramp(), replace(options, time_budget=2.0), PlanProgress(steps=steps))
    warm = [i for i, s in enumerate(stages) if s == WARM_UP_STAGE]
    assert warm[0] == 0 and slept and len(warm) > 1  # the warm-up's own stages are reported as its stage
    assert "targets" in stages[warm[-1]:] and "verify" in result.to_json()
    timings = result.to_json()["timings_s"]  # the model's loading and the warm-up are reported beside the plan's
    assert list(timings)[:3] == ["model", "warm_up", "targets"] and timings["warm_up"] >= 2.5
    assert len(result.trajectory()[2]) > 10
    stages.clear()
    plan(robot, _tiny_ramp(), options, PlanProgress(steps=steps))  # no budget: no warm-up
    assert WARM_UP_STAGE not in stages


def test_a_cancel_during_the_warm_up_ends_the_plan(tiny):
    robot, options = tiny
    with pytest.raises(PlanCancelled, match="cancelled during compiling kernels"):
        plan(robot, _tiny_ramp(), replace(options, time_budget=60.0),
             PlanProgress(cancelled=lambda: True, cancel_poll_s=0.0))


def test_plan_verified_in_an_independently_trained_reduced_model(tiny, tmp_path, monkeypatch):
    """Where the full FEM is beyond the verification's budget, the plan is re-simulated in a verification model
    (another ``retarget reduce`` artifact of the robot on a finer mesh, found in a model folder's ``verify/``) and
    that is its headline; the same figures with the file given explicitly; the planning model itself is refused."""
    from retarget.cli import main
    from retarget.planning.verification import verify_reduced
    from retarget.sim.reduced.store import load_artifact

    robot, options = tiny
    finer = tmp_path / "models" / "verify" / "tiny_rod-ramp.npz"
    assert main(["reduce", str(robot), "--train-motion", str(robot.parent / "ramp.csv"), "--out", str(finer),
                 "--dt", "0.002", "--modes", "3", "--duration", "0.04", "--mesh-scale", "2",
                 "--replay-tolerance", "0"]) == 0
    # Not a planning model: the planner's own lookup of the model folders does not see it.
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    auto = replace(options, verify_model="auto", verify_full_max_s=0.0)
    result = plan(robot, _tiny_ramp(), auto)
    m = result.to_json()
    assert m["verification_model"] == "reduced model tiny_rod-ramp.npz"
    verified = m["verified"]
    assert verified["file"] == str(finer) and verified["modes"] == [3]
    planning_dofs = sum(3 * p.mesh.n_nodes for p in load_artifact(robot, options.reduced_file).model.flexible_parts)
    assert verified["deformable_dofs"] > planning_dofs
    assert m["verified_peak_ratio"] == pytest.approx(verified["optimized"]["peak_deviation_m"]
                                                     / verified["naive"]["peak_deviation_m"], rel=1e-12)
    # Another model: close to the planning model's figures, not equal to them.
    naive_plan = m["naive"]["peak_deviation_m"]
    assert verified["naive"]["peak_deviation_m"] != naive_plan
    assert verified["naive"]["peak_deviation_m"] == pytest.approx(naive_plan, rel=0.3)
    # Given explicitly, and with the stiffness band: the same nominal figures.
    explicit = plan(robot, _tiny_ramp(), replace(options, verify_model=str(finer), verify_full_band=(0.9,)))
    e = explicit.to_json()
    assert e["verified"]["naive"] == pytest.approx(verified["naive"], rel=1e-9)
    assert e["verified_band"]["x0.9"]["stiffness_factor"] == 0.9
    assert e["verified_band"]["x0.9"]["naive"]["peak_deviation_m"] != verified["naive"]["peak_deviation_m"]
    # At the planning step, the planning model re-simulated this way reproduces the plan's own figures.
    own = verify_reduced(explicit, load_artifact(robot, options.reduced_file), options.dt)
    for name in ("naive", "optimized"):
        assert own.runs[name].peak_deviation_m == pytest.approx(explicit.variants[name].metrics["peak_deviation_m"],
                                                              rel=1e-6)
    with pytest.raises(InputError, match="it is the planning model"):
        plan(robot, _tiny_ramp(), replace(options, verify_model=str(options.reduced_file)))
    with pytest.raises(InputError, match="verify_model"):
        plan(robot, _tiny_ramp(), replace(options, verify_model=str(tmp_path / "missing.npz")))


def _verified(torque: float) -> Verification:
    """A verification whose optimized run needs ``torque`` × stall."""
    return Verification({"optimized": RunFigures(0.01, 0.005, torque, 0.001)})


def test_verified_torque_margin_scales_the_threshold_by_the_two_models_torques(tiny):
    from retarget.planning.run import verified_torque_margin

    robot, options = tiny
    result = plan(robot, _tiny_ramp(), options)
    planned = result.variants["optimized"].metrics["peak_torque_ratio"]
    over = 1.25 * max(planned, 0.9)
    margin = verified_torque_margin(result, _verified(over), 0.1)
    assert 1.0 - margin == pytest.approx(0.9 * planned / over)
    assert verified_torque_margin(result, _verified(0.99), 0.1) is None
    assert verified_torque_margin(result, None, 0.1) is None


def test_a_plan_the_verification_model_finds_beyond_stall_is_optimized_again_from_its_optimum(tiny, monkeypatch):
    """When the model the plan is verified in needs more than the stall torque where the planning model did not,
    the plan optimizes again from its optimum with the torque threshold lowered by the models' ratio and is
    verified again. The verification here is the real check with the torques read 1.5 x higher (a unit test of the
    orchestration; the full-FEM case is in docs/optimize.md), the servo's stall torque set so that the first
    optimum asks 0.8 x stall in the planning model."""
    import retarget.planning.run as planning
    import retarget.planning.verification as verification

    robot, options = tiny
    opts = replace(options, max_iterations=3, torque_weight=1e3, torque_margin=0.0)
    first = plan(robot, _tiny_ramp(), replace(opts, verified_torque_rounds=0))
    scale = first.variants["optimized"].metrics["peak_torque_ratio"] / 0.8
    real_limits, real_check = planning.limits_for, verification.check_plan
    monkeypatch.setattr(planning, "limits_for", lambda *a, **k: replace(
        real_limits(*a, **k), stall_torque=np.asarray(real_limits(*a, **k).stall_torque) * scale))
    verified = []

    def read_higher(result, *args, **kwargs):
        out = real_check(result, *args, **kwargs)
        verified.append(1.5 * result.variants["optimized"].metrics["peak_torque_ratio"])
        return replace(out, verified=_verified(verified[-1]))

    monkeypatch.setattr(verification, "check_plan", read_higher)
    rounds, real_run = [], planning.run_plan

    def recorded(*args, **kwargs):
        rounds.append(real_run(*args, **kwargs))
        return rounds[-1]

    monkeypatch.setattr(planning, "run_plan", recorded)
    result = plan(robot, _tiny_ramp(), opts)
    rounds_opt = [r.optimization for r in rounds]
    assert len(verified) == 2 and verified[0] > 1.0
    again = [w for w in result.warnings if "optimizing again from the optimum" in w]
    assert len(again) == 1 and f"with the torque penalty from {1 / 1.5:.2f} x stall on" in again[0]
    assert verified[1] < verified[0]
    assert result.variants.keys() == first.variants.keys()  # the second start is not a speed-limited variant
    # One plan: the iterations and evaluations of both rounds.
    assert [r.optimization.iterations for r in rounds] == [r.iterations for r in rounds_opt]
    m = result.to_json()
    assert m["iterations"] == sum(r.iterations for r in rounds_opt) > rounds_opt[0].iterations
    assert m["evaluations"] == sum(r.evaluations for r in rounds_opt)


def test_a_plan_beyond_the_stall_torque_says_so_in_its_verdict(tiny, monkeypatch):
    """Servos with a quarter of the stall torque the tiny plan needs and no torque penalty: the verdict says the
    optimized motion cannot be played as planned (``within_stall`` false), in the model the cut is judged in."""
    import retarget.planning.run as planning

    robot, options = tiny
    opts = replace(options, torque_weight=0.0)
    needed = plan(robot, _tiny_ramp(), opts).variants["optimized"].metrics["peak_torque_ratio"]
    real_limits = planning.limits_for
    monkeypatch.setattr(planning, "limits_for", lambda *a, **k: replace(
        real_limits(*a, **k), stall_torque=np.asarray(real_limits(*a, **k).stall_torque) * needed / 4.0))
    m = plan(robot, _tiny_ramp(), opts).to_json()
    assert m["optimized_peak_torque_ratio"] == pytest.approx(4.0, rel=0.05) and not m["within_stall"]
    assert m["cut_verdict"].endswith("x the stall torque in the planning model (not verified elsewhere): the "
                                     "servos cannot play it as planned")
