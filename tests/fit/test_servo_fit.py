"""Servo identification (:mod:`retarget.fit.servo_fit`, ``retarget fit-servo``): known parameters recovered from a
recording of our own simulator and from an independent plant (a separate ODE integrated with Radau), bad recordings
refused with messages naming the problem, the command's contract, and ``retarget plan --servo``."""
from __future__ import annotations

import json
import math
import os
import stat

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fit.errors import RecordingError
from retarget.fit.servo_fit import (
    QUANTIZATION_STD,
    TICK_RAD,
    ServoFitOptions,
    StepGoals,
    fit_servo,
    prepare_step_test,
    run_weights,
)
from retarget.fit.servo_recording import CSV_COLUMNS, ServoRecording, read_servo_csv, read_servo_recording
from retarget.model.servo import SERVO_MODELS

XM430 = SERVO_MODELS["XM430-W210"]
#: The servo our simulator records with (test 1): every fitted term away from the factory values.
ROD_TRUTH = XM430.with_values(kp=10.0, kd=0.02, rotor_inertia=3.0e-3, coulomb_friction=0.03, viscous_friction=0.02)
#: The independent plant's servo (test 2).
ARM_TRUTH = {"kp": 11.0, "kd": 0.03, "rotor_inertia": 3.0e-3, "coulomb_friction": 0.04, "viscous_friction": 0.015}
#: Recordings start this late: their first second is missing.
LATE_S = 1.0
RATE_HZ = 100.0


def quantized(x):
    return np.round(np.asarray(x) / TICK_RAD) * TICK_RAD


def write_csv(path, time, goal, present, extra=None):
    header = list(CSV_COLUMNS) if extra is None else extra
    rows = [",".join(header)] + [f"{t:.6f},{g:.9f},{p:.9f}" for t, g, p in zip(time, goal, present)]
    path.write_text("\n".join(rows) + "\n")
    return path


# ---- recordings ---------------------------------------------------------------------------------------------------

def _smoothstep(t, t0, width, step):
    x = np.clip((t - t0) / width + 0.5, 0.0, 1.0)
    return step * x * x * (3.0 - 2.0 * x), step * 6.0 * x * (1.0 - x) / width


@pytest.fixture(scope="module")
def rod_recording():
    """A step test of the rod on a motor (tiny robot) recorded with our full FEM at 0.5 ms: 0.5 rad at 0.5 s of
    simulated time, 100 Hz, quantized to ticks, the time column starting :data:`LATE_S` late at 1.3 s."""
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.scenarios import build_rod_on_motor
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    step_at, step = 0.5, 0.5
    motors = FunctionMotors(lambda t: [_smoothstep(t, step_at, 1e-3, step)[0]],
                            lambda t: [_smoothstep(t, step_at, 1e-3, step)[1]])
    result = simulate(build_system(build_rod_on_motor().with_servos([ROD_TRUTH])), motors, 1.2, 5e-4)
    ts = np.arange(0.303, 1.2, 1.0 / RATE_HZ)  # the step falls 3 ms before a sample
    present = quantized(np.interp(ts, result.time, result.shaft_angles[:, 0]))
    goal = np.where(ts >= step_at, step, 0.0)
    return ServoRecording(ts + LATE_S, goal, present, "rod")


def _arm():
    """A rigid arm on a motor (hinge about y at the origin), horizontal at 0 rad: 0.3 kg, its centre 8 cm out."""
    from retarget.model.robot import RobotBuilder
    from retarget.sim.scenarios import box_inertia

    b = RobotBuilder("arm", gravity=(0.0, 0.0, -9.81))
    b.add_link("arm", 0.3, (0.08, 0.0, 0.0), box_inertia(0.3, (0.16, 0.02, 0.02)))
    b.add_joint("m", "hinge", None, "arm", (0.0, 0.0, 0.0), (0.0, 1.0, 0.0), motor=True, lower=-2.0, upper=2.0)
    return b.build()


