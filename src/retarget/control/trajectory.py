"""Joint trajectory goals and their validation, with the semantics of ros2_control's joint_trajectory_controller.

A goal arrives as joint names plus points in any joint order (:class:`GoalPoint`, plain Python values, possibly
malformed). :func:`validate_trajectory` checks it the way the joint_trajectory_controller (JTC) does — joint set,
point sizes, strictly increasing ``time_from_start``, header stamp — and adds what this project needs on servos:
finite values, non-negative times, position limits from the URDF and velocity limits (URDF and servo), rejected,
never clamped — including the first segment, from the state the robot is in to the first point
(:func:`check_first_segment`), which JTC does not check. A valid goal comes back as a :class:`Trajectory` in the
controller's joint order.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from retarget.control.errors import ErrorCode, TrajectoryRejected
from retarget.control.interpolation import TrajectorySampler
from retarget.motion.limits import JointLimit

__all__ = ["GoalPoint", "Trajectory", "check_first_segment", "late_start_note", "validate_trajectory"]

#: Slack on limit checks [rad] or [rad/s], so a trajectory planned exactly at a limit is not rejected for rounding.
LIMIT_SLACK = 1e-9


@dataclass(frozen=True)
class GoalPoint:
    """One point of an incoming trajectory, as received (sizes not yet checked).

    Attributes:
        time_from_start: [s] relative to the trajectory start.
        positions: [rad] one per goal joint.
        velocities: [rad/s] empty or one per goal joint.
        accelerations: [rad/s^2] empty or one per goal joint.
        effort: [N m] must be empty (position-controlled servos take no effort command).
    """

    time_from_start: float
    positions: Sequence[float]
    velocities: Sequence[float] = ()
    accelerations: Sequence[float] = ()
    effort: Sequence[float] = ()


@dataclass(frozen=True, eq=False)
class Trajectory:
    """A validated trajectory in the controller's joint order.

    Attributes:
        joint_names: Controller joints, ``(m,)``.
        time: Times from start [s], ``(n,)``, strictly increasing, ``>= 0``.
        positions: [rad], ``(n, m)``.
        velocities: [rad/s], ``(n, m)``, or ``None`` when the goal gave none.
        accelerations: [rad/s^2], ``(n, m)``, or ``None`` when the goal gave none.
        start_time: Absolute start time [s] on the node's clock (the header stamp, or "now" for a zero stamp).
    """

    joint_names: tuple[str, ...]
    time: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray | None = None
    accelerations: np.ndarray | None = None
    start_time: float = 0.0

    @property
    def duration(self) -> float:
        """``time_from_start`` of the last point [s]."""
        return float(self.time[-1])


def _reject_joints(message: str, joint: str | None = None) -> TrajectoryRejected:
    return TrajectoryRejected(ErrorCode.INVALID_JOINTS, message, joint=joint)


def _check_joint_names(goal_joints: Sequence[str], controller_joints: Sequence[str],
                       partial: bool = False) -> list[int]:
    """Index of each goal joint in the controller order (``partial``: in the order of the controller joints the goal
    names); raises INVALID_JOINTS on any mismatch (``partial``: but a missing joint)."""
    if not goal_joints:
        raise _reject_joints("empty joint_names on the incoming trajectory")
    seen: set[str] = set()
    for name in goal_joints:
        if name in seen:
            raise _reject_joints(f"joint {name!r} appears more than once in joint_names", name)
        seen.add(name)
    unknown = [n for n in goal_joints if n not in controller_joints]
    if unknown:
        raise _reject_joints(f"joint {unknown[0]!r} is not one of the controller's joints "
                             f"{list(controller_joints)}", unknown[0])
    if partial:
        present = [n for n in controller_joints if n in seen]
        return [present.index(n) for n in goal_joints]
    missing = [n for n in controller_joints if n not in seen]
    if missing:
        raise _reject_joints(f"joints {missing} are missing: a goal must name all {len(controller_joints)} "
                             "controller joints (partial goals are not allowed)", missing[0])
    return [list(controller_joints).index(n) for n in goal_joints]


def _field(point: GoalPoint, i: int, name: str, m: int, allow_empty: bool) -> np.ndarray | None:
    values = getattr(point, name)
    if allow_empty and len(values) == 0:
        return None
    if len(values) != m:
        raise TrajectoryRejected(ErrorCode.INVALID_GOAL,
                                 f"mismatch between joint_names ({m}) and {name} ({len(values)}) at point #{i}",
                                 point=i)
    arr = np.asarray(values, dtype=float)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise TrajectoryRejected(ErrorCode.INVALID_GOAL, f"{name}[{bad[0]}] at point #{i} is {arr[bad[0]]}: "
                                 "every value must be finite", point=i)
    return arr


def _stack(rows: list[np.ndarray | None], name: str) -> np.ndarray | None:
    present = [r is not None for r in rows]
    if not any(present):
        return None
    if not all(present):
        first_missing = present.index(False)
        raise TrajectoryRejected(ErrorCode.INVALID_GOAL, f"{name} are given for some points but not for point "
                                 f"#{first_missing}: give them for all points or none", point=first_missing)
    return np.vstack(rows)  # type: ignore[arg-type]


def validate_trajectory(goal_joints: Sequence[str], points: Sequence[GoalPoint], *,
                        controller_joints: Sequence[str],
                        limits: Mapping[str, JointLimit] | None = None,
                        max_velocity: float = math.inf,
                        stamp: float = 0.0, now: float = 0.0,
                        start_positions: Sequence[float] | None = None,
                        control_period: float = 0.0, partial: bool = False) -> Trajectory:
    """Validate a FollowJointTrajectory goal and reorder it to the controller's joints.

    Args:
        goal_joints: Joint names of the goal, any order, ``(m,)``.
        points: The goal's points.
        controller_joints: The controller's joints, ``(m,)``.
        limits: ``{joint: JointLimit}`` from the URDF; missing joints are unlimited.
        max_velocity: Servo speed limit [rad/s] applied to every joint on top of the URDF limit.
        stamp: Header stamp [s]; 0 means "start now".
        now: Current time [s] on the node's clock.
        start_positions: Current positions [rad] in controller order, ``(m,)``; if given, the first segment is
            checked too (:func:`check_first_segment`).
        control_period: Shortest time a commanded move can take [s] (one control tick), see
            :func:`check_first_segment`.
        partial: accept a goal that leaves controller joints out (the planner's animations: the motors they leave
            out hold their zero pose); the trajectory then has the goal's joints only, in controller order.

    Returns:
        The trajectory in controller order with ``start_time`` set.

    Raises:
        TrajectoryRejected: With ``INVALID_JOINTS`` for wrong, missing or duplicate names, ``OLD_HEADER_TIMESTAMP``
            for a trajectory that ends in the past, ``INVALID_GOAL`` for everything else.
    """
    order = _check_joint_names(goal_joints, controller_joints, partial)
    if partial:
        named = set(goal_joints)
        controller_joints = [n for n in controller_joints if n in named]
    m = len(controller_joints)
    if not points:
        raise TrajectoryRejected(ErrorCode.INVALID_GOAL, "empty trajectory: a goal needs at least one point")
    times = np.array([float(p.time_from_start) for p in points])
    for i, t in enumerate(times):
        if not math.isfinite(t) or t < 0.0:
            raise TrajectoryRejected(ErrorCode.INVALID_GOAL,
                                     f"time_from_start of point #{i} is {t} s: it must be finite and >= 0", point=i)
        if i > 0 and t <= times[i - 1]:
            raise TrajectoryRejected(ErrorCode.INVALID_GOAL,
                                     f"time_from_start is not strictly increasing between points #{i - 1} and "
                                     f"#{i} ({times[i - 1]} s, {t} s)", point=i)
    pos_rows, vel_rows, acc_rows = [], [], []
    for i, p in enumerate(points):
        pos_rows.append(_field(p, i, "positions", m, allow_empty=False))
        vel_rows.append(_field(p, i, "velocities", m, allow_empty=True))
        acc_rows.append(_field(p, i, "accelerations", m, allow_empty=True))
        if len(p.effort):
            raise TrajectoryRejected(ErrorCode.INVALID_GOAL, f"effort given at point #{i}: the servos are position "
                                     "controlled, effort must be empty", point=i)
    inverse = np.argsort(order)  # goal column j goes to controller column order[j]
    positions = np.vstack(pos_rows)[:, inverse]  # type: ignore[arg-type]
    velocities = _stack(vel_rows, "velocities")
    accelerations = _stack(acc_rows, "accelerations")
    if velocities is not None:
        velocities = velocities[:, inverse]
    if accelerations is not None:
        accelerations = accelerations[:, inverse]
    if accelerations is not None and velocities is None:
        raise TrajectoryRejected(ErrorCode.INVALID_GOAL, "accelerations given without velocities")

    if stamp != 0.0 and stamp + times[-1] < now:
        raise TrajectoryRejected(ErrorCode.OLD_HEADER_TIMESTAMP,
                                 f"trajectory stamped {stamp:.3f} s ends at {stamp + times[-1]:.3f} s, before now "
                                 f"({now:.3f} s)")
    _check_limits(tuple(controller_joints), times, positions, velocities, limits or {}, max_velocity)
    trajectory = Trajectory(tuple(controller_joints), times, positions, velocities, accelerations,
                            start_time=now if stamp == 0.0 else stamp)
    if start_positions is not None:
        check_first_segment(trajectory, start_positions, now=now, limits=limits, max_velocity=max_velocity,
                            control_period=control_period)
    return trajectory


def late_start_note(late_s: float, control_period: float) -> str:
    """What to tell of a goal whose execution began ``late_s`` [s] after its header stamp: "" when it began within
    one ``control_period`` of it. A later start commands the trajectory where it is by then (the robot never plays
    its first ``late_s``), which a client that took the stamp as the motion's start (a take's time alignment) must
    hear of."""
    if not late_s > control_period:
        return ""
    return (f"execution began {late_s:.3f} s after the goal's stamp (more than one control period, "
            f"{control_period:.3g} s): the trajectory's first {late_s:.3f} s were not played as sent (give the goal a "
            "later stamp)")


def check_first_segment(trajectory: Trajectory, start_positions: Sequence[float], *, now: float,
                        limits: Mapping[str, JointLimit] | None = None, max_velocity: float = math.inf,
                        control_period: float = 0.0, origin: str = "current position") -> None:
    """Reject a trajectory whose move from the robot's present state to it exceeds a velocity limit.

    Execution starts at ``now`` from ``start_positions`` (:class:`~retarget.control.TrajectorySampler` with
    ``start_offset = now - start_time``). If the first point lies ahead, the first segment lasts until it is due;
    a first point at ``time_from_start`` 0 (or already due) is commanded at once, which the servos see as a step
    within one control period. Either way the mean speed ``|Δq| / duration`` over that move, with the duration at
    least ``control_period``, must not exceed the joint's limit: the same rule as for every other segment.

    Args:
        trajectory: A validated trajectory.
        start_positions: Positions the move starts from [rad], controller order, ``(m,)``.
        now: Current time [s], the clock of ``trajectory.start_time``.
        limits: ``{joint: JointLimit}``; missing joints are unlimited.
        max_velocity: Servo speed limit [rad/s] for every joint.
        control_period: Shortest time a commanded move takes [s] (the controller's tick); 0 allows no jump at all.
        origin: What ``start_positions`` is, for the message ("current position", "commanded position").

    Raises:
        TrajectoryRejected: ``INVALID_GOAL`` naming the joint, the speed needed, the limit and the shortest
            ``time_from_start`` of point #0 that would do.
    """
    start = np.asarray(start_positions, dtype=float).reshape(len(trajectory.joint_names))
    offset = now - trajectory.start_time
    due_in = float(trajectory.time[0]) - offset
    step = f"a step lasts one control period, {control_period:.3g} s"
    if due_in > 0.0:
        target, where = trajectory.positions[0], "point #0"
        duration = max(due_in, control_period)
        when = f"in {duration:.3g} s"
    elif due_in == 0.0:
        target, where = trajectory.positions[0], "point #0"
        duration = control_period
        when = f"at once (time_from_start {trajectory.time[0]:.3g} s: {step})"
    else:
        sample = TrajectorySampler(trajectory, start, start_offset=offset).sample(offset)
        target, where = sample.positions, f"where the trajectory is now (before point #{sample.index})"
        duration = control_period
        when = f"at once (point #0 was due {-due_in:.3g} s ago: {step})"
    limits = limits or {}
    for j, name in enumerate(trajectory.joint_names):
        vmax = min(limits.get(name, JointLimit()).velocity, max_velocity)
        distance = abs(float(target[j]) - start[j])
        if distance <= LIMIT_SLACK or distance <= (vmax + LIMIT_SLACK) * duration:
            continue
        speed = distance / duration if duration > 0.0 else math.inf
        needed = offset + distance / vmax if vmax > 0.0 else math.inf
        raise TrajectoryRejected(
            ErrorCode.INVALID_GOAL,
            f"joint {name!r} must move at {speed:.3g} rad/s from its {origin} {start[j]:.4g} rad to "
            f"{where} at {float(target[j]):.4g} rad {when}, above its limit {vmax:.3g} rad/s: give point #0 a "
            f"time_from_start of at least {needed:.3g} s, or start the trajectory at the {origin}",
            joint=name, point=0)


def _check_limits(joints: tuple[str, ...], times: np.ndarray, positions: np.ndarray, velocities: np.ndarray | None,
                  limits: Mapping[str, JointLimit], max_velocity: float) -> None:
    """Reject (never clamp) positions outside the joint limits and speeds above the joint or servo limit.

    The mean speed over a segment, ``|Δq| / Δt``, is a lower bound on the peak speed of any interpolation through
    the two points, so a segment whose mean speed exceeds the limit cannot be executed by any spline.
    """
    for j, name in enumerate(joints):
        lim = limits.get(name, JointLimit())
        vmax = min(lim.velocity, max_velocity)
        col = positions[:, j]
        low = np.flatnonzero(col < lim.lower - LIMIT_SLACK)
        high = np.flatnonzero(col > lim.upper + LIMIT_SLACK)
        for idx, side, bound in ((low, "lower", lim.lower), (high, "upper", lim.upper)):
            if idx.size:
                i = int(idx[0])
                raise TrajectoryRejected(ErrorCode.INVALID_GOAL,
                                         f"position of joint {name!r} at point #{i} is {col[i]:.6g} rad, beyond its "
                                         f"{side} limit {bound:.6g} rad", joint=name, point=i)
        if velocities is not None:
            fast = np.flatnonzero(np.abs(velocities[:, j]) > vmax + LIMIT_SLACK)
            if fast.size:
                i = int(fast[0])
                raise TrajectoryRejected(ErrorCode.INVALID_GOAL,
                                         f"velocity of joint {name!r} at point #{i} is {velocities[i, j]:.6g} rad/s, "
                                         f"above its limit {vmax:.6g} rad/s", joint=name, point=i)
        if col.size > 1:
            mean_speed = np.abs(np.diff(col)) / np.diff(times)
            fast = np.flatnonzero(mean_speed > vmax + LIMIT_SLACK)
            if fast.size:
                i = int(fast[0]) + 1
                raise TrajectoryRejected(ErrorCode.INVALID_GOAL,
                                         f"joint {name!r} must move at {mean_speed[i - 1]:.6g} rad/s on average to "
                                         f"reach point #{i}, above its limit {vmax:.6g} rad/s", joint=name, point=i)
