"""Robots as their makers' URDFs describe them: ``<mimic>`` joints refused unless locked or driven,
``locked_joints`` (a joint made fixed at a value), and the static solve naming the joints nothing holds. On a small
arm with a two-finger gripper, and on the real OpenManipulator-X description (../shared/data, skipped without it)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from retarget.model.loader import load_robot
from retarget.model.robot import ModelError
from retarget.model.servo import SERVO_MODELS
from retarget.sim.errors import NewtonFailed
from retarget.sim.statics import solve_static
from retarget.sim.system import build_system

INERTIAL = '<inertial><mass value="{m}"/><inertia ixx="1e-5" ixy="0" ixz="0" iyy="1e-5" iyz="0" izz="1e-5"/></inertial>'
GRIPPER_ARM = f"""<?xml version="1.0"?>
<robot name="gripper_arm">
  <link name="world"/>
  <link name="base">{INERTIAL.format(m=0.2)}</link>
  <joint name="base_fixed" type="fixed"><parent link="world"/><child link="base"/></joint>
  <link name="arm">{INERTIAL.format(m=0.1)}</link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="arm"/>
    <origin xyz="0 0 0.05"/><axis xyz="0 1 0"/><limit lower="-2" upper="2" velocity="4.8" effort="4"/></joint>
  <link name="finger_l">{INERTIAL.format(m=0.001)}</link>
  <joint name="finger_l_joint" type="prismatic"><parent link="arm"/><child link="finger_l"/>
    <origin xyz="0.1 0.02 0"/><axis xyz="0 1 0"/><limit lower="-0.01" upper="0.02" velocity="1" effort="10"/></joint>
  <link name="finger_r">{INERTIAL.format(m=0.001)}</link>
  <joint name="finger_r_joint" type="prismatic"><parent link="arm"/><child link="finger_r"/>
    <origin xyz="0.1 -0.02 0"/><axis xyz="0 -1 0"/><limit lower="-0.01" upper="0.02" velocity="1" effort="10"/>
    <mimic joint="finger_l_joint" multiplier="1"/></joint>
