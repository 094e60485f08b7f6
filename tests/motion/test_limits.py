"""Tests of retarget.motion.limits: limit normalization and violation runs."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from retarget.motion.limits import JointLimit, as_joint_limits, find_limit_violations


def test_as_joint_limits_accepts_tuples_objects_and_none() -> None:
    urdf_like = SimpleNamespace(lower=-1.0, upper=2.0, velocity=None)
    out = as_joint_limits({"a": (-1, 1), "b": urdf_like, "c": JointLimit(0, 1, 3), "d": (None, 0.5, 4.0)})
    assert out["a"] == JointLimit(-1.0, 1.0, math.inf)
    assert out["b"] == JointLimit(-1.0, 2.0, math.inf)
    assert out["c"] == JointLimit(0, 1, 3)
    assert out["d"] == JointLimit(-math.inf, 0.5, 4.0)


def test_two_separate_runs_give_two_violations_at_their_worst_rows() -> None:
    t = np.arange(8) * 0.5
    q = np.array([0.0, 1.5, 1.7, 0.0, 0.0, 1.2, 0.0, 0.0])[:, None]
    found = find_limit_violations(t, ("a",), q, {"a": (-1.0, 1.0, None)})
    assert [(v.row, v.value, v.start_time, v.end_time) for v in found] == [(2, 1.7, 0.5, 1.0), (5, 1.2, 2.5, 2.5)]
    assert "joint 'a' at row 2 (t = 1 s)" in found[0].describe()
    assert "line 9" in found[0].describe(lambda i: f"line {i + 7}")


def test_tolerances_and_unlisted_joints() -> None:
    t = np.array([0.0, 1.0])
    q = np.array([[1.0 + 5e-10, 9.0], [1.0, 9.0]])
    assert find_limit_violations(t, ("a", "free"), q, {"a": (-1.0, 1.0, 1e-10 + 5e-10)}) == []
    assert len(find_limit_violations(t, ("a",), q[:, :1], {"a": (-1.0, 1.0, None)}, position_tolerance=0.0)) == 1


def test_velocity_violation_reports_speed_in_rad_per_s_and_degrees() -> None:
    t = np.array([0.0, 0.1, 0.2])
    q = np.array([[0.0], [1.0], [1.0]])
    (v,) = find_limit_violations(t, ("a",), q, {"a": (-9, 9, 8.06)})
    assert v.kind == "velocity" and v.row == 1 and v.value == 10.0 and v.limit == 8.06
    assert "speed 10 rad/s (573 deg/s) > limit 8.06 rad/s" in v.describe()
