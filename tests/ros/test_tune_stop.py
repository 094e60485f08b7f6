"""``retarget tune`` ends the loop when a refinement says it stopped improving, unless ``--all-trials``; it reads a
late play from the play's JSON line; its JSON files are written whole."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_a_late_play_is_read_from_the_plays_json_line() -> None:
    """A play whose goal succeeded with a note (the trajectory server began it after its stamp) is named in the
    trial's messages; a play without one, a failed goal or output that is no JSON give ""."""
    from retarget.ros.tune import _play_note

    note = "execution began 0.412 s after the goal's stamp"
    line = json.dumps({"goal": {"error_code": 0, "error_string": note}, "ok": True})
    assert _play_note(f"progress\n{line}\n") == note
    assert _play_note('{"goal": {"error_code": 0, "error_string": ""}}') == ""
    assert _play_note('{"goal": {"error_code": -5, "error_string": "tolerance"}}') == ""
    assert _play_note("") == "" and _play_note("not json") == "" and _play_note("[1, 2]") == ""


def test_json_files_are_strict_and_replaced_whole(tmp_path: Path) -> None:
    from retarget.ros.tune import _write_json

    path = tmp_path / "history.json"
    _write_json(path, {"trials": [1]})
    _write_json(path, {"trials": [1, 2], "peak": float("nan")})
    assert json.loads(path.read_text(encoding="utf-8")) == {"trials": [1, 2], "peak": None}
    with pytest.raises(TypeError):
        _write_json(path, {"trials": object()})
    assert json.loads(path.read_text(encoding="utf-8"))["trials"] == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["history.json"]
