"""Plans that learn from what the robot did: ``retarget refine``.

A plan is optimized on a model; the robot differs from it (its rod's stiffness and damping, its servo's gains, a
latency). :func:`refine` takes the plan that was played (CURRENT), a motion-capture take of what the robot did
while it played (a Motive CSV export or a rosbag2 of pose topics) and returns the next plan (NEXT): a model-based
learning step that applies the planner's own sensitivities to the *measured* deviation.

1. **The plan's parameters.** CURRENT's samples are fitted in the planning problem's parametrization (the same
   knots and end conditions as ``retarget plan``; its first pose held), which must reproduce them to
   :attr:`RefineOptions.fit_tolerance_rad` — otherwise CURRENT is not a plan of this input (refused).
2. **The model's prediction** of CURRENT (and of the input played as authored, the naive playback) on the planning
   grid ``t_n = n Δt``.
3. **Alignment** of the take onto the prediction (:func:`align_take`): one rigid transform mocap → robot for every
   tracked body (Kabsch over every tracked sample; before the plan the robot rests at its first pose, after it at
   its last) and a time offset: where the take leaves the rest it starts in, put on the prediction's departure
   (the onset; else, for a take that starts moving, the offset of the closest fit), or the motion's start on the
   take's clock: given, or stored by the recording (a bag of ``retarget play --record``, whose mocap frames and
   commands share the ROS graph's clock). A pure delay of the whole motion cannot be told from a clock offset
   without a shared clock, so it is measured only with the start on that clock.
4. **Refusals** (:class:`RefineRefused`, nothing is written): a plan or take of another robot or motion, a take
   that does not follow the plan (alignment residual over :attr:`RefineOptions.max_residual_ratio` of the
   prediction's travel), more than :attr:`RefineOptions.max_missing` of its frames missing, a body lost at the
   extremes of its swing or flat-lined (clipped, saturated), a take that matches the naive playback rather than
   CURRENT, a take already used by an earlier trial.
5. **The measured deviation** ``e_n = c_meas(t_n) − c̄(t_n)`` from the planner's intent (the quasi-static targets),
   the aligned take resampled on the grid (cubic), gaps longer than :data:`MAX_GAP_FRAMES` frames left out.
6. **The re-fitted model** (:func:`refit_model`): the flexible parts' stiffness and the servos' P gain scaled so
   that the model's run of CURRENT comes closest to the take; used when it explains the take clearly better (a
   model with the right frequencies has the right sensitivities), and the take aligned again onto it.
7. **The learning step** (:func:`learning_step`): with ``J`` the exact tangent-linear sensitivities of the tracked
   positions to the B-spline parameters at CURRENT (:func:`~retarget.optimize.gauss_newton.tangent_least_squares`,
   weighted as the planner's tracking term) and the plan's own regularizers and torque penalty::

       min_Δx ½|W^½ (e + J Δx)|² + ½|r_τ + J_τ Δx|² + R(x + Δx) + ½ μ Δxᵀ diag(JᵀJ) Δx
       subject to |Δx|_∞ ≤ r (the trust region [rad of control points]) and the joint limits,

   solved exactly (a bounded least-squares problem). The model then simulates NEXT: a step whose predicted
   objective (the measurement plus the model's change) does not fall, that asks more torque than
   ``(1 − margin)`` × stall on the servo's torque–speed line (or more than CURRENT did), or leaves a speed limit,
   is halved until it holds.
8. **The trend** (:class:`History`, ``NEXT.history.json``): each trial's measured peak, RMS and ring-out. A peak
   above the best earlier trial's steps again from the best trial's plan and take with half the radius (``rose``
   when more than :attr:`RefineOptions.plateau` above it, else ``stopped improving``): the loop never steps on
   from a plan that measured worse than its best. A peak that fell by less than the plateau since the last trial
   says the loop stopped improving and halves the trust region.
9. **The route**: the learning step, on the re-fitted model when it is used; a ring-out whose frequency still
   differs from the model's by more than :attr:`RefineOptions.refit_frequency_tolerance` says the model is off and
   that re-fitting the materials (``retarget fit``) and the servo (``retarget fit-servo``) and planning again is
   advised (the step then takes half the trust region).

:func:`refine` takes arrays and paths and returns a typed :class:`Refinement`; :func:`write_refinement` writes NEXT,
its JointTrajectory YAML and its history atomically. ``retarget refine`` and a ROS node are shells over both.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import Enum
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy.interpolate import make_interp_spline
from scipy.optimize import least_squares, lsq_linear, minimize_scalar

from retarget.atomic import atomic_path
from retarget.errors import InputError
from retarget.mocap.bags import bag_info, pose_topic, read_pose_series
from retarget.mocap.errors import MocapError
from retarget.mocap.motive_csv import MotiveTake, read_motive_csv
from retarget.mocap.onset import crossing_time, departure
from retarget.motion.csv_format import read_comments
from retarget.motion.io import load_motion, save_motion
from retarget.motion.limits import check_plan_input
from retarget.motion.motion import Motion
from retarget.optimize.adjoint import AdjointProblem, Evaluation, evaluate
from retarget.optimize.bspline import ProfileParametrization
from retarget.optimize.errors import OptimizeError, ShapingError
from retarget.optimize.gauss_newton import parameter_hessian, tangent_least_squares
from retarget.optimize.limits import MotorLimits, TorquePenalty, check_profile_limits
from retarget.optimize.problem import PlanProblem, build_plan_problem, limits_for, motion_stop_time
from retarget.optimize.shaping import identify_from_trajectory
from retarget.optimize.weights import merge_tracked_weights, parse_tracked_bodies
from retarget.planning.model import planning_model
from retarget.planning.options import PlanOptions, RefineOptions
from retarget.planning.variants import (
    PLAN_SETTINGS_PREFIX,
    comment_json,
    declared_servos,
    declared_with,
    motion_digest,
    plan_settings,
    planned_servos,
    servo_mismatches,
)
from retarget.planning.verification import commanded_stop_time, gate_model
from retarget.sim.adapters import planner_engine
from retarget.sim.engine import Engine
from retarget.sim.errors import SimulationError
from retarget.sim.reduced.system import with_stiffness_scale

__all__ = [
    "HISTORY_SUFFIX",
    "body_pairs",
    "Decision",
    "History",
    "LearningQuadratic",
    "LearningStep",
    "ModelFit",
    "PlanFile",
    "RefineContext",
    "RefineOptions",
    "RefineRefused",
    "Refinement",
    "Refusal",
    "Take",
    "TakeAlignment",
    "TrialMeasurement",
    "TrialRecord",
    "align_take",
    "history_path",
    "learning_quadratic",
    "learning_step",
    "plan_parameters",
    "read_plan",
    "read_take",
    "refine",
    "refine_context",
    "refit_model",
    "scaled_problem",
    "write_refinement",
]

#: The history file of a plan: ``NEXT.csv`` → ``NEXT.history.json`` beside it.
HISTORY_SUFFIX = ".history.json"

#: Gaps of more than this many frames in a take are not interpolated across: the grid points in them are left out.
MAX_GAP_FRAMES = 3

#: The alignment's coarse offset grid [s] (refined to 1e-5 s within 1.5 steps).
OFFSET_STEP_S = 0.01

#: The onset of a take: its body leaves the rest it stands in before the plan moves by at least this [m].
ONSET_MIN_M = 2e-3
ONSET_REST_S = 0.15
#: The prediction has left its first pose once it is this far from it [m]: the rest the onset is measured from is
#: the take's over the ONSET_REST_S before that instant.
DEPARTURE_M = 1e-4
#: ... and by this fraction of the prediction's largest distance from its first pose.
ONSET_FRACTION = 0.05

#: A coordinate exactly constant for this many frames while the body moves is a saturated (frozen) stream.
FLAT_RUN_FRAMES = 6


class Refusal(str, Enum):
    """Why a take or a plan is refused."""

    WRONG_ROBOT = "wrong robot"
    WRONG_MOTION = "wrong motion"
    MISALIGNED = "misaligned"
    MISSING_FRAMES = "frames missing"
    CLIPPED = "clipped"
    NAIVE_TAKE = "naive take"
    REUSED_TAKE = "take already used"


#: Refusals of a take that another play of the same plan may not meet: the clock or the motion capture of that one
#: run (a twin or a host running behind, frames dropped, a marker frozen), unlike a plan or take of another robot or
#: motion, of the naive playback or used before (``retarget tune --replays``).
REPLAYABLE: frozenset[Refusal] = frozenset({Refusal.MISALIGNED, Refusal.MISSING_FRAMES, Refusal.CLIPPED})


class RefineRefused(OptimizeError, InputError):
    """A plan or take that ``retarget refine`` does not learn from; nothing is written.

    Attributes:
        reason: the :class:`Refusal`.
        details: the offending values, by name.
    """

    def __init__(self, reason: Refusal, message: str, **details: object) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.details = details


# -- inputs -------------------------------------------------------------------------------------------------------


def _file_digest(path: Path, name: str | None = None) -> str:
    """SHA-256 of a file, or of a folder's files (a bag) in name order; ``name``: the file's name to hash in place
    of its own (a file written under a temporary name, digested as the name it is renamed to)."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for p in files:
        digest.update((name if name is not None and not path.is_dir() else p.name).encode())
        digest.update(p.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True, eq=False)
class PlanFile:
    """A plan as ``retarget plan --out`` (or ``retarget refine --out``) wrote it.

    Attributes:
        path: the file. motion: its samples [s], [rad]. comments: its comment lines (CSV; else empty).
        sha256: the file's digest.
    """

    path: Path
    motion: Motion
    comments: tuple[str, ...]
    sha256: str

    def settings(self) -> dict[str, object] | None:
        """The plan settings it records (:data:`~retarget.planning.variants.PLAN_SETTINGS_PREFIX`), or None."""
        return comment_json(self.comments, PLAN_SETTINGS_PREFIX)


def body_pairs(robot: str | Path, bodies: Sequence[str] | None, option: str = "bodies take") -> list[tuple[str, str]]:
    """``LINK=NAME`` entries as (tracked body, its name in the take) pairs; none given: the robot's tracked bodies
    under their own names.

    Raises:
        InputError: an entry that is not ``LINK=NAME`` (the message starts with ``option``, e.g. ``--body takes``).
    """
    if bodies:
        pairs = []
        for text in bodies:
            link, sep, name = str(text).partition("=")
            if not sep or not link.strip() or not name.strip():
                raise InputError(f"{option} LINK=NAME (a tracked body and its name in the take), got {text!r}")
            pairs.append((link.strip(), name.strip()))
        return pairs
    from retarget.model.library import resolve_robot
    from retarget.model.loader import read_robot_yaml

    path = Path(robot) if Path(str(robot)).is_file() else resolve_robot(str(robot))
    return [(b.link, b.link) for b in parse_tracked_bodies(read_robot_yaml(path).get("tracked_bodies"))]


