"""Loading a robot from its params YAML + xacro URDF (fixture: a servo turning a short rod with a tip mass)."""
from pathlib import Path

import numpy as np
import pytest

from retarget.model.loader import load_robot, parse_origin
from retarget.model.robot import ModelError

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_mini_rod_loads_with_world_geometry():
    model = load_robot(FIXTURES / "mini_rod.yaml")
    names = [link.name for link in model.links]
    assert names == ["servo", "horn", "tip_mass"]  # rod replaced by FEM, massless horn_frame merged
    horn = model.link("horn")
    assert np.allclose(horn.com, [0, 0, 0.045])
    yaw = model.joint("base_yaw")
    assert yaw.kind == "hinge" and yaw.parent == "servo" and yaw.child == "horn"
    assert np.allclose(yaw.anchor, [0, 0, 0.04]) and np.allclose(yaw.axis, [0, 0, 1])
    assert model.motors == ("base_yaw",)
    (part,) = model.flexible_parts
    z = part.mesh.nodes[:, 2]
    assert z.min() == pytest.approx(0.05) and z.max() == pytest.approx(0.17)
    assert [i.link for i in part.interfaces] == ["horn", "tip_mass"]
    assert part.material.name == "spring_steel"
    assert model.tracked_bodies[0].link == "tip_mass"
    assert np.allclose(model.gravity, [0, 0, -9.81])


def test_parse_origin_matches_urdf_rpy_convention():
    t = parse_origin({"xyz": [1, 2, 3], "rpy": [0, 0, np.pi / 2]})
    assert np.allclose(t[:3, :3] @ [1, 0, 0], [0, 1, 0]) and np.allclose(t[:3, 3], [1, 2, 3])


