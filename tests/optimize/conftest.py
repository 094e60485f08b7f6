"""Tiny systems for the adjoint and planner tests: a motor-driven double pendulum (rigid only) and a short rod
on a motor with a tip mass, reduced from a short full simulation (both fast enough for unit tests); the same rod
as a robot on disk (URDF + params YAML + a ramp motion, ``tiny_robot``) for the command-line tests."""
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


URDF = """<?xml version="1.0"?>
<robot name="tiny_rod">
  <link name="world"/>
  <link name="horn">
    <inertial><origin xyz="0 0 -0.005"/><mass value="0.02"/>
      <inertia ixx="3e-7" ixy="0" ixz="0" iyy="3e-7" iyz="0" izz="3e-7"/></inertial>
  </link>
  <joint name="m" type="revolute">
    <parent link="world"/><child link="horn"/><origin xyz="0 0 0"/><axis xyz="0 1 0"/>
    <limit lower="-1.0" upper="1.0" effort="3" velocity="8"/>
  </joint>
  <link name="rod"/>
  <joint name="horn_to_rod" type="fixed"><parent link="horn"/><child link="rod"/><origin xyz="0 0 0"/></joint>
  <link name="tip">
    <inertial><origin xyz="0 0 0"/><mass value="0.05"/>
      <inertia ixx="2e-6" ixy="0" ixz="0" iyy="2e-6" iyz="0" izz="2e-6"/></inertial>
  </link>
  <joint name="rod_to_tip" type="fixed"><parent link="rod"/><child link="tip"/><origin xyz="0 0 0.2"/></joint>
</robot>
"""

YAML = """retarget:
  urdf: tiny_rod.urdf
  root_link: world
  gravity: [0.0, 0.0, -9.81]
  motors: [m]
  tracked_bodies:
    - {link: tip, position_weight: 1.0}
  flexible_parts:
    - name: rod
      link: rod
      material: spring_steel
      mesh: {generator: rod, length: 0.2, diameter: 0.004, resolution: {axial: 4, around: 6}}
      interfaces:
        - {link: horn, region: {end: start}}
        - {link: tip, region: {end: end}}
"""


def _write_tiny_robot(folder):
    """``tiny_rod.urdf``, ``tiny_rod.yaml`` and a 0.2 s ramp ``ramp.csv`` in ``folder``."""
    from retarget.motion import Motion, save_motion

    (folder / "tiny_rod.urdf").write_text(URDF)
    (folder / "tiny_rod.yaml").write_text(YAML)
    t = np.linspace(0.0, 0.2, 41)
    save_motion(folder / "ramp.csv", Motion(t, ("m",), (0.2 * np.clip(t / 0.1, 0, 1))[:, None]))
    return folder


@pytest.fixture()
def tiny_robot(tmp_path, monkeypatch):
    """The tiny robot on disk, with an empty private cache and model folder."""
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    return _write_tiny_robot(tmp_path)


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory):
    """(folder, artifact): the tiny robot on disk and a ``retarget reduce`` artifact of it (2 modes, trained on
    the first 0.04 s of the ramp) in ``folder/models/tiny_rod-ramp.npz``."""
    from retarget.cli import main

    folder = _write_tiny_robot(tmp_path_factory.mktemp("tiny_artifact"))
    out = folder / "models" / "tiny_rod-ramp.npz"
    code = main(["reduce", str(folder / "tiny_rod.yaml"), "--train-motion", str(folder / "ramp.csv"), "--out",
                 str(out), "--dt", "0.002", "--modes", "2", "--duration", "0.04"])
    assert code == 0 and out.is_file()
    return folder, out
