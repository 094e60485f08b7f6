"""Tiny systems for the adjoint, optimizer and planning tests (tests/optimize, tests/planning; a plugin of the
root conftest.py, so each session fixture is built once for both): a motor-driven double pendulum (rigid only) and
a short rod on a motor with a tip mass, reduced from a short full simulation (both fast enough for unit tests); the
same rod as a robot on disk (URDF + params YAML + a ramp motion, ``tiny_robot``) for the command-line tests."""
from __future__ import annotations

import numpy as np
import pytest
from tiny_robot import reduce_tiny_robot, write_tiny_robot

from retarget.model.robot import RobotBuilder, RobotModel


def double_pendulum() -> RobotModel:
    """Upper link on a motor (hinge about y), lower link on a passive hinge, hanging down at the reference."""
    from retarget.sim.scenarios import box_inertia

    b = RobotBuilder("double_pendulum", gravity=(0.0, 0.0, -9.81))
    b.add_link("upper", 0.2, (0.0, 0.0, -0.1), box_inertia(0.2, (0.02, 0.02, 0.2)))
    b.add_link("lower", 0.1, (0.0, 0.0, -0.3), box_inertia(0.1, (0.02, 0.02, 0.2)))
    b.add_joint("m", "hinge", None, "upper", (0.0, 0.0, 0.0), (0.0, 1.0, 0.0), motor=True, lower=-1.0, upper=1.0)
    b.add_joint("elbow", "hinge", "upper", "lower", (0.0, 0.0, -0.2), (0.0, 1.0, 0.0))
    return b.build()


def rod_on_motor(length: float = 0.2, diameter: float = 0.004) -> RobotModel:
    """A vertical spring-steel rod clamped on a motor horn (hinge about y) with a 50 g tip mass."""
    from retarget.sim.scenarios import build_rod_on_motor

    return build_rod_on_motor(length, diameter)


@pytest.fixture(scope="session")
def rod_systems():
    """(absolute System, ReducedSystem with 3 deformation modes) of :func:`rod_on_motor`."""
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    system = build_system(rod_on_motor())
    motors = FunctionMotors(lambda t: [0.3 * np.sin(10 * t) ** 2], lambda t: [3.0 * np.sin(20 * t)])
    result = simulate(system, motors, 0.08, 2e-3)
    rs, _, _ = build_from_result(system, result, n_modes=3)
    return system, rs


@pytest.fixture()
def tiny_robot(tmp_path, monkeypatch):
    """The tiny robot on disk, with an empty private cache and model folder."""
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    return write_tiny_robot(tmp_path)


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory):
    """(folder, artifact): the tiny robot on disk and a ``retarget reduce`` artifact of it (2 modes, trained on
    the first 0.04 s of the ramp) in ``folder/models/tiny_rod-ramp.npz``."""
    folder = write_tiny_robot(tmp_path_factory.mktemp("tiny_artifact"))
    return folder, reduce_tiny_robot(folder, folder / "models" / "tiny_rod-ramp.npz")


@pytest.fixture(scope="session")
def servo_rod_systems():
    """:func:`rod_systems` with the motor a modelled servo (XM430-W210 with every term of its law: integral,
    derivative, feedforward, friction), the reduced model trained with the servo in the loop."""
    from retarget.model.servo import SERVO_MODELS
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    servo = SERVO_MODELS["XM430-W210"].with_values(ki=40.0, kd=0.05, kff1=0.02, coulomb_friction=0.03,
                                                    viscous_friction=0.01)
    system = build_system(rod_on_motor().with_servos([servo]))
    motors = FunctionMotors(lambda t: [0.3 * np.sin(10 * t) ** 2], lambda t: [3.0 * np.sin(20 * t)])
    result = simulate(system, motors, 0.08, 2e-3)
    rs, _, _ = build_from_result(system, result, n_modes=3)
    return system, rs
