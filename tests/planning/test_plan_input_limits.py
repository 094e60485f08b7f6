"""Planner input limits: a motion outside the robot's joint position limits is refused before any model work, on
both planning paths (``retarget plan`` and :func:`retarget.planning.run.plan` as the planner node calls it).

``single_rod``'s ``base_pitch`` is limited to ±90° in its URDF; 1000° in 1 s leaves it from t = 0.5 s on.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from retarget.motion.errors import MotionLimitError
from retarget.motion.limits import check_plan_input, robot_position_limits
from retarget.motion.motion import Motion

ARM = Path(__file__).resolve().parents[1] / "model" / "fixtures" / "rigid_arm.urdf"
HUGE_CSV = "time [s],base_pitch [deg]\n0.0,0\n0.5,500\n1.0,1000\n"


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """An empty private reduced-model cache and model folder (nothing found, anything written lands here)."""
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    return tmp_path / "cache"


def _written(cache):
    return sorted(p for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


def test_robot_position_limits_come_from_the_urdf_without_speeds():
    limits = robot_position_limits("single_rod")
    assert limits["base_pitch"].lower == pytest.approx(-math.pi / 2)
    assert limits["base_pitch"].upper == pytest.approx(math.pi / 2)
    assert math.isinf(limits["base_pitch"].velocity)  # speeds are the plan's to report, not refused here


def test_check_plan_input_passes_a_motion_within_limits_even_when_too_fast():
    # 80 deg in 10 ms: far beyond the servo's 8 rad/s but inside ±90 deg: not refused (the plan reports speeds).
    m = Motion(np.array([0.0, 0.01, 1.0]), ("base_pitch",), np.radians([[0.0], [80.0], [80.0]]))
    assert check_plan_input("single_rod", m) is m


def test_motors_a_motion_leaves_out_hold_their_zero_pose(tmp_path):
    """An animation of a few of a robot's motors: the others hold 0 rad, after the motors in the robot's order; a
    motion of another robot (no motor, other joints) and a held motor whose zero is beyond its limits are refused."""
    from retarget.motion.errors import JointMismatchError
    from retarget.motion.limits import HOLD_RAD

    (tmp_path / "arm.urdf").write_text(ARM.read_text())
    robot = tmp_path / "arm.yaml"
    robot.write_text("retarget:\n  urdf: arm.urdf\n  motors: [shoulder, elbow]\n  tracked_bodies: [{link: fore}]\n")
    t = np.linspace(0.0, 1.0, 11)
    shoulder = Motion(t, ("shoulder",), 0.3 * t[:, None])
    full = check_plan_input(robot, shoulder)
    assert full.joint_names == ("shoulder", "elbow") and HOLD_RAD == 0.0
    np.testing.assert_array_equal(full.positions, np.stack([0.3 * t, np.zeros_like(t)], axis=1))
    csv = tmp_path / "shoulder.csv"
    csv.write_text("time [s],shoulder [rad]\n" + "".join(f"{a},{0.3 * a}\n" for a in t))
    assert check_plan_input(robot, csv) == full
    with pytest.raises(JointMismatchError, match=r"no column for motors \['shoulder', 'elbow'\].*another robot"):
        check_plan_input(robot, Motion(t, ("base_pitch",), 0.1 * t[:, None]))
    elbow = '<limit lower="-2" upper="2" velocity="4.8" effort="4"/></joint>\n</robot>'
    assert elbow in ARM.read_text()
    (tmp_path / "bent.urdf").write_text(ARM.read_text().replace(elbow, elbow.replace('"-2"', '"0.2"')))
    bent = tmp_path / "bent.yaml"
    bent.write_text(robot.read_text().replace("arm.urdf", "bent.urdf"))
    with pytest.raises(JointMismatchError, match=r"zero pose is beyond their limits \(elbow \[0.2, 2\] rad\)"):
        check_plan_input(bent, shoulder)


def test_check_plan_input_names_joint_time_and_value():
    m = Motion(np.linspace(0.0, 1.0, 11), ("base_pitch",), np.radians(np.linspace(0.0, 1000.0, 11))[:, None])
    with pytest.raises(MotionLimitError) as info:
        check_plan_input("single_rod", m)
    text = str(info.value)
    assert "'base_pitch'" in text and "t = 1 s" in text and "1000 deg" in text and "upper limit" in text
    (v,) = info.value.violations
    assert (v.joint, v.kind, v.time) == ("base_pitch", "upper", 1.0)
    assert v.value == pytest.approx(math.radians(1000.0)) and v.start_time == pytest.approx(0.1)


def test_plan_cli_refuses_before_any_model_work(tmp_path, private_cache, capsys, monkeypatch):
    from retarget.cli import main
    from retarget.planning import run

    def no_model_work(*args, **kwargs):
        raise AssertionError("the plan began: meshing and training (minutes) before the refusal")

    monkeypatch.setattr(run, "plan", no_model_work)
    motion = tmp_path / "huge.csv"
    motion.write_text(HUGE_CSV)
    code = main(["plan", "single_rod", "--motion", str(motion)])
    err = capsys.readouterr().err
    assert code == 2
    assert "joint 'base_pitch'" in err and "line 4" in err and "t = 1 s" in err and "1000 deg" in err
    assert "model:" not in err  # nothing loaded: the model line is printed before the training starts
    assert _written(private_cache) == []


def test_plan_refuses_before_any_model_work(private_cache):
    from retarget.planning.settings import options_from_parameters
    from retarget.planning.run import PlanProgress, plan

    t = np.linspace(0.0, 1.0, 101)
    motion = Motion(t, ("base_pitch",), np.radians(1000.0 * t)[:, None])
    steps = []
    with pytest.raises(MotionLimitError) as info:
        plan("single_rod", motion, options_from_parameters({"allow_training": True}),
             PlanProgress(steps=lambda *step: steps.append(step)))
    assert "joint 'base_pitch'" in str(info.value) and "t = 1 s" in str(info.value)
    assert 0.09 <= info.value.violations[0].start_time <= 0.1  # 90 deg, the limit, is reached at 0.09 s
    assert steps == []  # no training stage began
    assert _written(private_cache) == []


def _truncated_yaml() -> str:
    from retarget.model.library import resolve_motion

    text = resolve_motion("single_rod/step_30").read_text()
    return text[:text.index("  - [0.700")] + "  - [0.70"


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("nan.csv", "time [s],base_pitch [deg]\n0,0\n0.5,nan\n1,0\n", "line 3"),
    ("backwards.csv", "time [s],base_pitch [deg]\n0,0\n0.5,1\n0.4,2\n", "line 4: time goes backwards"),
    ("wrong_joint.csv", "time [s],elbow [deg]\n0,0\n0.5,1\n1,2\n", "no column for motors ['base_pitch']"),
    ("truncated.yaml", None, "truncated.yaml"),
    ("empty.csv", "", "empty CSV file"),
    ("missing.csv", "", "no such motion"),
])
def test_plan_cli_refuses_malformed_motion_files_clearly(tmp_path, private_cache, capsys, name, text, expected):
    from retarget.cli import main

    path = tmp_path / name
    if name != "missing.csv":
        path.write_text(_truncated_yaml() if text is None else text)
    code = main(["plan", "single_rod", "--motion", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err and "model:" not in err
    assert _written(private_cache) == []


def test_a_robot_outside_the_package_is_checked_from_its_own_files(tmp_path):
    # The model loader's lookup: the URDF beside the YAML (tiny_robot's layout), as `retarget plan <yaml>` loads it.
    from tiny_robot import write_tiny_robot

    folder = write_tiny_robot(tmp_path)
    assert robot_position_limits(folder / "tiny_rod.yaml")["m"][:2] == (-1.0, 1.0)
    m = Motion(np.array([0.0, 0.1]), ("m",), np.array([[0.0], [1.5]]))
    with pytest.raises(MotionLimitError, match=r"joint 'm' at row 1 \(t = 0.1 s\): angle 1.5 rad"):
        check_plan_input(folder / "tiny_rod.yaml", m)
