"""`retarget plan` and `retarget check gradient` end to end on a tiny robot written to disk (URDF + params YAML):
a 20 cm rod on one motor with a tip mass, coarse mesh, a short motion (kept small: the reference reduced stepper
is slow)."""
from __future__ import annotations

import json

import numpy as np
import pytest

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


@pytest.fixture()
def tiny_robot(tmp_path, monkeypatch):
    from retarget.motion import Motion, save_motion

    (tmp_path / "tiny_rod.urdf").write_text(URDF)
    (tmp_path / "tiny_rod.yaml").write_text(YAML)
    t = np.linspace(0.0, 0.2, 41)
    save_motion(tmp_path / "ramp.csv", Motion(t, ("m",), (0.2 * np.clip(t / 0.1, 0, 1))[:, None]))
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _run(argv):
    from retarget.cli import main

    return main(argv)


@pytest.mark.slow
def test_plan_cli_prints_the_contract_keys_and_writes_files(tiny_robot, capsys):
    out_csv = tiny_robot / "optimized.csv"
    code = _run(["plan", str(tiny_robot / "tiny_rod.yaml"), "--motion", str(tiny_robot / "ramp.csv"), "--json",
                 "--max-iterations", "1", "--dt", "0.005", "--modes", "2", "--mesh-axial", "4", "--dt-train", "0.002",
                 "--knot-spacing", "0.04", "--out", str(out_csv), "--report", str(tiny_robot / "report")])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("objective_initial", "objective_final", "iterations", "wall_s"):
        assert key in report
    for variant in ("naive", "optimized"):
        assert {"peak_deviation_m", "rms_deviation_m"} <= set(report[variant])
    # 0.1 s of ring-out is too short to identify a mode: no shaped baselines, and the report says why.
    assert "zvd" not in report and any("ZV/ZVD" in w for w in report["warnings"])
    assert out_csv.is_file() and out_csv.with_suffix(".yaml").is_file()
    for name in ("tracked_bodies.png", "deviation.png", "motors.png", "trajectories.npz"):
        assert (tiny_robot / "report" / name).is_file()
    # The trained model went to the cache and is reused.
    assert len(list((tiny_robot / "cache" / "reduced").glob("*.pkl"))) == 1
