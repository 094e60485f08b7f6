"""From a motion file to motor trajectories (the adapter between :mod:`retarget.motion` and the simulator)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from retarget.errors import InputError
from retarget.sim.motors import SplineMotors

__all__ = ["motors_from_motion"]


def motors_from_motion(path: str | Path, motor_names: Sequence[str],
                       say: Callable[[str], None] | None = None) -> tuple[SplineMotors, float]:
    """Load a motion (any format :func:`retarget.motion.load_motion` reads) and return a C² spline through the
    motors' columns plus the motion's end time [s]. Motors absent from the motion are held at 0 (``say`` is told
    which)."""
    from retarget.motion import load_motion
    from retarget.motion.limits import HOLD_RAD, hold_note

    motion = load_motion(path)
    names = list(motion.joint_names)
    time = np.asarray(motion.time, dtype=float)
    pos = np.asarray(motion.positions, dtype=float)
    missing = motion.held(motor_names)
    if len(missing) == len(motor_names) and motor_names:
        raise InputError(f"motion {path} has none of the robot's motors {list(motor_names)} (it has {names})")
    if missing and say is not None:
        say(hold_note(missing))
    cols = [pos[:, names.index(m)] if m in names else np.full(len(time), HOLD_RAD) for m in motor_names]
    if not cols:
        cols = [np.zeros(len(time))]
    return SplineMotors.from_columns(time - time[0], cols), float(time[-1] - time[0])
