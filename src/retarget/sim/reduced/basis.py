"""Reduced bases of a deformable body in its reference frame: 6 rigid modes plus mass-PCA of local displacements.

All bases are orthonormal in the mass inner product ``⟨a, b⟩_M = aᵀ M b`` (M the consistent mass, (3N, 3N)), so
the reduced mass block ``UᵀMU`` is the identity. Mass-PCA (Barbič & James 2005) by the method of snapshots: with
the snapshots ``D`` (3N, s) M-projected off the rigid modes, the Gram matrix ``G = DᵀMD = VΛVᵀ`` gives the modes
``D V Λ^{-1/2}``; the eigenvalues are the mass-weighted variance each mode captures.

A body on a closed loop of the mechanism (the drummer's two legs between the base and the pelvis) also gets
*interface modes* (:func:`interface_modes`, Craig–Bampton's static constraint modes): the static deformation
when one coupled interface moves rigidly by a unit translation or rotation with the reference interface held.
Without them the loop's couplings over-constrain the few PCA modes (two legs must both reach the pelvis's pose:
12 rows for 6 pelvis DOFs and a handful of modes), which locks the loop or leaves no static equilibrium.

Optionally, *modal derivatives* of the leading PCA modes (:func:`modal_derivatives`, Barbič & James 2005) are
appended: the second-order static response ``K₀ ψᵢⱼ = −H(φᵢ, φⱼ)`` with the body's interfaces held, ``H`` the
second derivative of the internal forces at rest. They give a basis trained on one motion the stiff, small
"relief" shapes that larger deflections of the same modes need; how much that helps depends on the mesh
(docs/reduced.md §4).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from retarget.sim.reduced.defaults import DEFAULT_VARIANCE
from retarget.sim.reduced.errors import TrainingDataError

__all__ = [
    "DEFAULT_VARIANCE",
    "ReducedBasis",
    "interface_modes",
    "interface_rows",
    "PcaSpectrum",
    "mass_pca_basis",
    "mass_pca_spectrum",
    "modal_derivatives",
    "rigid_modes",
    "with_modal_derivatives",
]


@dataclass(frozen=True, eq=False)
class ReducedBasis:
    """A mass-orthonormal basis ``U`` (3N, r) of local displacements: 6 rigid modes, then deformation modes.

    Attributes:
        modes: ``U`` (3N, r) [m per unit z] node-major: rigid, then interface, then PCA modes.
        n_rigid: number of leading rigid modes (6).
        captured_variance: fraction of the snapshot variance (beyond the rigid and interface modes) the PCA modes
            capture (1 for a full basis).
        spectrum: mass-weighted variance per PCA mode [kg m²] (descending), for reports.
        n_interface: number of interface modes after the rigid ones (6 per loop coupling, see the module doc).
        n_derivatives: number of modal-derivative modes, last (:func:`with_modal_derivatives`).
        training_norm: the largest deformation among the training snapshots, ``max ‖z_def‖`` over the non-rigid
            coordinates (the M-norm of the deformation, [kg^½ m]); 0 when unknown. A simulation deforming the part
            well beyond it extrapolates the basis (:func:`retarget.sim.reduced.training.training_range`).
    """

    modes: NDArray[np.float64]
    n_rigid: int
    captured_variance: float
    spectrum: NDArray[np.float64]
    n_interface: int = 0
    training_norm: float = 0.0
    n_derivatives: int = 0

    @property
    def size(self) -> int:
        """r."""
        return int(self.modes.shape[1])

    @property
    def n_pca(self) -> int:
        """Number of PCA deformation modes (after the rigid and interface ones, before the modal derivatives)."""
        return self.size - self.n_rigid - self.n_interface - self.n_derivatives


def _m_orthonormalize(vectors: NDArray[np.float64], mass: sp.spmatrix) -> NDArray[np.float64]:
    """Modified Gram-Schmidt in the M inner product (twice, for round-off), columns in order."""
    out = np.array(vectors, dtype=float, copy=True)
    for _ in range(2):
        for j in range(out.shape[1]):
            for i in range(j):
                out[:, j] -= (out[:, i] @ (mass @ out[:, j])) * out[:, i]
            out[:, j] /= np.sqrt(out[:, j] @ (mass @ out[:, j]))
    return out


def rigid_modes(rest_local: NDArray[np.float64], mass: sp.spmatrix) -> NDArray[np.float64]:
    """The 6 infinitesimal rigid motions (3 translations, 3 rotations about the origin), M-orthonormal.

    Args:
        rest_local: rest node positions in the reference frame ``X̂⁰`` (N, 3) [m].
        mass: consistent mass (3N, 3N) [kg].

    Returns:
        (3N, 6).
    """
    n = len(rest_local)
    raw = np.zeros((n, 3, 6))
    for k in range(3):
        raw[:, k, k] = 1.0
        e = np.eye(3)[k]
        raw[:, :, 3 + k] = np.cross(e, rest_local)
    return _m_orthonormalize(raw.reshape(3 * n, 6), mass)


def interface_rows(wmat: NDArray[np.float64], nodes: NDArray[np.int64], rest: NDArray[np.float64]) -> NDArray[np.float64]:
    """The 6 linearized interface coordinates (centroid displacement, small rotation) as rows (6, 3N).

    ``wmat`` (12, 3k) maps the interface nodes to ``[x̄, vec A]`` (row-major A,
    :func:`retarget.sim.constraints.interface_map`); the coupling uses the polar rotation of A. At rest A is
    symmetric, ``A₀ = I`` (a solid interface) or the in-plane projector (an end face), and a change dA turns the
    polar rotation by ``ω = (tr(A₀) I − A₀)⁻¹ vee(dA − dAᵀ)`` (``vee`` of a skew matrix: its axial vector).

    Args:
        wmat: ``W`` (12, 3k). nodes: interface node ids (k,). rest: all rest node positions (N, 3) [m].
    """
    dofs = (3 * np.asarray(nodes)[:, None] + np.arange(3)).ravel()
    a0 = (wmat[3:] @ np.asarray(rest, dtype=float)[nodes].ravel()).reshape(3, 3)
    a = wmat[3:].reshape(3, 3, -1)
    skew = np.vstack([a[2, 1] - a[1, 2], a[0, 2] - a[2, 0], a[1, 0] - a[0, 1]])
    rot = np.linalg.solve(np.trace(a0) * np.eye(3) - 0.5 * (a0 + a0.T), skew)
    rows = np.zeros((6, 3 * len(rest)))
    rows[:, dofs] = np.vstack([wmat[:3], rot])
    return rows


def interface_modes(
    stiffness: sp.spmatrix, held: NDArray[np.float64], moved: list[NDArray[np.float64]]
) -> NDArray[np.float64]:
    """Static constraint modes (3N, 6·len(moved)): ``min ½uᵀKu`` with ``held u = 0`` and ``moved_j u = e_i``.

    Args:
        stiffness: rest tangent stiffness K (3N, 3N) [N/m] (singular along the rigid motions).
        held: interface rows of the reference coupling (6, 3N) (:func:`interface_rows`); they fix the rigid motion.
        moved: interface rows of each other coupling whose unit motions make modes.

    Raises:
        TrainingDataError: the interfaces do not fix the body (singular saddle-point system).
    """
    if not moved:
        return np.zeros((stiffness.shape[0], 0))
    g = np.vstack([held, *moved])
    n, m = stiffness.shape[0], g.shape[0]
    kkt = sp.bmat([[sp.csc_matrix(stiffness), sp.csc_matrix(g.T)], [sp.csc_matrix(g), None]], format="csc")
    rhs = np.zeros((n + m, 6 * len(moved)))
    rhs[n + 6 :, :] = np.eye(6 * len(moved))
    try:
        sol = spla.splu(kkt).solve(rhs)
    except RuntimeError as exc:  # exactly singular
        raise TrainingDataError(f"interface modes: the couplings do not hold the body ({exc})") from exc
    modes = sol[:n]
    if not np.all(np.isfinite(modes)) or np.max(np.abs(g @ modes - rhs[n:])) > 1e-6:
        raise TrainingDataError("interface modes: the couplings do not hold the body (singular system)")
    return modes


def _largest_deformation(snapshots: NDArray[np.float64], mass: sp.spmatrix, basis: NDArray[np.float64]) -> float:
    """``max ‖z_def‖`` of the snapshots over the basis' non-rigid coordinates (its ``training_norm``)."""
    z_def = np.asarray(snapshots, dtype=float) @ (mass @ basis[:, 6:])
    return float(np.max(np.linalg.norm(z_def, axis=1)))