def independent_plant(inertia, gravity, step_at=1.4, step=0.6, t_end=2.4, servo=ARM_TRUTH, first=LATE_S + 0.006):
    """A load on a servo as its own ODE: ``(J_r + I) θ̈ = τ(g, θ, ω) + G cos θ`` with the servo's PD law on the
    measurement, a hard duty clip, the torque–speed line and friction ``tanh(ω / 0.005)`` (the fitter's: 0.02),
    integrated with scipy's Radau (tolerances 1e-10) in two pieces around the goal's step; returns (times, goal,
    shaft) at :data:`RATE_HZ` from ``first`` on (by default the first second missing, the step 6 ms before a
    sample).

    Args:
        inertia: the load's about the axis [kg m²]. gravity: ``G`` = m g x_c [N m] (x_c the centre of mass's distance
            from the axis, horizontal at 0 rad).
    """
    from scipy.integrate import solve_ivp
    from scipy.optimize import brentq

    total = inertia + servo["rotor_inertia"]
    stall, vmax = XM430.stall_torque, XM430.max_velocity

    def torque(g, th, w):
        u = servo["kp"] * (g - th) - servo["kd"] * w
        duty = min(max(u / stall, -1.0), 1.0)
        return (stall * (duty - w / vmax) - servo["coulomb_friction"] * math.tanh(w / 0.005)
                - servo["viscous_friction"] * w)

    def rhs(g):
        return lambda t, y: [y[1], (torque(g, y[0], y[1]) + gravity * math.cos(y[0])) / total]

    sag = brentq(lambda th: servo["kp"] * (0.0 - th) + gravity * math.cos(th), -1.0, 1.0)
    rest = solve_ivp(rhs(0.0), (0.0, step_at), [sag, 0.0], method="Radau", rtol=1e-10, atol=1e-12, dense_output=True)
    moving = solve_ivp(rhs(step), (step_at, t_end), rest.y[:, -1], method="Radau", rtol=1e-10, atol=1e-12,
                       max_step=1e-3, dense_output=True)
    ts = np.arange(first, t_end, 1.0 / RATE_HZ)
    shaft = np.where(ts < step_at, rest.sol(np.minimum(ts, step_at))[0], moving.sol(np.maximum(ts, step_at))[0])
    return ts, np.where(ts >= step_at, step, 0.0), shaft


def independent_arm_plant(**kwargs):
    """:func:`independent_plant` of :func:`_arm` (its inertia and gravity written out by hand)."""
    m, l, size = 0.3, 0.08, (0.16, 0.02, 0.02)
    return independent_plant(m / 12.0 * (size[0] ** 2 + size[2] ** 2) + m * l * l, m * 9.81 * l, **kwargs)


#: The stiff arm: a Ø12 mm, 8 cm spring-steel rod along x from the motor horn to a 0.25 kg tip (first bending mode
#: near 350 Hz: a rigid load to the servo, simulated by the reduced engine like any flexible robot).
STIFF_ARM = {"length": 0.08, "diameter": 0.012, "tip": 0.25, "tip_radius": 0.01, "horn": 0.02}


def _stiff_arm():
    from retarget.fem.material import MATERIALS
    from retarget.fem.mesh import TetMesh, rod_mesh
    from retarget.model.robot import RobotBuilder
    from retarget.sim.scenarios import box_inertia, rod_axis_rotation, sphere_inertia

    a = STIFF_ARM
    mesh = rod_mesh(a["length"], a["diameter"], 2, 6)
    b = RobotBuilder("stiff_arm", gravity=(0.0, 0.0, -9.81))
    b.add_link("horn", a["horn"], (0.0, 0.0, 0.0), box_inertia(a["horn"], (0.01, 0.01, 0.01)))
    b.add_joint("m", "hinge", None, "horn", (0.0, 0.0, 0.0), (0.0, 1.0, 0.0), motor=True, lower=-2.0, upper=2.0)
    b.add_link("tip", a["tip"], (a["length"], 0.0, 0.0), sphere_inertia(a["tip"], a["tip_radius"]))
    b.add_flexible_part("rod", TetMesh(mesh.nodes @ rod_axis_rotation("horizontal").T, mesh.tets),
                        MATERIALS["spring_steel"], [("horn", mesh.nodes_on_plane(2, 0.0)),
                                                    ("tip", mesh.nodes_on_plane(2, a["length"]))])
    return b.build()


