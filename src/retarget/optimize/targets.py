"""Targets: quasi-static equilibria (gravity sag included) at the input angles on the simulation grid.

Gravity sag cannot be removed by the motors, so the target of a tracked body is where it would rest if the input
pose were held: ``S̄(t_n) = solve_static(θ̄(t_n))`` with the motors' shafts at the input angles — the intent. A
modelled servo's own sag under that load (:mod:`retarget.sim.servo`) is not part of the intent: the planner solves
the targets with ideal servos and pre-compensates the sag in the goals it sends. The solves are warm-started from the previous sample and
repeated poses (holds) reuse the previous solution. With ``stride > 1`` only every ``stride``-th sample (and the
last) is solved and the tracked poses in between are cubic-spline interpolated in time (orientations projected
back onto rotations): for a robot that is always moving (the drummer: 0.65 s per static solve under load, 2001
samples at 5 ms) the exact targets alone cost more than a plan's budget.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import TrackedPoses
from retarget.sim.engine import Engine, EngineState
from retarget.sim.errors import SimulationError

__all__ = ["Targets", "quasi_static_targets"]


@dataclass(frozen=True, eq=False)
class Targets:
    """Quasi-static targets of the tracked bodies.

    Attributes:
        times: grid [s] (n_t,).
        angles: the input angles θ̄ [rad] (n_t, n_motors).
        positions: ``c̄`` [m] (n_t, k, 3).
        orientations: ``R̄`` (link frames) (n_t, k, 3, 3).
        solves: number of static solves actually run (holds reuse).
        torques: the motor rows' multipliers at the targets [N m] (n_t, n_motors): what holding each pose asks of
            each motor (linear between solved samples); None when not recorded.
    """

    times: NDArray[np.float64]
    angles: NDArray[np.float64]
    positions: NDArray[np.float64]
    orientations: NDArray[np.float64]
    solves: int
    torques: NDArray[np.float64] | None = None


def _nearest_rotations(r: NDArray[np.float64]) -> NDArray[np.float64]:
    """The rotation closest (Frobenius) to each 3×3 matrix (..., 3, 3): polar factor by SVD."""
    u, _, vt = np.linalg.svd(r)
    d = np.sign(np.linalg.det(u @ vt))
    u[..., :, 2] *= d[..., None]
    return u @ vt


def _nearest_branch(engine: Engine, poses: TrackedPoses, theta: NDArray[np.float64], previous: EngineState | None,
                    played: EngineState) -> EngineState:
    """The equilibrium at ``theta`` whose tracked bodies are nearest the playback's ``played``: Newton continued
    from the ``previous`` equilibrium, or restarted from ``played`` (which may also jump to the other branch, or fail
    from a swinging state)."""
    continued = engine.solve_static(theta, previous)
    try:
        restarted = engine.solve_static(theta, played)
    except (SimulationError, np.linalg.LinAlgError):
        return continued
    # The played state may carry servo coordinates the targets' ideal model has not: positions one by one.
    c = [poses.positions(st.s[None])[0] for st in (continued, restarted, played)]
    return restarted if np.sum((c[1] - c[2]) ** 2) < np.sum((c[0] - c[2]) ** 2) else continued


def quasi_static_targets(engine: Engine, poses: TrackedPoses, times: Sequence[float], angles: NDArray[np.float64],
                         progress: Callable[[int, int], None] | None = None, stride: int = 1,
                         warm_states: Sequence[EngineState] | None = None) -> Targets:
    """Solve the static equilibrium at the grid samples of the input angles.

    Each solve starts from the previous sample's equilibrium, or with ``warm_states`` from the given state at that
    sample. A closed kinematic loop (a 4-bar) has two equilibria at some input angles, one per assembly
    branch, and they meet at the linkage's change point: continued from sample to sample, the targets keep the branch
    they started on through that point, while the robot may take the other. With the states of the input's playback,
    each sample is solved twice — continued from the previous equilibrium and restarted from the playback's state —
    and the equilibrium whose tracked bodies are nearer the playback's is the target: the one on the branch the
    robot is on (Newton restarted from a swinging state can also land on the other branch, or fail).

    Args:
        engine: the simulator.
        poses: the tracked bodies.
        times: grid [s] (n_t,).
        angles: θ̄ [rad] (n_t, n_motors).
        progress: ``progress(done, total)`` over the samples solved.
        stride: solve every ``stride``-th sample and the last; interpolate the others (1: solve all).
        warm_states: the playback's state per grid sample (n_t) that picks each sample's branch (None: continue from
            the previous equilibrium only).
    """
    from scipy.interpolate import CubicSpline

    t = np.asarray(times, dtype=float)
    th = np.asarray(angles, dtype=float).reshape(len(t), -1)
    stride = max(1, int(stride))
    keep = np.unique(np.r_[np.arange(0, len(t), stride), len(t) - 1])
    states = np.zeros((len(keep), engine.n_state))
    warm: EngineState | None = None
    last: NDArray[np.float64] | None = None
    solves = 0
    for i, n in enumerate(keep):
        if last is None or not np.array_equal(th[n], last):
            warm = engine.solve_static(th[n], warm) if warm_states is None else \
                _nearest_branch(engine, poses, th[n], warm, warm_states[n])
            last = th[n]
            solves += 1
        assert warm is not None
        states[i] = warm.s
        if progress is not None:
            progress(i + 1, len(keep))
    positions, orientations = poses.positions(states), poses.orientations(states)
    index = getattr(engine, "motor_torque_index", None)
    torques = None if index is None else states[:, index]
    if len(keep) == len(t):
        return Targets(t, th, positions, orientations, solves, torques)
    if torques is not None:
        torques = np.stack([np.interp(t, t[keep], c) for c in torques.T], axis=1)
    if len(keep) < 4:
        positions = np.stack([np.interp(t, t[keep], c) for c in positions.reshape(len(keep), -1).T],
                             axis=1).reshape((len(t), *positions.shape[1:]))
        orientations = np.stack([np.interp(t, t[keep], c) for c in orientations.reshape(len(keep), -1).T],
                                axis=1).reshape((len(t), *orientations.shape[1:]))
    else:
        positions = CubicSpline(t[keep], positions, axis=0)(t)
        orientations = CubicSpline(t[keep], orientations, axis=0)(t)
    return Targets(t, th, positions, _nearest_rotations(orientations), solves, torques)
