"""The tiny robot on disk — a 20 cm spring-steel rod on one motor with a 50 g tip mass (URDF, params YAML and a
0.2 s ramp motion) — shared by the optimizer's command-line tests and the planner node's process test."""
from __future__ import annotations

from pathlib import Path

import numpy as np

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


def write_tiny_robot(folder: Path) -> Path:
    """``tiny_rod.urdf``, ``tiny_rod.yaml`` and a 0.2 s ramp ``ramp.csv`` in ``folder``."""
    from retarget.motion import Motion, save_motion

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny_rod.urdf").write_text(URDF)
    (folder / "tiny_rod.yaml").write_text(YAML)
    t = np.linspace(0.0, 0.2, 41)
    save_motion(folder / "ramp.csv", Motion(t, ("m",), (0.2 * np.clip(t / 0.1, 0, 1))[:, None]))
    return folder


def write_swinging_rod(folder: Path) -> Path:
    """The tiny robot with a rod that rings: 0.5 m × 4 mm with a 100 g tip (its servo–rod mode at 2.4 Hz, damping
    ratio 0.12, where the 20 cm rod's is overdamped), a 6 × 6 mesh, and ``step.csv``: 0.3 rad in 0.25 s from 0.1 s,
    held to 1.6 s (the ring-out), written as ``tiny_rod.urdf``, ``tiny_rod.yaml`` and ``step.csv`` in ``folder``."""
    from retarget.motion import Motion, save_motion

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny_rod.urdf").write_text(URDF.replace('<origin xyz="0 0 0.2"/>', '<origin xyz="0 0 0.5"/>')
                                          .replace('<mass value="0.05"/>', '<mass value="0.1"/>'))
    (folder / "tiny_rod.yaml").write_text(YAML.replace("length: 0.2, diameter: 0.004, resolution: {axial: 4, "
                                                       "around: 6}",
                                                       "length: 0.5, diameter: 0.004, resolution: {axial: 6, "
                                                       "around: 6}"))
    t = np.linspace(0.0, 1.6, 321)
    save_motion(folder / "step.csv", Motion(t, ("m",), (0.3 * np.clip((t - 0.1) / 0.25, 0, 1))[:, None]))
    return folder


def reduce_tiny_robot(folder: Path, out: Path) -> Path:
    """A ``retarget reduce`` artifact of the tiny robot (2 modes, trained on the first 0.04 s of the ramp)."""
    from retarget.cli import main

    code = main(["reduce", str(folder / "tiny_rod.yaml"), "--train-motion", str(folder / "ramp.csv"), "--out",
                 str(out), "--dt", "0.002", "--modes", "2", "--duration", "0.04", "--replay-tolerance", "0"])
    assert code == 0 and out.is_file()
    return out
