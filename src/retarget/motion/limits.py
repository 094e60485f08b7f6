"""Joint limits and the check of a motion against them.

Limits come from the robot's URDF (``<limit lower upper velocity>``) or from a plain mapping
``{joint: (lower [rad], upper [rad], max_velocity [rad/s])}``; ``None`` or an infinite bound means unlimited.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Optional, Protocol, Union

import numpy as np

if TYPE_CHECKING:
    from retarget.model.loader import RobotSection
    from retarget.motion.motion import Motion

__all__ = ["JointLimit", "LimitLike", "LimitViolation", "RowLabel", "as_joint_limits", "check_plan_input",
           "HOLD_RAD", "find_limit_violations", "hold_note",
           "robot_position_limits", "true_runs"]

#: Maps a sample index to how the user sees that row (``"row 12"``, ``"line 14"``).
RowLabel = Callable[[int], str]


def default_row_label(index: int) -> str:
    return f"row {index}"


class JointLimit(NamedTuple):
    """Limits of one joint.

    Attributes:
        lower: Lowest position [rad] (``-inf`` if unlimited).
        upper: Highest position [rad] (``+inf`` if unlimited).
        velocity: Highest absolute speed [rad/s] (``+inf`` if unlimited).
    """

    lower: float = -math.inf
    upper: float = math.inf
    velocity: float = math.inf


class _LimitAttributes(Protocol):
    """A limit object with bounds as attributes (a parsed URDF ``<limit>``; ``velocity`` may be missing)."""

    lower: float | None
    upper: float | None


#: One joint's limit as :func:`as_joint_limits` takes it: a :class:`JointLimit`, a ``(lower, upper[, velocity])``
#: sequence [rad, rad/s] (None: unbounded) or an object with ``lower``/``upper``/``velocity`` attributes.
LimitLike = Union[JointLimit, Sequence[Optional[float]], _LimitAttributes]


def _bound(value: float | None, default: float) -> float:
    return default if value is None else float(value)


def as_joint_limits(limits: Mapping[str, LimitLike]) -> dict[str, JointLimit]:
    """Normalize a limits mapping to :class:`JointLimit` values.

    Args:
        limits: ``{joint: limit}`` where a limit is a :class:`JointLimit`, a ``(lower, upper[, velocity])`` sequence
            [rad, rad/s], or any object with ``lower``/``upper``/``velocity`` attributes (for example a parsed URDF
            ``<limit>``). ``None`` entries mean unlimited.

    Returns:
        ``{joint: JointLimit}``.
    """
    out: dict[str, JointLimit] = {}
    for name, lim in limits.items():
        if isinstance(lim, JointLimit):
            out[name] = lim
        elif hasattr(lim, "lower") or hasattr(lim, "upper"):
            out[name] = JointLimit(_bound(getattr(lim, "lower", None), -math.inf),
                                   _bound(getattr(lim, "upper", None), math.inf),
                                   _bound(getattr(lim, "velocity", None), math.inf))
        else:
            seq = list(lim) + [None] * (3 - len(lim))
            out[name] = JointLimit(_bound(seq[0], -math.inf), _bound(seq[1], math.inf), _bound(seq[2], math.inf))
    return out


@dataclass(frozen=True)
class LimitViolation:
    """One contiguous run of samples where one joint leaves one of its limits.

    Attributes:
        joint: Joint name.
        kind: ``"lower"``, ``"upper"`` (position [rad]) or ``"velocity"`` (speed [rad/s]).
        row: Sample index of the worst value in the run (for velocity: the sample reached too fast).
        time: Time of that sample [s].
        value: Worst position [rad] or absolute speed [rad/s] in the run.
        limit: The limit exceeded [rad] or [rad/s].
        start_time: Time the run starts [s].
        end_time: Time the run ends [s].
    """

    joint: str
    kind: str
    row: int
    time: float
    value: float
    limit: float
    start_time: float
    end_time: float

    def describe(self, row_label: RowLabel | None = None) -> str:
        """One-line human description naming joint, row, time, value and limit (radians and degrees)."""
        label = (row_label or default_row_label)(self.row)
        if self.kind == "velocity":
            what = (f"speed {abs(self.value):.4g} rad/s ({math.degrees(abs(self.value)):.4g} deg/s) > "
                    f"limit {self.limit:.4g} rad/s")
        else:
            rel = "<" if self.kind == "lower" else ">"
            what = (f"angle {self.value:.4g} rad ({math.degrees(self.value):.4g} deg) {rel} {self.kind} limit "
                    f"{self.limit:.4g} rad ({math.degrees(self.limit):.4g} deg)")
        span = (f", violated from t = {self.start_time:.4g} s to {self.end_time:.4g} s"
                if self.end_time > self.start_time else "")
        return f"joint '{self.joint}' at {label} (t = {self.time:.4g} s): {what}{span}"


def true_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive ``(first, last)`` index pairs of the True runs of a boolean vector."""
    padded = np.concatenate(([False], mask, [False]))
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]


