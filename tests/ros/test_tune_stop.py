"""``retarget tune`` ends the loop when a refinement says it stopped improving, unless ``--all-trials``."""
from __future__ import annotations

from retarget.planning.refine import Decision
from retarget.ros.tune import TrialLine, stops_the_loop


def test_the_loop_stops_only_when_it_stopped_improving() -> None:
    assert stops_the_loop(Decision.STOPPED.value, all_trials=False)
    assert not stops_the_loop(Decision.STOPPED.value, all_trials=True)
    for decision in (Decision.FIRST, Decision.IMPROVING, Decision.ROSE):  # a rise steps again from the best trial
        assert not stops_the_loop(decision.value, all_trials=False)


def test_the_trial_line_names_the_decision() -> None:
    line = TrialLine(trial=2, plan="plan2.csv", take="take2", measured_peak_deviation_m=0.01936,
                     predicted_peak_deviation_m=0.00426, peak_torque_ratio=0.48, decision=Decision.STOPPED.value,
                     next_plan="plan3.csv", report="trial2.json", play_s=8.0, refine_s=20.0).line()
    assert line == ("trial 2: measured peak   19.36 mm, next predicted    4.26 mm, torque 0.48 x stall, "
                    "stopped improving")
