"""A description made for a ROS workspace, loaded without one: ``packages:`` in the robot's YAML names each ROS
package's folder, for xacro's ``$(find pkg)`` and for ``package://pkg/...`` (the ``urdf:`` entry, meshes). On a
small package written here and on ROBOTIS's OP3 description (../shared/data, skipped without it)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from retarget.model.library import urdf_xml
from retarget.model.loader import load_robot, packages_of
from retarget.model.robot import ModelError

ARM = Path(__file__).resolve().parent / "fixtures" / "rigid_arm.urdf"

#: The top-level xacro includes the arm's links through $(find my_arm_description), as a ROS package's would.
TOP = """<?xml version="1.0"?>
<robot name="my_arm" xmlns:xacro="http://ros.org/wiki/xacro">
  <xacro:include filename="$(find my_arm_description)/urdf/arm.xacro"/>
  <xacro:arm/>
</robot>
"""


def _package(tmp_path: Path) -> Path:
    """``my_arm_description/urdf/{my_arm.urdf.xacro, arm.xacro}``: the rigid arm fixture as a xacro macro."""
    folder = tmp_path / "src" / "my_arm_description"
    (folder / "urdf").mkdir(parents=True)
    body = ARM.read_text().split("<robot name=\"rigid_arm\">", 1)[1].rsplit("</robot>", 1)[0]
    (folder / "urdf" / "arm.xacro").write_text(
        '<?xml version="1.0"?>\n<robot xmlns:xacro="http://ros.org/wiki/xacro">\n'
        f'<xacro:macro name="arm">{body}</xacro:macro>\n</robot>\n')
    (folder / "urdf" / "my_arm.urdf.xacro").write_text(TOP)
    return folder


def _yaml(tmp_path: Path, urdf: str, packages: str) -> Path:
    config = tmp_path / "config"
    config.mkdir(parents=True, exist_ok=True)
    path = config / "my_arm.yaml"
    path.write_text(f"retarget:\n  urdf: {urdf}\n{packages}  motors: [shoulder, elbow]\n"
                    "  tracked_bodies: [{link: fore}]\n")
    return path


def test_a_workspace_description_loads_through_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path)
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    robot = _yaml(tmp_path, "package://my_arm_description/urdf/my_arm.urdf.xacro",
                  "  packages: {my_arm_description: ../src/my_arm_description}\n")
    model = load_robot(robot)
    reference = load_robot(_yaml(tmp_path / "ref", str(ARM), ""))
    assert list(model.motors) == list(reference.motors) == ["shoulder", "elbow"]
    assert [b.mass for b in model.links] == [b.mass for b in reference.links]
    assert np.allclose(np.array([b.inertia for b in model.links]), np.array([b.inertia for b in reference.links]))
    assert "AMENT_PREFIX_PATH" not in os.environ  # the index lasted only while xacro ran
    assert '<joint name="elbow" type="revolute">' in urdf_xml(robot)  # the nodes' robot_description the same way


def test_a_find_without_packages_names_the_package_and_the_remedy(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _package(tmp_path)
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    with pytest.raises(ModelError, match=r"\(my_arm_description\).*packages: \{my_arm_description: path/to/"):
        load_robot(_yaml(tmp_path, str(folder / "urdf" / "my_arm.urdf.xacro"), ""))


@pytest.mark.parametrize(("packages", "message"), [
    ("[my_arm_description]", "expected a mapping of ROS package name to its folder, got list"),
    ("{my_arm_description: ../nowhere}", r"packages: my_arm_description: folder .*nowhere does not exist"),
    ("{'my arm': ../src}", "'my arm' is not a ROS package name"),
])
def test_bad_packages_are_refused_naming_the_entry(tmp_path: Path, packages: str, message: str) -> None:
    (tmp_path / "src").mkdir()
    robot = _yaml(tmp_path, str(ARM), f"  packages: {packages}\n")
    with pytest.raises(ModelError, match=message):
        load_robot(robot)


def test_packages_are_relative_to_the_yaml(tmp_path: Path) -> None:
    folder = _package(tmp_path)
    robot = _yaml(tmp_path, str(ARM), "  packages: {my_arm_description: ../src/my_arm_description}\n")
    assert packages_of({"packages": {"my_arm_description": "../src/my_arm_description"}}, robot) == {
        "my_arm_description": folder}


def test_the_robotis_op3_loads_from_its_makers_xacros(shared_data: Path, tmp_path: Path) -> None:
    """ROBOTIS's OP3 (op3_description, eleven xacros that include each other through $(find op3_description)):
    the torso on a stand, its 20 joints on XM430-W350s."""
    op3 = shared_data / "urdf" / "robotis_op3"
    joints = ["l_hip_yaw", "l_hip_roll", "l_hip_pitch", "l_knee", "l_ank_pitch", "l_ank_roll", "r_hip_yaw",
              "r_hip_roll", "r_hip_pitch", "r_knee", "r_ank_pitch", "r_ank_roll", "l_sho_pitch", "l_sho_roll", "l_el",
              "r_sho_pitch", "r_sho_roll", "r_el", "head_pan", "head_tilt"]
    robot = tmp_path / "op3.yaml"
    robot.write_text(f"retarget:\n  urdf: package://op3_description/urdf/robotis_op3.urdf.xacro\n"
                     f"  packages: {{op3_description: {op3}}}\n  root_link: body_link\n"
                     f"  motors: [{', '.join(joints)}]\n  servo: {{model: XM430-W350}}\n"
                     "  tracked_bodies: [{link: r_el_link}]\n")
    model = load_robot(robot)
    assert list(model.motors) == joints and {s.model for s in model.servos} == {"XM430-W350"}
    # Every link with mass but the torso (the root, held by the stand) is a body or merged into one: their mass.
    import yourdfpy

    from retarget.model.loader import read_robot_yaml, robot_urdf

    _, xml = robot_urdf(read_robot_yaml(robot), robot)
    import io

    urdf = yourdfpy.URDF.load(io.StringIO(xml), load_meshes=False, build_scene_graph=False)
    total = sum(link.inertial.mass for link in urdf.robot.links if link.inertial is not None
                and link.name != "body_link")
    assert total > 1.5  # the legs, arms and head of a 3.1 kg robot
    assert sum(b.mass for b in model.links) == pytest.approx(total, rel=1e-12)


def test_a_rig_with_packages_loads_at_another_resolution(tmp_path: Path) -> None:
    """The material fit reloads a rig at another mesh resolution: ``packages`` relative to the rig's file resolve,
    the mesh has the resolution asked for, and the fitted materials beside the rig (``materials.yaml``) apply."""
    from retarget.fit.rig import load_rig
    from retarget.fit.simulators import _load_with_resolution
    from retarget.model.library import resolve_robot, resolve_urdf, robot_config

    source = resolve_robot("single_rod")
    package = tmp_path / "src" / "rod_description" / "urdf"
    package.mkdir(parents=True)
    for f in resolve_urdf("single_rod").parent.glob("*.xacro"):  # with the common macros it includes
        (package / f.name).write_text(f.read_text())
    section = dict(robot_config(source)["retarget"])
    section["urdf"] = "package://rod_description/urdf/single_rod.urdf.xacro"
    section["packages"] = {"rod_description": "../src/rod_description"}
    import yaml

    (tmp_path / "config").mkdir()
    rig_file = tmp_path / "config" / "single_rod.yaml"
    rig_file.write_text(yaml.safe_dump({"retarget": section}))
    (tmp_path / "config" / "materials.yaml").write_text("spring_steel: {density: 9000.0}\n")
    model = _load_with_resolution(load_rig(rig_file), (6, 6))
    assert [p.name for p in model.flexible_parts] == ["rod"] and list(model.motors) == ["base_pitch"]
    part = model.flexible_parts[0]
    assert part.material.density == 9000.0
    assert part.generator is not None and part.generator.resolution == {"axial": 6, "around": 6}
