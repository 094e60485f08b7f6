"""Optimized cubature of the reduced internal forces (An, Kim & James 2008).

``Uᵀ f_int(U z) ≈ Σ_{e∈E} w_e U_eᵀ f_e(U_e z)`` with few elements ``E`` and weights ``w_e ≥ 0``, trained on
reduced-force samples by greedy non-negative least squares; the reduced tangent is ``Σ w_e U_eᵀ K_e U_e``
(exact derivative of the cubature force). Element forces come from the FEM layer's compiled Neo-Hookean kernel
(:mod:`retarget.fem.neo_hookean`), run on the selected elements only, so a force + tangent evaluation costs
O(|E| r²), independent of the mesh size. Forces are linear in (μ, λ): at fixed Poisson ratio they scale with E,
so the weights stay valid when material fitting changes E (and Rayleigh α, β: the damping ``β K(z) ż`` uses this
tangent, so it scales with the weights too). For that damping, :func:`cubature_force_directional` gives the exact
``K(z) d`` without the tangent (residual-only Newton iterations) and :func:`cubature_damping_derivative` the exact
``dK(z)[d]`` (its Jacobian block).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from numpy.typing import NDArray
from scipy.optimize import nnls

from retarget.fem.neo_hookean import first_piola_point, first_piola_tangent_point, forces_stiffness_kernel
from retarget.sim.reduced.errors import TrainingDataError
from retarget.jit import njit

__all__ = [
    "Cubature",
    "cubature_force_directional",
    "cubature_force_value",
    "cubature_forces",
    "cubature_damping_derivative",
    "cubature_geometry",
    "cubature_tangents",
    "element_reduced_forces",
    "reduced_gradients",
    "train_cubature",
]


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
        points: with a per-point cubature (:func:`train_cubature` ``per_point``), the quadrature point of each
            selected element (k,) — ``grad`` and ``qweights`` then hold that one point (k, 1, …); None: every
            quadrature point of each selected element.
    """

    elements: NDArray[np.int64]
    weights: NDArray[np.float64]
    basis_rows: NDArray[np.float64]
    grad: NDArray[np.float64]
    qweights: NDArray[np.float64]
    mu: float
    lam: float
    relative_error: float
    points: NDArray[np.int64] | None = None

    def evaluate(self, z: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """Reduced force (r,) [N], tangent (r, r) [N/m] and min det F at ``z`` (r,)."""
        return cubature_forces(
            np.ascontiguousarray(z, dtype=float), self.basis_rows, self.grad, self.qweights, self.weights, self.mu, self.lam
        )

    def tangent_derivative(self, z: NDArray[np.float64], direction: NDArray[np.float64]) -> NDArray[np.float64]:
        """``dK(z)[d] = ∂(K(z) d)/∂z`` (r, r) [N/m per unit z], exact (:func:`cubature_damping_derivative`).

        The Newton Jacobian of the stiffness-proportional damping ``β K(z) ż`` needs it with ``d = ż``.
        """
        z = np.ascontiguousarray(z, dtype=float)
        dmat = reduced_gradients(self.basis_rows, self.grad)
        return cubature_damping_derivative(
            z, np.ascontiguousarray(direction, dtype=float), dmat, self.qweights, self.weights, self.mu, self.lam
        )


def _element_rows(tets: NDArray[np.int64], basis: NDArray[np.float64]) -> NDArray[np.float64]:
    """``U_e`` for every element of ``tets`` stacked (k*30, r)."""
    dofs = (3 * tets[:, :, None] + np.arange(3)).reshape(-1)
    return np.ascontiguousarray(basis[dofs])


@njit(cache=True)
def _local_tets(k: int) -> NDArray[np.int64]:
    return np.arange(10 * k).reshape(k, 10)


@njit(cache=True)
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
    fe, ke, _, min_det = forces_stiffness_kernel(u, _local_tets(k), grad, qweights, mu, lam, scatter, 900 * k, True)
    f = np.zeros(r)
    kz = np.zeros((r, r))
    for e in range(k):
        ue = basis_rows[30 * e : 30 * e + 30]
        f += weights[e] * (ue.T @ fe[30 * e : 30 * e + 30])
        kz += weights[e] * (ue.T @ (ke[900 * e : 900 * e + 900].reshape(30, 30) @ ue))
    return f, kz, min_det


def reduced_gradients(basis_rows: NDArray[np.float64], grad: NDArray[np.float64]) -> NDArray[np.float64]:
    """Displacement-gradient maps ``D`` (k, q, 9, r): ``H = ∂u/∂X = Σ_l z_l D_l`` at each quadrature point.

    ``D[e, q, 3i+j, l] = Σ_a U_e[(a, i), l] ∂N_a/∂X_j`` — the same matrix projects the first Piola stress back
    onto the reduced coordinates (``f_l = Σ w P : D_l``), so a value-only cubature evaluation never forms element
    displacements or element force vectors.

    Args:
        basis_rows: ``U_e`` stacked (k*30, r). grad: rest shape gradients (k, q, 10, 3) [1/m].
    """
    k, r = grad.shape[0], basis_rows.shape[1]
    ue = basis_rows.reshape(k, 10, 3, r)
    d = np.einsum("kail,kqaj->kqijl", ue, grad)
    return np.ascontiguousarray(d.reshape(k, grad.shape[1], 9, r))


# Reassociation lets the compiler vectorize the length-r dot products (H = Σ z_l D_l); no other fast-math flag, so
# non-finite values still propagate to the engine's checks. The quadrature-point kernels (first Piola stress and
# its tangent) are the FEM layer's, inlined so that these loops keep their own fast-math flags.
@njit(cache=True, fastmath={"reassoc", "contract"})
def cubature_force_value(
    z: NDArray[np.float64],
    dmat: NDArray[np.float64],
    qweights: NDArray[np.float64],
    weights: NDArray[np.float64],
    mu: float,
    lam: float,
) -> tuple[NDArray[np.float64], float]:
    """``Σ_e w_e U_eᵀ f_e(U_e z)`` (r,) [N] and min det F, without the tangent (residual-only Newton iterations).

    The FEM layer's Neo-Hookean force (:mod:`retarget.fem.neo_hookean`, same small-strain-accurate
    ``ln J = log1p(tr H + I₂(H) + det H)`` and ``2E = H + Hᵀ + HᵀH``), written per quadrature point in reduced
    form: ``H = Σ_l z_l D_l``, ``P = F⁻ᵀ (μ 2E + λ ln J I)``, ``f_l += w_e w_q P : D_l``. Quadrature points with
    ``det F ≤ 0`` contribute nothing (as in the FEM kernel); the caller checks min det F.

    Args:
        z: (r,). dmat: :func:`reduced_gradients` (k, q, 9, r). qweights: (k, q) [m³]. weights: (k,).
        mu, lam: Lamé parameters [Pa].
    """
    k, nq, _, r = dmat.shape
    f = np.zeros(r)
    hm = np.empty((3, 3))
    fm = np.empty((3, 3))
    fi = np.empty((3, 3))
    tm = np.empty((3, 3))
    pu = np.empty((3, 3))
    pm = np.empty(9)
    min_det = np.inf
    for e in range(k):
        for q in range(nq):
            d = dmat[e, q]
            for ij in range(9):
                acc = 0.0
                for l in range(r):
                    acc += d[ij, l] * z[l]
                hm[ij // 3, ij % 3] = acc
            det = first_piola_point(hm, mu, lam, fm, fi, tm, pu)
            if det < min_det:
                min_det = det
            if det <= 0.0:
                continue
            wq = weights[e] * qweights[e, q]
            for i in range(3):
                for j in range(3):
                    pm[3 * i + j] = wq * pu[i, j]
            for ij in range(9):
                pij = pm[ij]
                for l in range(r):
                    f[l] += pij * d[ij, l]
    return f, min_det


@numba.njit(inline="always")
def _gradient_and_derivative(d: NDArray[np.float64], z: NDArray[np.float64], direction: NDArray[np.float64],
                             hm: NDArray[np.float64], dh: NDArray[np.float64]) -> None:
    """``H = Σ_l z_l D_l`` into ``hm`` and ``dH = Σ_l d_l D_l`` into ``dh`` at one quadrature point (``d`` (9, r))."""
    for ij in range(9):
        acc = 0.0
        dacc = 0.0
        for l in range(d.shape[1]):
            acc += d[ij, l] * z[l]
            dacc += d[ij, l] * direction[l]
        hm[ij // 3, ij % 3] = acc
        dh[ij // 3, ij % 3] = dacc


@njit(cache=True, fastmath={"reassoc", "contract"})
def cubature_force_directional(
    z: NDArray[np.float64],
    direction: NDArray[np.float64],
    dmat: NDArray[np.float64],
    qweights: NDArray[np.float64],
    weights: NDArray[np.float64],
    mu: float,
    lam: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
    """Cubature force (r,) [N], its exact directional derivative ``K(z) d`` (r,) [N/m·unit z] and min det F.

    For the stiffness-proportional damping ``β K(z) ż`` on residual-only Newton iterations, which form no
    tangent. With ``P = F⁻ᵀ T``, ``T = μ 2E + λ ln J I`` (as :func:`cubature_force_value`) and ``dF = Σ d_l D_l``::

        dT = μ (dFᵀF + FᵀdF) + λ tr(F⁻¹dF) I,    dP = F⁻ᵀ (dT − dFᵀ P)

    (from ``d(F⁻ᵀ) = −F⁻ᵀ dFᵀ F⁻ᵀ``), projected as the force: ``(K d)_l = Σ w_e w_q dP : D_l``. Equal to the FEM
    kernel's tangent times ``d`` up to round-off; costs about twice the value-only kernel.

    Args:
        z, direction: (r,). dmat: :func:`reduced_gradients` (k, q, 9, r). qweights: (k, q) [m³]. weights: (k,).
        mu, lam: Lamé parameters [Pa].
    """
    k, nq, _, r = dmat.shape
    f = np.zeros(r)
    df = np.zeros(r)
    hm = np.empty((3, 3))
    dh = np.empty((3, 3))
    fm = np.empty((3, 3))
    fi = np.empty((3, 3))
    tm = np.empty((3, 3))
    pu = np.empty((3, 3))
    gm = np.empty((3, 3))
    pm = np.empty(9)
    dpm = np.empty(9)
    min_det = np.inf
    for e in range(k):
        for q in range(nq):
            d = dmat[e, q]
            _gradient_and_derivative(d, z, direction, hm, dh)
            det = first_piola_point(hm, mu, lam, fm, fi, tm, pu)
            if det < min_det:
                min_det = det
            if det <= 0.0:
                continue
            # tr(F⁻¹ dF)
            tr_a = 0.0
            for i in range(3):
                for m in range(3):
                    tr_a += fi[i, m] * dh[m, i]
            for i in range(3):
                for j in range(3):
                    val = 0.0
                    for m in range(3):
                        val += mu * (dh[m, i] * fm[m, j] + fm[m, i] * dh[m, j]) - dh[m, i] * pu[m, j]
                    gm[i, j] = val
                gm[i, i] += lam * tr_a
            wq = weights[e] * qweights[e, q]
            for i in range(3):
                for j in range(3):
                    pm[3 * i + j] = wq * pu[i, j]
                    dpm[3 * i + j] = wq * (fi[0, i] * gm[0, j] + fi[1, i] * gm[1, j] + fi[2, i] * gm[2, j])
            for ij in range(9):
                pij = pm[ij]
                dpij = dpm[ij]
                for l in range(r):
                    f[l] += pij * d[ij, l]
                    df[l] += dpij * d[ij, l]
    return f, df, min_det


#: Quadrature points per matrix product in :func:`cubature_tangents` (its scratch block stays in the L2 cache).
_TANGENT_CHUNK = 32


@njit(cache=True, fastmath={"reassoc", "contract"}, inline="always")
def _tangent_derivative_point(
    dh: NDArray[np.float64],
    fi: NDArray[np.float64],
    ym: NDArray[np.float64],
    am: NDArray[np.float64],
    mu: float,
    lam: float,
    wq: float,
    tmp: NDArray[np.float64],
    dfi: NDArray[np.float64],
    dym: NDArray[np.float64],
    ad: NDArray[np.float64],
) -> None:
    """``wq A'[dH]`` (9, 9) into ``ad`` at one quadrature point (:func:`cubature_tangents`); ``tmp``, ``dfi``,
    ``dym`` (3, 3): scratch."""
    # dF⁻¹ = −F⁻¹ dH F⁻¹; dY = μ dH − A:dH
    for i in range(3):
        for j in range(3):
            tmp[i, j] = dh[i, 0] * fi[0, j] + dh[i, 1] * fi[1, j] + dh[i, 2] * fi[2, j]
    for i in range(3):
        for j in range(3):
            dfi[i, j] = -(fi[i, 0] * tmp[0, j] + fi[i, 1] * tmp[1, j] + fi[i, 2] * tmp[2, j])
    for ij in range(9):
        val = 0.0
        for kl in range(9):
            val += am[ij, kl] * dh[kl // 3, kl % 3]
        dym[ij // 3, ij % 3] = mu * dh[ij // 3, ij % 3] - val
    for ij in range(9):
        i, j = ij // 3, ij % 3
        for kl in range(9):
            kk, ll = kl // 3, kl % 3
            ad[ij, kl] = wq * (dfi[ll, i] * ym[kk, j] + fi[ll, i] * dym[kk, j]
                               + lam * (dfi[j, i] * fi[ll, kk] + fi[j, i] * dfi[ll, kk]))


@njit(cache=True, fastmath={"reassoc", "contract"})
def cubature_tangents(
    z: NDArray[np.float64],
    direction: NDArray[np.float64],
    dmat: NDArray[np.float64],
    qweights: NDArray[np.float64],
    weights: NDArray[np.float64],
    mu: float,
    lam: float,
    with_derivative: bool,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], float]:
    """Cubature force ``f`` (r,) [N], tangent ``K(z)`` (r, r) [N/m] and, with ``with_derivative``, the exact
    ``dK(z)[d] = ∂(K(z) d)/∂z`` (r, r) (else 0×0), and min det F — the Newton Jacobian's cubature blocks.

    With ``P = μ(F − F⁻ᵀ) + λ ln J F⁻ᵀ`` (:func:`~retarget.fem.neo_hookean.first_piola_point`) and ``Y = μF − P``,
    the material tangent ``A = ∂P/∂H`` (9×9) at a quadrature point
    (:func:`~retarget.fem.neo_hookean.first_piola_tangent_point`) and its derivative along ``dH = Σ d_l D_l`` are,
    in closed form::

        A[ij,kl]     = F⁻¹[l,i] Y[k,j] + μ δ_ik δ_jl + λ F⁻¹[j,i] F⁻¹[l,k]
        A'[dH][ij,kl] = dF⁻¹[l,i] Y[k,j] + F⁻¹[l,i] dY[k,j] + λ (dF⁻¹[j,i] F⁻¹[l,k] + F⁻¹[j,i] dF⁻¹[l,k])

    (``dF⁻¹ = −F⁻¹ dH F⁻¹``, ``dY = μ dH − A:dH``); then ``K = Σ w_e w_q D_qᵀ A D_q``, ``dK[d] = Σ w_e w_q D_qᵀ A'
    D_q`` and ``f = Σ w_e w_q D_qᵀ P`` come out of one matrix product per block of quadrature points (``D``
    stacked (9kq, r)). Quadrature points with ``det F ≤ 0`` contribute nothing. Equals the FEM kernel's element
    tangents projected, ``Σ w_e U_eᵀ K_e U_e`` (:func:`cubature_forces`), to round-off.

    Args:
        z, direction: (r,). dmat: :func:`reduced_gradients` (k, q, 9, r). qweights: (k, q) [m³]. weights: (k,).
        mu, lam: Lamé parameters [Pa]. with_derivative: also form ``dK(z)[direction]``.
    """
    k, nq, _, r = dmat.shape
    npts = k * nq
    dall = dmat.reshape(9 * npts, r)
    nc = 2 * r + 1 if with_derivative else r + 1  # columns: A D | A' D | w P
    acc = np.zeros((r, nc))
    g = np.empty((9 * _TANGENT_CHUNK, nc))
    hm = np.empty((3, 3))
    dh = np.empty((3, 3))
    fm = np.empty((3, 3))
    fi = np.empty((3, 3))
    tm = np.empty((3, 3))
    pu = np.empty((3, 3))
    ym = np.empty((3, 3))
    dfi = np.empty((3, 3))
    tmp = np.empty((3, 3))
    dym = np.empty((3, 3))
    am = np.empty((9, 9))
    ad = np.empty((9, 9))
    min_det = np.inf
    for c0 in range(0, npts, _TANGENT_CHUNK):
        c1 = min(npts, c0 + _TANGENT_CHUNK)
        for pt in range(c0, c1):
            e = pt // nq
            q = pt - e * nq
            d = dmat[e, q]
            row = 9 * (pt - c0)
            _gradient_and_derivative(d, z, direction, hm, dh)
            det = first_piola_point(hm, mu, lam, fm, fi, tm, pu)
            if det < min_det:
                min_det = det
            if det <= 0.0:
                for ij in range(9):
                    for l in range(nc):
                        g[row + ij, l] = 0.0
                continue
            wq = weights[e] * qweights[e, q]
            first_piola_tangent_point(fm, fi, pu, mu, lam, ym, am)
            if with_derivative:
                _tangent_derivative_point(dh, fi, ym, am, mu, lam, wq, tmp, dfi, dym, ad)
            for ij in range(9):
                gr = g[row + ij]
                for l in range(nc - 1):
                    gr[l] = 0.0
                gr[nc - 1] = wq * pu[ij // 3, ij % 3]
                for kl in range(9):
                    dk = d[kl]
                    ca = wq * am[ij, kl]
                    for l in range(r):
                        gr[l] += ca * dk[l]
                    if with_derivative:
                        cd = ad[ij, kl]
                        for l in range(r):
                            gr[r + l] += cd * dk[l]
        m = 9 * (c1 - c0)
        acc += dall[9 * c0 : 9 * c0 + m].T @ g[:m]
    f = acc[:, nc - 1].copy()
    kz = np.ascontiguousarray(acc[:, :r])
    dkz = np.ascontiguousarray(acc[:, r : 2 * r]) if with_derivative else np.zeros((0, 0))
    return f, kz, dkz, min_det


def cubature_damping_derivative(
    z: NDArray[np.float64],
    direction: NDArray[np.float64],
    dmat: NDArray[np.float64],
    qweights: NDArray[np.float64],
    weights: NDArray[np.float64],
    mu: float,
    lam: float,
) -> NDArray[np.float64]:
    """``∂(K(z) d)/∂z`` (r, r) [N/m per unit z]: the exact second derivative of the cubature force along ``d``.

    The Newton Jacobian block of the damping ``β K(z) ż`` (``d = ż``), from :func:`cubature_tangents`. Exact
    instead of the absolute engine's central difference of the tangent along ``d``: in the z coordinates the
    rigid-mode rows of ``K`` are small differences of large element terms, and a difference quotient's round-off
    there reached 4e-3 of the row (measured on the two-motor rod of the stepper tests).

    A Python function, not a compiled one: a compiled caller's constant ``True`` would compile
    :func:`cubature_tangents` once more, for the literal, beside the compiled engine's ``bool`` signature.

    Args:
        z, direction: (r,). dmat: :func:`reduced_gradients` (k, q, 9, r). qweights: (k, q) [m³]. weights: (k,).
        mu, lam: Lamé parameters [Pa].
    """
    return cubature_tangents(z, direction, dmat, qweights, weights, mu, lam, True)[2]


def element_reduced_forces(
    body: object, basis: NDArray[np.float64], z: NDArray[np.float64], per_point: bool = False
) -> NDArray[np.float64]:
    """Per-element reduced forces ``g_e = U_eᵀ f_e(U_e z)`` for every element of ``body`` (E, r) [N].

    With ``per_point`` the contribution of each quadrature point separately, (E·q, r) with row ``e q_n + i`` for
    point ``i`` of element ``e`` (they sum to the element's force).

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
    local = np.arange(10 * k).reshape(k, 10)
    local.setflags(write=False)  # read-only as a mesh's tets: the kernel's signature of ElasticBody's calls
    parts = [(geo.grad, geo.weights)]
    if per_point:
        nq = geo.weights.shape[1]
        parts = [(np.ascontiguousarray(geo.grad[:, i : i + 1]), np.ascontiguousarray(geo.weights[:, i : i + 1]))
                 for i in range(nq)]
    out = []
    for grad, qweights in parts:
        fe, _, _, min_det = forces_stiffness_kernel(
            u, local, grad, qweights, body.mu, body.lam, scatter, 0, False  # type: ignore[attr-defined]
        )
        if min_det <= 0.0:
            raise TrainingDataError(f"training sample inverts an element (min det F = {min_det:.3e})")
        out.append(np.einsum("ekr,ek->er", rows.reshape(k, 30, -1), fe.reshape(k, 30)))
    if not per_point:
        return out[0]
    return np.stack(out, axis=1).reshape(k * len(out), -1)


def cubature_geometry(
    body: object, elements: NDArray[np.int64], points: NDArray[np.int64] | None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Rest shape gradients (k, q, 10, 3) and quadrature weights (k, q) of the selected elements — every point, or
    with ``points`` the one point of each (q = 1)."""
    geo = body.geometry  # type: ignore[attr-defined]
    if points is None:
        return np.ascontiguousarray(geo.grad[elements]), np.ascontiguousarray(geo.weights[elements])
    return (np.ascontiguousarray(geo.grad[elements, points][:, None]),
            np.ascontiguousarray(geo.weights[elements, points][:, None]))


def train_cubature(
    body: object,
    basis: NDArray[np.float64],
    samples: NDArray[np.float64],
    tolerance: float = 1e-3,
    max_elements: int = 400,
    per_point: bool = False,
) -> Cubature:
    """Greedy NNLS cubature: add the element best correlated with the residual, re-solve NNLS, repeat.

    Args:
        body: the :class:`retarget.fem.ElasticBody`.
        basis: ``U`` (3N, r).
        samples: reduced coordinates ``z`` (s, r) to fit (e.g. the training snapshots projected on ``U``).
        tolerance: target relative error ``‖A w − b‖ / ‖b‖`` (each sample normalized by its own ``‖b_s‖``).
        max_elements: stop adding elements (or points) here.
        per_point: select single quadrature points of elements instead of whole elements (An, Kim & James's
            cubature points): each costs a quarter of a 4-point element; the single rod and the drummer needed
            1.2–1.35 × as many points as elements for the same training error (docs/reduced.md §4).

    Raises:
        TrainingDataError: no sample with a non-zero force.
    """
    zs = np.asarray(samples, dtype=float)
    blocks, targets = [], []
    for z in zs:
        g = element_reduced_forces(body, basis, z, per_point)  # (E, r) or (E q, r)
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
    units = np.asarray(selected, dtype=np.int64)[order]
    nq = body.geometry.weights.shape[1] if per_point else 1  # type: ignore[attr-defined]
    elements = units // nq
    points = units % nq if per_point else None
    grad, qweights = cubature_geometry(body, elements, points)
    return Cubature(
        elements,
        w[order].astype(float),
        _element_rows(body.mesh.tets[elements], basis),  # type: ignore[attr-defined]
        grad,
        qweights,
        float(body.mu),  # type: ignore[attr-defined]
        float(body.lam),  # type: ignore[attr-defined]
        err,
        points,
    )
