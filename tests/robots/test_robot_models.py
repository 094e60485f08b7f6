"""The seven robots: URDFs load with yourdfpy, limits are real, and each params YAML agrees with its URDF."""
from __future__ import annotations

import math

import numpy as np
import pytest

from retarget.fem.material import MATERIALS
from retarget.model.library import list_robots, robot_config, ros_parameters
from retarget.report.robot_render import load_urdf, robot_polygons

ROBOTS = ["bartender", "boxer", "dancer", "drummer", "rapper", "single_rod", "two_rods"]
DOF = {"single_rod": 1, "two_rods": 1, "dancer": 4, "bartender": 4, "rapper": 4, "drummer": 13, "boxer": 13}


@pytest.fixture(scope="module", params=ROBOTS)
def robot(request: pytest.FixtureRequest) -> tuple[str, dict, object]:
    name = request.param
    return name, robot_config(name), load_urdf(name)


def test_library_has_exactly_these_robots() -> None:
    assert list_robots() == ROBOTS


def test_joint_names_ids_and_motors_agree(robot: tuple) -> None:
    name, config, urdf = robot
    ros = ros_parameters(name)
    section = config["retarget"]
    assert ros["robot_name"] == name
    assert ros["joint_names"] == section["motors"]
    assert len(section["motors"]) == DOF[name]
    ids = ros["dynamixel_ids"]
    assert len(ids) == len(ros["joint_names"]) and len(set(ids)) == len(ids)
    assert all(isinstance(i, int) and 0 <= i <= 252 for i in ids)  # Protocol 2.0 unicast IDs


def test_motors_are_revolute_with_xm430_limits(robot: tuple) -> None:
    _, config, urdf = robot
    for motor in config["retarget"]["motors"]:
        joint = urdf.joint_map[motor]
        assert joint.type == "revolute"
        assert joint.limit.lower < 0.0 < joint.limit.upper or joint.limit.lower == 0.0
        assert joint.limit.velocity == pytest.approx(8.06) and joint.limit.effort == pytest.approx(3.0)
        assert -math.pi <= joint.limit.lower < joint.limit.upper <= math.pi


def test_every_revolute_joint_has_limits(robot: tuple) -> None:
    _, _, urdf = robot
    for joint in urdf.robot.joints:
        if joint.type in ("revolute", "prismatic"):
            assert joint.limit is not None and joint.limit.lower < joint.limit.upper, joint.name


def test_yaml_names_exist_in_urdf(robot: tuple) -> None:
    """Every flexible link, interface link, tracked body, loop-joint link and the root link is a URDF link."""
    _, config, urdf = robot
    section = config["retarget"]
    links = set(urdf.link_map)
    assert section["root_link"] in links
    for body in section["tracked_bodies"]:
        assert body["link"] in links
    names = [p["name"] for p in section["flexible_parts"]]
    assert len(set(names)) == len(names)
    for part in section["flexible_parts"]:
        assert part["link"] in links
        assert part["material"] in MATERIALS
        assert len(part["interfaces"]) >= 2
        for interface in part["interfaces"]:
            assert interface["link"] in links and interface["link"] != part["link"]
    for joint in section.get("loop_joints", []):
        assert joint["parent"] in links and joint["child"] in links


def test_flexible_placeholders_match_their_mesh_and_material(robot: tuple) -> None:
    """The URDF placeholder of a flexible part has the FEM body's length and mass (density x volume)."""
    _, config, urdf = robot
    for part in config["retarget"]["flexible_parts"]:
        mesh = part["mesh"]
        link = urdf.link_map[part["link"]]
        geometry = link.visuals[0].geometry
        if mesh["generator"] == "rod":
            assert geometry.cylinder.length == pytest.approx(mesh["length"])
            assert 2 * geometry.cylinder.radius == pytest.approx(mesh["diameter"])
            volume = math.pi * mesh["diameter"] ** 2 / 4 * mesh["length"]
        else:
            expected = (mesh["width"], mesh["thickness"], mesh["length"])
            assert tuple(geometry.box.size) == pytest.approx(expected)
            volume = mesh["width"] * mesh["thickness"] * mesh["length"]
        assert link.inertial.mass == pytest.approx(MATERIALS[part["material"]].density * volume, rel=1e-9)


def test_inertias_are_physical(robot: tuple) -> None:
    """Positive masses, positive-definite inertia tensors obeying the triangle inequality."""
    _, _, urdf = robot
    for link in urdf.robot.links:
        if link.inertial is None:
            continue
        assert link.inertial.mass > 0.0
        eig = np.linalg.eigvalsh(link.inertial.inertia)
        assert eig.min() > 0.0, link.name
        assert eig.max() <= eig.sum() - eig.max() + 1e-15, link.name


def test_xm430_bodies_weigh_82_g(robot: tuple) -> None:
    name, config, urdf = robot
    servos = [link for link in urdf.robot.links
              if link.visuals and link.visuals[0].geometry.box is not None
              and tuple(np.round(link.visuals[0].geometry.box.size, 4)) == (0.0285, 0.0465, 0.034)]
    assert len(servos) == DOF[name]
    assert all(s.inertial.mass == pytest.approx(0.082) for s in servos)


def _height(name: str) -> float:
    faces = robot_polygons(name)[0]
    return float(np.concatenate(faces)[:, 2].max())