def read_plan(path: str | Path) -> PlanFile:
    """Read a plan file (any motion format; a CSV's comment lines are kept).

    Raises:
        InputError: no such file, or a file that is not a motion.
    """

    p = Path(path)
    if not p.is_file():
        raise InputError(f"plan {p}: no such file")
    motion = load_motion(p)
    comments = tuple(read_comments(p)) if p.suffix.lower() == ".csv" else ()
    return PlanFile(p, motion, comments, _file_digest(p))


@dataclass(frozen=True, eq=False)
class Take:
    """What the motion capture recorded of the tracked bodies, in its own frame and clock.

    Attributes:
        time_s: (n,) [s], increasing, any origin.
        positions_m: (n, k, 3) [m]; NaN where a body was not tracked.
        links: the robot's tracked links, one per body (k,).
        names: the bodies' names in the take (rigid bodies, markers or topics) (k,).
        rate_hz: the capture rate [Hz].
        source: the file. sha256: its digest.
        recorded_start_s: the instant the played plan started, on the take's clock [s], when the recording stored
            it (a bag of ``retarget play --record``: :data:`~retarget.mocap.bags.MOTION_START_KEY`); else None.
    """

    time_s: NDArray[np.float64]
    positions_m: NDArray[np.float64]
    links: tuple[str, ...]
    names: tuple[str, ...]
    rate_hz: float
    source: str
    sha256: str
    recorded_start_s: float | None = None

    @property
    def tracked(self) -> NDArray[np.bool_]:
        """Per frame and body, whether it was tracked (n, k)."""
        return np.isfinite(self.positions_m).all(axis=2)


def _csv_body(take: MotiveTake, name: str, path: Path) -> NDArray[np.float64]:
    """A body's positions (n, 3) [m] in a Motive take: the rigid body, else the marker of that name, else the
    centroid of the rigid body's markers (``name_1``, ``name:Marker1``; NaN where any is missing)."""
    if name in take.rigid_bodies:
        track = take.rigid_bodies[name]
        return np.where(track.tracked[:, None], track.position_m, np.nan)
    if name in take.markers:
        return np.asarray(take.markers[name].position_m, dtype=float)
    members = [m.position_m for key, m in take.markers.items() if key.startswith((name + "_", name + ":"))]
    if members:
        return np.mean(np.stack(members), axis=0)  # NaN where any marker is
    raise RefineRefused(Refusal.WRONG_ROBOT, f"the take {path} has no rigid body or marker {name!r} (rigid bodies: "
                        f"{sorted(take.rigid_bodies) or 'none'}; markers: {sorted(take.markers)[:8] or 'none'}): a "
                        "take of another robot, or give --body LINK=NAME with the take's name", body=name)


