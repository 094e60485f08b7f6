"""Optimized cubature of the reduced internal forces (An, Kim & James 2008).

``Uᵀ f_int(U z) ≈ Σ_{e∈E} w_e U_eᵀ f_e(U_e z)`` with few elements ``E`` and weights ``w_e ≥ 0``, trained on
reduced-force samples by greedy non-negative least squares; the reduced tangent is ``Σ w_e U_eᵀ K_e U_e``
(exact derivative of the cubature force). Element forces come from the FEM layer's compiled Neo-Hookean kernel
(:mod:`retarget.fem.neo_hookean`), run on the selected elements only, so a force + tangent evaluation costs
O(|E| r²), independent of the mesh size. Forces are linear in (μ, λ): at fixed Poisson ratio they scale with E,
so the weights stay valid when material fitting changes E (and Rayleigh α, β, which are outside the cubature).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from numpy.typing import NDArray
from scipy.optimize import nnls

from retarget.fem.neo_hookean import _forces_stiffness_numba
from retarget.sim.reduced.errors import TrainingDataError

__all__ = ["Cubature", "cubature_forces", "element_reduced_forces", "train_cubature"]


@dataclass(frozen=True, eq=False)
class Cubature:
    """Selected elements, weights and the data to evaluate them.

    Attributes:
        elements: selected element ids (k,).
        weights: ``w_e ≥ 0`` (k,).
        basis_rows: ``U_e`` stacked (k*30, r) (element-local node-major DOFs).
        grad: rest shape gradients (k, q, 10, 3) [1/m]. qweights: quadrature weight × det J (k, q) [m³].
        mu, lam: Lamé parameters [Pa].
        relative_error: training error ``‖Σ w g − b‖ / ‖b‖`` over the training samples.
    """

    elements: NDArray[np.int64]
    weights: NDArray[np.float64]
    basis_rows: NDArray[np.float64]
    grad: NDArray[np.float64]
    qweights: NDArray[np.float64]
    mu: float
    lam: float
    relative_error: float

    def evaluate(self, z: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """Reduced force (r,) [N], tangent (r, r) [N/m] and min det F at ``z`` (r,)."""
        return cubature_forces(
            np.ascontiguousarray(z, dtype=float), self.basis_rows, self.grad, self.qweights, self.weights, self.mu, self.lam
        )


def _element_rows(tets: NDArray[np.int64], basis: NDArray[np.float64]) -> NDArray[np.float64]:
    """``U_e`` for every element of ``tets`` stacked (k*30, r)."""
    dofs = (3 * tets[:, :, None] + np.arange(3)).reshape(-1)
    return np.ascontiguousarray(basis[dofs])


@numba.njit(cache=True)
def _local_tets(k: int) -> NDArray[np.int64]:
    return np.arange(10 * k).reshape(k, 10)


@numba.njit(cache=True)
def cubature_forces(
    z: NDArray[np.float64],
    basis_rows: NDArray[np.float64],
    grad: NDArray[np.float64],
    qweights: NDArray[np.float64],
    weights: NDArray[np.float64],
    mu: float,
    lam: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
    """``Σ w_e U_eᵀ f_e(U_e z)`` (r,) [N], ``Σ w_e U_eᵀ K_e U_e`` (r, r) [N/m], min det F.

    The selected elements are evaluated as a disconnected mesh (each with its own 10 nodes), so the FEM kernel's
    "assembled" output is the element forces and element matrices side by side.
    """
    k = weights.shape[0]
    r = z.shape[0]
    u = basis_rows @ z
    scatter = np.arange(900 * k).reshape(k, 900)
    fe, ke, _, min_det = _forces_stiffness_numba(u, _local_tets(k), grad, qweights, mu, lam, scatter, 900 * k, True)
    f = np.zeros(r)
    kz = np.zeros((r, r))
    for e in range(k):
        ue = basis_rows[30 * e : 30 * e + 30]
        f += weights[e] * (ue.T @ fe[30 * e : 30 * e + 30])
        kz += weights[e] * (ue.T @ (ke[900 * e : 900 * e + 900].reshape(30, 30) @ ue))
    return f, kz, min_det


def element_reduced_forces(body: object, basis: NDArray[np.float64], z: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per-element reduced forces ``g_e = U_eᵀ f_e(U_e z)`` for every element of ``body`` (E, r) [N].

    Args:
        body: a :class:`retarget.fem.ElasticBody`.
        basis: ``U`` (3N, r).
        z: (r,).
    """
    tets = body.mesh.tets  # type: ignore[attr-defined]
    geo = body.geometry  # type: ignore[attr-defined]
    rows = _element_rows(tets, basis)
    k = len(tets)
    u = rows @ z
    scatter = np.zeros((k, 900), dtype=np.int64)
    fe, _, _, min_det = _forces_stiffness_numba(
        u, np.arange(10 * k).reshape(k, 10), geo.grad, geo.weights, body.mu, body.lam, scatter, 0, False  # type: ignore[attr-defined]
    )
    if min_det <= 0.0:
        raise TrainingDataError(f"training sample inverts an element (min det F = {min_det:.3e})")
    return np.einsum("ekr,ek->er", rows.reshape(k, 30, -1), fe.reshape(k, 30))


