"""Planning for modelled servos (docs/servo.md "In the planner"): targets with the shafts at the input, the optimizer
starting from the goals that hold them, the naive playback the input as authored, the torque–speed threshold, and
the record of the servos a plan was made for (report, plan CSV, `retarget play`, the planner node's refusal)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from retarget.model.servo import IDEAL, SERVO_MODELS
from retarget.motion.motion import Motion
from retarget.optimize.limits import MotorLimits, TorquePenalty
from retarget.planning.options import PlanOptions
from retarget.planning.run import plan

XM430 = SERVO_MODELS["XM430-W210"]


@pytest.fixture()
def tiny(tiny_artifact, monkeypatch, tmp_path):
    """(robot YAML, fast options with its artifact; the tiny robot has the XM430 modelled by default)."""
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    folder, npz = tiny_artifact
    options = PlanOptions(dt=0.005, knot_spacing=0.04, max_iterations=2, reduced_file=str(npz),
                          allow_unverified_model=True, stiffness_band=(), band=(), verify_model="none",
                          baselines=False, settle_iterations=0)
    return folder / "tiny_rod.yaml", options


def _ramp() -> Motion:
    t = np.linspace(0.0, 0.3, 61)
    return Motion(t, ("m",), (0.3 + 0.2 * np.clip(t / 0.1, 0, 1))[:, None])


def test_the_plan_starts_from_the_goals_that_hold_the_targets_and_the_naive_playback_is_the_input(tiny):
    robot, options = tiny
    result = plan(robot, _ramp(), options)
    pp = result.pp
    engine = pp.problem.engine
    assert not engine.servos.ideal and pp.naive_fit is not None
    # The targets hold the shaft at the input: the ideal servo's static poses.
    ideal = engine.ideal_servos()
    at_start = ideal.solve_static(np.array([0.3]))
    np.testing.assert_allclose(pp.targets.positions[0], pp.problem.poses.positions(at_start.s[None])[0], atol=1e-9)
    # The plan's first goal holds that pose against the sag: the shaft rests at the input's first angle.
    goal0 = pp.fit.parametrization.start_pose[0]
    load = -float(pp.targets.torques[0, 0])
    assert goal0 == pytest.approx(0.3 + load / XM430.kp, rel=1e-9)
    assert pp.problem.start.s[engine.shaft_angle_index[0]] == pytest.approx(0.3, abs=1e-8)
    # The naive playback sends the input itself and starts sagging from it.
    naive = result.variants["naive"]
    np.testing.assert_allclose(naive.angles[:, 0], pp.input_fit.profiles.evaluate(pp.targets.times)[:, 0])
    # (to first order: the gravity moment changes with the sagged angle)
    assert naive.shaft_angles[0, 0] == pytest.approx(0.3 - load / XM430.kp, rel=0.0, abs=0.01 * abs(load) / XM430.kp)
    assert naive.metrics["peak_servo_error_deg"] > 0.0 and 0.0 < naive.metrics["peak_duty"] <= 1.0
    # The report states the servo model planned for.
    servos = result.to_json()["servos"]
    assert servos["modelled"] == ["m"] and "assumption" not in servos
    assert servos["motors"]["m"]["kp"] == pytest.approx(XM430.kp)


def test_an_ideal_servo_is_stated_as_an_assumption(tiny, tmp_path):
    robot, options = tiny
    text = robot.read_text().replace("  motors: [m]\n", "  motors: [m]\n  servo: {model: ideal}\n")
    ideal_robot = robot.with_name("tiny_ideal.yaml")
    ideal_robot.write_text(text)
    result = plan(ideal_robot, _ramp(), replace(options, reduced_file=None, allow_training=True, modes=2,
                                                dt_train=0.002, mesh_axial=4))
    servos = result.to_json()["servos"]
    assert servos["modelled"] == [] and "ideal servo on m" in servos["assumption"]
    assert result.pp.naive_fit is None
    # The report's hardware assumptions start with it; the CSV carries each.
    assert result.to_json()["assumptions"][0] == servos["assumption"]
    assert not any("servo loops" in a for a in result.assumptions)
    from retarget.planning.variants import plan_comments

    assert [c for c in plan_comments(result) if c.startswith("assumption: ")] == [
        "assumption: " + a for a in result.assumptions]


def test_the_torque_threshold_follows_the_torque_speed_line_while_motoring():
    limits = MotorLimits.build(["a", "b"], {}, None)
    penalty = TorquePenalty.build(0.01, limits, 1.0, 0.1, [XM430, SERVO_MODELS[IDEAL]], np.array([7, -1]))
    speeds = np.array([[4.0, 4.0], [4.0, 4.0]])
    torques = np.array([[-1.0, -1.0], [1.0, 1.0]])  # the servo gives −λ: row 0 drives ω > 0, row 1 brakes
    thr, motoring = penalty.thresholds(torques, speeds)
    expected = 0.9 * XM430.stall_torque * (1.0 - 4.0 / XM430.max_velocity)
    assert motoring[0, 0] and not motoring[1, 0] and not motoring[:, 1].any()
    assert thr[0, 0] == pytest.approx(expected) and thr[1, 0] == pytest.approx(0.9 * XM430.stall_torque)
    assert thr[0, 1] == pytest.approx(0.9 * XM430.stall_torque)


def test_the_plan_csv_records_its_servos_and_play_warns_on_other_gains(tiny, tmp_path):
    from retarget.motion import save_motion
    from retarget.planning.variants import plan_comments, planned_servos, servo_mismatches, servo_refusal
    from retarget.ros.player import planned_servo_warnings

    robot, options = tiny
    result = plan(robot, _ramp(), options)
    path = save_motion(tmp_path / "plan.csv", result.profiles.to_motion(("m",), 100.0), comments=plan_comments(result))
    planned = planned_servos(path)
    assert planned["m"]["kp"] == pytest.approx(XM430.kp)
    # What the plan assumes of the hardware (modelled loops: the voltage, the gearbox, the bus, the clamps).
    assumptions = result.to_json()["assumptions"]
    assert assumptions == list(result.assumptions) and len(assumptions) == 5
    assert "servo loops as configured" in assumptions[0] and "without friction;" in assumptions[1]
    assert "half its period ahead" in assumptions[2] and "welded rigidly" in assumptions[3]
    assert path.read_text().count("# assumption: ") == 5
    from retarget.ros.player import plan_assumptions

    assert plan_assumptions(path) == assumptions  # what `retarget play` prints before it plays the plan
    assert plan_assumptions(path.with_suffix(".yaml")) == []
    assert planned_servo_warnings(path, str(robot)) == []
    assert servo_refusal(result.to_json(), robot) == ""
    stiffer = robot.with_name("tiny_p2400.yaml")
    stiffer.write_text(robot.read_text().replace("  motors: [m]\n", "  motors: [m]\n  servo: {p_gain: 2400}\n"))
    warnings = planned_servo_warnings(path, str(stiffer))
    assert len(warnings) == 1 and "kp planned 13.81" in warnings[0]
    assert "kp planned" in servo_refusal(result.to_json(), stiffer)
    # A robot whose params file names a servo file (servo_file): the file laid over its config is what it has.
    from retarget.model.servo_file import write_servo_file

    factory = write_servo_file(tmp_path / "factory.yaml", XM430.to_config())
    assert planned_servo_warnings(path, str(stiffer), str(factory)) == []
    from retarget.cli import build_parser  # `retarget play --servo FILE` gives the same file

    assert build_parser().parse_args(["play", str(stiffer), "--motion", str(path), "--servo", str(factory)]).servo \
        == str(factory)
    assert servo_refusal(result.to_json(), stiffer, factory) == ""
    assert servo_mismatches(planned, {"m": XM430.with_values(kp=XM430.kp * 1.01)}) == []  # within 2 %


def test_a_plan_of_part_of_the_motion_fits_goals_and_input_in_one_spline_space(tiny):
    """The warm-up and ``duration`` plan the first seconds of a longer motion: the goals' fit and the input's share
    the motion's spline space (the naive playback is evaluated with the plan's regularizers)."""
    robot, options = tiny
    result = plan(robot, _ramp(), replace(options, duration=0.1, max_iterations=1))
    pp = result.pp
    assert pp.fit.parametrization.n_parameters == pp.input_fit.parametrization.n_parameters
    assert pp.fit.profiles.t_end == pp.input_fit.profiles.t_end
    assert "naive" in result.variants


@pytest.mark.slow
def test_a_plan_for_an_infinitely_stiff_servo_is_the_ideal_servos_plan(tiny):
    """The perfect-servo limit reproduces the ideal servo's plan (same targets, profiles and deviations)."""
    robot, options = tiny
    base = robot.read_text()
    runs = {}
    for name, servo in (("ideal", "{model: ideal}"),
                        ("stiff", "{kp: 1.4e5, stall_torque: 1.0e4, max_velocity: 1.0e4, rotor_inertia: 2.3e-3}")):
        path = robot.with_name(f"tiny_{name}.yaml")
        path.write_text(base.replace("  motors: [m]\n", f"  motors: [m]\n  servo: {servo}\n"))
        runs[name] = plan(path, _ramp(), replace(options, reduced_file=None, allow_training=True, modes=2,
                                                 dt_train=0.002, mesh_axial=4, max_iterations=3))
    ideal, stiff = runs["ideal"], runs["stiff"]
    # (two models trained with their own servos in the loop: their bases differ slightly)
    np.testing.assert_allclose(stiff.pp.targets.positions, ideal.pp.targets.positions, atol=1e-6)
    t = ideal.pp.targets.times
    np.testing.assert_allclose(stiff.profiles.evaluate(t), ideal.profiles.evaluate(t), atol=2e-4)
    for variant in ("naive", "optimized"):
        a, b = (r.variants[variant].metrics["peak_deviation_m"] for r in (ideal, stiff))
        assert b == pytest.approx(a, rel=0.02)