def read_take(path: str | Path, bodies: Sequence[tuple[str, str]]) -> Take:
    """Read the tracked bodies from a Motive CSV export or a rosbag2 of PoseStamped topics.

    Args:
        path: a Motive CSV export (rigid bodies and/or markers, any unit Motive writes) or a bag (folder,
            ``.mcap``, ``.db3``).
        bodies: ``(link, name)`` per tracked body: the robot link and its name in the take (a rigid body or marker
            of the export; in a bag, the body of topic ``/mocap/<name>/pose``, or the topic itself when ``name``
            starts with ``/``).

    Raises:
        InputError: no such file, an unreadable export or bag; RefineRefused: a body the take does not have.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"take {p}: no such file or bag")
    if not bodies:
        raise InputError("no tracked body: give --body LINK=RIGIDBODY")
    recorded_start = None
    try:
        if p.suffix.lower() == ".csv":
            take = read_motive_csv(p)
            time_s = np.asarray(take.time_s, dtype=float)
            positions = np.stack([_csv_body(take, name, p) for _, name in bodies], axis=1)
            rate = float(take.header.export_frame_rate_hz)
        else:
            time_s, positions, recorded_start = _bag_bodies(p, [name for _, name in bodies])
            rate = float("nan")
    except MocapError as exc:
        raise InputError(f"take {p}: {exc}") from None
    order = np.argsort(time_s, kind="stable")
    time_s, positions = time_s[order], positions[order]
    if len(time_s) < 2:
        raise InputError(f"take {p}: fewer than two frames")
    if not (rate > 0 and math.isfinite(rate)):
        rate = 1.0 / float(np.median(np.diff(time_s)))
    return Take(time_s, positions, tuple(link for link, _ in bodies), tuple(name for _, name in bodies), rate,
                str(p), _file_digest(p), recorded_start)


def _bag_bodies(path: Path, names: Sequence[str]) -> tuple[NDArray[np.float64], NDArray[np.float64], float | None]:
    """Stamps of the first body's poses and every body's positions at them (others matched to the nearest pose
    within half a period, NaN beyond), and the motion start the bag recorded [s] (None: none)."""
    info = bag_info(path)
    topics = {t.name for t in info.topics}
    series = []
    for name in names:
        topic = name if name.startswith("/") else pose_topic(name)
        if topic not in topics:
            raise RefineRefused(Refusal.WRONG_ROBOT, f"the bag {path} has no topic {topic!r} (it has "
                                f"{sorted(topics)}): a take of another robot, or give --body LINK=/TOPIC", body=name)
        series.append(read_pose_series(path, topic))
    time_s = np.asarray(series[0].time_s, dtype=float)
    period = float(np.median(np.diff(time_s))) if len(time_s) > 1 else 0.0
    columns = []
    for s in series:
        t, pos = np.asarray(s.time_s, dtype=float), np.asarray(s.position_m, dtype=float)
        idx = np.clip(np.searchsorted(t, time_s), 1, max(len(t) - 1, 1))
        near = np.where(np.abs(t[idx - 1] - time_s) <= np.abs(t[idx] - time_s), idx - 1, idx)
        out = pos[near].copy()
        out[np.abs(t[near] - time_s) > 0.5 * period + 1e-9] = np.nan
        columns.append(out)
    return time_s, np.stack(columns, axis=1), info.motion_start_s


# -- alignment ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TakeAlignment:
    """How a take maps onto the plan's grid.

    Attributes:
        offset_s: ``t_plan = t_take − offset_s`` [s].
        rotation: mocap → robot (3, 3). translation: (3,) [m]: ``x_robot = R x_mocap + t``.
        residual_rms_m: RMS distance of the aligned take to the prediction of CURRENT within the plan [m].
        travel_rms_m: the prediction's RMS distance to its mean within the plan [m] (the scale of the residual).
        closest_rms_m: the take's closest fit onto the prediction of CURRENT, at any time offset [m].
        naive_residual_rms_m: its closest fit onto the naive playback's prediction [m] (None: not checked).
        missing_fraction: frames of the plan's span within the take that miss a body [-].
        coverage: the fraction of the plan's moving span the take covers [-].
        offset_source: ``onset`` (the take's departure from its first rest on the prediction's), ``searched`` (the
            smallest residual: a take that starts moving), ``given`` (:attr:`RefineOptions.motion_start_s`),
            ``recorded`` (the start the take's recording stored, :attr:`Take.recorded_start_s`) or ``take clock``
            (an offset within :attr:`RefineOptions.clock_snap_s` of zero, taken as zero).
    """

    offset_s: float
    rotation: NDArray[np.float64]
    translation: NDArray[np.float64]
    residual_rms_m: float
    travel_rms_m: float
    closest_rms_m: float
    naive_residual_rms_m: float | None
    missing_fraction: float
    coverage: float
    offset_source: str = "searched"

    @property
    def offset_given(self) -> bool:
        """The offset was given, recorded with the take, or read from the take's own clock."""
        return self.offset_source in ("given", "recorded", "take clock")

    @property
    def residual_ratio(self) -> float:
        """``residual_rms_m / travel_rms_m``."""
        return self.residual_rms_m / max(self.travel_rms_m, 1e-12)

    def to_json(self) -> dict[str, object]:
        """Plain JSON values (SI)."""
        return {"offset_s": self.offset_s, "rotation": self.rotation.tolist(), "translation_m":
                self.translation.tolist(), "residual_rms_m": self.residual_rms_m, "travel_rms_m": self.travel_rms_m,
                "closest_rms_m": self.closest_rms_m,
                "residual_ratio": self.residual_ratio, "naive_residual_rms_m": self.naive_residual_rms_m,
                "missing_fraction": self.missing_fraction, "coverage": self.coverage,
                "offset_source": self.offset_source}


def _kabsch(src: NDArray[np.float64], dst: NDArray[np.float64]) -> tuple[NDArray, NDArray, float]:
    """``(R, t, rms)`` of the proper rigid transform minimizing ``Σ |R s_i + t − d_i|²``."""
    cs, cd = src.mean(axis=0), dst.mean(axis=0)
    u, _, vt = np.linalg.svd((src - cs).T @ (dst - cd))
    sign = np.sign(np.linalg.det(vt.T @ u.T)) or 1.0
    rot = vt.T @ np.diag([1.0, 1.0, sign]) @ u.T
    trans = cd - rot @ cs
    return rot, trans, float(np.sqrt(np.mean(np.sum((src @ rot.T + trans - dst) ** 2, axis=1))))


class _Points:
    """A take's tracked samples flattened over its bodies, and the prediction sampled at their times."""

    def __init__(self, take: Take, times: NDArray[np.float64], predicted: NDArray[np.float64]) -> None:
        tracked = take.tracked
        self.time = np.concatenate([take.time_s[tracked[:, j]] for j in range(len(take.links))])
        self.body = np.concatenate([np.full(int(tracked[:, j].sum()), j) for j in range(len(take.links))])
        self.position = np.concatenate([take.positions_m[tracked[:, j], j] for j in range(len(take.links))])
        self.times, self.predicted = times, predicted

    def at(self, offset: float, inside_only: bool = False) -> tuple[NDArray, NDArray]:
        """The take's points and the prediction at their plan times (held before and after the plan)."""
        t = self.time - offset
        keep = (t >= self.times[0]) & (t <= self.times[-1]) if inside_only else np.ones(len(t), dtype=bool)
        dst = np.empty((int(keep.sum()), 3))
        for j in range(self.predicted.shape[1]):
            mine = self.body[keep] == j
            for a in range(3):
                dst[mine, a] = np.interp(t[keep][mine], self.times, self.predicted[:, j, a])
        return self.position[keep], dst

    def residual(self, offset: float) -> float:
        src, dst = self.at(offset)
        return _kabsch(src, dst)[2] if len(src) >= 4 else math.inf


def _best_offset(points: _Points, take: Take, duration: float) -> float:
    """The offset of the smallest rigid-fit residual: a scan at :data:`OFFSET_STEP_S`, then refined."""

    lo, hi = float(take.time_s[0]) - duration, float(take.time_s[-1])
    grid = np.arange(lo, hi + OFFSET_STEP_S, OFFSET_STEP_S)
    scores = np.array([points.residual(o) for o in grid])
    best = float(grid[int(np.argmin(scores))])
    res = minimize_scalar(lambda d: points.residual(best + d), bounds=(-1.5 * OFFSET_STEP_S, 1.5 * OFFSET_STEP_S),
                          method="bounded", options={"xatol": 1e-5})
    return best + float(res.x) if float(res.fun) <= float(scores.min()) else best


def _noise(values: NDArray[np.float64]) -> float:
    """Per-axis noise std of evenly sampled positions (n, 3) from their fourth differences (robust; NaN rows
    skipped) [m]: white noise σ gives ``√70 σ`` there, a smooth motion almost nothing."""
    d4 = values[4:] - 4 * values[3:-1] + 6 * values[2:-2] - 4 * values[1:-3] + values[:-4]
    d4 = d4[np.isfinite(d4).all(axis=1)]
    if len(d4) < 10:
        return 0.0
    return float(np.mean(np.median(np.abs(d4 - np.median(d4, axis=0)), axis=0)) * 1.4826 / math.sqrt(70.0))


def _onset_offset(take: Take, times: NDArray[np.float64], predicted: NDArray[np.float64]) -> float | None:
    """The offset that puts the take's onset — where its body first leaves the rest it starts in by
    ``max(ONSET_MIN_M, 8 σ, ONSET_FRACTION × reach)`` for three frames — on the prediction's (the same distance from
    its first pose); None when the take does not start at rest for :data:`ONSET_REST_S` or the prediction never
    moves that far.

    The rest is read twice: from the take's first :data:`ONSET_REST_S` to find the onset, then from the
    :data:`ONSET_REST_S` before the plan starts moving (the onset less the prediction's lead from its departure,
    :data:`DEPARTURE_M`, to its crossing), where the crossing is measured from. A take that begins while the robot
    still rings from the move to the plan's first pose reads its first rest millimetres off the pose the plan
    starts from, which moves the crossing by milliseconds and the measured peak with it (docs/refine.md)."""
    j = int(np.argmax([_travel_rms(predicted[:, [i]]) for i in range(predicted.shape[1])]))
    ok = take.tracked[:, j]
    t, pos = take.time_s[ok], take.positions_m[ok, j]
    first = t <= t[0] + ONSET_REST_S
    if first.sum() < 5 or len(t) < 20:
        return None
    rest = np.median(pos[first], axis=0)
    pred_dist = np.linalg.norm(predicted[:, j] - predicted[0, j], axis=1)
    # Above the noise and above the small corrections a plan makes before its motion (a fraction of its reach).
    threshold = max(ONSET_MIN_M, 8.0 * _noise(take.positions_m[:, j]), ONSET_FRACTION * float(pred_dist.max()))
    if np.max(np.linalg.norm(pos[first] - rest, axis=1)) > 0.5 * threshold:
        return None  # not at rest
    beyond = np.flatnonzero(pred_dist > threshold)
    if beyond.size == 0 or beyond[0] == 0:
        return None
    pred_onset = crossing_time(times, pred_dist, int(beyond[0]), threshold)
    dist = np.linalg.norm(pos - rest, axis=1)
    i = departure(dist, threshold)
    if not i or t[i] <= t[0] + ONSET_REST_S:  # none, or the first frame is one
        return None  # moving already: no rest to leave
    lead = pred_onset - float(times[int(np.argmax(pred_dist > DEPARTURE_M))])
    starts = crossing_time(t, dist, i, threshold) - lead
    before = (t > starts - ONSET_REST_S) & (t <= starts)
    if before.sum() >= 5:
        dist = np.linalg.norm(pos - np.median(pos[before], axis=0), axis=1)
        i = departure(dist, threshold)
        if not i:
            return None
    return crossing_time(t, dist, i, threshold) - pred_onset


def _found_offset(points: _Points, take: Take, times: NDArray[np.float64], predicted: NDArray[np.float64]
                  ) -> tuple[float, str, float]:
    """The take's time offset, how it was found, and the closest fit's residual [m]: its onset on the prediction's,
    unless that is far off the closest fit (an onset of something else), else the closest fit
    (:func:`_best_offset`)."""
    best = _best_offset(points, take, float(times[-1] - times[0]))
    closest = points.residual(best)
    onset = _onset_offset(take, times, predicted)
    # The onset, where the body has barely started, hardly sees the lag a model error puts on the motion, which the
    # closest fit would partly take for a clock offset and so never measure.
    if onset is not None and points.residual(onset) <= 1.5 * closest + 2e-3:
        return onset, "onset", closest
    return best, "searched", closest


def align_take(take: Take, times: NDArray[np.float64], predicted: NDArray[np.float64],
               moving: tuple[float, float], naive: NDArray[np.float64] | None = None,
               motion_start_s: float | None = None, clock_snap_s: float = 0.0,
               recorded_start: bool = True) -> TakeAlignment:
    """Align ``take`` onto a prediction (module docstring, step 3).

    Args:
        take: the take (mocap frame and clock).
        times: the plan's grid (n_t,) [s], 0 at the motion's start.
        predicted: the model's tracked positions for the plan (n_t, k, 3) [m], bodies in ``take.links`` order.
        moving: the plan's moving span ``(first motion, settled)`` [s] (what the take must cover).
        naive: the naive playback's prediction (n_t, k, 3) [m], to align onto as well (None: not checked).
        motion_start_s: the offset is ``take.time_s[0] + motion_start_s`` (None: recorded or searched).
        clock_snap_s: a searched offset within this of zero is taken as zero [s].
        recorded_start: the offset is the take's :attr:`Take.recorded_start_s` where it has one (and no
            ``motion_start_s`` is given).

    Raises:
        RefineRefused: too few tracked frames to align.
    """
    points = _Points(take, times, predicted)
    if len(points.time) < 20:
        raise RefineRefused(Refusal.MISSING_FRAMES, f"the take {take.source} has {len(points.time)} tracked "
                            "samples: too few to align", samples=len(points.time))
    offset, source, closest = _found_offset(points, take, times, predicted)
    if motion_start_s is not None:
        offset, source = float(take.time_s[0]) + float(motion_start_s), "given"
    elif recorded_start and take.recorded_start_s is not None:
        offset, source = take.recorded_start_s, "recorded"
    elif abs(offset) <= clock_snap_s:
        offset, source = 0.0, "take clock"
    src, dst = points.at(offset)
    rot_inv, trans_inv, _ = _kabsch(src, dst)
    inside_src, inside_dst = points.at(offset, inside_only=True)
    aligned = inside_src @ rot_inv.T + trans_inv
    residual = float(np.sqrt(np.mean(np.sum((aligned - inside_dst) ** 2, axis=1)))) if len(aligned) else math.inf
    travel = _travel_rms(predicted)
    naive_rms = None
    if naive is not None:
        naive_points = _Points(take, times, naive)
        naive_rms = naive_points.residual(_best_offset(naive_points, take, float(times[-1] - times[0])))
    # Frames: those of the take's own span within the plan, at its rate; the take's cover of the moving span.
    t_plan = take.time_s - offset
    first, last = max(float(t_plan[0]), float(times[0])), min(float(t_plan[-1]), float(times[-1]))
    expected = max(round((last - first) * take.rate_hz) + 1, 1) if last > first else 1
    inside = (t_plan >= first - 1e-9) & (t_plan <= last + 1e-9)
    present = int(np.sum(take.tracked[inside].all(axis=1)))
    missing = max(0.0, 1.0 - present / expected) if last > first else 1.0
    a, b = moving
    covered = max(0.0, min(b, float(t_plan[-1])) - max(a, float(t_plan[0])))
    coverage = covered / (b - a) if b > a else 1.0
    return TakeAlignment(offset, rot_inv, trans_inv, residual, travel, closest, naive_rms, missing, coverage, source)


def _travel_rms(predicted: NDArray[np.float64]) -> float:
    """RMS distance of the tracked positions (n_t, k, 3) to each body's mean position [m]."""
    centred = predicted - predicted.mean(axis=0, keepdims=True)
    return float(np.sqrt(np.mean(np.sum(centred**2, axis=2))))


def _resample(take: Take, alignment: TakeAlignment, times: NDArray[np.float64]) -> NDArray[np.float64]:
    """The aligned take on the plan's grid (n_t, k, 3) [m], robot frame: a cubic spline through each body's tracked
    samples; NaN outside the take and in gaps of more than :data:`MAX_GAP_FRAMES` frames."""

    out = np.full((len(times), len(take.links), 3), np.nan)
    gap = (MAX_GAP_FRAMES + 0.5) / take.rate_hz
    for j in range(len(take.links)):
        ok = take.tracked[:, j]
        t = take.time_s[ok] - alignment.offset_s
        if len(t) < 4:
            continue
        keep = np.concatenate([[True], np.diff(t) > 1e-9])  # duplicate stamps
        t, pos = t[keep], take.positions_m[ok, j][keep] @ alignment.rotation.T + alignment.translation
        spline = make_interp_spline(t, pos, k=3)
        idx = np.searchsorted(t, times)
        inside = (idx > 0) & (idx < len(t))
        spans = np.zeros(len(times))
        spans[inside] = t[idx[inside]] - t[idx[inside] - 1]
        exact = np.isin(times, t)
        use = (inside & (spans <= gap)) | exact
        out[use, j] = spline(times[use])
    return out


def _check_take(take: Take, alignment: TakeAlignment, options: RefineOptions, times: NDArray[np.float64],
                predicted: NDArray[np.float64], moving: tuple[float, float]) -> None:
    """The refusals that read the aligned take (module docstring, step 4)."""
    source = take.source
    if alignment.naive_residual_rms_m is not None \
            and alignment.naive_residual_rms_m < options.naive_ratio * alignment.closest_rms_m:
        raise RefineRefused(Refusal.NAIVE_TAKE, f"the take {source} is a take of the input played as authored (the "
                            "naive playback), not of CURRENT: it comes within "
                            f"{1e3 * alignment.naive_residual_rms_m:.1f} mm RMS of the model's naive playback and "
                            f"within {1e3 * alignment.closest_rms_m:.1f} mm "
                            "of its prediction of CURRENT", naive_residual_rms_m=alignment.naive_residual_rms_m,
                            closest_rms_m=alignment.closest_rms_m)
    if alignment.residual_ratio > options.max_residual_ratio:
        what = ("the take's clock is not the plan's (give --motion-start), or it is not a take of this plan"
                if alignment.offset_source == "take clock" else
                "the motion start its recording stored is off (a motion capture on a clock not synchronized with "
                "the robot's: give --no-recorded-start), or it is not a take of this plan"
                if alignment.offset_source == "recorded" else
                "the given motion start is off, or it is not a take of this plan" if alignment.offset_given else
                "a take of another robot or motion, or one whose clock does not run at its stated rate")
        raise RefineRefused(Refusal.MISALIGNED, f"the take {source} does not follow CURRENT: aligned in time and "
                            f"space, it is {1e3 * alignment.residual_rms_m:.1f} mm RMS from the model's prediction, "
                            f"{alignment.residual_ratio:.2f} x the motion's travel ({1e3 * alignment.travel_rms_m:.0f}"
                            f" mm RMS; at most {options.max_residual_ratio:g} x): {what}",
                            residual_rms_m=alignment.residual_rms_m, travel_rms_m=alignment.travel_rms_m)
    t_plan = take.time_s - alignment.offset_s
    in_motion = (t_plan >= moving[0]) & (t_plan <= moving[1])
    for j, link in enumerate(take.links):
        pos = take.positions_m[:, j]
        # Saturated: a coordinate frozen for FLAT_RUN_FRAMES frames while the body should move.
        for a in range(3):
            same = np.concatenate([[False], np.abs(np.diff(pos[:, a])) <= 1e-10]) & in_motion & take.tracked[:, j]
            run = np.convolve(same.astype(int), np.ones(FLAT_RUN_FRAMES - 1, dtype=int), mode="valid")
            if np.any(run >= FLAT_RUN_FRAMES - 1):
                at = float(t_plan[int(np.argmax(run >= FLAT_RUN_FRAMES - 1))])
                raise RefineRefused(Refusal.CLIPPED, f"{take.names[j]} ({link}) is saturated in the take {source}: "
                                    f"its {'xyz'[a]} coordinate stays exactly constant for {FLAT_RUN_FRAMES} or more "
                                    f"frames near t = {at:.2f} s while the body moves (a clipped or frozen stream)",
                                    body=take.names[j], time_s=at)
        # Clipped: lost where the body is farthest out far more often than elsewhere (it left the capture volume).
        span = (t_plan >= times[0]) & (t_plan <= times[-1])
        lost = span & ~take.tracked[:, j]
        if lost.sum() >= FLAT_RUN_FRAMES:
            pred = np.stack([np.interp(t_plan, times, predicted[:, j, a]) for a in range(3)], axis=1)
            centred = pred - pred[span].mean(axis=0)
            along = centred @ np.linalg.svd(centred[span], full_matrices=False)[2][0]
            middle = 0.5 * (along[span].max() + along[span].min())
            reach = np.abs(along - middle)
            outer = span & (reach >= 0.8 * reach[span].max())
            inner = span & ~outer
            rate_outer = float(lost[outer].mean()) if outer.any() else 0.0
            rate_inner = float(lost[inner].mean()) if inner.any() else 0.0
            if lost[outer].sum() >= FLAT_RUN_FRAMES and rate_outer > max(5.0 * rate_inner, 0.3):
                raise RefineRefused(Refusal.CLIPPED, f"{take.names[j]} ({link}) was lost in "
                                    f"{100 * rate_outer:.0f} % of the frames where it is farthest out and in "
                                    f"{100 * rate_inner:.0f} % elsewhere (take {source}): it left the capture volume "
                                    "(clipped); move the cameras or the robot", body=take.names[j],
                                    lost_outer=rate_outer, lost_inner=rate_inner)

    if alignment.missing_fraction > options.max_missing:
        raise RefineRefused(Refusal.MISSING_FRAMES, f"{100 * alignment.missing_fraction:.0f} % of the take's frames "
                            f"within the plan miss a tracked body (at most {100 * options.max_missing:.0f} %): "
                            f"{source}", missing_fraction=alignment.missing_fraction)
    if alignment.coverage < options.min_coverage:
        raise RefineRefused(Refusal.MISSING_FRAMES, f"the take {source} covers {100 * alignment.coverage:.0f} % of "
                            f"the plan's motion ({moving[0]:.2f} to {moving[1]:.2f} s; at least "
                            f"{100 * options.min_coverage:.0f} %): start the capture before the motion and stop it "
                            "after the ring-out", coverage=alignment.coverage)


# -- the model's side ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RefineContext:
    """What every trial of a plan on one robot and input shares: the planning model and problem.

    Attributes:
        robot: the robot (name or YAML). motion: the input as given.
        pp: the planning problem (the input's targets: the intent).
        limits: motor limits. engine_factory: the planning model at a stiffness factor (for ``robust``).
        naive: the model's naive playback (the input as authored sent as goals).
        model_info: how the planning model was obtained.
        torque_margin: the fraction of the stall torque a step keeps free (the plan's).
        warnings: from loading the model.
    """

    robot: str | Path
    motion: Motion
    pp: PlanProblem
    limits: MotorLimits
    engine_factory: Callable[[float], Engine]
    naive: Evaluation
    model_info: dict[str, object]
    torque_margin: float = 0.1
    warnings: tuple[str, ...] = ()


def plan_options_for(plan: PlanFile, options: PlanOptions, motion: Motion | None = None) -> PlanOptions:
    """``options`` with the knot spacing, step, duration and rest a plan file records (when it does; the rest needs
    the input ``motion``: it is recorded as the time the motors hold still from)."""
    settings = plan.settings()
    if not settings:
        return options
    changes: dict[str, float | None] = {"knot_spacing": float(settings.get("knot_spacing_s", options.knot_spacing)),
                               "dt": float(settings.get("dt_s", options.dt))}
    if settings.get("duration_s") is not None:
        changes["duration"] = float(settings["duration_s"])
    if motion is not None and "rest_from_s" in settings:
        rest = settings["rest_from_s"]
        stop = motion_stop_time(motion.shifted(-float(motion.time[0])))
        changes["rest_after"] = None if rest is None else max(float(rest) - stop, 0.0)
    return replace(options, **changes)


def refine_context(robot: str | Path, motion: Motion, plan: PlanFile, options: PlanOptions | None = None,
                   say: Callable[[str], None] | None = None,
                   progress: Callable[[str, int, int], None] | None = None) -> RefineContext:
    """Load the planning model of ``robot`` and ``motion`` as ``retarget plan`` does and build the problem with the
    plan's settings (those its file records, else ``options``'), checking that the plan is for this robot and
    motion before any model work.

    Raises:
        RefineRefused: a plan of another robot or motion.
    """
    options = PlanOptions() if options is None else options
    say = say or (lambda _text: None)
    declared = declared_servos(robot, options.servo_file)
    motors = list(declared)
    _check_plan_for(plan, motion, motors)
    planned = planned_servos(plan.path) if plan.path.suffix.lower() == ".csv" else None
    if planned is not None:
        differ = servo_mismatches(planned, declared)
        if differ:
            laid = declared_with(options.servo_file)
            raise RefineRefused(Refusal.WRONG_ROBOT, f"the plan {plan.path} was made for other servos than the robot's "
                                f"config declares{laid} ({'; '.join(differ)}): a plan of another robot, or of this "
                                "one before its servos changed (plan again)", mismatches=differ)
    motion = check_plan_input(robot, motion)
    settings = plan.settings() or {}
    digest = settings.get("input_sha256")
    start = float(motion.time[0])
    ordered = Motion(motion.time - start, tuple(motors),
                     np.stack([motion.positions[:, motion.joint_index(m)] for m in motors], axis=1))
    if digest and digest != motion_digest(ordered):
        raise RefineRefused(Refusal.WRONG_MOTION, f"the plan {plan.path} was made for another input than "
                            "--motion (the input digest it records differs): refine the plan of this motion, or give "
                            "the motion it was made for", plan=str(plan.path))
    run = replace(plan_options_for(plan, options, motion), stiffness_band=(), band=(), baselines=False)
    pm = planning_model(robot, motion, n_modes=options.modes, dt_train=options.dt_train,
                        mesh_axial=options.mesh_axial, mesh_around=options.mesh_around,
                        reduced_file=options.reduced_file, use_cache=options.use_cache,
                        allow_training=options.allow_training, fallback=options.fallback_models,
                        servos=None if options.servo_file is None else tuple(declared.values()),
                        progress=None if progress is None else (lambda k, n: progress("model training", k, n)))
    gate_warning = gate_model(pm, options.allow_unverified_model, say)
    engine = planner_engine(pm.reduced)
    scaled: dict[float, Engine] = {1.0: engine}

    def engine_factory(factor: float) -> Engine:
        if factor not in scaled:
            scaled[factor] = planner_engine(with_stiffness_scale(pm.reduced, factor))
        return scaled[factor]

    limits = limits_for(pm.model, pm.config)
    bodies = run.bodies if run.bodies is not None else merge_tracked_weights(
        parse_tracked_bodies(pm.config.get("tracked_bodies")), list(run.weights))
    pp = build_plan_problem(engine, motion, bodies, limits, run,
                            None if progress is None else (lambda stage, k, n: progress(stage, k, n)))
    naive = evaluate(pp.naive_problem, pp.input_fit.parameters, gradient=False,
                     progress=None if progress is None else (lambda k, n: progress("naive playback", k, n)))
    return RefineContext(robot, motion, pp, limits, engine_factory, naive, dict(pm.info), float(run.torque_margin),
                         tuple(w for w in (gate_warning,) if w))


def _check_plan_for(plan: PlanFile, motion: Motion, motors: Sequence[str]) -> None:
    """A plan of this robot (its motors) and this input (its span)."""
    names = list(plan.motion.joint_names)
    if sorted(names) != sorted(motors):
        raise RefineRefused(Refusal.WRONG_ROBOT, f"the plan {plan.path} drives {names}, the robot's motors are "
                            f"{list(motors)}: a plan of another robot", plan_joints=names, motors=list(motors))
    missing, unknown = motion.foreign_to(motors)  # as check_plan_input finds it, refused here as a RefineRefused
    if missing:
        raise RefineRefused(Refusal.WRONG_ROBOT, f"the input motion has no column for the robot's motors {missing} "
                            f"and moves joints {unknown} that are not its motors: a motion of another robot",
                            missing=missing, unknown=unknown)
    rate = 1.0 / float(np.median(np.diff(plan.motion.time))) if plan.motion.num_samples > 1 else 0.0
    if abs(plan.motion.duration - motion.duration) > 1.0 / max(rate, 1e-9) + 0.05:
        raise RefineRefused(Refusal.WRONG_MOTION, f"the plan {plan.path} lasts {plan.motion.duration:.3f} s, the "
                            f"input {motion.duration:.3f} s: a plan of another motion",
                            plan_s=plan.motion.duration, input_s=motion.duration)


@dataclass(frozen=True, eq=False)
class _PlanPoint:
    """A plan file as parameters of the problem, and the model's run of it."""

    problem: AdjointProblem
    x: NDArray[np.float64]
    run: Evaluation
    t0: float
    rate_hz: float
    t_stop: float
    fit_error_rad: float


def plan_parameters(pp: PlanProblem, plan: PlanFile, tolerance: float) -> tuple[AdjointProblem,
                                                                                 NDArray[np.float64], float]:
    """CURRENT's samples as parameters of the problem's spline space (its first pose held): ``(problem with that
    start, x, largest fit error [rad])``.

    Raises:
        RefineRefused: samples the parametrization cannot reproduce to ``tolerance`` (another knot spacing, another
            motion) or a first pose far from the input's.
    """
    names = list(pp.problem.engine.motor_names)
    m = plan.motion.shifted(-float(plan.motion.time[0]))
    positions = np.stack([m.positions[:, m.joint_index(n)] for n in names], axis=1)
    base = pp.problem.parametrization
    held = np.asarray(base.start_pose, dtype=float) if base.start_pose is not None else positions[0]
    if np.max(np.abs(positions[0] - held)) > 0.05:
        raise RefineRefused(Refusal.WRONG_MOTION, f"the plan {plan.path} starts at {np.degrees(positions[0])} deg, "
                            f"the input's held start is {np.degrees(held)} deg: a plan of another motion")
    par = ProfileParametrization(base.n_control, base.n_motors, positions[0], base.hold_end, base.rest_control)
    template = pp.problem.template
    inside = m.time <= template.t_end + 1e-9
    b0 = template.basis_matrix(m.time[inside])
    a = par.parameter_basis(b0).toarray()
    rhs = positions[inside] - np.asarray(b0 @ par.offset)
    coef, *_ = np.linalg.lstsq(a, rhs, rcond=None)
    error = float(np.max(np.abs(a @ coef - rhs)))
    rank = int(np.linalg.matrix_rank(a))
    if error > tolerance or rank < a.shape[1]:
        raise RefineRefused(Refusal.WRONG_MOTION, f"the plan {plan.path} is not a plan of this input with knot spacing "
                            f"{template.knot_spacing:g} s: its samples differ from the closest profile of the "
                            f"planner's parametrization by {error:.3g} rad (at most {tolerance:g}; the knot spacing, "
                            "duration or rest of `retarget plan` must be the plan's: see --knot-spacing, --rest-after)",
                            fit_error_rad=error)
    start = pp.problem.engine.solve_static(positions[0], pp.problem.start)
    return replace(pp.problem, parametrization=par, start=start), coef.ravel(order="F"), error


def _plan_point(context: RefineContext, plan: PlanFile, options: RefineOptions,
                progress: Callable[[str, int, int], None] | None) -> _PlanPoint:
    pp = context.pp
    problem, x, error = plan_parameters(pp, plan, options.fit_tolerance_rad)
    run = evaluate(problem, x, gradient=False,
                   progress=None if progress is None else (lambda k, n: progress("prediction of the plan", k, n)))
    times = plan.motion.time
    rate = 1.0 / float(np.median(np.diff(times))) if len(times) > 1 else 100.0
    return _PlanPoint(problem, x, run, float(times[0]), rate, float(times[-1] - times[0]), error)


# -- the measurement ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialMeasurement:
    """What a take says CURRENT did, against the planner's intent (the quasi-static targets).

    Attributes:
        peak_deviation_m: max over the grid and bodies of |measured − intent| [m].
        rms_deviation_m: RMS of the same [m].
        ring_out_peak_m: its peak once CURRENT's motors have settled [m].
        model_peak_deviation_m: the model's prediction of CURRENT's peak [m].
        naive_model_peak_deviation_m: the model's naive playback's peak [m].
        settled_s: when CURRENT's motors settle [s].
        measured_samples: grid points with a measurement [-] (of ``grid_samples``).
        ring_frequency_hz, model_ring_frequency_hz: the ring-out's first mode measured and in the model (None: too
            small to identify).
    """

    peak_deviation_m: float
    rms_deviation_m: float
    ring_out_peak_m: float
    model_peak_deviation_m: float
    naive_model_peak_deviation_m: float
    settled_s: float
    measured_samples: int
    grid_samples: int
    ring_frequency_hz: float | None = None
    model_ring_frequency_hz: float | None = None


@dataclass(frozen=True, eq=False)
class _Measured:
    point: _PlanPoint
    alignment: TakeAlignment
    measured: NDArray[np.float64]  # (n_t, k, 3), NaN where not measured
    measurement: TrialMeasurement


def _measure(context: RefineContext, point: _PlanPoint, take: Take, options: RefineOptions) -> _Measured:
    pp = context.pp
    times = pp.targets.times
    links = list(pp.problem.tracking.links)
    unknown = [link for link in take.links if link not in links]
    if unknown:
        raise RefineRefused(Refusal.WRONG_ROBOT, f"{unknown} are not tracked bodies of this robot (its tracked bodies: "
                            f"{links}): give --body LINK=RIGIDBODY with LINK one of them", links=unknown)
    cols = [links.index(link) for link in take.links]
    predicted = point.run.positions[:, cols]
    naive = context.naive.positions[:, cols]
    angles = np.asarray(point.problem.profiles(point.x).evaluate(times))
    settled = commanded_stop_time(times, angles)
    input_angles = pp.motion.sample(times)
    moving_rows = np.flatnonzero(np.any(np.abs(np.diff(angles, axis=0)) > 1e-9, axis=1)
                                 | np.any(np.abs(np.diff(input_angles, axis=0)) > 1e-9, axis=1))
    first = float(times[moving_rows[0]]) if moving_rows.size else float(times[0])
    moving = (first, max(settled, float(times[min(moving_rows[-1] + 1, len(times) - 1)]) if moving_rows.size
                         else settled))
    alignment = align_take(take, times, predicted, moving, naive, options.motion_start_s, options.clock_snap_s,
                           options.recorded_start)
    _check_take(take, alignment, options, times, predicted, moving)
    sampled = _resample(take, alignment, times)
    measured = np.full(point.run.positions.shape, np.nan)
    measured[:, cols] = sampled
    target = pp.targets.positions
    dev = np.linalg.norm(measured - target, axis=2)
    ok = np.isfinite(dev)
    model_dev = np.linalg.norm(point.run.positions - target, axis=2)
    naive_dev = np.linalg.norm(context.naive.positions - target, axis=2)
    after = (times >= settled)[:, None] & ok
    freq, model_freq = _ring_frequencies(times, measured, point.run.positions, target, settled, ok)
    measurement = TrialMeasurement(
        peak_deviation_m=float(dev[ok].max()), rms_deviation_m=float(np.sqrt(np.mean(dev[ok] ** 2))),
        ring_out_peak_m=float(dev[after].max()) if after.any() else 0.0,
        model_peak_deviation_m=float(model_dev.max()), naive_model_peak_deviation_m=float(naive_dev.max()),
        settled_s=settled, measured_samples=int(ok.all(axis=1).sum()) if ok.shape[1] else 0,
        grid_samples=len(times), ring_frequency_hz=freq, model_ring_frequency_hz=model_freq)
    if measurement.model_peak_deviation_m >= measurement.naive_model_peak_deviation_m:
        raise RefineRefused(Refusal.WRONG_MOTION, f"in the model CURRENT deviates from the input's intent by "
                            f"{1e3 * measurement.model_peak_deviation_m:.1f} mm at its peak, no less than the input "
                            f"played as authored ({1e3 * measurement.naive_model_peak_deviation_m:.1f} mm): it is "
                            "not a plan of this motion")
    return _Measured(point, alignment, measured, measurement)


def _ring_frequencies(times: NDArray[np.float64], measured: NDArray[np.float64], model: NDArray[np.float64],
                      target: NDArray[np.float64], settled: float, ok: NDArray[np.bool_]
                      ) -> tuple[float | None, float | None]:
    """The first mode of the ring-out after ``settled``, measured and in the model, for the body that rings most
    (None where it rings less than 2 mm or cannot be identified)."""

    after = times >= settled + 0.05
    if after.sum() < 40:
        return None, None
    dev = np.where(ok[..., None], measured - target, 0.0)
    ring = [np.ptp(dev[after, j], axis=0).max() if ok[after, j].all() else 0.0 for j in range(dev.shape[1])]
    j = int(np.argmax(ring))
    if ring[j] < 2e-3:
        return None, None
    out: list[float | None] = []
    for track in (measured[:, j], model[:, j]):
        try:
            out.append(float(identify_from_trajectory(times[after], track[after]).frequency_hz))
        except (ShapingError, ValueError, np.linalg.LinAlgError):
            out.append(None)
    return out[0], out[1]


# -- the re-fitted model -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFit:
    """The planning model re-fitted to a take: every flexible part's stiffness and every modelled servo's P gain
    scaled so that the model's run of CURRENT comes closest (weighted as the tracking term) to what was measured.

    Attributes:
        stiffness_factor: the flexible parts' stiffness over the planning model's [-].
        kp_factor: the servos' P gain over the robot's [-] (1 with ideal servos).
        residual_before_m, residual_after_m: RMS distance of the measurement to the model's run of CURRENT, before
            and after the re-fit [m].
        used: the learning step ran on the re-fitted model (it explains the take by at least
            :attr:`RefineOptions.refit_gain` better, within the bounds).
        simulations: forward runs the fit took.
        message: what was done and why.
    """

    stiffness_factor: float
    kp_factor: float
    residual_before_m: float
    residual_after_m: float
    used: bool
    simulations: int
    message: str


def scaled_problem(context: RefineContext, problem: AdjointProblem, stiffness: float, kp: float) -> AdjointProblem:
    """``problem`` on the planning model with every flexible part's stiffness × ``stiffness`` and every modelled
    servo's P gain × ``kp``, from its static equilibrium at the problem's first pose."""
    if stiffness == 1.0 and kp == 1.0:
        return problem
    engine = context.engine_factory(float(stiffness))
    servos = engine.servos.per_motor
    if kp != 1.0 and not all(s.ideal for s in servos):
        engine = engine.with_servos([s if s.ideal else s.with_values(kp=s.kp * float(kp)) for s in servos])
    return replace(problem, engine=engine, start=engine.solve_static(problem.parametrization.start_pose))


def refit_model(context: RefineContext, problem: AdjointProblem, x: NDArray[np.float64],
                measured: NDArray[np.float64], start: tuple[float, float], options: RefineOptions,
                progress: Callable[[str, int, int], None] | None = None) -> ModelFit:
    """Fit the stiffness and servo-gain factors (:class:`ModelFit`) by least squares on the measured positions
    (Levenberg–Marquardt in the factors' logarithms, finite differences, within :attr:`RefineOptions.refit_bounds`),
    from ``start`` (the last trial's factors)."""

    tr = problem.tracking
    sq = np.sqrt(tr.quadrature[:, None] * tr.position_weights)
    ok = np.isfinite(measured).all(axis=2)
    both = not all(s.ideal for s in problem.engine.servos.per_motor)
    lo, hi = (math.log(b) for b in options.refit_bounds)
    count = [0]

    def residual(p: NDArray[np.float64]) -> NDArray[np.float64]:
        count[0] += 1
        if progress is not None:
            progress("re-fitting the model", count[0], options.refit_simulations)
        factors = np.exp(p)
        run = evaluate(scaled_problem(context, problem, float(factors[0]), float(factors[-1]) if both else 1.0), x,
                       gradient=False)
        return (np.where(ok[..., None], sq[..., None] * (np.nan_to_num(measured) - run.positions), 0.0)).ravel()

    weight = float(np.sum(sq[ok] ** 2))

    def rms(r: NDArray[np.float64]) -> float:
        return float(np.sqrt(np.sum(r**2) / max(weight, 1e-300)))

    p0 = np.log(np.clip(np.array(start[:2] if both else start[:1], dtype=float), *options.refit_bounds))
    base = residual(np.zeros(len(p0)))
    before = rms(base)
    try:
        fit = least_squares(residual, p0, diff_step=1e-3, bounds=(lo, hi), x_scale=0.1,
                            max_nfev=max(options.refit_simulations // (len(p0) + 1), 2))
        after, factors = rms(fit.fun), np.exp(fit.x)
    except SimulationError as exc:
        return ModelFit(1.0, 1.0, before, before, False, count[0], f"the re-fit failed ({exc}): the planning "
                        "model is used")
    stiffness, kp = float(factors[0]), float(factors[-1]) if both else 1.0
    at_bound = bool(np.any(np.isclose(fit.x, lo, atol=1e-3) | np.isclose(fit.x, hi, atol=1e-3)))
    used = after <= (1.0 - options.refit_gain) * before and not at_bound
    what = f"stiffness x {stiffness:.3f}" + (f", servo P gain x {kp:.3f}" if both else "")
    if at_bound:
        message = f"the re-fit ended at a bound ({what}): the planning model is used"
    elif used:
        message = (f"re-fitted the model to the take ({what}): it predicts CURRENT {1e3 * after:.2f} mm RMS from "
                   f"the take, the planning model {1e3 * before:.2f} mm")
    else:
        message = (f"a re-fit ({what}) explains the take hardly better ({1e3 * after:.2f} against "
                   f"{1e3 * before:.2f} mm RMS): the planning model is used")
    return ModelFit(stiffness if used else 1.0, kp if used else 1.0, before, after, used, count[0], message)


# -- the learning step --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LearningQuadratic:
    """The learning step's quadratic model of the plan's objective on the measurement, at CURRENT (``Δx = 0``).

    Attributes:
        hessian: ``JᵀJ`` (averaged over the models) + the parameter terms' Hessian + ``μ diag(JᵀJ)`` (n_p, n_p).
        gradient: ``Jᵀr`` (the measured tracking rows, the model's torque rows) + the parameter terms' gradient
            (n_p,).
        residual: the measured tracking rows ``W^½ (c_meas − c̄)`` (n_t, k, 3) [m √(s·weight)] (0 where not measured).
        weights: ``W^½`` per grid point and body (n_t, k).
        measured: where a measurement exists (n_t, k).
    """

    hessian: NDArray[np.float64]
    gradient: NDArray[np.float64]
    residual: NDArray[np.float64]
    weights: NDArray[np.float64]
    measured: NDArray[np.bool_]


def learning_quadratic(problems: Sequence[AdjointProblem], x: NDArray[np.float64], runs: Sequence[Evaluation],
                       measured: NDArray[np.float64], damping: float) -> LearningQuadratic:
    """The quadratic model of the plan's objective with its tracking term on the measurement (module docstring,
    step 6): exact tangent-linear sensitivities of each model at ``x``, the measured residual in place of each
    model's tracked positions.

    Args:
        problems: the nominal problem first, then any robust models' (same parametrization).
        x: CURRENT's parameters (n_p,).
        runs: each problem's run at ``x``.
        measured: the measured tracked positions on the grid (n_t, k, 3) [m], robot frame (NaN: not measured).
        damping: ``μ``.
    """
    nominal = problems[0]
    tr = nominal.tracking
    sq = np.sqrt(tr.quadrature[:, None] * tr.position_weights)  # (n_t, k)
    ok = np.isfinite(measured).all(axis=2)
    r_pos = np.where(ok[..., None], sq[..., None] * (np.nan_to_num(measured) - tr.target_positions), 0.0)
    n_t, k = sq.shape
    p = len(x)
    hess = np.zeros((p, p))
    grad = np.zeros(p)
    for problem, run in zip(problems, runs):
        ls = tangent_least_squares(problem, x, run.rollout)
        rows_per = 3 + (9 if problem.tracking.tracks_orientation else 0)
        n_track = n_t * k * rows_per
        jac_track = ls.jacobian[:n_track].reshape(n_t, k, rows_per, p).copy()
        res_track = ls.residual[:n_track].reshape(n_t, k, rows_per).copy()
        res_track[:, :, :3] = r_pos
        jac_track[:, :, :3] *= ok[:, :, None, None]  # no measurement: no row
        jac = np.vstack([jac_track.reshape(-1, p), ls.jacobian[n_track:]])
        res = np.concatenate([res_track.ravel(), ls.residual[n_track:]])
        hess += jac.T @ jac
        grad += jac.T @ res
    hess /= len(problems)
    grad /= len(problems)
    floor = 1e-12 * max(float(np.max(np.diag(hess))), 1e-30)
    full = hess + parameter_hessian(nominal, x) + damping * np.diag(np.diag(hess)) + floor * np.eye(p)
    return LearningQuadratic(0.5 * (full + full.T), grad + nominal.parameter_terms(x)[1], r_pos, sq, ok)


def _solve_box_qp(hessian: NDArray[np.float64], gradient: NDArray[np.float64], lower: NDArray[np.float64],
                  upper: NDArray[np.float64]) -> NDArray[np.float64]:
    """``argmin ½ΔxᵀHΔx + gᵀΔx`` over ``lower ≤ Δx ≤ upper`` (H symmetric positive definite): the bounded least
    squares ``|LᵀΔx + L⁻¹g|²`` with ``H = LLᵀ``, solved exactly (BVLS)."""

    factor = np.linalg.cholesky(hessian)
    rhs = -np.linalg.solve(factor, gradient)
    return np.clip(lsq_linear(factor.T, rhs, bounds=(lower, upper), method="bvls", tol=1e-12).x, lower, upper)


def _objective(problem: AdjointProblem, x: NDArray[np.float64], run: Evaluation, quadratic: LearningQuadratic,
               measured_at: NDArray[np.float64]) -> float:
    """The plan's objective with its tracking term on the measurement moved by the model's change since the
    measured plan's run (``measured_at``: its tracked positions), the model's own where nothing was measured."""
    sq = quadratic.weights[..., None]
    tracking = np.where(quadratic.measured[..., None], quadratic.residual + sq * (run.positions - measured_at),
                        sq * (run.positions - problem.tracking.target_positions))
    value = 0.5 * float(np.sum(tracking**2)) + problem.parameter_terms(x)[0]
    if problem.torque_penalty is not None:
        penalty, matrix = problem.torque_penalty, run.rollout.matrix
        value += penalty.evaluate(matrix[:, problem.engine.motor_torque_index], penalty.speeds(matrix))[0]
    return value


def _torque_state(problem: AdjointProblem, run: Evaluation, limits: MotorLimits, margin: float
                  ) -> tuple[float, float]:
    """``(largest excess over (1 − margin) × stall on the servos' torque–speed line [N m], peak |τ| / stall)``."""
    engine = problem.engine
    penalty = TorquePenalty.build(problem.dt, limits, 1.0, margin, engine.servos.per_motor, engine.shaft_speed_index)
    tau = run.rollout.matrix[:, engine.motor_torque_index]
    thr, _ = penalty.thresholds(tau, penalty.speeds(run.rollout.matrix))
    return float(np.max(np.abs(tau) - thr)), float(np.max(np.abs(tau) / np.asarray(limits.stall_torque, dtype=float)))


@dataclass(frozen=True)
class LearningStep:
    """The step from CURRENT to NEXT.

    Attributes:
        trust_region_rad: the trust region the step was taken in, after any halving [rad].
        step_rad: the largest change of a control point [rad].
        halvings: how often the step was halved (torque, speed, objective, a simulation that failed).
        limited_by: ``trust region``, ``joint limits``, ``none`` (the quadratic's own minimizer) or ``no safe step``
            (NEXT is CURRENT).
        predicted_peak_deviation_m, predicted_rms_deviation_m: NEXT's deviation from the intent predicted as the
            measurement plus the model's change (where nothing was measured: the model's own) [m].
        model_peak_deviation_m: NEXT's deviation in the model alone [m].
        peak_torque_ratio: NEXT's peak motor torque over stall in the model [-].
        current_peak_torque_ratio: CURRENT's, the same way [-].
        objective_measured, objective_predicted: the plan's objective on the measurement (CURRENT) and predicted for
            NEXT.
        message: how the step came about.
    """

    trust_region_rad: float
    step_rad: float
    halvings: int
    limited_by: str
    predicted_peak_deviation_m: float
    predicted_rms_deviation_m: float
    model_peak_deviation_m: float
    peak_torque_ratio: float
    current_peak_torque_ratio: float
    objective_measured: float
    objective_predicted: float
    message: str


@dataclass(frozen=True, eq=False)
class _Step:
    x: NDArray[np.float64]
    run: Evaluation
    predicted: NDArray[np.float64]  # (n_t, k, 3) [m]
    report: LearningStep


def learning_step(context: RefineContext, problem: AdjointProblem, x: NDArray[np.float64], run: Evaluation,
                  measured: NDArray[np.float64], radius: float, options: RefineOptions,
                  progress: Callable[[str, int, int], None] | None = None) -> _Step:
    """The bounded step from a plan ``x`` (its problem and model run) and its measurement, halved until the model's
    NEXT asks no more torque than CURRENT beyond ``(1 − margin)`` × stall on the torque–speed line, leaves no new
    speed or position limit, and is predicted to lower the plan's objective on the measurement (module docstring,
    step 6). Without such a step within :attr:`RefineOptions.shrinks` halvings NEXT is CURRENT."""
    pp = context.pp
    problems, runs = [problem], [run]
    for factor in options.robust:
        if float(factor) != 1.0:
            engine = context.engine_factory(float(factor))
            member = replace(problem, engine=engine,
                             start=engine.solve_static(problem.parametrization.start_pose, problem.start))
            problems.append(member)
            runs.append(evaluate(member, x, gradient=False))
    if progress is not None:
        progress("sensitivities", 0, 1)
    quad = learning_quadratic(problems, x, runs, measured, options.damping)
    if progress is not None:
        progress("sensitivities", 1, 1)
    lower, upper = pp.bound_arrays()
    margin = context.torque_margin
    excess_cur, ratio_cur = _torque_state(problem, run, pp.limits, margin)
    violations = len(check_profile_limits(problem.profiles(x), pp.limits))
    target = pp.targets.positions
    ok = quad.measured[..., None]
    as_measured = np.where(ok, np.nan_to_num(measured), run.positions)
    objective_measured = _objective(problem, x, run, quad, run.positions)
    halvings, why, r = 0, [], float(radius)
    while True:
        lo, hi = np.maximum(lower - x, -r), np.minimum(upper - x, r)
        dx = _solve_box_qp(quad.hessian, quad.gradient, lo, hi)
        reason, run_new = "", None
        if not np.any(dx):
            reason = "no step lowers the plan's objective on this take"
        else:
            try:
                run_new = evaluate(problem, x + dx, gradient=False, progress=None if progress is None else
                                   (lambda k, n: progress("prediction of the next plan", k, n)))
            except SimulationError as exc:
                reason = f"the model cannot simulate it ({exc})"
        if run_new is not None:
            excess, ratio = _torque_state(problem, run_new, pp.limits, margin)
            objective = _objective(problem, x + dx, run_new, quad, run.positions)
            if excess > max(excess_cur, 0.0) + 1e-9:
                reason = f"it asks {ratio:.2f} x the stall torque, beyond {1 - margin:.2f} x on the torque-speed line"
            elif len(check_profile_limits(problem.profiles(x + dx), pp.limits)) > violations:
                reason = "it leaves a servo's speed or position limit"
            elif not objective < objective_measured:
                reason = "the model predicts no gain on the measurement"
            else:
                predicted = as_measured + run_new.positions - run.positions
                dev = np.linalg.norm(predicted - target, axis=2)
                inner = (np.abs(dx - lo) <= 1e-12) & (lo > -r) | (np.abs(dx - hi) <= 1e-12) & (hi < r)
                limited = "trust region" if np.max(np.abs(dx)) >= r * (1 - 1e-9) else \
                    "joint limits" if np.any(inner) else "none"
                message = f"halved {halvings} x ({'; '.join(why)})" if why else "full step"
                report = LearningStep(r, float(np.max(np.abs(dx))), halvings, limited, float(dev.max()),
                                      float(np.sqrt(np.mean(dev**2))),
                                      float(np.linalg.norm(run_new.positions - target, axis=2).max()), ratio,
                                      ratio_cur, objective_measured, objective, message)
                return _Step(x + dx, run_new, predicted, report)
        if halvings >= options.shrinks or not np.any(dx):
            dev = np.linalg.norm(as_measured - target, axis=2)
            report = LearningStep(r, 0.0, halvings, "no safe step", float(dev.max()), float(np.sqrt(np.mean(dev**2))),
                                  float(np.linalg.norm(run.positions - target, axis=2).max()), ratio_cur, ratio_cur,
                                  objective_measured, objective_measured, f"no safe step ({reason}): NEXT is CURRENT")
            return _Step(x.copy(), run, as_measured, report)
        why.append(reason)
        halvings += 1
        r *= 0.5


# -- the history --------------------------------------------------------------------------------------------------


class Decision(str, Enum):
    """What the trend of the trials says about the next step."""

    FIRST = "first trial"
    IMPROVING = "improving"
    STOPPED = "stopped improving"
    ROSE = "rose"


@dataclass(frozen=True)
class TrialRecord:
    """One trial in a plan's history: what CURRENT did and what NEXT was made of it.

    Attributes:
        trial: 1 for the first plan played.
        plan, plan_sha256: CURRENT (the plan played) and its digest.
        recording, recording_sha256: the take and its digest. bodies: link → name in the take.
        measured_peak_deviation_m, measured_rms_deviation_m, measured_ring_out_peak_m: the take against the intent [m].
        model_peak_deviation_m: the model's prediction of CURRENT's peak [m].
        predicted_peak_deviation_m: NEXT's peak predicted from this take [m].
        peak_torque_ratio: NEXT's peak torque over stall in the model [-].
        trust_region_rad: the trust region of the step [rad]. step_rad: the step's largest change [rad].
        decision: the trend (:class:`Decision`). route: the route taken.
        stiffness_factor, kp_factor: the re-fitted model's factors the step used (1: the planning model's).
        next_plan, next_plan_sha256: NEXT and its digest ("" until written).
        time_utc: when the trial was refined (ISO 8601).
    """

    trial: int
    plan: str
    plan_sha256: str
    recording: str
    recording_sha256: str
    bodies: dict[str, str]
    measured_peak_deviation_m: float
    measured_rms_deviation_m: float
    measured_ring_out_peak_m: float
    model_peak_deviation_m: float
    predicted_peak_deviation_m: float
    peak_torque_ratio: float
    trust_region_rad: float
    step_rad: float
    decision: str
    route: str
    stiffness_factor: float = 1.0
    kp_factor: float = 1.0
    next_plan: str = ""
    next_plan_sha256: str = ""
    time_utc: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> TrialRecord:
        """A record from its JSON mapping (unknown keys ignored).

        Raises:
            InputError: a missing key.
        """
        names = [f for f in cls.__dataclass_fields__]
        try:
            return cls(**{k: data[k] for k in names if k in data})
        except TypeError as exc:
            raise InputError(f"a trial record lacks a key: {exc}") from None


@dataclass(frozen=True)
class History:
    """The trials of a chain of plans, oldest first (``NEXT.history.json``: :func:`history_path`)."""

    trials: tuple[TrialRecord, ...] = ()

    @classmethod
    def load(cls, path: str | Path) -> History:
        """The history in ``path``; empty when there is no such file.

        Raises:
            InputError: a file that is not a history.
        """
        p = Path(path)
        if not p.is_file():
            return cls()
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
            return cls(tuple(TrialRecord.from_json(t) for t in data["trials"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{p} is not a refine history ({exc})") from None

    def to_json(self) -> dict[str, object]:
        """``{"trials": [...]}``."""
        return {"trials": [asdict(t) for t in self.trials]}

    @property
    def best(self) -> TrialRecord | None:
        """The trial with the smallest measured peak, or None."""
        return min(self.trials, key=lambda t: t.measured_peak_deviation_m) if self.trials else None


def history_path(plan: str | Path) -> Path:
    """The history file beside a plan: ``NEXT.csv`` → ``NEXT.history.json``."""
    p = Path(plan)
    return p.with_name(p.stem + HISTORY_SUFFIX)


def _trend(history: History, peak: float, options: RefineOptions) -> tuple[Decision, float, str, bool]:
    """The decision, the trust region, the sentence that says why, and whether the step starts from the best
    earlier trial (a peak above the best one's: the loop never steps on from a plan that measured worse)."""
    if not history.trials:
        return Decision.FIRST, options.trust_region_rad, "first trial", False
    prev, best = history.trials[-1], history.best
    assert best is not None
    change = peak / prev.measured_peak_deviation_m - 1.0
    text = (f"measured peak {1e3 * peak:.2f} mm, {100 * change:+.1f} % since trial {prev.trial} "
            f"({1e3 * prev.measured_peak_deviation_m:.2f} mm)")
    halved = 0.5 * prev.trust_region_rad
    if peak > best.measured_peak_deviation_m:
        above = peak / best.measured_peak_deviation_m - 1.0
        if best is not prev:
            text += (f", {100 * above:+.1f} % above the best trial {best.trial} "
                     f"({1e3 * best.measured_peak_deviation_m:.2f} mm)")
        again = "stepping again from the best trial with half the trust region"
        if above > options.plateau:
            return Decision.ROSE, halved, f"{text}: it rose; {again}", True
        return Decision.STOPPED, halved, f"{text}: stopped improving; {again}", True
    if change > -options.plateau:
        return Decision.STOPPED, halved, text + (f": stopped improving (less than {100 * options.plateau:g} %); the "
                                                 "trust region is halved"), False
    return Decision.IMPROVING, min(options.trust_region_rad, 1.5 * prev.trust_region_rad), text + ": improving", \
        False


# -- the result ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Refinement:
    """Everything :func:`refine` found and made.

    Attributes:
        next_plan: NEXT's samples on CURRENT's grid [s], [rad]. comments: NEXT's comment lines.
        record: this trial's :class:`TrialRecord` (NEXT's path and digest filled in when written).
        history: the trials before this one.
        alignment: how the take maps onto the plan. measurement: what it says CURRENT did.
        step: the learning step. decision: the trend. route: the route taken; route_reason: why.
        message: one sentence for the user (the trend and the step).
        warnings: what the user should know.
        plan_fit_error_rad: CURRENT's samples against its parameters [rad].
        times: the grid (n_t,) [s]. targets: the intent (n_t, k, 3) [m]. measured: the take on the grid (NaN:
            none). model_current, model_next: the model's runs of CURRENT and NEXT; predicted_next: the measurement
            plus the model's change. goals_current, goals_next: the motors' goals (n_t, n_m) [rad].
        links: the tracked bodies (k,). motors: the motors (n_m,).
        model_fit: the model re-fitted to the take (None: no re-fit asked).
    """

    next_plan: Motion
    comments: tuple[str, ...]
    record: TrialRecord
    history: History
    alignment: TakeAlignment
    measurement: TrialMeasurement
    step: LearningStep
    decision: Decision
    route: str
    route_reason: str
    message: str
    warnings: tuple[str, ...]
    plan_fit_error_rad: float
    times: NDArray[np.float64]
    targets: NDArray[np.float64]
    measured: NDArray[np.float64]
    model_current: NDArray[np.float64]
    model_next: NDArray[np.float64]
    predicted_next: NDArray[np.float64]
    goals_current: NDArray[np.float64]
    goals_next: NDArray[np.float64]
    links: tuple[str, ...]
    motors: tuple[str, ...]
    model_fit: ModelFit | None = None

    @property
    def stopped_improving(self) -> bool:
        """The trend says the loop stopped improving (or got worse)."""
        return self.decision in (Decision.STOPPED, Decision.ROSE)

    def to_json(self) -> dict[str, object]:
        """The report (SI; ``retarget refine --json``'s last line): the measured and predicted peak deviation and
        NEXT's ``peak_torque_ratio`` at the top, then the details."""
        m, s = self.measurement, self.step
        return {
            "trial": self.record.trial,
            "measured_peak_deviation_m": m.peak_deviation_m,
            "predicted_peak_deviation_m": s.predicted_peak_deviation_m,
            "peak_torque_ratio": s.peak_torque_ratio,
            "measured_rms_deviation_m": m.rms_deviation_m,
            "measured_ring_out_peak_m": m.ring_out_peak_m,
            "predicted_rms_deviation_m": s.predicted_rms_deviation_m,
            "decision": self.decision.value,
            "stopped_improving": self.stopped_improving,
            "route": self.route,
            "route_reason": self.route_reason,
            "message": self.message,
            "measurement": asdict(m),
            "step": asdict(s),
            "alignment": self.alignment.to_json(),
            "model_fit": None if self.model_fit is None else asdict(self.model_fit),
            "plan_fit_error_rad": self.plan_fit_error_rad,
            "record": asdict(self.record),
            "history": [asdict(t) for t in self.history.trials],
            "warnings": list(self.warnings),
        }


# -- the orchestration --------------------------------------------------------------------------------------------


def refine(robot: str | Path, motion: Motion, plan: PlanFile, take: Take, options: RefineOptions | None = None,
           plan_options: PlanOptions | None = None, history: History | None = None,
           context: RefineContext | None = None, say: Callable[[str], None] | None = None,
           progress: Callable[[str, int, int], None] | None = None) -> Refinement:
    """The next plan from CURRENT and a take of it (module docstring). Nothing is written.

    Args:
        robot: the robot (name or YAML). motion: the input (the intent).
        plan: CURRENT (:func:`read_plan`). take: what the robot did while CURRENT played (:func:`read_take`).
        options: the step's and the checks' settings. plan_options: the planner's settings the plan was made with
            where its file does not record them (``retarget plan``'s defaults).
        history: the trials before this one (:meth:`History.load` of CURRENT's :func:`history_path`).
        context: a :func:`refine_context` of this robot, motion and plan settings to reuse (a node refining many
            trials); None: built here.
        say: human-readable lines (the model card). progress: ``progress(stage, done, total)``.

    Raises:
        RefineRefused: a plan or take that does not belong together (:class:`Refusal`).
        InputError: settings out of range.
    """
    options = RefineOptions() if options is None else options
    for name, why in options.out_of_range():
        raise InputError(f"refine setting {name} {why}")
    history = History() if history is None else history
    used = [t.trial for t in history.trials if t.recording_sha256 == take.sha256]
    if used:
        raise RefineRefused(Refusal.REUSED_TAKE, f"the take {take.source} was measured in trial {used[0]} already: "
                            "record a new take of CURRENT", trial=used[0])
    warnings: list[str] = []
    if history.trials and history.trials[-1].next_plan_sha256 and history.trials[-1].next_plan_sha256 != plan.sha256:
        warnings.append(f"{plan.path} is not the plan trial {history.trials[-1].trial} wrote "
                        f"({history.trials[-1].next_plan}): the history is continued regardless")
    context = refine_context(robot, motion, plan, plan_options, say, progress) if context is None else context
    warnings.extend(context.warnings)
    point = _plan_point(context, plan, options, progress)
    current = _measure(context, point, take, options)
    fit = None
    if options.refit:
        last = history.trials[-1] if history.trials else None
        start = (last.stiffness_factor, last.kp_factor) if last is not None else (1.0, 1.0)
        fit = refit_model(context, point.problem, point.x, current.measured, start, options, progress)
        if fit.used:
            # Aligned again onto the re-fitted model's prediction, which is closer to what the robot did.
            current = _measure(context, _on_model(point, scaled_problem(context, point.problem, fit.stiffness_factor,
                                                                        fit.kp_factor)), take, options)
    measurement = current.measurement
    decision, radius, trend_text, from_best = _trend(history, measurement.peak_deviation_m, options)
    route, route_reason = _route(fit, measurement, options)
    if route.endswith("advised"):
        radius *= 0.5
    basis = current
    if from_best:
        basis = _best_trial(context, history, fit, options, progress, warnings) or current
    step = learning_step(context, basis.point.problem, basis.point.x, basis.point.run, basis.measured, radius,
                         options, progress)
    pp = context.pp
    names = tuple(pp.problem.engine.motor_names)
    point = basis.point
    profiles = point.problem.profiles(step.x)
    grid = profiles.to_motion(names, point.rate_hz, t_stop=point.t_stop).shifted(point.t0)
    order = [names.index(n) for n in plan.motion.joint_names]
    next_plan = Motion(grid.time, tuple(plan.motion.joint_names), grid.positions[:, order])
    record = TrialRecord(
        trial=len(history.trials) + 1, plan=str(Path(plan.path).resolve()), plan_sha256=plan.sha256,
        recording=str(Path(take.source).resolve()), recording_sha256=take.sha256,
        bodies=dict(zip(take.links, take.names)), measured_peak_deviation_m=measurement.peak_deviation_m,
        measured_rms_deviation_m=measurement.rms_deviation_m, measured_ring_out_peak_m=measurement.ring_out_peak_m,
        model_peak_deviation_m=measurement.model_peak_deviation_m,
        predicted_peak_deviation_m=step.report.predicted_peak_deviation_m,
        peak_torque_ratio=step.report.peak_torque_ratio, trust_region_rad=step.report.trust_region_rad,
        step_rad=step.report.step_rad, decision=decision.value, route=route,
        stiffness_factor=fit.stiffness_factor if fit is not None else 1.0,
        kp_factor=fit.kp_factor if fit is not None else 1.0,
        time_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    message = (f"trial {record.trial}: {trend_text}; NEXT predicted at "
               f"{1e3 * step.report.predicted_peak_deviation_m:.2f} mm peak ({step.report.message}, "
               f"trust region {step.report.trust_region_rad:.3g} rad, limited by {step.report.limited_by})")
    comments = _next_comments(plan, record, step.report, context.pp)
    times = pp.targets.times
    return Refinement(
        next_plan=next_plan, comments=comments, record=record, history=history, alignment=current.alignment,
        measurement=measurement, step=step.report, decision=decision, route=route, route_reason=route_reason,
        message=message, warnings=tuple(warnings), plan_fit_error_rad=current.point.fit_error_rad, times=times,
        targets=pp.targets.positions, measured=current.measured, model_current=current.point.run.positions,
        model_next=step.run.positions, predicted_next=step.predicted,
        goals_current=np.asarray(current.point.problem.profiles(current.point.x).evaluate(times)),
        goals_next=np.asarray(profiles.evaluate(times)), links=tuple(pp.problem.tracking.links), motors=names,
        model_fit=fit)


def _route(fit: ModelFit | None, measurement: TrialMeasurement, options: RefineOptions) -> tuple[str, str]:
    """The route taken and why: the learning step, on the re-fitted model when it explains the take better; a
    re-fit with the robot's own tools is advised when the model still rings at another frequency than the take."""
    route = "re-fitted model, learning step" if fit is not None and fit.used else "learning step"
    reason = fit.message if fit is not None else "the planning model (no re-fit asked)"
    f_meas, f_model = measurement.ring_frequency_hz, measurement.model_ring_frequency_hz
    if f_meas is None or f_model is None:
        return route, reason + "; the ring-out is too small to compare its frequency with the model's"
    off = f_meas / f_model - 1.0
    if abs(off) > options.refit_frequency_tolerance:
        return route + "; a re-fit is advised", (
            f"{reason}; the take rings at {f_meas:.3g} Hz, the model at {f_model:.3g} Hz ({100 * off:+.0f} %, beyond "
            f"{100 * options.refit_frequency_tolerance:g} %): its sensitivities are off. Re-fit the materials "
            "(`retarget fit`) and the servos (`retarget fit-servo`), update the robot's files and plan again "
            "(`retarget plan`); this step takes half the trust region")
    return route, f"{reason}; the take rings at {f_meas:.3g} Hz, the model at {f_model:.3g} Hz"


def _on_model(point: _PlanPoint, problem: AdjointProblem) -> _PlanPoint:
    """``point`` on another model (``problem``): its run there."""
    if problem is point.problem:
        return point
    return replace(point, problem=problem, run=evaluate(problem, point.x, gradient=False))


def _best_trial(context: RefineContext, history: History, fit: ModelFit | None, options: RefineOptions,
                progress: Callable[[str, int, int], None] | None, warnings: list[str]) -> _Measured | None:
    """The best earlier trial's plan and take, measured again (the step after a rise starts there); None (with a
    warning) when its files are gone or changed."""
    best = history.best
    assert best is not None
    try:
        plan = read_plan(best.plan)
        take = read_take(best.recording, list(best.bodies.items()))
    except InputError as exc:
        warnings.append(f"the best trial ({best.trial}) cannot be read again ({exc}): stepping from CURRENT")
        return None
    if plan.sha256 != best.plan_sha256 or take.sha256 != best.recording_sha256:
        warnings.append(f"the best trial's files ({best.plan}, {best.recording}) changed since: stepping from CURRENT")
        return None
    point = _plan_point(context, plan, options, progress)
    if fit is not None and fit.used:
        point = _on_model(point, scaled_problem(context, point.problem, fit.stiffness_factor, fit.kp_factor))
    return _measure(context, point, take, options)


#: The first comment line of a plan ``retarget refine`` wrote.
REFINED_PREFIX = "retarget refine: "


def _next_comments(plan: PlanFile, record: TrialRecord, step: LearningStep, pp: PlanProblem) -> tuple[str, ...]:
    """NEXT's comment lines: where NEXT came from, CURRENT's (the servos it was planned for) and the plan settings
    (CURRENT's, or the problem's when CURRENT does not record them)."""
    kept = [c for c in plan.comments if not c.startswith(REFINED_PREFIX)]
    if not any(c.startswith(PLAN_SETTINGS_PREFIX) for c in kept):
        kept.append(PLAN_SETTINGS_PREFIX + json.dumps(plan_settings(pp), sort_keys=True))
    first = (f"{REFINED_PREFIX}trial {record.trial}: {Path(record.plan).name} refined from the take "
             f"{Path(record.recording).name} (measured peak {1e3 * record.measured_peak_deviation_m:.2f} mm, "
             f"predicted {1e3 * step.predicted_peak_deviation_m:.2f} mm; docs/refine.md)")
    return (first, *kept)


def write_refinement(refinement: Refinement, out: str | Path) -> tuple[Path, ...]:
    """Write NEXT (``out``: .csv with its comment lines, .json or .yaml), the JointTrajectory YAML beside a
    .csv/.json (as ``retarget plan --out`` does) and the history (:func:`history_path`) with this trial appended;
    every file first to a temporary name, then all renamed: on any error nothing is written.

    Returns:
        The written paths (NEXT first, the history last).

    Raises:
        InputError: an ``out`` that is not .csv, .json or .yaml.
    """

    path = Path(out)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".json", ".yaml", ".yml"):
        raise InputError(f"--out must end in .csv, .json or .yaml, got {path}")
    targets = [path] + ([path.with_suffix(".yaml")] if suffix in (".csv", ".json") else []) + [history_path(path)]
    with contextlib.ExitStack() as stack:
        # Entered last to first, so that on leaving they rename first to last (NEXT first, the history last); an
        # error, also in a rename, deletes every temporary file not yet renamed.
        temps = [stack.enter_context(atomic_path(target)) for target in reversed(targets)][::-1]
        for tmp in temps[:-1]:
            options = {"comments": list(refinement.comments)} if tmp.suffix.lower() == ".csv" else {}
            save_motion(tmp, refinement.next_plan, **options)
        record = replace(refinement.record, next_plan=str(path.resolve()),
                         next_plan_sha256=_file_digest(temps[0], path.name))
        history = History((*refinement.history.trials, record))
        temps[-1].write_text(json.dumps(history.to_json(), indent=1) + "\n", encoding="utf-8")
    return tuple(targets)
