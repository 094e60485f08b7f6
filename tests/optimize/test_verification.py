"""The plan re-simulated at a finer step (retarget.optimize.verification.verify_plan, verify_metrics) on the
reduced rod on a motor: at the planning step it reproduces the plan; finer, it gives a verdict; a deadline or a
cancel that comes first skips it with a warning. (The full-FEM check and the stiffness band: test_robust.py.)"""
from __future__ import annotations

import pytest
from rod_plan import OPTIONS, ramp, rod_limits, tip
from virtual_clock import VirtualClock

from retarget.optimize.engines import reduced_engine
from retarget.optimize.errors import PlanCancelled
from retarget.optimize.planning import run_plan
from retarget.optimize.verification import execution_refusal, finer_step_holds, verify_metrics, verify_plan


@pytest.fixture(scope="module")
def rod_plan(rod_systems):
    _, rs = rod_systems
    return run_plan(reduced_engine(rs, 1e-10), ramp(), tip(), rod_limits(), OPTIONS)


def test_verify_plan_at_the_planning_step_reproduces_the_plan_and_runs_finer(rod_plan):
    """Re-simulated at the planning step the naive and optimized deviations are the plan's own; at a finer step
    the same profiles give a verdict (``holds``) from the two peak ratios."""
    result = rod_plan
    same = verify_plan(result, OPTIONS.dt)
    assert same["steps"] == result.pp.problem.n_steps
    for name in ("naive", "optimized"):
        for key, value in result.variants[name].metrics.items():
            assert same[name][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, key)
    assert same["peak_ratio"] == pytest.approx(same["planning_peak_ratio"], rel=1e-9) and same["holds"]
    fine = verify_plan(result, OPTIONS.dt / 5)
    assert fine["steps"] == 5 * result.pp.problem.n_steps and fine["dt_s"] == OPTIONS.dt / 5
    ratio, planned = fine["peak_ratio"], fine["planning_peak_ratio"]
    assert fine["holds"] == finer_step_holds(ratio, planned)
    with pytest.raises(ValueError, match="positive"):
        verify_plan(result, 0.0)


def test_verify_metrics_at_a_finer_step_and_skipped_when_out_of_time_or_cancelled(rod_plan, monkeypatch):
    """``verify_metrics`` reports the verification, or a warning (in ``result.warnings`` too) when the deadline
    passed or a cancel came first (virtual clock: the check's run takes no time)."""
    from dataclasses import replace

    clock = VirtualClock(monkeypatch)
    stages: list[str] = []
    result = replace(rod_plan, warnings=list(rod_plan.warnings))
    out = verify_metrics(result, 0.001, clock.now + 1.0, lambda stage, k, n: stages.append(stage))
    assert out["verify"]["dt_s"] == 0.001 and out["verify"]["steps"] == 200 and set(stages) == {"verifying"}
    assert out["warnings"] == result.warnings

    late = replace(rod_plan, warnings=list(rod_plan.warnings))
    out = verify_metrics(late, 0.001, deadline=clock.now - 1.0)
    assert "verify" not in out and "not verified at dt 0.001 s: the time budget ran out" in out["warnings"]
    assert late.warnings == out["warnings"]

    def cancel(stage: str, k: int, n: int) -> None:
        raise PlanCancelled(stage)

    cancelled = replace(rod_plan, warnings=list(rod_plan.warnings))
    out = verify_metrics(cancelled, 0.001, None, cancel)
    assert "verify" not in out and "not verified at dt 0.001 s: cancelled" in out["warnings"]


@pytest.mark.parametrize(("peak_ratio", "planning_peak_ratio", "holds"), [
    (0.3, 0.2, True), (0.55, 0.2, True), (0.65, 0.2, False),  # half of a 0.8 reduction is 0.6
    (1.0, 1.0, True), (1.1, 1.01, True),  # no reduction claimed, none lost
    (2.32, 1.009, False),  # a plan that claims nothing and does much worse at the finer step
])
def test_finer_step_verdict(peak_ratio, planning_peak_ratio, holds):
    assert finer_step_holds(peak_ratio, planning_peak_ratio) is holds


@pytest.mark.parametrize(("metrics", "refused"), [
    ({"verified_peak_ratio": 0.3, "planning_peak_ratio": 0.2, "within_stall": True}, ""),
    ({"verified_peak_ratio": None, "planning_peak_ratio": 0.95, "within_stall": True}, ""),  # no cut, no harm
    ({"verified_peak_ratio": 4.57, "planning_peak_ratio": 0.98, "within_stall": False},
     "does worse than the input"),  # judged in the verification model, not the planning model
    ({"verified_peak_ratio": None, "planning_peak_ratio": 1.2, "within_stall": True}, "does worse than the input"),
    ({"verified_peak_ratio": 0.5, "planning_peak_ratio": 0.4, "within_stall": False}, "not executed: "),
])
def test_execution_refusal(metrics, refused):
    metrics["cut_verdict"] = "the verdict"
    got = execution_refusal(metrics)
    assert (got == "") if not refused else (refused in got and "the verdict" in got)