def find_limit_violations(time: np.ndarray, joint_names: tuple[str, ...], positions: np.ndarray,
                          limits: Mapping[str, LimitLike], *, position_tolerance: float = 1e-9,
                          velocity_tolerance: float = 1e-9) -> list[LimitViolation]:
    """All limit violations of sampled joint positions.

    Speeds are the slopes between consecutive samples, i.e. the exact speeds of the piecewise-linear motion a
    servo plays when the samples are streamed as setpoints. Joints without an entry in ``limits`` are not checked.

    Args:
        time: Sample times [s], shape ``(n,)``, strictly increasing.
        joint_names: Joint names, length ``m``.
        positions: Joint positions [rad], shape ``(n, m)``.
        limits: See :func:`as_joint_limits`.
        position_tolerance: Allowed excess over a position limit [rad].
        velocity_tolerance: Allowed relative excess over a velocity limit.

    Returns:
        Violations ordered by joint (motion order), then kind, then time.
    """
    norm = as_joint_limits(limits)
    out: list[LimitViolation] = []
    slopes = np.diff(positions, axis=0) / np.diff(time)[:, None] if len(time) > 1 else np.zeros((0, len(joint_names)))
    for j, name in enumerate(joint_names):
        if name not in norm:
            continue
        lim = norm[name]
        q = positions[:, j]
        for kind, bound, mask in (("lower", lim.lower, q < lim.lower - position_tolerance),
                                  ("upper", lim.upper, q > lim.upper + position_tolerance)):
            for a, b in true_runs(mask):
                seg = q[a:b + 1]
                worst = a + int(np.argmin(seg) if kind == "lower" else np.argmax(seg))
                out.append(LimitViolation(name, kind, worst, float(time[worst]), float(q[worst]), float(bound),
                                          float(time[a]), float(time[b])))
        if math.isfinite(lim.velocity) and len(slopes):
            speed = np.abs(slopes[:, j])
            for a, b in true_runs(speed > lim.velocity * (1.0 + velocity_tolerance)):
                worst = a + int(np.argmax(speed[a:b + 1]))
                out.append(LimitViolation(name, "velocity", worst + 1, float(time[worst + 1]), float(speed[worst]),
                                          float(lim.velocity), float(time[a]), float(time[b + 1])))
    return out


def _robot_description(robot: str | Path) -> tuple[RobotSection, str]:
    """The robot YAML's ``retarget:`` section and its URDF as XML, found as the model loader finds them (a URDF
    beside the YAML, in ``../urdf`` or in the package's ``urdf/``; xacro run with the YAML's ``xacro_args``)."""
    from retarget.model import library
    from retarget.model.loader import read_robot_yaml, robot_urdf

    path = Path(robot) if Path(robot).is_file() else library.resolve_robot(str(robot))
    cfg = read_robot_yaml(path)
    return cfg, robot_urdf(cfg, path)[1]


