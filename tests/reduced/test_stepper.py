"""Tests of the reduced DAE step (retarget.sim.reduced.stepper) on a rod closing a loop between two motors.

- the dense Newton Jacobian against central finite differences of the residual (all blocks, incl. motors,
  a coupling to a non-reference body and the relative inertial terms);
- the full-space relative formulation (U = I, all elements) against the absolute engine: the quasi-static
  equilibrium to solver tolerance, and a short dynamic run converging to the absolute one at second order in dt.
"""
from __future__ import annotations

import numpy as np
import pytest

from retarget.sim.bdf import StepInputs
from retarget.sim.integrator import initial_state, simulate_states
from retarget.sim.motors import FunctionMotors
from retarget.sim.reduced.basis import ReducedBasis, rigid_modes
from retarget.sim.reduced.cubature import Cubature, _element_rows
from retarget.sim.reduced.stepper import history_jacobian, residual_and_jacobian, solve_static, step
from retarget.sim.reduced.system import build_reduced_system, reference_bodies
from retarget.sim.scenarios import build_two_motor_rod
from retarget.sim.statics import solve_static as absolute_static
from retarget.sim.system import build_system


@pytest.fixture(scope="module")
def absolute():
    return build_system(build_two_motor_rod(length=0.3, diameter=0.004, separation=0.3, n_axial=4, n_around=6))


def _all_elements(elastic, basis) -> Cubature:
    g = elastic.geometry
    e = np.arange(elastic.mesh.n_tets)
    return Cubature(e, np.ones(len(e)), _element_rows(elastic.mesh.tets, basis), g.grad, g.weights, elastic.mu, elastic.lam, 0.0)


def _reduced(absolute, full: bool):
    body = absolute.deformable[0]
    ref = absolute.rigid[reference_bodies(absolute)[0]]
    local = body.rest_positions - ref.reference_com
    if full:
        modes = np.eye(body.n_dofs)
        basis = ReducedBasis(modes, 0, 1.0, np.zeros(0))
    else:
        rng = np.random.default_rng(0)
        extra = rng.normal(size=(body.n_dofs, 4)) * 1e-2
        modes = np.hstack([rigid_modes(local, body.mass_matrix), extra])
        basis = ReducedBasis(modes, 6, 1.0, np.zeros(4))
    return build_reduced_system(absolute, [basis], [_all_elements(body.elastic, modes)])


def _motors():
    return FunctionMotors(lambda t: [0.3 * (1 - np.cos(20 * t)), -0.1 * t], lambda t: [6 * np.sin(20 * t), -0.1])


def test_reference_body_is_closest_to_world(absolute):
    # Both arms hang on the world by their motors: the tie goes to the first one (arm1).
    assert [absolute.rigid[i].name for i in reference_bodies(absolute)] == ["arm1"]


def test_newton_jacobian_against_finite_differences(absolute):
    rs = _reduced(absolute, full=False)
    rng = np.random.default_rng(1)
    u = rs.reference_u()
    u[: 7 * rs.n_rigid] += rng.normal(size=7 * rs.n_rigid) * 0.05
    u[7 * rs.n_rigid :] = rng.normal(size=rs.n_u - 7 * rs.n_rigid) * 0.003
    # Rigid modes (the first 6, ~10 m per unit z) stay small: a finite rigid rotation strains the rod.
    u[7 * rs.n_rigid : 7 * rs.n_rigid + 6] *= 1e-3
    v = rng.normal(size=rs.n_v)
    lam = rng.normal(size=rs.n_lambda)
    s = np.concatenate([u, v, lam])
    u_bar = u + rng.normal(size=rs.n_u) * 1e-3
    v_bar = v + rng.normal(size=rs.n_v) * 1e-1
    args = (u_bar, v_bar, 1e-3, np.array([0.2, -0.1]), np.array([1.5, 0.3]), 500.0)
    jac = residual_and_jacobian(rs, s, StepInputs(*args)).jacobian
    fd = np.zeros_like(jac)
    eps = 1e-4  # 4th-order stencil: the stiff elastic rows (~1e4) need a large step against round-off

    def res(x):
        return residual_and_jacobian(rs, x, StepInputs(*args), jacobian=False).residual

    # z columns: the step is scaled by the mode's size (a unit rigid-rotation mode turns the rod by ~40 rad).
    scale = np.ones(len(s))
    amp = np.abs(rs.bodies[0].basis.modes).max(axis=0)
    scale[rs.z_slice_u(0)] = 0.1 / np.maximum(1.0, amp)
    scale[rs.n_u + rs.z_slice_v(0).start : rs.n_u + rs.z_slice_v(0).stop] = 0.1 / np.maximum(1.0, amp)
    for j in range(len(s)):
        e = np.zeros(len(s))
        e[j] = eps * scale[j]
        fd[:, j] = (-res(s + 2 * e) + 8 * res(s + e) - 8 * res(s - e) + res(s - 2 * e)) / (12 * e[j])
    rel = np.abs(fd - jac) / (np.abs(fd).max(axis=1, keepdims=True) + 1e-8)
    # The floor is FD round-off in the stiff elastic rows (entries up to 1e13 N/m per unit z); the agreement of
    # single entries improves to ~1e-12 as the step is refined, which a fixed-step table cannot show. The damping
    # β K(z) ż raises that floor in the rigid-mode rows (K's rigid rows are differences of large element terms):
    # worst entry 3.3e-5 of its row, where the β part alone agrees with converging differences to 1e-7
    # (test_cubature.test_tangent_derivative_against_finite_differences checks it directly).
    assert np.max(rel) < 5e-5, np.unravel_index(np.argmax(rel), rel.shape)
    # History: R depends on V̄ through −mass/h.
    lin = residual_and_jacobian(rs, s, StepInputs(*args))
    hj = history_jacobian(rs, lin, 1e-3, 1.0)
    dv = np.zeros(rs.n_v)
    dv[3] = 1e-4
    r0 = residual_and_jacobian(rs, s, StepInputs(u_bar, v_bar, *args[2:]), jacobian=False).residual
    r1 = residual_and_jacobian(rs, s, StepInputs(u_bar, v_bar + dv, *args[2:]), jacobian=False).residual
    assert np.allclose(r1 - r0, hj[:, rs.n_u : rs.n_u + rs.n_v] @ dv, rtol=1e-7, atol=1e-9)


