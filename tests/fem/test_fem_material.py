"""Tests of retarget.fem.material: library values, Lamé constants, validation, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from retarget.errors import InputError
from retarget.fem.material import MATERIALS, Material, elastic_constants, get_material


def test_library_has_the_paper_materials_with_plausible_values() -> None:
    assert set(MATERIALS) >= {"spring_steel", "digital_abs", "pla", "acetal", "brass"}
    steel = MATERIALS["spring_steel"]
    assert 190e9 <= steel.youngs_modulus <= 210e9
    assert steel.poisson_ratio == pytest.approx(0.29)
    assert steel.density == pytest.approx(7850.0)
    assert MATERIALS["digital_abs"].youngs_modulus == pytest.approx(2.6e9, rel=0.15)
    assert MATERIALS["brass"].density == pytest.approx(8500.0)
    for m in MATERIALS.values():
        assert m.rayleigh_alpha >= 0 and m.rayleigh_beta >= 0


def test_lame_parameters_reproduce_e_and_nu() -> None:
    m = Material("x", 210e9, 0.3, 7800.0)
    mu, lam = m.lame()
    assert mu == pytest.approx(210e9 / 2.6)
    # E = μ (3λ + 2μ) / (λ + μ), ν = λ / (2 (λ + μ)): elastic_constants inverts lame().
    assert mu * (3 * lam + 2 * mu) / (lam + mu) == pytest.approx(210e9)
    assert lam / (2 * (lam + mu)) == pytest.approx(0.3)
    assert elastic_constants(mu, lam) == pytest.approx((210e9, 0.3))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("youngs_modulus", 0.0),
        ("youngs_modulus", -1.0),
        ("poisson_ratio", 0.5),
        ("poisson_ratio", -1.0),
        ("density", 0.0),
        ("rayleigh_alpha", -0.1),
        ("rayleigh_beta", -1e-6),
        ("density", "heavy"),
    ],
)
def test_out_of_range_values_raise_input_error_naming_the_key(key: str, value: object) -> None:
    values = {"youngs_modulus": 1e9, "poisson_ratio": 0.3, "density": 1000.0, key: value}
    with pytest.raises(InputError, match=key):
        get_material(values)


def test_inline_mapping_and_defaults() -> None:
    m = get_material({"youngs_modulus": 2.0e11, "poisson_ratio": 0.29, "density": 7850})
    assert m.rayleigh_alpha == 0.0 and m.rayleigh_beta == 0.0
    assert m.name == "custom"
    with pytest.raises(InputError, match="missing key 'density'"):
        get_material({"youngs_modulus": 2.0e11, "poisson_ratio": 0.29})
    with pytest.raises(InputError, match="unknown key"):
        get_material({"youngs_modulus": 2.0e11, "poisson_ratio": 0.29, "density": 1.0, "E": 3})
    based = get_material({"base": "pla", "youngs_modulus": 3.0e9})
    assert based.density == MATERIALS["pla"].density and based.youngs_modulus == 3.0e9


def test_unknown_name() -> None:
    with pytest.raises(InputError, match="unknown material 'unobtainium'"):
        get_material("unobtainium")


def test_overrides_file_replaces_fitted_keys_only(tmp_path: Path) -> None:
    path = tmp_path / "materials.yaml"
    path.write_text(
        "materials:\n"
        "  spring_steel: {youngs_modulus: 1.93e11, rayleigh_alpha: 0.8}\n"
        "  my_rod: {youngs_modulus: 1.0e9, poisson_ratio: 0.4, density: 1100}\n"
    )
    steel = get_material("spring_steel", overrides_path=path)
    assert steel.youngs_modulus == 1.93e11 and steel.rayleigh_alpha == 0.8
    assert steel.density == MATERIALS["spring_steel"].density
    assert get_material("my_rod", overrides_path=path).density == 1100.0
    assert get_material("brass", overrides_path=path) is MATERIALS["brass"]
    assert get_material("brass", overrides_path=tmp_path / "absent.yaml") is MATERIALS["brass"]
    path.write_text("spring_steel: {poisson_ratio: 0.7}\n")
    with pytest.raises(InputError, match="poisson_ratio"):
        get_material("spring_steel", overrides_path=path)
