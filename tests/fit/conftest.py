"""Fixtures of the fit tests.

``own_rig``: a rig described outside the repository, as docs/fit.md ("Your own rig") tells a new user to write it: a 0.45 m
Ø5 mm spring-steel rod clamped on the axis of an XM540-W270, a compact 100 g tip centred on the rod end, the
project's xacro macros included by absolute path, an inline material with α = β = 0."""
from __future__ import annotations

from pathlib import Path

import pytest

XACRO = """<?xml version="1.0"?>
<robot name="my_rig" xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:include filename="{urdf}/common.xacro"/>
  <xacro:include filename="{urdf}/tip_mass.xacro"/>
  <xacro:base_plate/>
  <xacro:xm540 name="base_pitch" parent="base" child="horn" body="servo" xyz="0 0 0.04375" axis="y"
               lower="${{-pi / 2}}" upper="${{pi / 2}}" body_xyz="0 0.0145 -0.022"/>
  <xacro:horn_link name="horn" axis="y" mass="0.025" bracket_x="0.02" bracket_y="0.012" bracket_z="0.03"
                   bracket_xyz="0 0.009 0.012"/>
  <xacro:rod name="rod" parent="horn" length="{length}" diameter="0.005"/>
  <xacro:centred_tip_mass name="tip_mass" parent="rod" mass="{mass}" xyz="0 0 {length}"/>
</robot>
"""

YAML = """retarget:
  kind: rig
  urdf: my_rig.urdf.xacro
  root_link: world
  gravity: [0.0, 0.0, -9.81]
  motors: [base_pitch]
  tracked_bodies:
    - {{link: tip_mass, position_weight: 1.0}}
  servo: {{model: XM540-W270, max_velocity: 3.14, stall_torque: 10.6}}
  flexible_parts:
    - name: rod
      link: rod
      material: {{youngs_modulus: 2.0e11, poisson_ratio: 0.29, density: 7850, rayleigh_alpha: 0.0,
                 rayleigh_beta: 0.0}}
      mesh: {{generator: rod, length: {length}, diameter: 0.005}}
      origin: {{xyz: [0.0, 0.0, 0.0], rpy: [0.0, 0.0, 0.0]}}
      interfaces:
        - {{link: horn, region: {{end: start}}}}
        - {{link: tip_mass, region: {{end: end}}}}
"""


def write_own_rig(folder: Path, length: float = 0.45, mass: float = 0.100) -> Path:
    """``my_rig.urdf.xacro`` and ``my_rig.yaml`` in ``folder``; returns the YAML."""
    from retarget.model.library import share_dir

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my_rig.urdf.xacro").write_text(XACRO.format(urdf=share_dir() / "urdf", length=length, mass=mass))
    path = folder / "my_rig.yaml"
    path.write_text(YAML.format(length=length))
    return path


@pytest.fixture
def own_rig(tmp_path) -> Path:
    """:func:`write_own_rig` in a fresh folder: the rig's params YAML."""
    return write_own_rig(tmp_path / "my_rig")
