"""Path and goal tolerances of a FollowJointTrajectory goal, resolved against the server's defaults.

control_msgs semantics per joint and component (position, velocity, acceleration): a positive value sets the
tolerance, ``0`` keeps the server's default, ``-1`` removes the tolerance (no check); anything else is invalid.
Internally an unchecked tolerance is ``inf``; a server default of ``0`` also means "not checked", as in
joint_trajectory_controller. A ``goal_time_tolerance`` of ``0`` from the goal keeps the default; a resolved
``0`` means "wait for the goal tolerance without a time limit".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retarget.control.errors import ErrorCode, TrajectoryRejected

__all__ = ["COMPONENTS", "GoalTolerance", "Tolerances", "ToleranceViolation", "check_tolerance",
           "resolve_tolerances"]

#: Column order of tolerance arrays.
COMPONENTS: tuple[str, ...] = ("position", "velocity", "acceleration")
_UNITS = ("rad", "rad/s", "rad/s^2")


@dataclass(frozen=True)
class GoalTolerance:
    """One ``control_msgs/JointTolerance`` entry as received.

    Attributes:
        name: Joint name.
        position: [rad]; ``0`` default, ``-1`` none.
        velocity: [rad/s]; same convention.
        acceleration: [rad/s^2]; same convention.
    """

    name: str
    position: float = 0.0
    velocity: float = 0.0
    acceleration: float = 0.0


@dataclass(frozen=True, eq=False)
class Tolerances:
    """Tolerances in force for one goal.

    Attributes:
        joint_names: Controller joints ``(m,)``.
        path: ``(m, 3)`` [rad, rad/s, rad/s^2] checked while moving; ``inf`` = unchecked.
        goal: ``(m, 3)`` checked at and after the last point; ``inf`` = unchecked.
        goal_time: [s] allowed past the last point to get within ``goal``; ``0`` = no limit.
    """

    joint_names: tuple[str, ...]
    path: np.ndarray
    goal: np.ndarray
    goal_time: float


@dataclass(frozen=True)
class ToleranceViolation:
    """One joint component outside its tolerance.

    Attributes:
        joint: Joint name.
        component: ``"position"``, ``"velocity"`` or ``"acceleration"``.
        error: Desired minus actual [rad], [rad/s] or [rad/s^2].
        tolerance: The tolerance exceeded.
    """

    joint: str
    component: str
    error: float
    tolerance: float

    def __str__(self) -> str:
        unit = _UNITS[COMPONENTS.index(self.component)]
        return (f"joint {self.joint!r} {self.component} error {self.error:.4g} {unit} exceeds the tolerance "
                f"{self.tolerance:.4g} {unit}")


def _defaults(value: float | Sequence[float] | np.ndarray, m: int, what: str) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full((m, 3), math.inf)
        arr[:, 0] = float(value)  # type: ignore[arg-type]
    elif arr.shape == (m,):
        arr = np.column_stack([arr, np.full(m, math.inf), np.full(m, math.inf)])
    elif arr.shape != (m, 3):
        raise ValueError(f"default {what} tolerance must be a scalar, (m,) or (m, 3); got shape {arr.shape}")
    arr = arr.copy()
    if np.any(arr < 0):
        raise ValueError(f"default {what} tolerances must be >= 0 (0 = unchecked)")
    arr[arr == 0.0] = math.inf
    return arr


def _apply(base: np.ndarray, entries: Sequence[GoalTolerance], joints: Sequence[str], what: str) -> np.ndarray:
    out = base.copy()
    for e in entries:
        if e.name not in joints:
            raise TrajectoryRejected(ErrorCode.INVALID_GOAL, f"{what} tolerance names joint {e.name!r}, which is not "
                                     f"one of the controller's joints", joint=e.name)
        j = list(joints).index(e.name)
        for c, value in enumerate((e.position, e.velocity, e.acceleration)):
            value = float(value)
            if value > 0.0 and math.isfinite(value):
                out[j, c] = value
            elif value == -1.0:
                out[j, c] = math.inf
            elif value != 0.0:
                raise TrajectoryRejected(ErrorCode.INVALID_GOAL,
                                         f"{what} tolerance {COMPONENTS[c]} of joint {e.name!r} is {value}: use a "
                                         "positive value, 0 (default) or -1 (no tolerance)", joint=e.name)
    return out


def resolve_tolerances(joint_names: Sequence[str], *, default_path: float | Sequence[float] | np.ndarray = 0.0,
                       default_goal: float | Sequence[float] | np.ndarray = 0.0, default_goal_time: float = 0.0,
                       path: Sequence[GoalTolerance] = (), goal: Sequence[GoalTolerance] = (),
                       goal_time: float = 0.0) -> Tolerances:
    """Combine the server's defaults with a goal's tolerances.

    Args:
        joint_names: Controller joints ``(m,)``.
        default_path: Server default path tolerance: a position tolerance [rad] for all joints, ``(m,)`` per-joint
            position tolerances, or ``(m, 3)``; ``0`` = unchecked.
        default_goal: Server default goal tolerance, same forms.
        default_goal_time: [s], ``0`` = no limit.
        path: The goal's ``path_tolerance`` entries.
        goal: The goal's ``goal_tolerance`` entries.
        goal_time: The goal's ``goal_time_tolerance`` [s]; ``0`` keeps the default.

    Raises:
        TrajectoryRejected: ``INVALID_GOAL`` for an unknown joint or an invalid (negative, not -1, or NaN) value.
    """
    joints = tuple(joint_names)
    m = len(joints)
    if not math.isfinite(goal_time) or goal_time < 0.0:
        raise TrajectoryRejected(ErrorCode.INVALID_GOAL, f"goal_time_tolerance is {goal_time} s: it must be >= 0")
    return Tolerances(joints, _apply(_defaults(default_path, m, "path"), path, joints, "path"),
                      _apply(_defaults(default_goal, m, "goal"), goal, joints, "goal"),
                      float(goal_time) if goal_time > 0.0 else float(default_goal_time))


def check_tolerance(joint_names: Sequence[str], tolerance: np.ndarray, position_error: np.ndarray,
                    velocity_error: np.ndarray | None = None,
                    acceleration_error: np.ndarray | None = None) -> list[ToleranceViolation]:
    """Every component outside its tolerance.

    Args:
        joint_names: ``(m,)``.
        tolerance: ``(m, 3)``, ``inf`` = unchecked.
        position_error: Desired minus actual [rad] ``(m,)``.
        velocity_error: [rad/s] ``(m,)`` or ``None`` when velocities are not measured (then not checked).
        acceleration_error: [rad/s^2] ``(m,)`` or ``None``.

    Returns:
        The violations, empty when within tolerance.
    """
    out: list[ToleranceViolation] = []
    for c, err in enumerate((position_error, velocity_error, acceleration_error)):
        if err is None:
            continue
        err = np.asarray(err, dtype=float)
        for j in np.flatnonzero(~(np.abs(err) <= tolerance[:, c])):
            out.append(ToleranceViolation(joint_names[j], COMPONENTS[c], float(err[j]), float(tolerance[j, c])))
    return out
