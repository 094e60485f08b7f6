"""Write fitted materials to ``config/materials.yaml`` atomically (merged over what is there).

The file's format is the one :func:`retarget.fem.material.get_material` reads:
``materials: {<name>: {youngs_modulus: ..., rayleigh_alpha: ..., rayleigh_beta: ...}}``; an entry overrides the
library entry of the same name key by key. Other materials and other keys of the entry are kept. The new text is
written to a temporary file beside the file (:func:`retarget.atomic.atomic_path`), flushed to disk and renamed over
it, so a reader never sees it half-written.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from retarget.atomic import atomic_path
from retarget.errors import InputError

__all__ = ["default_materials_path", "update_materials_file"]

#: ``retarget fit`` parameter names → material keys.
_KEYS = {"youngs_modulus": "youngs_modulus", "alpha": "rayleigh_alpha", "beta": "rayleigh_beta"}


def default_materials_path(robot_yaml: Path) -> Path:
    """``materials.yaml`` next to the robot's params file (``config/materials.yaml`` for shipped robots)."""
    return Path(robot_yaml).resolve().parent / "materials.yaml"


def update_materials_file(path: str | Path, material: str, values: Mapping[str, float],
                          comment: str | None = None) -> Path:
    """Merge fitted values of ``material`` into the YAML file at ``path`` (created if missing).

    Args:
        path: The materials file.
        material: Material name (the key under ``materials:``).
        values: Fitted values by fit parameter name (``youngs_modulus``, ``alpha``, ``beta``) [SI].
        comment: A first-line comment (e.g. how the values were fitted).

    Raises:
        InputError: The existing file is not a valid materials file, or unknown parameter names.
    """
    import yaml

    path = Path(path)
    data: dict = {}
    if path.is_file():
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise InputError(f"{path} is not valid YAML: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("materials", {}), dict):
            raise InputError(f"{path}: expected a mapping with a 'materials:' mapping")
    unknown = sorted(set(values) - set(_KEYS))
    if unknown:
        raise InputError(f"unknown fitted parameter(s) {unknown}")
    materials = data.setdefault("materials", {})
    entry = dict(materials.get(material) or {})
    entry.update({_KEYS[k]: float(v) for k, v in values.items()})
    materials[material] = entry
    text = yaml.safe_dump(data, sort_keys=True)
    if comment:
        text = "".join(f"# {line}\n" for line in comment.splitlines()) + text
    with atomic_path(path) as tmp, open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return path
