"""Compressible Neo-Hookean energy density and its element kernels (numpy and numba backends).

Energy density (per unit rest volume), with F = I + ∂u/∂X, J = det F, I1 = tr(FᵀF):

    ψ(F) = μ/2 (I1 − 3) − μ ln J + λ/2 (ln J)²

First Piola-Kirchhoff stress and its derivative (F⁻ᵀ written with h = F⁻ᵀ ∇_X N, the spatial gradient):

    P = μ F − (μ − λ ln J) F⁻ᵀ = μ F⁻ᵀ (FᵀF − I) + λ ln J F⁻ᵀ
    ∂P_iJ/∂F_kL = μ δ_ik δ_JL + (μ − λ ln J) F⁻¹_Jk F⁻¹_Li + λ F⁻¹_Ji F⁻¹_Lk

For an element with rest gradients g_a = ∂N_a/∂X and weights w (quadrature weight × det J at rest), the
element force and stiffness blocks contract to

    f_a    = Σ_q w (μ F⁻ᵀ (2E) g_a + λ ln J h_a),             2E = H + Hᵀ + HᵀH,  h_a = F⁻ᵀ g_a
    K_ab   = Σ_q w (μ (g_a·g_b) I + c h_b h_aᵀ + λ h_a h_bᵀ)    (3×3 block, row i, column k)

with c = μ − λ ln J, so no fourth-order tensor is formed. Forces and energy are evaluated from H = ∂u/∂X
(ln J by log1p, the Green strain from H) rather than from F: with E ~ 1e11 Pa, forming F − F⁻ᵀ directly loses
the small strains of a stiff rod to round-off (a force floor ~1e-8 N that stalls Newton). Both backends
compute exactly these expressions.

The compiled quadrature-point kernels (:func:`strain_point`: F, F⁻¹, ln J, 2E; :func:`add_point_forces`;
:func:`first_piola_point`: P; :func:`first_piola_tangent_point`: ∂P/∂H) are the one home of these expressions for
the element loops here and the reduced cubature loops (:mod:`retarget.sim.reduced.cubature`). The numpy backend
(:func:`forces_stiffness_numpy`, :func:`energy_density`, :func:`pk1_stress`) stays a separate vectorized
implementation: the reference the compiled kernels are tested against.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from retarget.jit import njit

__all__ = [
    "NUMBA_AVAILABLE",
    "energy_density",
    "forces_stiffness_kernel",
    "forces_stiffness_numba",
    "forces_stiffness_product_numba",
    "forces_stiffness_numpy",
    "deformation_gradients",
    "pk1_stress",
]

try:
    import numba

    NUMBA_AVAILABLE = True
except ImportError:  # numba is a hard dependency of the project, but the numpy path must stand alone
    NUMBA_AVAILABLE = False


def deformation_gradients(u_e: NDArray[np.float64], grad: NDArray[np.float64]) -> NDArray[np.float64]:
    """F = I + Σ_a u_a ⊗ g_a at every quadrature point.

    Args:
        u_e: Element nodal displacements [m], ``(e, 10, 3)``.
        grad: Rest shape-function gradients [1/m], ``(e, q, 10, 3)``.

    Returns:
        ``(e, q, 3, 3)``.
    """
    return np.eye(3) + np.einsum("eai,eqaj->eqij", u_e, grad, optimize=True)


def _log_det_stable(h: NDArray[np.float64]) -> NDArray[np.float64]:
    """ln det(I + H) via log1p of det(I + H) − 1 = tr H + I2(H) + det H, accurate for small H."""
    tr = np.einsum("...ii->...", h)
    i2 = 0.5 * (tr**2 - np.einsum("...ij,...ji->...", h, h))
    return np.log1p(tr + i2 + np.linalg.det(h))


def energy_density(f: NDArray[np.float64], mu: float, lam: float) -> NDArray[np.float64]:
    """ψ(F) [J/m^3] for deformation gradients ``(..., 3, 3)``; +inf where det F <= 0."""
    h = f - np.eye(3)
    j = np.linalg.det(f)
    with np.errstate(invalid="ignore", divide="ignore"):
        log_j = np.where(j > 0, _log_det_stable(h), np.nan)
    # I1 − 3 = 2 tr H + |H|², formed without cancellation.
    i1_minus_3 = 2.0 * np.einsum("...ii->...", h) + np.einsum("...ij,...ij->...", h, h)
    psi = 0.5 * mu * i1_minus_3 - mu * log_j + 0.5 * lam * log_j**2
    return np.where(j > 0, psi, np.inf)


def pk1_stress(f: NDArray[np.float64], mu: float, lam: float) -> NDArray[np.float64]:
    """First Piola-Kirchhoff stress P = ∂ψ/∂F [Pa] for ``(..., 3, 3)`` gradients with det F > 0."""
    h = f - np.eye(3)
    f_inv_t = np.swapaxes(np.linalg.inv(f), -1, -2)
    strain2 = h + np.swapaxes(h, -1, -2) + np.swapaxes(h, -1, -2) @ h
    return mu * f_inv_t @ strain2 + (lam * _log_det_stable(h))[..., None, None] * f_inv_t


def forces_stiffness_numpy(
    u_e: NDArray[np.float64],
    grad: NDArray[np.float64],
    weights: NDArray[np.float64],
    mu: float,
    lam: float,
    with_stiffness: bool = True,
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None, float, float]:
    """Element internal forces and tangent stiffness, vectorized over elements.

    Args:
        u_e: Element displacements [m], ``(e, 10, 3)``.
        grad: Rest gradients [1/m], ``(e, q, 10, 3)``.
        weights: Quadrature weight × det J [m^3], ``(e, q)``.
        mu: Lamé μ [Pa].
        lam: Lamé λ [Pa].
        with_stiffness: Also return the element stiffness matrices.

    Returns:
        ``(f_e (e, 30) [N], K_e (e, 30, 30) [N/m] or None, energy [J], min det F)``; the energy is +inf
        and the forces meaningless when min det F <= 0.
    """
    e, q = weights.shape
    hgrad = np.einsum("eai,eqaj->eqij", u_e, grad, optimize=True)  # H = ∂u/∂X
    f = hgrad + np.eye(3)
    det = np.linalg.det(f)
    min_det = float(det.min()) if det.size else 1.0
    if min_det <= 0.0:
        return np.zeros((e, 30)), None, float("inf"), min_det
    f_inv = np.linalg.inv(f)
    log_j = _log_det_stable(hgrad)
    c = mu - lam * log_j  # (e, q)
    h = np.einsum("eqaJ,eqJk->eqak", grad, f_inv, optimize=True)  # spatial gradients F⁻ᵀ g_a
    # 2 E_green = H + Hᵀ + HᵀH, formed from H so that small strains keep full relative precision.
    strain2 = hgrad + np.swapaxes(hgrad, -1, -2) + np.einsum("eqki,eqkj->eqij", hgrad, hgrad)
    energy = float(
        (weights * (0.5 * mu * np.einsum("eqii->eq", strain2) - mu * log_j + 0.5 * lam * log_j**2)).sum()
    )
    # P = μ F⁻ᵀ (FᵀF − I) + λ ln J F⁻ᵀ  (equal to μ (F − F⁻ᵀ) + λ ln J F⁻ᵀ without the cancellation).
    sg = np.einsum("eqKJ,eqaJ->eqaK", strain2, grad, optimize=True)
    fterm = np.einsum("eqKi,eqaK->eqai", f_inv, sg, optimize=True)
    forces = np.einsum(
        "eq,eqai->eai", weights, mu * fterm + (lam * log_j)[:, :, None, None] * h, optimize=True
    ).reshape(e, 30)
    if not with_stiffness:
        return forces, None, energy, min_det
    hf = h.reshape(e, q, 30)
    # λ term: Σ_q w λ h_(a,i) h_(b,k) as a batched (30 x q)(q x 30) product.
    k_mat = np.matmul(np.swapaxes(hf * (lam * weights)[:, :, None], 1, 2), hf)
    # c term: Σ_q w c h_(a,k) h_(b,i): the same product with c, then swap the component indices i <-> k.
    k_c = np.matmul(np.swapaxes(hf * (c * weights)[:, :, None], 1, 2), hf).reshape(e, 10, 3, 10, 3)
    k_mat = k_mat.reshape(e, 10, 3, 10, 3) + np.swapaxes(k_c, 2, 4)
    # μ term: μ (g_a·g_b) δ_ik.
    gg = np.einsum("eq,eqaJ,eqbJ->eab", mu * weights, grad, grad, optimize=True)
    k_mat += gg[:, :, None, :, None] * np.eye(3)[None, None, :, None, :]
    return forces, k_mat.reshape(e, 30, 30), energy, min_det


if NUMBA_AVAILABLE:

    @numba.njit(inline="always")
    def det_and_inverse(fm: NDArray[np.float64], fi: NDArray[np.float64]) -> float:
        """det F of a 3×3 ``fm``; writes ``F⁻¹`` into ``fi`` when det F > 0 (``fi`` untouched otherwise).

        Shared by the compiled kernels here and the reduced cubature kernels (inlined: each caller keeps its own
        fastmath flags).
        """
        det = (
            fm[0, 0] * (fm[1, 1] * fm[2, 2] - fm[1, 2] * fm[2, 1])
            - fm[0, 1] * (fm[1, 0] * fm[2, 2] - fm[1, 2] * fm[2, 0])
            + fm[0, 2] * (fm[1, 0] * fm[2, 1] - fm[1, 1] * fm[2, 0])
        )
        if det > 0.0:
            inv_det = 1.0 / det
            fi[0, 0] = (fm[1, 1] * fm[2, 2] - fm[1, 2] * fm[2, 1]) * inv_det
            fi[0, 1] = (fm[0, 2] * fm[2, 1] - fm[0, 1] * fm[2, 2]) * inv_det
            fi[0, 2] = (fm[0, 1] * fm[1, 2] - fm[0, 2] * fm[1, 1]) * inv_det
            fi[1, 0] = (fm[1, 2] * fm[2, 0] - fm[1, 0] * fm[2, 2]) * inv_det
            fi[1, 1] = (fm[0, 0] * fm[2, 2] - fm[0, 2] * fm[2, 0]) * inv_det
            fi[1, 2] = (fm[0, 2] * fm[1, 0] - fm[0, 0] * fm[1, 2]) * inv_det
            fi[2, 0] = (fm[1, 0] * fm[2, 1] - fm[1, 1] * fm[2, 0]) * inv_det
            fi[2, 1] = (fm[0, 1] * fm[2, 0] - fm[0, 0] * fm[2, 1]) * inv_det
            fi[2, 2] = (fm[0, 0] * fm[1, 1] - fm[0, 1] * fm[1, 0]) * inv_det
        return det

    @numba.njit(inline="always")
    def log_det_small_strain(hm: NDArray[np.float64]) -> float:
        """``ln det(I + H) = log1p(tr H + I₂(H) + det H)``, accurate for small ``H`` (see forces_stiffness_numpy)."""
        tr = hm[0, 0] + hm[1, 1] + hm[2, 2]
        i2 = 0.5 * tr * tr
        for i in range(3):
            for j in range(3):
                i2 -= 0.5 * hm[i, j] * hm[j, i]
        det_h = (
            hm[0, 0] * (hm[1, 1] * hm[2, 2] - hm[1, 2] * hm[2, 1])
            - hm[0, 1] * (hm[1, 0] * hm[2, 2] - hm[1, 2] * hm[2, 0])
            + hm[0, 2] * (hm[1, 0] * hm[2, 1] - hm[1, 1] * hm[2, 0])
        )
        return np.log1p(tr + i2 + det_h)

    @numba.njit(inline="always")
    def green_strain_twice(hm: NDArray[np.float64], out: NDArray[np.float64]) -> None:
        """``out = 2 E_green = H + Hᵀ + HᵀH``."""
        for i in range(3):
            for j in range(3):
                s = hm[i, j] + hm[j, i]
                for k in range(3):
                    s += hm[k, i] * hm[k, j]
                out[i, j] = s

    @numba.njit(inline="always")
    def displacement_gradient(ue: NDArray[np.float64], g: NDArray[np.float64], out: NDArray[np.float64]) -> None:
        """``out = H = Σ_a u_a ⊗ g_a`` (3, 3) from element nodal values ``ue`` (10, 3) and rest gradients ``g``
        (10, 3) [1/m] at one quadrature point."""
        for i in range(3):
            for j in range(3):
                s = 0.0
                for a in range(10):
                    s += ue[a, i] * g[a, j]
                out[i, j] = s

    @numba.njit(inline="always")
    def strain_point(
        hm: NDArray[np.float64], fm: NDArray[np.float64], fi: NDArray[np.float64], s2: NDArray[np.float64]
    ) -> tuple[float, float]:
        """The kinematics of one quadrature point from its displacement gradient ``H`` (``hm``, 3×3).

        Writes ``F = I + H`` into ``fm`` and, when det F > 0, ``F⁻¹`` into ``fi`` and ``2E = H + Hᵀ + HᵀH`` into
        ``s2``. Returns ``(det F, ln J)`` with the small-strain-accurate ``ln J``; when det F ≤ 0, ``ln J`` is 0
        and ``fi``, ``s2`` are stale.
        """
        for i in range(3):
            for j in range(3):
                fm[i, j] = hm[i, j] + (1.0 if i == j else 0.0)
        det = det_and_inverse(fm, fi)
        if det <= 0.0:
            return det, 0.0
        log_j = log_det_small_strain(hm)
        green_strain_twice(hm, s2)
        return det, log_j

    @numba.njit(inline="always")
    def spatial_gradients(g: NDArray[np.float64], fi: NDArray[np.float64], h: NDArray[np.float64]) -> None:
        """``h_a = F⁻ᵀ g_a`` (10, 3) [1/m] into ``h`` from rest gradients ``g`` (10, 3) and ``F⁻¹`` (``fi``)."""
        for a in range(10):
            for k in range(3):
                h[a, k] = g[a, 0] * fi[0, k] + g[a, 1] * fi[1, k] + g[a, 2] * fi[2, k]

    @numba.njit(inline="always")
    def add_point_forces(
        fe: NDArray[np.float64], g: NDArray[np.float64], fi: NDArray[np.float64], s2: NDArray[np.float64],
        h: NDArray[np.float64], w: float, mu: float, lam: float, log_j: float, sg: NDArray[np.float64],
    ) -> None:
        """``fe_a += w P g_a`` (10, 3) [N] with ``P g_a = μ F⁻ᵀ (2E g_a) + λ ln J h_a`` (``P`` never formed).

        Args:
            fe: Element forces to add to (10, 3). g: rest gradients (10, 3). fi: ``F⁻¹``. s2: ``2E``.
            h: :func:`spatial_gradients`. w: quadrature weight × det J [m³]. mu, lam: Lamé parameters [Pa].
            log_j: ln J. sg: scratch (3,).
        """
        for a in range(10):
            for k in range(3):
                sg[k] = s2[k, 0] * g[a, 0] + s2[k, 1] * g[a, 1] + s2[k, 2] * g[a, 2]
            for i in range(3):
                ft = fi[0, i] * sg[0] + fi[1, i] * sg[1] + fi[2, i] * sg[2]
                fe[a, i] += w * (mu * ft + lam * log_j * h[a, i])

    @numba.njit(inline="always")
    def first_piola_point(hm: NDArray[np.float64], mu: float, lam: float, fm: NDArray[np.float64],
                          fi: NDArray[np.float64], tm: NDArray[np.float64], pu: NDArray[np.float64]) -> float:
        """The first Piola stress of one quadrature point with displacement gradient ``H`` (``hm``).

        :func:`strain_point` into ``fm``, ``fi``; when det F > 0, ``T = μ 2E + λ ln J I`` into ``tm`` and
        ``P = F⁻ᵀ T`` [Pa] into ``pu``. Returns det F (the buffers are stale when it is ≤ 0).
        """
        det, log_j = strain_point(hm, fm, fi, tm)
        if det <= 0.0:
            return det
        lam_log_j = lam * log_j
        for i in range(3):
            for j in range(3):
                tm[i, j] *= mu
            tm[i, i] += lam_log_j
        for i in range(3):
            for j in range(3):
                pu[i, j] = fi[0, i] * tm[0, j] + fi[1, i] * tm[1, j] + fi[2, i] * tm[2, j]
        return det

    @numba.njit(inline="always")
    def first_piola_tangent_point(fm: NDArray[np.float64], fi: NDArray[np.float64], pu: NDArray[np.float64],
                                  mu: float, lam: float, ym: NDArray[np.float64], am: NDArray[np.float64]) -> None:
        """The material tangent ``A = ∂P/∂H`` (9, 9) [Pa] of one quadrature point into ``am``.

        ``A[ij,kl] = F⁻¹[l,i] Y[k,j] + μ δ_ik δ_jl + λ F⁻¹[j,i] F⁻¹[l,k]`` with ``Y = μF − P`` (into ``ym``), from
        :func:`first_piola_point`'s ``fm`` (F), ``fi`` (F⁻¹) and ``pu`` (P); the element stiffness
        ``K_ab`` of the module docstring is ``w g_a A g_b`` in this index form.
        """
        for i in range(3):
            for j in range(3):
                ym[i, j] = mu * fm[i, j] - pu[i, j]
        for ij in range(9):
            i, j = ij // 3, ij % 3
            for kl in range(9):
                kk, ll = kl // 3, kl % 3
                val = fi[ll, i] * ym[kk, j] + lam * fi[j, i] * fi[ll, kk]
                if i == kk and j == ll:
                    val += mu
                am[ij, kl] = val

    @njit(cache=True, fastmath=False, nogil=True)
    def forces_stiffness_kernel(
        u: NDArray[np.float64],
        tets: NDArray[np.int64],
        grad: NDArray[np.float64],
        weights: NDArray[np.float64],
        mu: float,
        lam: float,
        scatter: NDArray[np.int64],
        nnz: int,
        with_stiffness: bool,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], float, float]:
        n_el, n_q = weights.shape
        forces = np.zeros(u.shape[0])
        data = np.zeros(nnz if with_stiffness else 0)
        energy = 0.0
        min_det = np.inf
        fm = np.empty((3, 3))
        fi = np.empty((3, 3))
        hm = np.empty((3, 3))
        s2 = np.empty((3, 3))
        sg = np.empty(3)
        h = np.empty((10, 3))
        ue = np.empty((10, 3))
        fe = np.empty((10, 3))
        ke = np.empty((10, 3, 10, 3))
        for el in range(n_el):
            for a in range(10):
                for i in range(3):
                    ue[a, i] = u[3 * tets[el, a] + i]
            fe[:] = 0.0
            if with_stiffness:
                ke[:] = 0.0
            for qp in range(n_q):
                g = grad[el, qp]
                w = weights[el, qp]
                displacement_gradient(ue, g, hm)
                # Small-strain-accurate ln J and 2 E_green = H + Hᵀ + HᵀH (see forces_stiffness_numpy).
                det, log_j = strain_point(hm, fm, fi, s2)
                if det < min_det:
                    min_det = det
                if det <= 0.0:
                    continue
                c = mu - lam * log_j
                energy += w * (
                    0.5 * mu * (s2[0, 0] + s2[1, 1] + s2[2, 2]) - mu * log_j + 0.5 * lam * log_j * log_j
                )
                spatial_gradients(g, fi, h)
                add_point_forces(fe, g, fi, s2, h, w, mu, lam, log_j, sg)
                if with_stiffness:
                    wmu, wc, wl = w * mu, w * c, w * lam
                    for a in range(10):
                        for b in range(10):
                            gg = wmu * (g[a, 0] * g[b, 0] + g[a, 1] * g[b, 1] + g[a, 2] * g[b, 2])
                            for i in range(3):
                                for k in range(3):
                                    v = wc * h[a, k] * h[b, i] + wl * h[a, i] * h[b, k]
                                    if i == k:
                                        v += gg
                                    ke[a, i, b, k] += v
            for a in range(10):
                for i in range(3):
                    forces[3 * tets[el, a] + i] += fe[a, i]
            if with_stiffness:
                row = 0
                for a in range(10):
                    for i in range(3):
                        for b in range(10):
                            for k in range(3):
                                data[scatter[el, row]] += ke[a, i, b, k]
                                row += 1
        if min_det <= 0.0:
            energy = np.inf
        return forces, data, energy, min_det


def forces_stiffness_numba(
    u: NDArray[np.float64],
    tets: NDArray[np.int64],
    grad: NDArray[np.float64],
    weights: NDArray[np.float64],
    mu: float,
    lam: float,
    scatter: NDArray[np.int64],
    nnz: int,
    with_stiffness: bool = True,
) -> tuple[NDArray[np.float64], NDArray[np.float64], float, float]:
    """Assembled internal forces and CSR stiffness data in one compiled pass (serial, no element temporaries).

    Args:
        u: Global displacements [m], ``(3n,)``.
        tets: Connectivity, ``(e, 10)``.
        grad: Rest gradients [1/m], ``(e, q, 10, 3)``.
        weights: Quadrature weight × det J [m^3], ``(e, q)``.
        mu: Lamé μ [Pa].
        lam: Lamé λ [Pa].
        scatter: Element-entry -> CSR slot map, ``(e, 900)``
            (:class:`~retarget.fem.assembly.SparsityPattern`).
        nnz: Number of CSR entries.
        with_stiffness: Also assemble the stiffness data (else an empty array is returned for it).

    Returns:
        ``(forces (3n,) [N], data (nnz,) [N/m], energy [J], min det F)``; energy +inf if min det F <= 0.
    """
    if not NUMBA_AVAILABLE:
        raise RuntimeError("numba is not installed; use the numpy backend")
    return forces_stiffness_kernel(
        u, tets, grad, weights, float(mu), float(lam), scatter, int(nnz), with_stiffness
    )


if NUMBA_AVAILABLE:

    @njit(cache=True, fastmath=False, nogil=True)
    def _forces_stiffness_product_numba(
        u: NDArray[np.float64],
        v: NDArray[np.float64],
        tets: NDArray[np.int64],
        grad: NDArray[np.float64],
        weights: NDArray[np.float64],
        mu: float,
        lam: float,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """``f_int(u)`` and ``K(u) v`` of a compressible Neo-Hookean tet10 body, matrix-free.

        With ``h_a = F⁻ᵀ g_a``, ``c = μ − λ ln J`` and ``K_ab = Σ_q w (μ (g_a·g_b) I + c h_b h_aᵀ + λ h_a h_bᵀ)``:
        ``(K v)_a = Σ_q w (μ G g_a + c B h_a + λ tr(B) h_a)`` with ``G = Σ_b v_b g_bᵀ`` and ``B_ik = Σ_b h_(b,i) v_(b,k)``
        (so ``(B h_a)_i`` is read as ``Σ_k h_(a,k) B_ik``).

        Args:
            u, v: displacements [m] and the vector to multiply (3N,).
            tets: (E, 10); grad: rest shape gradients (E, Q, 10, 3); weights: (E, Q) (quadrature weight × det J).
            mu, lam: Lamé parameters [Pa].

        Returns:
            ``f_int`` (3N,) [N], ``K v`` (3N,), and the minimum ``det F`` (≤ 0: an inverted element).
        """
        n_el, n_q = weights.shape
        forces = np.zeros(u.shape[0])
        prod = np.zeros(u.shape[0])
        min_det = np.inf
        fm = np.empty((3, 3))
        fi = np.empty((3, 3))
        hm = np.empty((3, 3))
        s2 = np.empty((3, 3))
        sg = np.empty(3)
        h = np.empty((10, 3))
        ue = np.empty((10, 3))
        ve = np.empty((10, 3))
        fe = np.empty((10, 3))
        pe = np.empty((10, 3))
        gv = np.empty((3, 3))
        bm = np.empty((3, 3))
        for el in range(n_el):
            for a in range(10):
                for i in range(3):
                    ue[a, i] = u[3 * tets[el, a] + i]
                    ve[a, i] = v[3 * tets[el, a] + i]
            fe[:] = 0.0
            pe[:] = 0.0
            for qp in range(n_q):
                g = grad[el, qp]
                w = weights[el, qp]
                displacement_gradient(ue, g, hm)
                displacement_gradient(ve, g, gv)
                det, log_j = strain_point(hm, fm, fi, s2)
                if det < min_det:
                    min_det = det
                if det <= 0.0:
                    continue
                c = mu - lam * log_j
                spatial_gradients(g, fi, h)
                for i in range(3):
                    for k in range(3):
                        s = 0.0
                        for b in range(10):
                            s += h[b, i] * ve[b, k]
                        bm[i, k] = s
                tr_b = bm[0, 0] + bm[1, 1] + bm[2, 2]
                add_point_forces(fe, g, fi, s2, h, w, mu, lam, log_j, sg)
                for a in range(10):
                    for i in range(3):
                        pv = mu * (gv[i, 0] * g[a, 0] + gv[i, 1] * g[a, 1] + gv[i, 2] * g[a, 2])
                        pv += c * (h[a, 0] * bm[i, 0] + h[a, 1] * bm[i, 1] + h[a, 2] * bm[i, 2])
                        pv += lam * tr_b * h[a, i]
                        pe[a, i] += w * pv
            for a in range(10):
                for i in range(3):
                    forces[3 * tets[el, a] + i] += fe[a, i]
                    prod[3 * tets[el, a] + i] += pe[a, i]
        return forces, prod, min_det


def forces_stiffness_product_numba(
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    tets: NDArray[np.int64],
    grad: NDArray[np.float64],
    weights: NDArray[np.float64],
    mu: float,
    lam: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
    """``f_int(u)`` and ``K(u) v`` in one compiled pass, without assembling ``K`` (about 6× cheaper).

    With ``h_a = F⁻ᵀ g_a`` and ``c = μ − λ ln J`` (the ``K_ab`` of the module docstring):
    ``(K v)_a = Σ_q w (μ G g_a + c B h_a + λ tr(B) h_a)`` with ``G = Σ_b v_b g_bᵀ`` and ``B_ik = Σ_b h_(b,i) v_(b,k)``
    (``(B h_a)_i`` read as ``Σ_k h_(a,k) B_ik``); forces as :func:`forces_stiffness_numba`.

    Args:
        u: Global displacements [m], ``(3n,)``.
        v: The vector to multiply, ``(3n,)``.
        tets: Connectivity, ``(e, 10)``.
        grad: Rest gradients [1/m], ``(e, q, 10, 3)``.
        weights: Quadrature weight × det J [m^3], ``(e, q)``.
        mu: Lamé μ [Pa].
        lam: Lamé λ [Pa].

    Returns:
        ``(forces (3n,) [N], K v (3n,), min det F)``; elements with det F <= 0 contribute nothing.
    """
    if not NUMBA_AVAILABLE:
        raise RuntimeError("numba is not installed; use the numpy backend")
    return _forces_stiffness_product_numba(
        np.ascontiguousarray(u, dtype=np.float64), np.ascontiguousarray(v, dtype=np.float64), tets, grad, weights,
        float(mu), float(lam),
    )