def robot_position_limits(robot: str | Path) -> dict[str, JointLimit]:
    """The position limits of a robot's URDF joints, speeds unlimited (the servo's speed is the planner's to report).

    Args:
        robot: A robot or rig name, or the path of its params YAML (:func:`retarget.model.library.resolve_robot`).

    Returns:
        ``{joint: JointLimit(lower [rad], upper [rad], inf)}`` for every actuated URDF joint.

    Raises:
        UnknownNameError: Unknown robot.
        ModelError: The URDF is missing or xacro fails.
    """
    from retarget.motion.kinematics import RigKinematics

    _, xml = _robot_description(robot)
    return {name: JointLimit(lim.lower, lim.upper) for name, lim in RigKinematics(xml).limits.items()}


#: Where a motor that a motion has no column for stays [rad]: the description's zero pose, the pose the robot's
#: model is built in (docs/robot-description.md, "Motions").
HOLD_RAD = 0.0


def hold_note(held: Sequence[str]) -> str:
    """The line that says which motors a motion leaves out stay at :data:`HOLD_RAD`."""
    return f"the motion has no column for {', '.join(held)}: held at {HOLD_RAD:g} rad (the zero pose)"


def check_plan_input(robot: str | Path, motion: Motion | str | Path) -> Motion:
    """Refuse a motion that leaves the robot's joint position limits, before any model work.

    Reading the URDF takes milliseconds, training a reduced model on an impossible motion minutes (and caches it),
    so both planning paths (``retarget plan`` and the planner node's request) call this first. Speeds beyond the
    servo's limit are not refused here: the plan reports them.

    Args:
        robot: A robot or rig name, or the path of its params YAML.
        motion: The motion, or a file or library name (``"single_rod/step_30"``) to read it from.

    Returns:
        The motion (read from the file when a file or name was given); a motor it has no column for holds
        :data:`HOLD_RAD` (the description's zero pose) throughout, after the motors in the robot's order.

    Raises:
        MotionLimitError: A joint leaves its position limits; the message names the joint, the row (the file's line
            or row when read from a file), the time [s] and the value (rad and deg).
        JointMismatchError: A motor without a column whose zero pose is beyond its limits, or a motion without
            some motors that moves joints that are not motors (another robot's motion).
        MotionFormatError, UnknownNameError: An unreadable motion file, an unknown motion or robot.
    """
    from retarget.motion.errors import JointMismatchError
    from retarget.motion.io import load_motion
    from retarget.motion.kinematics import RigKinematics

    cfg, xml = _robot_description(robot)
    limits = {name: JointLimit(lim.lower, lim.upper) for name, lim in RigKinematics(xml).limits.items()}
    source = None
    if isinstance(motion, (str, Path)):
        source = str(motion)
        motion = load_motion(motion, joint_limits=limits)
    else:
        motion.assert_within_limits(limits)
    motors = [str(m) for m in cfg.get("motors") or []]
    held = motion.held(motors)
    outside = [f"{m} [{limits[m].lower:.4g}, {limits[m].upper:.4g}] rad" for m in held
               if m in limits and not limits[m].lower <= HOLD_RAD <= limits[m].upper]
    if outside:
        raise JointMismatchError(f"the motion has no column for motors whose zero pose is beyond their limits "
                                 f"({', '.join(outside)}) of robot {str(robot)!r}: give them a column", missing=held,
                                 source=source)
    _, unknown = motion.foreign_to(motors)
    if unknown:
        raise JointMismatchError(f"the motion has no column for motors {held} of robot {str(robot)!r} and moves "
                                 f"joints {unknown} that are not its motors: a motion of another robot?",
                                 missing=held, unknown=unknown, source=source)
    return motion.with_joints([*motors, *unknown], HOLD_RAD) if held else motion