@dataclass(frozen=True, eq=False)
class PcaSpectrum:
    """The mass-PCA of a body's snapshots before a mode count is chosen (:func:`mass_pca_spectrum`): what
    :func:`mass_pca_basis` needs for any ``n_modes`` or ``variance``, so that trials of several mode counts on the
    same snapshots (the training's replay check) solve the eigenproblem once.

    Attributes:
        fixed: the rigid modes, then the interface modes, M-orthonormal (3N, 6 + e).
        deformation: the snapshots M-projected off ``fixed`` (3N, s) [m].
        raw: the snapshots' deformation's mass-weighted variance, off the rigid modes only (for scale).
        eigenvalues: of the deformation's mass-weighted Gram matrix, descending (s,). eigenvectors: (s, s), in the
            same order.
        n_extra: e, the interface modes.
    """

    fixed: NDArray[np.float64]
    deformation: NDArray[np.float64]
    raw: float
    eigenvalues: NDArray[np.float64]
    eigenvectors: NDArray[np.float64]
    n_extra: int


def mass_pca_spectrum(
    snapshots: NDArray[np.float64],
    rest_local: NDArray[np.float64],
    mass: sp.spmatrix,
    extra_modes: NDArray[np.float64] | None = None,
) -> PcaSpectrum:
    """The mass-PCA of local displacement snapshots off the rigid and interface modes (arguments as
    :func:`mass_pca_basis`'s).

    Raises:
        TrainingDataError: wrong shapes.
    """
    d = np.asarray(snapshots, dtype=float)
    n3 = 3 * len(rest_local)
    if d.ndim != 2 or d.shape[1] != n3:
        raise TrainingDataError(f"snapshots must have shape (s, {n3}), got {d.shape}")
    extra = np.zeros((n3, 0)) if extra_modes is None else np.asarray(extra_modes, dtype=float)
    if extra.shape[0] != n3:
        raise TrainingDataError(f"extra modes must have {n3} rows, got {extra.shape}")
    fixed = _m_orthonormalize(np.hstack([rigid_modes(rest_local, mass), extra]), mass)
    # Remove the rigid (and interface) part by M-projection so the PCA sees the remaining deformation only.
    rigid = fixed[:, :6]
    d = d.T - rigid @ (rigid.T @ (mass @ d.T))
    raw = float(np.sum(d * (mass @ d)))  # the deformation's mass-weighted variance, for scale
    d = d - fixed @ (fixed.T @ (mass @ d))
    gram = d.T @ (mass @ d)
    lam, vec = np.linalg.eigh(0.5 * (gram + gram.T))
    return PcaSpectrum(fixed, d, raw, lam[::-1], vec[:, ::-1], extra.shape[1])