def train_cubature(
    body: object,
    basis: NDArray[np.float64],
    samples: NDArray[np.float64],
    tolerance: float = 1e-3,
    max_elements: int = 400,
) -> Cubature:
    """Greedy NNLS cubature: add the element best correlated with the residual, re-solve NNLS, repeat.

    Args:
        body: the :class:`retarget.fem.ElasticBody`.
        basis: ``U`` (3N, r).
        samples: reduced coordinates ``z`` (s, r) to fit (e.g. the training snapshots projected on ``U``).
        tolerance: target relative error ``‖A w − b‖ / ‖b‖`` (each sample normalized by its own ``‖b_s‖``).
        max_elements: stop adding elements here.

    Raises:
        TrainingDataError: no sample with a non-zero force.
    """
    zs = np.asarray(samples, dtype=float)
    blocks, targets = [], []
    for z in zs:
        g = element_reduced_forces(body, basis, z)  # (E, r)
        b = g.sum(axis=0)
        nb = np.linalg.norm(b)
        if nb == 0.0:
            continue
        blocks.append(g.T / nb)
        targets.append(b / nb)
    if not blocks:
        raise TrainingDataError("cubature training: every sample has zero internal force")
    a = np.vstack(blocks)  # (s r, E)
    b = np.concatenate(targets)
    col_norm = np.linalg.norm(a, axis=0)
    col_norm[col_norm == 0.0] = np.inf
    selected: list[int] = []
    w = np.zeros(0)
    res = b.copy()
    err = 1.0
    while len(selected) < min(max_elements, a.shape[1]):
        score = (a.T @ res) / col_norm
        score[selected] = -np.inf
        selected.append(int(np.argmax(score)))
        w, _ = nnls(a[:, selected], b, maxiter=50 * len(selected) + 100)
        keep = w > 0
        selected = [e for e, kp in zip(selected, keep) if kp]
        w = w[keep]
        res = b - a[:, selected] @ w
        err = float(np.linalg.norm(res) / np.linalg.norm(b))
        if err <= tolerance:
            break
    order = np.argsort(selected)
    elements = np.asarray(selected, dtype=np.int64)[order]
    geo = body.geometry  # type: ignore[attr-defined]
    return Cubature(
        elements,
        w[order].astype(float),
        _element_rows(body.mesh.tets[elements], basis),  # type: ignore[attr-defined]
        np.ascontiguousarray(geo.grad[elements]),
        np.ascontiguousarray(geo.weights[elements]),
        float(body.mu),  # type: ignore[attr-defined]
        float(body.lam),  # type: ignore[attr-defined]
        err,
    )
