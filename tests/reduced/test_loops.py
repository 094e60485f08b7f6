"""Closed loops of flexible parts: interface modes (theory: guided-beam stiffness) and the boxer's reduced statics.

The drummer's and boxer's legs are welded to the base and to the pelvis. With PCA modes alone the two legs'
couplings over-constrain the pelvis (12 rows, 6 pelvis DOFs and a few modes): the reduced static solve had no
equilibrium (issue #6). Interface modes (Craig–Bampton static constraint modes) restore it.
"""
from __future__ import annotations

import numpy as np
import pytest

from retarget.fem import ElasticBody, get_material, rod_mesh
from retarget.sim.constraints import interface_map
from retarget.sim.reduced.basis import interface_modes, interface_rows, mass_pca_basis
from retarget.sim.reduced.errors import TrainingDataError


@pytest.fixture(scope="module")
def rod():
    """0.3 m × 5 mm spring steel, 32 layers, both end faces as interfaces (rows: held at z = 0, moved at z = L)."""
    length, radius = 0.3, 0.0025
    body = ElasticBody(rod_mesh(length, 2 * radius, 32, 6), get_material("spring_steel"), backend="numba")
    x0 = body.mesh.nodes
    rows = []
    for z in (0.0, length):
        nodes = body.mesh.nodes_on_plane(2, z)
        wmat, _ = interface_map(x0[nodes], np.ones(len(nodes)))
        rows.append(interface_rows(wmat, nodes, x0))
    return body, rows, length, radius


def test_interface_rows_read_rigid_motions(rod):
    body, rows, length, _ = rod
    x0 = body.mesh.nodes
    t, w = np.array([1e-4, -2e-4, 3e-4]), np.array([2e-3, -1e-3, 5e-4])
    # A small rigid motion about the end face's centroid: the rows read (t, ω) to first order.
    centre = np.array([0.0, 0.0, length])
    u = (t + np.cross(w, x0 - centre)).ravel()
    assert np.allclose(rows[1] @ u, np.concatenate([t, w]), rtol=1e-9, atol=1e-12)


def test_interface_modes_have_guided_beam_stiffness(rod):
    body, rows, length, radius = rod
    k = body.tangent_stiffness(np.zeros(body.n_dofs))
    modes = interface_modes(k, rows[0], rows[1:])
    assert modes.shape == (body.n_dofs, 6)
    assert np.max(np.abs(rows[0] @ modes)) < 1e-6  # the held end stays put
    assert np.allclose(rows[1] @ modes, np.eye(6), atol=1e-9)  # the moved end moves by the unit motions
    e = body.material.youngs_modulus
    inertia, area = np.pi * radius**4 / 4, np.pi * radius**2
    energy = np.diag(modes.T @ (k @ modes))
    # Euler–Bernoulli: a lateral unit shift with both ends clamped (guided) costs 12EI/L³, a unit end rotation
    # 4EI/L, an axial unit stretch EA/L (the 6-sided section's area is a little below πr²).
    assert energy[0] == pytest.approx(12 * e * inertia / length**3, rel=0.03)
    assert energy[1] == pytest.approx(12 * e * inertia / length**3, rel=0.03)
    assert energy[2] == pytest.approx(e * area / length, rel=0.01)
    assert energy[3] == pytest.approx(4 * e * inertia / length, rel=0.03)


def test_interface_modes_lead_the_basis_and_pca_sees_the_rest(rod):
    body, rows, _, _ = rod
    k = body.tangent_stiffness(np.zeros(body.n_dofs))
    modes = interface_modes(k, rows[0], rows[1:])
    m = body.mass_matrix()
    rng = np.random.default_rng(3)
    snaps = (modes @ rng.normal(size=(6, 8)) * 1e-4).T  # deformation entirely in the interface span
    with pytest.raises(TrainingDataError, match="support"):
        mass_pca_basis(snaps, body.mesh.nodes, m, n_modes=1, extra_modes=modes)
    basis = mass_pca_basis(snaps, body.mesh.nodes, m, extra_modes=modes)
    assert basis.n_interface == 6 and basis.size == 12
    assert np.allclose(basis.modes.T @ (m @ basis.modes), np.eye(12), atol=1e-9)


