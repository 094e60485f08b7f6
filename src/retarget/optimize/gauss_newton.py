"""Gauss–Newton / Levenberg–Marquardt on the tracking least squares, with exact forward sensitivities.

The tracking term is a weighted least-squares sum (:mod:`retarget.optimize.objective`)::

    G(x) = ½ |r(x)|²,   r = [√(q_n w_pos) (c_k(t_n) − c̄_k(t_n)),  √(q_n w_ori) (R_k F_k − R̄_k)(t_n)]

so its Gauss–Newton Hessian ``JᵣᵀJᵣ`` needs only first derivatives of the tracked poses. They come from the
*tangent-linear* pass of the BDF2 simulation (the forward counterpart of the adjoint in
:mod:`retarget.optimize.adjoint`), exact to the Newton tolerance, one column per parameter::

    (∂R_n/∂S_n) δS_n = −(∂R_n/∂S_{n−1}) δS_{n−1} − (∂R_n/∂S_{n−2}) δS_{n−2} − (∂R_n/∂θ) δθ_n − (∂R_n/∂θ̇) δθ̇_n

with ``δS_0 = 0`` (the quasi-static start does not depend on ``x``) and ``δθ_n = (B0 T)[n]``, ``δθ̇_n =
(B1 T)[n]`` per motor. The parameter-only terms (regularizers, speed penalty) enter with their exact Hessian
(differences of their gradients: they are cheap and piecewise quadratic).

Why: the two-rod problem's Hessian has ~30 eigenvalues spread over three decades (docs/optimize.md); L-BFGS
must learn them one per iteration, a Gauss–Newton step takes them all at once. A tangent pass costs one
factorization per step (as the adjoint) plus one solve per parameter and step (``--method auto`` uses it up to
:data:`MAX_PARAMETERS`). Measured (docs/optimize.md, session 4): on two_rods the full Gauss–Newton steps leave the
region the 3-mode reduced model represents (inverted cubature elements, ρ < 0), the damping then keeps the
steps short, and it ends behind L-BFGS-B in the same budget; L-BFGS-B is the planner's default.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import AdjointProblem, Rollout
from retarget.optimize.engines import step_sensitivities

__all__ = ["MAX_PARAMETERS", "LeastSquares", "parameter_hessian", "supports_tangent", "tangent_least_squares"]

#: Above this many parameters the tangent pass (one solve per parameter and step) costs more than L-BFGS saves.
MAX_PARAMETERS: int = 200


@dataclass(frozen=True, eq=False)
class LeastSquares:
    """The tracking residual and its Jacobian at one point.

    Attributes:
        residual: ``r`` (m,); ``½|r|²`` is the tracking term ``G``.
        jacobian: ``∂r/∂x`` (m, n_parameters).
    """

    residual: NDArray[np.float64]
    jacobian: NDArray[np.float64]

    @property
    def gradient(self) -> NDArray[np.float64]:
        """``∂G/∂x = Jᵣᵀ r``."""
        return self.jacobian.T @ self.residual

    @property
    def hessian(self) -> NDArray[np.float64]:
        """Gauss–Newton ``JᵣᵀJᵣ``."""
        return self.jacobian.T @ self.jacobian


def supports_tangent(problem: AdjointProblem) -> bool:
    """Whether the engine's step sensitivities offer the forward solve and history products."""
    st = problem.start
    try:
        sens = problem.engine.sensitivity(st, st, None, problem.dt, problem.template)
    except Exception:  # an engine that cannot linearize at rest cannot be used either way
        return False
    return sens.solve is not None and sens.history is not None


