"""The simulation model the planner optimizes on: a reduced model, loaded, cached or trained in-process.

Until the reduced-model artifact (``retarget reduce``) exists, the planner trains one itself: a full simulation
of the input motion (optionally on a coarser mesh), mass-PCA + cubature (:func:`retarget.sim.reduced.
build_from_result`), and pickles the resulting :class:`~retarget.sim.reduced.ReducedSystem` in a cache keyed by
the SHA-256 of everything it depends on (robot YAML, URDF text, motion samples, mesh and training options).
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from retarget.errors import InputError, NotAvailableError
from retarget.motion.motion import Motion

__all__ = ["PlanningModel", "cache_dir", "load_model", "planning_model"]


@dataclass(frozen=True, eq=False)
class PlanningModel:
    """A robot ready for planning.

    Attributes:
        model: the :class:`retarget.model.RobotModel` (on the planning mesh).
        config: the robot YAML's ``retarget:`` section.
        reduced: the :class:`retarget.sim.reduced.ReducedSystem`.
        info: how it was obtained (source, cache key, modes, training time …).
    """

    model: Any
    config: dict[str, Any]
    reduced: Any
    info: dict[str, Any]


def cache_dir() -> Path:
    """``$RETARGET_CACHE`` or ``~/.cache/retarget``, with a ``reduced/`` subfolder."""
    root = Path(os.environ.get("RETARGET_CACHE", Path.home() / ".cache" / "retarget"))
    return root / "reduced"


def load_model(robot: str | Path, mesh_axial: int | None = None, mesh_around: int | None = None
               ) -> tuple[Any, dict[str, Any], str]:
    """Load a robot, optionally overriding the resolution of generated rod meshes.

    Returns:
        The model, its YAML ``retarget:`` section and the text the model depends on (for hashing).
    """
    from retarget.model import library
    from retarget.model.loader import load_robot, read_robot_yaml, resolve_urdf

    path = Path(robot) if Path(robot).is_file() else library.resolve_robot(str(robot))
    cfg = read_robot_yaml(path)
    urdf = resolve_urdf(str(cfg.get("urdf", "")), path)
    fingerprint = path.read_text() + urdf.read_text() + json.dumps([mesh_axial, mesh_around])
    name = path.stem.split(".")[0]
    if mesh_axial is None and mesh_around is None:
        return load_robot(path, name), cfg, fingerprint
    cfg2 = json.loads(json.dumps(cfg))
    cfg2["urdf"] = str(urdf)
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


def planning_model(robot: str | Path, motion: Motion, *, n_modes: int | None = None, dt_train: float = 2e-3,
                   mesh_axial: int | None = None, mesh_around: int | None = None, reduced_file: str | Path | None = None,
                   use_cache: bool = True, progress: Callable[[int, int], None] | None = None,
                   allow_training: bool = True) -> PlanningModel:
    """The reduced model for planning ``motion`` on ``robot``.

    Args:
        robot: name or YAML path.
        motion: the training motion (the input animation).
        n_modes: deformation modes per flexible part (None: 99.99 % of the variance).
        dt_train: step of the full training simulation [s].
        mesh_axial, mesh_around: rod mesh resolution override for the training mesh.
        reduced_file: a pickled reduced system to use instead (``--reduced``).
        use_cache: read/write the cache.
        progress: ``(step, n_steps)`` of the training simulation.
        allow_training: when no model is given or cached, train one from a full simulation of ``motion``
            (minutes to hours, by robot). False raises :class:`NotAvailableError` instead.

    Raises:
        NotAvailableError: no model given or cached and ``allow_training`` is False.
    """
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.simulate import simulate
    from retarget.sim.motors import SplineMotors
    from retarget.sim.system import build_system

    model, cfg, fingerprint = load_model(robot, mesh_axial, mesh_around)
    if reduced_file is not None:
        with open(reduced_file, "rb") as fh:
            rs = pickle.load(fh)
        if tuple(rs.motors) != tuple(model.motors):
            raise InputError(f"reduced model {reduced_file} has motors {rs.motors}, the robot has {model.motors}")
        return PlanningModel(model, cfg, rs, {"source": str(reduced_file)})
    names = list(model.motors)
    missing = [m for m in names if m not in motion.joint_names]
    if missing:
        raise InputError(f"the motion has no column for motors {missing} (it has {list(motion.joint_names)})")
    m0 = motion.shifted(-float(motion.time[0]))
    cols = np.stack([m0.positions[:, m0.joint_index(n)] for n in names], axis=1)
    key = hashlib.sha256()
    key.update(fingerprint.encode())
    key.update(np.ascontiguousarray(m0.time).tobytes())
    key.update(np.ascontiguousarray(cols).tobytes())
    key.update(json.dumps([n_modes, dt_train, 1]).encode())
    digest = key.hexdigest()[:24]
    path = cache_dir() / f"{model.name}-{digest}.pkl"
    if use_cache and path.is_file():
        with open(path, "rb") as fh:
            rs = pickle.load(fh)
        return PlanningModel(model, cfg, rs, {"source": "cache", "cache_file": str(path)})
    if not allow_training:
        raise NotAvailableError(
            f"no reduced model of {model.name} for this motion is cached in {cache_dir()}; training one needs a "
            f"full simulation of the whole motion (minutes to hours): run `retarget plan {model.name} --motion ...` "
            "once (it trains and caches the model), or pass a reduced model file")
    import time

    system = build_system(model)
    started = time.perf_counter()
    full = simulate(system, SplineMotors(m0.time, cols), m0.duration, dt_train, progress=progress)
    wall_train = time.perf_counter() - started
    started = time.perf_counter()
    rs, bases, cubs = build_from_result(system, full, n_modes=n_modes)
    info = {"source": "trained", "cache_file": str(path), "full_dofs": int(system.n_deformable_dofs),
            "modes": [int(b.size - b.n_rigid) for b in bases], "cubature_elements": [int(len(c.elements)) for c in cubs],
            "wall_s_train_full": wall_train, "wall_s_build": time.perf_counter() - started, "dt_train": dt_train}
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(rs, fh)
        tmp.replace(path)
    return PlanningModel(model, cfg, rs, info)
