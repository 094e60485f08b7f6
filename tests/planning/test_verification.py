"""The plan re-simulated at a finer step (retarget.planning.verification.verify_plan, verify_metrics) on the
reduced rod on a motor: at the planning step it reproduces the plan; finer, it gives a verdict; a deadline or a
cancel that comes first skips it with a warning. (The full-FEM check and the stiffness band: test_robust.py.)"""
from __future__ import annotations

import pytest
from rod_plan import OPTIONS, ramp, rod_limits, tip
from virtual_clock import VirtualClock

from retarget.optimize.control import Deadline
from retarget.optimize.errors import PlanCancelled
from retarget.planning.checks import ExitStatus, RunFigures, Verdict, Verification
from retarget.planning.run import run_plan
from retarget.planning.verification import finer_step_holds, verify_metrics, verify_plan
from retarget.sim.adapters import reduced_engine


@pytest.fixture(scope="module")
def rod_plan(rod_systems):
    _, rs = rod_systems
    return run_plan(reduced_engine(rs, 1e-10), ramp(), tip(), rod_limits(), OPTIONS)


def test_verify_plan_at_the_planning_step_reproduces_the_plan_and_runs_finer(rod_plan):
    """Re-simulated at the planning step the naive and optimized deviations are the plan's own; at a finer step
    the same profiles give a verdict (``holds``) from the two peak ratios."""
    result = rod_plan
    same = verify_plan(result, OPTIONS.dt)
    assert same.steps == result.pp.problem.n_steps
    for name in ("naive", "optimized"):
        for key, value in result.variants[name].metrics.items():
            assert getattr(same, name).to_json()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, key)
    assert same.peak_ratio == pytest.approx(same.planning_peak_ratio, rel=1e-9) and same.holds
    fine = verify_plan(result, OPTIONS.dt / 5)
    assert fine.steps == 5 * result.pp.problem.n_steps and fine.dt_s == OPTIONS.dt / 5
    assert fine.holds == finer_step_holds(fine.peak_ratio, fine.planning_peak_ratio)
    assert type(fine).from_json(fine.to_json()) == fine
    with pytest.raises(ValueError, match="positive"):
        verify_plan(result, 0.0)


def test_verify_metrics_at_a_finer_step_and_skipped_when_out_of_time_or_cancelled(rod_plan, monkeypatch):
    """``verify_metrics`` returns the verification, or None and a warning in ``result.warnings`` when the deadline
    passed or a cancel came first (virtual clock: the check's run takes no time)."""
    from dataclasses import replace

    clock = VirtualClock(monkeypatch)
    stages: list[str] = []
    result = replace(rod_plan, warnings=list(rod_plan.warnings))
    out = verify_metrics(result, 0.001, Deadline(clock.now + 1.0), lambda stage, k, n: stages.append(stage))
    assert out is not None and out.dt_s == 0.001 and out.steps == 200 and set(stages) == {"verifying"}
    assert not any("not verified" in w for w in result.warnings)

    late = replace(rod_plan, warnings=list(rod_plan.warnings))
    assert verify_metrics(late, 0.001, deadline=Deadline(clock.now - 1.0)) is None
    assert "not verified at dt 0.001 s: the time budget ran out" in late.warnings

    def cancel(stage: str, k: int, n: int) -> None:
        raise PlanCancelled(stage)

    cancelled = replace(rod_plan, warnings=list(rod_plan.warnings))
    assert verify_metrics(cancelled, 0.001, None, cancel) is None
    assert "not verified at dt 0.001 s: cancelled" in cancelled.warnings


@pytest.mark.parametrize(("peak_ratio", "planning_peak_ratio", "holds"), [
    (0.3, 0.2, True), (0.55, 0.2, True), (0.65, 0.2, False),  # half of a 0.8 reduction is 0.6
    (1.0, 1.0, True), (1.1, 1.01, True),  # no reduction claimed, none lost
    (2.32, 1.009, False),  # a plan that claims nothing and does much worse at the finer step
])
def test_finer_step_verdict(peak_ratio, planning_peak_ratio, holds):
    assert finer_step_holds(peak_ratio, planning_peak_ratio) is holds


@pytest.mark.parametrize(("verified", "planned", "torque", "refused"), [
    (0.3, 0.2, 0.8, ""),
    (None, 0.95, 0.8, ""),  # no cut, no harm
    (4.57, 0.98, 1.3, "does worse than the input"),  # judged in the verification model, not the planning model
    (None, 1.2, 0.8, "does worse than the input"),
    (0.5, 0.4, 1.3, "not executed: "),
])
def test_execution_refusal(verified, planned, torque, refused):
    verdict = Verdict(planned, verified, "none" if verified is None else "full FEM", 0.5, torque)
    got = verdict.execution_refusal
    assert (got == "") if not refused else (refused in got and verdict.text in got)
    assert Verdict.no_result().execution_refusal == ""


@pytest.mark.parametrize(("verdict", "code", "says"), [
    (Verdict(0.2, None, "none", 0.5, 0.5), ExitStatus.PLANNED, ""),
    (Verdict(0.95, None, "none", 0.5, 0.5), ExitStatus.NOT_PLAYABLE, ("no meaningful cut: optimized peak deviation "
     "0.950 x naive in the planning model (not verified elsewhere), above 0.9 x")),
    (Verdict(0.2, 0.3, "full FEM", 0.5, 1.9), ExitStatus.NOT_PLAYABLE, ("beyond the servos' torque: optimized peak "
     "deviation 0.300 x naive in the full FEM; the optimized motion needs 1.90 x the stall torque in the full FEM")),
    (Verdict(0.95, None, "none", 1.9, 1.9), ExitStatus.NOT_PLAYABLE, "no meaningful cut: "),
    (Verdict.no_result(), ExitStatus.NOT_PLAYABLE, "no meaningful cut: no optimized result"),
])
def test_exit_status(verdict, code, says):
    """``retarget plan`` exits 3 for a plan the planner node would not play (beyond stall) and for one without a
    meaningful cut; the error line says which, the cut first."""
    assert verdict.exit_status is code
    assert verdict.exit_message.startswith(says) and (verdict.exit_message == "") == (code is ExitStatus.PLANNED)


def test_the_checks_round_trip_through_their_json():
    """A verification received as JSON (the planner node's ``metrics_json``) reads back into the same results."""
    from retarget.planning.checks import BandResult, ModelKind, StiffnessBand

    runs = {"naive": RunFigures(0.02, 0.01, 0.7, 0.004), "zvd": RunFigures(0.03, 0.005, 0.6, 0.001),
            "optimized": RunFigures(0.004, 0.002, 0.8, 0.0005)}
    band = StiffnessBand((BandResult(runs, 0.9), BandResult({"naive": runs["naive"]}, 1.1)))
    assert StiffnessBand.from_json(band.to_json()) == band and band.factors == (0.9, 1.1)
    assert band.worst_peak_ratio == pytest.approx(0.2) and "peak_ratio" not in band.to_json()["x1.1"]
    full = Verification(runs, ModelKind.FULL_FEM, 0.002, 1.0, 2337, 12.0)
    reduced = Verification(runs, ModelKind.REDUCED, 0.002, 0.9, None, 3.0, "/m/verify/drummer.npz", (3, 4))
    for verification in (full, reduced):
        assert Verification.from_json(verification.to_json()) == verification
    assert reduced.model == "reduced model drummer.npz" and full.model == "full FEM"
    assert full.zvd_rms_ratio == pytest.approx(0.4) and full.peak_ratio == pytest.approx(0.2)
