"""The simulation model the planner optimizes on: a reduced model, loaded, cached or trained in-process.

Sources, in order (:func:`planning_model`):

1. a file given explicitly (``--reduced FILE``): the versioned ``.npz`` artifact of ``retarget reduce --out`` /
   ``retarget check reduced --save-model`` (:func:`retarget.sim.reduced.artifact.load_reduced`: a model whose robot,
   materials or mesh changed raises :class:`~retarget.sim.reduced.errors.StaleReducedModelError`, an
   :class:`~retarget.errors.InputError` naming what changed);
2. the cache (:func:`cache_dir`): artifacts named ``<robot>-<settings>-<motion>.npz`` by the SHA-256 of what they
   depend on (robot YAML, URDF text, training mesh, stiffness factors, modes, training step; the motion's samples).
   A model trained on this motion is used; else one trained with the same settings on another motion, when this
   motion's naive playback stays within its training range (:func:`motion_training_range`,
   :data:`REUSE_TRAINING_RANGE`);
3. an artifact of the robot in the model folders (:func:`artifact_dirs`: ``$RETARGET_MODELS``, else
   ``$RETARGET_CACHE/models`` and the checkout's ``.cache-models/``), newest first; stale ones are skipped and
   listed in ``info["skipped"]``;
4. the ``fallback`` artifacts (``retarget plan`` and the planner node: the models shipped with retarget for the robot,
   :func:`retarget.sim.reduced.store.shipped_candidates`), stale ones skipped;
5. training in-process: a full simulation of the input motion on the training mesh, mass-PCA + cubature
   (:func:`retarget.sim.reduced.training.build_checked_by_replay`: the cubature is retrained until the reduced model
   replays the input within :data:`PLAN_REPLAY_TOLERANCE` of the tracked travel), written into the cache of 2 as an
   artifact.

One file format throughout: the artifact (JSON metadata with the format version, the provenance hashes and the
model card, plus arrays; read with ``allow_pickle=False``). The folders, the lookup and the loading of artifacts
are the model store's (:mod:`retarget.sim.reduced.store`, shared with the twin, the CLI and the fitter); this
module adds what is the planner's: the cache key, the reuse check and the training in-process.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.motion.motion import Motion
from retarget.optimize.errors import NoPlanningModelError
from retarget.planning.options import PlanOptions

# Finding, loading and caching artifacts is the model store's (retarget.sim.reduced.store); its names are
# re-exported here for the planner's users.
from retarget.sim.reduced.store import (
    ReducedRobotModel,
    artifact_candidates,
    artifact_dirs,
    artifact_meta,
    cache_dir,
    find_artifact,
    load_artifact,
    load_model,
    robot_yaml_path,
)

if TYPE_CHECKING:
    from retarget.model.robot import RobotModel
    from retarget.model.servo import ServoParams
    from retarget.planning.budget import StageEstimate
    from retarget.sim.reduced.basis import ReducedBasis
    from retarget.sim.reduced.cubature import Cubature
    from retarget.sim.reduced.system import ReducedSystem
    from retarget.sim.reduced.training import ReplayCheck
    from retarget.sim.simulate import SimulationResult
    from retarget.sim.system import System

__all__ = ["DEFAULT_PLAN_MODES", "MAX_PLAN_MODES", "PLAN_REPLAY_TOLERANCE", "REPLAY_WARN",
           "REUSE_TRAINING_RANGE", "TRAINING_METHOD", "PlanningModel", "artifact_candidates",
           "artifact_dirs", "artifact_meta", "cache_dir", "find_artifact", "load_artifact", "load_model",
           "motion_training_range", "planning_model"]

#: A robot ready for planning: the model store's :class:`~retarget.sim.reduced.store.ReducedRobotModel` (robot
#: model on the planning mesh, YAML section, reduced system, and ``info``: how it was obtained and the
#: ``model_card``, each flexible part's bending frequencies vs the mesh-converged reference; gate it with
#: :func:`retarget.fem.model_card.check_fidelity`).
PlanningModel = ReducedRobotModel


#: Deformation modes per flexible part (a cap) of the planner's in-process training (:attr:`PlanOptions.modes`).
DEFAULT_PLAN_MODES: int = PlanOptions.modes
#: Version of the in-process training (part of the planner cache's key): bump when the same inputs give another model.
TRAINING_METHOD: int = 5

#: The in-process training replays the input with the reduced model and retrains the cubature (tenfold tighter, down
#: to 1e-6) until the tracked bodies' RMS error is within this fraction of their peak travel
#: (:func:`~retarget.sim.reduced.training.build_checked_by_replay`); the error kept is in ``info["training"]``.
PLAN_REPLAY_TOLERANCE: float = 0.01

#: A planning model whose replay of its training motion is further off than this fraction of the tracked bodies' peak
#: travel does not represent that motion: the plan warns (its verification in another model is what to trust).
REPLAY_WARN: float = 0.05

#: When the capped modes cannot replay the input within :data:`PLAN_REPLAY_TOLERANCE` (a large deformation bends
#: a rod beyond what its first few shapes span: single_rod/step_30 at 8 modes peaks at half the full FEM's tip
#: deviation), the cap is doubled, up to this many modes per flexible part; the most accurate model is kept.
MAX_PLAN_MODES: int = 32


def _with_card(pm: PlanningModel) -> PlanningModel:
    """``pm`` with ``info["model_card"]`` (the card of ``pm.model``: its meshes, materials, stiffness factors, and
    each modelled servo's coupled mode in the planning model against the full FEM of its mesh)."""
    from dataclasses import replace

    from retarget.fem.model_card import model_card
    from retarget.sim.errors import SimulationError
    from retarget.sim.servo_modes import servo_card

    card = model_card(pm.model)
    try:
        card = replace(card, servo_modes=servo_card(pm.model, pm.reduced))
    except (SimulationError, np.linalg.LinAlgError) as exc:  # no equilibrium at the reference pose: no servo rows
        pm.info.setdefault("warnings", []).append(f"no servo rows on the model card: {exc}")
    return PlanningModel(pm.model, pm.config, pm.reduced, {**pm.info, "model_card": card.to_dict()})


#: A cached model trained on another motion of the robot is reused when this motion's naive playback deforms no
#: part further than this multiple of the model's largest training deformation (its ``training_range``).
REUSE_TRAINING_RANGE: float = 1.0


def with_servo_override(pm: PlanningModel, servos: Sequence[ServoParams]) -> PlanningModel:
    """``pm`` planning for ``servos`` (one per motor) instead of the robot's; ``info["servo_override"]`` records the
    servos the model was trained with and those planned for.

    Raises:
        InputError: not one servo per motor, or a modelled servo where the model was trained with ideal ones (or
            the other way round): the basis has not seen that loop.
    """
    from retarget.model.servo import ideal_flips
    from retarget.sim.reduced.system import with_servos

    servos = list(servos)
    if len(servos) != len(pm.model.motors):
        raise InputError(f"{len(servos)} servos for the {len(pm.model.motors)} motors {list(pm.model.motors)}")
    trained = pm.model.servo_list
    flips = ideal_flips(pm.model.motors, trained, servos)
    if flips:
        raise InputError(f"the planning model was trained with {'ideal' if trained[0].ideal else 'modelled'} servos "
                         f"on {', '.join(flips)}; the servos to plan for are not: train a model with them in the loop "
                         "(give them in the robot's servo: section)")
    info = {**pm.info, "servo_override": {"trained_with": {n: s.to_config() for n, s in zip(pm.model.motors, trained)},
                                          "planned_for": {n: s.to_config() for n, s in zip(pm.model.motors, servos)}}}
    return PlanningModel(pm.model.with_servos(servos), pm.config, with_servos(pm.reduced, servos), info)


def motion_training_range(pm: PlanningModel, motion: Motion, dt: float = 5e-3) -> dict[str, float]:
    """How far ``motion``'s naive playback deforms each flexible part in ``pm``'s reduced model, as a multiple of
    the model's largest training deformation (:func:`retarget.sim.reduced.training.training_range`): one reduced
    forward run at ``dt`` [s].

    Raises:
        InputError: the motion lacks a motor of the model.
        SimulationError: the reduced model cannot simulate the motion (then it is not valid for it either).
    """
    from retarget.optimize.adjoint import rollout
    from retarget.sim.adapters import planner_engine
    from retarget.sim.motors import SplineMotors
    from retarget.sim.reduced.training import training_range

    names = list(pm.reduced.motors)
    missing = [m for m in names if m not in motion.joint_names]
    if missing:
        raise InputError(f"the motion has no column for motors {missing} (it has {list(motion.joint_names)})")
    m0 = motion.shifted(-float(motion.time[0]))
    cols = np.stack([m0.positions[:, m0.joint_index(n)] for n in names], axis=1)
    engine = planner_engine(pm.reduced)
    motors = SplineMotors(m0.time, cols)
    n = max(1, int(round(m0.duration / dt)))
    run = rollout(engine, engine.solve_static(motors.value(0.0)), motors, dt, n)
    return training_range(pm.reduced, run.matrix[:, pm.reduced.z_slice])


def planning_model(robot: str | Path, motion: Motion, *, n_modes: int | None = None, dt_train: float = 2e-3,
                   mesh_axial: int | None = None, mesh_around: int | None = None, reduced_file: str | Path | None = None,
                   use_cache: bool = True, progress: Callable[[int, int], None] | None = None,
                   allow_training: bool = True, servos: Sequence[ServoParams] | None = None,
                   fallback: Sequence[str | Path] = (), announce: Callable[[StageEstimate], None] | None = None
                   ) -> PlanningModel:
    """The reduced model for planning ``motion`` on ``robot``.

    Sources, in order: ``reduced_file``; the cache (:func:`cache_dir`) — a model trained with these settings on this
    motion, else on another motion of the robot whose training covers this one (:func:`motion_training_range` ≤
    :data:`REUSE_TRAINING_RANGE` for every part); the model folders (:func:`artifact_dirs`); the ``fallback`` files
    (the planner node's: the models shipped with retarget); training in-process.
    Every model file is a ``retarget reduce`` artifact (``.npz``: versioned, with the hashes of what it was built
    from, no pickled objects).

    Args:
        robot: name or YAML path.
        motion: the training motion (the input animation).
        n_modes: deformation modes per flexible part (None: 99.99 % of the variance).
        dt_train: step of the full training simulation [s].
        mesh_axial, mesh_around: rod mesh resolution override for the training mesh.
        reduced_file: a ``retarget reduce`` artifact (``.npz``) to use instead (``--reduced``).
        use_cache: read/write the cache and search the model folders.
        progress: ``(step, n_steps)`` of the training simulation.
        allow_training: when no model is given or cached, train one from a full simulation of ``motion``
            (minutes to hours, by robot). False raises :class:`NotAvailableError` instead.
        servos: per motor the servos to plan for instead of the robot's (``retarget plan --servo``, a fitted servo
            file). A model trained with the robot's own servos is used with these (its basis saw the servo loop;
            other gains move the structure's modes little); a model trained with other servos in the loop is
            one trained with the servos modelled at all (see :func:`retarget.sim.reduced.artifact.servo_loop`).
        fallback: artifacts tried, in order, when none is given, cached or found (a stale one is skipped);
            ``info["source"]`` is then ``"fallback"``.
        announce: called with the training's :class:`~retarget.planning.budget.StageEstimate` before it starts.

    Raises:
        NoPlanningModelError: no model given, cached, found or in ``fallback`` and ``allow_training`` is False (a
            :class:`NotAvailableError`).
        StaleReducedModelError: the given artifact does not match the robot (an InputError naming what changed).
        InputError: a file that is not a model artifact, or motors that differ from the robot's.
    """
    if servos is not None:
        found = planning_model(robot, motion, n_modes=n_modes, dt_train=dt_train, mesh_axial=mesh_axial,
                               mesh_around=mesh_around, reduced_file=reduced_file, use_cache=use_cache,
                               progress=progress, allow_training=allow_training, fallback=fallback,
                               announce=announce)
        return with_servo_override(found, servos)
    if reduced_file is not None:
        if Path(reduced_file).suffix.lower() != ".npz":
            raise InputError(f"reduced model {reduced_file}: expected a model artifact (.npz, written by `retarget "
                             "reduce` or cached by `retarget plan`)")
        return _with_card(load_artifact(robot, reduced_file))
    model, cfg, fingerprint = load_model(robot, mesh_axial, mesh_around)
    m0, cols = _motor_columns(motion, list(model.motors))
    family, samples = _cache_names(model, fingerprint, n_modes, dt_train, m0, cols)
    path = cache_dir() / f"{family}-{samples[:12]}.npz"
    skipped: list[str] = []
    if use_cache:
        pm = _cached(robot, motion, model.name, path, family, skipped)
        if pm is not None:
            return pm
    pm = _fallback(robot, fallback, skipped)
    if pm is not None:
        return pm
    if not allow_training:
        raise _no_model(model.name, skipped)
    trained = _TrainingRun(robot=robot, model=model, config=cfg, motion=motion, m0=m0, cols=cols, path=path,
                           samples=samples, n_modes=n_modes, dt_train=dt_train, mesh_axial=mesh_axial,
                           mesh_around=mesh_around, use_cache=use_cache, skipped=skipped)
    return _train(trained, progress, announce)


def _motor_columns(motion: Motion, names: Sequence[str]) -> tuple[Motion, NDArray[np.float64]]:
    """``motion`` shifted to start at 0 s and its motor columns ``(n_samples, len(names))`` [rad].

    Raises:
        InputError: the motion lacks a motor of ``names``.
    """
    missing = [m for m in names if m not in motion.joint_names]
    if missing:
        raise InputError(f"the motion has no column for motors {missing} (it has {list(motion.joint_names)})")
    m0 = motion.shifted(-float(motion.time[0]))
    cols = np.stack([m0.positions[:, m0.joint_index(n)] for n in names], axis=1)
    return m0, cols


def _cache_names(model: RobotModel, fingerprint: str, n_modes: int | None, dt_train: float, m0: Motion,
                 cols: NDArray[np.float64]) -> tuple[str, str]:
    """The cache's family name ``<robot>-<settings hash>`` and the hex SHA-256 of the motion's samples."""
    settings = hashlib.sha256()
    settings.update(fingerprint.encode())
    settings.update(json.dumps([n_modes, dt_train, TRAINING_METHOD]).encode())  # the training method's version
    settings.update(json.dumps([link.name for link in model.links]).encode())  # the rigid layout (merged links)
    # The flexible parts' stiffness calibration (docs/fem.md): another factor is another model.
    settings.update(json.dumps([[p.name, p.stiffness_factor] for p in model.flexible_parts]).encode())
    # The servos in the training runs' loop: their parameters shape the trained modes.
    settings.update(json.dumps([s.to_config() for s in model.servo_list]).encode())
    samples = hashlib.sha256(np.ascontiguousarray(m0.time).tobytes() + np.ascontiguousarray(cols).tobytes())
    return f"{model.name}-{settings.hexdigest()[:16]}", samples.hexdigest()


def _cached(robot: str | Path, motion: Motion, name: str, path: Path, family: str,
            skipped: list[str]) -> PlanningModel | None:
    """The cached model trained on this motion (``path``), else one of the ``family`` trained on another motion
    that covers this one, else the newest fresh artifact in the model folders; None if none. Files passed over
    are added to ``skipped`` with the reason."""
    from retarget.sim.errors import SimulationError
    from retarget.sim.reduced.errors import ReducedModelError

    if path.is_file():
        try:
            pm = load_artifact(robot, path)
            return _with_card(PlanningModel(pm.model, pm.config, pm.reduced,
                                            {**pm.info, "source": "cache", "cache_file": str(path)}))
        except (ReducedModelError, InputError) as exc:
            skipped.append(f"{path}: {exc}")
    others = sorted((p for p in cache_dir().glob(f"{family}-*.npz") if p != path),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for other in others:
        try:
            pm = load_artifact(robot, other)
            ranges = motion_training_range(pm, motion)
        except (ReducedModelError, InputError, SimulationError) as exc:
            skipped.append(f"{other}: {exc}")
            continue
        trained_on = pm.info.get("training", {}).get("train_motion", "another motion")
        if ranges and max(ranges.values()) <= REUSE_TRAINING_RANGE:
            info = {**pm.info, "source": "cache (trained on another motion)", "cache_file": str(other),
                    "trained_on": trained_on, "motion_training_range": ranges, "skipped": skipped}
            return _with_card(PlanningModel(pm.model, pm.config, pm.reduced, info))
        worst = max(ranges, key=ranges.__getitem__) if ranges else "?"
        skipped.append(f"{other} (trained on {trained_on}): this motion deforms {worst} "
                       f"{ranges.get(worst, float('nan')):.2f} x as far as its training did (reused up to "
                       f"{REUSE_TRAINING_RANGE:g} x)")
    found, more = find_artifact(robot, name)
    skipped += more
    if found is not None:
        info = {**found.info, "skipped": skipped}
        return _with_card(PlanningModel(found.model, found.config, found.reduced, info))
    return None


def _fallback(robot: str | Path, fallback: Sequence[str | Path], skipped: list[str]) -> PlanningModel | None:
    """The first fresh artifact of ``fallback``; None if none (the stale ones are added to ``skipped``)."""
    from retarget.sim.reduced.errors import ReducedModelError

    for file in fallback:
        try:
            kept = load_artifact(robot, file)
        except (ReducedModelError, InputError) as exc:
            skipped.append(f"{file}: {exc}")
            continue
        return _with_card(PlanningModel(kept.model, kept.config, kept.reduced,
                                        {**kept.info, "source": "fallback", "skipped": skipped}))
    return None


def _no_model(name: str, skipped: list[str]) -> NoPlanningModelError:
    """The error for no model of robot ``name`` anywhere, with the files ``skipped`` and how to build one."""
    folders = [str(d) for d in artifact_dirs()]
    stale = ("; skipped: " + "; ".join(skipped)) if skipped else ""
    return NoPlanningModelError(
        f"no reduced model of {name}: none cached for this motion in {cache_dir()} and no fresh "
        f"artifact {name}[-*].npz in {', '.join(folders)}{stale}. Build one with `retarget reduce "
        f"{name} --train-motion ... --out <folder>/{name}-<motion>.npz` or run `retarget plan "
        f"{name} --motion ...` once (it trains and caches a model; minutes to hours)",
        robot=name, searched=(str(cache_dir()), *folders), skipped=tuple(skipped))


@dataclass(frozen=True, eq=False)
class _TrainingRun:
    """What the in-process training of :func:`planning_model` needs: the robot, the motion shifted to 0 s (``m0``)
    and its motor columns ``cols`` [rad], the cache file to write (``path``, with the samples' hash ``samples``),
    the training settings, and the files ``skipped`` on the way."""

    robot: str | Path
    model: RobotModel
    config: dict[str, object]
    motion: Motion
    m0: Motion
    cols: NDArray[np.float64]
    path: Path
    samples: str
    n_modes: int | None
    dt_train: float
    mesh_axial: int | None
    mesh_around: int | None
    use_cache: bool
    skipped: list[str]


def _train(run: _TrainingRun, progress: Callable[[int, int], None] | None,
           announce: Callable[[StageEstimate], None] | None) -> PlanningModel:
    """Train a planning model on ``run.motion``: a full simulation on the training mesh, then the reduced model
    with the mode cap doubled (up to :data:`MAX_PLAN_MODES`) until it replays the motion within
    :data:`PLAN_REPLAY_TOLERANCE`; cached with ``run.use_cache``."""
    import time

    from retarget.sim.motors import SplineMotors
    from retarget.sim.reduced.artifact import save_reduced
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    model, m0, cols, dt_train = run.model, run.m0, run.cols, run.dt_train
    system = build_system(model)
    if announce is not None:
        from retarget.planning.budget import training_estimate

        announce(training_estimate(int(system.n_deformable_dofs), m0.duration, dt_train))
    started = time.perf_counter()
    full = simulate(system, SplineMotors(m0.time, cols), m0.duration, dt_train, progress=progress)
    wall_train = time.perf_counter() - started
    started = time.perf_counter()
    (rs, bases, cubs, _), kept, n_modes_used = _replaying_build(system, full, run)
    label = str(getattr(run.motion, "name", "") or "") or f"{m0.duration:.2f} s motion {run.samples[:12]}"
    extra = {"mesh_axial": run.mesh_axial, "mesh_around": run.mesh_around, "modes": n_modes_used,
             "dt_train": dt_train, "train_motion": label, "trained_by": "retarget plan",
             "replay_error_rel": kept.error_rel, "replay_error_m": kept.error_m,
             "cubature_tolerance": kept.cubature_tolerance}
    info = {"source": "trained", "cache_file": str(run.path), "full_dofs": int(system.n_deformable_dofs),
            "modes": [int(b.size - b.n_rigid) for b in bases],
            "cubature_elements": [int(len(c.elements)) for c in cubs],
            "wall_s_train_full": wall_train, "wall_s_build": time.perf_counter() - started, "dt_train": dt_train,
            "training": extra, "skipped": run.skipped}
    pm = _with_card(PlanningModel(model, run.config, rs, info))
    if run.use_cache:
        save_reduced(run.path, system, bases, cubs, robot_yaml_path(run.robot), model.name, extra,
                     pm.info["model_card"])
    return pm


def _replaying_build(system: System, full: SimulationResult, run: _TrainingRun
                     ) -> tuple[tuple[ReducedSystem, list[ReducedBasis], list[Cubature], list[ReplayCheck]],
                                ReplayCheck, int | None]:
    """The reduced model built from the full run ``full`` that replays it best: the mode cap ``run.n_modes``,
    doubled up to :data:`MAX_PLAN_MODES` while the replay is off by more than :data:`PLAN_REPLAY_TOLERANCE` and
    the snapshots support more modes. Returns the build, its kept replay check and the cap used."""
    from retarget.sim.motors import SplineMotors
    from retarget.sim.reduced.training import build_checked_by_replay

    tracked = [t.link for t in run.model.tracked_bodies]
    caps = [run.n_modes]
    while caps[-1] is not None and 2 * caps[-1] <= MAX_PLAN_MODES:
        caps.append(2 * caps[-1])
    best: tuple[tuple[ReducedSystem, list[ReducedBasis], list[Cubature], list[ReplayCheck]], ReplayCheck,
                int | None] | None = None
    for cap in caps:
        built = build_checked_by_replay(system, full, SplineMotors(run.m0.time, run.cols), run.dt_train, tracked,
                                        tolerance=PLAN_REPLAY_TOLERANCE, n_modes=cap)
        kept = next(t for t in built[3] if t.kept)
        if best is None or kept.error_rel < best[1].error_rel:
            best = (built, kept, cap)
        if kept.error_rel <= PLAN_REPLAY_TOLERANCE or (cap is not None and max(kept.modes, default=0) < cap):
            break  # within tolerance, or the snapshots support no more modes than this cap gave
    assert best is not None
    return best
