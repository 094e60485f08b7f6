"""The :class:`Motion` type: joint angles over time for named joints.

A motion is a plain, immutable value: sample times ``time`` [s] ``(n,)``, joint names ``(m,)`` and joint positions
[rad] ``(n, m)``. Everything that reads or writes motion files, plays them or optimizes them exchanges this type.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
import numpy as np
from numpy.typing import ArrayLike

from retarget.motion.errors import JointMismatchError, MotionFormatError, MotionLimitError
from retarget.motion.limits import LimitLike, LimitViolation, RowLabel, default_row_label, find_limit_violations

__all__ = ["INTERPOLATIONS", "Motion", "validate_motion_arrays"]

#: Interpolation methods understood by :meth:`Motion.sample` and the keyframe format.
INTERPOLATIONS: tuple[str, ...] = ("linear", "cubic", "pchip")


def validate_motion_arrays(time: ArrayLike, joint_names: Sequence[str], positions: ArrayLike, *,
                           row_label: RowLabel = default_row_label,
                           source: str | None = None) -> tuple[np.ndarray, tuple[str, ...], np.ndarray]:
    """Check and normalize the three parts of a motion.

    Args:
        time: Sample times [s], shape ``(n,)``.
        joint_names: Joint names, length ``m``, unique and non-empty.
        positions: Joint positions [rad], shape ``(n, m)``.
        row_label: Maps a sample index to how the user sees it in the source (``"line 14"``).
        source: Name of the file the arrays came from, prefixed to messages.

    Returns:
        ``(time, joint_names, positions)`` as float64 arrays and a tuple.

    Raises:
        MotionFormatError: On the first problem, naming row and joint.
    """
    names = tuple(str(n) for n in joint_names)
    if not names:
        raise MotionFormatError("motion has no joints", source=source)
    seen: set[str] = set()
    for name in names:
        if not name.strip():
            raise MotionFormatError("empty joint name", source=source)
        if name in seen:
            raise MotionFormatError(f"duplicate joint name '{name}'", source=source, joint=name)
        seen.add(name)
    t = np.array(time, dtype=np.float64).reshape(-1) if np.ndim(time) <= 1 else None
    if t is None:
        raise MotionFormatError(f"time must be one-dimensional, got shape {np.shape(time)}", source=source)
    if t.size == 0:
        raise MotionFormatError("motion has no samples", source=source)
    try:
        q = np.array(positions, dtype=np.float64)
    except ValueError as exc:  # ragged nested lists
        raise MotionFormatError(f"positions are not a rectangular table: {exc}", source=source) from None
    if q.ndim == 1 and len(names) == 1 and q.size == t.size:
        q = q.reshape(-1, 1)
    if q.shape != (t.size, len(names)):
        raise MotionFormatError(f"positions have shape {q.shape}, expected ({t.size}, {len(names)}) "
                                f"for {t.size} samples of {len(names)} joints", source=source)
    bad_t = np.flatnonzero(~np.isfinite(t))
    if bad_t.size:
        i = int(bad_t[0])
        raise MotionFormatError(f"{row_label(i)}: time is {t[i]}", source=source, row=row_label(i))
    bad = np.argwhere(~np.isfinite(q))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise MotionFormatError(f"{row_label(i)} (t = {t[i]:.6g} s): joint '{names[j]}' is {q[i, j]}",
                                source=source, row=row_label(i), joint=names[j])
    dt = np.diff(t)
    bad_dt = np.flatnonzero(dt <= 0.0)
    if bad_dt.size:
        i = int(bad_dt[0]) + 1
        what = "duplicate time" if dt[i - 1] == 0.0 else "time goes backwards"
        raise MotionFormatError(f"{row_label(i)}: {what}: t = {t[i]:.9g} s after t = {t[i - 1]:.9g} s "
                                f"({row_label(i - 1)}); times must strictly increase",
                                source=source, row=row_label(i))
    t.setflags(write=False)
    q.setflags(write=False)
    return t, names, q


@dataclass(frozen=True, eq=False)
class Motion:
    """Joint angles over time for named joints.

    A single sample (``n == 1``) is allowed and means "hold this pose": its duration is 0, :meth:`sample` returns
    the pose at every time and its velocities are zero.

    Attributes:
        time: Sample times [s], shape ``(n,)``, finite and strictly increasing (need not start at 0).
        joint_names: Joint names, length ``m``, unique.
        positions: Joint positions [rad], shape ``(n, m)``, finite. Both arrays are read-only.
    """

    time: np.ndarray
    joint_names: tuple[str, ...]
    positions: np.ndarray

    def __post_init__(self) -> None:
        t, names, q = validate_motion_arrays(self.time, self.joint_names, self.positions)
        object.__setattr__(self, "time", t)
        object.__setattr__(self, "joint_names", names)
        object.__setattr__(self, "positions", q)

    def __eq__(self, other: object) -> bool:
        """Exact equality of names, times and positions."""
        if not isinstance(other, Motion):
            return NotImplemented
        return (self.joint_names == other.joint_names and np.array_equal(self.time, other.time)
                and np.array_equal(self.positions, other.positions))

    __hash__ = None  # type: ignore[assignment]  # arrays are not hashable; equality is by value

    def __repr__(self) -> str:
        return (f"Motion({self.num_samples} samples, {self.time[0]:.6g}..{self.time[-1]:.6g} s, "
                f"joints={list(self.joint_names)})")

    @property
    def num_samples(self) -> int:
        """Number of samples ``n``."""
        return int(self.time.size)

    @property
    def num_joints(self) -> int:
        """Number of joints ``m``."""
        return len(self.joint_names)

    @property
    def duration(self) -> float:
        """Last minus first sample time [s]."""
        return float(self.time[-1] - self.time[0])

    def joint_index(self, name: str) -> int:
        """Column of joint ``name`` in :attr:`positions`.

        Raises:
            JointMismatchError: If the motion has no such joint.
        """
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise JointMismatchError(f"unknown joint '{name}'; the motion has {list(self.joint_names)}",
                                     unknown=[name]) from None

    def _interpolant(self, method: str) -> Callable[[np.ndarray], np.ndarray]:
        if method not in INTERPOLATIONS:
            raise MotionFormatError(f"unknown interpolation '{method}'; use one of {list(INTERPOLATIONS)}")
        if self.num_samples == 1:
            return lambda t: np.broadcast_to(self.positions[0], (np.size(t), self.num_joints)).copy()
        if method == "linear" or self.num_samples == 2:
            return lambda t: np.stack([np.interp(t, self.time, self.positions[:, j])
                                       for j in range(self.num_joints)], axis=-1)
        from scipy.interpolate import CubicSpline, PchipInterpolator

        if method == "cubic":
            return CubicSpline(self.time, self.positions, axis=0, bc_type="natural")
        return PchipInterpolator(self.time, self.positions, axis=0)

    def sample(self, t: float | Sequence[float] | np.ndarray, method: str = "linear") -> np.ndarray:
        """Joint positions at arbitrary times.

        Times before the first sample get the first pose and times after the last get the last pose (a motion
        holds its end poses).

        Args:
            t: Time or times [s], scalar or shape ``(k,)``.
            method: ``"linear"`` (default; what a servo streaming setpoints plays), ``"cubic"`` (C² natural
                spline) or ``"pchip"`` (monotone, no overshoot).

        Returns:
            Positions [rad], shape ``(m,)`` for a scalar ``t``, else ``(k, m)``.
        """
        scalar = np.ndim(t) == 0
        tt = np.clip(np.atleast_1d(np.asarray(t, dtype=np.float64)), self.time[0], self.time[-1])
        q = np.asarray(self._interpolant(method)(tt), dtype=np.float64).reshape(tt.size, self.num_joints)
        return q[0] if scalar else q

    def velocities(self) -> np.ndarray:
        """Joint velocities at the samples [rad/s], shape ``(n, m)``.

        Second-order finite differences on the (possibly non-uniform) time grid, one-sided at the ends; zero for a
        single-sample motion. For the speeds the servos actually see between setpoints use
        :meth:`segment_velocities`.
        """
        if self.num_samples == 1:
            return np.zeros_like(self.positions)
        if self.num_samples == 2:
            v = (self.positions[1] - self.positions[0]) / (self.time[1] - self.time[0])
            return np.vstack([v, v])
        return np.gradient(self.positions, self.time, axis=0, edge_order=2)

    def segment_velocities(self) -> np.ndarray:
        """Slopes between consecutive samples [rad/s], shape ``(n - 1, m)``."""
        return np.diff(self.positions, axis=0) / np.diff(self.time)[:, None]

    def resample(self, rate: float, method: str = "linear") -> Motion:
        """The motion on a uniform grid ``t0 + k / rate``.

        The grid starts at the first sample and covers the whole motion: if the duration is not a multiple of the
        period, the last sample lies after the original end and holds the final pose.

        Args:
            rate: Sampling rate [Hz], positive.
            method: Interpolation, see :meth:`sample`.
        """
        if not (rate > 0 and math.isfinite(rate)):
            raise MotionFormatError(f"resampling rate must be a positive number of Hz, got {rate}")
        count = int(math.ceil(self.duration * rate - 1e-9)) + 1
        t = self.time[0] + np.arange(count) / rate
        return Motion(t, self.joint_names, self.sample(t, method))

    def select(self, joints: Iterable[str]) -> Motion:
        """The motion of a subset of joints, in the given order.

        Raises:
            JointMismatchError: Naming every requested joint the motion does not have.
        """
        wanted = list(joints)
        unknown = [j for j in wanted if j not in self.joint_names]
        if unknown:
            raise JointMismatchError(f"unknown joints {unknown}; the motion has {list(self.joint_names)}",
                                     unknown=unknown)
        cols = [self.joint_names.index(j) for j in wanted]
        return Motion(self.time, tuple(wanted), self.positions[:, cols])

    def reorder(self, joint_names: Iterable[str]) -> Motion:
        """The same motion with columns in the order of ``joint_names``, which must be exactly its joints.

        Raises:
            JointMismatchError: Naming the joints missing from the motion and those it has but were not listed.
        """
        wanted = list(joint_names)
        missing = [j for j in wanted if j not in self.joint_names]
        unknown = [j for j in self.joint_names if j not in wanted]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing joints {missing}")
            if unknown:
                parts.append(f"unknown joints {unknown}")
            raise JointMismatchError("motion joints do not match the expected ones: " + ", ".join(parts)
                                     + f" (expected {wanted})", missing=missing, unknown=unknown)
        return self.select(wanted)

    def with_joints(self, joint_names: Iterable[str], hold: float = 0.0) -> Motion:
        """The motion with columns in the order of ``joint_names``; a joint it leaves out holds ``hold`` [rad]
        throughout. An animation that moves a few of a robot's motors needs no column for the
        others (:meth:`held`).

        Raises:
            JointMismatchError: The motion has joints that are not in ``joint_names`` (as :meth:`reorder`: naming
                them and the missing ones).
        """
        wanted = list(joint_names)
        if any(j not in wanted for j in self.joint_names):
            self.reorder(wanted)  # raises, naming the unknown and the missing joints
        columns = [self.positions[:, self.joint_index(j)] if j in self.joint_names
                   else np.full(self.num_samples, float(hold)) for j in wanted]
        return Motion(self.time, tuple(wanted), np.stack(columns, axis=1) if columns
                      else np.zeros((self.num_samples, 0)))

    def held(self, joint_names: Iterable[str]) -> list[str]:
        """The joints of ``joint_names`` this motion has no column for (:meth:`with_joints` holds them)."""
        return [j for j in joint_names if j not in self.joint_names]

    def foreign_to(self, motors: Sequence[str]) -> tuple[list[str], list[str]]:
        """``(held, unknown)`` when this looks like another robot's motion: it has no column for some of ``motors``
        (:meth:`held`) and moves joints that are not among them; ``([], [])`` otherwise."""
        held = self.held(motors)
        unknown = [j for j in self.joint_names if j not in motors]
        return (held, unknown) if held and unknown else ([], [])

    def shifted(self, offset: float) -> Motion:
        """The motion with ``offset`` [s] added to every time (``shifted(-m.time[0])`` starts it at 0)."""
        return Motion(self.time + offset, self.joint_names, self.positions)

    def check_limits(self, limits: Mapping[str, LimitLike], *, position_tolerance: float = 1e-9,
                     velocity_tolerance: float = 1e-9) -> list[LimitViolation]:
        """Every place where the motion leaves its joint limits.

        Args:
            limits: ``{joint: (lower [rad], upper [rad], max_velocity [rad/s])}`` or objects with those attributes
                (see :func:`retarget.motion.limits.as_joint_limits`). Joints without an entry are not checked.
            position_tolerance: Allowed excess over position limits [rad].
            velocity_tolerance: Allowed relative excess over velocity limits.

        Returns:
            One :class:`LimitViolation` per joint, kind and contiguous run; empty if the motion is within limits.
            Speeds are the slopes between samples (:meth:`segment_velocities`).
        """
        return find_limit_violations(self.time, self.joint_names, self.positions, limits,
                                     position_tolerance=position_tolerance, velocity_tolerance=velocity_tolerance)

    def assert_within_limits(self, limits: Mapping[str, LimitLike], *, row_label: RowLabel | None = None,
                             source: str | None = None, **tolerances: float) -> None:
        """Raise if :meth:`check_limits` finds anything.

        Raises:
            MotionLimitError: Listing the violations (joint, row, time, value, limit).
        """
        violations = self.check_limits(limits, **tolerances)
        if violations:
            raise MotionLimitError(violations, source=source, row_label=row_label)
