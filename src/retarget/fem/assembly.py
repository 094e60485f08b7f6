"""Sparse assembly with a precomputed pattern.

The CSR pattern of a 3-DOF-per-node mesh and the map from every element-matrix entry to its slot in the CSR
``data`` array are computed once; each assembly is then a single scatter-add (``np.bincount``) of the element
matrices into ``data``. Every matrix of an :class:`~retarget.fem.elastic.ElasticBody` (stiffness, mass,
damping) uses this one pattern, so sums such as α M + β K are plain operations on ``data``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

__all__ = ["SparsityPattern"]


@dataclass(frozen=True, eq=False)
class SparsityPattern:
    """CSR pattern of the (3n, 3n) matrices of a tet10 mesh and the element-to-CSR scatter map.

    Attributes:
        n_dofs: Matrix size 3 n.
        indptr: CSR row pointers, ``(3n + 1,)``.
        indices: CSR column indices, sorted within each row, ``(nnz,)``.
        element_dofs: Global DOF of each element DOF (node-major, 3 per node), ``(e, 30)``.
        scatter: CSR data slot of element entry (r, c) at ``[e, 30 r + c]``, ``(e, 900)``.
    """

    n_dofs: int
    indptr: NDArray[np.int32]
    indices: NDArray[np.int32]
    element_dofs: NDArray[np.int64]
    scatter: NDArray[np.int64]

    @property
    def nnz(self) -> int:
        """Number of stored entries."""
        return int(self.indices.shape[0])

    @classmethod
    def from_tets(cls, tets: NDArray[np.int64], n_nodes: int) -> SparsityPattern:
        """Build the pattern of a mesh.

        Works on node pairs first (100 per element) and expands to 3×3 blocks, which is 9 times cheaper than a
        unique over DOF pairs.

        Args:
            tets: Element connectivity, ``(e, k)`` (k = 10 for tet10).
            n_nodes: Number of nodes n.
        """
        e, k = tets.shape
        keys = (tets[:, :, None] * n_nodes + tets[:, None, :]).ravel()
        pairs, inverse = np.unique(keys, return_inverse=True)
        row_node, col_node = pairs // n_nodes, pairs % n_nodes
        node_ptr = np.zeros(n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(row_node, minlength=n_nodes), out=node_ptr[1:])
        degree = np.diff(node_ptr)
        # Row 3A+i holds, for each neighbour B of A (sorted), the three columns 3B, 3B+1, 3B+2.
        rows_len = np.repeat(3 * degree, 3)
        indptr = np.zeros(3 * n_nodes + 1, dtype=np.int64)
        np.cumsum(rows_len, out=indptr[1:])
        comp = np.arange(3)
        indices = np.empty(int(indptr[-1]), dtype=np.int64)
        for i in range(3):
            # Rows 3A+i start at 9 node_ptr[A] + 3 i degree[A]; their columns are 3B + k.
            start = (
                9 * node_ptr[row_node]
                + 3 * i * degree[row_node]
                + 3 * (np.arange(pairs.size) - node_ptr[row_node])
            )
            indices[start[:, None] + comp] = 3 * col_node[:, None] + comp
        # Map element entry (a, i, b, kk) -> slot.
        j = inverse.reshape(e, k, k)
        a_node = row_node[j]
        p = j - node_ptr[a_node]
        base = 9 * node_ptr[a_node] + 3 * p  # (e, k, k)
        deg = degree[a_node]
        slot = (
            base[:, :, None, :, None]
            + 3 * comp[None, None, :, None, None] * deg[:, :, None, :, None]
            + comp[None, None, None, None, :]
        )  # (e, a, i, b, kk)
        element_dofs = (3 * tets[:, :, None] + comp).reshape(e, 3 * k)
        n_dofs = 3 * n_nodes
        index_dtype = np.int32 if indptr[-1] < np.iinfo(np.int32).max else np.int64
        return cls(
            n_dofs=n_dofs,
            indptr=indptr.astype(index_dtype),
            indices=indices.astype(index_dtype),
            element_dofs=element_dofs,
            scatter=slot.reshape(e, (3 * k) ** 2),
        )

    def assemble_data(
        self, element_matrices: NDArray[np.float64], elements: slice | None = None
    ) -> NDArray[np.float64]:
        """Scatter-add element matrices into a CSR ``data`` array.

        Args:
            element_matrices: ``(c, 30, 30)`` for the elements selected by ``elements`` (all by default).
            elements: Slice of elements the matrices belong to.

        Returns:
            ``(nnz,)`` data.
        """
        idx = self.scatter if elements is None else self.scatter[elements]
        return np.bincount(idx.ravel(), weights=element_matrices.ravel(), minlength=self.nnz)

    def assemble_vector(
        self, element_vectors: NDArray[np.float64], elements: slice | None = None
    ) -> NDArray[np.float64]:
        """Scatter-add element vectors ``(c, 30)`` into a global ``(3n,)`` vector."""
        dofs = self.element_dofs if elements is None else self.element_dofs[elements]
        return np.bincount(dofs.ravel(), weights=element_vectors.ravel(), minlength=self.n_dofs)

    def matrix(self, data: NDArray[np.float64]) -> sp.csr_matrix:
        """A CSR matrix with this pattern and ``data`` (index arrays are copied: callers may mutate them)."""
        m = sp.csr_matrix((data, self.indices.copy(), self.indptr.copy()), shape=(self.n_dofs, self.n_dofs))
        m.has_sorted_indices = True
        return m
