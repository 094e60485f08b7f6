"""The reduced-model artifact: a versioned ``.npz`` with bases, cubatures and the hashes of what they came from.

Stored per deformable body: the basis ``U`` (3N, r), its rigid-mode count, captured variance, spectrum and
training range (largest training deformation; optional, older files lack it), the cubature elements, weights and
training error. The inertia tensors, reduced interfaces and stiffness are
recomputed on load from the (verified) robot, so the file cannot disagree with the model it is used with.

Provenance (``meta`` JSON): format version, robot name, and SHA-256 digests of the robot description YAML, the
expanded URDF, each body's material values (Lamé parameters, density via the mass, Rayleigh α, β) and each
body's mesh (rest nodes, tets). The material digest is of the simulated material, i.e. after the flexible parts'
stiffness calibration (``FlexiblePart.stiffness_factor``, docs/fem.md): a model trained with another factor, or
before the calibration, is stale. :func:`load_reduced` recomputes them from the robot it is given and raises
:class:`~retarget.sim.reduced.errors.StaleReducedModelError` naming every input that changed — never a silently
wrong model; the error also says what the file was built for (:func:`built_for`: the robot, each body's mesh size and
simulated E, ν from the meta's ``body_details``, which files written without it lack, and the mesh settings). The
meta also stores the robot's model card (``model_card``: :meth:`retarget.fem.model_card.ModelCard.
to_dict`) when the writer gives it.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
from numpy.typing import NDArray

from retarget.atomic import atomic_path
from retarget.sim.reduced.basis import ReducedBasis
from retarget.sim.reduced.cubature import Cubature, _element_rows, cubature_geometry
from retarget.sim.reduced.errors import StaleReducedModelError
from retarget.sim.reduced.system import ReducedSystem, build_reduced_system

if TYPE_CHECKING:
    from retarget.sim.system import System

__all__ = ["FORMAT_VERSION", "READS_FORMATS", "ArtifactMeta", "BodyDetails", "built_for", "load_reduced", "provenance",
           "save_reduced"]

class BodyDetails(TypedDict):
    """A deformable body's mesh size and simulated material (after the stiffness calibration) in the meta."""

    nodes: int
    tets: int
    youngs_modulus_pa: float
    poisson_ratio: float


class ArtifactMeta(TypedDict, total=False):
    """The ``meta`` JSON of an artifact: format version, robot, per body its details, the provenance digests,
    the training settings (``extra``), per motor its servo (``to_config``) and, when given, the model card."""

    format_version: int
    robot: str
    bodies: list[str]
    body_details: dict[str, BodyDetails]
    hashes: dict[str, str]
    extra: dict[str, object]
    servos: dict[str, dict[str, float | str]]
    model_card: dict[str, object]


#: Version of the artifact layout written: 2 interface modes on loop couplings (basis info has n_interface); 3 the
#: quadrature point of each cubature element (``b{d}_points``, per-point cubatures).
FORMAT_VERSION: int = 3
#: Versions read (2 has whole-element cubatures only); any other is rejected, and a reader of version 2 rejects 3.
READS_FORMATS: tuple[int, ...] = (2, 3)


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()


def _urdf_digests(robot_yaml: Path) -> tuple[str, str]:
    """(digest of the expanded URDF without its XML comments, digest of the raw expansion).

    xacro writes the absolute path of its input into a header comment, so the raw digest changed with the folder
    the checkout sits in (an artifact built in one clone was "stale" in another). The first is what artifacts
    record; the second is accepted from artifacts written before.
    """
    from retarget.model.loader import read_robot_yaml, robot_urdf

    xml = robot_urdf(read_robot_yaml(robot_yaml), robot_yaml)[1]
    return _sha(re.sub(r"<!--.*?-->", "", xml, flags=re.S).encode()), _sha(xml.encode())


