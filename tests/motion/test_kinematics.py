"""Tests of retarget.motion.kinematics: forward kinematics by hand and Jacobians against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.motion import MotionFormatError
from retarget.motion.kinematics import RigKinematics

ARM = """<robot name="arm">
  <link name="base"/><link name="upper"/><link name="lower"/><link name="tip"/>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="upper"/>
    <origin xyz="0 0 1"/><axis xyz="0 1 0"/><limit lower="-1" upper="2" velocity="3" effort="1"/></joint>
  <joint name="elbow" type="revolute"><parent link="upper"/><child link="lower"/>
    <origin xyz="0 0 -0.5"/><axis xyz="0 1 0"/><limit lower="0" upper="2.5" velocity="4" effort="1"/></joint>
  <joint name="hand" type="fixed"><parent link="lower"/><child link="tip"/><origin xyz="0 0 -0.4"/></joint>
</robot>"""


def test_two_link_arm_by_hand() -> None:
    kin = RigKinematics(ARM)
    assert kin.joint_names == ("shoulder", "elbow") and kin.root == "base"
    assert kin.limits["elbow"].upper == 2.5 and kin.limits["shoulder"].velocity == 3.0
    f = kin.forward(np.array([np.pi / 2, 0.0]))
    # rotating +90 deg about y maps the hanging arm (-z) to -x
    np.testing.assert_allclose(f["tip"][:3, 3], [-0.9, 0.0, 1.0], atol=1e-12)
    f = kin.forward(np.array([0.0, np.pi / 2]))
    np.testing.assert_allclose(f["tip"][:3, 3], [-0.4, 0.0, 0.5], atol=1e-12)


def test_jacobian_matches_finite_differences() -> None:
    kin = RigKinematics(ARM)
    rng = np.random.default_rng(5)
    for _ in range(5):
        q = rng.uniform(-1, 1, 2)
        jac = kin.point_jacobian(kin.forward(q), "tip")
        num = np.zeros_like(jac)
        for i in range(2):
            dq = np.zeros(2)
            dq[i] = 1e-6
            num[:, i] = (kin.forward(q + dq)["tip"][:3, 3] - kin.forward(q - dq)["tip"][:3, 3]) / 2e-6
        np.testing.assert_allclose(jac, num, rtol=0, atol=1e-9)


def test_unknown_link() -> None:
    with pytest.raises(MotionFormatError, match="robot has no link 'foot'"):
        RigKinematics(ARM).ancestors("foot")
