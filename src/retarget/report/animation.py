"""The animation of a plan: every URDF link's pose and every flexible part's deformed centre line per frame.

A :class:`PlanAnimation` is what the page (:mod:`retarget.report.page`), the video (:mod:`retarget.report.video`)
and the MCAP export (:mod:`retarget.report.mcap_export`) draw. :func:`build_plan_animation` computes it from a
plan's simulated states (reduced model: rigid bodies in absolute coordinates, each flexible part in reduced
coordinates ``z`` relative to its reference body, :mod:`retarget.sim.reduced.system`):

- a URDF link welded (fixed joints) to a simulated rigid body moves with it. The body frame is its centre of mass
  with world-parallel axes at the reference, so a link at reference pose ``(p₀, R₀)`` is at
  ``(c + R (p₀ − c₀), R R₀)`` when the body is at ``(c, R)``;
- a flexible part is drawn from its mesh nodes ``c_ref + R_ref (X̂⁰ + U z)``: the nodes are grouped in layers along
  the part's long axis, each layer's mean is a centre-line point (resampled to :data:`CENTRE_LINE_POINTS` points),
  and its radius is the largest distance of a rest node from that line;
- the tracked bodies' targets (their quasi-static poses) place the tracked links' visuals as ghosts.

The naive and optimized runs are the plan's own simulations (no new one); the ZVD run is simulated again from its
motor angles on the plan's grid (one forward run). Frames are decimated to ``fps`` (default 50 per second); the
tracked bodies' deviations keep the simulation's rate.

Saved as ``animation.npz`` beside ``trajectories.npz`` (:meth:`PlanAnimation.save`, :func:`load_animation`), so
``retarget view DIR`` redraws a report without the plan.
"""
from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.atomic import atomic_path
from retarget.errors import InputError, NotAvailableError, RetargetError

if TYPE_CHECKING:
    from yourdfpy import URDF

    from retarget.planning.variants import PlanResult
    from retarget.sim.reduced.system import ReducedSystem

__all__ = ["ANIMATION_FILE", "CENTRE_LINE_POINTS", "DEFAULT_VARIANTS", "LinkVisuals", "PlanAnimation", "UrdfLinks",
           "build_plan_animation", "link_visuals", "load_animation", "rotation_to_quaternion"]

#: File name of the animation in a report folder.
ANIMATION_FILE = "animation.npz"
#: Points per flexible part's centre line.
CENTRE_LINE_POINTS = 17
#: Variants animated by default, in panel order (those the plan has).
DEFAULT_VARIANTS: tuple[str, ...] = ("naive", "zvd", "optimized")
#: Labels of the variants on the page and in the video.
VARIANT_LABELS: dict[str, str] = {"naive": "naive playback", "speed_limited": "speed-limited input",
                                  "zv": "ZV shaped", "zvd": "ZVD shaped", "optimized": "optimized"}
_FORMAT = 1
_DEFAULT_COLOUR = (0.6, 0.6, 0.6, 1.0)


@dataclass(frozen=True, eq=False)
class LinkVisuals:
    """URDF visual primitives (boxes, cylinders, spheres; meshes are skipped), each attached to a link.

    Attributes:
        link: index into the animation's ``links`` per primitive (n,).
        kind: 0 box, 1 cylinder (along its local z), 2 sphere (n,).
        size: box edge lengths; cylinder (radius, radius, length); sphere (radius, radius, radius) (n, 3) [m].
        origin: the primitive's pose in its link frame (n, 4, 4) [m].
        rgba: colour (n, 4) in [0, 1].
    """

    link: NDArray[np.int64]
    kind: NDArray[np.int64]
    size: NDArray[np.float64]
    origin: NDArray[np.float64]
    rgba: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.kind)


