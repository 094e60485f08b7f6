"""Tests of retarget.fit.rig: rig geometry extracted from robot files."""
from __future__ import annotations

import math

import numpy as np
import pytest

from retarget.fit.errors import RigError
from retarget.fit.rig import load_rig


def test_single_rod_geometry() -> None:
    rig = load_rig("single_rod")
    assert rig.motor == "base_pitch"
    np.testing.assert_allclose(rig.axis, [0.0, 1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(rig.rod_direction, [0.0, 0.0, 1.0], atol=1e-12)
    assert rig.length == pytest.approx(0.70, rel=1e-12)
    assert rig.area == pytest.approx(math.pi * 0.005**2 / 4)
    assert rig.second_moment == pytest.approx(math.pi * 0.005**4 / 64)
    assert rig.tip_link == "tip_mass" and rig.tip_mass == pytest.approx(0.1)
    assert rig.material_name == "spring_steel"
    # The lateral direction completes a right-handed (axis, lateral) pair: +θ about y moves the tip to +x.
    np.testing.assert_allclose(rig.lateral_direction, [1.0, 0.0, 0.0], atol=1e-12)


def test_robot_with_two_parts_is_rejected() -> None:
    with pytest.raises(RigError, match="one flexible part|one motor"):
        load_rig("two_rods")


def test_with_material_replaces_values() -> None:
    rig = load_rig("single_rod").with_material(youngs_modulus=1.5e11, rayleigh_alpha=0.3)
    assert rig.material.youngs_modulus == 1.5e11 and rig.material.rayleigh_alpha == 0.3


def test_servo_and_joint_limits_come_from_the_robot_files() -> None:
    rig = load_rig("single_rod")
    assert rig.motor_limits == pytest.approx((-math.pi / 2, math.pi / 2))
    assert rig.max_velocity == pytest.approx(8.06)
    assert rig.stall_torque == pytest.approx(3.0)


def test_a_rig_outside_the_repository_with_a_centred_tip_mass(own_rig) -> None:
    """The project's xacro macros included from a rig folder of one's own; the tip mass centred on the rod end."""
    rig = load_rig(own_rig)
    assert rig.name == "my_rig" and rig.length == pytest.approx(0.45)
    rod_end = rig.rod_base + rig.length * rig.rod_direction
    np.testing.assert_allclose(rig.tip_com, rod_end, atol=1e-12)  # centred: no offset along or across the rod
    np.testing.assert_allclose(rig.rod_base, rig.pivot, atol=1e-12)  # clamped on the servo axis
    radius = (3 * 0.1 / (4 * math.pi * 8500.0)) ** (1 / 3)
    assert rig.tip_mass == pytest.approx(0.1) and rig.tip_inertia_axis == pytest.approx(0.4 * 0.1 * radius**2)
    assert rig.material.youngs_modulus == 2.0e11 and rig.material.rayleigh_alpha == 0.0
