"""Shared checks of the simulator tests: a random DAE evaluation point and the FD check of a BDF Newton Jacobian."""
from __future__ import annotations

import numpy as np

from retarget.sim.bdf import StepInputs
from retarget.sim.dae import residual_and_jacobian


def random_point(system, seed: int):
    """``(S, Ū, V̄, θ, θ̇)`` near the reference configuration (seeded)."""
    rng = np.random.default_rng(seed)
    u = system.reference_u() + 1e-5 * rng.normal(size=system.n_u)
    v = 0.1 * rng.normal(size=system.n_v)
    lam = rng.normal(size=system.n_lambda)
    s = np.concatenate([u, v, lam])
    u_bar = u + 1e-4 * rng.normal(size=system.n_u)
    v_bar = v + 0.01 * rng.normal(size=system.n_v)
    nm = len(system.motors)
    return s, u_bar, v_bar, 0.1 * rng.normal(size=nm), rng.normal(size=nm)


def assert_newton_jacobian_matches_fd(system, s, ub, vb, h: float, a: float, th, thd) -> None:
    """∂R/∂S, ∂R/∂θ and ∂R/∂θ̇ of one BDF step against central differences (row-relative 1e-6)."""

    def res(x, th=th, thd=thd):
        return residual_and_jacobian(system, x, StepInputs(ub, vb, h, th, thd, a), jacobian=False).residual

    lin = residual_and_jacobian(system, s, StepInputs(ub, vb, h, th, thd, a))
    jac = lin.matrix().toarray()
    fd = np.zeros_like(jac)
    for k in range(len(s)):
        e = 1e-7 * max(1.0, abs(s[k]))
        d = np.zeros_like(s)
        d[k] = e
        fd[:, k] = (res(s + d) - res(s - d)) / (2 * e)
    scale = np.abs(fd).max(axis=1, keepdims=True) + 1e-6
    assert np.max(np.abs(jac - fd) / scale) < 1e-6
    for m in range(len(th)):
        e = np.zeros_like(th)
        e[m] = 1e-7
        fd_t = (res(s, th + e) - res(s, th - e)) / 2e-7
        fd_td = (res(s, th, thd + e) - res(s, th, thd - e)) / 2e-7
        assert np.allclose(lin.r_theta[:, m], fd_t, atol=1e-6 * (1 + np.abs(fd_t).max()))
        assert np.allclose(lin.r_theta_dot[:, m], fd_td, atol=1e-6 * (1 + np.abs(fd_td).max()))
