"""The Retarget action's goal as a client builds it: a field left unset selects the planner's default (the goal's
regularizer weights default to −1, "the default"; 0 would plan with no regularizer). Real generated messages;
skipped without them."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest


def test_a_goal_left_unset_plans_with_the_planner_defaults() -> None:
    action = pytest.importorskip("retarget_interfaces.action", reason="retarget_interfaces not built (make setup)")
    from retarget.optimize.options import NODE_PARAMETERS, PlanOptions
    from retarget.ros.planner import Planner

    goal = action.Retarget.Goal()
    assert goal.deviation_weight < 0 and goal.acceleration_weight < 0
    # The node's parameters at their declared defaults ("0: the default", verification on).
    declared = {"verify": True, "target_stride": 1, "window_tail": 0.5, "torque_weight": 10.0, "torque_margin": 0.1,
                "reduced_file": "", "allow_training": False, "allow_unverified_model": False}
    defaults = PlanOptions()
    declared.update(rest_after=defaults.rest_after, settle_weight=defaults.settle_weight,
                    settle_iterations=defaults.settle_iterations,
                    settle_peak_allowance=defaults.settle_peak_allowance)
    node = SimpleNamespace(**{name: declared.get(name, 0.0) for name in NODE_PARAMETERS})
    options = Planner._options(node, goal)
    assert options == replace(defaults, verify_dt=options.verify_dt, allow_training=False)  # the node trains only if asked
    assert options.deviation_weight == defaults.deviation_weight
    assert options.acceleration_weight == defaults.acceleration_weight
    assert options.knot_spacing == defaults.knot_spacing and options.max_iterations == defaults.max_iterations
    goal.deviation_weight, goal.acceleration_weight = 0.0, 2e-8  # 0 is a weight a client may choose
    options = Planner._options(node, goal)
    assert options.deviation_weight == 0.0 and options.acceleration_weight == 2e-8
