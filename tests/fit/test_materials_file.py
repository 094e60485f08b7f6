"""Tests of retarget.fit.materials_file: merged, atomic writes that get_material reads back."""
from __future__ import annotations

import os
import stat

import pytest
import yaml

from retarget.errors import InputError
from retarget.fem.material import get_material
from retarget.fit.materials_file import default_materials_path, update_materials_file


def test_write_merge_and_read_back(tmp_path) -> None:
    path = tmp_path / "materials.yaml"
    path.write_text("materials:\n  pla: {youngs_modulus: 3.1e+9}\n  spring_steel: {poisson_ratio: 0.3}\n")
    update_materials_file(path, "spring_steel", {"youngs_modulus": 1.95e11, "alpha": 0.4}, comment="fitted")
    data = yaml.safe_load(path.read_text())
    assert data["materials"]["pla"] == {"youngs_modulus": 3.1e9}
    assert data["materials"]["spring_steel"] == {"poisson_ratio": 0.3, "youngs_modulus": 1.95e11,
                                                 "rayleigh_alpha": 0.4}
    assert path.read_text().startswith("# fitted\n")
    mat = get_material("spring_steel", path)
    assert (mat.youngs_modulus, mat.rayleigh_alpha, mat.poisson_ratio) == (1.95e11, 0.4, 0.3)
    assert mat.rayleigh_beta == get_material("spring_steel").rayleigh_beta
    assert [p.name for p in tmp_path.iterdir()] == ["materials.yaml"]  # no temporary left behind


def test_new_file_and_bad_input(tmp_path) -> None:
    path = tmp_path / "sub" / "materials.yaml"
    update_materials_file(path, "pla", {"beta": 2e-4})
    assert get_material("pla", path).rayleigh_beta == 2e-4
    bad = tmp_path / "bad.yaml"
    bad.write_text("materials: [1, 2]\n")
    with pytest.raises(InputError):
        update_materials_file(bad, "pla", {"beta": 1e-4})
    assert bad.read_text() == "materials: [1, 2]\n"  # untouched
    with pytest.raises(InputError, match="unknown fitted"):
        update_materials_file(path, "pla", {"gamma": 1.0})


def test_written_file_has_a_new_files_permissions(tmp_path) -> None:
    """Readable like any other config file (0644 under umask 022), not a private temporary file's 0600."""
    path = tmp_path / "materials.yaml"
    old = os.umask(0o022)
    try:
        update_materials_file(path, "pla", {"beta": 2e-4})
        update_materials_file(path, "pla", {"alpha": 0.1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_default_path_is_next_to_the_rig(tmp_path) -> None:
    assert default_materials_path(tmp_path / "single_rod.yaml") == tmp_path.resolve() / "materials.yaml"
