"""Precomputed layouts for fast per-iteration assembly: packed joint blocks and fixed sparsity patterns.

Everything here is computed once per :class:`retarget.sim.system.System` (cached by identity, see :func:`plan_for`)
so that a Newton iteration only fills value arrays: a :class:`Pattern` maps a fixed, ordered list of COO entries
(duplicates allowed) onto a CSC (or dense) matrix with one ``np.bincount``.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from retarget.sim.constraints import JointConstraint, RigidSlot
from retarget.sim.kernels import JOINT_KIND_CODES, MAX_JOINT_ROWS, joint_block_terms
from retarget.sim.system import System

__all__ = ["JointPack", "JointTerms", "Pattern", "joint_pack", "joint_terms"]


@dataclass(frozen=True, eq=False)
class JointPack:
    """The joint blocks of a system packed for :func:`retarget.sim.kernels.joint_block_terms`.

    Attributes:
        blocks: indices of the packed blocks in ``system.constraints`` (nj,).
        kinds, sizes, motors, lam_offsets: (nj,) each.
        bodies: (nj, 2) rigid body per side (-1 = world).
        anchors: (nj, 2, 3) [m]; axes: (nj, 2, 3, 3).
        u_index: (nj, 2, 7) global U index of each side's ``[c, q]`` (-1 = world).
        v_index: (nj, 2, 6) global V index of each side's ``[v, ω]`` (-1 = world).
        rows: (nj, 6) global λ row of each block row (-1 = padding).
    """

    blocks: NDArray[np.int64]
    kinds: NDArray[np.int64]
    sizes: NDArray[np.int64]
    motors: NDArray[np.int64]
    lam_offsets: NDArray[np.int64]
    bodies: NDArray[np.int64]
    anchors: NDArray[np.float64]
    axes: NDArray[np.float64]
    u_index: NDArray[np.int64]
    v_index: NDArray[np.int64]
    rows: NDArray[np.int64]

    @property
    def n(self) -> int:
        """Number of packed blocks."""
        return len(self.blocks)


@dataclass(frozen=True, eq=False)
class JointTerms:
    """Outputs of :func:`joint_terms` (shapes in :func:`retarget.sim.kernels.joint_block_terms`)."""

    c: NDArray[np.float64]
    r3: NDArray[np.float64]
    force: NDArray[np.float64]
    c_u: NDArray[np.float64]
    c_v: NDArray[np.float64]
    r3_u: NDArray[np.float64]
    force_u: NDArray[np.float64]
    c_theta: NDArray[np.float64]
    r3_theta: NDArray[np.float64]
    force_theta: NDArray[np.float64]


_PACKS: weakref.WeakKeyDictionary[System, JointPack] = weakref.WeakKeyDictionary()


def joint_pack(system: System) -> JointPack:
    """The (cached) :class:`JointPack` of ``system``: every :class:`JointConstraint` block."""
    cached = _PACKS.get(system)
    if cached is not None:
        return cached
    idx = [k for k, b in enumerate(system.constraints) if isinstance(b, JointConstraint)]
    nj = len(idx)
    kinds = np.zeros(nj, np.int64)
    sizes = np.zeros(nj, np.int64)
    motors = np.full(nj, -1, np.int64)
    l0 = np.zeros(nj, np.int64)
    bodies = np.full((nj, 2), -1, np.int64)
    anchors = np.zeros((nj, 2, 3))
    axes = np.zeros((nj, 2, 3, 3))
    u_index = np.full((nj, 2, 7), -1, np.int64)
    v_index = np.full((nj, 2, 6), -1, np.int64)
    rows = np.full((nj, MAX_JOINT_ROWS), -1, np.int64)
    for j, k in enumerate(idx):
        blk = system.constraints[k]
        assert isinstance(blk, JointConstraint)
        kinds[j] = JOINT_KIND_CODES[blk.kind]
        sizes[j] = blk.size
        motors[j] = blk.motor
        l0[j] = system.lambda_offsets[k]
        rows[j, : blk.size] = l0[j] + np.arange(blk.size)
        slots = iter(blk.slots)
        for side in range(2):
            if blk.present[side]:
                slot = next(slots)
                assert isinstance(slot, RigidSlot)
                bodies[j, side] = slot.body
                u_index[j, side] = 7 * slot.body + np.arange(7)
                v_index[j, side] = 6 * slot.body + np.arange(6)
        anchors[j, 0], anchors[j, 1] = blk.anchor_a, blk.anchor_b
        axes[j, 0], axes[j, 1] = blk.axes_a, blk.axes_b
    pack = JointPack(np.asarray(idx, np.int64), kinds, sizes, motors, l0, bodies, anchors, axes, u_index, v_index, rows)
    _PACKS[system] = pack
    return pack


def joint_terms(
    pack: JointPack,
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    lam: NDArray[np.float64],
    theta: NDArray[np.float64],
    theta_dot: NDArray[np.float64],
    baumgarte: float,
    second_order: bool,
) -> JointTerms:
    """Evaluate every packed joint block (one compiled call)."""
    out = joint_block_terms(
        pack.kinds,
        pack.sizes,
        pack.motors,
        pack.bodies,
        pack.anchors,
        pack.axes,
        pack.lam_offsets,
        np.ascontiguousarray(u, dtype=np.float64),
        np.ascontiguousarray(v, dtype=np.float64),
        np.ascontiguousarray(lam, dtype=np.float64),
        np.ascontiguousarray(theta, dtype=np.float64).reshape(-1),
        np.ascontiguousarray(theta_dot, dtype=np.float64).reshape(-1),
        float(baumgarte),
        bool(second_order),
    )
    return JointTerms(*out)


class Pattern:
    """A fixed list of COO entries ``(rows, cols)`` (duplicates summed) and its compressed layout.

    ``matrix(values)`` returns the CSC matrix (or, with ``dense=True``, the dense array) whose entry sums the
    ``values`` given for it, in the order of the entries passed at construction.

    Args:
        rows, cols: (n_entries,) indices.
        shape: matrix shape.
        dense: build dense arrays (small systems: a LAPACK solve beats any sparse one).
    """

    def __init__(self, rows: NDArray[np.int64], cols: NDArray[np.int64], shape: tuple[int, int], dense: bool) -> None:
        self.shape = shape
        self.dense = dense
        self.n_entries = len(rows)
        if dense:
            self.target = (np.asarray(rows, np.int64) * shape[1] + np.asarray(cols, np.int64)).astype(np.int64)
            self.nnz = shape[0] * shape[1]
            return
        key = np.asarray(cols, np.int64) * shape[0] + np.asarray(rows, np.int64)
        unique, inverse = np.unique(key, return_inverse=True)
        self.target = inverse.astype(np.int64)
        self.nnz = len(unique)
        self.indices = (unique % shape[0]).astype(np.int32)
        counts = np.bincount((unique // shape[0]).astype(np.int64), minlength=shape[1])
        self.indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    def data(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Summed values per stored entry (nnz,)."""
        return np.bincount(self.target, weights=values, minlength=self.nnz)

    def matrix(self, values: NDArray[np.float64]) -> NDArray[np.float64] | sp.csc_matrix:
        """The assembled matrix."""
        data = self.data(values)
        if self.dense:
            return data.reshape(self.shape)
        return sp.csc_matrix((data, self.indices, self.indptr), shape=self.shape)
