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


def _line(k: int) -> TrialLine:
    return TrialLine(trial=k, plan=f"plan{k}.csv", take=f"take{k}", measured_peak_deviation_m=0.02,
                     predicted_peak_deviation_m=0.01, peak_torque_ratio=0.4, decision=Decision.IMPROVING.value,
                     next_plan=f"plan{k + 1}.csv", report=f"trial{k}.json", play_s=8.0, refine_s=20.0)


def test_a_take_refused_for_its_run_alone_is_played_again(capsys: pytest.CaptureFixture[str]) -> None:
    """`--replays N`: a take refused as misaligned, with frames missing or clipped (that run's clock or motion
    capture) is played again, at most N times; any other failure, or the last replay's, ends the loop."""
    from retarget.planning.refine import REPLAYABLE, Refusal
    from retarget.ros.tune import _Failed, _played_trial

    plays: list[int] = []

    def refused_then(kinds: list[str]):
        def play(replay: int) -> TrialLine:
            plays.append(replay)
            if replay < len(kinds):
                raise _Failed(f"trial 2: the refinement failed ({kinds[replay]})", refusal=kinds[replay])
            return _line(2)
        return play

    trial = _played_trial(refused_then([Refusal.MISALIGNED.value]), 2, Path("plan2.csv"), replays=1)
    assert plays == [0, 1] and trial.replays == 1 and trial.line().endswith("improving (1 replay)")
    assert "refused (misaligned), a fault of that run: playing plan2.csv again (replay 1 of at most 1)" in \
        capsys.readouterr().err
    plays.clear()
    with pytest.raises(_Failed, match="frames missing"):  # out of replays: the last refusal ends the loop
        _played_trial(refused_then([Refusal.MISALIGNED.value, Refusal.MISSING_FRAMES.value]), 2,
                      Path("plan2.csv"), replays=1)
    assert plays == [0, 1]
    for kind in set(Refusal) - REPLAYABLE:  # a plan or take that does not belong: no replay
        plays.clear()
        with pytest.raises(_Failed, match=kind.value):
            _played_trial(refused_then([kind.value]), 2, Path("plan2.csv"), replays=3)
        assert plays == [0]
    plays.clear()
    with pytest.raises(_Failed):  # --replays 0
        _played_trial(refused_then([Refusal.CLIPPED.value]), 2, Path("plan2.csv"), replays=0)
    assert plays == [0]
    assert _played_trial(refused_then([]), 2, Path("plan2.csv"), replays=2).replays == 0
    assert REPLAYABLE == {Refusal.MISALIGNED, Refusal.MISSING_FRAMES, Refusal.CLIPPED}
    from retarget.cli import build_parser
    from retarget.errors import InputError

    args = build_parser().parse_args(["tune", "single_rod", "--motion", "m.csv", "--replays", "-1"])
    assert build_parser().parse_args(["tune", "single_rod", "--motion", "m.csv"]).replays == 1
    with pytest.raises(InputError, match="--replays must be 0 or more, got -1"):
        args.func(args)
