"""The interface packages built by `make setup`: importable, field for field as documented, round-trip."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is installed by `make setup`")
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402

# Upstream control_msgs 6.3-6.10 (ROS 2 Kilted), from the public interface definitions: (name, type) in order.
# Type hashes cover exactly these (names, types, order, nested types), not comments or constants.
UPSTREAM_FJT = {
    "Goal": [
        ("trajectory", "trajectory_msgs/JointTrajectory"),
        ("multi_dof_trajectory", "trajectory_msgs/MultiDOFJointTrajectory"),
        ("path_tolerance", "sequence<control_msgs/JointTolerance>"),
        ("component_path_tolerance", "sequence<control_msgs/JointComponentTolerance>"),
        ("goal_tolerance", "sequence<control_msgs/JointTolerance>"),
        ("component_goal_tolerance", "sequence<control_msgs/JointComponentTolerance>"),
        ("goal_time_tolerance", "builtin_interfaces/Duration"),
    ],
    "Result": [("error_code", "int32"), ("error_string", "string")],
    "Feedback": [
        ("header", "std_msgs/Header"),
        ("joint_names", "sequence<string>"),
        ("desired", "trajectory_msgs/JointTrajectoryPoint"),
        ("actual", "trajectory_msgs/JointTrajectoryPoint"),
        ("error", "trajectory_msgs/JointTrajectoryPoint"),
        ("index", "int32"),
        ("multi_dof_joint_names", "sequence<string>"),
        ("multi_dof_desired", "trajectory_msgs/MultiDOFJointTrajectoryPoint"),
        ("multi_dof_actual", "trajectory_msgs/MultiDOFJointTrajectoryPoint"),
        ("multi_dof_error", "trajectory_msgs/MultiDOFJointTrajectoryPoint"),
        ("multi_dof_index", "int32"),
    ],
}
UPSTREAM_JOINT_TOLERANCE = [("name", "string"), ("position", "double"), ("velocity", "double"),
                            ("acceleration", "double")]
UPSTREAM_COMPONENT_TOLERANCE = [("joint_name", "string"), ("component", "uint16"), ("position", "double"),
                                ("velocity", "double"), ("acceleration", "double")]
# RIHS01 hashes of the two messages as generated from the upstream definitions (they have no nested types, so
# they do not depend on the distro's other packages).
UPSTREAM_HASHES = {
    "control_msgs/msg/JointTolerance":
        "RIHS01_c254f9cece0f3b733017b6990fd46d1326e25242d6b8844398c97d9a88e7d648",
    "control_msgs/msg/JointComponentTolerance":
        "RIHS01_739ea7566931944d33830fa10f1bf5e7a7fbdc3172bce7a7eaac642bd6e3ffa4",
}
# TFMessage as published by real distros (ros2 topic info --verbose prints it); it depends on geometry_msgs too,
# so equality also shows the wheels' geometry_msgs/std_msgs/builtin_interfaces match the distro's.
TF_MESSAGE_HASH = "RIHS01_e369d0f05a23ae52508854b66f6aa0437f3449d652e8cbf22d5abe85d020f087"


def fields(msg_type) -> list[tuple[str, str]]:
    return list(msg_type.get_fields_and_field_types().items())


def test_imports():
    from control_msgs.action import FollowJointTrajectory  # noqa: F401
    from retarget_interfaces.action import Retarget  # noqa: F401


def test_follow_joint_trajectory_fields_match_upstream():
    from control_msgs.action import FollowJointTrajectory
    from control_msgs.msg import JointComponentTolerance, JointTolerance

    for part, expected in UPSTREAM_FJT.items():
        assert fields(getattr(FollowJointTrajectory, part)) == expected, part
    assert fields(JointTolerance) == UPSTREAM_JOINT_TOLERANCE
    assert fields(JointComponentTolerance) == UPSTREAM_COMPONENT_TOLERANCE
    assert FollowJointTrajectory.Result.PATH_TOLERANCE_VIOLATED == -4
    assert JointComponentTolerance.ROTATION == 5


def test_message_type_hashes_match_upstream():
    import control_msgs

    share = Path(control_msgs.__file__).resolve()
    # <prefix>/lib/python3.11/site-packages/control_msgs/__init__.py -> <prefix>/share/control_msgs
    prefix = share.parents[4]
    for type_name, expected in UPSTREAM_HASHES.items():
        name = type_name.rsplit("/", 1)[1]
        desc = prefix / "share" / "control_msgs" / "msg" / f"{name}.json"
        if not desc.exists():
            pytest.skip(f"no type description file {desc} (control_msgs from a distro install)")
        hashes = {h["type_name"]: h["hash_string"] for h in json.loads(desc.read_text())["type_hashes"]}
        assert hashes[type_name] == expected


def test_tf_message_type_hash_matches_distro():
    import tf2_msgs

    prefix = Path(tf2_msgs.__file__).resolve().parents[4]
    desc = prefix / "share" / "tf2_msgs" / "msg" / "TFMessage.json"
    if not desc.exists():
        pytest.skip(f"no type description file {desc} (tf2_msgs from a distro install)")
    hashes = {h["type_name"]: h["hash_string"] for h in json.loads(desc.read_text())["type_hashes"]}
    assert hashes["tf2_msgs/msg/TFMessage"] == TF_MESSAGE_HASH


def _trajectory(names, n=5):
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    traj = JointTrajectory(joint_names=list(names))
    for i in range(n):
        t = 0.1 * (i + 1)
        traj.points.append(
            JointTrajectoryPoint(
                positions=[math.sin(t + j) for j in range(len(names))],
                velocities=[math.cos(t + j) for j in range(len(names))],
                time_from_start=Duration(sec=int(t), nanosec=int(round((t % 1) * 1e9))),
            )
        )
    return traj


def _assert_same_trajectory(a, b):
    assert list(a.joint_names) == list(b.joint_names)
    assert len(a.points) == len(b.points)
    for p, q in zip(a.points, b.points):
        assert list(p.positions) == list(q.positions)
        assert list(p.velocities) == list(q.velocities)
        assert (p.time_from_start.sec, p.time_from_start.nanosec) == (q.time_from_start.sec, q.time_from_start.nanosec)


def test_joint_trajectory_round_trip():
    from trajectory_msgs.msg import JointTrajectory

    traj = _trajectory(["a", "b", "c"])
    back = deserialize_message(serialize_message(traj), JointTrajectory)
    _assert_same_trajectory(traj, back)


def test_retarget_action_round_trip():
    from retarget_interfaces.action import Retarget

    goal = Retarget.Goal(robot="drummer", animation=_trajectory(["neck", "torso"]), tracked_bodies=["head"],
                         position_weights=[2.0], deviation_weight=-1.0, acceleration_weight=1e-4,
                         knot_spacing=0.05, max_iterations=30, relative_tolerance=1e-4, execute=True)
    back = deserialize_message(serialize_message(goal), Retarget.Goal)
    _assert_same_trajectory(goal.animation, back.animation)
    assert (back.robot, list(back.tracked_bodies), list(back.position_weights), back.execute) == (
        "drummer", ["head"], [2.0], True)
    assert back.acceleration_weight == 1e-4 and back.max_iterations == 30

    result = Retarget.Result(error_code=Retarget.Result.NOT_AVAILABLE, error_string="optimizer not built",
                             optimized=_trajectory(["neck"]), objective_initial=1.5, iterations=3,
                             metrics_json=json.dumps({"zvd": {"lag_s": 0.1}}))
    back = deserialize_message(serialize_message(result), Retarget.Result)
    assert back.error_code == Retarget.Result.NOT_AVAILABLE and back.error_string == "optimizer not built"
    assert json.loads(back.metrics_json) == {"zvd": {"lag_s": 0.1}}
    _assert_same_trajectory(result.optimized, back.optimized)

    fb = Retarget.Feedback(stage="optimizing", iteration=4, objective=0.25, gradient_norm=1e-3, elapsed_time=2.5)
    back = deserialize_message(serialize_message(fb), Retarget.Feedback)
    assert (back.stage, back.iteration, back.objective, back.gradient_norm, back.elapsed_time) == (
        "optimizing", 4, 0.25, 1e-3, 2.5)
