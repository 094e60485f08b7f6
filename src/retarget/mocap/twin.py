"""The digital twin's mocap source: poses of simulated bodies, with OptiTrack-like noise, occlusion and latency.

Two sources share the measurement model (:class:`_Measurement`: Gaussian position noise [m], small random
rotations [rad], random occlusion — the frame then carries the last seen pose with ``tracking_valid=False``, as
Motive does; seeded, so a twin recording is reproducible):

- :class:`TwinSource` samples a function of time (a canned motion, or a finished simulation) at the capture rate
  and stamps frames with a constant latency;
- :class:`LiveTwinSource` reads the poses the running reduced simulation writes on the twin's pose channel
  (:mod:`retarget.twin.channel`), one frame per capture period of simulation time, stamped with the wall-clock
  instant each state belongs to (so a simulation running behind shows up as latency, not as a time shift).
"""
from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.mocap.source import BodyPose, MocapFrame
from retarget.sim.rotation import quat_multiply

if TYPE_CHECKING:
    from retarget.twin.channel import PoseSample

__all__ = ["LiveTwinSource", "TwinNoise", "TwinSource", "PoseFunction", "interpolated_poses"]

#: ``t [s] -> {body name: (position [m] (3,), quaternion xyzw (4,))}``.
PoseFunction = Callable[[float], Mapping[str, tuple[NDArray[np.float64], NDArray[np.float64]]]]


@dataclass(frozen=True)
class TwinNoise:
    """Measurement imperfections of the twin.

    Attributes:
        position_std_m: standard deviation of the Gaussian noise on each position coordinate [m].
        rotation_std_rad: standard deviation of the random rotation angle about each axis [rad].
        occlusion_probability: probability that a body is not tracked in a frame [0, 1].
        latency_s: capture-to-arrival latency [s].
    """

    position_std_m: float = 0.0
    rotation_std_rad: float = 0.0
    occlusion_probability: float = 0.0
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.position_std_m < 0 or self.rotation_std_rad < 0 or self.latency_s < 0:
            raise InputError(f"twin noise and latency must be >= 0, got {self}")
        if not 0.0 <= self.occlusion_probability <= 1.0:
            raise InputError(f"occlusion probability must be in [0, 1], got {self.occlusion_probability}")


def interpolated_poses(
    time_s: NDArray[np.float64],
    positions_m: Mapping[str, NDArray[np.float64]],
    orientations_xyzw: Mapping[str, NDArray[np.float64]] | None = None,
) -> PoseFunction:
    """A pose function interpolating sampled trajectories (e.g. a simulation's output).

    Positions are interpolated linearly, quaternions by normalized linear interpolation (sign-aligned); times
    outside ``time_s`` hold the end values.

    Args:
        time_s: sample times [s], shape ``(n,)``, strictly increasing.
        positions_m: per body, positions [m], shape ``(n, 3)``.
        orientations_xyzw: per body, unit quaternions ``(n, 4)``; identity if omitted.
    """
    t = np.asarray(time_s, dtype=float)
    if t.ndim != 1 or t.size < 1 or np.any(np.diff(t) <= 0):
        raise InputError("time_s must be a non-empty, strictly increasing 1-D array")
    pos = {k: np.asarray(v, dtype=float) for k, v in positions_m.items()}
    quat = {k: np.asarray(v, dtype=float) for k, v in (orientations_xyzw or {}).items()}
    for name, p in pos.items():
        if p.shape != (t.size, 3):
            raise InputError(f"positions of {name!r} have shape {p.shape}, expected {(t.size, 3)}")
        if name in quat and quat[name].shape != (t.size, 4):
            raise InputError(f"orientations of {name!r} have shape {quat[name].shape}, expected {(t.size, 4)}")

    def pose_at(time_now: float) -> dict[str, tuple[NDArray[np.float64], NDArray[np.float64]]]:
        i = int(np.clip(np.searchsorted(t, time_now) - 1, 0, max(t.size - 2, 0)))
        s = 0.0 if t.size == 1 else float(np.clip((time_now - t[i]) / (t[i + 1] - t[i]), 0.0, 1.0))
        j = min(i + 1, t.size - 1)
        out = {}
        for name, p in pos.items():
            position = (1 - s) * p[i] + s * p[j]
            if name in quat:
                q0, q1 = quat[name][i], quat[name][j]
                q1 = q1 if np.dot(q0, q1) >= 0 else -q1
                q = (1 - s) * q0 + s * q1
                q = q / np.linalg.norm(q)
            else:
                q = np.array([0.0, 0.0, 0.0, 1.0])
            out[name] = (position, q)
        return out

    return pose_at