def stiff_arm_plant(**kwargs):
    """:func:`independent_plant` of :func:`_stiff_arm` taken as rigid: the rod's mass moments integrated over its
    mesh's tetrahedra here (exact for straight-sided tets), the horn and tip by hand."""
    from retarget.fem.material import MATERIALS
    from retarget.fem.mesh import rod_mesh

    a = STIFF_ARM
    mesh = rod_mesh(a["length"], a["diameter"], 2, 6)
    corners = mesh.nodes[mesh.tets[:, :4]]  # (n, 4, 3); the rod along z here, x after the rotation
    vol = np.abs(np.linalg.det(corners[:, 1:] - corners[:, :1])) / 6.0
    along, across = corners[..., 2], corners[..., 0]
    second = vol / 20.0 * ((along**2).sum(1) + along.sum(1) ** 2 + (across**2).sum(1) + across.sum(1) ** 2)
    rho = MATERIALS["spring_steel"].density
    rod_inertia, rod_moment = rho * second.sum(), rho * (vol * along.mean(1)).sum()
    tip = a["tip"] * (a["length"] ** 2 + 0.4 * a["tip_radius"] ** 2)
    horn = a["horn"] / 6.0 * 0.01**2
    return independent_plant(rod_inertia + tip + horn, 9.81 * (rod_moment + a["tip"] * a["length"]), **kwargs)


# ---- (1) our simulator, (2) an independent plant -------------------------------------------------------------------

@pytest.mark.slow
def test_recovers_the_servo_from_a_recording_of_our_simulator(rod_recording):
    from retarget.sim.scenarios import build_rod_on_motor

    result = fit_servo(build_rod_on_motor().with_servos([XM430]), rod_recording, "m")
    assert result.engine["name"] == "reduced"
    print(json.dumps(result.to_json()))  # the figures docs/fit.md quotes (pytest -s)
    assert {"kp", "rotor_inertia"} <= set(result.fitted)
    assert "ki" in result.held and "stall_torque" in result.held
    assert set(result.fitted) | set(result.held) >= {"kd", "coulomb_friction", "viscous_friction"}
    kp, s_kp = result.servo.kp, result.std["kp"]
    assert abs(kp - ROD_TRUTH.kp) < 0.1 * ROD_TRUTH.kp and abs(kp - ROD_TRUTH.kp) < 3.0 * s_kp
    # The inertia comes with an uncertainty that covers the truth.
    j, s_j = result.servo.rotor_inertia, result.std["rotor_inertia"]
    assert s_j is not None and abs(j - ROD_TRUTH.rotor_inertia) < 3.0 * s_j
    # The step fell 3 ms before its sample: found within the uncertainty and 1.5 ms.
    assert result.goal_shift_s[0] == pytest.approx(0.003, abs=1.5e-3)
    assert result.residual_rms_rad < 3.0 * QUANTIZATION_STD
    assert result.model_check_rad is not None and result.model_check_rad < QUANTIZATION_STD
    data = json.loads(json.dumps(result.to_json()))
    assert data["kp"] == kp and data["std"]["rotor_inertia"] == s_j


def test_independent_plant_agrees_with_our_simulator_at_the_same_servo():
    """The reference check of the plant written below: the same servo (its PD law and friction as ours, up to the
    duty's soft clip and the friction's tanh width) in our full engine stays within 3 ticks of it."""
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    ts, _, shaft = independent_arm_plant(step_at=0.3, t_end=0.9, servo={**ARM_TRUTH, "kd": 0.0}, first=0.0)
    servo = XM430.with_values(**{**ARM_TRUTH, "kd": 0.0})
    motors = FunctionMotors(lambda t: [0.6 if t >= 0.3 else 0.0], lambda t: [0.0])
    result = simulate(build_system(_arm().with_servos([servo])), motors, 0.9, 2.5e-4)
    ours = np.interp(ts, result.time, result.shaft_angles[:, 0])
    assert np.max(np.abs(ours - shaft)) < 3.0 * TICK_RAD
    assert np.ptp(shaft) > 0.5  # it moved


