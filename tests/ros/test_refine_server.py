"""The planner node's ``~/refine`` as a process: a goal without a take is INVALID_GOAL, a take without the tracked
body or a plan of other joints is REFUSED with the refusal's kind, and a valid goal for a robot without a planning
model is NOT_AVAILABLE — each with nothing written. The step itself through ROS: tests/ros/test_tune_process.py."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ros_helpers import result_of, retry_stale_states, wait_for

pytest.importorskip("retarget_interfaces.action", reason="retarget_interfaces is not built (make setup)")

pytestmark = pytest.mark.integration


def _bag(path: Path, body: str) -> Path:
    """A rosbag2 with one PoseStamped topic ``/mocap/<body>/pose``: 2 s at rest at 120 Hz."""
    from retarget.mocap.bags import PoseSeries, pose_topic, write_pose_bag

    t = 1000.0 + np.arange(240) / 120.0
    quat = np.tile([0.0, 0.0, 0.0, 1.0], (t.size, 1))
    write_pose_bag(path, {pose_topic(body): PoseSeries(t, np.tile([0.0, 0.0, 0.75], (t.size, 1)), quat)})
    return path


def _trajectory(joints: list[str], seconds: float = 4.6) -> Any:
    from retarget.motion import Motion
    from retarget.ros.motion_convert import to_joint_trajectory_msg

    times = np.linspace(0.0, seconds, 93)
    return to_joint_trajectory_msg(Motion(times, tuple(joints), np.zeros((times.size, len(joints)))))


def test_refine_goals_that_cannot_be_refined_end_with_their_reason(start_node, ros_context, tmp_path,
                                                                   monkeypatch) -> None:
    from retarget.ros.action_client import LockedActionClient
    from rclpy.node import Node
    from retarget_interfaces.action import Refine

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "no-models"))
    # No model and no training (the node trains on a first goal by default): NOT_AVAILABLE below.
    proc = start_node("retarget.ros.planner", {"robot_name": "single_rod", "joint_names": ["base_pitch"],
                                               "allow_training": False}, namespace="/test_refine")
    context, executor = ros_context
    node = Node("refine_client", context=context)
    client = LockedActionClient(node, Refine, "/test_refine/planner/refine")
    executor.add_node(node)  # after the action client: rclpy#1589
    good_take = _bag(tmp_path / "take", "tip_mass")
    out = tmp_path / "next.csv"

    def goal(**fields: Any) -> Any:
        values = {"motion": "single_rod/step_30_servo", "plan": _trajectory(["base_pitch"]),
                  "recording": str(good_take), "out": str(out), **fields}
        return Refine.Goal(**values)

    cases = [
        (goal(recording=""), Refine.Result.INVALID_GOAL, "", "no recording"),
        (goal(recording=str(_bag(tmp_path / "other", "other"))), Refine.Result.REFUSED, "wrong robot",
         "has no topic '/mocap/tip_mass/pose'"),
        (goal(plan=_trajectory(["j1"])), Refine.Result.REFUSED, "wrong robot", "drives ['j1']"),
        (goal(), Refine.Result.NOT_AVAILABLE, "", "single_rod"),
        (goal(no_recorded_start=True), Refine.Result.NOT_AVAILABLE, "", "single_rod"),
    ]
    try:
        assert client.wait_for_server(timeout_sec=15.0), proc.log()
        for sent, code, refusal, text in cases:
            feedback: list = []

            def attempt(sent=sent, feedback=feedback):
                feedback.clear()
                response = client.send_goal_async(sent, feedback_callback=lambda f: feedback.append(f.feedback))
                wait_for(response.done, 5.0, "goal response")
                return result_of(response.result(), 120.0, proc.log)

            result = retry_stale_states(attempt)
            assert (result.error_code, result.refusal) == (code, refusal), (result.error_string, proc.log())
            assert text in result.error_string
            assert feedback and feedback[0].stage == "validating"
            assert not list(result.next_plan.points) and not out.exists()
    finally:
        executor.remove_node(node)
        client.destroy()
        node.destroy_node()
