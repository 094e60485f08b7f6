"""Tests of retarget.fem.mesh: generators (geometry, orientation, conformity), selections and meshio I/O."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fem.element import TET10_EDGES
from retarget.fem.mesh import TetMesh, bar_mesh, plate_mesh, read_mesh, rod_mesh, write_mesh


def _check_mid_edges(mesh: TetMesh, curved_ok: bool) -> None:
    corners = mesh.nodes[mesh.tets[:, TET10_EDGES]]  # (e, 6, 2, 3)
    mids = mesh.nodes[mesh.tets[:, 4:]]
    off = np.linalg.norm(mids - corners.mean(axis=2), axis=-1)
    if not curved_ok:
        assert off.max() < 1e-12
    else:
        # Curving is only radial and small (a chord's sagitta).
        assert off.max() < 0.1 * np.linalg.norm(corners[:, :, 0] - corners[:, :, 1], axis=-1).max()


def _check_conforming(mesh: TetMesh) -> None:
    # Every interior face is shared by exactly two tets with the same mid-edge nodes.
    from retarget.fem.element import TET10_FACES

    faces = mesh.tets[:, TET10_FACES].reshape(-1, 6)
    keys = np.sort(faces[:, :3], axis=1)
    _, counts = np.unique(keys, axis=0, return_counts=True)
    assert counts.max() <= 2
    full = np.sort(faces, axis=1)
    assert np.unique(full, axis=0).shape[0] == np.unique(keys, axis=0).shape[0]


def test_rod_geometry_orientation_and_surface() -> None:
    length, diameter = 0.1, 0.005
    mesh = rod_mesh(length, diameter)
    assert mesh.n_dofs == 3 * mesh.n_nodes
    assert mesh.det_jacobians().min() > 0
    # Quadratic arcs approximate the circle far better than the 8-gon (whose area is 10 % short).
    assert mesh.volume() == pytest.approx(math.pi * diameter**2 / 4 * length, rel=2e-3)
    assert mesh.nodes[:, 2].min() == 0.0 and mesh.nodes[:, 2].max() == pytest.approx(length)
    r = np.hypot(mesh.nodes[:, 0], mesh.nodes[:, 1])
    assert r.max() == pytest.approx(diameter / 2, rel=1e-12)
    # All nodes of lateral boundary faces lie on the true cylinder.
    faces = mesh.boundary_faces()
    z = mesh.nodes[faces, 2]
    lateral = faces[~(np.all(z < 1e-12, axis=1) | np.all(z > length - 1e-12, axis=1))]
    np.testing.assert_allclose(r[lateral], diameter / 2, rtol=1e-12)
    _check_mid_edges(mesh, curved_ok=True)
    _check_conforming(mesh)


def test_rod_defaults_and_resolution_arguments() -> None:
    mesh = rod_mesh(0.7, 0.005)
    assert mesh.nodes_on_plane(2, 0.7).size > 0
    # One element layer per diameter: 140 layers, 8 around.
    assert np.unique(np.round(mesh.nodes[:, 2], 12)).size == 2 * 140 + 1
    finer = rod_mesh(0.1, 0.01, n_axial=3, n_around=16)
    assert finer.det_jacobians().min() > 0
    assert finer.volume() == pytest.approx(math.pi * 0.01**2 / 4 * 0.1, rel=2e-4)
    _check_conforming(finer)
    with pytest.raises(InputError, match="n_around"):
        rod_mesh(0.1, 0.01, n_around=4)
    with pytest.raises(InputError, match="length"):
        rod_mesh(-0.1, 0.01)


def test_bar_and_plate_are_exact_boxes() -> None:
    bar = bar_mesh(0.1, 0.02, 0.004)
    assert bar.det_jacobians().min() > 0
    assert bar.volume() == pytest.approx(0.1 * 0.02 * 0.004, rel=1e-12)
    np.testing.assert_allclose(bar.nodes.min(axis=0), [-0.01, -0.002, 0.0])
    np.testing.assert_allclose(bar.nodes.max(axis=0), [0.01, 0.002, 0.1])
    _check_mid_edges(bar, curved_ok=False)
    _check_conforming(bar)
    plate = plate_mesh(0.08, 0.05, 0.002)
    assert plate.det_jacobians().min() > 0
    assert plate.volume() == pytest.approx(0.08 * 0.05 * 0.002, rel=1e-12)
    _check_conforming(plate)


def test_boundary_faces_cover_the_surface_and_point_outward() -> None:
    bar = bar_mesh(0.03, 0.01, 0.01, n_axial=3)
    faces = bar.boundary_faces()
    x = bar.nodes[faces[:, :3]]
    n = np.cross(x[:, 1] - x[:, 0], x[:, 2] - x[:, 0])
    area = 0.5 * np.linalg.norm(n, axis=1)
    assert area.sum() == pytest.approx(2 * 0.01 * 0.01 + 4 * 0.03 * 0.01, rel=1e-12)
    centre = np.array([0.0, 0.0, 0.015])
    assert np.all(np.einsum("fi,fi->f", n, x.mean(axis=1) - centre) > 0)


def test_node_selections() -> None:
    bar = bar_mesh(0.05, 0.01, 0.01, n_axial=5, n_width=2, n_thickness=2)
    end = bar.nodes_on_plane(2, 0.0)
    assert np.all(bar.nodes[end, 2] == 0.0)
    # 5 x 5 grid of corner + mid-edge nodes on a 2 x 2 quad face split into triangles.
    assert end.size == 25
    box = bar.nodes_in_box([-1, -1, 0.049], [1, 1, 0.05])
    np.testing.assert_array_equal(box, bar.nodes_on_plane(2, 0.05))
    with pytest.raises(InputError):
        bar.nodes_on_plane(3, 0.0)


def test_tetmesh_validates_shapes() -> None:
    with pytest.raises(InputError, match=r"\(e, 10\)"):
        TetMesh(np.zeros((4, 3)), np.array([[0, 1, 2, 3]]))
    with pytest.raises(InputError, match="outside"):
        TetMesh(np.zeros((4, 3)), np.arange(10)[None, :])


# A single quadratic tet in gmsh MSH 2.2 order: corners, then edges (0,1), (1,2), (2,0), (3,0), (3,2), (3,1) —
# the last two are swapped relative to VTK. Node tags are shuffled and one node is unused, as in real files.
_CORNERS = np.array([[0.0, 0.0, 0.0], [2.0, 0.1, 0.0], [0.2, 1.5, 0.1], [0.1, 0.3, 1.2]])
_GMSH_EDGES = [(0, 1), (1, 2), (2, 0), (3, 0), (3, 2), (3, 1)]


def _gmsh_tet10_text() -> str:
    pts = list(_CORNERS) + [0.5 * (_CORNERS[i] + _CORNERS[j]) for i, j in _GMSH_EDGES]
    tags = [17, 3, 8, 1, 12, 5, 9, 22, 4, 30]
    lines = ["$MeshFormat", "2.2 0 8", "$EndMeshFormat", "$Nodes", str(len(pts) + 1)]
    lines += [f"{t} {float(p[0])!r} {float(p[1])!r} {float(p[2])!r}" for t, p in zip(tags, pts, strict=True)]
    lines += ["99 5.0 5.0 5.0", "$EndNodes", "$Elements", "1"]
    lines += ["1 11 2 1 1 " + " ".join(str(t) for t in tags), "$EndElements", ""]
    return "\n".join(lines)


def test_read_gmsh_tet10_reorders_to_vtk(tmp_path: Path) -> None:
    path = tmp_path / "one.msh"
    path.write_text(_gmsh_tet10_text())
    mesh = read_mesh(path)
    assert mesh.n_nodes == 10 and mesh.n_tets == 1
    x = mesh.nodes[mesh.tets[0]]
    np.testing.assert_allclose(x[:4], _CORNERS)
    for m, (i, j) in enumerate(TET10_EDGES):
        np.testing.assert_allclose(x[4 + m], 0.5 * (_CORNERS[i] + _CORNERS[j]), err_msg=f"edge {i}-{j}")


def test_read_flips_negative_tets_and_promotes_linear(tmp_path: Path) -> None:
    import meshio

    flipped = _CORNERS[[0, 2, 1, 3]]
    path = tmp_path / "lin.vtu"
    meshio.write(path, meshio.Mesh(flipped, [("tetra", np.array([[0, 1, 2, 3]]))]))
    mesh = read_mesh(path)
    assert mesh.tets.shape == (1, 10)
    assert mesh.det_jacobians().min() > 0
    x = mesh.nodes[mesh.tets[0]]
    for m, (i, j) in enumerate(TET10_EDGES):
        np.testing.assert_allclose(x[4 + m], 0.5 * (x[i] + x[j]))


@pytest.mark.parametrize("suffix", [".msh", ".vtu"])
def test_write_read_round_trip(tmp_path: Path, suffix: str) -> None:
    mesh = rod_mesh(0.02, 0.005, n_axial=2)
    path = tmp_path / f"rod{suffix}"
    write_mesh(path, mesh)
    if suffix == ".msh":
        assert path.read_text().startswith("$MeshFormat")
    back = read_mesh(path)
    np.testing.assert_allclose(back.nodes, mesh.nodes, atol=1e-15)
    np.testing.assert_array_equal(back.tets, mesh.tets)


def test_read_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        read_mesh(tmp_path / "missing.msh")
    import meshio

    path = tmp_path / "tri.vtu"
    meshio.write(path, meshio.Mesh(_CORNERS[:3], [("triangle", np.array([[0, 1, 2]]))]))
    with pytest.raises(InputError, match="no tetrahedra"):
        read_mesh(path)
