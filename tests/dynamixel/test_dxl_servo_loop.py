"""The emulated servos' position loop (retarget.dynamixel.servo_loop) against theory: the linear loop's step
response, its sag under a load (τ/kp), the torque–speed line when the duty saturates, the free shaft with torque
off, the goal profile, what Present Current and PWM report, and the control table's gains driving the loop."""
from __future__ import annotations

import math

import numpy as np
import pytest

from retarget.dynamixel.control_table import load_control_table
from retarget.dynamixel.dynamics import ServoCommand
from retarget.dynamixel.emulator import EmulatedBus
from retarget.dynamixel.servo_loop import NO_DRIVE_GAIN, ServoLoop, factory_servo, loop_params
from retarget.errors import InputError
from retarget.model.servo import SERVO_MODELS, control_table_gains
from retarget.sim.servo import pack_params, servo_torque

XM430 = SERVO_MODELS["XM430-W210"]
TABLE = load_control_table()
TICK_RAD = 2.0 * math.pi / 4096


def command(goal, on=True, pv=np.inf, pa=np.inf, vl=0.0, p=800.0, i=0.0, d=0.0, pwm=885.0) -> ServoCommand:
    g = np.atleast_1d(np.asarray(goal, dtype=float))
    n = g.size
    return ServoCommand(g, np.full(n, on), np.full(n, pv), np.full(n, pa), np.full(n, vl),
                        np.tile([p, i, d], (n, 1)).astype(float), np.full(n, pwm, dtype=float))


def loop(n: int = 1, **kwargs: object) -> ServoLoop:
    servo = ServoLoop.for_table(n, TABLE, **kwargs)
    servo.reset(np.zeros(n))
    return servo


def test_factory_servo_and_torque_constant_are_the_models() -> None:
    assert factory_servo(TABLE) == XM430
    for model in ("XM430-W350", "XM540-W270"):
        assert factory_servo(load_control_table(model=model)) == SERVO_MODELS[model]
    servo = loop()
    assert servo.amperes_per_newton_metre[0] == pytest.approx(2.3 / 3.0)
    with pytest.raises(InputError, match="ideal"):
        ServoLoop([SERVO_MODELS["ideal"]], 1.0)


def test_small_step_is_the_linear_second_order_loop() -> None:
    """Unsaturated, no load: J θ̈ + (stall/no_load) θ̇ + kp θ = kp g, from rest (backward Euler at 10 µs: the
    closed form to 0.2 % of the step)."""
    servo = loop()
    g, dt = 0.05, 1e-5
    j, c, kp = XM430.rotor_inertia, XM430.stall_torque / XM430.max_velocity, XM430.kp
    r1, r2 = np.roots([j, c, kp])  # real and distinct: the loop is overdamped (ζ = 1.04)
    assert np.isreal(r1) and np.isreal(r2)
    r1, r2 = float(np.real(r1)), float(np.real(r2))
    t, x = [], []
    for k in range(1, 11):
        x.append(servo.advance(command(g), dt, 1000).position[0])
        t.append(k * 1000 * dt)
    t = np.array(t)
    exact = g * (1.0 - (r2 * np.exp(r1 * t) - r1 * np.exp(r2 * t)) / (r2 - r1))
    assert np.max(np.abs(np.array(x) - exact)) < 2e-3 * g


def test_a_load_sags_the_shaft_by_tau_over_kp_and_current_and_pwm_report_it() -> None:
    """At rest the loop's torque carries the load: θ − g = τ_load / kp exactly (the law's fixed point), the duty
    is −τ_load/stall, the current −τ_load times the torque constant."""
    load = -1.06  # [N m]: a horizontal 0.7 m rod with a 100 g tip mass
    servo = loop(load_torque=[load])
    fb = servo.advance(command(1.0), 2e-3, 2000)
    assert fb.position[0] - 1.0 == pytest.approx(load / XM430.kp, rel=1e-9)
    assert abs(fb.velocity[0]) < 1e-9
    assert fb.pwm[0] == pytest.approx(-load / 3.0, rel=1e-9)
    assert fb.current[0] == pytest.approx(-load * 2.3 / 3.0, rel=1e-9)


def test_backward_euler_step_solves_the_servo_law() -> None:
    """One step's result satisfies J (ω − ω0)/h = τ(g, ġ, θ, ω, ι) + load with θ = θ0 + h ω: the simulators'
    law."""
    servo = loop(load_torque=[0.3], load_inertia=[0.01])
    before = servo.advance(command(0.4, i=300.0, d=500.0), 2e-3, 7)
    th0, w0, io0 = before.position[0], before.velocity[0], servo.integral[0]
    assert io0 != 0.0
    h = 2e-3
    fb = servo.step(command(0.4, i=300.0, d=500.0), h)
    par = pack_params([loop_params(XM430, 800, 300, 500, 885, True)])[0]
    iota = io0 + h * (0.4 - fb.position[0])
    tau, _ = servo_torque(par, 0.4, 0.0, fb.position[0], fb.velocity[0], iota)
    assert fb.position[0] == pytest.approx(th0 + h * fb.velocity[0], abs=1e-15)
    j = XM430.rotor_inertia + 0.01
    assert j * (fb.velocity[0] - w0) / h == pytest.approx(tau + 0.3, abs=1e-9)


def test_a_large_step_runs_at_the_speed_the_duty_limit_allows() -> None:
    """Saturated duty d: the torque–speed line gives zero torque at ω = d · no-load speed (no load, no friction)."""
    for pwm in (885.0, 442.5):
        servo = loop()
        fb = servo.advance(command(20.0, pwm=pwm), 1e-3, 300)
        assert fb.velocity[0] == pytest.approx(pwm / 885.0 * XM430.max_velocity, rel=1e-6)
        assert fb.pwm[0] == pytest.approx(pwm / 885.0, rel=1e-9)


