"""``retarget refine`` (and the node's ``~/refine``) refines a plan on the model the planner plans with: the one
given, cached or found, else the planner's fallback (the node's: the model shipped for the robot)."""
from __future__ import annotations

import json

import pytest
from tiny_robot import reduce_tiny_robot, write_tiny_robot

from retarget.motion import load_motion, save_motion
from retarget.optimize.errors import NoPlanningModelError
from retarget.planning.options import PlanOptions
from retarget.planning.refine import read_plan, refine_context
from retarget.planning.variants import PLAN_SETTINGS_PREFIX, motion_digest


def test_a_plan_is_refined_on_the_planners_fallback_model(tmp_path, monkeypatch):
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    folder = write_tiny_robot(tmp_path / "robot")
    shipped = reduce_tiny_robot(folder, tmp_path / "shipped" / "tiny_rod.npz")
    ramp = load_motion(folder / "ramp.csv")
    settings = {"knot_spacing_s": 0.04, "dt_s": 0.004, "duration_s": 0.2, "rest_from_s": 0.16,
                "input_sha256": motion_digest(ramp)}
    save_motion(folder / "plan.csv", ramp, comments=[PLAN_SETTINGS_PREFIX + json.dumps(settings)])
    plan = read_plan(folder / "plan.csv")
    options = PlanOptions(allow_training=False, allow_unverified_model=True)
    with pytest.raises(NoPlanningModelError):
        refine_context(folder / "tiny_rod.yaml", ramp, plan, options)
    context = refine_context(folder / "tiny_rod.yaml", ramp, plan,
                             PlanOptions(allow_training=False, allow_unverified_model=True,
                                         fallback_models=(str(shipped),)))
    assert context.model_info["source"] == "fallback" and context.model_info["file"] == str(shipped)