@pytest.mark.slow
def test_kp_within_ten_percent_on_an_independent_plant():
    ts, goal, shaft = stiff_arm_plant()
    recording = ServoRecording(ts, goal, quantized(shaft), "independent stiff arm")
    result = fit_servo(_stiff_arm().with_servos([XM430]), recording, "m")
    print(json.dumps(result.to_json()))  # the figures docs/fit.md quotes (pytest -s)
    assert result.servo.kp == pytest.approx(ARM_TRUTH["kp"], rel=0.10)
    assert result.std["rotor_inertia"] is not None and result.std["rotor_inertia"] > 0.0
    assert result.residual_rms_rad < 3.0 * QUANTIZATION_STD


# ---- (3) bad recordings -----------------------------------------------------------------------------------------

def _step_recording(n=120, step_at=40, step=0.3, flip=False):
    t = 1.0 + np.arange(n) / RATE_HZ
    goal = np.where(np.arange(n) >= step_at, step, 0.0)
    present = quantized(goal * (1.0 - np.exp(-np.maximum(t - t[step_at], 0.0) / 0.05)))
    return ServoRecording(t, goal, -present if flip else present, "test")


def test_a_goal_without_a_step_is_refused():
    rec = _step_recording(step=3 * TICK_RAD)
    with pytest.raises(RecordingError, match="no step in the goal.*3.0 ticks"):
        prepare_step_test(rec)


def test_too_few_samples_are_refused():
    with pytest.raises(RecordingError, match="15 samples.*at least 21"):
        prepare_step_test(_step_recording(n=15, step_at=5))
    with pytest.raises(RecordingError, match="10 samples from the goal's step on.*at least 20"):
        prepare_step_test(_step_recording(n=50, step_at=40))


def test_a_recording_that_starts_after_the_step_is_refused():
    with pytest.raises(RecordingError, match="no step in the goal.*starts after the step"):
        prepare_step_test(_step_recording(step_at=0))


def test_a_present_position_against_the_goal_is_refused_as_a_sign_convention():
    with pytest.raises(RecordingError, match="sign conventions"):
        prepare_step_test(_step_recording(flip=True))


def test_csv_columns_missing_are_named_with_those_found(tmp_path):
    path = write_csv(tmp_path / "r.csv", [0.0], [0.0], [0.0], extra=["time", "goal [rad]", "position"])
    with pytest.raises(RecordingError, match=r"missing columns 'time \[s\]', 'present \[rad\]'; columns found: "
                                             r"'time', 'goal \[rad\]', 'position'"):
        read_servo_csv(path)


def test_csv_rows_with_gaps_are_dropped_and_counted(tmp_path):
    rec = _step_recording()
    path = write_csv(tmp_path / "r.csv", rec.time, rec.goal, rec.present)
    lines = path.read_text().splitlines()
    lines[5] = lines[5].split(",")[0] + ",nan,0.0"
    lines[6] = lines[6].split(",")[0] + ",,"
    path.write_text("\n".join(lines) + "\n")
    back = read_servo_recording(path)
    assert back.dropped == 2 and back.n_samples == rec.n_samples - 2
    assert np.allclose(back.present, np.delete(rec.present, [4, 5]), atol=1e-9)


def test_unsorted_times_are_refused():
    with pytest.raises(RecordingError, match="time does not increase at sample 2"):
        ServoRecording(np.array([0.0, 0.01, 0.01]), np.zeros(3), np.zeros(3), "t")


def test_a_motor_not_in_the_robot_is_refused_naming_the_motors():
    with pytest.raises(InputError, match="no motor 'elbow'.*motors: m"):
        fit_servo(_arm(), _step_recording(), "elbow")


def test_unknown_parameters_are_refused():
    with pytest.raises(InputError, match="cannot fit stall_torque"):
        fit_servo(_arm().with_servos([XM430]), _step_recording(), "m", ServoFitOptions(params=("kp", "stall_torque")))


# ---- pieces -------------------------------------------------------------------------------------------------------

def test_run_weights_count_a_run_of_equal_readings_as_one():
    w = run_weights(np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 2.0]))
    assert np.allclose(w, [0.5, 0.5, 0.5, 0.5, 1.0, 1 / math.sqrt(2), 1 / math.sqrt(2)])
    assert np.sum(w**2) == pytest.approx(3.0)  # three independent readings


