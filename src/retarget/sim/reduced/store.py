"""Where reduced-model artifacts live, how they are found, and how one is loaded for a robot.

Every model file is the versioned ``.npz`` artifact of :mod:`retarget.sim.reduced.artifact` (JSON metadata with the
format version, the provenance hashes and the model card, plus arrays; read with ``allow_pickle=False``), whoever
wrote it: ``retarget reduce --out``, ``retarget check reduced --save-model`` or the planner's in-process training.
This module is the one place that knows the folders and loads an artifact together with the robot it belongs to;
the planner (:mod:`retarget.planning.model`), the twin (:mod:`retarget.twin.model`), the CLI
(``retarget reduce``, ``simulate-reduced``, ``check model --reduced``) and the material fitter use it.

Folders:

- :func:`cache_dir`: where ``retarget plan`` caches the models it trains (``<robot>-<settings>-<motion>.npz``);
- :func:`artifact_dirs`: the model folders searched for ``<robot>.npz`` / ``<robot>-*.npz``.

Loading (:func:`load_artifact`) rebuilds the robot on the mesh the artifact was trained on (its recorded
``mesh_scale``, or the ``mesh_axial`` / ``mesh_around`` resolution of a planner-trained model) so that the
provenance hashes compare like with like; a model whose robot, materials or mesh changed raises
:class:`~retarget.sim.reduced.errors.StaleReducedModelError`, an :class:`~retarget.errors.InputError` naming
what changed.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retarget.errors import InputError

if TYPE_CHECKING:
    from retarget.model.loader import RobotSection
    from retarget.model.robot import RobotModel
    from retarget.sim.reduced.artifact import ArtifactMeta
    from retarget.sim.reduced.system import ReducedSystem
    from retarget.sim.system import System

__all__ = [
    "SHIPPED_DIR",
    "VERIFY_SUBDIR",
    "ReducedRobotModel",
    "artifact_candidates",
    "artifact_dirs",
    "artifact_meta",
    "cache_dir",
    "cached_artifacts",
    "find_artifact",
    "load_artifact",
    "load_model",
    "load_robot_system",
    "robot_yaml_path",
    "shipped_candidates",
    "verification_candidates",
]


@dataclass(frozen=True, eq=False)
class ReducedRobotModel:
    """A robot with the reduced model of it that was loaded or trained.

    Attributes:
        model: the :class:`retarget.model.RobotModel` (on the mesh the reduced model was trained on).
        config: the robot YAML's ``retarget:`` section.
        reduced: the :class:`retarget.sim.reduced.ReducedSystem`.
        info: how it was obtained (source, file, training settings, mesh scale …); the planner adds
            ``model_card``: the model's :meth:`retarget.fem.model_card.ModelCard.to_dict`.
    """

    model: RobotModel
    config: RobotSection
    reduced: ReducedSystem
    info: dict[str, object]


def robot_yaml_path(robot: str | Path) -> Path:
    """The robot description YAML of ``robot`` (a path to it, or a library robot name such as ``single_rod``).

    Raises:
        InputError: an unknown robot name (:func:`retarget.model.library.resolve_robot`).
    """
    if Path(robot).is_file():
        return Path(robot)
    from retarget.model import library

    return library.resolve_robot(str(robot))


def cache_dir() -> Path:
    """Where ``retarget plan`` caches the models it trains: ``$RETARGET_CACHE`` or ``~/.cache/retarget``, with a
    ``reduced/`` subfolder."""
    root = Path(os.environ.get("RETARGET_CACHE", Path.home() / ".cache" / "retarget"))
    return root / "reduced"


def cached_artifacts(name: str) -> list[Path]:
    """The models of robot ``name`` in :func:`cache_dir` (``<name>-*.npz``), newest first."""
    return sorted(cache_dir().glob(f"{name}-*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)


def artifact_dirs() -> list[Path]:
    """Folders searched for reduced-model artifacts (``<robot>.npz`` or ``<robot>-*.npz``).

    ``$RETARGET_MODELS`` (``os.pathsep``-separated) when set; else ``$RETARGET_CACHE/models`` alone when
    ``$RETARGET_CACHE`` is set (an isolated cache sees no other models); else ``~/.cache/retarget/models`` and
    ``.cache-models/`` of the source checkout (the shared local model folder).
    """
    env = os.environ.get("RETARGET_MODELS")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    if os.environ.get("RETARGET_CACHE"):
        return [cache_dir().parent / "models"]
    from retarget.model import library

    return [cache_dir().parent / "models", library.share_dir() / ".cache-models"]


def artifact_candidates(name: str) -> list[Path]:
    """Artifacts of robot ``name`` (``<name>.npz``, ``<name>-*.npz``) in :func:`artifact_dirs`, newest first."""
    found: set[Path] = set()
    for folder in artifact_dirs():
        if folder.is_dir():
            found |= {p for p in folder.glob("*.npz") if p.stem == name or p.stem.startswith(f"{name}-")}
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


#: Reduced models shipped with retarget (``retarget/data/demo/``): the drummer's coarse demo model, so that a first
#: plan on the drummer needs no training (``retarget/data/demo/README.md`` has the command that rebuilds it). Not a
#: model folder (:func:`artifact_dirs`): the planner (``retarget plan``, the planner node) falls back on it after the
#: cache and the model folders, before training.
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "data" / "demo"


def shipped_candidates(name: str, folder: Path | None = None) -> list[Path]:
    """Planning models of robot ``name`` shipped in ``folder`` (default :data:`SHIPPED_DIR`): ``<name>.npz`` or
    ``<name>-*.npz``, not its ``verify/`` subfolder; newest first."""
    folder = SHIPPED_DIR if folder is None else folder
    if not folder.is_dir():
        return []
    found = [p for p in folder.glob("*.npz") if p.stem == name or p.stem.startswith(f"{name}-")]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


#: Subfolder of each model folder holding verification models: artifacts trained independently of the planning
#: model (another mesh, another training), which the planner re-simulates its plans in and never optimizes on.
VERIFY_SUBDIR = "verify"


def verification_candidates(name: str, folders: Sequence[Path] | None = None) -> list[Path]:
    """Verification models of robot ``name`` (``<folder>/verify/<name>[-*].npz`` for each of ``folders``, default
    :func:`artifact_dirs`), newest first. They are not planning models: :func:`artifact_candidates` does not list
    them."""
    found: set[Path] = set()
    for folder in artifact_dirs() if folders is None else folders:
        sub = folder / VERIFY_SUBDIR
        if sub.is_dir():
            found |= {p for p in sub.glob("*.npz") if p.stem == name or p.stem.startswith(f"{name}-")}
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def artifact_meta(path: str | Path) -> ArtifactMeta:
    """The artifact's ``meta`` JSON (format version, robot, hashes, training settings, model card), read without
    building anything.

    Raises:
        StaleReducedModelError: the file cannot be read as an artifact (``"unreadable reduced model: …"``).
    """
    from retarget.sim.reduced.errors import StaleReducedModelError

    try:
        with np.load(path, allow_pickle=False) as data:
            return dict(json.loads(str(data["meta"])))  # type: ignore[return-value]
    except (OSError, ValueError, KeyError) as exc:
        raise StaleReducedModelError(str(path), ["file"], f"unreadable reduced model: {exc}") from exc


def load_robot_system(robot: str | Path, mesh_scale: float | None) -> tuple[Path, RobotModel, System]:
    """(yaml path, model, absolute system); ``mesh_scale`` scales the flexible parts' axial layer counts.

    The scaling is the loader's (``load_robot(..., mesh_scale=)``, as `retarget simulate --mesh-scale`): the
    robot YAML itself is used unchanged, so fitted ``materials.yaml`` beside it still apply and the artifact
    records the real file's digest; the scaled meshes are recorded by their own digests (``mesh:<part>``).

    Raises:
        InputError: a non-positive ``mesh_scale`` or an unknown robot.
    """
    from retarget.model.loader import load_robot
    from retarget.sim.system import build_system

    if mesh_scale is not None and not mesh_scale > 0:
        raise InputError(f"--mesh-scale must be positive, got {mesh_scale}")
    path = robot_yaml_path(robot)
    model = load_robot(path, mesh_scale=1.0 if mesh_scale is None else float(mesh_scale))
    return path, model, build_system(model)


def load_model(robot: str | Path, mesh_axial: int | None = None, mesh_around: int | None = None
               ) -> tuple[RobotModel, RobotSection, str]:
    """Load a robot, optionally overriding the resolution of generated rod meshes (the planner's training mesh).

    Args:
        robot: name or YAML path.
        mesh_axial, mesh_around: element layers along / corner nodes around every generated part (None: the
            robot's own).

    Returns:
        The model, its YAML ``retarget:`` section and the text the model depends on (for hashing).
    """
    from retarget.model.loader import load_robot, read_robot_yaml, section_urdf

    path = robot_yaml_path(robot)
    cfg = read_robot_yaml(path)
    urdf = section_urdf(cfg, path)
    fingerprint = path.read_text() + urdf.read_text() + json.dumps([mesh_axial, mesh_around])
    name = path.stem.split(".")[0]
    if mesh_axial is None and mesh_around is None:
        return load_robot(path, name), cfg, fingerprint
    cfg2 = json.loads(json.dumps(cfg))
    cfg2["urdf"] = str(urdf.resolve())  # the copy lives in a temporary folder: no relative path
    for part in cfg2.get("flexible_parts") or []:
        mesh = part.get("mesh") or {}
        if "file" in mesh:
            f = Path(mesh["file"])
            if not f.is_absolute():
                mesh["file"] = str((path.parent / f).resolve())
            continue
        res = dict(mesh.get("resolution") or {})
        if mesh_axial is not None:
            res["axial"] = int(mesh_axial)
        if mesh_around is not None:
            res["around"] = int(mesh_around)
        mesh["resolution"] = res
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / f"{name}.yaml"
        p.write_text(yaml.safe_dump({"retarget": cfg2}))
        return load_robot(p, name), cfg, fingerprint


def load_artifact(robot: str | Path, path: str | Path, mesh_scale: float | None = None) -> ReducedRobotModel:
    """Load a reduced-model artifact for ``robot``, on the mesh it was built with.

    The artifact records the ``--mesh-scale`` it was trained with (``retarget reduce``), or the mesh resolution
    of the planner's training mesh; the robot is loaded the same way so that the provenance hashes compare like
    with like. ``mesh_scale`` overrides the recorded one (the twin's ``--mesh-scale``); ``info["mesh_scale"]`` is
    the one used.

    Raises:
        StaleReducedModelError: unreadable file, other format version, or a robot/material/mesh that changed
            since (an :class:`~retarget.errors.InputError`; the message names the changed inputs).
        InputError: the artifact's motors differ from the robot's.
    """
    from retarget.model.loader import read_robot_yaml
    from retarget.sim.reduced.artifact import load_reduced

    path = Path(path)
    meta = artifact_meta(path)
    extra = dict(meta.get("extra") or {})
    scale = extra.get("mesh_scale") if mesh_scale is None else mesh_scale
    if extra.get("mesh_axial") is not None or extra.get("mesh_around") is not None:
        # Trained by `retarget plan` on a training mesh: the same resolution override.
        from retarget.sim.system import build_system

        yaml_path = robot_yaml_path(robot)
        model = load_model(robot, extra.get("mesh_axial"), extra.get("mesh_around"))[0]
        system = build_system(model)
    else:
        yaml_path, model, system = load_robot_system(robot, scale)
    rs = load_reduced(path, system, yaml_path)
    if tuple(rs.motors) != tuple(model.motors):
        raise InputError(f"reduced model {path} has motors {rs.motors}, the robot has {model.motors}")
    info: dict[str, object] = {"source": "artifact", "file": str(path), "robot": meta.get("robot"), "training": extra,
            "format_version": meta.get("format_version"), "mesh_scale": scale}
    return ReducedRobotModel(model, read_robot_yaml(yaml_path), rs, info)


def find_artifact(robot: str | Path, name: str, candidates: Sequence[Path] | None = None,
                  load: Callable[[str | Path, Path], ReducedRobotModel] | None = None
                  ) -> tuple[ReducedRobotModel | None, list[str]]:
    """The newest fresh artifact of robot ``name`` in :func:`artifact_dirs`.

    Args:
        robot, name: the robot (name or YAML) and its name.
        candidates: the files to try, in order (default: :func:`artifact_candidates`).
        load: ``load(robot, path)`` (default: :func:`load_artifact`); raises ``ReducedModelError`` or ``InputError``
            for a file to skip.

    Returns:
        The model (None when there is none) and one line per artifact skipped (stale, foreign or unreadable).
    """
    from retarget.sim.reduced.errors import ReducedModelError

    skipped: list[str] = []
    for path in artifact_candidates(name) if candidates is None else candidates:
        try:
            return (load_artifact if load is None else load)(robot, path), skipped
        except (ReducedModelError, InputError) as exc:
            skipped.append(f"{path}: {exc}")
    return None, skipped