def test_missing_section_is_an_input_error(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("/**:\n  ros__parameters: {}\n")
    with pytest.raises(ModelError, match="retarget"):
        load_robot(p)


def test_loop_joints_section(tmp_path):
    text = (FIXTURES / "mini_rod.yaml").read_text().replace(
        "  motors: [base_yaw]",
        "  motors: [base_yaw]\n  loop_joints:\n    - {name: extra, type: spherical, parent: servo, child: tip_mass,"
        " origin: {xyz: [0, 0, 0.17]}}",
    )
    (tmp_path / "mini_rod.urdf.xacro").write_text((FIXTURES / "mini_rod.urdf.xacro").read_text())
    p = tmp_path / "robot.yaml"
    p.write_text(text)
    model = load_robot(p)
    extra = model.joint("extra")
    assert extra.kind == "ball" and np.allclose(extra.anchor, [0, 0, 0.17])


def _mini_rod_with_loop(tmp_path, loop_joint: str) -> Path:
    text = (FIXTURES / "mini_rod.yaml").read_text().replace(
        "  motors: [base_yaw]", "  motors: [base_yaw]\n  loop_joints:\n    - " + loop_joint)
    (tmp_path / "mini_rod.urdf.xacro").write_text((FIXTURES / "mini_rod.urdf.xacro").read_text())
    p = tmp_path / "robot.yaml"
    p.write_text(text)
    return p


def test_loop_joint_parent_origin_alias_and_closure_check(tmp_path):
    base = "{name: extra, type: spherical, parent: servo, child: tip_mass, parent_origin: {xyz: [0, 0, 0.17]}"
    model = load_robot(_mini_rod_with_loop(tmp_path, base + "}"))
    assert np.allclose(model.joint("extra").anchor, [0, 0, 0.17])
    with pytest.raises(ModelError, match="does not close"):
        load_robot(_mini_rod_with_loop(tmp_path, base + ", child_origin: {xyz: [0.5, 0, 0]}}"))
    with pytest.raises(ModelError, match="unknown keys"):
        load_robot(_mini_rod_with_loop(tmp_path, base + ", orgin: {xyz: [0, 0, 0]}}"))
    with pytest.raises(ModelError, match="not both"):
        load_robot(_mini_rod_with_loop(tmp_path, base + ", origin: {xyz: [0, 0, 0]}}"))


def test_rapper_loop_closes_where_its_yaml_says():
    from retarget.model.library import resolve_robot

    model = load_robot(resolve_robot("rapper"))
    ball = model.joint("push_rod_ball")
    assert ball.kind == "ball" and ball.parent == "push_rod"


def test_simulate_loaded_robot_briefly():
    from retarget.sim.motors import ConstantMotors
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    system = build_system(load_robot(FIXTURES / "mini_rod.yaml"))
    result = simulate(system, ConstantMotors(np.zeros(1)), 0.005, 1e-3)
    tip = result.body_position("tip_mass")
    # Starts at the gravity equilibrium: nothing moves.
    assert np.max(np.abs(tip - tip[0])) < 1e-8


def test_fitted_materials_file_overrides_the_library(tmp_path):
    text = (FIXTURES / "mini_rod.yaml").read_text()
    (tmp_path / "mini_rod.urdf.xacro").write_text((FIXTURES / "mini_rod.urdf.xacro").read_text())
    (tmp_path / "robot.yaml").write_text(text)
    before = load_robot(tmp_path / "robot.yaml").flexible_parts[0].nominal_material
    (tmp_path / "materials.yaml").write_text(
        f"materials:\n  {before.name}: {{youngs_modulus: 1.5e11, rayleigh_alpha: 0.25}}\n")
    part = load_robot(tmp_path / "robot.yaml").flexible_parts[0]
    after = part.nominal_material
    assert after.youngs_modulus == pytest.approx(1.5e11, rel=1e-14) and after.rayleigh_alpha == 0.25
    assert after.density == before.density and after.youngs_modulus != before.youngs_modulus
    # The simulator's material is the calibrated one: E times the part's stiffness factor.
    assert part.material.youngs_modulus == pytest.approx(1.5e11 * part.stiffness_factor, rel=1e-14)


def test_mesh_scale_and_resolution_override_the_flexible_mesh():
    def layers(model):
        z = np.unique(np.round(model.flexible_parts[0].mesh.nodes[:, 2], 9))
        return (len(z) - 1) // 2  # quadratic tets: a mid-layer of nodes between two corner layers

    assert layers(load_robot(FIXTURES / "mini_rod.yaml")) == 8
    assert layers(load_robot(FIXTURES / "mini_rod.yaml", mesh_scale=0.5)) == 4
    assert layers(load_robot(FIXTURES / "mini_rod.yaml", mesh_scale=2.0)) == 16
    assert layers(load_robot(FIXTURES / "mini_rod.yaml", mesh_scale=0.01)) == 2  # never below two layers
    over = load_robot(FIXTURES / "mini_rod.yaml", resolution={"rod": {"axial": 5, "around": 8}})
    assert layers(over) == 5
    coarse = load_robot(FIXTURES / "mini_rod.yaml", resolution={"rod": {"axial": 5}}, mesh_scale=0.4)
    assert layers(coarse) == 2
    # Interfaces follow the new mesh: still the end faces.
    part = coarse.flexible_parts[0]
    z = part.mesh.nodes[:, 2]
    assert np.allclose(z[part.interfaces[1].nodes], z.max())


@pytest.mark.parametrize(
    "kwargs",
    [{"mesh_scale": 0.0}, {"mesh_scale": -1.0}, {"mesh_scale": float("nan")}, {"resolution": {"arm": {"axial": 3}}},
     {"resolution": {"rod": {"axail": 3}}}],
)
def test_bad_mesh_overrides_are_model_errors(kwargs):
    with pytest.raises(ModelError):
        load_robot(FIXTURES / "mini_rod.yaml", **kwargs)


def test_mesh_scale_on_a_library_bar_part():
    from retarget.model.library import resolve_robot

    full = load_robot(resolve_robot("rapper"))
    half = load_robot(resolve_robot("rapper"), mesh_scale=0.5)
    for a, b in zip(full.flexible_parts, half.flexible_parts):
        assert 0.4 < b.mesh.n_dofs / a.mesh.n_dofs < 0.6


def test_a_xacro_expansion_is_kept_until_the_file_or_an_include_changes(tmp_path, monkeypatch):
    """urdf_text gives a kept expansion again (no xacro run) while the file and every file it included keep their
    size and modification time, for the same arguments; an edit of an include expands again."""
    import os

    import xacro

    from retarget.model.loader import urdf_text

    (tmp_path / "part.xacro").write_text(
        '<robot xmlns:xacro="http://www.ros.org/wiki/xacro"><xacro:property name="mass" value="0.5"/></robot>')
    main = tmp_path / "robot.urdf.xacro"
    main.write_text('<robot name="r" xmlns:xacro="http://www.ros.org/wiki/xacro"><xacro:arg name="n" default="a"/>'
                    '<xacro:include filename="part.xacro"/><link name="$(arg n)"><inertial><mass value="${mass}"/>'
                    '<inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial></link></robot>')
    runs = []
    real = xacro.process_file
    monkeypatch.setattr(xacro, "process_file", lambda *a, **k: runs.append(a) or real(*a, **k))
    first = urdf_text(main, {})
    assert urdf_text(main, {}) == first and len(runs) == 1
    assert 'name="b"' in urdf_text(main, {"n": "b"}) and len(runs) == 2  # other arguments: their own expansion
    part = tmp_path / "part.xacro"
    stat = part.stat()
    part.write_text(part.read_text().replace("0.5", "0.7"))
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    again = urdf_text(main, {})
    assert len(runs) == 3 and 'value="0.7"' in again and 'value="0.5"' in first


def test_a_xacro_that_reads_the_environment_expands_again_when_it_changes(tmp_path, monkeypatch):
    """``$(env NAME)`` / ``$(optenv NAME default)``: an expansion is not given again under another value."""
    from retarget.model.loader import urdf_text

    main = tmp_path / "robot.urdf.xacro"
    main.write_text('<robot name="r" xmlns:xacro="http://www.ros.org/wiki/xacro"><link name="$(env RETARGET_T_LINK)">'
                    '<inertial><mass value="$(optenv RETARGET_T_MASS 0.5)"/><inertia ixx="1" iyy="1" izz="1" '
                    'ixy="0" ixz="0" iyz="0"/></inertial></link></robot>')
    monkeypatch.setenv("RETARGET_T_LINK", "a")
    monkeypatch.delenv("RETARGET_T_MASS", raising=False)
    assert 'name="a"' in urdf_text(main, {}) and 'value="0.5"' in urdf_text(main, {})
    monkeypatch.setenv("RETARGET_T_LINK", "b")
    assert 'name="b"' in urdf_text(main, {})
    monkeypatch.setenv("RETARGET_T_MASS", "0.7")
    assert 'value="0.7"' in urdf_text(main, {})
