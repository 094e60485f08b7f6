"""The Retarget action's goal as a client builds it: a field left unset selects the planner's default (the goal's
regularizer weights default to −1, "the default"; 0 would plan with no regularizer). Real generated messages;
skipped without them."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest


def test_a_goal_left_unset_plans_with_the_planner_defaults() -> None:
    action = pytest.importorskip("retarget_interfaces.action", reason="retarget_interfaces not built (make setup)")
    from retarget.planning.options import PlanOptions
    from retarget.planning.settings import PLAN_SETTINGS
    from retarget.ros.planner import Planner

    goal = action.Retarget.Goal()
    assert goal.deviation_weight < 0 and goal.acceleration_weight < 0
    # The node's parameters at their declared defaults ("0: the default", verification on, training allowed).
    defaults = PlanOptions()
    node = SimpleNamespace(robot_name="", shipped_model=True, **{s.name: s.default for s in PLAN_SETTINGS})
    options = Planner._options(node, goal)
    assert options == replace(defaults, verify_dt=options.verify_dt)
    assert options.deviation_weight == defaults.deviation_weight
    assert options.acceleration_weight == defaults.acceleration_weight
    assert options.knot_spacing == defaults.knot_spacing and options.max_iterations == defaults.max_iterations
    goal.deviation_weight, goal.acceleration_weight = 0.0, 2e-8  # 0 is a weight a client may choose
    options = Planner._options(node, goal)
    assert options.deviation_weight == 0.0 and options.acceleration_weight == 2e-8


def test_a_goals_max_iterations_budgets_the_plan_as_the_command_line_does() -> None:
    """A goal's ``max_iterations`` skips the settle refinement and the verified-torque re-optimization, as
    ``retarget plan --max-iterations`` does, and the node says so; with windows neither runs anyway."""
    action = pytest.importorskip("retarget_interfaces.action", reason="retarget_interfaces not built (make setup)")
    from retarget.planning.options import PlanOptions, iteration_budgeted
    from retarget.planning.settings import PLAN_SETTINGS
    from retarget.ros.planner import Planner

    said: list[str] = []
    logger = SimpleNamespace(info=said.append)
    node = SimpleNamespace(robot_name="", shipped_model=True, get_logger=lambda: logger,
                           **{s.name: s.default for s in PLAN_SETTINGS})
    goal = action.Retarget.Goal()
    goal.max_iterations = 5
    options = Planner._options(node, goal)
    assert options.max_iterations == 5 and options.settle_iterations == 0 and options.verified_torque_rounds == 0
    assert options == iteration_budgeted(replace(options, settle_iterations=PlanOptions.settle_iterations,
                                                 verified_torque_rounds=PlanOptions.verified_torque_rounds))[0]
    assert said == ["max_iterations 5: skipping the settle refinement",
                    "max_iterations 5: skipping the re-optimization when the verification model needs more torque "
                    "than planned (and its second verification)"]
    said.clear()
    node.window = 1.0  # windows: nothing of the two would have run, nothing is said
    assert Planner._options(node, goal).settle_iterations == 0 and said == []


def test_the_node_falls_back_on_the_shipped_model_unless_given_one_or_told_not_to() -> None:
    pytest.importorskip("retarget_interfaces.action", reason="retarget_interfaces not built (make setup)")
    from retarget.ros.planner import fallback_models
    from retarget.sim.reduced.store import SHIPPED_DIR

    shipped = fallback_models("drummer", "", True)
    assert shipped and all(p.startswith(str(SHIPPED_DIR)) and "/verify/" not in p for p in shipped)
    assert fallback_models("drummer", "my.npz", True) == ()  # a given model wins
    assert fallback_models("drummer", "", False) == ()  # shipped_model: false
    assert fallback_models("single_rod", "", True) == ()  # nothing shipped for it


def test_training_feedback_says_how_far_the_time_left_and_the_budget() -> None:
    pytest.importorskip("retarget_interfaces.action", reason="retarget_interfaces not built (make setup)")
    from retarget.ros.planner import TRAINING_FEEDBACK_S, TrainingFeedback

    feedback = TrainingFeedback(900.0)
    feedback.expected_s = 300.0
    first = feedback.stage(0, 1000, now=10.0)
    assert first.startswith("training reduced model: full simulation 0 % (step 0 of 1000)")
    assert "expected about 5 min" in first and "time budget 15 min" in first
    assert feedback.stage(1, 1000, now=10.5) == ""  # at most one text per TRAINING_FEEDBACK_S
    later = feedback.stage(100, 1000, now=10.0 + 20.0 + TRAINING_FEEDBACK_S - 2.0)
    # 10 % in 20 s: 180 s of simulation left, and 0.6 x the simulation's 200 s for mass-PCA and cubature.
    assert "10 % (step 100 of 1000)" in later and "about 5 min left" in later
    assert "no time budget" in TrainingFeedback(None).stage(0, 10, now=0.0)


def test_the_goal_summary_names_the_rigid_body_engine_and_the_plans_assumptions() -> None:
    """``retarget goal``'s summary says what the plan was verified in as ``retarget plan`` does (on a rigid robot
    the full FEM is its rigid-body engine, not a finite-element model) and what it assumes of the hardware."""
    import io

    from retarget.planning.checks import ModelKind, RunFigures, Verification
    from retarget.ros.goal import _print_result

    runs = {"naive": RunFigures(0.02, 0.01, 0.5), "optimized": RunFigures(0.01, 0.005, 0.5)}
    printed = {}
    for dofs in (0, 1234):
        verified = Verification(runs, ModelKind.FULL_FEM, 1e-3, deformable_dofs=dofs)
        summary = {"status": "SUCCEEDED", "error_string": "", "wall_time_s": 1.0, "points": 10, "iterations": 3,
                   "objective_initial": 2.0, "objective_final": 1.0, "naive_peak_deviation_m": 0.02,
                   "optimized_peak_deviation_m": 0.01, "naive_rms_deviation_m": 0.01,
                   "optimized_rms_deviation_m": 0.005,
                   "metrics": {"verified": verified.to_json(), "assumptions": ["gearboxes without backlash"]}}
        out = io.StringIO()
        _print_result(summary, "arm", out)
        printed[dofs] = out.getvalue()
    assert "verified in the full FEM's rigid-body engine (no flexible parts): 0.50 x naive" in printed[0]
    assert "verified in the full FEM: 0.50 x naive" in printed[1234]
    assert "what the plan assumes of the hardware (not modelled):\n    - gearboxes without backlash\n" in printed[0]
