"""Tests of the reduced-model artifact (retarget.sim.reduced.artifact): round trip and stale detection.

A copy of the single_rod description (coarse mesh) is edited after saving: a changed material, a changed mesh
and a changed YAML must each be reported by name; an unchanged robot loads the same reduced system.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from retarget.sim.reduced.artifact import load_reduced, provenance, save_reduced
from retarget.sim.reduced.basis import ReducedBasis, rigid_modes
from retarget.sim.reduced.cubature import train_cubature
from retarget.sim.reduced.errors import StaleReducedModelError
from retarget.sim.reduced.system import reference_bodies


def _robot_copy(tmp: Path, axial: int = 8, material: str | None = None) -> Path:
    from retarget.model import library

    data = yaml.safe_load(library.resolve_robot("single_rod").read_text())
    for fp in data["retarget"]["flexible_parts"]:
        fp["mesh"]["resolution"] = {"axial": axial, "around": 6}
        if material:
            fp["material"] = material
    out = tmp / "single_rod.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def _system(path: Path):
    from retarget.model.loader import load_robot
    from retarget.sim.system import build_system

    # Uncalibrated: a material change must be named without computing a reference for it (the calibration's own
    # effect on the digests is tested below).
    return build_system(load_robot(path, stiffness_calibration=False))


def _model(system):
    body = system.deformable[0]
    local = body.rest_positions - system.rigid[reference_bodies(system)[0]].reference_com
    rig = rigid_modes(local, body.mass_matrix)
    extra = np.random.default_rng(0).normal(size=(body.n_dofs, 2))
    extra -= rig @ (rig.T @ (body.mass_matrix @ extra))
    extra /= np.sqrt(np.einsum("ij,ij->j", extra, body.mass_matrix @ extra))
    modes = np.hstack([rig, extra])
    zs = np.zeros((5, 8))
    zs[:, 6:] = np.random.default_rng(1).normal(size=(5, 2)) * 1e-8
    return (ReducedBasis(modes, 6, 0.99, np.array([2.0, 1.0]), training_norm=3e-8),
            train_cubature(body.elastic, modes, zs, tolerance=1e-2))


def test_round_trip_and_stale_inputs(tmp_path: Path) -> None:
    yml = _robot_copy(tmp_path)
    system = _system(yml)
    basis, cub = _model(system)
    art = save_reduced(tmp_path / "rod.npz", system, [basis], [cub], yml, "single_rod", {"modes": 2})
    rs = load_reduced(art, system, yml)
    assert np.array_equal(rs.bodies[0].basis.modes, basis.modes)
    assert np.array_equal(rs.bodies[0].cubature.elements, cub.elements)
    assert np.allclose(rs.bodies[0].cubature.evaluate(np.full(8, 1e-9))[0], cub.evaluate(np.full(8, 1e-9))[0])
    assert rs.bodies[0].basis.training_norm == 3e-8
    # A file written before the training range was recorded loads with it unknown (0).
    with np.load(art) as data:
        arrays = {k: data[k] for k in data.files if k != "b0_training_norm"}
    old = tmp_path / "old.npz"
    np.savez_compressed(old, **arrays)
    assert load_reduced(old, system, yml).bodies[0].basis.training_norm == 0.0
    # A different material: the YAML and the material digest change.
    other = tmp_path / "other"
    other.mkdir()
    yml2 = _robot_copy(other, material="digital_abs")
    with pytest.raises(StaleReducedModelError) as err:
        load_reduced(art, _system(yml2), yml2)
    assert "material:rod" in err.value.changed and "robot_yaml" in err.value.changed
    # It says what it was built for: the robot, the body's mesh and the material it was trained with.
    el = system.deformable[0].elastic
    youngs = el.mu * (3 * el.lam + 2 * el.mu) / (el.lam + el.mu)
    built = (f"robot 'single_rod' (rod: {len(system.deformable[0].rest_positions)} nodes, {len(el.mesh.tets)} tets, "
             f"E {youngs:.4g} Pa, ν {el.lam / (2 * (el.lam + el.mu)):.3g})")
    assert err.value.built_for == built and f"it was built for {built}" in str(err.value)
    # A different mesh.
    yml3 = _robot_copy(other, axial=9)
    with pytest.raises(StaleReducedModelError) as err:
        load_reduced(art, _system(yml3), yml3)
    assert "mesh:rod" in err.value.changed
    assert "rebuild it with `retarget reduce`" in str(err.value)


def test_format_version_and_unreadable(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    yml = _robot_copy(tmp_path)
    system = _system(yml)
    with pytest.raises(StaleReducedModelError) as err:
        load_reduced(bad, system, yml)
    assert err.value.changed == ["file"]
    assert set(provenance(system, yml)) >= {"robot_yaml", "urdf", "material:rod", "mesh:rod", "rigid_bodies"}


def test_urdf_digest_does_not_depend_on_the_checkout_folder(tmp_path: Path) -> None:
    """xacro writes its input's absolute path into a comment: the same robot in two folders has one digest (the
    raw expansions differ), and an artifact recorded with the raw digest still loads in its own folder."""
    import shutil

    from retarget.model import library
    from retarget.sim.reduced.artifact import _urdf_digests

    src = library.resolve_robot("drummer")
    digests = []
    for name in ("a", "b"):
        root = tmp_path / name
        shutil.copytree(src.parent.parent / "urdf", root / "urdf")
        (root / "config").mkdir()
        shutil.copy(src, root / "config" / src.name)
        digests.append(_urdf_digests(root / "config" / src.name))
    assert digests[0][0] == digests[1][0]
    assert digests[0][1] != digests[1][1]  # the folder is in the raw text
    # Legacy artifact (raw digest recorded) in its own folder: loads; a canonical one loads from either folder.
    yml = _robot_copy(tmp_path)
    system = _system(yml)
    basis, cub = _model(system)
    art = save_reduced(tmp_path / "rod.npz", system, [basis], [cub], yml, "single_rod")
    import json

    data = dict(np.load(art))
    meta = json.loads(str(data["meta"]))
    meta["hashes"]["urdf"] = _urdf_digests(yml)[1]
    data["meta"] = np.array(json.dumps(meta))
    legacy = tmp_path / "legacy.npz"
    np.savez_compressed(legacy, **data)
    load_reduced(legacy, system, yml)
    meta["hashes"]["urdf"] = "0" * 64
    data["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(legacy, **data)
    with pytest.raises(StaleReducedModelError) as err:
        load_reduced(legacy, system, yml)
    assert err.value.changed == ["urdf"]


def test_stiffness_calibration_makes_uncalibrated_artifacts_stale(tmp_path: Path) -> None:
    from retarget.fem.model_card import model_card
    from retarget.model.loader import load_robot
    from retarget.sim.system import build_system

    yml = _robot_copy(tmp_path)
    calibrated, raw = load_robot(yml), load_robot(yml, stiffness_calibration=False)
    assert calibrated.flexible_parts[0].stiffness_factor != 1.0
    sys_cal, sys_raw = build_system(calibrated), build_system(raw)
    basis, cub = _model(sys_raw)
    art = save_reduced(tmp_path / "raw.npz", sys_raw, [basis], [cub], yml, "single_rod")
    with pytest.raises(StaleReducedModelError) as err:
        load_reduced(art, sys_cal, yml)
    assert err.value.changed == ["material:rod"]
    assert "before the calibration" in str(err.value)
    # An artifact of the calibrated model stores its card and reports its factor when the factor changes.
    card = model_card(calibrated).to_dict()
    art = save_reduced(tmp_path / "cal.npz", sys_cal, [basis], [cub], yml, "single_rod", model_card=card)
    assert load_reduced(art, sys_cal, yml).bodies[0].basis.size == basis.size
    with np.load(art) as data:
        assert json.loads(str(data["meta"]))["model_card"] == card
    with pytest.raises(StaleReducedModelError) as err:
        load_reduced(art, sys_raw, yml)
    assert f"{calibrated.flexible_parts[0].stiffness_factor}" in str(err.value)
