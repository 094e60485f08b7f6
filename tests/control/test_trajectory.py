"""Goal validation: every rejection case of the acceptance list, with its error code; reordering; start time."""
from __future__ import annotations

import math

import numpy as np
import pytest

from retarget.control import ErrorCode, GoalPoint, TrajectoryRejected, validate_trajectory
from retarget.motion.limits import JointLimit

JOINTS = ("a", "b", "c")
LIMITS = {"a": JointLimit(-1.0, 1.0, 5.0), "b": JointLimit(-2.0, 2.0, 5.0), "c": JointLimit(-3.0, 3.0, 5.0)}


def pts(*rows: tuple) -> list[GoalPoint]:
    return [GoalPoint(t, list(p), *[list(x) for x in rest]) for t, p, *rest in rows]


def validate(names=JOINTS, points=None, **kw):
    if points is None:
        points = pts((0.5, (0.1, 0.2, 0.3)), (1.0, (0.2, 0.3, 0.4)))
    kw.setdefault("limits", LIMITS)
    return validate_trajectory(names, points, controller_joints=JOINTS, **kw)


def test_valid_goal_is_reordered_to_controller_joints() -> None:
    traj = validate(("c", "a", "b"), pts((0.5, (3.0, 1.0, 2.0), (0.3, 0.1, 0.2)), (1.0, (2.9, 0.9, 1.9), (0, 0, 0))),
                    max_velocity=10.0, now=7.0)
    assert traj.joint_names == JOINTS
    np.testing.assert_array_equal(traj.positions, [[1.0, 2.0, 3.0], [0.9, 1.9, 2.9]])
    np.testing.assert_array_equal(traj.velocities, [[0.1, 0.2, 0.3], [0, 0, 0]])
    assert traj.accelerations is None
    assert traj.start_time == 7.0  # zero stamp: start now
    assert traj.duration == 1.0


def test_a_partial_goal_is_accepted_where_asked_with_its_joints_in_controller_order() -> None:
    """The planner's animations may leave motors out (they hold their zero pose); FollowJointTrajectory goals may
    not ("missing joint" below)."""
    traj = validate(("c", "a"), pts((0.5, (3.0, 1.0)), (1.0, (2.9, 0.9))), partial=True)
    assert traj.joint_names == ("a", "c")
    np.testing.assert_array_equal(traj.positions, [[1.0, 3.0], [0.9, 2.9]])
    with pytest.raises(TrajectoryRejected, match="'x'"):
        validate(("a", "x"), pts((1.0, (0.0, 0.0))), partial=True)
    with pytest.raises(TrajectoryRejected, match="lower limit|upper limit|limit"):
        validate(("a",), pts((1.0, (5.0,))), partial=True)


def test_future_stamp_sets_start_time() -> None:
    assert validate(stamp=12.5, now=10.0).start_time == 12.5


NAN, INF = math.nan, math.inf
REJECTIONS = {
    "wrong joint": (dict(names=("a", "b", "x")), ErrorCode.INVALID_JOINTS, "'x'"),
    "missing joint": (dict(names=("a", "b"), points=pts((1.0, (0, 0)))), ErrorCode.INVALID_JOINTS, "missing"),
    "duplicate joint": (dict(names=("a", "b", "b")), ErrorCode.INVALID_JOINTS, "more than once"),
    "no joint names": (dict(names=()), ErrorCode.INVALID_JOINTS, "empty joint_names"),
    "empty trajectory": (dict(points=[]), ErrorCode.INVALID_GOAL, "empty trajectory"),
    "NaN position": (dict(points=pts((1.0, (0, NAN, 0)))), ErrorCode.INVALID_GOAL, "finite"),
    "inf position": (dict(points=pts((1.0, (0, 0, INF)))), ErrorCode.INVALID_GOAL, "finite"),
    "NaN velocity": (dict(points=pts((1.0, (0, 0, 0), (0, NAN, 0)))), ErrorCode.INVALID_GOAL, "finite"),
    "NaN time": (dict(points=pts((NAN, (0, 0, 0)))), ErrorCode.INVALID_GOAL, "finite"),
    "negative time": (dict(points=pts((-0.5, (0, 0, 0)), (1.0, (0, 0, 0)))), ErrorCode.INVALID_GOAL, ">= 0"),
    "decreasing times": (dict(points=pts((1.0, (0, 0, 0)), (0.5, (0, 0, 0)))), ErrorCode.INVALID_GOAL,
                         "strictly increasing"),
    "repeated time": (dict(points=pts((1.0, (0, 0, 0)), (1.0, (0, 0, 0)))), ErrorCode.INVALID_GOAL,
                      "strictly increasing"),
    "short positions": (dict(points=pts((1.0, (0, 0)))), ErrorCode.INVALID_GOAL, "positions (2)"),
    "short velocities": (dict(points=pts((1.0, (0, 0, 0), (0, 0)))), ErrorCode.INVALID_GOAL, "velocities (2)"),
    "velocities on some points": (dict(points=pts((0.5, (0, 0, 0), (0, 0, 0)), (1.0, (0, 0, 0)))),
                                  ErrorCode.INVALID_GOAL, "point #1"),
    "effort": (dict(points=pts((1.0, (0, 0, 0), (), (), (1, 1, 1)))), ErrorCode.INVALID_GOAL, "effort"),
    "above upper limit": (dict(points=pts((1.0, (1.5, 0, 0)))), ErrorCode.INVALID_GOAL, "upper limit"),
    "below lower limit": (dict(points=pts((1.0, (0, 0, -3.5)))), ErrorCode.INVALID_GOAL, "lower limit"),
    "velocity above URDF limit": (dict(points=pts((1.0, (0, 0, 0), (0, 6.0, 0)))), ErrorCode.INVALID_GOAL,
                                  "above its limit 5"),
    "velocity above servo limit": (dict(points=pts((1.0, (0, 0, 0), (0, 4.0, 0))), max_velocity=3.0),
                                   ErrorCode.INVALID_GOAL, "above its limit 3"),
    "segment too fast": (dict(points=pts((1.0, (0, 0, 0)), (1.1, (0, 1.0, 0))), max_velocity=8.0),
                         ErrorCode.INVALID_GOAL, "average to reach point #1"),
    "first point too fast from current": (dict(points=pts((0.1, (0, 1.0, 0))), start_positions=(0, 0, 0)),
                                          ErrorCode.INVALID_GOAL, "from its current position"),
    "ends in the past": (dict(stamp=100.0, now=200.0), ErrorCode.OLD_HEADER_TIMESTAMP, "before now"),
}