def test_paper_dimensions() -> None:
    """Drummer 80 cm tall; bartender 45 cm without the base (up to the glass top); legs and lower arms."""
    assert _height("drummer") == pytest.approx(0.80, abs=0.02)
    assert _height("bartender") == pytest.approx(0.45, abs=0.02)
    legs = {p["name"]: p["mesh"]["length"] for p in robot_config("drummer")["retarget"]["flexible_parts"]}
    assert legs["left_leg"] == legs["right_leg"] == 0.45
    assert legs["left_lower_arm"] == 0.10


def test_boxer_is_the_drummer_with_heavier_hands() -> None:
    drummer, boxer = load_urdf("drummer"), load_urdf("boxer")
    assert drummer.actuated_joint_names == boxer.actuated_joint_names
    for side in ("left", "right"):
        glove, stick = boxer.link_map[f"{side}_hand"], drummer.link_map[f"{side}_hand"]
        assert glove.inertial.mass > 2 * stick.inertial.mass


def _loop_gap(urdf: object, loop: dict, cfg: dict[str, float]) -> float:
    urdf.update_cfg(cfg)
    a = urdf.get_transform(loop["parent"], "world") @ np.array([*loop["parent_origin"]["xyz"], 1.0])
    b = urdf.get_transform(loop["child"], "world") @ np.array([*loop["child_origin"]["xyz"], 1.0])
    return float(np.linalg.norm(a[:3] - b[:3]))


def _rigid_parallelogram(elbow: float) -> dict[str, float]:
    """The 4-bar's passive joints for a rigid parallelogram at ``elbow`` [rad]."""
    return {"elbow": elbow, "elbow_hinge": elbow, "push_rod_u1": -elbow, "push_rod_u2": 0.0}


def test_rapper_four_bar_closes_over_the_elbow_range() -> None:
    """With rigid parts the parallelogram gives elbow_hinge = elbow, push_rod_u1 = -elbow: the spherical
    joint's two points coincide (< 1e-9 m) for any shoulder pose; a wrong passive angle opens the loop."""
    config = robot_config("rapper")["retarget"]
    (loop,) = config["loop_joints"]
    assert loop["type"] == "spherical"
    urdf = load_urdf("rapper")
    rng = np.random.default_rng(6)
    for elbow in np.linspace(-0.2, 2.3, 6):
        shoulder = dict(zip(["shoulder_yaw", "shoulder_pitch", "shoulder_roll"], rng.uniform(-0.3, 0.3, 3)))
        cfg = {**shoulder, **_rigid_parallelogram(elbow)}
        assert _loop_gap(urdf, loop, cfg) < 1e-9
    assert _loop_gap(urdf, loop, {"elbow": 1.0, "elbow_hinge": 0.5, "push_rod_u1": -1.0}) > 1e-3


def test_rapper_four_bar_stays_clear_of_its_change_points() -> None:
    """A parallelogram driven through a change point (crank along the push rod) can fold onto its other branch and
    transmits no torque there: over the elbow's whole joint range the crank stays ≥ 15° off the line from the
    elbow servo's shaft to the passive hinge (the ground link the push rod parallels)."""
    urdf = load_urdf("rapper")
    joint = urdf.joint_map["elbow"]
    angles = []
    for elbow in np.linspace(joint.limit.lower, joint.limit.upper, 200):
        urdf.update_cfg(_rigid_parallelogram(elbow))
        shaft = urdf.get_transform("crank", "world")[:3, 3]
        pin = urdf.get_transform("push_rod_cross", "world")[:3, 3]
        hinge = urdf.get_transform("elbow_lower", "world")[:3, 3]
        crank, ground = pin - shaft, hinge - shaft
        crank[1] = ground[1] = 0.0  # in the plane of the elbow's motion (the shaft's axis is y)
        cos = abs(crank @ ground) / (np.linalg.norm(crank) * np.linalg.norm(ground))
        angles.append(np.degrees(np.arccos(min(1.0, cos))))
    assert min(angles) >= 15.0


def test_rapper_loop_mobility_is_one() -> None:
    """Grübler count of the 4-bar: 3 moving bodies (crank, push rod, forearm side), two hinges (5 constraints
    each), one universal (4), one spherical (3): 18 - 17 = 1 DOF, the elbow motor."""
    constraints = {"revolute": 5, "universal": 4, "spherical": 3}
    assert 6 * 3 - (2 * constraints["revolute"] + constraints["universal"] + constraints["spherical"]) == 1


@pytest.mark.parametrize("name", ROBOTS + ["fit_rig"])
def test_servo_model_and_speed_agree_between_the_description_and_the_params_file(name: str) -> None:
    """The driver and the emulated bus take the model from the params file (servo_model), the simulator and the
    planner from the description (servo.model): both must name the same servo, at that servo's rated speed."""
    from retarget.dynamixel.control_table import DEFAULT_SERVO_MODEL, load_control_table

    servo = robot_config(name)["retarget"].get("servo") or {}
    ros = ros_parameters(name)
    model = ros.get("servo_model", DEFAULT_SERVO_MODEL)
    assert model == servo.get("model", DEFAULT_SERVO_MODEL)
    rated = load_control_table(model=model).ratings.no_load_speed
    assert ros["servo_max_velocity"] == pytest.approx(rated, abs=0.01)
    if "max_velocity" in servo:
        assert servo["max_velocity"] == pytest.approx(rated, abs=0.01)
