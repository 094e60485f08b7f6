"""Tests of the inertia tensors and the relative-coordinate forces (retarget.sim.reduced.tensors, .dynamics).

Identities are checked against brute force: nodal accelerations from the kinematics ``ẍ = a_v + R(a_ω × x̂ +
ω × (ω × x̂) + 2 ω × u̇ + ü)`` contracted with the consistent mass (virtual power), and the kinetic energy
integrated at the degree-5 quadrature points against ``½ Vᵀ M(U) V``. Every Jacobian is checked against central
finite differences.
"""
from __future__ import annotations

import numpy as np
import pytest

from retarget.fem.element import element_geometry
from retarget.fem.quadrature import tet_rule
from retarget.sim.reduced.dynamics import body_force, body_forces, rotation_and_derivative
from retarget.sim.reduced.tensors import inertia_tensors, reduce_interface, scalar_mass
from retarget.sim.rotation import rotate_jacobian, rotation_matrix


G = np.array([0.0, 0.0, -9.81])


def random_quaternion(rng: np.random.Generator) -> np.ndarray:
    """A random non-unit quaternion (the homogeneous R(q) accepts any non-zero q)."""
    q = rng.normal(size=4)
    return q / np.linalg.norm(q) * 1.1


def _setup(body, basis, seed):
    rng = np.random.default_rng(seed)
    x0 = body.mesh.nodes - np.array([0.01, -0.02, 0.05])  # a reference-body frame not at the rod's start
    t = inertia_tensors(body.mass_matrix(), x0, basis)
    r = basis.shape[1]
    scale = 1e-2 / np.max(np.abs(basis))
    state = dict(
        q=random_quaternion(rng),
        z=rng.normal(size=r) * scale,
        zdot=rng.normal(size=r) * scale * 10,
        omega=rng.normal(size=3) * 3,
        acc_v=rng.normal(size=3) * 5,
        acc_w=rng.normal(size=3) * 20,
        acc_z=rng.normal(size=r) * scale * 100,
    )
    return x0, t, state


def _call(t, st):
    return body_forces(
        st["q"], st["z"], st["zdot"], st["omega"], st["acc_v"], st["acc_w"], st["acc_z"], G, t,
    )


def _brute_force(body, x0, basis, st):
    m = scalar_mass(body.mass_matrix())
    n = len(x0)
    r = rotation_matrix(st["q"])
    xh = x0 + (basis @ st["z"]).reshape(n, 3)
    ud = (basis @ st["zdot"]).reshape(n, 3)
    ua = (basis @ st["acc_z"]).reshape(n, 3)
    w = st["omega"]
    local = np.cross(st["acc_w"], xh) + np.cross(w, np.cross(w, xh)) + 2 * np.cross(w, ud) + ua
    acc = st["acc_v"] - G + local @ r.T  # ẍ − g at every node (world)
    macc = m @ acc
    f_v = macc.sum(axis=0)
    f_w = np.cross(xh, macc @ r).sum(axis=0)
    f_z = basis.T @ (macc @ r).ravel()
    return np.concatenate([f_v, f_w, f_z])


@pytest.mark.parametrize("kind", ["random5", "identity"])
def test_forces_match_brute_force(small_rod, kind):
    n3 = small_rod.n_dofs
    rng = np.random.default_rng(3)
    basis = rng.normal(size=(n3, 5)) if kind == "random5" else np.eye(n3)
    x0, t, st = _setup(small_rod, basis, 4)
    f = _call(t, st)[0]
    ref = _brute_force(small_rod, x0, basis, st)
    assert np.allclose(f, ref, rtol=1e-10, atol=1e-10 * np.max(np.abs(ref)))


def test_residual_path_force_equals_jacobian_path_and_brute_force(small_rod):
    """``body_force`` (residual-only iterations: no ∂R/∂q) gives the force of ``body_forces`` and of the nodes."""
    rng = np.random.default_rng(11)
    basis = rng.normal(size=(small_rod.n_dofs, 7))
    x0, t, st = _setup(small_rod, basis, 12)
    st["z"][2] = 0.0  # the sums skip zero coordinates
    f = body_force(
        st["q"], st["z"], st["zdot"], st["omega"], st["acc_v"], st["acc_w"], st["acc_z"], G, t,
    )
    ref = _brute_force(small_rod, x0, basis, st)
    assert np.array_equal(f, _call(t, st)[0])
    assert np.allclose(f, ref, rtol=1e-10, atol=1e-10 * np.max(np.abs(ref)))