@pytest.mark.parametrize("case", sorted(REJECTIONS))
def test_rejections(case: str) -> None:
    kwargs, code, text = REJECTIONS[case]
    with pytest.raises(TrajectoryRejected) as info:
        validate(**kwargs)
    assert info.value.code == code
    assert text in str(info.value)


def test_rejection_names_joint_and_point() -> None:
    with pytest.raises(TrajectoryRejected) as info:
        validate(points=pts((0.5, (0, 0, 0)), (1.0, (0, 0, 2.9)), (2.0, (0, 0, 3.1))))
    assert (info.value.joint, info.value.point) == ("c", 2)


def test_first_point_at_time_zero_far_away_is_rejected() -> None:
    # A first point at t = 0 is commanded at once: the segment to it lasts one control period, and 1 rad in
    # 10 ms is 100 rad/s.
    with pytest.raises(TrajectoryRejected) as info:
        validate(points=pts((0.0, (0, 1.0, 0)), (1.0, (0, 1.0, 0))), start_positions=(0, 0, 0),
                 control_period=0.01, max_velocity=8.06)
    assert info.value.code == ErrorCode.INVALID_GOAL
    assert (info.value.joint, info.value.point) == ("b", 0)
    text = str(info.value)
    assert "'b'" in text and "100 rad/s" in text and "limit 5 rad/s" in text, text
    assert "time_from_start of at least 0.2 s" in text, text


def test_first_point_at_time_zero_at_the_current_position_is_accepted() -> None:
    # A client that starts its trajectory where the robot is (within what one control period allows) is fine.
    traj = validate(points=pts((0.0, (0.01, 0.0, -0.01)), (1.0, (0.2, 0.3, 0.4))), start_positions=(0, 0, 0),
                    control_period=0.01)
    assert traj.duration == 1.0


def test_first_point_check_counts_from_now_for_a_past_stamp() -> None:
    # Stamped 0.5 s ago with the first point at 0.6 s: 0.1 s are left for 1 rad (10 rad/s), not 0.6 s.
    with pytest.raises(TrajectoryRejected, match=r"10 rad/s .* in 0.1 s"):
        validate(points=pts((0.6, (0, 1.0, 0)), (2.0, (0, 1.0, 0))), start_positions=(0, 0, 0),
                 stamp=99.5, now=100.0, control_period=0.01)


def test_point_already_due_is_checked_against_where_the_trajectory_is_now() -> None:
    # Stamped 1.5 s ago: the trajectory is half way from point #1 to #2 (0.5 rad), a jump from 0 in one period.
    points = pts((0.0, (0, 0, 0)), (1.0, (0, 0, 0)), (2.0, (0, 1.0, 0)))
    with pytest.raises(TrajectoryRejected, match=r"'b'.*0\.5 rad"):
        validate(points=points, start_positions=(0, 0, 0), stamp=98.5, now=100.0, control_period=0.01)
    validate(points=points, start_positions=(0, 0.5, 0), stamp=98.5, now=100.0, control_period=0.01)


def test_first_point_checked_from_the_commanded_state_too() -> None:
    from retarget.control import check_first_segment

    traj = validate(points=pts((0.5, (0, 1.0, 0))), start_positions=(0, 0.9, 0), now=10.0)
    with pytest.raises(TrajectoryRejected, match="from its commanded position"):
        check_first_segment(traj, (0, -1.8, 0), now=10.0, limits=LIMITS, control_period=0.01,
                            origin="commanded position")


def test_limit_at_bound_is_accepted() -> None:
    validate(points=pts((1.0, (1.0, -2.0, 3.0), (0, 5.0, -5.0))), start_positions=(0.5, 0, 0))


def test_a_start_within_one_control_period_of_the_stamp_is_on_time() -> None:
    from retarget.control import late_start_note

    assert late_start_note(0.0, 0.01) == "" and late_start_note(0.01, 0.01) == "" and late_start_note(-2.0, 0.01) == ""
    note = late_start_note(0.25, 0.01)
    assert note.startswith("execution began 0.250 s after the goal's stamp") and "first 0.250 s" in note
