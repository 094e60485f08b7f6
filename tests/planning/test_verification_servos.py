"""A plan for other servos than the robot's (``retarget plan --servo``) is verified with the servos it was made
for: the verification model takes them as the planning model and the full FEM do."""
from __future__ import annotations

import numpy as np
import pytest
from tiny_robot import reduce_tiny_robot, write_tiny_robot

from retarget.model.servo import IDEAL, SERVO_MODELS
from retarget.planning.verification import load_verification_model, with_planned_servos
from retarget.sim.adapters import planner_engine


@pytest.fixture(scope="module")
def verification_model(tmp_path_factory):
    folder = write_tiny_robot(tmp_path_factory.mktemp("robot"))
    npz = reduce_tiny_robot(folder, folder / "verify.npz")
    return load_verification_model(folder / "tiny_rod.yaml", npz, {})


def _holding(vm, angle: float) -> tuple[float, float]:
    """(goal − shaft, shaft) [rad] of the motor holding the rod at goal ``angle`` [rad] from upright, at rest."""
    engine = planner_engine(vm.reduced)
    goal = np.array([angle])
    shaft = float(engine.shaft_angles(np.asarray(engine.solve_static(goal).s), goal)[0])
    return angle - shaft, shaft


def test_the_verification_model_holds_the_rod_with_the_planned_servos_gain(verification_model):
    """At rest a P loop holds the gravity torque with its error, ``kp e = W sin(shaft)`` (the rod's weight moment
    ``W`` about the axis, the shaft leaning past the goal by ``e``): with a servo of a third of the gain in the
    verification model, once it verifies a plan made for that servo, the error is three times as large and the
    moment ``kp e / sin(shaft)`` the same."""
    vm = verification_model
    own = vm.model.servo_list[0]
    soft = own.with_values(kp=own.kp / 3.0)
    warnings: list[str] = []
    planned = with_planned_servos(vm, vm.model.with_servos([soft]), warnings)
    assert not warnings and planned.info["servos_planned_for"] is True
    assert planned.model.servo_list == (soft,)
    for angle in (0.3, 0.95):
        (e_own, shaft_own), (e_soft, shaft_soft) = _holding(vm, angle), _holding(planned, angle)
        assert abs(e_own) > 2e-3  # [rad]
        assert e_soft / e_own == pytest.approx(3.0, rel=0.03)
        assert soft.kp * e_soft / np.sin(shaft_soft) == pytest.approx(own.kp * e_own / np.sin(shaft_own), rel=1e-3)


def test_the_verification_model_is_kept_for_the_robots_own_servos(verification_model):
    vm = verification_model
    assert with_planned_servos(vm, vm.model, []) is vm


def test_an_ideal_servo_on_a_model_trained_with_the_loop_is_verified_as_trained_with_a_warning(verification_model):
    vm = verification_model
    warnings: list[str] = []
    kept = with_planned_servos(vm, vm.model.with_servos([SERVO_MODELS[IDEAL]]), warnings)
    assert kept is vm
    assert len(warnings) == 1 and "trained with modelled servos on m" in warnings[0]


def test_a_plan_for_a_servo_file_is_verified_with_its_servos(verification_model):
    """The checks after a plan (:func:`check_plan`) load the verification model with the plan model's servos."""
    from pathlib import Path
    from types import SimpleNamespace

    from retarget.planning.options import PlanOptions
    from retarget.planning.verification import _verification_model

    vm = verification_model
    soft = vm.model.servo_list[0].with_values(kp=5.0)
    result = SimpleNamespace(warnings=[])
    kind, loaded = _verification_model(result, vm.model.with_servos([soft]), PlanOptions(verify_model=vm.info["file"]),
                                       None, Path(str(vm.info["file"])).with_name("tiny_rod.yaml"), {}, 0.0)
    assert loaded is not None and loaded.model.servo_list == (soft,) and not result.warnings
