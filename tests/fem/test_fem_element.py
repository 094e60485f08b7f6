"""Tests of retarget.fem.element: tet10/tri6 shape functions, gradients and rest geometry."""

from __future__ import annotations

import numpy as np
import pytest

from retarget.fem.element import (
    TET10_EDGES,
    TET10_FACES,
    TET10_REFERENCE_NODES,
    element_geometry,
    tet10_gradients,
    tet10_shape,
    tri6_gradients,
    tri6_shape,
)
from retarget.fem.quadrature import tet_rule


def _random_reference_points(rng: np.random.Generator, n: int) -> np.ndarray:
    p = rng.dirichlet(np.ones(4), size=n)
    return p[:, 1:]


def test_partition_of_unity_and_zero_gradient_sum() -> None:
    xi = _random_reference_points(np.random.default_rng(0), 50)
    np.testing.assert_allclose(tet10_shape(xi).sum(axis=1), 1.0, atol=1e-14)
    np.testing.assert_allclose(tet10_gradients(xi).sum(axis=1), 0.0, atol=1e-13)


def test_kronecker_delta_at_nodes() -> None:
    np.testing.assert_allclose(tet10_shape(TET10_REFERENCE_NODES), np.eye(10), atol=1e-14)
    tri_nodes = np.array([[0, 0], [1, 0], [0, 1], [0.5, 0], [0.5, 0.5], [0, 0.5]], dtype=float)
    np.testing.assert_allclose(tri6_shape(tri_nodes), np.eye(6), atol=1e-14)


def test_mid_edge_nodes_sit_at_edge_midpoints_in_vtk_order() -> None:
    expected = 0.5 * (TET10_REFERENCE_NODES[TET10_EDGES[:, 0]] + TET10_REFERENCE_NODES[TET10_EDGES[:, 1]])
    np.testing.assert_allclose(TET10_REFERENCE_NODES[4:], expected)
    assert TET10_EDGES.tolist() == [[0, 1], [1, 2], [0, 2], [0, 3], [1, 3], [2, 3]]


def test_gradients_match_finite_differences() -> None:
    xi = _random_reference_points(np.random.default_rng(1), 10)
    h = 1e-6
    g = tet10_gradients(xi)
    for k in range(3):
        d = np.zeros(3)
        d[k] = h
        fd = (tet10_shape(xi + d) - tet10_shape(xi - d)) / (2 * h)
        np.testing.assert_allclose(g[:, :, k], fd, atol=1e-8)
    xt = _random_reference_points(np.random.default_rng(2), 10)[:, :2] * 0.9
    gt = tri6_gradients(xt)
    for k in range(2):
        d = np.zeros(2)
        d[k] = h
        fd = (tri6_shape(xt + d) - tri6_shape(xt - d)) / (2 * h)
        np.testing.assert_allclose(gt[:, :, k], fd, atol=1e-8)


def test_faces_are_outward_on_the_reference_tet() -> None:
    x = TET10_REFERENCE_NODES
    centroid = x[:4].mean(axis=0)
    for face in TET10_FACES:
        a, b, c = x[face[:3]]
        normal = np.cross(b - a, c - a)
        assert normal @ (a - centroid) > 0
        # Mid-edge nodes ab, bc, ca.
        np.testing.assert_allclose(x[face[3]], 0.5 * (a + b))
        np.testing.assert_allclose(x[face[4]], 0.5 * (b + c))
        np.testing.assert_allclose(x[face[5]], 0.5 * (c + a))


def test_geometry_of_an_affine_tet_reproduces_volume_and_linear_gradients() -> None:
    rng = np.random.default_rng(3)
    a = np.eye(3) + 0.3 * rng.standard_normal((3, 3))
    if np.linalg.det(a) < 0:
        a[:, 0] *= -1
    nodes = TET10_REFERENCE_NODES @ a.T + rng.standard_normal(3)
    geo = element_geometry(nodes, np.arange(10)[None, :], tet_rule(2))
    assert geo.weights.sum() == pytest.approx(np.linalg.det(a) / 6.0, rel=1e-13)
    # Σ_a X_a ⊗ ∂N_a/∂X = I (isoparametric consistency).
    np.testing.assert_allclose(
        np.einsum("ai,qaj->qij", nodes, geo.grad[0]), np.broadcast_to(np.eye(3), (4, 3, 3)), atol=1e-12
    )