def test_step_goals_hold_samples_and_their_rate_integrates_to_the_step():
    test = prepare_step_test(_step_recording())
    goals = StepGoals(test, 0, np.array([7.0]), shift=0.002, width=0.002)
    t_change = test.goal_time[1] - 0.002
    assert goals.value(t_change - 0.0011)[0] == 0.0 and goals.value(t_change + 0.0011)[0] == pytest.approx(0.3)
    grid = np.linspace(t_change - 0.002, t_change + 0.002, 2001)
    rate = np.array([goals.derivative(t)[0] for t in grid])
    assert np.trapezoid(rate, grid) == pytest.approx(0.3, rel=1e-4)
    for t in (t_change - 3e-4, t_change + 2e-4):  # the rate is the value's derivative
        fd = (goals.value(t + 1e-7)[0] - goals.value(t - 1e-7)[0]) / 2e-7
        assert goals.derivative(t)[0] == pytest.approx(fd, rel=1e-5)


def test_step_goals_sampled_at_once_equal_them_time_by_time():
    from retarget.sim.motors import sample_motors

    test = prepare_step_test(_step_recording())
    goals = StepGoals(test, 1, np.array([7.0, -0.2, 0.5]), shift=0.002, width=0.004)
    times = np.linspace(test.goal_time[0] - 0.1, test.goal_time[-1] + 0.1, 3001)
    theta, theta_dot = sample_motors(goals, times)
    assert theta.shape == theta_dot.shape == (times.size, 3)
    np.testing.assert_allclose(theta, [goals.value(t) for t in times], rtol=0.0, atol=1e-15)
    np.testing.assert_allclose(theta_dot, [goals.derivative(t) for t in times], rtol=1e-13, atol=1e-12)


def test_prepare_starts_at_rest_before_the_step_of_a_late_recording():
    rec = _step_recording()
    test = prepare_step_test(rec)
    assert test.onset_s == pytest.approx(rec.time[40])
    assert test.start_s == pytest.approx(rec.time[39] - 0.1)
    assert test.time[0] == pytest.approx(0.0) and test.step_rad == pytest.approx(0.3)


# ---- bags ---------------------------------------------------------------------------------------------------------

def _write_bag(path, states, commands, joints=("m", "other")):
    """A bag like `retarget play --record BAG --record-topics /joint_states /joint_commands` writes: JointState
    (stamped) and one-point JointTrajectory setpoints; ``commands`` None: no joint_commands topic."""
    from rosbags.rosbag2 import Writer

    from retarget.mocap.bags import typestore

    store = typestore()
    ty = store.types

    def header(ns):
        return ty["std_msgs/msg/Header"](stamp=ty["builtin_interfaces/msg/Time"](sec=ns // 10**9,
                                                                                nanosec=ns % 10**9), frame_id="")

    with Writer(path, version=9) as writer:
        sc = writer.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=store)
        for ns, q in states:
            msg = ty["sensor_msgs/msg/JointState"](header=header(ns), name=list(joints),
                                                   position=np.array([q, 0.1]), velocity=np.zeros(0),
                                                   effort=np.zeros(0))
            writer.write(sc, ns, store.serialize_cdr(msg, "sensor_msgs/msg/JointState"))
        if commands is not None:
            cc = writer.add_connection("/joint_commands", "trajectory_msgs/msg/JointTrajectory", typestore=store)
            for ns, g in commands:
                point = ty["trajectory_msgs/msg/JointTrajectoryPoint"](
                    positions=np.array([g, 0.2]), velocities=np.zeros(2), accelerations=np.zeros(0),
                    effort=np.zeros(0), time_from_start=ty["builtin_interfaces/msg/Duration"](sec=0, nanosec=0))
                msg = ty["trajectory_msgs/msg/JointTrajectory"](header=header(ns), joint_names=list(joints),
                                                               points=[point])
                writer.write(cc, ns, store.serialize_cdr(msg, "trajectory_msgs/msg/JointTrajectory"))
    return path


def test_a_bag_gives_goals_held_between_commands(tmp_path):
    t0 = 1_700_000_000 * 10**9
    states = [(t0 + k * 10_000_000, 0.001 * k) for k in range(50)]
    commands = [(t0 + 5_000_000 + k * 10_000_000, 0.0 if k < 20 else 0.4) for k in range(5, 50)]
    bag = _write_bag(tmp_path / "take", states, commands)
    rec = read_servo_recording(bag, "m")
    assert rec.motor == "m" and rec.n_samples == 50 and rec.other_goals == {"other": 0.2}
    assert np.allclose(rec.present, 0.001 * np.arange(50))
    # The goal at a sample is the last command before it (before the first: the first command).
    assert np.all(rec.goal[:21] == 0.0) and np.all(rec.goal[21:] == 0.4)
    assert rec.time[1] - rec.time[0] == pytest.approx(0.01)