def test_p_gain_sets_the_stiffness() -> None:
    load = -0.5
    errors = {}
    for p in (400.0, 800.0, 1600.0):
        servo = loop(load_torque=[load])
        fb = servo.advance(command(0.0, p=p), 2e-3, 3000)
        errors[p] = fb.position[0]
        kp = control_table_gains(p, 0, 0, 3.0)[0]
        assert errors[p] == pytest.approx(load / kp, rel=1e-9)
    assert errors[400.0] == pytest.approx(2 * errors[800.0]) and errors[1600.0] == pytest.approx(errors[800.0] / 2)


def test_integral_gain_removes_the_sag() -> None:
    servo = loop(load_torque=[-1.0])
    fb = servo.advance(command(0.5, i=1000.0), 1e-3, 20000)
    assert fb.position[0] == pytest.approx(0.5, abs=1e-9)


def test_torque_off_frees_the_shaft_to_the_back_emf_speed() -> None:
    """No drive: a constant load accelerates the shaft to ω = τ_load / (stall / no_load) (back EMF at zero duty)."""
    servo = loop(load_torque=[0.2])
    fb = servo.advance(command(0.0, on=False, i=100.0), 1e-3, 500)
    assert fb.velocity[0] == pytest.approx(0.2 / (3.0 / XM430.max_velocity), rel=1e-6)
    assert abs(fb.pwm[0]) < 1e-12 and servo.integral[0] == 0.0
    # Profile and goal: the trajectory follows the free shaft.
    assert servo.trajectory[0][0] == pytest.approx(fb.position[0] - 1e-3 * fb.velocity[0], rel=1e-6)
    off = loop_params(XM430, 800, 100, 50, 885, False)
    assert off.kp == NO_DRIVE_GAIN and off.ki == NO_DRIVE_GAIN and off.kd == 0.0


def test_profile_velocity_and_acceleration_shape_the_goal() -> None:
    servo = loop()
    traj = []
    for _ in range(2500):
        servo.step(command(2.0, pv=1.5, pa=10.0), 1e-3)
        traj.append(servo.trajectory)
    g = np.array([t[0][0] for t in traj])
    v = np.array([t[1][0] for t in traj])
    assert np.max(v) == pytest.approx(1.5)
    assert np.max(np.diff(v)) <= 10.0 * 1e-3 + 1e-12
    assert np.argmax(v >= 1.5 - 1e-9) * 1e-3 == pytest.approx(0.15, abs=2e-3)  # trapezoid: 1.5 / 10 s
    assert g[-1] == 2.0 and v[-1] == 0.0
    # The shaft follows the trajectory (the loop acts on it, not on the raw goal).
    fb = servo.advance(command(2.0, pv=1.5, pa=10.0), 1e-3, 500)
    assert fb.position[0] == pytest.approx(2.0, abs=1e-6)
    # The Velocity Limit caps the Profile Velocity.
    servo = loop()
    servo.advance(command(2.0, pv=1.5, vl=1.0), 1e-3, 300)
    assert servo.trajectory[1][0] == pytest.approx(1.0)


def test_advance_equals_that_many_steps() -> None:
    a, b = loop(2, load_torque=[0.3, -0.1]), loop(2, load_torque=[0.3, -0.1])
    cmd = command(np.array([0.8, -0.3]), pv=3.0, pa=40.0)
    for _ in range(50):
        expected = a.step(cmd, 2e-3)
    got = b.advance(cmd, 2e-3, 50)
    for field in ("position", "velocity", "current", "pwm"):
        np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))


def test_the_emulated_bus_sags_by_a_horizontal_rods_moment_and_a_p_gain_write_changes_it() -> None:
    """Acceptance: a servo holding a horizontal rod (its moment as a constant load) at factory gains reports a
    steady Present Position error of τ/kp, to the tick; writing Position P Gain 1600 halves it; Present Current
    and Present PWM report the load."""
    m_tip, m_rod, length, g = 0.1, 0.108, 0.7, 9.81
    load = -g * (m_tip * length + m_rod * length / 2)  # [N m] about the shaft
    clock = [0.0]
    bus = EmulatedBus([1], dynamics=ServoLoop.for_table(1, TABLE, load_torque=[load]), clock=lambda: clock[0])
    servo = bus.servos[1]
    servo.write(TABLE["Torque Enable"].address, b"\x01")
    goal = 2048 + 1024  # +90°
    servo.write(TABLE["Goal Position"].address, goal.to_bytes(4, "little"))
    clock[0] += 3.0
    bus.advance()
    error_ticks = servo.get("Present Position") - goal
    assert abs(error_ticks * TICK_RAD - load / XM430.kp) <= TICK_RAD
    assert servo.get("Present Current") == pytest.approx(-load * 2.3 / 3.0 / 2.69e-3, abs=1)
    assert servo.get("Present PWM") == pytest.approx(-load / 3.0 * 885, abs=1)
    assert servo.write(TABLE["Position P Gain"].address, (1600).to_bytes(2, "little")) == 0
    clock[0] += 3.0
    bus.advance()
    stiffer = servo.get("Present Position") - goal
    assert abs(stiffer * TICK_RAD - load / (2 * XM430.kp)) <= TICK_RAD
    assert abs(stiffer) == pytest.approx(abs(error_ticks) / 2, abs=1)