def test_interface_modes_need_a_held_interface(rod):
    body, rows, _, _ = rod
    k = body.tangent_stiffness(np.zeros(body.n_dofs))
    with pytest.raises(TrainingDataError, match="do not hold"):
        interface_modes(k, rows[1], [rows[1]])  # the same face held and moved: singular


def test_boxer_reduced_statics_match_the_full_solve():
    """Issue #6: the boxer's reduced quasi-static solve (legs on a loop) converges to the full equilibrium."""
    from retarget.model.library import resolve_robot
    from retarget.model.loader import load_robot
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.stepper import solve_static
    from retarget.sim.reduced.system import loop_couplings
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.simulate import simulate
    from retarget.sim.statics import solve_static as full_static
    from retarget.sim.system import build_system

    model = load_robot(resolve_robot("boxer"), mesh_scale=0.25)
    system = build_system(model)
    names = [b.name for b in system.deformable]
    loops = loop_couplings(system)
    assert [bool(x) for x in loops] == [n.endswith("_leg") for n in names]
    motors, _ = motors_from_motion("boxer/boxing", model.motors)
    result = simulate(system, motors, 0.3, 0.002)
    # 151 stored samples, 40 used: the snapshot cap keeps the PCA's eigenproblem small on long runs.
    rs, bases, _ = build_from_result(system, result, n_modes=1, cubature_tolerance=1e-6, max_snapshots=40)
    assert [b.n_interface for b in bases] == [6 if n.endswith("_leg") else 0 for n in names]
    theta = np.zeros(len(system.motors))
    full = full_static(system, theta)
    red = solve_static(rs, theta)
    nb = len(system.rigid)
    rest = np.array([b.reference_com for b in system.rigid])
    pf = full.u[: 7 * nb].reshape(nb, 7)[:, :3]
    pr = red.u[: 7 * nb].reshape(nb, 7)[:, :3]
    for name in ("pelvis", "head"):
        i = rs.rigid_index(name)
        sag = np.linalg.norm(pf[i] - rest[i])
        assert sag > 1e-4  # the legs do sag under the upper body
        assert np.linalg.norm(pr[i] - pf[i]) < 0.05 * sag, name
    # With the modal derivative of each part's PCA mode: a leg's derivative holds both of its interfaces
    # (reference and loop) still, the basis gains it (M-projected off the other modes), and the equilibrium is as
    # good.
    from retarget.sim.reduced.basis import interface_rows, modal_derivatives
    from retarget.sim.reduced.system import reference_couplings

    rs_md, bases_md, _ = build_from_result(system, result, n_modes=1, cubature_tolerance=1e-6, max_snapshots=40,
                                           modal_derivatives=1)
    assert [b.n_derivatives for b in bases_md] == [1] * len(names)
    held = reference_couplings(system)
    for d, (body, basis) in enumerate(zip(system.deformable, bases_md)):
        slots = [system.constraints[e].slots[-1] for e in [held[d], *loops[d]]]
        rows = np.vstack([interface_rows(sl.map, sl.nodes, body.rest_positions) for sl in slots])
        assert len(rows) == (12 if loops[d] else 6)
        psi = modal_derivatives(body.elastic, rows, basis.modes[:, -2:-1])[:, 0]
        assert np.max(np.abs(rows @ psi)) < 1e-9 * np.max(np.abs(psi)), body.name
        both = np.hstack([basis.modes[:, :-1], psi[:, None]])  # the appended mode lies in span(old basis, ψ)
        coef = np.linalg.lstsq(both, basis.modes[:, -1], rcond=None)[0]
        assert np.linalg.norm(both @ coef - basis.modes[:, -1]) < 1e-8 * np.linalg.norm(basis.modes[:, -1])
    pr = solve_static(rs_md, theta).u[: 7 * nb].reshape(nb, 7)[:, :3]
    for name in ("pelvis", "head"):
        i = rs_md.rigid_index(name)
        assert np.linalg.norm(pr[i] - pf[i]) < 0.05 * np.linalg.norm(pf[i] - rest[i]), name