def test_generalized_mass_is_kinetic_energy_at_quadrature_points(small_rod):
    rng = np.random.default_rng(5)
    basis = rng.normal(size=(small_rod.n_dofs, 4))
    x0, t, st = _setup(small_rod, basis, 6)
    f_acc = _call(t, st)[3]
    assert np.allclose(f_acc, f_acc.T, atol=1e-12 * np.abs(f_acc).max())
    v = rng.normal(size=3)
    vel = np.concatenate([v, st["omega"], st["zdot"]])
    n = len(x0)
    r = rotation_matrix(st["q"])
    xh = x0 + (basis @ st["z"]).reshape(n, 3)
    xdot = v + (np.cross(st["omega"], xh) + (basis @ st["zdot"]).reshape(n, 3)) @ r.T
    geo = element_geometry(small_rod.mesh.nodes, small_rod.mesh.tets, tet_rule(5))
    xq = np.einsum("qa,eai->eqi", geo.shape, xdot[small_rod.mesh.tets])
    kinetic = 0.5 * small_rod.material.density * np.einsum("eq,eqi,eqi->", geo.weights, xq, xq)
    assert kinetic == pytest.approx(0.5 * vel @ f_acc @ vel, rel=1e-11)


def test_rotation_derivative_matches_sim_rotation():
    rng = np.random.default_rng(7)
    q = random_quaternion(rng)
    r, dr = rotation_and_derivative(q)
    assert np.allclose(r, rotation_matrix(q), atol=1e-15)
    vec = rng.normal(size=3)
    assert np.allclose(np.einsum("kij,j->ik", dr, vec), rotate_jacobian(q, vec), atol=1e-14)


def test_jacobians_against_finite_differences(small_rod):
    rng = np.random.default_rng(8)
    basis = rng.normal(size=(small_rod.n_dofs, 5))
    _, t, st = _setup(small_rod, basis, 9)
    out = _call(t, st)
    blocks = {"q": out[1], "z": out[2], "omega": out[4], "zdot": out[5]}
    acc = out[3]
    blocks["acc_v"], blocks["acc_w"], blocks["acc_z"] = acc[:, :3], acc[:, 3:6], acc[:, 6:]
    for name, jac in blocks.items():
        x = st[name]
        h = 1e-6 * max(np.max(np.abs(x)), 1e-3)
        fd = np.zeros_like(jac)
        for j in range(len(x)):
            sp, sm = dict(st), dict(st)
            sp[name] = x.copy()
            sm[name] = x.copy()
            sp[name][j] += h
            sm[name][j] -= h
            fd[:, j] = (_call(t, sp)[0] - _call(t, sm)[0]) / (2 * h)
        scale = np.max(np.abs(fd)) + 1e-30
        assert np.max(np.abs(fd - jac)) <= 1e-6 * scale, name


def test_reduced_interface_is_projection_of_interface_map(small_rod):
    from retarget.sim.constraints import interface_map

    rng = np.random.default_rng(11)
    basis = rng.normal(size=(small_rod.n_dofs, 4))
    nodes = small_rod.mesh.nodes_on_plane(2, 0.3)
    w = small_rod.face_area_weights(nodes)
    nodes = nodes[w > 0]
    wmat, centroid = interface_map(small_rod.mesh.nodes[nodes], w[w > 0])
    x0 = small_rod.mesh.nodes - np.array([0.0, 0.0, 0.1])
    ri = reduce_interface(wmat, nodes, x0, basis, centroid)
    z = rng.normal(size=4) * 1e-3
    xh = x0 + (basis @ z).reshape(-1, 3)
    assert np.allclose(ri.y0 + ri.y @ z, wmat @ xh[nodes].ravel(), atol=1e-14)
    # The best-fit map's translation part vanishes: a world slot is [c + R x̄̂, vec(R Â)].
    q = random_quaternion(rng)
    c = rng.normal(size=3)
    r = rotation_matrix(q)
    yw = wmat @ (c + xh[nodes] @ r.T).ravel()
    yl = ri.y0 + ri.y @ z
    assert np.allclose(yw[:3], c + r @ yl[:3], atol=1e-14)
    assert np.allclose(yw[3:].reshape(3, 3), r @ yl[3:].reshape(3, 3), atol=1e-13)
