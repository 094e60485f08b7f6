"""The planner as a process: invalid goals are INVALID_GOAL; a valid goal for a robot without a cached or shipped
reduced model is NOT_AVAILABLE (saying what to pass) when the node may not train in-process; with a model it
plans (SUCCESSFUL, published) and a cancel answers CANCELED with the best trajectory so far; the node's plan is
:func:`retarget.planning.plan`'s on the same inputs."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from ros_helpers import result_of, retry_stale_states, sent_goal, wait_for

pytestmark = pytest.mark.integration

JOINTS = ["base_pitch"]


def _goal(joints: list[str], points: list[tuple[float, list[float]]]):
    from retarget_interfaces.action import Retarget
    from trajectory_msgs.msg import JointTrajectoryPoint

    goal = Retarget.Goal()
    goal.animation.joint_names = joints
    for t, q in points:
        p = JointTrajectoryPoint(positions=q)
        p.time_from_start.sec, p.time_from_start.nanosec = int(t), int(round((t % 1) * 1e9))
        goal.animation.points.append(p)
    goal.execute = True
    return goal


@contextmanager
def _retarget_client(ros_context: Any, name: str, action: str) -> Iterator[Any]:
    """An ActionClient of ``Retarget`` on ``action``, its node spun by the shared executor; destroyed after."""
    from retarget.ros.action_client import LockedActionClient
    from rclpy.node import Node
    from retarget_interfaces.action import Retarget

    context, executor = ros_context
    node = Node(name, context=context)
    client = LockedActionClient(node, Retarget, action)
    executor.add_node(node)  # after the action client: rclpy#1589
    try:
        yield client
    finally:
        executor.remove_node(node)
        client.destroy()
        node.destroy_node()


def test_planner_results(start_node, ros_context, tmp_path, monkeypatch) -> None:
    from retarget_interfaces.action import Retarget

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "empty-cache"))  # no reduced model cached
    proc = start_node("retarget.ros.planner", {"robot_name": "single_rod", "joint_names": JOINTS,
                                               "allow_training": False}, namespace="/test_planner")
    with _retarget_client(ros_context, "planner_client", "/test_planner/planner/retarget") as client:
        assert client.wait_for_server(timeout_sec=15.0), proc.log()
        valid = _goal(JOINTS, [(0.5, [0.1]), (1.0, [0.0])])
        # No model and no training: the result says exactly what to pass.
        cases = [(valid, Retarget.Result.NOT_AVAILABLE, "`retarget up single_rod --reduced FILE.npz`"),
                 (valid, Retarget.Result.NOT_AVAILABLE, "allow_training: true in config/single_rod.params.yaml"),
                 (_goal(["j1"], [(1.0, [0.1])]), Retarget.Result.INVALID_GOAL, "j1"),
                 (_goal(JOINTS, []), Retarget.Result.INVALID_GOAL, "empty")]
        for goal, code, text in cases:
            feedback: list = []

            def attempt(goal=goal, feedback=feedback):
                feedback.clear()
                sent = client.send_goal_async(goal, feedback_callback=feedback.append)
                wait_for(sent.done, 5.0, "goal response")
                # No model: the robot is loaded first (seconds on a busy host).
                return result_of(sent.result(), 60.0, proc.log)

            try:
                result = retry_stale_states(attempt)  # a first response lost to discovery is sent again
            except AssertionError as exc:  # seen once in CI (no goal response for 20 s): keep the node's side
                raise AssertionError(f"{exc} (case {text!r}); planner log:\n{proc.log()}") from exc
            assert result.error_code == code, result.error_string
            assert text in result.error_string
            assert feedback and feedback[0].feedback.stage == "validating"


def test_planner_plans_and_cancel_answers_with_the_best_so_far(start_node, ros_context, tmp_path,
                                                               monkeypatch) -> None:
    """Real plans (the tiny rod and its artifact, in two windows): one of 2 iterations per window SUCCESSFUL and
    published; one cancelled once its first iteration is reported: CANCELED with the best trajectory evaluated so
    far, not published."""
    import json

    from retarget.ros.action_client import LockedActionClient
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from retarget_interfaces.action import Retarget
    from tiny_robot import reduce_tiny_robot, write_tiny_robot
    from trajectory_msgs.msg import JointTrajectory

    folder = write_tiny_robot(tmp_path / "robot")
    model = reduce_tiny_robot(folder, tmp_path / "elsewhere" / "my-model.npz")
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))  # empty: the model comes from reduced_file
    # In windows (the long motions' setting): the optimizer's per-window feedback reaches the client as well. The
    # tiny rod's 4-layer mesh misses the model card's gate: the node is told to plan on it all the same.
    proc = start_node("retarget.ros.planner", {"robot_name": str(folder / "tiny_rod.yaml"), "joint_names": ["m"],
                                               "reduced_file": str(model), "dt": 0.005, "window": 0.1,
                                               "window_tail": 0.05, "allow_unverified_model": True},
                      namespace="/test_planner_plans")
    context, executor = ros_context
    node = Node("planner_plans_client", context=context)
    published: list = []
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(JointTrajectory, "/test_planner_plans/planner/optimized_trajectory", published.append,
                             latched)
    client = LockedActionClient(node, Retarget, "/test_planner_plans/planner/retarget")
    executor.add_node(node)  # after the action client: rclpy#1589

    def send(max_iterations: int, feedback: list):
        times = [0.005 * k for k in range(41)]
        goal = _goal(["m"], [(t, [0.2 * min(t / 0.1, 1.0)]) for t in times])
        goal.execute = False
        goal.max_iterations, goal.relative_tolerance, goal.knot_spacing = max_iterations, 1e-15, 0.04
        sent = client.send_goal_async(goal, feedback_callback=lambda f: feedback.append(f.feedback))
        try:
            wait_for(sent.done, 20.0, "goal response")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; planner log:\n{proc.log()}") from exc
        assert sent.result().accepted
        return sent.result()

    try:
        assert client.wait_for_server(timeout_sec=15.0), proc.log()
        # Generous: the node process loads (or compiles) the reduced engine's kernels first.
        first: list = []
        done = result_of(send(2, first), 300.0, proc.log)
        assert done.error_code == Retarget.Result.SUCCESSFUL, (done.error_string, proc.log())
        assert 1 <= done.iterations <= 4 and len(done.optimized.points) > 10  # 2 per window
        assert "windows" in json.loads(done.metrics_json)["method"]
        stages = [f.stage for f in first]
        # The plan's estimate of each stage comes before the work.
        assert stages[:2] == ["validating", "loading"] and stages[2].startswith("estimated targets ~"), stages
        assert "optimization ~" in stages[2] and "; total ~" in stages[2], stages
        assert stages[3] == "targets" and "optimizing window 1 of 2" in stages, stages
        assert done.objective_final <= done.objective_initial
        assert done.optimized_peak_deviation > 0.0 and done.naive_peak_deviation > 0.0
        wait_for(lambda: len(published) == 1, 10.0, "the optimized trajectory on ~/optimized_trajectory")

        feedback: list = []
        handle = send(100000, feedback)
        wait_for(lambda: any(f.iteration >= 1 for f in feedback), 120.0, "a first optimizer iteration")
        cancel = handle.cancel_goal_async()
        wait_for(cancel.done, 10.0, "cancel response")
        result = result_of(handle, 120.0, proc.log)
        assert result.error_code == Retarget.Result.CANCELED, (result.error_string, proc.log())
        assert "cancelled after" in result.error_string and result.iterations >= 1
        assert len(result.optimized.points) > 10 and list(result.optimized.joint_names) == ["m"]
        metrics = json.loads(result.metrics_json)
        # Below the optimizer's start (the B-spline fit of the input); objective_initial is J of the naive playback
        # itself, which a plan cancelled after its first iterations need not have passed yet.
        assert result.objective_final <= metrics["objective_start"], metrics
        assert metrics["cancelled"] and metrics["interrupted"] and metrics["iterations"] < 100000
        assert len(published) == 1  # the cancelled plan is not published
    finally:
        executor.remove_node(node)
        client.destroy()
        node.destroy_node()


def _numbers(value, path: str = ""):
    """(path, number) for every number in a JSON report, except wall-clock and machine figures."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not any(word in key for word in ("wall", "timings", "evaluation_s", "load_average")):
                yield from _numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield from _numbers(item, f"{path}[{k}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path, float(value)


def test_the_node_plans_as_plan_does_on_the_same_inputs(start_node, ros_context, tmp_path, monkeypatch) -> None:
    """The node's goal and :func:`retarget.planning.plan` called here with the same :class:`PlanOptions` (the
    node's parameters and the goal's fields written out) give the same trajectory, bit for bit, and the same
    figures in the report (wall-clock times aside)."""
    import json

    import numpy as np
    from retarget_interfaces.action import Retarget
    from tiny_robot import reduce_tiny_robot, write_tiny_robot

    from retarget.jsonsafe import dumps
    from retarget.motion import Motion, load_motion
    from retarget.planning import PlanOptions, plan
    from retarget.planning.options import iteration_budgeted
    from retarget.ros.conversions import duration_to_seconds

    folder = write_tiny_robot(tmp_path / "robot")
    model = reduce_tiny_robot(folder, tmp_path / "elsewhere" / "my-model.npz")
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    proc = start_node("retarget.ros.planner", {"robot_name": str(folder / "tiny_rod.yaml"), "joint_names": ["m"],
                                               "reduced_file": str(model), "dt": 0.005,
                                               "allow_unverified_model": True},
                      namespace="/test_planner_same")
    motion = load_motion(folder / "ramp.csv")
    # The node's parameters (given above, the rest at their declared defaults) and the goal's fields below.
    # The goal's max_iterations budgets the plan by iterations, as the command line's does (iteration_budgeted).
    options, _ = iteration_budgeted(PlanOptions(
        dt=0.005, target_stride=1, window=None, window_tail=0.5, window_overlap=0.0, torque_weight=10.0,
        torque_margin=0.1, verify_dt=0.001, time_budget=None, reduced_file=str(model), allow_training=False,
        allow_unverified_model=True, knot_spacing=0.04, max_iterations=2, relative_tolerance=1e-15))
    with _retarget_client(ros_context, "planner_same_client", "/test_planner_same/planner/retarget") as client:
        assert client.wait_for_server(timeout_sec=15.0), proc.log()
        goal = _goal(["m"], [(float(t), [float(q)]) for t, q in zip(motion.time, motion.positions[:, 0])])
        goal.execute = False
        goal.deviation_weight = goal.acceleration_weight = -1.0  # the defaults
        goal.max_iterations, goal.relative_tolerance, goal.knot_spacing = 2, 1e-15, 0.04
        # Planning only: a repeat does no harm. The node process loads (or compiles) the engine's kernels first.
        result = result_of(sent_goal(client, goal, proc.log), 300.0, proc.log)
        assert result.error_code == Retarget.Result.SUCCESSFUL, (result.error_string, proc.log())

    # The motion as the goal carries it: times in whole nanoseconds (0.015 s is not 3 × 0.005 s in binary).
    sent = Motion(np.array([duration_to_seconds(p.time_from_start) for p in goal.animation.points]), motion.joint_names,
                  motion.positions)
    direct = plan(str(folder / "tiny_rod.yaml"), sent, options)
    names, times, positions = direct.trajectory(float(motion.time[0]))
    points = result.optimized.points
    assert list(result.optimized.joint_names) == list(names)
    assert len(points) == len(times)
    node_times = np.array([p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec for p in points])
    assert np.allclose(node_times, times, rtol=0.0, atol=1e-9)  # a Duration holds whole nanoseconds
    assert np.array_equal(np.array([list(p.positions) for p in points]), positions)
    node_figures = dict(_numbers(json.loads(result.metrics_json)))
    direct_figures = dict(_numbers(json.loads(dumps(direct.to_json(), default=float))))
    assert node_figures.keys() == direct_figures.keys() and len(node_figures) > 20
    differ = {k: (node_figures[k], direct_figures[k]) for k in node_figures
              if not np.isclose(node_figures[k], direct_figures[k], rtol=1e-9, atol=0.0)}
    assert differ == {}
    assert result.objective_final == direct.to_json()["objective_final"] > 0.0


@pytest.mark.slow
def test_with_no_model_the_node_trains_on_the_first_goal_and_says_how_far(start_node, ros_context, tmp_path,
                                                                           monkeypatch) -> None:
    """No model given, cached, in the model folders or shipped, and training allowed (the default): the first goal
    trains one — its feedback says the training's estimated cost first, then how far the full simulation is, the
    time left and the budget — plans on it and caches it; the next goal plans on the cached model."""
    import json

    from retarget_interfaces.action import Retarget
    from tiny_robot import write_tiny_robot

    folder = write_tiny_robot(tmp_path / "robot")
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    proc = start_node("retarget.ros.planner", {"robot_name": str(folder / "tiny_rod.yaml"), "joint_names": ["m"],
                                               "dt": 0.005, "time_budget": 1200.0, "verify": False,
                                               "verify_model": "none", "allow_unverified_model": True},
                      namespace="/test_planner_trains")
    times = [0.005 * k for k in range(41)]
    with _retarget_client(ros_context, "planner_trains_client", "/test_planner_trains/planner/retarget") as client:
        assert client.wait_for_server(timeout_sec=15.0), proc.log()

        def plan_once() -> tuple[Any, list]:
            goal = _goal(["m"], [(t, [0.2 * min(t / 0.1, 1.0)]) for t in times])
            goal.execute = False
            goal.max_iterations, goal.knot_spacing = 1, 0.04
            feedback: list = []
            got = sent_goal(client, goal, proc.log, feedback_callback=lambda f: feedback.append(f.feedback))
            # Training and a plan take under a minute here; two plans stay within the test's 600 s timeout.
            return result_of(got, 240.0, proc.log), [f.stage for f in feedback]

        first, stages = plan_once()
        assert first.error_code == Retarget.Result.SUCCESSFUL, (first.error_string, proc.log())
        training = [s for s in stages if s.startswith("training reduced model")]
        assert training[0].startswith("training reduced model: training: about "), stages
        assert "full simulation of 0.2 s at dt 0.002 s" in training[0]
        progress = [s for s in training[1:] if "full simulation" in s and "% (step" in s]
        assert progress and all("time budget 20 min" in s for s in progress), training
        assert json.loads(first.metrics_json)["model"]["source"] == "trained"
        again, stages = plan_once()
        assert again.error_code == Retarget.Result.SUCCESSFUL, again.error_string
        assert not any(s.startswith("training") for s in stages)
        assert json.loads(again.metrics_json)["model"]["source"] == "cache"
