"""Targets: quasi-static equilibria (gravity sag included) at the input angles on the simulation grid.

Gravity sag cannot be removed by the motors, so the target of a tracked body is where it would rest if the input
pose were held: ``S̄(t_n) = solve_static(θ̄(t_n))``. The solves are warm-started from the previous sample and
repeated poses (holds) reuse the previous solution.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import TrackedPoses
from retarget.optimize.engines import Engine, EngineState

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
    """

    times: NDArray[np.float64]
    angles: NDArray[np.float64]
    positions: NDArray[np.float64]
    orientations: NDArray[np.float64]
    solves: int


def quasi_static_targets(engine: Engine, poses: TrackedPoses, times: Sequence[float], angles: NDArray[np.float64],
                         progress: Callable[[int, int], None] | None = None) -> Targets:
    """Solve the static equilibrium at every grid sample of the input angles.

    Args:
        engine: the simulator.
        poses: the tracked bodies.
        times: grid [s] (n_t,).
        angles: θ̄ [rad] (n_t, n_motors).
        progress: ``progress(done, total)``.
    """
    t = np.asarray(times, dtype=float)
    th = np.asarray(angles, dtype=float).reshape(len(t), -1)
    states = np.zeros((len(t), engine.n_state))
    warm: EngineState | None = None
    last: NDArray[np.float64] | None = None
    solves = 0
    for n in range(len(t)):
        if last is None or not np.array_equal(th[n], last):
            warm = engine.solve_static(th[n], warm)
            last = th[n]
            solves += 1
        assert warm is not None
        states[n] = warm.s
        if progress is not None:
            progress(n + 1, len(t))
    return Targets(t, th, poses.positions(states), poses.orientations(states), solves)