def provenance(system: System, robot_yaml: str | Path | None = None) -> dict[str, str]:
    """SHA-256 digests of every input a reduced model depends on (keys name the input).

    Args:
        system: the absolute :class:`retarget.sim.System` built from the robot.
        robot_yaml: the robot description file it was loaded from (hashes the YAML and the expanded URDF, the
            latter without XML comments).
    """
    out: dict[str, str] = {}
    src = robot_yaml
    if src is not None and Path(src).is_file():
        ypath = Path(src)
        out["robot_yaml"] = _sha(ypath.read_bytes())
        out["urdf"] = _urdf_digests(ypath)[0]
    rigid = np.array([[b.mass, *np.ravel(b.inertia), *b.reference_com] for b in system.rigid], dtype=float)
    out["rigid_bodies"] = _sha(np.round(rigid, 12).tobytes())
    # Which motors were modelled servos in the training runs (a model trained with perfect position sources has
    # not seen the servo–structure modes; other gains of a modelled servo keep the basis, see docs/reduced.md).
    out["servo_loop"] = _sha(json.dumps(servo_loop(system)).encode())
    for body in system.deformable:
        el = body.elastic
        mat = np.array([el.mu, el.lam, body.mass_matrix.sum(), body.alpha, body.beta], dtype=float)
        out[f"material:{body.name}"] = _sha(np.round(mat, 12).tobytes())
        out[f"mesh:{body.name}"] = _sha(
            np.round(np.asarray(body.rest_positions, dtype=float), 12).tobytes(),
            np.asarray(el.mesh.tets, dtype=np.int64).tobytes(),
        )
    return out


def servo_loop(system: System) -> list[list[str]]:
    """Per motor ``[name, "ideal" | "servo"]``: whether its servo is modelled in ``system``."""
    per_motor = system.servo.per_motor
    return [[name, "ideal" if s.ideal else "servo"] for name, s in zip(system.motors, per_motor)]


def _bodies(system: System) -> dict[str, BodyDetails]:
    """Each deformable body's mesh size and simulated material (after the stiffness calibration), for the meta."""
    from retarget.fem.material import elastic_constants

    out: dict[str, BodyDetails] = {}
    for body in system.deformable:
        e, nu = elastic_constants(float(body.elastic.mu), float(body.elastic.lam))
        out[body.name] = {"nodes": len(body.rest_positions), "tets": len(body.elastic.mesh.tets),
                          "youngs_modulus_pa": e, "poisson_ratio": nu}
    return out


def built_for(meta: ArtifactMeta) -> str:
    """What an artifact was built for, from its ``meta``: the robot, each body's mesh (nodes, tets) and simulated
    material (E, ν) where recorded, and the mesh settings (``mesh_scale`` of `retarget reduce`, or the planner's
    ``mesh_axial`` × ``mesh_around``); e.g. ``robot 'tiny_rod' (rod: 45 nodes, 96 tets, E 1.015e+11 Pa,
    ν 0.29; mesh scale 0.25)``."""
    bodies = meta.get("body_details") or {}
    parts = []
    for name in meta.get("bodies") or list(bodies):
        b = bodies.get(name)
        parts.append(f"{name}: {b['nodes']} nodes, {b['tets']} tets, E {b['youngs_modulus_pa']:.4g} Pa, "
                     f"ν {b['poisson_ratio']:.3g}" if b else str(name))
    extra = meta.get("extra") or {}
    if extra.get("mesh_scale") is not None:
        parts.append(f"mesh scale {extra['mesh_scale']:g}")
    elif extra.get("mesh_axial") is not None:
        parts.append(f"mesh {extra['mesh_axial']} x {extra.get('mesh_around')}")
    robot = f"robot {meta.get('robot')!r}" if meta.get("robot") else "an unnamed robot"
    return robot + (f" ({'; '.join(parts)})" if parts else "")


def save_reduced(
    path: str | Path, system: System, bases: list[ReducedBasis], cubatures: list[Cubature],
    robot_yaml: str | Path | None = None, robot_name: str = "", extra: Mapping[str, object] | None = None,
    model_card: Mapping[str, object] | None = None,
) -> Path:
    """Write the artifact (``.npz``); ``extra`` (JSON-able) is stored in the metadata (training settings), and so
    is ``model_card`` (the robot's :meth:`retarget.fem.model_card.ModelCard.to_dict`)."""
    path = Path(path)
    meta: ArtifactMeta = {
        "format_version": FORMAT_VERSION,
        "robot": robot_name,
        "bodies": [b.name for b in system.deformable],
        "body_details": _bodies(system),
        "hashes": provenance(system, robot_yaml),
        "extra": dict(extra or {}),
        "servos": {name: s.to_config() for name, s in zip(system.motors, system.servo.per_motor)},
    }
    if model_card is not None:
        meta["model_card"] = dict(model_card)
    arrays: dict[str, NDArray[np.generic]] = {"meta": np.array(json.dumps(meta))}
    for d, (b, c) in enumerate(zip(bases, cubatures)):
        arrays[f"b{d}_modes"] = b.modes
        arrays[f"b{d}_info"] = np.array([b.n_rigid, b.captured_variance, b.n_interface, b.n_derivatives], dtype=float)
        arrays[f"b{d}_spectrum"] = b.spectrum
        arrays[f"b{d}_training_norm"] = np.array([b.training_norm])
        arrays[f"b{d}_elements"] = c.elements
        arrays[f"b{d}_weights"] = c.weights
        arrays[f"b{d}_cub_error"] = np.array([c.relative_error])
        arrays[f"b{d}_points"] = np.full(len(c.elements), -1, dtype=np.int64) if c.points is None else c.points
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:  # never a half-written artifact under the real name
        np.savez_compressed(fh, **arrays)
    return path


