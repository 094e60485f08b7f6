"""A robot without flexible parts (a rigid arm on Dynamixel servos, as an OpenManipulator-X): the reduced engines
with no deformable body, against the full-space engine and against the servo loop's linear theory."""
from __future__ import annotations

import math

import numpy as np

from retarget.model.robot import RobotBuilder
from retarget.model.servo import SERVO_MODELS
from retarget.sim.integrator import initial_state, simulate_states
from retarget.sim.motors import FunctionMotors
from retarget.sim.reduced.engine import pack_system, simulate_compiled
from retarget.sim.reduced.stepper import solve_static, step
from retarget.sim.reduced.system import build_reduced_system
from retarget.sim.scenarios import box_inertia
from retarget.sim.statics import solve_static as absolute_static
from retarget.sim.system import build_system

XM430 = SERVO_MODELS["XM430-W210"]


def _arm(links: int):
    """``links`` rigid links in a row along x, each on a hinge about z (gravity along −z: it loads the bearings,
    not the servos)."""
    b = RobotBuilder(f"rigid_arm_{links}", gravity=(0.0, 0.0, -9.81))
    parent = None
    for i in range(links):
        mass, x0 = 0.1 / (i + 1), 0.1 * i
        b.add_link(f"link{i}", mass, (x0 + 0.05, 0.0, 0.0), box_inertia(mass, (0.1, 0.01, 0.01)))
        b.add_joint(f"joint{i}", "hinge", parent, f"link{i}", (x0, 0.0, 0.0), (0.0, 0.0, 1.0), motor=True)
        parent = f"link{i}"
    b.track(parent)
    model = b.build()
    return build_system(model.with_servos([XM430] * links))


def test_compiled_engine_runs_a_robot_without_flexible_parts_as_the_full_space_engine():
    absolute = _arm(2)
    rs = build_reduced_system(absolute, [], [])
    assert not rs.bodies and len(pack_system(rs).s0) == 0  # typed even when empty
    goals = FunctionMotors(lambda t: [0.4 * (1 - np.cos(15 * t)), -0.3 * np.sin(15 * t)],
                           lambda t: [6 * np.sin(15 * t), -4.5 * np.cos(15 * t)])
    dt, n = 1e-3, 80
    st_abs = absolute_static(absolute, goals.value(0.0))
    start = solve_static(rs, goals.value(0.0))
    run = simulate_compiled(rs, goals, n * dt, dt, start=start, tol=1e-12, estimate=False)
    prev2, prev, cache = None, start, {}
    for k in range(n):
        prev2, prev = prev, step(rs, prev, prev2, dt, goals, cache, k + 1, tol=1e-12)[0]
    assert np.allclose(run.states[-1], prev.s, atol=1e-9 * (1 + np.abs(prev.s).max()))
    rec = []
    simulate_states(absolute, initial_state(absolute, st_abs.u).replace(lam=st_abs.lam), goals, dt, n,
                    callback=lambda k, s, i: rec.append(s))
    sa, sr = absolute.servo, rs.servo
    assert np.abs(rec[-1].u[sa.u_theta] - st_abs.u[sa.u_theta]).max() > 0.1  # the shafts moved
    assert np.allclose(prev.u[sr.u_theta], rec[-1].u[sa.u_theta], atol=1e-8)
    assert np.allclose(prev.v[sr.v_omega], rec[-1].v[sa.v_omega], atol=1e-6)


def _step_response(goal: float, inertia: float, damping: float, kp: float, t: np.ndarray) -> np.ndarray:
    """θ(t) of J θ̈ + c θ̇ + kp θ = kp g from rest at 0 (under- or overdamped)."""
    roots = np.roots([inertia, damping, kp]).astype(complex)
    a, b = roots
    return goal * (1.0 + (b * np.exp(a * t) - a * np.exp(b * t)) / (a - b)).real


def test_a_rigid_link_on_a_p_servo_follows_the_loops_second_order_step_response():
    """One link on an XM430's P loop below saturation: (J + J_rotor) θ̈ + (stall / no-load speed) θ̇ + kp θ = kp g,
    the servo model's own equations linearized (docs/servo.md), solved in closed form."""
    absolute = _arm(1)
    rs = build_reduced_system(absolute, [], [])
    goal = math.radians(2.0)  # u = kp g = 0.48 N m: far from the duty limit (3 N m)
    link = box_inertia(0.1, (0.1, 0.01, 0.01))[2, 2] + 0.1 * 0.05**2
    damping = XM430.stall_torque / XM430.max_velocity
    dt, duration = 1e-4, 0.25
    start = solve_static(rs, np.array([0.0]))
    run = simulate_compiled(rs, FunctionMotors(lambda t: [goal], lambda t: [0.0]), duration, dt, start=start,
                            tol=1e-12)
    shaft = run.states[:, rs.servo.u_theta[0]]
    theory = _step_response(goal, link + XM430.rotor_inertia, damping, XM430.kp, run.time)
    assert np.abs(shaft - theory).max() < 2e-3 * goal
    # Discriminating: the same theory without the rotor's inertia (the link alone) is far off.
    assert np.abs(shaft - _step_response(goal, link, damping, XM430.kp, run.time)).max() > 0.05 * goal
