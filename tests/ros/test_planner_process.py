"""The planner as a process: invalid goals are INVALID_GOAL; a valid goal for a robot without a cached reduced
model is NOT_AVAILABLE (with the command that builds one) unless the node may train in-process."""
from __future__ import annotations

import pytest
from ros_helpers import retry_stale_states, wait_for

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


def test_planner_results(start_node, ros_context, tmp_path, monkeypatch) -> None:
    from rclpy.action import ActionClient
    from rclpy.node import Node
    from retarget_interfaces.action import Retarget

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "empty-cache"))  # no reduced model cached
    proc = start_node("retarget.ros.planner", {"robot_name": "single_rod", "joint_names": JOINTS},
                      namespace="/test_planner")
    context, executor = ros_context
    node = Node("planner_client", context=context)
    executor.add_node(node)
    client = ActionClient(node, Retarget, "/test_planner/planner/retarget")
    try:
        assert client.wait_for_server(timeout_sec=15.0), proc.log()
        valid = _goal(JOINTS, [(0.5, [0.1]), (1.0, [0.0])])
        cases = [(valid, Retarget.Result.NOT_AVAILABLE, "retarget plan single_rod"),
                 (_goal(["j1"], [(1.0, [0.1])]), Retarget.Result.INVALID_GOAL, "j1"),
                 (_goal(JOINTS, []), Retarget.Result.INVALID_GOAL, "empty")]
        for goal, code, text in cases:
            feedback: list = []

            def attempt(goal=goal, feedback=feedback):
                feedback.clear()
                sent = client.send_goal_async(goal, feedback_callback=feedback.append)
                wait_for(sent.done, 5.0, "goal response")
                got = sent.result().get_result_async()
                wait_for(got.done, 10.0, "result")
                return got.result().result

            try:
                result = retry_stale_states(attempt)  # a first response lost to discovery is sent again
            except AssertionError as exc:  # seen once in CI (no goal response for 20 s): keep the node's side
                raise AssertionError(f"{exc} (case {text!r}); planner log:\n{proc.log()}") from exc
            assert result.error_code == code, result.error_string
            assert text in result.error_string
            assert feedback and feedback[0].feedback.stage == "validating"
    finally:
        executor.remove_node(node)
        client.destroy()
        node.destroy_node()
