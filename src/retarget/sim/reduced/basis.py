"""Reduced bases of a deformable body in its reference frame: 6 rigid modes plus mass-PCA of local displacements.

All bases are orthonormal in the mass inner product ``⟨a, b⟩_M = aᵀ M b`` (M the consistent mass, (3N, 3N)), so
the reduced mass block ``UᵀMU`` is the identity. Mass-PCA (Barbič & James 2005) by the method of snapshots: with
the snapshots ``D`` (3N, s) M-projected off the rigid modes, the Gram matrix ``G = DᵀMD = VΛVᵀ`` gives the modes
``D V Λ^{-1/2}``; the eigenvalues are the mass-weighted variance each mode captures.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from retarget.sim.reduced.errors import TrainingDataError

__all__ = ["DEFAULT_VARIANCE", "ReducedBasis", "mass_pca_basis", "rigid_modes"]

#: Default fraction of the mass-weighted snapshot variance the deformation modes must capture.
DEFAULT_VARIANCE: float = 0.9999


@dataclass(frozen=True, eq=False)
class ReducedBasis:
    """A mass-orthonormal basis ``U`` (3N, r) of local displacements: 6 rigid modes, then deformation modes.

    Attributes:
        modes: ``U`` (3N, r) [m per unit z] node-major.
        n_rigid: number of leading rigid modes (6).
        captured_variance: fraction of the snapshot variance the deformation modes capture (1 for a full basis).
        spectrum: mass-weighted variance per deformation mode [kg m²] (descending), for reports.
    """

    modes: NDArray[np.float64]
    n_rigid: int
    captured_variance: float
    spectrum: NDArray[np.float64]

    @property
    def size(self) -> int:
        """r."""
        return int(self.modes.shape[1])


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


def mass_pca_basis(
    snapshots: NDArray[np.float64],
    rest_local: NDArray[np.float64],
    mass: sp.spmatrix,
    n_modes: int | None = None,
    variance: float = DEFAULT_VARIANCE,
    max_modes: int = 60,
) -> ReducedBasis:
    """Rigid modes plus mass-PCA modes of local displacement snapshots.

    Args:
        snapshots: local displacements ``u`` (s, 3N) [m] (the body's nodes in its reference body's frame minus
            ``X̂⁰``).
        rest_local: ``X̂⁰`` (N, 3) [m].
        mass: consistent mass (3N, 3N) [kg].
        n_modes: number of deformation modes (overrides ``variance``).
        variance: smallest captured fraction of the mass-weighted variance, in (0, 1].
        max_modes: cap on the deformation modes chosen by variance.

    Returns:
        The basis, ``r = 6 + n_modes``.

    Raises:
        TrainingDataError: wrong shapes, no deformation in the snapshots, or more modes asked than available.
    """
    d = np.asarray(snapshots, dtype=float)
    n3 = 3 * len(rest_local)
    if d.ndim != 2 or d.shape[1] != n3:
        raise TrainingDataError(f"snapshots must have shape (s, {n3}), got {d.shape}")
    if not 0.0 < variance <= 1.0:
        raise TrainingDataError(f"variance must be in (0, 1], got {variance}")
    rigid = rigid_modes(rest_local, mass)
    # Remove the rigid part (M-projection) so the PCA sees deformation only.
    d = d.T - rigid @ (rigid.T @ (mass @ d.T))
    gram = d.T @ (mass @ d)
    lam, vec = np.linalg.eigh(0.5 * (gram + gram.T))
    lam, vec = lam[::-1], vec[:, ::-1]
    total = float(lam.clip(min=0.0).sum())
    if total <= 0.0:
        raise TrainingDataError("snapshots contain no deformation beyond rigid motion")
    usable = int(np.sum(lam > 1e-12 * lam[0]))
    if n_modes is None:
        frac = np.cumsum(lam[:usable]) / total
        k = int(np.searchsorted(frac, variance - 1e-15) + 1)
        k = min(k, usable, max_modes)
    else:
        if n_modes < 0 or n_modes > usable:
            raise TrainingDataError(f"asked for {n_modes} deformation modes; the snapshots support {usable}")
        k = int(n_modes)
    modes = d @ (vec[:, :k] / np.sqrt(lam[:k]))
    basis = _m_orthonormalize(np.hstack([rigid, modes]), mass)
    return ReducedBasis(basis, 6, float(lam[:k].sum() / total), lam[:usable].copy())
