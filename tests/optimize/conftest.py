"""Tiny systems for the adjoint and planner tests: a motor-driven double pendulum (rigid only) and a short rod
on a motor with a tip mass, reduced from a short full simulation (both fast enough for unit tests)."""
from __future__ import annotations

import numpy as np
import pytest

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
    from retarget.fem.material import MATERIALS
    from retarget.fem.mesh import rod_mesh
    from retarget.sim.scenarios import box_inertia, sphere_inertia

    mesh = rod_mesh(length, diameter, 4, 6)
    b = RobotBuilder("rod_on_motor", gravity=(0.0, 0.0, -9.81))
    b.add_link("horn", 0.02, (0.0, 0.0, -0.005), box_inertia(0.02, (0.01, 0.01, 0.01)))
    b.add_joint("m", "hinge", None, "horn", (0.0, 0.0, -0.005), (0.0, 1.0, 0.0), motor=True, lower=-1.0, upper=1.0)
    b.add_link("tip", 0.05, (0.0, 0.0, length), sphere_inertia(0.05, 0.01))
    b.add_flexible_part("rod", mesh, MATERIALS["spring_steel"],
                        [("horn", mesh.nodes_on_plane(2, 0.0)), ("tip", mesh.nodes_on_plane(2, length))])
    b.track("tip")
    return b.build()


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
