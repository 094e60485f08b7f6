"""Where the twin's reduced model comes from: a model artifact given, or the newest of the robot's cached ones.

Lookup order (:func:`find_reduced_model`): the file the user gave (``--reduced`` / the ``reduced`` option), else the
newest model of this robot in the planner's cache (:func:`retarget.sim.reduced.store.cache_dir`, artifacts
``<robot>-<settings>-<motion>.npz`` written by ``retarget plan``), else the newest current-format artifact
``<robot>.npz`` / ``<robot>-*.npz`` in the model folders (:func:`retarget.sim.reduced.store.artifact_dirs`, e.g.
the checkout's ``.cache-models/``). Every one is an
artifact checked against the robot when loaded (:func:`retarget.sim.reduced.load_reduced` raises
``StaleReducedModelError`` naming what changed).

The lookup is cheap (file checks only); :func:`load_twin_model` does the heavy part (robot and FEM build for an
artifact, numba kernels on first use).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from retarget.errors import InputError
from retarget.twin.errors import TwinModelUnavailable

if TYPE_CHECKING:
    from retarget.sim.reduced.system import ReducedSystem

__all__ = ["ReducedModelSource", "TwinModel", "find_reduced_model", "load_twin_model", "robot_name"]


@dataclass(frozen=True)
class ReducedModelSource:
    """A reduced model file and how it was found.

    Attributes:
        path: the model artifact (``.npz``).
        origin: ``"file"`` (given by the user), ``"planner_cache"`` or ``"artifact_dir"`` (a planner model folder).
    """

    path: Path
    origin: str

    def describe(self) -> str:
        """One line for logs."""
        how = {"file": "given", "planner_cache": "planner cache", "artifact_dir": "planner model folder"}
        return f"{self.path} ({how.get(self.origin, self.origin)})"


@dataclass(frozen=True, eq=False)
class TwinModel:
    """A reduced system ready to drive.

    Attributes:
        robot: robot name. reduced: the :class:`~retarget.sim.reduced.ReducedSystem`.
        motors: motor names in the reduced system's order, ``(m,)``.
        bodies: rigid bodies whose poses the twin publishes (the robot's tracked bodies; all rigid bodies if it
            tracks none), ``(b,)``.
        source: where it came from. info: modes, cubature elements, mesh scale (for logs).
    """

    robot: str
    reduced: ReducedSystem
    motors: tuple[str, ...]
    bodies: tuple[str, ...]
    source: ReducedModelSource
    info: dict[str, object] = field(default_factory=dict)


def robot_name(robot: str | Path) -> str:
    """The robot's name (``single_rod``) from a name or a description/params YAML path."""
    from retarget.sim.reduced.store import robot_yaml_path

    return robot_yaml_path(robot).name.split(".")[0]


def find_reduced_model(robot: str | Path, reduced_file: str | Path | None = None) -> ReducedModelSource:
    """The reduced model the twin of ``robot`` should run (file checks only).

    Args:
        robot: robot name or YAML path.
        reduced_file: a ``.npz`` artifact (``retarget reduce``, or cached by ``retarget plan``); None: the planner's
            cache, then the model folders (:func:`retarget.sim.reduced.store.artifact_dirs`).

    Raises:
        InputError: ``reduced_file`` does not exist.
        TwinModelUnavailable: nothing given and nothing cached for this robot (the message says where it looked).
    """
    if reduced_file:
        path = Path(reduced_file)
        if not path.is_file():
            raise InputError(f"reduced model {path} does not exist (build one with `retarget reduce`)")
        return ReducedModelSource(path.resolve(), "file")
    from retarget.sim.reduced.artifact import READS_FORMATS
    from retarget.sim.reduced.errors import StaleReducedModelError
    from retarget.sim.reduced.store import (
        artifact_candidates,
        artifact_dirs,
        artifact_meta,
        cache_dir,
        cached_artifacts,
    )

    name = robot_name(robot)
    folder = cache_dir()
    cached = cached_artifacts(name)
    if cached:
        return ReducedModelSource(cached[0].resolve(), "planner_cache")
    # Then the planner's model folders (the same artifacts `retarget plan` finds), newest first, current format.
    for path in artifact_candidates(name):
        try:
            if artifact_meta(path).get("format_version") in READS_FORMATS:
                return ReducedModelSource(path.resolve(), "artifact_dir")
        except StaleReducedModelError:
            continue
    where = ", ".join(str(d) for d in artifact_dirs())
    raise TwinModelUnavailable(name, f"no --reduced file given, no {name}-*.npz in the planner cache {folder} and "
                                     f"no current {name}[-*].npz in {where} (build one with `retarget reduce "
                                     f"{name} ...` or `retarget plan`)")


def load_twin_model(robot: str | Path, source: ReducedModelSource, mesh_scale: float | None = None) -> TwinModel:
    """Load the reduced system of ``source`` for ``robot``.

    An artifact is checked against the robot; it is rebuilt on the mesh it was trained on (its stored
    ``mesh_scale``, as ``retarget reduce --mesh-scale`` writes it, unless ``mesh_scale`` is given).

    Raises:
        StaleReducedModelError: the artifact does not match the robot (names every changed input) or is unreadable.
        TwinModelUnavailable: an artifact whose motors differ from the robot's.
        InputError: a file that is not a model artifact.
    """

    name = robot_name(robot)
    path = source.path
    info: dict[str, object] = {}
    if path.suffix != ".npz":
        raise InputError(f"reduced model {path}: expected a model artifact (.npz, written by `retarget reduce` or "
                         "cached by `retarget plan`)")
    # The model store's loader: the artifact's mesh variant rebuilt exactly as it was built.
    from retarget.sim.reduced.store import load_artifact

    pm = load_artifact(robot, path, mesh_scale)
    rs, model = pm.reduced, pm.model
    info["mesh_scale"] = pm.info["mesh_scale"]
    if tuple(rs.motors) != tuple(model.motors):
        raise TwinModelUnavailable(name, f"{path} has motors {list(rs.motors)}, the robot has {list(model.motors)}")
    rigid = [b.name for b in rs.rigid]
    tracked = [tb.link for tb in model.tracked_bodies if tb.link in rigid]
    info.update(modes=[int(b.size - b.basis.n_rigid) for b in rs.bodies],
                cubature_elements=[int(len(b.cubature.elements)) for b in rs.bodies])
    return TwinModel(name, rs, tuple(rs.motors), tuple(tracked or rigid), source, info)