def load_reduced(path: str | Path, system: System, robot_yaml: str | Path | None = None) -> ReducedSystem:
    """Load an artifact for ``system`` (built from ``robot_yaml``) after checking its provenance.

    Raises:
        StaleReducedModelError: unknown format version, unreadable file, or inputs that changed (named).
    """
    path = Path(path)
    try:
        data = np.load(path, allow_pickle=False)
        meta = json.loads(str(data["meta"]))
    except (OSError, ValueError, KeyError) as exc:
        raise StaleReducedModelError(str(path), ["file"], f"unreadable reduced model: {exc}") from exc
    if meta.get("format_version") not in READS_FORMATS:
        raise StaleReducedModelError(
            str(path), ["format_version"],
            f"format {meta.get('format_version')!r}, this version reads {' and '.join(map(str, READS_FORMATS))}",
            built_for(meta),
        )
    now = provenance(system, robot_yaml)
    stored = meta.get("hashes", {})
    changed = sorted(k for k in set(now) | set(stored) if now.get(k) != stored.get(k))
    if "urdf" in changed and robot_yaml is not None and stored.get("urdf") == _urdf_digests(Path(robot_yaml))[1]:
        changed.remove("urdf")  # written before comments were dropped from the digest, in this same folder
    if changed:
        detail = ""
        if "servo_loop" in changed:
            was = meta.get("servos")
            detail = ("it was trained " + ("with the servos " + json.dumps(was) if was else
                                           "with every motor a perfect position source (no servo model)")
                      + f", the robot now has {json.dumps(servo_loop(system))}: train it again with the servos in "
                        "the loop")
        if any(k.startswith("material:") for k in changed):
            card = meta.get("model_card")
            factors = {p["name"]: p["stiffness_factor"] for p in card["parts"]} if card else None
            detail = ("the simulated material includes the flexible parts' stiffness calibration; this artifact was "
                      + (f"built with stiffness factors {factors}" if factors else
                         "built without a model card (before the calibration)"))
        raise StaleReducedModelError(str(path), changed, detail, built_for(meta))
    bases, cubs = [], []
    for d, body in enumerate(system.deformable):
        modes = np.asarray(data[f"b{d}_modes"], dtype=float)
        info = data[f"b{d}_info"]
        # training_norm: absent (0, unknown) in files written before it was recorded.
        norm = float(data[f"b{d}_training_norm"][0]) if f"b{d}_training_norm" in data.files else 0.0
        # n_derivatives (info[3]): absent (0) in files written before modal derivatives existed.
        bases.append(ReducedBasis(modes, int(info[0]), float(info[1]), np.asarray(data[f"b{d}_spectrum"]), int(info[2]),
                                  norm, int(info[3]) if len(info) > 3 else 0))
        el = body.elastic
        elements = np.asarray(data[f"b{d}_elements"], dtype=np.int64)
        points = np.asarray(data[f"b{d}_points"], dtype=np.int64) if f"b{d}_points" in data else None
        if points is not None and np.all(points < 0):
            points = None  # whole elements
        grad, qweights = cubature_geometry(el, elements, points)
        cubs.append(
            Cubature(
                elements, np.asarray(data[f"b{d}_weights"], dtype=float), _element_rows(el.mesh.tets[elements], modes),
                grad, qweights, float(el.mu), float(el.lam), float(data[f"b{d}_cub_error"][0]), points,
            )
        )
    return build_reduced_system(system, bases, cubs)
