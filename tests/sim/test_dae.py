"""The full Newton Jacobian of one BDF step against finite differences of the residual, and the solve."""
import numpy as np
import pytest
import scipy.sparse.linalg as spla

from retarget.sim.dae import history_jacobian, residual_and_jacobian
from retarget.sim.integrator import solve_linearized
from retarget.sim.scenarios import build_fourbar, build_two_motor_rod
from retarget.sim.system import build_system


def _systems():
    return {"fourbar": build_system(build_fourbar()), "rod_loop": build_system(build_two_motor_rod(n_axial=2, n_around=6))}


SYSTEMS = _systems()


def _point(system, seed):
    rng = np.random.default_rng(seed)
    u = system.reference_u() + 1e-5 * rng.normal(size=system.n_u)
    v = 0.1 * rng.normal(size=system.n_v)
    lam = rng.normal(size=system.n_lambda)
    s = np.concatenate([u, v, lam])
    u_bar = u + 1e-4 * rng.normal(size=system.n_u)
    v_bar = v + 0.01 * rng.normal(size=system.n_v)
    nm = len(system.motors)
    return s, u_bar, v_bar, 0.1 * rng.normal(size=nm), rng.normal(size=nm)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_newton_jacobian_matches_finite_differences(name):
    system = SYSTEMS[name]
    s, ub, vb, th, thd = _point(system, 0)
    h, a = 1e-3, 50.0

    def res(x, th=th, thd=thd):
        return residual_and_jacobian(system, x, ub, vb, h, th, thd, a, jacobian=False).residual

    lin = residual_and_jacobian(system, s, ub, vb, h, th, thd, a)
    jac = lin.matrix().toarray()
    fd = np.zeros_like(jac)
    for k in range(len(s)):
        e = 1e-7 * max(1.0, abs(s[k]))
        d = np.zeros_like(s)
        d[k] = e
        fd[:, k] = (res(s + d) - res(s - d)) / (2 * e)
    scale = np.abs(fd).max(axis=1, keepdims=True) + 1e-6
    assert np.max(np.abs(jac - fd) / scale) < 1e-6
    # Controls: ∂R/∂θ and ∂R/∂θ̇.
    for m in range(len(th)):
        e = np.zeros_like(th)
        e[m] = 1e-7
        fd_t = (res(s, th + e) - res(s, th - e)) / 2e-7
        fd_td = (res(s, th, thd + e) - res(s, th, thd - e)) / 2e-7
        assert np.allclose(lin.r_theta[:, m], fd_t, atol=1e-6 * (1 + np.abs(fd_t).max()))
        assert np.allclose(lin.r_theta_dot[:, m], fd_td, atol=1e-6 * (1 + np.abs(fd_td).max()))


def test_history_jacobian_matches_finite_differences():
    system = SYSTEMS["rod_loop"]
    s, ub, vb, th, thd = _point(system, 1)
    h = 1e-3
    prev = s.copy()
    nu, nv = system.n_u, system.n_v

    def res(p):
        return residual_and_jacobian(system, s, 4 / 3 * p[:nu], 4 / 3 * p[nu : nu + nv], h, th, thd, 10.0, jacobian=False).residual

    jac = history_jacobian(system, h, 4 / 3).toarray()
    rng = np.random.default_rng(2)
    d = rng.normal(size=len(prev)) * 1e-3
    base = res(prev)
    # The residual is linear in the history: the difference is exact up to rounding of |R|.
    assert np.allclose(jac @ d, res(prev + d) - base, atol=1e-12 * (1 + np.abs(base).max()), rtol=1e-9)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_eliminated_solve_equals_full_space_newton_step(name):
    system = SYSTEMS[name]
    s, ub, vb, th, thd = _point(system, 3)
    lin = residual_and_jacobian(system, s, ub, vb, 1e-3, th, thd, 50.0)
    jac = lin.matrix().tocsc()
    full = spla.spsolve(jac, -lin.residual)
    ours = solve_linearized(system, lin)
    # Both solve the same (badly scaled: stiffness ~1e11 next to unit rows) system to rounding.
    r0 = np.linalg.norm(lin.residual)
    assert np.linalg.norm(jac @ ours + lin.residual) <= 1e-11 * r0
    assert np.linalg.norm(jac @ full + lin.residual) <= 1e-11 * r0