def test_a_bag_without_goals_says_how_to_record_them(tmp_path):
    bag = _write_bag(tmp_path / "take", [(10**9 + k * 10**7, 0.0) for k in range(5)], None)
    with pytest.raises(RecordingError, match="no joint_commands.*topics found: /joint_states.*--record-topics "
                                             "/joint_states /joint_commands"):
        read_servo_recording(bag, "m")


def test_a_bag_joint_not_recorded_is_named(tmp_path):
    bag = _write_bag(tmp_path / "take", [(10**9 + k * 10**7, 0.0) for k in range(5)],
                     [(10**9, 0.0)])
    with pytest.raises(RecordingError, match="no joint 'elbow'.*joints found: m, other"):
        read_servo_recording(bag, "elbow")


# ---- servo files --------------------------------------------------------------------------------------------------

def test_servo_file_round_trip_and_overlay(tmp_path):
    from retarget.model.servo import ServoError
    from retarget.model.servo_file import read_servo_file, servos_with_file, write_servo_file

    fitted = XM430.with_values(kp=9.5, rotor_inertia=2.9e-3, coulomb_friction=0.02)
    path = write_servo_file(tmp_path / "servo.yaml", {"motors": {"b": fitted.to_config()}}, comment="fitted")
    assert path.read_text().startswith("# fitted\nservo:")
    assert not list(tmp_path.glob(".*"))  # no temporary file left
    old = os.umask(0o022)
    try:
        write_servo_file(path, {"motors": {"b": fitted.to_config()}}, comment="fitted")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # a new file's permissions, not a temporary file's 0600
    base = (XM430, SERVO_MODELS["XM540-W270"])
    a, b = servos_with_file(base, ["a", "b"], read_servo_file(path))
    assert a == XM430 and b == fitted  # only the motor the file names changes
    with pytest.raises(ServoError, match="no motor c in this robot; motors: a, b"):
        servos_with_file(base, ["a", "b"], {"motors": {"c": {"kp": 1.0}}})
    (tmp_path / "bad.yaml").write_text("kp: 3\n")
    with pytest.raises(ServoError, match="expected a top-level 'servo:' mapping, found \\['kp'\\]"):
        read_servo_file(tmp_path / "bad.yaml")


def test_servo_file_servos_lay_a_file_over_a_robot_on_disk(tmp_path):
    from tiny_robot import write_tiny_robot

    from retarget.model.servo import ServoError
    from retarget.model.servo_file import servo_file_servos, write_servo_file

    folder = write_tiny_robot(tmp_path / "robot")
    fitted = XM430.with_values(kp=9.25, rotor_inertia=2.7e-3)
    path = write_servo_file(tmp_path / "servo.yaml", fitted.to_config())  # motor-wide keys: every motor
    assert servo_file_servos(folder / "tiny_rod.yaml", path) == (fitted,)
    bad = write_servo_file(tmp_path / "bad.yaml", {"motors": {"m": {"kp": 9.0}}})
    bad.write_text(bad.read_text().replace("kp:", "kpp:"))
    with pytest.raises(ServoError, match="unknown key kpp"):
        servo_file_servos(folder / "tiny_rod.yaml", bad)


def test_a_plan_for_a_servo_file_plays_where_the_planner_knows_the_file(tmp_path):
    """declared_servos and servo_refusal: a plan made for a servo file's servos is refused on the robot's config
    alone and plays where the planner plans with the file (the node's servo_file, `retarget refine --servo`)."""
    from tiny_robot import write_tiny_robot

    from retarget.model.servo_file import write_servo_file
    from retarget.planning.variants import declared_servos, servo_refusal

    robot = write_tiny_robot(tmp_path / "robot") / "tiny_rod.yaml"
    fitted = XM430.with_values(kp=9.25, rotor_inertia=2.7e-3)
    path = write_servo_file(tmp_path / "servo.yaml", fitted.to_config())
    assert declared_servos(robot, path) == {"m": fitted} and declared_servos(robot)["m"] != fitted
    metrics = {"servos": {"motors": {"m": {**fitted.to_config(), "description": "fitted"}}}}
    refused = servo_refusal(metrics, robot)
    assert "other servos than the robot's config declares (" in refused and "not played" in refused
    assert servo_refusal(metrics, robot, path) == ""
    other = write_servo_file(tmp_path / "other.yaml", XM430.with_values(kp=20.0).to_config())
    assert f"declares with the servo file {other} laid over it" in servo_refusal(metrics, robot, other)