def mass_pca_basis(
    snapshots: NDArray[np.float64],
    rest_local: NDArray[np.float64],
    mass: sp.spmatrix,
    n_modes: int | None = None,
    variance: float = DEFAULT_VARIANCE,
    max_modes: int = 60,
    extra_modes: NDArray[np.float64] | None = None,
    cap: bool = False,
    spectrum: PcaSpectrum | None = None,
) -> ReducedBasis:
    """Rigid modes, optional interface modes, then mass-PCA modes of local displacement snapshots.

    Args:
        snapshots: local displacements ``u`` (s, 3N) [m] (the body's nodes in its reference body's frame minus
            ``X̂⁰``).
        rest_local: ``X̂⁰`` (N, 3) [m].
        mass: consistent mass (3N, 3N) [kg].
        n_modes: number of PCA deformation modes (overrides ``variance``).
        variance: smallest captured fraction of the mass-weighted variance, in (0, 1].
        max_modes: cap on the deformation modes chosen by variance.
        extra_modes: interface modes (3N, e) (:func:`interface_modes`), kept in full; the PCA sees the snapshots
            M-projected off them and the rigid modes.
        cap: treat ``n_modes`` as an upper bound (fewer when the snapshots support fewer) instead of an error.
        spectrum: :func:`mass_pca_spectrum` of these snapshots, rest positions, mass and extra modes, computed
            before (``extra_modes`` is then unused); None: computed here.

    Returns:
        The basis, ``r = 6 + e + n_modes``.

    Raises:
        TrainingDataError: wrong shapes, no deformation in the snapshots, or more modes asked than available.
    """
    if not 0.0 < variance <= 1.0:
        raise TrainingDataError(f"variance must be in (0, 1], got {variance}")
    pca = mass_pca_spectrum(snapshots, rest_local, mass, extra_modes) if spectrum is None else spectrum
    fixed, d, raw, n_extra = pca.fixed, pca.deformation, pca.raw, pca.n_extra
    lam, vec = pca.eigenvalues, pca.eigenvectors
    total = float(lam.clip(min=0.0).sum())
    floor = 1e-12 * raw  # below: round-off of the projections
    if total <= floor:
        if n_extra and (not n_modes or cap):
            return ReducedBasis(fixed, 6, 1.0, np.zeros(0), n_extra, _largest_deformation(snapshots, mass, fixed))
        what = "rigid motion and the interface modes" if n_extra else "rigid motion"
        raise TrainingDataError(f"asked for {n_modes} deformation modes; the snapshots support 0 beyond {what}"
                                if n_modes else f"snapshots contain no deformation beyond {what}")
    usable = int(np.sum(lam > max(1e-12 * lam[0], floor)))
    if n_modes is None:
        frac = np.cumsum(lam[:usable]) / total
        k = int(np.searchsorted(frac, variance - 1e-15) + 1)
        k = min(k, usable, max_modes)
    else:
        if n_modes < 0 or (n_modes > usable and not cap):
            raise TrainingDataError(f"asked for {n_modes} deformation modes; the snapshots support {usable}")
        k = min(int(n_modes), usable)
    modes = d @ (vec[:, :k] / np.sqrt(lam[:k]))
    basis = _m_orthonormalize(np.hstack([fixed, modes]), mass)
    return ReducedBasis(basis, 6, float(lam[:k].sum() / total), lam[:usable].copy(), n_extra,
                        _largest_deformation(snapshots, mass, basis))


