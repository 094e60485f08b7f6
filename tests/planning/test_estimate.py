"""The cost said before the work (:mod:`retarget.planning.estimate`): each stage's estimate from the measured
constants, skipped stages with their reason, the total and the budget."""
from __future__ import annotations

import pytest

from retarget.planning.estimate import (
    FULL_STEP_S_PER_DOF,
    ITERATION_FORWARD_RUNS,
    REDUCED_STEP_S_PER_STATE,
    TRAINING_BUILD_FACTOR,
    PlanEstimate,
    StageEstimate,
    format_seconds,
    plan_estimate,
    training_estimate,
)
from retarget.planning.options import PlanOptions


def test_training_is_its_full_simulation_and_the_build() -> None:
    stage = training_estimate(8700, 2.0, 0.002)
    assert stage.seconds == pytest.approx(TRAINING_BUILD_FACTOR * 1000 * 8700 * FULL_STEP_S_PER_DOF)
    # The drummer's demo model: 5 min 7 s measured for 2 s of boxing at mesh scale 0.25 (docs/ros.md).
    assert 200.0 < stage.seconds < 450.0
    assert "2 s at dt 0.002 s, 8700 DOFs" in stage.note and stage.line().startswith("training: about 5 min")


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