@dataclass(frozen=True, eq=False)
class PlanAnimation:
    """The frames of a plan's simulated runs (see the module docstring).

    Attributes:
        robot: robot name or params YAML path, as the plan was given it.
        times: frame times (n_f,) [s] from the start of the motion.
        variants: the animated runs, e.g. ``("naive", "zvd", "optimized")`` (n_v).
        links: URDF links placed per frame (n_l); the root is among them, fixed.
        link_positions: link frame origins (n_v, n_f, n_l, 3) [m], world.
        link_quaternions: link frame orientations (n_v, n_f, n_l, 4) as (x, y, z, w).
        visuals: the links' visual primitives.
        parts: flexible parts (n_p).
        part_radii: drawing radius of each part (n_p,) [m].
        part_lines: deformed centre lines (n_v, n_f, n_p, n_c, 3) [m], world.
        tracked: tracked links (k).
        target_positions: the tracked bodies' target centres of mass (n_f, k, 3) [m].
        tracked_positions: their simulated centres of mass (n_v, n_f, k, 3) [m].
        ghost_links: indices into ``links`` of the links drawn at the targets (n_g,).
        ghost_positions, ghost_quaternions: their poses at the targets (n_f, n_g, 3) [m], (n_f, n_g, 4).
        deviation_times: the simulation grid (n_t,) [s].
        deviations: distance of each tracked body from its target on that grid (n_v, n_t, k) [m].
        metrics: per variant, ``peak_deviation_m`` and ``rms_deviation_m`` (max over tracked bodies, as the plan
            reports them).
        sources: per variant, where its states came from (the plan's run, or simulated again and how close); for a
            run left out because simulating it again failed, why.
    """

    robot: str
    times: NDArray[np.float64]
    variants: tuple[str, ...]
    links: tuple[str, ...]
    link_positions: NDArray[np.float32]
    link_quaternions: NDArray[np.float32]
    visuals: LinkVisuals
    parts: tuple[str, ...]
    part_radii: NDArray[np.float64]
    part_lines: NDArray[np.float32]
    tracked: tuple[str, ...]
    target_positions: NDArray[np.float32]
    tracked_positions: NDArray[np.float32]
    ghost_links: NDArray[np.int64]
    ghost_positions: NDArray[np.float32]
    ghost_quaternions: NDArray[np.float32]
    deviation_times: NDArray[np.float64]
    deviations: NDArray[np.float32]
    metrics: dict[str, dict[str, float]]
    sources: dict[str, str]

    @property
    def duration(self) -> float:
        """Length of the animation [s]."""
        return float(self.times[-1] - self.times[0])

    def variant(self, name: str) -> int:
        """Index of variant ``name``."""
        if name not in self.variants:
            raise InputError(f"the animation has no variant {name!r} (it has {list(self.variants)})")
        return self.variants.index(name)

    def select(self, names: Sequence[str]) -> PlanAnimation:
        """The animation of the runs ``names`` only, in that order.

        Raises:
            InputError: a run the animation lacks.
        """
        from dataclasses import replace

        index = [self.variant(n) for n in names]
        if not index:
            raise InputError("select at least one run of the animation")
        return replace(self, variants=tuple(names), link_positions=self.link_positions[index],
                       link_quaternions=self.link_quaternions[index], part_lines=self.part_lines[index],
                       tracked_positions=self.tracked_positions[index], deviations=self.deviations[index],
                       metrics={n: self.metrics[n] for n in names},
                       sources={n: self.sources[n] for n in names if n in self.sources})

    def extent_points(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Points (n, 3) [m] and radii (n,) [m] whose spheres hold everything drawn, over all frames and runs.

        The points are the link origins (each with its primitives' reach: the farthest corner of their bounding
        boxes), the flexible parts' centre lines (with their radii) and the targets.
        """
        reach = np.zeros(len(self.links))
        for link, kind, size, origin in zip(self.visuals.link, self.visuals.kind, self.visuals.size,
                                            self.visuals.origin):
            box = size if kind == 0 else np.array([2 * size[0], 2 * size[0], size[2] if kind == 1 else 2 * size[0]])
            extent = float(np.linalg.norm(origin[:3, 3])) + 0.5 * float(np.linalg.norm(box))
            reach[link] = max(reach[link], extent)
        links = self.link_positions.reshape(-1, len(self.links), 3).astype(float)
        lines = self.part_lines.reshape(-1, len(self.parts), self.part_lines.shape[-2], 3).astype(float)
        points = [links.reshape(-1, 3), lines.reshape(-1, 3), self.target_positions.reshape(-1, 3).astype(float)]
        radii = [np.broadcast_to(reach, links.shape[:2]).reshape(-1),
                 np.broadcast_to(self.part_radii[:, None], lines.shape[1:3])[None].repeat(len(lines), 0).reshape(-1),
                 np.zeros(self.target_positions.reshape(-1, 3).shape[0])]
        return np.concatenate(points), np.concatenate(radii)

    def bounds(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Lower and upper corners (3,) [m] of everything drawn, over all frames and variants."""
        points, radii = self.extent_points()
        return (points - radii[:, None]).min(axis=0), (points + radii[:, None]).max(axis=0)

    def save(self, path: str | Path) -> Path:
        """Write ``path`` (``.npz``) via a temporary name; returns it."""
        path = Path(path)
        meta = {"format": _FORMAT, "robot": self.robot, "variants": list(self.variants), "links": list(self.links),
                "parts": list(self.parts), "tracked": list(self.tracked), "metrics": self.metrics,
                "sources": self.sources}
        arrays = {"meta": np.array(json.dumps(meta)), "times": self.times, "link_positions": self.link_positions,
                  "link_quaternions": self.link_quaternions, "visual_link": self.visuals.link,
                  "visual_kind": self.visuals.kind, "visual_size": self.visuals.size,
                  "visual_origin": self.visuals.origin, "visual_rgba": self.visuals.rgba,
                  "part_radii": self.part_radii, "part_lines": self.part_lines,
                  "target_positions": self.target_positions, "tracked_positions": self.tracked_positions,
                  "ghost_links": self.ghost_links, "ghost_positions": self.ghost_positions,
                  "ghost_quaternions": self.ghost_quaternions, "deviation_times": self.deviation_times,
                  "deviations": self.deviations}
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
        return path


def load_animation(path: str | Path) -> PlanAnimation:
    """Read an ``animation.npz`` written by :meth:`PlanAnimation.save`.

    Raises:
        InputError: a missing or unreadable file, or one of another format.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no animation at {path}: `retarget plan --report DIR` writes {ANIMATION_FILE} into DIR")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays.pop("meta")))
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot read the animation {path}: {exc}") from exc
    if meta.get("format") != _FORMAT:
        raise InputError(f"{path}: animation format {meta.get('format')!r}, this version reads {_FORMAT}; rebuild "
                         "it with `retarget plan --report`")
    visuals = LinkVisuals(arrays.pop("visual_link"), arrays.pop("visual_kind"), arrays.pop("visual_size"),
                          arrays.pop("visual_origin"), arrays.pop("visual_rgba"))
    return PlanAnimation(robot=meta["robot"], variants=tuple(meta["variants"]), links=tuple(meta["links"]),
                         parts=tuple(meta["parts"]), tracked=tuple(meta["tracked"]), metrics=meta["metrics"],
                         sources=meta["sources"], visuals=visuals, **arrays)


def rotation_to_quaternion(rot: NDArray[np.float64]) -> NDArray[np.float64]:
    """Unit quaternions (..., 4) as (x, y, z, w) of rotation matrices (..., 3, 3)."""
    from scipy.spatial.transform import Rotation

    rot = np.asarray(rot, dtype=float)
    return Rotation.from_matrix(rot.reshape(-1, 3, 3)).as_quat().reshape(*rot.shape[:-2], 4)


# --- the robot's links and visuals --------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class UrdfLinks:
    """The URDF links the animation places.

    Attributes:
        names: link names (n_l).
        reference: their poses at zero joint values in the root frame (n_l, 4, 4) [m].
        body: the simulated rigid body each is welded to (None: the root, fixed).
        visuals: their visual primitives.
    """

    names: tuple[str, ...]
    reference: NDArray[np.float64]
    body: tuple[str | None, ...]
    visuals: LinkVisuals


def _load_urdf(robot: str | Path) -> URDF:
    """The robot's URDF by yourdfpy, found as the simulator finds it (beside the params YAML, in ``../urdf``, in the
    package's ``urdf/``; xacro expanded with the YAML's ``xacro_args``)."""
    import yourdfpy

    from retarget.model.library import resolve_robot, robot_config
    from retarget.model.loader import robot_urdf

    path = resolve_robot(robot)
    _, xml = robot_urdf(robot_config(path)["retarget"], path)
    return yourdfpy.URDF.load(io.StringIO(xml), build_scene_graph=True, load_meshes=False)


def link_visuals(robot: str | Path, bodies: Sequence[str], replaced: Sequence[str] = ()) -> UrdfLinks:
    """The URDF links that can be placed from the simulation, their reference poses, bodies and visuals.

    A link is placed when fixed joints weld it to one of ``bodies`` (itself included) or to the root; links that
    flexible parts replace (``replaced``), and links reached only through a moving joint without a body, are not.

    Args:
        robot: robot name or params YAML path.
        bodies: names of the simulated rigid bodies.
        replaced: URDF links replaced by flexible parts.
    """
    from retarget.model.library import robot_config
    from retarget.report.robot_render import _material_colours, _visual_colour

    urdf = _load_urdf(robot)
    section = robot_config(robot)["retarget"]
    root = section.get("root_link") or urdf.base_link
    urdf.update_cfg({name: 0.0 for name in urdf.actuated_joint_names})
    parent_joint = {j.child: j for j in urdf.robot.joints}
    known = set(bodies)
    skip = set(replaced)
    named = _material_colours(urdf)

    def welded_to(link: str) -> tuple[bool, str | None]:
        cur = link
        while True:
            if cur in known:
                return True, cur
            if cur == root:
                return True, None
            joint = parent_joint.get(cur)
            if joint is None or joint.type != "fixed" or cur in skip and cur != link:
                return False, None
            cur = joint.parent

    names, poses, owners = [], [], []
    v_link, v_kind, v_size, v_origin, v_rgba = [], [], [], [], []
    for link in urdf.robot.links:
        if link.name in skip:
            continue
        placed, body = welded_to(link.name)
        if not placed:
            continue
        index = len(names)
        names.append(link.name)
        poses.append(np.asarray(urdf.get_transform(link.name, root), dtype=float))
        owners.append(body)
        for visual in link.visuals:
            g = visual.geometry
            if g.box is not None:
                kind, size = 0, [float(s) for s in g.box.size]
            elif g.cylinder is not None:
                kind, size = 1, [float(g.cylinder.radius), float(g.cylinder.radius), float(g.cylinder.length)]
            elif g.sphere is not None:
                kind, size = 2, [float(g.sphere.radius)] * 3
            else:
                continue
            v_link.append(index)
            v_kind.append(kind)
            v_size.append(size)
            v_origin.append(visual.origin if visual.origin is not None else np.eye(4))
            v_rgba.append(_visual_colour(visual, named))
    visuals = LinkVisuals(np.array(v_link, dtype=np.int64), np.array(v_kind, dtype=np.int64),
                          np.array(v_size, dtype=float).reshape(-1, 3),
                          np.array(v_origin, dtype=float).reshape(-1, 4, 4),
                          np.array(v_rgba, dtype=float).reshape(-1, 4))
    return UrdfLinks(tuple(names), np.array(poses).reshape(-1, 4, 4), tuple(owners), visuals)


# --- flexible parts' centre lines -------------------------------------------------------------------------------

def _centre_line_operator(rest: NDArray[np.float64], points: int = CENTRE_LINE_POINTS
                          ) -> tuple[NDArray[np.float64], float]:
    """A (points, N) matrix taking node positions (N, 3) to centre-line points (points, 3), and the part's radius.

    Nodes are grouped in layers along the principal axis of the rest nodes ``rest`` (N, 3) [m] (the layers of a
    generated mesh; 32 equal bins for a mesh with more distinct positions); layer means are resampled linearly to
    ``points`` points from one end to the other.
    """
    centred = rest - rest.mean(axis=0)
    axis = np.linalg.svd(centred, full_matrices=False)[2][0]
    s = centred @ axis
    length = float(np.ptp(s))
    keys = np.round(s / max(length, 1e-12) * 1e5).astype(np.int64)
    levels, layer = np.unique(keys, return_inverse=True)
    if len(levels) > 200 or len(levels) < 2:
        layer = np.minimum(((s - s.min()) / max(length, 1e-12) * 32).astype(np.int64), 31)
        levels, layer = np.unique(layer, return_inverse=True)
    n_layers = len(levels)
    average = np.zeros((n_layers, len(rest)))
    average[layer, np.arange(len(rest))] = 1.0
    average /= average.sum(axis=1, keepdims=True)
    s_layer = average @ s
    target = np.linspace(s_layer[0], s_layer[-1], points)
    interp = np.zeros((points, n_layers))
    for p, value in enumerate(target):
        j = int(np.clip(np.searchsorted(s_layer, value) - 1, 0, n_layers - 2))
        w = (value - s_layer[j]) / (s_layer[j + 1] - s_layer[j])
        interp[p, j], interp[p, j + 1] = 1.0 - w, w
    centres = average @ rest
    offset = rest - centres[layer]
    radial = offset - np.outer(offset @ axis, axis)
    radius = float(np.max(np.linalg.norm(radial, axis=1))) if len(rest) else 0.0
    return interp @ average, radius


# --- states of the plan's runs ----------------------------------------------------------------------------------

def _variant_states(result: PlanResult, name: str, progress: Callable[[int, int], None] | None
                    ) -> tuple[NDArray[np.float64], str]:
    """The simulated states (n_t, n_S) of variant ``name``, and where they came from."""
    from retarget.optimize.adjoint import rollout
    from retarget.planning.variants import start_of
    from retarget.sim.motors import SplineMotors

    pp = result.pp
    variant = result.variants[name]
    poses = pp.problem.poses
    for evaluation in (result.optimization.best, result.optimization.initial, result.naive_evaluation):
        if evaluation is None:
            continue
        states = np.asarray(evaluation.rollout.matrix)
        if states.shape[0] == variant.positions.shape[0] and np.array_equal(poses.positions(states),
                                                                              variant.positions):
            return states, "the plan's simulation"
    prob = pp.problem
    run = rollout(prob.engine, start_of(prob, variant.angles[0]), SplineMotors(pp.targets.times, variant.angles),
                  prob.dt, prob.n_steps, progress)
    gap = float(np.max(np.abs(poses.positions(run.matrix) - variant.positions)))
    return np.asarray(run.matrix), f"simulated again from its motor angles (tracked bodies within {gap:.1e} m)"


def build_plan_animation(result: PlanResult, robot: str | Path, variants: Sequence[str] = DEFAULT_VARIANTS,
                         fps: float = 50.0, progress: Callable[[str, int, int], None] | None = None
                         ) -> PlanAnimation:
    """The animation of a :class:`retarget.planning.variants.PlanResult` (module docstring).

    Args:
        result: the plan.
        robot: the robot name or params YAML path the plan was made for.
        variants: runs to animate, in panel order; those the plan lacks are left out.
        fps: frames per second kept from the simulation grid (at most its rate).
        progress: ``progress(stage, done, total)`` while a run is simulated again.

    Raises:
        NotAvailableError: the plan ran on a model other than the reduced one.
        InputError: none of ``variants`` is in the plan, or ``fps`` is not positive.
    """
    from retarget.sim.reduced.system import ReducedSystem
    from retarget.sim.rotation import rotation_matrix

    if not fps > 0:
        raise InputError(f"animation frame rate must be positive, got {fps}")
    pp = result.pp
    system = getattr(pp.problem.engine, "system", None)
    if not isinstance(system, ReducedSystem):
        raise NotAvailableError("the animation draws plans on the reduced model only (this plan's engine is "
                                f"{type(pp.problem.engine).__name__})")
    names = [v for v in variants if v in result.variants]
    if not names:
        raise InputError(f"the plan has none of the variants {list(variants)} (it has {list(result.variants)})")
    times = np.asarray(pp.targets.times, dtype=float)
    stride = max(1, round(1.0 / (fps * float(pp.problem.dt))))
    frames = np.arange(0, len(times), stride)
    if frames[-1] != len(times) - 1:
        frames = np.append(frames, len(times) - 1)

    from retarget.model.library import robot_config

    flex_cfg = {str(p.get("name")): str(p.get("link")) for p in robot_config(robot)["retarget"].get("flexible_parts")
                or []}
    rigid_names = [b.name for b in system.rigid]
    urdf = link_visuals(robot, rigid_names, list(flex_cfg.values()))
    body_index = np.array([-1 if b is None else rigid_names.index(b) for b in urdf.body])
    com0 = np.array([b.reference_com for b in system.rigid])
    operators = [_centre_line_operator(np.asarray(b.rest_local) + com0[b.reference]) for b in system.bodies]

    tracked = tuple(pp.problem.tracking.links)
    tracked_body = [rigid_names.index(link) for link in tracked]
    # A run that fails to simulate again (only ZVD's is simulated again) is left out, its reason kept in sources.
    from retarget.sim.errors import SimulationError

    runs, skipped = {}, {}
    for name in names:
        bar = None if progress is None else (lambda k, n, s=f"animation: simulating {name}": progress(s, k, n))
        try:
            runs[name] = _variant_states(result, name, bar)
        except SimulationError as exc:
            skipped[name] = f"not animated: simulating it again failed ({exc})"
    names = list(runs)
    if not names:
        raise RetargetError(f"no run of the plan could be animated: {skipped}")
    n_v, n_f, n_l = len(names), len(frames), len(urdf.names)
    link_pos = np.zeros((n_v, n_f, n_l, 3), dtype=np.float32)
    link_quat = np.zeros((n_v, n_f, n_l, 4), dtype=np.float32)
    lines = np.zeros((n_v, n_f, len(system.bodies), CENTRE_LINE_POINTS, 3), dtype=np.float32)
    tracked_pos = np.zeros((n_v, n_f, len(tracked), 3), dtype=np.float32)
    deviations = np.zeros((n_v, len(times), len(tracked)), dtype=np.float32)
    sources, metrics = dict(skipped), {}
    for v, name in enumerate(names):
        states, sources[name] = runs[name]
        s = states[frames]
        centres, rotations = _rigid_poses(s, len(rigid_names), rotation_matrix)
        pos, rot = _link_poses(urdf, body_index, com0, centres, rotations)
        link_pos[v], link_quat[v] = pos, rotation_to_quaternion(rot)
        lines[v] = _part_lines(system, [operator for operator, _ in operators], s, centres, rotations)
        positions = np.asarray(result.variants[name].positions)
        tracked_pos[v] = positions[frames]
        deviations[v] = np.linalg.norm(positions - pp.targets.positions, axis=-1)
        metrics[name] = {k: float(result.variants[name].metrics[k]) for k in ("peak_deviation_m", "rms_deviation_m")}

    ghost = np.array([i for i, b in enumerate(urdf.body) if b in tracked], dtype=np.int64)
    g_pos, g_rot = _target_link_poses(result, system, urdf, body_index, com0, tracked_body, frames)
    return PlanAnimation(
        robot=str(robot), times=times[frames], variants=tuple(names), links=urdf.names,
        link_positions=link_pos, link_quaternions=link_quat, visuals=urdf.visuals,
        parts=tuple(b.name for b in system.bodies), part_radii=np.array([r for _, r in operators]),
        part_lines=lines, tracked=tracked, target_positions=np.asarray(pp.targets.positions)[frames].astype(np.float32),
        tracked_positions=tracked_pos, ghost_links=ghost, ghost_positions=g_pos[:, ghost].astype(np.float32),
        ghost_quaternions=rotation_to_quaternion(g_rot[:, ghost]).astype(np.float32), deviation_times=times,
        deviations=deviations, metrics=metrics, sources=sources)


def _part_lines(system: ReducedSystem, operators: Sequence[NDArray[np.float64]], states: NDArray[np.float64],
                centres: NDArray[np.float64], rotations: NDArray[np.float64]) -> NDArray[np.float64]:
    """The flexible parts' deformed centre lines (n_f, n_parts, :data:`CENTRE_LINE_POINTS`, 3) [m] in ``states``
    (n_f, n_S), from their centre-line ``operators`` (:func:`_centre_line_operator`) and the rigid bodies' centres
    (n_f, n_b, 3) [m] and rotations (n_f, n_b, 3, 3)."""
    lines = np.zeros((len(states), len(system.bodies), CENTRE_LINE_POINTS, 3))
    for d, body in enumerate(system.bodies):
        operator = operators[d]
        z = states[:, system.z_slice_u(d)]
        local = operator @ np.asarray(body.rest_local)  # (n_c, 3)
        modes = np.einsum("pn,ndr->pdr", operator, np.asarray(body.basis.modes).reshape(-1, 3, body.size))
        deformed = local[None] + np.einsum("pdr,fr->fpd", modes, z)
        lines[:, d] = centres[:, body.reference, None, :] + np.einsum(
            "fij,fpj->fpi", rotations[:, body.reference], deformed)
    return lines


def _target_link_poses(result: PlanResult, system: ReducedSystem, urdf: UrdfLinks, body_index: NDArray[np.int64],
                       com0: NDArray[np.float64], tracked_body: Sequence[int], frames: NDArray[np.int64]
                       ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Every link's position (n_f, n_l, 3) [m] and rotation (n_f, n_l, 3, 3) with the tracked bodies at their
    targets (the others at the origin, unrotated) on ``frames``: the ghosts' poses."""
    pp = result.pp
    n_f, n_rigid = len(frames), len(system.rigid)
    target_rot = np.asarray(pp.targets.orientations)[frames]  # link frames (n_f, k, 3, 3)
    body_rot = np.einsum("fkij,klj->fkil", target_rot,
                         np.array([system.rigid[b].frame_rotation for b in tracked_body]).reshape(-1, 3, 3))
    centres = np.zeros((n_f, n_rigid, 3))
    rotations = np.tile(np.eye(3), (n_f, n_rigid, 1, 1))
    centres[:, tracked_body] = np.asarray(pp.targets.positions)[frames]
    rotations[:, tracked_body] = body_rot
    return _link_poses(urdf, body_index, com0, centres, rotations)


