"""The fast Newton path against the reference residual and Newton step (:mod:`retarget.sim.dae`,
:func:`retarget.sim.integrator.solve_linearized`), dense against sparse, and the static continuation."""
import numpy as np
import pytest

from sim_checks import random_point

from retarget.sim.bdf import StepInputs
from retarget.sim.dae import residual_and_jacobian
from retarget.sim.integrator import solve_linearized
from retarget.sim.newton import build_newton_plan, constraint_values, factorize_fast, newton_plan, residual
from retarget.sim.scenarios import build_fourbar, build_two_motor_rod
from retarget.sim.system import build_system

SYSTEMS = {
    "fourbar": build_system(build_fourbar()),
    "rod_loop": build_system(build_two_motor_rod(n_axial=2, n_around=6)),
}


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_fast_residual_equals_reference(name):
    system = SYSTEMS[name]
    s, ub, vb, th, thd = random_point(system, 0)
    ref = residual_and_jacobian(system, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0), jacobian=False)
    for jac in (False, True):
        ours = residual(newton_plan(system), s, StepInputs(ub, vb, 1e-3, th, thd, 50.0), jac)
        r = np.concatenate([ours.r_u, ours.r_v, ours.r_lambda])
        assert np.allclose(r, ref.residual, rtol=0, atol=1e-12 * (1 + np.abs(ref.residual).max()))


@pytest.mark.parametrize("name", sorted(SYSTEMS))
@pytest.mark.parametrize("dense", [True, False])
def test_fast_newton_step_equals_exact_full_space_step(name, dense):
    """With the β dK term kept (``exact``), the eliminated, pattern-assembled step is the exact Newton step."""
    system = SYSTEMS[name]
    s, ub, vb, th, thd = random_point(system, 3)
    lin = residual_and_jacobian(system, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0))
    ref = solve_linearized(system, lin)
    plan = build_newton_plan(system, dense=dense)
    res = residual(plan, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0), True, exact=True)
    ours = factorize_fast(plan, res).solve(res)
    assert np.linalg.norm(ours - ref) <= 1e-8 * np.linalg.norm(ref)


def test_dropping_the_damping_derivative_changes_the_step_only_slightly():
    system = SYSTEMS["rod_loop"]
    assert system.deformable[0].beta > 0
    s, ub, vb, th, thd = random_point(system, 4)
    plan = newton_plan(system)
    exact = residual(plan, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0), True, exact=True)
    approx = residual(plan, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0), True)
    d_exact = factorize_fast(plan, exact).solve(exact)
    d_approx = factorize_fast(plan, approx).solve(approx)
    # A random state with large velocities (|u̇| ~ 0.1 m/s per DOF): still a small change of direction.
    assert np.linalg.norm(d_approx - d_exact) <= 3e-2 * np.linalg.norm(d_exact)


def test_constraint_values_match_reference():
    from retarget.sim.dae import constraint_terms

    for system in SYSTEMS.values():
        s, _, _, th, _ = random_point(system, 5)
        u = s[: system.n_u]
        nm = len(system.motors)
        ref = constraint_terms(system, u, np.zeros(system.n_v), np.zeros(system.n_lambda), th, np.zeros(nm), 0.0,
                               second_order=False).c
        assert np.allclose(constraint_values(system, u, th), ref, rtol=0, atol=1e-15)


def test_static_solve_far_from_the_reference():
    from retarget.sim.statics import solve_static

    system = SYSTEMS["rod_loop"]
    # Both arms at 1.2 rad: the loop stays closed (a parallelogram), far from the reference.
    state = solve_static(system, [1.2, 1.2])
    c = constraint_values(system, state.u, np.array([1.2, 1.2]))
    assert np.max(np.abs(c)) < 1e-9
    rot = state.u[3:7]
    assert 2 * np.arctan2(rot[3], rot[0]) == pytest.approx(1.2, abs=1e-6)