def _motor_tangents(problem: AdjointProblem, times: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
    """``∂θ_n/∂x`` and ``∂θ̇_n/∂x`` (N + 1, n_motors, n_parameters) (x is motor-major)."""
    par = problem.parametrization
    nm, nf = int(par.n_motors), int(par.n_free)
    out = []
    for d in (0, 1):
        per_motor = np.asarray(par.parameter_basis(problem.template.basis_matrix(times, d)).todense())  # (n_t, nf)
        full = np.zeros((len(times), nm, nm * nf))
        for m in range(nm):
            full[:, m, m * nf : (m + 1) * nf] = per_motor
        out.append(full)
    return out[0], out[1]


def tangent_least_squares(problem: AdjointProblem, x: NDArray[np.float64], fwd: Rollout,
                          progress: Callable[[int, int], None] | None = None) -> LeastSquares:
    """The tracking residual and its exact Jacobian at ``x`` by the tangent-linear pass over the rollout ``fwd``.

    Args:
        problem: the adjoint problem (engine with forward sensitivities: :func:`supports_tangent`).
        x: the parameters ``fwd`` was simulated with.
        fwd: the forward rollout at ``x``.
        progress: ``progress(done, total)`` per step.
    """
    from retarget.sim.rotation import rotate_jacobian

    motors = problem.profiles(np.asarray(x, dtype=float))
    n = problem.n_steps
    times = fwd.times
    d_theta, d_theta_dot = _motor_tangents(problem, times)
    tr = problem.tracking
    idx = problem.poses.indices
    k = len(idx)
    p = problem.parametrization.n_parameters
    sq_pos = np.sqrt(tr.quadrature[:, None] * tr.position_weights)  # (n_t, k)
    ori = tr.tracks_orientation
    rows_per = 3 + (9 if ori else 0)
    res = np.zeros((n + 1, k, rows_per))
    jac = np.zeros((n + 1, k, rows_per, p))
    pos = problem.poses.positions(fwd.matrix)
    res[:, :, :3] = sq_pos[:, :, None] * (pos - tr.target_positions)
    if ori:
        assert tr.target_orientations is not None
        sq_ori = np.sqrt(tr.quadrature[:, None] * tr.orientation_weights)
        rot = problem.poses.orientations(fwd.matrix)
        res[:, :, 3:] = (sq_ori[:, :, None, None] * (rot - tr.target_orientations)).reshape(n + 1, k, 9)
    states = fwd.states
    window: list[NDArray[np.float64]] = [np.zeros((fwd.matrix.shape[1], p))]  # δS_{n−1}, δS_{n−2}
    for step, sens in zip(range(1, n + 1), step_sensitivities(problem.engine, states, problem.dt, motors,
                                                              range(1, n + 1))):
        assert sens.solve is not None and sens.history is not None
        rhs = sens.r_theta @ d_theta[step] + sens.r_theta_dot @ d_theta_dot[step]
        for lag, ds in enumerate(window, start=1):
            rhs += sens.history(lag, ds)
        ds_n = -sens.solve(rhs)
        window = [ds_n] + window[:1]
        for j, i in enumerate(idx):
            jac[step, j, :3] = sq_pos[step, j] * ds_n[7 * i : 7 * i + 3]
            if ori and sq_ori[step, j] != 0.0:
                q = fwd.matrix[step, 7 * i + 3 : 7 * i + 7]
                dq = ds_n[7 * i + 3 : 7 * i + 7]  # (4, p)
                drf = np.einsum("bai,ip->abp", rotate_jacobian(q, problem.poses.frames[j].T), dq)
                jac[step, j, 3:] = sq_ori[step, j] * drf.reshape(9, p)
        if progress is not None:
            progress(step, n)
    return LeastSquares(res.ravel(), jac.reshape(-1, p))


def parameter_hessian(problem: AdjointProblem, x: NDArray[np.float64], step: float = 1e-6) -> NDArray[np.float64]:
    """Hessian of the parameter-only terms (regularizers, speed penalty) by central differences of their gradient.

    The regularizers are quadratic (exact to round-off); the speed penalty is piecewise quadratic (exact away from
    its kinks).
    """
    x = np.asarray(x, dtype=float)
    p = len(x)
    out = np.zeros((p, p))
    for j in range(p):
        e = np.zeros(p)
        e[j] = step
        out[:, j] = (problem.parameter_terms(x + e)[1] - problem.parameter_terms(x - e)[1]) / (2 * step)
    return 0.5 * (out + out.T)
