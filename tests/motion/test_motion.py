"""Tests of retarget.motion.motion: validation, interpolation, derivatives, resampling, joint selection."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.motion import JointMismatchError, Motion, MotionFormatError, MotionLimitError


def test_arrays_are_copied_read_only_and_float() -> None:
    t = [0, 1, 2]
    q = np.array([[0], [1], [2]], dtype=np.int32)
    m = Motion(t, ["a"], q)
    assert m.positions.dtype == np.float64 and m.time.dtype == np.float64
    q[0, 0] = 99
    assert m.positions[0, 0] == 0.0
    with pytest.raises(ValueError):
        m.positions[0, 0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.time = np.zeros(3)  # type: ignore[misc]
    assert m.joint_names == ("a",) and m.duration == 2.0 and m.num_samples == 3 and m.num_joints == 1


def test_nan_names_row_and_joint() -> None:
    q = np.zeros((4, 2))
    q[2, 1] = np.nan
    with pytest.raises(MotionFormatError, match=r"row 2 .*joint 'b' is nan") as info:
        Motion([0, 1, 2, 3], ("a", "b"), q)
    assert info.value.row == "row 2" and info.value.joint == "b"
    assert isinstance(info.value, InputError)


@pytest.mark.parametrize(("times", "message"), [([0, 1, 1, 2], "row 2: duplicate time"),
                                                 ([0, 2, 1, 3], "row 2: time goes backwards"),
                                                 ([0, np.inf, 1, 2], "row 1: time is inf")])
def test_bad_times_name_the_row(times: list[float], message: str) -> None:
    with pytest.raises(MotionFormatError, match=message):
        Motion(times, ("a",), np.zeros((4, 1)))


def test_shape_and_name_errors() -> None:
    with pytest.raises(MotionFormatError, match="duplicate joint name 'a'"):
        Motion([0, 1], ("a", "a"), np.zeros((2, 2)))
    with pytest.raises(MotionFormatError, match=r"shape \(2, 3\), expected \(2, 2\)"):
        Motion([0, 1], ("a", "b"), np.zeros((2, 3)))
    with pytest.raises(MotionFormatError, match="no samples"):
        Motion([], ("a",), np.zeros((0, 1)))
    with pytest.raises(MotionFormatError, match="no joints"):
        Motion([0], (), np.zeros((1, 0)))


def test_single_sample_holds_the_pose() -> None:
    m = Motion([0.5], ("a", "b"), [[1.0, 2.0]])
    assert m.duration == 0.0
    np.testing.assert_array_equal(m.sample([0.0, 0.5, 3.0]), [[1, 2]] * 3)
    np.testing.assert_array_equal(m.velocities(), [[0.0, 0.0]])
    assert m.resample(100).num_samples == 1


def test_equality_is_by_value(motion: Motion) -> None:
    same = Motion(motion.time.copy(), motion.joint_names, motion.positions.copy())
    assert same == motion
    assert Motion(motion.time, motion.joint_names, motion.positions + 1e-12) != motion


def test_linear_sample_matches_hand_values_and_holds_ends() -> None:
    m = Motion([0.0, 1.0, 3.0], ("a", "b"), [[0.0, 1.0], [1.0, 1.0], [-1.0, 3.0]])
    np.testing.assert_allclose(m.sample(0.5), [0.5, 1.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(m.sample([2.0, -1.0, 9.0]), [[0.0, 2.0], [0.0, 1.0], [-1.0, 3.0]], atol=1e-15)
    assert m.sample(0.5).shape == (2,)


def test_cubic_interpolation_converges_to_a_smooth_curve() -> None:
    t = np.linspace(0.0, 2.0, 41)
    m = Motion(t, ("a",), np.sin(3 * t)[:, None])
    tt = np.linspace(0.2, 1.8, 97)
    err = np.abs(m.sample(tt, "cubic")[:, 0] - np.sin(3 * tt)).max()
    lin = np.abs(m.sample(tt, "linear")[:, 0] - np.sin(3 * tt)).max()
    assert err < 2e-4 and err < lin / 5


def test_pchip_does_not_overshoot_a_step_but_cubic_does() -> None:
    m = Motion([0.0, 0.5, 0.7, 2.2, 2.4, 4.0], ("a",), [[0.0], [0.0], [0.5], [0.5], [0.0], [0.0]])
    tt = np.linspace(0.0, 4.0, 801)
    pchip = m.sample(tt, "pchip")[:, 0]
    assert pchip.min() >= -1e-15 and pchip.max() <= 0.5 + 1e-15
    hold = (tt > 0.75) & (tt < 2.15)
    np.testing.assert_allclose(pchip[hold], 0.5, atol=1e-15)
    assert m.sample(tt, "cubic")[:, 0].max() > 0.5 + 1e-3


def test_unknown_interpolation() -> None:
    m = Motion([0, 1, 2], ("a",), [[0], [1], [2]])
    with pytest.raises(MotionFormatError, match="unknown interpolation 'spline'"):
        m.sample(0.5, "spline")


def test_velocities_match_the_analytic_derivative() -> None:
    """Second-order differences on a non-uniform grid: error O(h^2), checked at two resolutions."""
    rng = np.random.default_rng(7)
    errors = []
    for n in (101, 201):
        t = np.sort(np.concatenate(([0.0, 1.0], rng.uniform(0, 1, n - 2))))
        m = Motion(t, ("a",), np.sin(2 * t)[:, None])
        errors.append(np.abs(m.velocities()[:, 0] - 2 * np.cos(2 * t)).max())
    assert errors[1] < 2e-2
    m = Motion(np.linspace(0, 1, 201), ("a",), np.sin(2 * np.linspace(0, 1, 201))[:, None])
    np.testing.assert_allclose(m.velocities()[:, 0], 2 * np.cos(2 * m.time), rtol=0, atol=2e-4)


def test_segment_velocities_are_slopes() -> None:
    m = Motion([0.0, 0.5, 2.0], ("a",), [[0.0], [1.0], [-2.0]])
    np.testing.assert_allclose(m.segment_velocities()[:, 0], [2.0, -2.0], atol=1e-15)


def test_resample_uniform_grid_covers_the_motion(motion: Motion) -> None:
    r = motion.resample(1000.0)
    np.testing.assert_allclose(np.diff(r.time), 1e-3, rtol=0, atol=1e-12)
    assert r.time[0] == motion.time[0] and r.time[-1] >= motion.time[-1] - 1e-12
    np.testing.assert_allclose(r.sample(motion.time), motion.positions, atol=1e-12)
    odd = Motion([0.0, 0.0105], ("a",), [[0.0], [1.0]]).resample(200)
    assert odd.num_samples == 4 and odd.positions[-1, 0] == 1.0
    with pytest.raises(MotionFormatError, match="positive"):
        motion.resample(0.0)


def test_select_and_reorder(motion: Motion) -> None:
    sub = motion.select(["head_yaw", "shoulder_pitch"])
    np.testing.assert_array_equal(sub.positions, motion.positions[:, [2, 0]])
    back = sub.reorder(["shoulder_pitch", "head_yaw"])
    assert back.joint_names == ("shoulder_pitch", "head_yaw")
    with pytest.raises(JointMismatchError, match=r"unknown joints \['wrist'\]") as info:
        motion.select(["elbow", "wrist"])
    assert info.value.unknown == ("wrist",)
    with pytest.raises(JointMismatchError, match=r"missing joints \['wrist'\], unknown joints \['elbow'\]") as info:
        motion.reorder(["shoulder_pitch", "head_yaw", "wrist"])
    assert info.value.missing == ("wrist",) and info.value.unknown == ("elbow",)


def test_with_joints_holds_the_joints_a_motion_leaves_out(motion: Motion) -> None:
    robot = ["knee", "head_yaw", "shoulder_pitch", "elbow"]
    assert motion.held(robot) == ["knee"]
    full = motion.with_joints(robot, hold=0.25)
    assert full.joint_names == tuple(robot)
    np.testing.assert_array_equal(full.positions[:, 1:], motion.positions[:, [2, 0, 1]])
    np.testing.assert_array_equal(full.positions[:, 0], 0.25)
    np.testing.assert_array_equal(full.time, motion.time)
    assert motion.with_joints(["shoulder_pitch", "elbow", "head_yaw"]) == motion.reorder(
        ["shoulder_pitch", "elbow", "head_yaw"])
    with pytest.raises(JointMismatchError, match=r"missing joints \['knee'\], unknown joints \['elbow'\]") as info:
        motion.with_joints(["knee", "head_yaw", "shoulder_pitch"])
    assert info.value.unknown == ("elbow",)


def test_shifted_and_joint_index(motion: Motion) -> None:
    s = motion.shifted(-motion.time[0])
    assert s.time[0] == 0.0 and s.joint_index("elbow") == 1
    with pytest.raises(JointMismatchError, match="unknown joint 'knee'"):
        s.joint_index("knee")


def test_check_and_assert_limits() -> None:
    t = np.arange(6) * 0.1
    q = np.array([[0.0, 0.0], [0.5, 0.0], [1.2, 0.0], [1.1, 0.0], [0.2, -0.1], [0.0, 0.0]])
    m = Motion(t, ("a", "b"), q)
    limits = {"a": (-1.0, 1.0, 8.0), "b": (-0.05, 0.05, None), "c": (0, 0, 0)}
    found = m.check_limits(limits)
    kinds = [(v.joint, v.kind, v.row) for v in found]
    assert kinds == [("a", "upper", 2), ("a", "velocity", 4), ("b", "lower", 4)]
    upper = found[0]
    assert upper.value == 1.2 and upper.limit == 1.0 and upper.start_time == pytest.approx(0.2)
    assert upper.end_time == pytest.approx(0.3)
    assert found[1].value == pytest.approx(9.0) and found[1].time == pytest.approx(0.4)
    with pytest.raises(MotionLimitError, match=r"joint 'a' at row 2 \(t = 0.2 s\): angle 1.2 rad .* upper limit 1 rad"
                       ) as info:
        m.assert_within_limits(limits)
    assert len(info.value.violations) == 3
    m.assert_within_limits({"a": (-2, 2, 10), "b": (-1, 1, 10)})


def test_a_motion_of_another_robot_lacks_some_motors_and_moves_other_joints() -> None:
    """foreign_to: missing motors and unknown joints together mark another robot's motion; either alone does not
    (a motor without a column holds its zero pose; extra columns of unmodelled joints are carried along)."""
    motion = Motion(np.array([0.0, 1.0]), ("a", "x"), np.zeros((2, 2)))
    assert motion.foreign_to(["a", "b"]) == (["b"], ["x"])
    assert motion.foreign_to(["a", "x", "b"]) == ([], [])  # only held
    assert motion.foreign_to(["a"]) == ([], [])  # only an extra column
    assert motion.held(["a", "b"]) == ["b"]
