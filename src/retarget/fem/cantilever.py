"""Clamped-rod checks against Euler-Bernoulli beam theory: static tip deflection and natural frequencies.

The FEM side (Newton statics, the eigenproblem) lives here; the theory is :mod:`retarget.fem.beam_theory`,
whose ``BETA_L_CANTILEVER`` and ``euler_bernoulli_*`` functions this module re-exports.

Used by the tests, by ``retarget check fem`` and by the mesh-default convergence study in docs/fem.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from retarget.errors import RetargetError
from retarget.fem.beam_theory import (
    BETA_L_CANTILEVER,
    euler_bernoulli_frequencies,
    euler_bernoulli_tip_deflection,
)
from retarget.fem.elastic import ElasticBody

__all__ = [
    "BETA_L_CANTILEVER",
    "NewtonNotConvergedError",
    "StaticSolution",
    "clamped_dofs",
    "euler_bernoulli_frequencies",
    "euler_bernoulli_tip_deflection",
    "natural_frequencies",
    "solve_static",
    "tip_load_deflection",
]


class NewtonNotConvergedError(RetargetError):
    """The static Newton solve did not reach the tolerance.

    Attributes:
        residual_norms: Free-DOF residual norm [N] after each iteration.
    """

    def __init__(self, residual_norms: list[float]) -> None:
        super().__init__(f"static Newton solve did not converge; residual norms {residual_norms}")
        self.residual_norms = residual_norms


@dataclass(frozen=True)
class StaticSolution:
    """Result of :func:`solve_static`.

    Attributes:
        u: Displacements [m], ``(3n,)``.
        residual_norms: Free-DOF residual norm [N] per iteration (first entry before any step).
    """

    u: NDArray[np.float64]
    residual_norms: list[float]


def clamped_dofs(body: ElasticBody, axis: int = 2, value: float = 0.0) -> NDArray[np.int64]:
    """All DOFs of the nodes on the plane X[axis] = value (a fully clamped end), ``(3k,)``."""
    nodes = body.mesh.nodes_on_plane(axis, value)
    return (3 * nodes[:, None] + np.arange(3)).ravel()


def solve_static(
    body: ElasticBody,
    fixed_dofs: NDArray[np.int64],
    external_forces: NDArray[np.float64],
    tol: float = 1e-10,
    step_tol: float = 1e-10,
    max_iterations: int = 25,
) -> StaticSolution:
    """Newton's method for f_int(u) = f_ext with u = 0 on ``fixed_dofs`` (full steps, no line search).

    Args:
        body: The elastic body.
        fixed_dofs: Dirichlet DOFs (held at 0), ``(k,)``.
        external_forces: Dead load [N], ``(3n,)``.
        tol: Stop when the free residual norm falls below ``tol`` times the free load norm, ...
        step_tol: ... or when a Newton step is below ``step_tol`` times |u| (the residual of a stiff material
            bottoms out at the round-off of the internal forces, about 1e-16 E times an element area).
        max_iterations: Newton iteration limit.

    Raises:
        NewtonNotConvergedError: Tolerance not reached.
    """
    free = np.setdiff1d(np.arange(body.n_dofs), fixed_dofs)
    u = np.zeros(body.n_dofs)
    scale = max(float(np.linalg.norm(external_forces[free])), 1e-300)
    norms: list[float] = []
    for _ in range(max_iterations + 1):
        f, k = body.internal_forces_and_stiffness(u)
        r = (external_forces - f)[free]
        norms.append(float(np.linalg.norm(r)))
        if norms[-1] <= tol * scale:
            return StaticSolution(u, norms)
        if len(norms) > max_iterations:
            break
        du = spla.spsolve(k[free][:, free].tocsc(), r)
        u[free] += du
        if np.linalg.norm(du) <= step_tol * np.linalg.norm(u):
            f = body.internal_forces(u)
            norms.append(float(np.linalg.norm((external_forces - f)[free])))
            return StaticSolution(u, norms)
    raise NewtonNotConvergedError(norms)


def tip_load_deflection(
    body: ElasticBody, length: float, force: NDArray[np.float64]
) -> tuple[float, StaticSolution]:
    """Clamp z = 0, apply a total dead load spread over the z = ``length`` face by area weights, solve.

    Args:
        body: A rod or bar along +z.
        length: Position of the loaded end face [m].
        force: Total tip force [N], ``(3,)``.

    Returns:
        The area-weighted mean tip displacement along ``force`` [m], and the static solution.
    """
    tip = body.mesh.nodes_on_plane(2, length)
    w = body.face_area_weights(tip)
    f_ext = np.zeros(body.n_dofs)
    f_ext.reshape(-1, 3)[tip] = np.outer(w / w.sum(), force)
    sol = solve_static(body, clamped_dofs(body), f_ext)
    direction = np.asarray(force, dtype=float) / np.linalg.norm(force)
    tip_u = (w / w.sum()) @ sol.u.reshape(-1, 3)[tip]
    return float(tip_u @ direction), sol


def natural_frequencies(
    body: ElasticBody, fixed_dofs: NDArray[np.int64], n_modes: int = 4
) -> NDArray[np.float64]:
    """Lowest natural frequencies [Hz] of the linearization at rest: K v = ω² M v on the free DOFs.

    Shift-invert Lanczos (``eigsh`` with σ = 0) on the consistent mass and the rest stiffness.
    """
    free = np.setdiff1d(np.arange(body.n_dofs), fixed_dofs)
    k = body.tangent_stiffness(np.zeros(body.n_dofs))[free][:, free].tocsc()
    m = body.mass_matrix()[free][:, free].tocsc()
    vals = spla.eigsh(k, k=n_modes, M=m, sigma=0.0, which="LM", return_eigenvectors=False)
    return np.sort(np.sqrt(np.abs(vals))) / (2.0 * math.pi)