def _small_rotation_xyzw(rotvec: NDArray[np.float64]) -> NDArray[np.float64]:
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([0.5 * rotvec[0], 0.5 * rotvec[1], 0.5 * rotvec[2], 1.0]) / np.sqrt(1 + 0.25 * angle**2)
    axis = rotvec / angle
    return np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]])


def _quat_multiply(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """Hamilton product ``a ⊗ b`` of ROS-order (x, y, z, w) quaternions (the simulator's is (w, x, y, z))."""
    return np.roll(quat_multiply(np.roll(a, 1), np.roll(b, 1)), -1)


class _Measurement:
    """Noise and occlusion applied to true poses, with the last seen pose per body (seeded)."""

    def __init__(self, noise: TwinNoise, seed: int, body_ids: dict[str, int]) -> None:
        self.noise = noise
        self.body_ids = body_ids
        self._rng = np.random.default_rng(seed)
        self._last_seen: dict[str, BodyPose] = {}

    def _measure(self, name: str, position: NDArray[np.float64], quat: NDArray[np.float64]) -> BodyPose:
        n = self.noise
        p = np.asarray(position, dtype=float) + self._rng.normal(0.0, n.position_std_m, 3)
        q = np.asarray(quat, dtype=float)
        if n.rotation_std_rad > 0:
            q = _quat_multiply(_small_rotation_xyzw(self._rng.normal(0.0, n.rotation_std_rad, 3)), q)
        q = q / np.linalg.norm(q)
        return BodyPose(
            name,
            (float(p[0]), float(p[1]), float(p[2])),
            (float(q[0]), float(q[1]), float(q[2]), float(q[3])),
            True,
            0.0,
            self.body_ids.get(name, -1),
        )

    def bodies(self, poses: Mapping[str, tuple[NDArray[np.float64], NDArray[np.float64]]]) -> tuple[BodyPose, ...]:
        """Measured poses of one frame (occluded bodies carry their last seen pose, ``tracking_valid=False``)."""
        out = []
        for name, (position, quat) in poses.items():
            measured = self._measure(name, position, quat)
            occluded = self._rng.random() < self.noise.occlusion_probability
            if occluded:
                stale = self._last_seen.get(name, measured)
                out.append(BodyPose(name, stale.position_m, stale.orientation_xyzw, False, 0.0, measured.body_id))
            else:
                self._last_seen[name] = measured
                out.append(measured)
        return tuple(out)


class TwinSource:
    """Mocap frames of simulated bodies (implements :class:`~retarget.mocap.source.MocapSource`).

    Frame ``k`` captures the true poses at ``t_k = k / rate_hz`` (simulation time). Its stamp is
    ``start_time_s + t_k`` and its receive time that plus the latency.

    Args:
        pose_at: true poses as a function of simulation time.
        rate_hz: capture rate [Hz].
        noise: noise, occlusion and latency.
        seed: seed of the noise generator.
        start_time_s: wall-clock time of simulation time 0 [s since the epoch]; ``None``: now.
        realtime: if True, :meth:`receive` waits until each frame's receive time (for a live node); if False,
            frames come as fast as asked (for recording a twin test).
        body_ids: streaming id per body (default: 1, 2, ... in the order of the first pose dict).
    """

    def __init__(
        self,
        pose_at: PoseFunction,
        rate_hz: float = 120.0,
        noise: TwinNoise | None = None,
        seed: int = 0,
        start_time_s: float | None = None,
        realtime: bool = False,
        body_ids: Mapping[str, int] | None = None,
    ) -> None:
        if rate_hz <= 0:
            raise InputError(f"capture rate must be > 0 Hz, got {rate_hz}")
        self.pose_at = pose_at
        self.rate_hz = float(rate_hz)
        self.noise = noise or TwinNoise()
        self.realtime = realtime
        self.start_time_s = time.time() if start_time_s is None else float(start_time_s)
        self._frame = 0
        names = list(pose_at(0.0).keys())
        self.body_ids: dict[str, int] = dict(body_ids) if body_ids else {n: i + 1 for i, n in enumerate(names)}
        self._measurement = _Measurement(self.noise, seed, self.body_ids)

    def next_frame(self) -> MocapFrame:
        """Capture the next frame (no waiting)."""
        t = self._frame / self.rate_hz
        bodies = self._measurement.bodies(self.pose_at(t))
        stamp = self.start_time_s + t
        frame = MocapFrame(self._frame, stamp, stamp + self.noise.latency_s, self.noise.latency_s, bodies)
        self._frame += 1
        return frame

    def receive(self, timeout_s: float) -> MocapFrame | None:
        """The next frame; in real-time mode waits for its receive time, or returns ``None`` after ``timeout_s``."""
        if self.realtime:
            due = self.start_time_s + self._frame / self.rate_hz + self.noise.latency_s
            wait = due - time.time()
            if wait > timeout_s:
                time.sleep(max(timeout_s, 0.0))
                return None
            if wait > 0:
                time.sleep(wait)
        return self.next_frame()

    def frames(self, duration_s: float) -> Iterator[MocapFrame]:
        """All frames captured in ``[0, duration_s]`` of simulation time (no waiting)."""
        n = int(np.floor(duration_s * self.rate_hz + 1e-9)) + 1
        for _ in range(n):
            yield self.next_frame()

    def close(self) -> None:
        """Nothing to release."""


class LiveTwinSource:
    """Mocap frames of the running twin simulation, read from its pose channel (a :class:`MocapSource`).

    Frame ``k`` is the first channel sample at or after simulation time ``t₀ + k / rate_hz`` (``t₀``: the first
    sample seen from the current writer), measured with the twin's noise and occlusion. Its stamp is the
    wall-clock instant that state belongs to plus nothing; its receive time is when it was read (at least stamp +
    ``noise.latency_s``), so ``latency_s`` includes how far the simulation runs behind the servos.

    The writer may be absent (not started yet, no reduced model), restart (new generation: the frame clock starts
    over) or die (stale heartbeat): :meth:`receive` then returns None, and ``log`` gets one line per change of
    :attr:`state`.

    Args:
        channel: the pose channel file (``live:<path>`` in the node's ``twin_motion``).
        rate_hz: capture rate [Hz] in simulation time.
        noise: noise, occlusion and (minimum) latency.
        seed: seed of the noise generator.
        log: receives state-change lines (e.g. the node's logger).
        poll_period_s: how often :meth:`receive` looks for new samples while waiting [s].
    """

    def __init__(self, channel: str | Path, rate_hz: float = 120.0, noise: TwinNoise | None = None, seed: int = 0,
                 log: Callable[[str], None] | None = None, poll_period_s: float = 0.005) -> None:
        from retarget.twin.channel import PoseRingReader

        if rate_hz <= 0:
            raise InputError(f"capture rate must be > 0 Hz, got {rate_hz}")
        self.channel = Path(channel)
        self.rate_hz = float(rate_hz)
        self.noise = noise or TwinNoise()
        self.poll_period_s = float(poll_period_s)
        self._reader = PoseRingReader(self.channel)
        self._seed = seed
        self._log = log or (lambda _line: None)
        self._measurement = _Measurement(self.noise, seed, {})
        self._pending: collections.deque = collections.deque()
        self._next_t: float | None = None
        self._generation = 0
        self._frame = 0
        self.state = "absent"
        self.last_lag_s = float("nan")

    def _refill(self) -> None:
        samples = self._reader.poll()
        state = self._reader.state
        if self._reader.generation != self._generation and self._reader.bodies:
            self._generation = self._reader.generation
            self._next_t = None
            self._pending.clear()
            self._measurement = _Measurement(self.noise, self._seed,
                                             {n: i + 1 for i, n in enumerate(self._reader.bodies)})
            self._log(f"twin channel {self.channel}: simulation producer found, bodies {list(self._reader.bodies)}")
        if state != self.state:
            if state == "absent":
                self._log(f"twin channel {self.channel}: no simulation producer (waiting for it)")
            elif state == "stale":
                self._log(f"twin channel {self.channel}: the simulation producer stopped writing")
            self.state = state
        self._pending.extend(samples)

    def _frame_from(self, sample: PoseSample) -> MocapFrame:
        poses = {name: (sample.poses[i, :3], sample.poses[i, 3:]) for i, name in enumerate(self._reader.bodies)}
        bodies = self._measurement.bodies(poses)
        receive = max(time.time(), sample.stamp_s + self.noise.latency_s)
        self.last_lag_s = float(sample.lag_s)
        frame = MocapFrame(self._frame, sample.stamp_s, receive, receive - sample.stamp_s, bodies)
        self._frame += 1
        return frame

    def _take(self) -> MocapFrame | None:
        period = 1.0 / self.rate_hz
        while self._pending:
            sample = self._pending.popleft()
            if self._next_t is None:
                self._next_t = sample.sim_time_s
            if sample.sim_time_s + 1e-9 >= self._next_t:
                # A simulation that jumped (restart) must not produce a burst of frames: resync the clock.
                steps = max(1, int((sample.sim_time_s - self._next_t) / period) + 1)
                self._next_t += steps * period
                return self._frame_from(sample)
        return None

    def receive(self, timeout_s: float) -> MocapFrame | None:
        """The next frame, waiting up to ``timeout_s`` [s] for the simulation to produce it."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            frame = self._take()
            if frame is not None:
                return frame
            self._refill()
            frame = self._take()
            if frame is not None:
                return frame
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(self.poll_period_s, left))

    def close(self) -> None:
        """Unmap the channel (idempotent)."""
        self._reader.close()