def _rigid_poses(states: NDArray[np.float64], n_rigid: int, rotation_matrix: Callable[[NDArray], NDArray]
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Centres of mass (n_f, n_b, 3) [m] and rotations (n_f, n_b, 3, 3) of the rigid bodies in ``states``."""
    u = states[:, : 7 * n_rigid].reshape(len(states), n_rigid, 7)
    return u[..., :3], rotation_matrix(u[..., 3:])


def _link_poses(urdf: UrdfLinks, body_index: NDArray[np.int64], com0: NDArray[np.float64],
                centres: NDArray[np.float64], rotations: NDArray[np.float64]
                ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Link origins (n_f, n_l, 3) [m] and orientations (n_f, n_l, 3, 3) from body poses (module docstring)."""
    n_f = len(centres)
    ref = urdf.reference
    pos = np.broadcast_to(ref[:, :3, 3], (n_f, len(ref), 3)).copy()
    rot = np.broadcast_to(ref[:, :3, :3], (n_f, len(ref), 3, 3)).copy()
    moving = np.flatnonzero(body_index >= 0)
    if len(moving):
        b = body_index[moving]
        r_b = rotations[:, b]
        pos[:, moving] = centres[:, b] + np.einsum("flij,lj->fli", r_b, ref[moving, :3, 3] - com0[b])
        rot[:, moving] = np.einsum("flij,ljk->flik", r_b, ref[moving, :3, :3])
    return pos, rot
