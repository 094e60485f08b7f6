"""A robot config's ``servo:`` section: the library's models at factory settings, and a servo of the user's own."""
from __future__ import annotations

import math

import pytest

from retarget.model.servo import SERVO_MODELS, ServoError, servos_from_config


def test_the_xm430_w350_is_a_library_model_at_its_factory_gain():
    """OpenManipulator-X and ROBOTIS OP3 servos: P 800 on 4.1 N m stall (12 V), 46 rev/min."""
    (servo,) = servos_from_config({"model": "XM430-W350"}, ["joint1"])
    assert servo == SERVO_MODELS["XM430-W350"]
    assert servo.kp == pytest.approx(800 / 128 * 4096 / (2 * math.pi) / 885 * 4.1)  # 18.9 N m/rad
    assert servo.max_velocity == pytest.approx(46 * 2 * math.pi / 60) and servo.stall_torque == 4.1
    assert servo.saturation_error == pytest.approx(SERVO_MODELS["XM430-W210"].saturation_error)


def test_a_servo_not_in_the_library_names_the_keys_it_needs():
    with pytest.raises(ServoError, match=r"servo: servo model 'XL430-W250' is not in the library \(known: "
                                         r"XM430-W210, XM430-W350, XM540-W270, ideal\); a servo of your own needs "
                                         r"max_velocity, rotor_inertia, kp \(or p_gain\)"):
        servos_from_config({"model": "XL430-W250", "stall_torque": 1.5}, ["m"])
    own = {"model": "XL430-W250", "stall_torque": 1.5, "max_velocity": 6.2, "rotor_inertia": 1e-3, "p_gain": 640}
    (servo,) = servos_from_config(own, ["m"])
    assert (servo.model, servo.stall_torque, servo.rotor_inertia) == ("XL430-W250", 1.5, 1e-3)
    assert servo.kp == pytest.approx(640 / 128 * 4096 / (2 * math.pi) / 885 * 1.5)
    assert (servo.ki, servo.kd, servo.coulomb_friction, servo.duty_limit) == (0.0, 0.0, 0.0, 1.0)
    # Per motor, a library servo's values stand under an override that only renames it (a robot-wide base).
    servos = servos_from_config({"model": "XM430-W350", "motors": {"m2": {"model": "my-W350", "kp": 10.0}}},
                                ["m1", "m2"])
    assert servos[1].model == "my-W350" and servos[1].stall_torque == 4.1 and servos[1].kp == 10.0
