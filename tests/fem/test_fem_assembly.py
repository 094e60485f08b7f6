"""Tests of retarget.fem.assembly: the precomputed CSR pattern and scatter map against a COO reference."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from retarget.fem.assembly import SparsityPattern
from retarget.fem.mesh import bar_mesh


def test_scatter_assembly_equals_coo_assembly() -> None:
    mesh = bar_mesh(0.03, 0.01, 0.005, n_axial=3)
    pattern = SparsityPattern.from_tets(mesh.tets, mesh.n_nodes)
    rng = np.random.default_rng(0)
    ke = rng.standard_normal((mesh.n_tets, 30, 30))
    dofs = pattern.element_dofs
    rows = np.repeat(dofs, 30, axis=1).ravel()
    cols = np.tile(dofs, (1, 30)).ravel()
    reference = sp.coo_matrix((ke.ravel(), (rows, cols)), shape=(mesh.n_dofs, mesh.n_dofs)).tocsr()
    assembled = pattern.matrix(pattern.assemble_data(ke))
    assert abs(assembled - reference).max() < 1e-12
    # Canonical CSR: sorted, no duplicates, exactly the structural pattern of the mesh.
    reference.sum_duplicates()
    assert assembled.nnz == reference.nnz == pattern.nnz
    assert assembled.has_canonical_format
    np.testing.assert_array_equal(assembled.indptr, reference.indptr)
    np.testing.assert_array_equal(assembled.indices, reference.indices)
    # Chunked assembly adds up to the whole.
    chunks = sum(pattern.assemble_data(ke[s], s) for s in (slice(0, 5), slice(5, None)))
    np.testing.assert_allclose(chunks, pattern.assemble_data(ke), atol=1e-12)


def test_vector_assembly() -> None:
    mesh = bar_mesh(0.02, 0.01, 0.01, n_axial=2)
    pattern = SparsityPattern.from_tets(mesh.tets, mesh.n_nodes)
    fe = np.ones((mesh.n_tets, 30))
    f = pattern.assemble_vector(fe)
    counts = np.bincount(mesh.tets.ravel(), minlength=mesh.n_nodes)
    np.testing.assert_array_equal(f.reshape(-1, 3), np.repeat(counts[:, None], 3, axis=1))


def test_matrix_index_arrays_are_private_copies() -> None:
    mesh = bar_mesh(0.02, 0.01, 0.01, n_axial=2)
    pattern = SparsityPattern.from_tets(mesh.tets, mesh.n_nodes)
    m = pattern.matrix(np.zeros(pattern.nnz))
    m.indices[:] = 0
    assert pattern.indices.max() > 0
