"""The servos a robot's description declares, per joint of its bus (retarget.dynamixel.robot_servos), and the
emulated bus built from a robot's files (retarget.dynamixel.emulator.robot_bus)."""
from __future__ import annotations

import pytest

from retarget.dynamixel.control_table import load_control_table
from retarget.dynamixel.emulator import robot_bus
from retarget.dynamixel.robot_servos import servos_for_joints
from retarget.errors import InputError
from retarget.model.servo import SERVO_MODELS


def test_each_joint_gets_its_motors_servo_and_other_joints_none() -> None:
    servos = servos_for_joints("fit_rig", ["base_pitch", "not_a_motor"])
    assert servos[1] is None
    assert servos[0].model == "XM540-W270" and servos[0].stall_torque == 10.6 and servos[0].max_velocity == 3.14
    assert servos[0].kp == pytest.approx(SERVO_MODELS["XM540-W270"].kp)


def test_the_emulated_bus_takes_the_robots_servos_in_id_order() -> None:
    bus = robot_bus("rapper", [4, 3, 2, 1], load_control_table())
    assert bus.joints == ("elbow", "shoulder_roll", "shoulder_pitch", "shoulder_yaw")
    assert bus.offsets == (0.0,) * 4 and bus.directions == (1.0,) * 4
    assert all(s.model == "XM430-W210" and s.max_velocity == 8.06 for s in bus.servos)
    with pytest.raises(InputError, match="not the robot's dynamixel_ids"):
        robot_bus("rapper", [1, 2], load_control_table())
