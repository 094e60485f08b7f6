"""A recorded tip trajectory, read from a rosbag2 PoseStamped topic or a Motive CSV export."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from retarget.fit.errors import RecordingError

__all__ = ["TipRecording", "read_recording"]

#: Fewest tracked samples a recording must have to be fitted.
MIN_SAMPLES = 50


@dataclass(frozen=True, eq=False)
class TipRecording:
    """Tracked tip positions over time, in the mocap frame.

    Attributes:
        time_s: (n,) [s], increasing (any origin: epoch stamps or take time).
        position_m: (n, 3) [m]; NaN rows where the body was not tracked (occluded).
        source: File the samples came from, for messages.
        body: The tracked body's name.
        orientation_xyzw: (n, 4) unit quaternions of the tracked rigid body (NaN where untracked), or ``None``.
        recorded_start_s: When the played motion started, on this recording's clock [s]: stored in a bag of
            ``retarget play --record`` (:attr:`retarget.mocap.bags.BagInfo.motion_start_s`); None otherwise.
    """

    time_s: NDArray[np.float64]
    position_m: NDArray[np.float64]
    source: str
    body: str
    orientation_xyzw: NDArray[np.float64] | None = None
    recorded_start_s: float | None = None

    @property
    def valid(self) -> NDArray[np.bool_]:
        """Samples with a finite position (n,)."""
        return np.isfinite(self.position_m).all(axis=1)

    def shifted(self, offset_s: float) -> TipRecording:
        """The same samples with ``offset_s`` [s] subtracted from every time."""
        start = None if self.recorded_start_s is None else self.recorded_start_s - offset_s
        return TipRecording(self.time_s - offset_s, self.position_m, self.source, self.body, self.orientation_xyzw,
                            start)


def read_recording(path: str | Path, body: str, topic: str | None = None) -> TipRecording:
    """Read one body's positions from a bag folder/file or a Motive CSV.

    Args:
        path: rosbag2 bag (folder, ``.mcap`` or ``.db3``) or Motive ``.csv`` export.
        body: Rigid-body name (Motive asset name; for bags it names the default topic ``/mocap/<body>/pose``).
        topic: PoseStamped topic in a bag (default from ``body``).

    Raises:
        RecordingError: Missing file, unknown body/topic, or fewer than ``MIN_SAMPLES`` tracked samples.
    """
    p = Path(path)
    if not p.exists():
        raise RecordingError(str(p), "no such file or bag")
    if p.suffix.lower() == ".csv":
        from retarget.mocap import read_motive_csv

        take = read_motive_csv(p)
        if body not in take.rigid_bodies:
            raise RecordingError(str(p), f"no rigid body {body!r}; the take has {sorted(take.rigid_bodies)}")
        track = take.rigid_bodies[body]
        time, pos = np.asarray(take.time_s, dtype=float), np.asarray(track.position_m, dtype=float)
        quat = np.asarray(track.orientation_xyzw, dtype=float)
        recorded_start = None
    else:
        from retarget.mocap.bags import bag_info, pose_topic, read_pose_series
        from retarget.mocap.errors import BagError

        name = topic or pose_topic(body)
        info = bag_info(p)
        topics = {t.name: t for t in info.topics}
        if name not in topics:
            raise RecordingError(str(p), f"no topic {name!r}; the bag has {sorted(topics)} (use --topic)")
        series = read_pose_series(p, name)
        time, pos = np.asarray(series.time_s, dtype=float), np.asarray(series.position_m, dtype=float)
        quat = np.asarray(series.orientation_xyzw, dtype=float)
        try:
            recorded_start = info.motion_start_s
        except BagError as exc:
            raise RecordingError(str(p), exc.reason) from None
    order = np.argsort(time, kind="stable")
    time, pos, quat = time[order], pos[order], quat[order]
    n_valid = int(np.isfinite(pos).all(axis=1).sum())
    if n_valid < MIN_SAMPLES:
        raise RecordingError(str(p), f"only {n_valid} tracked samples of {body!r} (need {MIN_SAMPLES})")
    return TipRecording(time, pos, str(p), body, quat, recorded_start)