def force_hessian(
    elastic: object, a: NDArray[np.float64], b: NDArray[np.float64], step: float = 1e-6
) -> NDArray[np.float64]:
    """``H(a, b) = ∂²f_int/∂u² [a, b]`` at rest (3N,) [N per unit a, b]: ``(K(εa) b − K(−εa) b) / 2ε``.

    ``ε`` makes ``εa`` displace a node by at most ``step`` × the body's extent (central difference: relative error
    ≈ ``step``²; the product is symmetric in ``a, b`` up to that error).

    Args:
        elastic: the :class:`retarget.fem.ElasticBody`. a, b: displacement directions (3N,).
    """
    nodes = elastic.mesh.nodes  # type: ignore[attr-defined]
    extent = float(np.max(np.ptp(nodes, axis=0)))
    eps = step * extent / float(np.max(np.abs(a)))
    product = elastic.stiffness_product  # type: ignore[attr-defined]
    return (product(eps * a, b) - product(-eps * a, b)) / (2.0 * eps)


def modal_derivatives(
    elastic: object, held: NDArray[np.float64], modes: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Modal derivatives ``ψᵢⱼ`` (i ≤ j) of ``modes`` (3N, k): ``K₀ ψ = −H(φᵢ, φⱼ)`` with ``held ψ = 0``.

    Args:
        elastic: the :class:`retarget.fem.ElasticBody` (``rest_stiffness`` and :func:`force_hessian`).
        held: interface rows (m, 3N) held fixed (:func:`interface_rows` of the reference coupling and of every loop
            coupling); they must remove the rigid motions.
        modes: the modes φ (3N, k).

    Returns:
        (3N, k(k+1)/2), in the order (0,0), (0,1), …, (0,k−1), (1,1), …

    Raises:
        TrainingDataError: the held rows do not fix the body.
    """
    phi = np.asarray(modes, dtype=float)
    n, m = phi.shape[0], held.shape[0]
    k0 = sp.csc_matrix(elastic.rest_stiffness)  # type: ignore[attr-defined]
    g = float(np.mean(np.abs(k0.diagonal()))) * sp.csc_matrix(held)  # rows scaled like K₀: a well-pivoted KKT
    kkt = sp.bmat([[k0, g.T], [g, None]], format="csc")
    pairs = [(i, j) for i in range(phi.shape[1]) for j in range(i, phi.shape[1])]
    rhs = np.zeros((n + m, len(pairs)))
    for c, (i, j) in enumerate(pairs):
        rhs[:n, c] = -force_hessian(elastic, phi[:, i], phi[:, j])
    try:
        sol = spla.splu(kkt).solve(rhs)
    except RuntimeError as exc:
        raise TrainingDataError(f"modal derivatives: the held interfaces do not fix the body ({exc})") from exc
    if not np.all(np.isfinite(sol)):
        raise TrainingDataError("modal derivatives: the held interfaces do not fix the body (singular system)")
    return sol[:n]


def with_modal_derivatives(
    basis: ReducedBasis, elastic: object, held: NDArray[np.float64], count: int, mass: sp.spmatrix,
    drop: float = 1e-8,
) -> ReducedBasis:
    """``basis`` with the modal derivatives of its first ``count`` PCA modes appended (M-orthonormal).

    The derivatives, each scaled to unit K₀-norm (strain energy), are M-projected off the basis; their remaining
    span is orthonormalized through its K₀ Gram matrix, dropping directions whose squared K₀-norm is below ``drop``
    (a derivative the basis already holds adds nothing). Not the M-norm: the shapes these derivatives add are stiff
    and small, below 1e-8 of their squared M-norm outside a PCA basis yet most of their strain energy.

    Args:
        basis: from :func:`mass_pca_basis`. elastic: the body's :class:`retarget.fem.ElasticBody`.
        held: interface rows held fixed (see :func:`modal_derivatives`). count: leading PCA modes differentiated
            (at most ``basis.n_pca``; 0 returns ``basis``). mass: consistent mass (3N, 3N).
    """
    k = min(int(count), basis.n_pca)
    if k <= 0:
        return basis
    first = basis.n_rigid + basis.n_interface
    psi = modal_derivatives(elastic, held, basis.modes[:, first : first + k])
    k0 = elastic.rest_stiffness  # type: ignore[attr-defined]
    norms = np.sqrt(np.einsum("ij,ij->j", psi, k0 @ psi))
    psi = psi[:, norms > 0.0] / norms[norms > 0.0]  # unit K₀-norm each: they scale as the square of their modes
    psi = psi - basis.modes @ (basis.modes.T @ (mass @ psi))
    # What the basis lacks is judged by strain energy: the shapes that matter are stiff and tiny (M-norm ≈ 1e-4 of
    # theirs outside a rod's PCA span, K₀-norm 0.3-6.6 of it; docs/reduced.md §4).
    gram = psi.T @ (k0 @ psi)
    lam, vec = np.linalg.eigh(0.5 * (gram + gram.T))
    keep = lam > drop
    if not np.any(keep):
        return basis
    # Gram–Schmidt after the basis' own (orthonormal) columns also removes the projection's round-off.
    modes = _m_orthonormalize(np.hstack([basis.modes, psi @ vec[:, keep]]), mass)
    return replace(basis, modes=modes, n_derivatives=basis.n_derivatives + int(np.count_nonzero(keep)))
