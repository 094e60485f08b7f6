"""Turning ``joint_commands`` messages into servo goal positions over time (shared by the driver and the twin).

A one-point command is a setpoint, applied at once. A setpoint that carries velocities and the instant it was
sampled at (the trajectory server's stream: ``header.stamp``) is held on its own clock: the goal at ``t`` is
``p + v (t − stamp)``, for at most :data:`MAX_EXTRAPOLATION_S` past the stamp, so a setpoint that arrives late
(delivery, an executor busy on a loaded host, the sender's tick late) or that is written between two of the
sender's ticks is the trajectory at the instant the goal is written, not the sender's sample held. A multi-point
command is a trajectory sampled at the control rate from the current goal (linear / cubic / quintic as in
:mod:`retarget.control.interpolation`), started when it is received, or at its stamp when it has one: the trajectory
server's horizon (its next ticks' samples with their velocities, every tick) is then the trajectory itself for as
long as it reaches, so a command that arrives up to a horizon late still gives the goal the server computed for that
instant. Joints a command does not name keep their current goal, as joint_trajectory_controller fills partial goals.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from retarget.control.errors import ErrorCode, TrajectoryRejected
from retarget.control.interpolation import TrajectorySampler
from retarget.control.trajectory import GoalPoint, validate_trajectory
from retarget.motion.limits import JointLimit

__all__ = ["MAX_EXTRAPOLATION_S", "CommandFollower"]

#: Longest a stamped setpoint is extrapolated along its velocity past its stamp [s]: ten of the trajectory server's
#: 100 Hz ticks, beyond which the goal holds (a stream that stopped mid-motion must not run on).
MAX_EXTRAPOLATION_S: float = 0.1


class CommandFollower:
    """Goal positions of a set of joints driven by joint commands.

    Args:
        joint_names: Joints in wire order ``(m,)``.
        initial_goal: Goal positions [rad] ``(m,)`` before any command.
        limits: ``{joint: JointLimit}``; commands outside them are rejected.
        max_velocity: Servo speed limit [rad/s] for multi-point commands.
    """

    def __init__(self, joint_names: Sequence[str], initial_goal: np.ndarray,
                 limits: dict[str, JointLimit] | None = None, max_velocity: float = np.inf) -> None:
        self.joint_names = tuple(joint_names)
        self._goal = np.asarray(initial_goal, dtype=float).copy()
        self._limits = limits or {}
        self._max_velocity = max_velocity
        self._sampler: TrajectorySampler | None = None
        self._start = 0.0
        self._rate: np.ndarray | None = None  # a stamped setpoint's velocities [rad/s] and stamp [s]
        self._stamp = 0.0
        # The joints' position limits in wire order (±inf without one): where an extrapolated setpoint stops.
        self._lower = np.array([self._limits[n].lower if n in self._limits else -np.inf for n in self.joint_names])
        self._upper = np.array([self._limits[n].upper if n in self._limits else np.inf for n in self.joint_names])

    def command(self, names: Sequence[str], points: Sequence[GoalPoint], now: float,
                stamp: float | None = None) -> None:
        """Take a new command, replacing any trajectory in progress.

        Args:
            names: Joints named by the command (a subset of ``joint_names``, any order).
            points: Its points; one point = setpoint.
            now: Receipt time [s].
            stamp: the instant a setpoint was sampled at, or a trajectory's time origin [s, the clock of ``now``]
                (None or 0: unknown, the trajectory starts at ``now``); with a setpoint's velocities it is held on
                its own clock (module docstring).

        Raises:
            TrajectoryRejected: Unknown or duplicate joints, malformed points, limits exceeded. The goal is unchanged.
        """
        current = self.goal_at(now)
        unknown = [n for n in names if n not in self.joint_names]
        if unknown:
            raise TrajectoryRejected(ErrorCode.INVALID_JOINTS, f"command names unknown joint {unknown[0]!r}",
                                     joint=unknown[0])
        missing = [j for j, n in enumerate(self.joint_names) if n not in names]
        full_names = list(names) + [self.joint_names[j] for j in missing]
        filled = [GoalPoint(p.time_from_start, list(p.positions) + [current[j] for j in missing],
                            list(p.velocities) + [0.0] * len(missing) * bool(len(p.velocities)),
                            list(p.accelerations) + [0.0] * len(missing) * bool(len(p.accelerations)), p.effort)
                  for p in points]
        rate = None
        if len(filled) == 1:
            if stamp and len(filled[0].velocities) == len(full_names):
                rate = np.array([filled[0].velocities[full_names.index(n)] for n in self.joint_names], dtype=float)
                rate = rate if np.all(np.isfinite(rate)) else None
            filled = [GoalPoint(0.0, filled[0].positions)]  # a setpoint: its time does not matter
        traj = validate_trajectory(full_names, filled, controller_joints=self.joint_names, limits=self._limits,
                                   max_velocity=self._max_velocity, now=now)
        self._rate = None
        if len(traj.time) == 1:
            self._goal = traj.positions[0].copy()
            self._sampler = None
            if rate is not None and np.any(rate != 0.0):
                self._rate, self._stamp = rate, float(stamp)
        else:
            self._sampler = TrajectorySampler(traj, current)
            self._start = float(stamp) if stamp else now

    def goal_at(self, now: float) -> np.ndarray:
        """Goal positions [rad] ``(m,)`` at time ``now`` [s]."""
        if self._rate is not None:
            goal = self._goal + self._rate * min(max(now - self._stamp, 0.0), MAX_EXTRAPOLATION_S)
            return np.clip(goal, self._lower, self._upper)
        if self._sampler is not None:
            sample = self._sampler.sample(now - self._start)
            self._goal = sample.positions
            if sample.after_end:
                self._sampler = None
        return self._goal.copy()
