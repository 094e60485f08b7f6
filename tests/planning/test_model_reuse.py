"""The planner's cache of trained models (retarget.planning.model): one artifact format, written once per
motion, reused for another motion of the robot when that motion stays within the model's training range, retrained
when it does not; pickles refused. Real parts: the tiny robot of tiny_robot.py trained in-process."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.motion.motion import Motion
from retarget.planning.model import REUSE_TRAINING_RANGE, motion_training_range, planning_model


def _ramp(amplitude: float) -> Motion:
    t = np.linspace(0.0, 0.2, 41)
    return Motion(t, ("m",), (amplitude * np.clip(t / 0.1, 0, 1))[:, None])


@pytest.fixture()
def robot(tiny_robot):
    return tiny_robot / "tiny_rod.yaml"


def test_a_trained_model_is_cached_as_an_artifact_and_reused_for_the_same_motion(robot, tmp_path):
    first = planning_model(robot, _ramp(0.2), n_modes=2, dt_train=0.002)
    assert first.info["source"] == "trained"
    cached = list((tmp_path / "cache" / "reduced").glob("tiny_rod-*.npz"))
    assert [str(p) for p in cached] == [first.info["cache_file"]]
    with np.load(cached[0], allow_pickle=False) as data:  # a plain artifact: no pickled objects
        assert "meta" in data.files
    again = planning_model(robot, _ramp(0.2), n_modes=2, dt_train=0.002, allow_training=False)
    assert again.info["source"] == "cache" and again.info["model_card"]["robot"] == "tiny_rod"
    np.testing.assert_allclose(again.reduced.bodies[0].basis.modes, first.reduced.bodies[0].basis.modes)
    # The training replayed the input with the reduced model; the error kept travels with the cached artifact.
    replay = first.info["training"]["replay_error_rel"]
    assert 0.0 <= replay < 1.0 and first.info["training"]["replay_error_m"] >= 0.0
    assert again.info["training"]["replay_error_rel"] == pytest.approx(replay)


def test_a_model_that_does_not_replay_its_training_motion_is_warned_about():
    from retarget.planning.model import REPLAY_WARN
    from retarget.planning.run import replay_check_warning

    assert replay_check_warning({"training": {"replay_error_rel": 0.5 * REPLAY_WARN}}) == ""
    assert replay_check_warning({"source": "artifact"}) == ""
    text = replay_check_warning({"training": {"replay_error_rel": 0.5, "train_motion": "step_30"}})
    assert "replays step_30 with an RMS error of 50 %" in text


def test_another_motion_within_the_training_range_reuses_the_model_and_a_larger_one_trains(robot):
    trained = planning_model(robot, _ramp(0.2), n_modes=2, dt_train=0.002)
    smaller = _ramp(0.1)
    ranges = motion_training_range(trained, smaller)
    assert 0.0 < max(ranges.values()) <= REUSE_TRAINING_RANGE
    reused = planning_model(robot, smaller, n_modes=2, dt_train=0.002, allow_training=False)
    assert reused.info["source"] == "cache (trained on another motion)"
    assert reused.info["cache_file"] == trained.info["cache_file"]
    assert reused.info["motion_training_range"] == pytest.approx(ranges)
    larger = _ramp(0.5)
    assert max(motion_training_range(trained, larger).values()) > REUSE_TRAINING_RANGE
    fresh = planning_model(robot, larger, n_modes=2, dt_train=0.002)
    assert fresh.info["source"] == "trained"
    assert any("as far as its training did" in s for s in fresh.info["skipped"])
    # Other settings (another mode count) are another model family: never reused across.
    other = planning_model(robot, smaller, n_modes=1, dt_train=0.002)
    assert other.info["source"] == "trained"


def test_a_pickle_is_refused(robot, tmp_path):
    bogus = tmp_path / "model.pkl"
    bogus.write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(InputError, match="expected a model artifact"):
        planning_model(robot, _ramp(0.2), reduced_file=bogus)


def test_modes_are_added_when_the_capped_model_cannot_replay_its_training_motion(robot, monkeypatch):
    """At the mode cap the reduced model must replay the input within the tolerance; when it cannot, the cap is
    doubled (up to MAX_PLAN_MODES) and the most accurate model is kept."""
    import retarget.planning.model as pm_module

    monkeypatch.setattr(pm_module, "MAX_PLAN_MODES", 1)
    one = planning_model(robot, _ramp(0.3), n_modes=1, dt_train=0.002, use_cache=False)
    assert one.info["training"]["modes"] == 1
    error_one = one.info["training"]["replay_error_rel"]
    monkeypatch.setattr(pm_module, "PLAN_REPLAY_TOLERANCE", min(pm_module.PLAN_REPLAY_TOLERANCE, 0.1 * error_one))
    monkeypatch.setattr(pm_module, "MAX_PLAN_MODES", 4)
    more = planning_model(robot, _ramp(0.3), n_modes=1, dt_train=0.002, use_cache=False)
    assert more.info["training"]["modes"] in (2, 4)
    assert max(more.info["modes"]) > 1
    assert more.info["training"]["replay_error_rel"] < error_one
