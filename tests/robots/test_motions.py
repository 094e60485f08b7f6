"""The shipped motions: durations, joint sets, position limits and honest statements about the speed limit."""
from __future__ import annotations

import re

import numpy as np
import pytest

from retarget.model.library import list_motions, resolve_motion, robot_config
from retarget.motion import read_keyframes
from retarget.report.robot_render import load_urdf

#: Durations [s] from the paper (Table 1 and §7); step_45_fast mirrors step_30; None: not a paper motion.
DURATIONS = {"single_rod/step_30": 4.0, "single_rod/step_45_fast": 4.0, "two_rods/swing_90": 3.5,
             "single_rod/step_30_fast_return": 4.0, "single_rod/step_20_fast": 4.0,  # reduced-model test motions
             "single_rod/step_30_servo": 4.6,  # step_30 with ramps within the servo's stall torque
             "dancer/wave": 8.5, "bartender/serve": 8.5, "rapper/rap": 10.0, "drummer/drumming": 10.0,
             "boxer/boxing": 9.75, "boxer/boxing_servo": 9.75,  # boxing within the servos' speed
             "single_rod/ident_mode2": None,  # designed from the rig by `retarget fit-motion` (docs/fit.md)
             "fit_rig/step_30": 4.4, "fit_rig/ident_mode2": None}  # the fitting rig's, ramps for its XM540-W270
XM430_MAX_VELOCITY = 8.06  # [rad/s], 77 rpm no-load at 12 V


@pytest.fixture(scope="module", params=sorted(DURATIONS))
def shipped(request: pytest.FixtureRequest) -> tuple[str, object, object]:
    name = request.param
    keys = read_keyframes(resolve_motion(name))
    return name, keys, keys.to_motion()


def test_every_shipped_motion_is_listed() -> None:
    assert sorted(list_motions()) == sorted(DURATIONS)


def test_duration_robot_and_joints(shipped: tuple) -> None:
    name, keys, motion = shipped
    robot = name.split("/")[0]
    assert keys.robot == robot
    if DURATIONS[name] is not None:
        assert motion.time[-1] - motion.time[0] == pytest.approx(DURATIONS[name], abs=1e-9)
    assert keys.interpolation == "pchip"
    motors = robot_config(robot)["retarget"]["motors"]
    assert list(motion.joint_names) == motors  # every motor animated, in Dynamixel order


def test_within_urdf_position_limits(shipped: tuple) -> None:
    name, _, motion = shipped
    urdf = load_urdf(name.split("/")[0])
    for j, joint in enumerate(motion.joint_names):
        limit = urdf.joint_map[joint].limit
        q = motion.positions[:, j]
        assert q.min() >= limit.lower - 1e-9, (joint, np.degrees(q.min()))
        assert q.max() <= limit.upper + 1e-9, (joint, np.degrees(q.max()))


def test_speed_statement_matches_the_motion(shipped: tuple) -> None:
    """A motion faster than its robot's servo (the XM430 unless the robot file names another) says so in its
    description, naming each offending joint; others say they are within the limit."""
    name, keys, motion = shipped
    servo = robot_config(name.split("/")[0])["retarget"].get("servo") or {}
    limit = float(servo.get("max_velocity", XM430_MAX_VELOCITY))
    velocity = np.gradient(motion.positions, motion.time, axis=0)
    peak = np.abs(velocity).max(axis=0)
    over = [j for j, p in zip(motion.joint_names, peak) if p > limit]
    text = keys.description
    stated = re.search(r"Peak motor speed ([0-9.]+) rad/s", text)
    assert stated is not None, name
    assert float(stated.group(1)) == pytest.approx(peak.max(), rel=0.03)
    if over:
        assert "exceeds the XM430-W210 speed limit" in text
        for joint in over:
            assert joint in text.split("exceeds", 1)[1], joint
    else:
        assert re.search(r"within the (XM430-W210|servo) speed limit", text), name


def test_single_rod_steps_have_the_paper_amplitude_and_hold() -> None:
    for name, amplitude in (("single_rod/step_30", 30.0), ("single_rod/step_45_fast", 45.0),
                            ("fit_rig/step_30", 30.0)):
        motion = read_keyframes(resolve_motion(name)).to_motion()
        q = np.degrees(motion.positions[:, 0])
        assert q.max() == pytest.approx(amplitude, abs=1e-9)
        held = motion.time[np.isclose(q, amplitude, atol=1e-6)]
        assert held[-1] - held[0] == pytest.approx(1.5, abs=0.01)  # hold 1.5 s (paper §7)
        assert q[0] == 0.0 and q[-1] == 0.0


def test_two_rods_swing_reaches_horizontal() -> None:
    motion = read_keyframes(resolve_motion("two_rods/swing_90")).to_motion()
    assert np.degrees(motion.positions[-1, 0]) == pytest.approx(90.0)


def test_bartender_glass_stays_upright() -> None:
    """Glass pitch = shoulder + elbow + wrist pitch (parallel axes): zero at keys, < 2 degrees in between."""
    keys = read_keyframes(resolve_motion("bartender/serve"))
    assert np.abs(keys.values[:, 1:].sum(axis=1)).max() < 1e-9
    motion = keys.to_motion()
    tilt = np.degrees(np.abs(motion.positions[:, 1:].sum(axis=1)))
    assert tilt.max() < 2.0


@pytest.mark.parametrize("name", ["boxer/boxing", "boxer/boxing_servo"])
def test_boxer_punches_stop_abruptly(name: str) -> None:
    """Fast punches with abrupt stops: an elbow goes from above 6 rad/s to rest within 0.12 s, 4+ times."""
    motion = read_keyframes(resolve_motion(name)).to_motion()
    dt = motion.time[1] - motion.time[0]
    stops = 0
    for joint in ("left_elbow", "right_elbow"):
        v = np.abs(np.gradient(motion.positions[:, motion.joint_names.index(joint)], dt))
        fast = np.flatnonzero(v > 6.0)
        # ends of fast segments followed by near-rest within 0.12 s
        ends = fast[np.append(np.diff(fast) > 1, True)]
        stops += sum(1 for e in ends if (v[e:e + int(0.12 / dt)] < 0.05).any())
    assert stops >= 4


def test_boxing_servo_is_boxing_with_the_body_leaning_less() -> None:
    """boxer/boxing_servo keeps boxing's sequence (as many keyframes, the same length and guard) with every body
    joint's excursion from the guard smaller, and its punches reaching at least 3/4 of boxing's elbow travel."""
    fast, servo = (read_keyframes(resolve_motion(n)) for n in ("boxer/boxing", "boxer/boxing_servo"))
    assert fast.values.shape == servo.values.shape and fast.times[-1] == servo.times[-1]
    guard = fast.values[-1]
    np.testing.assert_array_equal(servo.values[-1], guard)
    excursion = [np.abs(k.values - guard).max(axis=0) for k in (fast, servo)]
    for joint in ("pelvis_roll", "spine_pitch", "torso_yaw"):
        j = fast.joints.index(joint)
        assert excursion[1][j] < excursion[0][j], joint
    for joint in ("left_elbow", "right_elbow"):
        j = fast.joints.index(joint)
        travel = [guard[j] - k.values[k.times > 0.9, j].min() for k in (fast, servo)]
        assert 0.75 * travel[0] < travel[1] < travel[0], joint