</robot>
"""


def _robot(tmp_path: Path, extra: str = "", urdf: str = GRIPPER_ARM, motors: str = "[shoulder]") -> Path:
    (tmp_path / "arm.urdf").write_text(urdf)
    yml = tmp_path / "arm.yaml"
    yml.write_text(f"retarget:\n  urdf: arm.urdf\n  motors: {motors}\n  servo: {{model: XM430-W350}}\n"
                   f"  tracked_bodies: [{{link: arm}}]\n{extra}")
    return yml


def test_a_free_mimic_joint_is_refused_naming_the_pair_and_the_remedy(tmp_path):
    with pytest.raises(ModelError, match=r"'finger_r_joint' mimics 'finger_l_joint' \(URDF <mimic>\), a coupling "
                                         r"retarget does not model: lock it \(locked_joints: \{finger_r_joint: VALUE\}\)"):
        load_robot(_robot(tmp_path))
    # Driven by a servo of its own, it is no longer free.
    model = load_robot(_robot(tmp_path, motors="[shoulder, finger_l_joint, finger_r_joint]"))
    assert model.motors == ("shoulder", "finger_l_joint", "finger_r_joint")


def test_locked_joints_weld_the_child_where_the_joint_value_puts_it(tmp_path):
    at = {}
    for value in (0.0, 0.015):
        extra = f"  locked_joints: {{finger_l_joint: {value}, finger_r_joint: {value}}}\n"
        model = load_robot(_robot(tmp_path, extra), merge_fixed=False)
        assert {j.name: j.kind for j in model.joints}["finger_l_joint"] == "fixed"
        at[value] = {name: model.link(name).com for name in ("finger_l", "finger_r")}
    # Each finger slid 15 mm along its own axis (+y and -y): the joint's motion folded into its origin.
    assert np.allclose(at[0.015]["finger_l"] - at[0.0]["finger_l"], [0, 0.015, 0], atol=1e-12)
    assert np.allclose(at[0.015]["finger_r"] - at[0.0]["finger_r"], [0, -0.015, 0], atol=1e-12)
    # A list locks at 0; a revolute joint locks by its rotation (the arm tilted 30° about y carries its COM along).
    listed = load_robot(_robot(tmp_path, "  locked_joints: [finger_l_joint, finger_r_joint]\n"), merge_fixed=False)
    assert np.allclose(listed.link("finger_l").com, at[0.0]["finger_l"])
    urdf = GRIPPER_ARM.replace('<link name="arm">' + INERTIAL.format(m=0.1),
                               '<link name="arm"><inertial><origin xyz="0.1 0 0"/><mass value="0.1"/>'
                               '<inertia ixx="1e-5" ixy="0" ixz="0" iyy="1e-5" iyz="0" izz="1e-5"/></inertial>')
    tilted = load_robot(_robot(tmp_path, "  locked_joints: {shoulder: 0.5235987755982988, finger_l_joint: 0, "
                                         "finger_r_joint: 0}\n", urdf=urdf, motors="[]"), merge_fixed=False)
    c = math.cos(math.pi / 6)
    assert np.allclose(tilted.link("arm").com, [0.1 * c, 0.0, 0.05 - 0.1 * 0.5], atol=1e-12)


@pytest.mark.parametrize("extra, message", [
    ("  locked_joints: {elbow: 0}\n", "locked_joints: no joint 'elbow' in the URDF; joints: base_fixed, shoulder"),
    ("  locked_joints: {shoulder: 0, finger_r_joint: 0}\n", "locked_joints: 'shoulder' is also a motor"),
    ("  locked_joints: {finger_l_joint: 0.05, finger_r_joint: 0}\n",
     r"locked_joints.finger_l_joint: 0.05 is outside the joint's limits \[-0.01, 0.02\]"),
    ("  locked_joints: {finger_l_joint: wide}\n", "locked_joints.finger_l_joint: expected a number"),
    ("  locked_joints: finger_l_joint\n", "locked_joints: expected a list of joint names or a mapping"),
    ("  locked_joints: [base_fixed]\n", "locked_joints: 'base_fixed' is a fixed joint"),
])
def test_bad_locked_joints_name_the_joint_and_what_is_wrong(tmp_path, extra, message):
    with pytest.raises(ModelError, match=message):
        load_robot(_robot(tmp_path, extra))


def test_a_joint_nothing_holds_makes_the_static_solve_name_it(tmp_path):
    """The mimic finger locked, the other left free: a prismatic joint across gravity has no rest position."""
    model = load_robot(_robot(tmp_path, "  locked_joints: [finger_r_joint]\n"))
    with pytest.raises(NewtonFailed, match=r"singular static system; joints that are not motors: finger_l_joint .* "
                                           r"list it under motors or locked_joints"):
        solve_static(build_system(model), np.zeros(1))
    held = load_robot(_robot(tmp_path, "  locked_joints: [finger_l_joint, finger_r_joint]\n"))
    assert held.servos == (SERVO_MODELS["XM430-W350"],)
    solve_static(build_system(held), np.zeros(1))


def _omx(shared_data: Path, tmp_path: Path, locked: str) -> Path:
    """The OpenManipulator-X from its makers' xacro (ROBOTIS, ../shared/data/urdf), without the Gazebo and
    ros2_control parts: its arm macro on a world link, as its own top-level file includes it."""
    arm = shared_data / "urdf" / "open_manipulator_x" / "urdf" / "open_manipulator_x_arm.urdf.xacro"
    (tmp_path / "omx.urdf.xacro").write_text(
        '<?xml version="1.0"?>\n<robot name="open_manipulator_x" xmlns:xacro="http://ros.org/wiki/xacro">\n'
        f'  <xacro:include filename="{arm}"/>\n  <link name="world"/>\n'
        '  <joint name="world_fixed" type="fixed"><parent link="world"/><child link="link1"/></joint>\n'
        '  <xacro:open_manipulator_x prefix=""/>\n</robot>\n')
    yml = tmp_path / "omx.yaml"
    yml.write_text("retarget:\n  urdf: omx.urdf.xacro\n  motors: [joint1, joint2, joint3, joint4]\n"
                   f"{locked}  tracked_bodies: [{{link: link5}}]\n  servo: {{model: XM430-W350}}\n")
    return yml


def test_the_open_manipulator_x_loads_with_its_gripper_locked_and_holds_still(shared_data, tmp_path):
    with pytest.raises(ModelError, match="'gripper_right_joint' mimics 'gripper_left_joint'"):
        load_robot(_omx(shared_data, tmp_path, ""))
    model = load_robot(_omx(shared_data, tmp_path, "  locked_joints: {gripper_left_joint: 0.01, "
                                                   "gripper_right_joint: 0.01}\n"))
    assert model.motors == ("joint1", "joint2", "joint3", "joint4") and not model.flexible_parts
    assert all(s == SERVO_MODELS["XM430-W350"] for s in model.servos)
    system = build_system(model)
    state = solve_static(system, np.zeros(4))
    sag = state.u[system.servo.u_theta]
    # Against rigid-body statics worked out here from the URDF's masses and joints (not the simulator): each P loop
    # holds the gravity torque about its axis at the sagged pose, kp θ = τ(θ); joint1's axis is vertical.
    theory = _sag_by_statics(model, SERVO_MODELS["XM430-W350"].kp)
    assert abs(sag[0]) < 1e-12 and np.degrees(np.abs(sag[1:])).max() > 0.5  # joint2 sags about 1.4°
    assert np.allclose(sag, theory, rtol=1e-6, atol=1e-9)


def _rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


def _sag_by_statics(model, kp: float) -> np.ndarray:
    """The motors' angles where kp θ balances gravity on a serial chain: forward kinematics by the product of
    exponentials from the reference pose, gravity torques about each motor's axis, a fixed-point iteration."""
    children: dict[str, list] = {}
    for j in model.joints:
        children.setdefault(j.parent, []).append(j)

    def below(joint):
        links, joints, stack = [], [], [joint.child]
        while stack:
            link = stack.pop()
            links.append(link)
            for j in children.get(link, []):
                joints.append(j.name)
                stack.append(j.child)
        return links, joints

    motors = [model.joint(m) for m in model.motors]
    downstream = {m.name: below(m) for m in motors}
    masses = {link.name: link.mass for link in model.links}
    theta = np.zeros(len(motors))
    for _ in range(100):
        com = {link.name: link.com.copy() for link in model.links}
        anchor = {m.name: m.anchor.copy() for m in motors}
        axis = {m.name: m.axis.copy() for m in motors}
        for m, q in reversed(list(zip(motors, theta))):  # outermost first: p = e^{ξ1 q1} … e^{ξn qn} p_ref
            rot = _rotation(m.axis, q)
            links, joints = downstream[m.name]
            for name in links:
                com[name] = m.anchor + rot @ (com[name] - m.anchor)
            for name in joints:
                if name in anchor:
                    anchor[name] = m.anchor + rot @ (anchor[name] - m.anchor)
                    axis[name] = rot @ axis[name]
        torque = np.array([axis[m.name] @ sum(np.cross(com[k] - anchor[m.name], masses[k] * model.gravity)
                                               for k in downstream[m.name][0] if k in masses) for m in motors])
        theta = torque / kp
    return theta