def _tip_positions_absolute(absolute, u):
    body = absolute.deformable[0]
    off = absolute.u_offsets[0]
    return body.rest_positions + u[off : off + body.n_dofs].reshape(-1, 3)


def _tip_positions_reduced(rs, u):
    from retarget.sim.rotation import rotation_matrix

    rb = rs.bodies[0]
    i = rb.reference
    return rb.world_nodes(u[7 * i : 7 * i + 3], rotation_matrix(u[7 * i + 3 : 7 * i + 7]), u[rs.z_slice_u(0)])


def test_full_space_statics_equal_absolute(absolute):
    rs = _reduced(absolute, full=True)
    theta = np.array([0.2, -0.15])
    st_abs = absolute_static(absolute, theta)
    st_red = solve_static(rs, theta)
    x_abs = _tip_positions_absolute(absolute, st_abs.u)
    x_red = _tip_positions_reduced(rs, st_red.u)
    sag = np.max(np.abs(x_abs - absolute.deformable[0].rest_positions))
    assert sag > 1e-3
    assert np.max(np.abs(x_abs - x_red)) < 1e-9
    assert np.allclose(st_abs.u[:14], st_red.u[:14], atol=1e-10)
    assert np.allclose(st_abs.lam, st_red.lam, rtol=1e-6, atol=1e-8 * np.abs(st_abs.lam).max())


@pytest.mark.slow
def test_far_motor_angles_are_reached_by_continuation(absolute):
    """Newton from the reference diverges at ±1.5 rad; the solve then walks the motors there, as the full one."""
    from retarget.sim.errors import NewtonFailed
    from retarget.sim.reduced.stepper import _newton_static

    rs = _reduced(absolute, full=True)
    theta = np.array([1.5, -1.5])
    with pytest.raises(NewtonFailed):
        _newton_static(rs, theta, None, 1e-11, 40)
    st_red = solve_static(rs, theta)
    st_abs = absolute_static(absolute, theta)
    assert np.max(np.abs(_tip_positions_absolute(absolute, st_abs.u) - _tip_positions_reduced(rs, st_red.u))) < 1e-9


def _run_both(absolute, rs, dt, n):
    motors = _motors()
    st_abs = absolute_static(absolute, motors.value(0.0))
    st_abs = initial_state(absolute, st_abs.u).replace(lam=st_abs.lam)
    final_abs = simulate_states(absolute, st_abs, motors, dt, n)
    st = solve_static(rs, motors.value(0.0))
    prev2, prev, cache = None, st, {}
    for k in range(1, n + 1):
        new, _ = step(rs, prev, prev2, dt, motors, cache, k)
        prev2, prev = prev, new
    return _tip_positions_absolute(absolute, final_abs.u), _tip_positions_reduced(rs, prev.u)


def _damped(absolute, alpha, beta):
    import dataclasses

    bodies = tuple(dataclasses.replace(d, alpha=alpha, beta=beta) for d in absolute.deformable)
    return dataclasses.replace(absolute, deformable=bodies)


@pytest.mark.slow
def test_full_space_dynamics_converge_to_absolute_at_second_order(absolute):
    # The stiffness-proportional damping β K ż differs in kind between the engines (docs/reduced.md): compare the
    # undamped systems, where the two formulations are the same DAE in different coordinates.
    absolute = _damped(absolute, 0.0, 0.0)
    rs = _reduced(absolute, full=True)
    t_end = 0.02
    errs = []
    for n in (10, 20):
        xa, xr = _run_both(absolute, rs, t_end / n, n)
        errs.append(np.max(np.abs(xa - xr)))
    moved = np.max(np.abs(xa - _tip_positions_absolute(absolute, np.zeros(absolute.n_u))))
    assert moved > 1e-3
    assert errs[1] < 0.02 * moved
    assert errs[0] / errs[1] > 3.0  # second order: 4x per halving (BDF1 start and Baumgarte cost a little)


@pytest.mark.slow
def test_mass_damping_acts_on_absolute_velocities_as_in_the_absolute_engine(absolute):
    """``α M u̇`` of the absolute engine damps the nodes' absolute velocities, rigid motion of the part included; the
    reduced engines apply the same force (the generalized mass times α [v, ω, ż]), so with a strong α the full-space
    reduced runs still converge to the absolute one at second order (3.7e-7 → 4.9e-8 m; with α on ż alone the gap
    stays at 1.06e-6 m whatever the step). Both the reference stepper and the compiled engine (the replay check's)."""
    from retarget.sim.reduced.engine import simulate_compiled

    absolute = _damped(absolute, 50.0, 0.0)
    rs = _reduced(absolute, full=True)
    t_end = 0.02
    errs, errs_compiled = [], []
    for n in (10, 20):
        xa, xr = _run_both(absolute, rs, t_end / n, n)
        run = simulate_compiled(rs, _motors(), t_end, t_end / n)
        errs.append(np.max(np.abs(xa - xr)))
        errs_compiled.append(np.max(np.abs(xa - _tip_positions_reduced(rs, run.state(n).u))))
    for e in (errs, errs_compiled):
        assert e[0] / e[1] > 3.0, e
