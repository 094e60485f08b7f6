"""Tests of retarget.fem.modal: bending frequencies per plane against Euler–Bernoulli theory, the plane
classification, the √(E/ρ) scaling the caches rely on, Richardson extrapolation, the root interface and the
on-disk cache."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fem import TetMesh, bar_mesh, get_material, rod_mesh
from retarget.fem.modal import (
    PACKAGED_REFERENCES,
    Clamp,
    bending_frequencies,
    cards_dir,
    euler_bernoulli_bending,
    reference_frequencies,
    reference_key,
    richardson,
    root_interface,
)
from retarget.model.robot import MeshGenerator, RobotBuilder

STEEL = get_material("spring_steel")


@pytest.fixture(scope="module")
def rod_30cm():
    """0.3 m x 5 mm spring-steel rod, default mesh (60 layers x 8 around), clamped at z = 0."""
    mesh = rod_mesh(0.3, 0.005)
    return mesh, bending_frequencies(mesh, STEEL, mesh.nodes_on_plane(2, 0.0))


def test_rod_frequencies_match_euler_bernoulli(rod_30cm):
    _, bf = rod_30cm
    eb = euler_bernoulli_bending(MeshGenerator("rod", 0.3, diameter=0.005), STEEL, Clamp(0.0))
    assert eb is not None
    # Closed form: f1 = 1.8751² / (2π L²) √(E I / (ρ A)), I = π D⁴/64, A = π D²/4.
    f1 = 1.8751040687**2 / (2 * math.pi * 0.3**2) * math.sqrt(200e9 * 0.005**2 / 16 / 7850)
    assert eb.frequencies["x"][0] == pytest.approx(f1, rel=1e-12)
    for plane in ("x", "y"):
        # The default mesh (1 layer per diameter) is within +0.5 % of beam theory in both modes; never softer.
        for k in range(2):
            err = bf.frequencies[plane][k] / eb.frequencies[plane][k] - 1.0
            assert 0.0 < err < 0.005, (plane, k, err)
    # A round rod: both planes alike (the mesh's section is symmetric to 0.1 %).
    assert bf.frequencies["x"][0] == pytest.approx(bf.frequencies["y"][0], rel=1e-3)


def test_bar_planes_are_the_width_and_the_thickness():
    # 80 x 8 x 4 mm: bending along the width (x) is w/t = 2 times stiffer in frequency than along the thickness.
    mesh = bar_mesh(0.08, 0.008, 0.004, 40, 4, 2)
    bf = bending_frequencies(mesh, STEEL, mesh.nodes_on_plane(2, 0.0))
    assert bf.frequencies["x"][0] / bf.frequencies["y"][0] == pytest.approx(2.0, rel=0.02)
    eb = euler_bernoulli_bending(MeshGenerator("bar", 0.08, width=0.008, thickness=0.004), STEEL, Clamp(0.0))
    # Thin plane, L / t = 20: slender; within 1 % (f1) and 2 % (f2) of Euler–Bernoulli.
    assert bf.frequencies["y"][0] == pytest.approx(eb.frequencies["y"][0], rel=0.01)
    assert bf.frequencies["y"][1] == pytest.approx(eb.frequencies["y"][1], rel=0.02)
    # Wide plane, L / w = 10: shear deformation and rotary inertia (Timoshenko) lower f2 by a few per cent.
    assert bf.frequencies["x"][0] == pytest.approx(eb.frequencies["x"][0], rel=0.02)
    assert -0.07 < bf.frequencies["x"][1] / eb.frequencies["x"][1] - 1.0 < 0.0


def test_classification_follows_the_part_frame():
    # The same bar turned by 90 deg about z and moved: its planes swap in the world, not in its own frame.
    mesh = bar_mesh(0.08, 0.008, 0.004, 20, 2, 1)
    rot = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # part x -> world y
    moved = TetMesh(mesh.nodes @ rot.T + np.array([0.1, -0.2, 0.3]), mesh.tets)
    clamp = mesh.nodes_on_plane(2, 0.0)
    own = bending_frequencies(mesh, STEEL, clamp)
    turned = bending_frequencies(moved, STEEL, clamp, rotation=rot)
    for plane in ("x", "y"):
        assert np.allclose(turned.frequencies[plane], own.frequencies[plane], rtol=1e-8)


def test_frequencies_scale_with_the_square_root_of_stiffness():
    # The calibration relies on it: at fixed ν, K ∝ E, so f ∝ √E exactly (and ∝ 1/√ρ).
    mesh = rod_mesh(0.1, 0.004, 10, 6)
    clamp = mesh.nodes_on_plane(2, 0.0)
    base = bending_frequencies(mesh, STEEL, clamp)
    stiffer = bending_frequencies(mesh, replace(STEEL, youngs_modulus=1.21 * STEEL.youngs_modulus), clamp)
    for plane in ("x", "y"):
        assert np.allclose(stiffer.frequencies[plane], 1.1 * np.array(base.frequencies[plane]), rtol=1e-8)


def test_no_clamp_is_rejected():
    with pytest.raises(InputError, match="no clamped node"):
        bending_frequencies(rod_mesh(0.1, 0.004, 4, 6), STEEL, [])


def test_richardson_recovers_a_synthetic_sequence():
    # f(h) = 3 + 0.7 h^1.8 on unequal ratios: the limit and the order come back exactly.
    h = [1.0, 0.6, 0.37]
    r = richardson(h, [3.0 + 0.7 * x**1.8 for x in h])
    assert r.monotone and r.value == pytest.approx(3.0, abs=1e-10) and r.order == pytest.approx(1.8, rel=1e-8)
    assert r.uncertainty == pytest.approx(0.7 * 0.37**1.8, rel=1e-8)
    # Converging from below works the same way.
    r = richardson(h, [5.0 - 2.0 * x**4 for x in h])
    assert r.value == pytest.approx(5.0, abs=1e-10) and r.order == pytest.approx(4.0, rel=1e-8)
    # Not monotone (pre-asymptotic or round-off): the finest value, flagged.
    r = richardson(h, [3.1, 2.9, 3.0])
    assert not r.monotone and r.value == 3.0 and math.isnan(r.order)
    with pytest.raises(InputError, match="decreasing"):
        richardson([0.5, 1.0, 0.25], [1.0, 2.0, 3.0])


def _robot_with_rod(order_tip_first: bool = True):
    b = RobotBuilder("r", gravity=(0, 0, 0))
    b.add_link("horn", 0.05, (0, 0, 0), np.eye(3) * 1e-5)
    b.add_link("tip", 0.1, (0, 0, 0.1), np.eye(3) * 1e-5)
    b.add_joint("motor", "hinge", None, "horn", (0, 0, 0), (0, 0, 1), motor=True)
    mesh = rod_mesh(0.1, 0.004, 10, 6)
    start, end = mesh.nodes_on_plane(2, 0.0), mesh.nodes_on_plane(2, 0.1)
    ifaces = [("tip", end), ("horn", start)] if order_tip_first else [("horn", start), ("tip", end)]
    b.add_flexible_part("rod", mesh, STEEL, ifaces,
                        generator=MeshGenerator("rod", 0.1, diameter=0.004, resolution={"axial": 10, "around": 6}))
    return b.build()


def test_root_interface_is_the_one_nearest_the_world():
    for tip_first in (True, False):
        model = _robot_with_rod(tip_first)
        part = model.flexible_parts[0]
        assert part.interfaces[root_interface(model, part)].link == "horn"


def test_reference_is_cached_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path))
    gen = MeshGenerator("rod", 0.05, diameter=0.004)
    ref = reference_frequencies(gen, STEEL, Clamp(0.0))
    files = list(cards_dir().iterdir())
    assert [f.suffix for f in files] == [".json"] and files[0].name.startswith("reference-")
    stored = json.loads(files[0].read_text())
    assert len(stored["levels"]) == 3
    # Stored per √(E/ρ): another Young's modulus reuses the entry and scales exactly.
    soft = replace(STEEL, youngs_modulus=0.25 * STEEL.youngs_modulus)
    again = reference_frequencies(gen, soft, Clamp(0.0))
    assert len(list(cards_dir().iterdir())) == 1
    assert np.allclose(again.frequencies.frequencies["y"], 0.5 * np.array(ref.frequencies.frequencies["y"]))
    # Extrapolated from three refined meshes (axial and around together), finer than the finest by < 1 %.
    res = [lv["resolution"] for lv in ref.levels]
    assert [r["around"] for r in res] == [8, 12, 18] and res[0]["axial"] < res[1]["axial"] < res[2]["axial"]
    finest = ref.levels[-1]["frequencies"]["y"][0]
    assert 0.0 < finest / ref.frequencies.frequencies["y"][0] - 1.0 < 0.01


def test_rod_reference_is_close_to_euler_bernoulli(tmp_path, monkeypatch):
    # L/D = 25: the converged 3-D clamped rod is within 0.5 % of slender-beam theory (shear, Poisson, clamp).
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path))
    gen = MeshGenerator("rod", 0.1, diameter=0.004)
    ref = reference_frequencies(gen, STEEL, Clamp(0.0), use_cache=False)
    eb = euler_bernoulli_bending(gen, STEEL, Clamp(0.0))
    for plane in ("x", "y"):
        assert ref.frequencies.frequencies[plane][0] == pytest.approx(eb.frequencies[plane][0], rel=0.005)
        assert ref.frequencies.frequencies[plane][1] == pytest.approx(eb.frequencies[plane][1], rel=0.01)
    assert not Path(tmp_path / "cards").exists()


def test_packaged_references_are_current():
    # The shipped table (the library robots' parts) equals a recomputation: the drummer's 0.1 m x 4 mm forearm.
    table = json.loads(PACKAGED_REFERENCES.read_text())
    gen = MeshGenerator("rod", 0.1, diameter=0.004)
    stored = table[reference_key(gen, STEEL, Clamp(0.0))]["levels"]
    fresh = reference_frequencies(gen, STEEL, Clamp(0.0), use_cache=False).levels
    speed = math.sqrt(STEEL.youngs_modulus / STEEL.density)
    for a, b in zip(stored, fresh):
        assert a["resolution"] == b["resolution"] and a["n_dofs"] == b["n_dofs"]
        for plane in ("x", "y"):
            assert np.allclose(np.array(a["frequencies"][plane]) * speed, b["frequencies"][plane], rtol=1e-9)
