"""Tests of retarget.ros.motion_convert against real trajectory_msgs messages (skipped without them)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tests.motion.conftest import motion  # noqa: F401  (the motion tests' fixture)

from retarget.motion import Motion
from retarget.ros.motion_convert import from_joint_trajectory_msg, to_joint_trajectory_msg


def test_round_trip_through_a_real_message(motion: Motion) -> None:  # noqa: F811 (the fixture)
    pytest.importorskip("trajectory_msgs.msg", reason="trajectory_msgs (ros-trajectory-msgs wheel) not installed")
    msg = to_joint_trajectory_msg(motion, velocities=True, frame_id="base")
    assert type(msg).__module__.startswith("trajectory_msgs")
    assert msg.header.frame_id == "base" and len(msg.points) == motion.num_samples
    assert len(msg.points[0].velocities) == motion.num_joints
    back = from_joint_trajectory_msg(msg)
    np.testing.assert_array_equal(back.positions, motion.positions)
    np.testing.assert_allclose(back.time, motion.time, rtol=0, atol=1e-9)


@pytest.mark.integration
def test_the_conversion_imports_no_ros_until_used() -> None:
    code = ("import sys, retarget.motion, retarget.motion.io, retarget.motion.bvh, retarget.ros.motion_convert; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('rclpy', 'trajectory_msgs', 'sensor_msgs')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_for_joints_holds_the_robots_joints_the_motion_leaves_out_and_says_so(motion: Motion, capsys) -> None:  # noqa: F811
    from retarget.ros.motion_convert import for_joints

    robot = ["knee", *motion.joint_names]
    full = for_joints(motion, robot, "play")
    assert full.joint_names == tuple(robot)
    np.testing.assert_array_equal(full.positions[:, 0], 0.0)
    assert "retarget play: the motion has no column for knee: held at 0 rad" in capsys.readouterr().err
    assert for_joints(motion, list(motion.joint_names), "goal") == motion
    assert capsys.readouterr().err == ""
