"""Precomputed inertia tensors of a deformable body in relative coordinates (docs/reduced.md §2).

A deformable body is expressed in the frame of a reference rigid body (centre of mass ``c``, rotation ``R``):
node positions ``x_a = c + R x̂_a``, ``x̂ = X̂⁰ + u``, ``u = U z`` (U: (3N, r); U = I for the full space). With the
scalar consistent mass ``m_ab = ∫ρ N_a N_b`` (the 3N mass is ``m ⊗ I₃``) every inertial integral is a polynomial
in ``z`` whose coefficients are the tensors here:

- ``m_f = Σ_ab m_ab``; first moment ``s = s₀ + S₁ z``;
- ``P = Σ m_ab x̂_a x̂_bᵀ = P₀ + Σ_l z_l (P₁_l + P₁_lᵀ) + Σ_kl z_k z_l P₂_kl`` with ``P₁_l = Σ m_ab Û_l,a X̂⁰_bᵀ``,
  ``P₂_kl = Σ m_ab Û_k,a Û_l,bᵀ`` (``Û_l,a``: mode l at node a, (3,)); rotational inertia ``J = tr(P) I − P``;
- ``C_l = C₀_l + Σ_k z_k C₁_kl`` with ``C₀_l = Σ m_ab X̂⁰_a × Û_l,b``, ``C₁_kl = Σ m_ab Û_k,a × Û_l,b``
  (antisymmetric in k, l): the coupling of the rotation to the modal accelerations;
- ``M_zz = UᵀMU``; gravity enters through ``m_f`` and ``S₁``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from retarget.errors import InputError

__all__ = ["InertiaTensors", "ReducedInterface", "inertia_tensors", "reduce_interface", "scalar_mass"]


class InertiaTensors(NamedTuple):
    """The constant inertia tensors of one deformable body for a basis ``U`` (3N, r) (module docstring).

    A named tuple: the compiled kernels (:func:`retarget.sim.reduced.dynamics.body_forces`) take it as one record,
    from Python as from the compiled engine, which builds one per body from its packed copies.

    Attributes:
        mass: ``m_f`` [kg].
        s0: (3,) [kg m]. s1: (3, r) [kg m].
        p0: (3, 3) [kg m²]. p1: (r, 3, 3). p2: (r, r, 3, 3).
        c0: (r, 3). c1: (r, r, 3).
        m_zz: (r, r) [kg].
    """

    mass: float
    s0: NDArray[np.float64]
    s1: NDArray[np.float64]
    p0: NDArray[np.float64]
    p1: NDArray[np.float64]
    p2: NDArray[np.float64]
    c0: NDArray[np.float64]
    c1: NDArray[np.float64]
    m_zz: NDArray[np.float64]

    @property
    def size(self) -> int:
        """r."""
        return int(self.m_zz.shape[0])


def scalar_mass(mass: sp.spmatrix) -> sp.csr_matrix:
    """The scalar consistent mass ``m_ab`` (N, N) from the node-major ``m ⊗ I₃`` (3N, 3N)."""
    m = sp.csr_matrix(mass)
    return m[0::3, 0::3].tocsr()


def inertia_tensors(mass: sp.spmatrix, rest_local: NDArray[np.float64], basis: NDArray[np.float64]) -> InertiaTensors:
    """Compute the tensors (cost O(nnz·r + N r²·9), once per model).

    Args:
        mass: consistent mass (3N, 3N) [kg] (node-major, ``m ⊗ I₃``).
        rest_local: ``X̂⁰`` (N, 3) [m], rest nodes in the reference body's frame.
        basis: ``U`` (3N, r).
    """
    x0 = np.asarray(rest_local, dtype=float)
    n = len(x0)
    u = np.asarray(basis, dtype=float)
    if u.ndim != 2 or u.shape[0] != 3 * n:
        raise InputError(f"basis must have shape ({3 * n}, r), got {u.shape}")
    r = u.shape[1]
    m = scalar_mass(mass)
    ur = u.reshape(n, 3, r)
    m_node = np.asarray(m.sum(axis=1)).ravel()
    mx = m @ x0  # (N, 3)
    mu = (m @ u.reshape(n, 3 * r)).reshape(n, 3, r)
    s0 = m_node @ x0
    s1 = np.einsum("a,air->ir", m_node, ur)
    p0 = x0.T @ mx
    # C order, as the compiled engine's packed copies: the kernels called from Python then share their signature.
    p1 = np.ascontiguousarray(np.einsum("air,aj->rij", ur, mx))
    p2 = np.ascontiguousarray(np.einsum("aik,ajl->klij", ur, mu, optimize=True))
    c0 = np.cross(mx[:, :, None], ur, axis=1).sum(axis=0).T  # Σ_b (m X̂⁰)_b × Û_l,b
    c1 = np.zeros((r, r, 3))
    for k in range(r):
        c1[k] = np.cross(mu[:, :, k][:, :, None], ur, axis=1).sum(axis=0).T
    m_zz = u.T @ (sp.csr_matrix(mass) @ u)
    return InertiaTensors(float(m_node.sum()), s0, s1, p0, p1, p2, c0, c1, 0.5 * (m_zz + m_zz.T))


@dataclass(frozen=True, eq=False)
class ReducedInterface:
    """An interface's coupling slot ``[x̄̂, vec(Â)] = y₀ + Y z`` in the reference body's frame.

    The world slot of :class:`retarget.sim.constraints.InterfaceSlot` is then ``[c + R x̄̂, vec(R Â)]`` (the
    best-fit map's translation part vanishes because ``Σ b_i = 0``).

    Attributes:
        y0: (12,) [m]. y: (12, r).
        centroid: the world reference centroid ``X̄`` (3,) [m].
    """

    y0: NDArray[np.float64]
    y: NDArray[np.float64]
    centroid: NDArray[np.float64]


def reduce_interface(
    wmat: NDArray[np.float64],
    nodes: NDArray[np.int64],
    rest_local: NDArray[np.float64],
    basis: NDArray[np.float64],
    centroid: NDArray[np.float64],
) -> ReducedInterface:
    """Project an interface map ``W`` (12, 3k) (:func:`retarget.sim.constraints.interface_map`) onto the basis.

    Args:
        wmat: ``W`` (12, 3k).
        nodes: interface node ids (k,).
        rest_local: ``X̂⁰`` (N, 3) [m].
        basis: ``U`` (3N, r).
        centroid: world reference centroid (3,) [m].
    """
    dofs = (3 * np.asarray(nodes)[:, None] + np.arange(3)).ravel()
    return ReducedInterface(wmat @ rest_local[nodes].ravel(), wmat @ basis[dofs], np.asarray(centroid, float))
