"""Isotropic materials of the flexible parts and the built-in material library.

A material is the data the Neo-Hookean element and Rayleigh damping need: Young's modulus, Poisson's ratio,
density and the two Rayleigh coefficients. Library values are catalogue numbers; the Rayleigh defaults are
small plausible guesses meant to be replaced by a fit from motion capture (``retarget fit``), which writes
``config/materials.yaml``; entries there override the library entry of the same name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from retarget.errors import InputError

__all__ = ["MATERIAL_KEYS", "MATERIALS", "Material", "elastic_constants", "get_material",
           "material_from_mapping"]

#: Keys of an inline material mapping (as in ``docs/robot-description.md``), all SI.
MATERIAL_KEYS: tuple[str, ...] = (
    "youngs_modulus",
    "poisson_ratio",
    "density",
    "rayleigh_alpha",
    "rayleigh_beta",
)


@dataclass(frozen=True)
class Material:
    """An isotropic, homogeneous, elastic material with Rayleigh damping.

    Attributes:
        name: Library or user name.
        youngs_modulus: Young's modulus E [Pa].
        poisson_ratio: Poisson's ratio ν [-], in (-1, 0.5).
        density: Mass density ρ [kg/m^3].
        rayleigh_alpha: Mass-proportional damping α [1/s]; damping matrix D = α M + β K.
        rayleigh_beta: Stiffness-proportional damping β [s].
    """

    name: str
    youngs_modulus: float
    poisson_ratio: float
    density: float
    rayleigh_alpha: float = 0.0
    rayleigh_beta: float = 0.0

    def __post_init__(self) -> None:
        _validate(self)

    def lame(self) -> tuple[float, float]:
        """Lamé parameters of the small-strain limit.

        Returns:
            ``(mu, lam)``: shear modulus μ = E / (2 (1 + ν)) [Pa] and λ = E ν / ((1 + ν)(1 − 2ν)) [Pa].
        """
        e, nu = self.youngs_modulus, self.poisson_ratio
        return e / (2.0 * (1.0 + nu)), e * nu / ((1.0 + nu) * (1.0 - 2.0 * nu))

    def with_overrides(self, values: Mapping[str, object]) -> Material:
        """A copy with some of :data:`MATERIAL_KEYS` replaced (validated)."""
        return material_from_mapping(values, name=self.name, base=self)


def elastic_constants(mu: float, lam: float) -> tuple[float, float]:
    """Young's modulus E [Pa] and Poisson's ratio ν from the Lamé parameters μ, λ [Pa] (the inverse of
    :meth:`Material.lame`): ``E = μ(3λ + 2μ)/(λ + μ)``, ``ν = λ / (2(λ + μ))``."""
    return mu * (3.0 * lam + 2.0 * mu) / (lam + mu), lam / (2.0 * (lam + mu))


def _validate(m: Material) -> None:
    checks = (
        ("youngs_modulus", m.youngs_modulus > 0.0, "> 0 [Pa]"),
        ("poisson_ratio", -1.0 < m.poisson_ratio < 0.5, "in (-1, 0.5)"),
        ("density", m.density > 0.0, "> 0 [kg/m^3]"),
        ("rayleigh_alpha", m.rayleigh_alpha >= 0.0, ">= 0 [1/s]"),
        ("rayleigh_beta", m.rayleigh_beta >= 0.0, ">= 0 [s]"),
    )
    for key, ok, expected in checks:
        value = getattr(m, key)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and ok):
            raise InputError(f"material {m.name!r}: {key} = {value!r} must be a finite number {expected}")


#: The built-in library (SI). Rayleigh values are placeholders of the right order (about 0.2-1 % of critical
#: damping near 10 Hz for steel/brass, 1-2 % for polymers) until fitted from a recording.
MATERIALS: dict[str, Material] = {
    # Spring steel / music wire (ASTM A228, EN 10270): E 190-210 GPa in catalogues; ν 0.29 and ρ 7850 are the
    # usual carbon-steel values.
    "spring_steel": Material("spring_steel", 200e9, 0.29, 7850.0, rayleigh_alpha=0.2, rayleigh_beta=2e-5),
    # Stratasys Digital ABS (PolyJet) data sheet: tensile modulus 2.6-3.0 GPa, density 1.17-1.18 g/cm^3;
    # ν 0.35 is the common value for ABS.
    "digital_abs": Material("digital_abs", 2.6e9, 0.35, 1175.0, rayleigh_alpha=0.5, rayleigh_beta=1e-4),
    # PLA filament data sheets: tensile modulus 3.3-3.6 GPa, density 1.24 g/cm^3; ν about 0.36.
    "pla": Material("pla", 3.5e9, 0.36, 1240.0, rayleigh_alpha=0.5, rayleigh_beta=1e-4),
    # Acetal (POM homopolymer, e.g. Delrin 150) data sheet: tensile modulus 2.9-3.1 GPa, density 1.41 g/cm^3,
    # ν 0.35.
    "acetal": Material("acetal", 2.9e9, 0.35, 1410.0, rayleigh_alpha=0.5, rayleigh_beta=1e-4),
    # Free-cutting brass (C36000): E 97-100 GPa, density 8.5 g/cm^3, ν 0.31-0.34.
    "brass": Material("brass", 100e9, 0.33, 8500.0, rayleigh_alpha=0.2, rayleigh_beta=2e-5),
}


def material_from_mapping(
    values: Mapping[str, object], name: str = "custom", base: Material | None = None
) -> Material:
    """Build a material from an inline mapping with keys from :data:`MATERIAL_KEYS`.

    Args:
        values: Keys from :data:`MATERIAL_KEYS` (``youngs_modulus``, ``poisson_ratio``, ``density``,
            ``rayleigh_alpha``, ``rayleigh_beta``); an optional ``name`` key names the material; an optional
            ``base`` key names a library material whose values fill the missing keys.
        name: Name used when ``values`` has none.
        base: Material whose values fill the missing keys (``values['base']`` takes precedence).

    Raises:
        InputError: Unknown key, missing key (without a base), non-numeric or out-of-range value.
    """
    if not isinstance(values, Mapping):
        raise InputError(f"material must be a name or a mapping, got {type(values).__name__}")
    values = dict(values)
    name = str(values.pop("name", name))
    if "base" in values:
        base_name = values.pop("base")
        if base_name not in MATERIALS:
            raise InputError(f"material {name!r}: unknown base {base_name!r}; known: {sorted(MATERIALS)}")
        base = MATERIALS[base_name]
    unknown = sorted(set(values) - set(MATERIAL_KEYS))
    if unknown:
        raise InputError(f"material {name!r}: unknown key(s) {unknown}; allowed: {list(MATERIAL_KEYS)}")
    fields: dict[str, float] = {}
    for key in MATERIAL_KEYS:
        if key in values:
            raw = values[key]
            if isinstance(raw, bool):
                raise InputError(f"material {name!r}: {key} = {raw!r} is not a number")
            try:
                fields[key] = float(raw)
            except (TypeError, ValueError):
                raise InputError(f"material {name!r}: {key} = {raw!r} is not a number") from None
        elif base is not None:
            fields[key] = getattr(base, key)
        elif key in ("rayleigh_alpha", "rayleigh_beta"):
            fields[key] = 0.0
        else:
            raise InputError(f"material {name!r}: missing key {key!r}")
    if base is not None:
        return replace(base, name=name, **fields)
    return Material(name=name, **fields)


def _read_overrides(path: Path) -> dict[str, Mapping[str, object]]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise InputError(f"cannot read material overrides {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"material overrides {path} is not valid YAML: {exc}") from exc
    if isinstance(data, Mapping) and "materials" in data:
        data = data["materials"]
    if not isinstance(data, Mapping):
        raise InputError(f"material overrides {path}: expected a mapping of material name -> values")
    return dict(data)


def get_material(
    name_or_mapping: str | Mapping[str, object], overrides_path: str | Path | None = None
) -> Material:
    """Resolve a material given by library name or inline mapping.

    Args:
        name_or_mapping: A key of :data:`MATERIALS` (or of the overrides file), or an inline mapping (see
            :func:`material_from_mapping`).
        overrides_path: Optional YAML file (``config/materials.yaml``) mapping material names to (possibly
            partial) values, optionally under a top-level ``materials:`` key. An entry overrides the library
            entry of the same name key by key; a name absent from the library must give all required keys.
            A missing file is ignored (nothing has been fitted yet).

    Returns:
        The validated material.

    Raises:
        InputError: Unknown name, malformed mapping or out-of-range value (the message names the key).
    """
    if isinstance(name_or_mapping, Mapping):
        return material_from_mapping(name_or_mapping)
    if not isinstance(name_or_mapping, str):
        raise InputError(f"material must be a name or a mapping, got {type(name_or_mapping).__name__}")
    name = name_or_mapping
    overrides: dict[str, Mapping[str, object]] = {}
    if overrides_path is not None and Path(overrides_path).is_file():
        overrides = _read_overrides(Path(overrides_path))
    base = MATERIALS.get(name)
    if name in overrides:
        return material_from_mapping(overrides[name], name=name, base=base)
    if base is None:
        known = sorted(set(MATERIALS) | set(overrides))
        raise InputError(f"unknown material {name!r}; known: {known}")
    return base
