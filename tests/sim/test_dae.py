"""The full Newton Jacobian of one BDF step against finite differences of the residual, and the solve."""
import numpy as np
import pytest
import scipy.sparse.linalg as spla

from sim_checks import assert_newton_jacobian_matches_fd, random_point

from retarget.sim.bdf import StepInputs
from retarget.sim.dae import history_jacobian, residual_and_jacobian
from retarget.sim.integrator import solve_linearized
from retarget.sim.scenarios import build_fourbar, build_two_motor_rod
from retarget.sim.system import build_system


def _systems():
    return {"fourbar": build_system(build_fourbar()), "rod_loop": build_system(build_two_motor_rod(n_axial=2, n_around=6))}


SYSTEMS = _systems()


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_newton_jacobian_matches_finite_differences(name):
    system = SYSTEMS[name]
    s, ub, vb, th, thd = random_point(system, 0)
    assert_newton_jacobian_matches_fd(system, s, ub, vb, 1e-3, 50.0, th, thd)


def test_history_jacobian_matches_finite_differences():
    system = SYSTEMS["rod_loop"]
    s, ub, vb, th, thd = random_point(system, 1)
    h = 1e-3
    prev = s.copy()
    nu, nv = system.n_u, system.n_v

    def res(p):
        inputs = StepInputs(4 / 3 * p[:nu], 4 / 3 * p[nu : nu + nv], h, th, thd, 10.0)
        return residual_and_jacobian(system, s, inputs, jacobian=False).residual

    jac = history_jacobian(system, h, 4 / 3).toarray()
    rng = np.random.default_rng(2)
    d = rng.normal(size=len(prev)) * 1e-3
    base = res(prev)
    # The residual is linear in the history: the difference is exact up to rounding of |R|.
    assert np.allclose(jac @ d, res(prev + d) - base, atol=1e-12 * (1 + np.abs(base).max()), rtol=1e-9)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_eliminated_solve_equals_full_space_newton_step(name):
    system = SYSTEMS[name]
    s, ub, vb, th, thd = random_point(system, 3)
    lin = residual_and_jacobian(system, s, StepInputs(ub, vb, 1e-3, th, thd, 50.0))
    jac = lin.matrix().tocsc()
    full = spla.spsolve(jac, -lin.residual)
    ours = solve_linearized(system, lin)
    # Both solve the same (badly scaled: stiffness ~1e11 next to unit rows) system to rounding.
    r0 = np.linalg.norm(lin.residual)
    assert np.linalg.norm(jac @ ours + lin.residual) <= 1e-11 * r0
    assert np.linalg.norm(jac @ full + lin.residual) <= 1e-11 * r0