# ---- (4) the command, (5) retarget plan --servo ------------------------------------------------------------------

def _cli(argv):
    from retarget.cli import main

    return main(argv)


@pytest.mark.slow
def test_fit_servo_cli_contract(rod_recording, tmp_path, capsys):
    from tiny_robot import write_tiny_robot

    folder = write_tiny_robot(tmp_path / "robot")
    csv_path = write_csv(tmp_path / "step.csv", rod_recording.time, rod_recording.goal, rod_recording.present)
    out = tmp_path / "servo.yaml"
    code = _cli(["fit-servo", str(folder / "tiny_rod.yaml"), "--recording", str(csv_path), "--motor", "m",
                 "--out", str(out), "--json", "--params", "kp,rotor_inertia", "--duration", "0.4",
                 "--no-model-check", "--mesh-axial", "4"])
    assert code == 0
    stdout = capsys.readouterr().out.strip().splitlines()
    data = json.loads(stdout[-1])
    for key in ("kp", "ki", "kd", "rotor_inertia", "coulomb_friction", "viscous_friction", "fitted", "held", "std"):
        assert key in data
    assert data["fitted"] == ["kp", "rotor_inertia"] and "kd" in data["held"]
    assert data["std"]["kp"] > 0 and data["out"] == str(out)
    from retarget.model.servo_file import read_servo_file

    written = read_servo_file(out)["motors"]["m"]
    assert written["kp"] == pytest.approx(data["kp"]) and written["rotor_inertia"] == pytest.approx(
        data["rotor_inertia"])
    # Errors: exit 2, a message naming the problem, nothing written.
    bad = write_csv(tmp_path / "bad.csv", [0.0], [0.0], [0.0], extra=["t", "goal [rad]", "present [rad]"])
    out2 = tmp_path / "servo2.yaml"
    assert _cli(["fit-servo", str(folder / "tiny_rod.yaml"), "--recording", str(bad), "--out", str(out2)]) == 2
    assert "columns found: 't'" in capsys.readouterr().err and not out2.exists()
    assert _cli(["fit-servo", str(folder / "tiny_rod.yaml"), "--recording", str(csv_path), "--motor", "elbow",
                 "--out", str(out2)]) == 2
    assert "no such motor" in capsys.readouterr().err and not out2.exists()


@pytest.mark.slow
@pytest.mark.integration
def test_plan_with_a_servo_file_plans_for_its_servos(tmp_path, monkeypatch, capsys):
    from tiny_robot import reduce_tiny_robot, write_tiny_robot

    from retarget.model.servo_file import write_servo_file

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    folder = write_tiny_robot(tmp_path / "robot")
    npz = reduce_tiny_robot(folder, tmp_path / "model.npz")
    fitted = XM430.with_values(kp=9.25, kd=0.01, rotor_inertia=2.7e-3, viscous_friction=0.02)
    servo = write_servo_file(tmp_path / "servo.yaml", {"motors": {"m": fitted.to_config()}})
    code = _cli(["plan", str(folder / "tiny_rod.yaml"), "--motion", str(folder / "ramp.csv"), "--reduced", str(npz),
                 "--servo", str(servo), "--max-iterations", "1", "--dt", "0.005", "--knot-spacing", "0.04",
                 "--verify-model", "none", "--json", "--allow-unverified-model"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code in (0, 3)
    planned = report["servos"]["motors"]["m"]
    for key in ("kp", "kd", "rotor_inertia", "viscous_friction"):
        assert planned[key] == pytest.approx(getattr(fitted, key))
    assert report["model"]["servo_override"]["planned_for"]["m"]["kp"] == pytest.approx(9.25)
