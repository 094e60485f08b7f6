"""The time budget and the cost model (:mod:`retarget.planning.budget`): the cost said before the work (each
stage's estimate from the measured constants, skipped stages with their reason, the total and the budget), the
reserves kept for the work after the optimizer, and the deadlines the budget hands out (virtual clock)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from virtual_clock import VirtualClock

from retarget.optimize.control import BudgetExhausted, Deadline
from retarget.planning.budget import (
    BASELINES_RESERVE,
    FULL_STEP_S_PER_DOF,
    ITERATION_FORWARD_RUNS,
    REDUCED_STEP_S_PER_STATE,
    TRAINING_BUILD_FACTOR,
    VERIFY_COST_FACTOR,
    Budget,
    PlanEstimate,
    StageEstimate,
    checks_reserve,
    format_seconds,
    optimizer_reserve,
    plan_estimate,
    training_estimate,
    verification_reserve,
)
from retarget.planning.options import PlanOptions
from retarget.planning.settings import options_from_parameters


def test_training_is_its_full_simulation_and_the_build() -> None:
    stage = training_estimate(8700, 2.0, 0.002)
    assert stage.seconds == pytest.approx(TRAINING_BUILD_FACTOR * 1000 * 8700 * FULL_STEP_S_PER_DOF)
    # The drummer's demo model: 5 min 7 s measured for 2 s of boxing at mesh scale 0.25 (docs/ros.md).
    assert 200.0 < stage.seconds < 450.0
    assert "2 s at dt 0.002 s, 8700 FEM DOFs" in stage.note and stage.line().startswith("training: about 5 min")
    assert "rigid links only" in training_estimate(0, 1.2, 0.002).note  # a robot without flexible parts


def test_a_windowed_plan_counts_its_windows_and_skips_the_settle_refinement() -> None:
    options = PlanOptions(dt=0.002, window=1.0, window_tail=0.5, window_overlap=0.5, max_iterations=1,
                          method="descent", verify_dt=0.001, time_budget=900.0)
    estimate = plan_estimate(options, 3.0, 518, 800, 8700, full_verification=False, settles=False)
    stages = {s.stage: s for s in estimate.stages}
    step = 518 * REDUCED_STEP_S_PER_STATE
    assert stages["optimization"].seconds == pytest.approx(5 * ITERATION_FORWARD_RUNS["descent"] * 750 * step)
    assert "about 5 windows" in stages["optimization"].note
    assert stages["settle refinement"].skipped and "windows" in stages["settle refinement"].note
    assert "full FEM verification" not in stages
    assert estimate.total_s == pytest.approx(sum(s.seconds for s in estimate.stages))
    assert estimate.lines()[-1].endswith("time budget 15 min")
    assert estimate.summary().startswith("estimated targets ~") and "settle" not in estimate.summary()
    assert set(estimate.as_dict()) == set(stages)


def test_a_whole_motion_plan_counts_its_robust_models_settle_and_full_fem() -> None:
    options = PlanOptions(max_iterations=10, verify_full_band=(0.9, 1.1))
    estimate = plan_estimate(options, 1.0, 40, 60, 2000, full_verification=True, settles=True,
                             training=StageEstimate("training", 100.0))
    names = [s.stage for s in estimate.stages]
    assert names == ["training", "targets", "optimization", "settle refinement", "baselines and checks",
                     "full FEM verification"]
    full = estimate.stages[-1]
    assert full.seconds == pytest.approx(9 * 500 * FULL_STEP_S_PER_DOF * 2000) and "Young's modulus" in full.note
    assert "3 models (robust objective)" in estimate.stages[2].note
    assert PlanEstimate(()).lines() == ["total: about 0 s"] or PlanEstimate(()).lines()[-1].startswith("total")


@pytest.mark.parametrize(("seconds", "text"), [(0.2, "1 s"), (45.0, "45 s"), (300.0, "5 min"), (7200.0, "2.0 h"),
                                               (float("inf"), "?")])
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_the_verification_reserve():
    """Two forward runs at ``verify_dt`` = ``2 dt / verify_dt`` at the planning step, an evaluation being about
    three, times the cost factor; none without a ``verify_dt`` (the node's default dt / 5: 10 / 3 evaluations)."""
    options = PlanOptions()
    assert verification_reserve(options) == 0.0
    assert verification_reserve(replace(options, verify_dt=0.0)) == 0.0
    assert verification_reserve(replace(options, dt=0.002, verify_dt=0.001)) == pytest.approx(
        VERIFY_COST_FACTOR * 4.0 / 3.0)
    assert VERIFY_COST_FACTOR >= 1.0
    assert verification_reserve(options_from_parameters({})) == pytest.approx(VERIFY_COST_FACTOR * 10.0 / 3.0)
    assert verification_reserve(options_from_parameters({"verify": False})) == 0.0


def test_the_checks_reserve_adds_the_band_runs_to_the_verification():
    """The band re-simulates naive, optimized and (with the baselines) ZVD once per factor at the planning
    step: three forward runs are one evaluation."""
    options = PlanOptions(dt=0.002, verify_dt=0.001, band=(0.9, 1.1))
    assert checks_reserve(options, baselines=True) == pytest.approx(verification_reserve(options) + 2.0)
    without_zvd = verification_reserve(options) + 4.0 / 3.0
    assert checks_reserve(options, baselines=False) == pytest.approx(without_zvd)
    assert checks_reserve(replace(options, band=(), verify_dt=None), baselines=True) == 0.0


def test_the_optimizer_keeps_the_baselines_and_the_checks():
    options = PlanOptions(dt=0.002, verify_dt=0.001, band=(0.9, 1.1))
    assert optimizer_reserve(options, baselines=True) == BASELINES_RESERVE + checks_reserve(options, True)
    assert optimizer_reserve(options, baselines=False, verification_timed=True) == checks_reserve(options, False,
                                                                                                   True)


def test_the_budget_hands_out_deadlines_on_the_clock_it_reads_when_asked(monkeypatch):
    """No budget: no deadline. A budget starts now or at a given instant; what is left after work spent is at
    least 0; a stage's deadline keeps a reserve before the budget's; a deadline reads the clock when asked."""
    clock = VirtualClock(monkeypatch)
    assert Budget.of(PlanOptions()).started().deadline is None
    assert Budget.of(PlanOptions()).reserving(1.0) is None
    clock.advance(10.0)
    budget = Budget.of(PlanOptions(time_budget=5.0))
    assert budget.deadline is None and budget.started().deadline == Deadline(15.0)
    started = budget.started(at=2.0)
    assert started.deadline == Deadline(7.0) and started.reserving(1.5) == Deadline(5.5)
    assert budget.less(3.0) == Budget(2.0) and budget.less(9.0) == Budget(0.0)
    deadline = started.deadline
    assert deadline is not None and deadline.passed() and deadline.remaining() == -3.0
    later = Deadline.after(1.0)
    assert not later.passed() and not later.passed_after(0.5, 0.5) and later.passed_after(0.5, 0.75)
    guarded = later.guard(None)
    guarded(1, 2)
    clock.advance(1.5)
    assert later.passed()
    with pytest.raises(BudgetExhausted):
        guarded(2, 2)
