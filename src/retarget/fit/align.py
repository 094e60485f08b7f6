"""Time and space alignment of a recorded tip with a simulated one.

The recording is in the mocap frame with its own clock; the simulation is in the robot's world frame with time 0
at the start of the motion. Alignment finds ``t_sim = t_rec − offset`` and a rigid transform ``x_robot = R x_mocap
+ t``:

1. the rest pose and the noise level come from the first frames (before the step);
2. the step onset, where the tip leaves its rest pose by more than a threshold, gives a first time offset (the same
   detector runs on the simulation, so its threshold delay largely cancels);
3. the rigid transform is the weighted least-squares (Kabsch) fit of the recorded samples onto the simulated ones
   at the aligned times — the swing of the step makes the point set non-degenerate;
4. the offset is refined by minimizing that fit's residual over a small window.

Occluded samples (NaN) are ignored everywhere. The fitter re-fits the transform inside its residual
(:func:`kabsch`), so the material parameters are fitted against the best transform for each trial.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from retarget.fit.errors import AlignmentError
from retarget.fit.recording import TipRecording
from retarget.fit.simulators import TipTrajectory

__all__ = ["Alignment", "RestPose", "align", "detect_onset", "kabsch", "rest_pose"]


@dataclass(frozen=True)
class RestPose:
    """The tip at rest before the step.

    Attributes:
        position_m: Median rest position (3,) [m].
        noise_std_m: Robust per-axis noise estimate (median absolute deviation × 1.4826, averaged) [m].
        samples: Number of samples used.
    """

    position_m: NDArray[np.float64]
    noise_std_m: float
    samples: int


@dataclass(frozen=True)
class Alignment:
    """How a recording maps onto the simulation.

    Attributes:
        offset_s: ``t_sim = t_rec − offset_s`` [s].
        rotation: R (3, 3), mocap → robot.
        translation: t (3,) [m], mocap → robot.
        rms_m: RMS distance of the aligned samples to the simulation [m].
        rest: Rest pose of the recording (mocap frame).
    """

    offset_s: float
    rotation: NDArray[np.float64]
    translation: NDArray[np.float64]
    rms_m: float
    rest: RestPose

    def apply(self, position_m: NDArray[np.float64]) -> NDArray[np.float64]:
        """Recorded positions (n, 3) in the robot frame (n, 3) [m]."""
        return position_m @ self.rotation.T + self.translation


def rest_pose(time_s: NDArray[np.float64], position_m: NDArray[np.float64], duration_s: float = 0.3) -> RestPose:
    """Rest pose from the first ``duration_s`` [s] of tracked samples.

    Raises:
        AlignmentError: Fewer than 5 tracked samples in that window.
    """
    valid = np.isfinite(position_m).all(axis=1)
    t0 = time_s[valid][0] if valid.any() else 0.0
    window = valid & (time_s <= t0 + duration_s)
    n = int(window.sum())
    if n < 5:
        raise AlignmentError("too few tracked samples before the step to take the rest pose",
                             {"samples": n, "window_s": duration_s})
    pts = position_m[window]
    median = np.median(pts, axis=0)
    mad = np.median(np.abs(pts - median), axis=0) * 1.4826
    return RestPose(median, float(np.mean(mad)), n)


def detect_onset(time_s: NDArray[np.float64], position_m: NDArray[np.float64], rest: NDArray[np.float64],
                 threshold_m: float, consecutive: int = 3) -> float:
    """First time [s] the tip is farther than ``threshold_m`` from ``rest`` for ``consecutive`` tracked samples.

    The crossing is interpolated linearly between the last sample below and the first above.

    Raises:
        AlignmentError: The tip never leaves its rest pose by the threshold.
    """
    valid = np.isfinite(position_m).all(axis=1)
    t, p = time_s[valid], position_m[valid]
    dist = np.linalg.norm(p - rest, axis=1)
    above = dist > threshold_m
    run = np.convolve(above.astype(int), np.ones(consecutive, dtype=int), mode="valid") == consecutive
    hits = np.nonzero(run)[0]
    if hits.size == 0:
        raise AlignmentError("the tip never leaves its rest pose (no step found)",
                             {"threshold_m": threshold_m, "max_distance_m": float(dist.max(initial=0.0))})
    i = int(hits[0])
    if i == 0:
        return float(t[0])
    frac = (threshold_m - dist[i - 1]) / max(dist[i] - dist[i - 1], 1e-15)
    return float(t[i - 1] + np.clip(frac, 0.0, 1.0) * (t[i] - t[i - 1]))


def kabsch(source: NDArray[np.float64], target: NDArray[np.float64]
           ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Rigid transform minimizing Σ |R s_i + t − x_i|² (no scaling, proper rotation).

    Args:
        source: (n, 3) points to move.
        target: (n, 3) points to match.

    Returns:
        ``(R (3, 3), t (3,))``.
    """
    cs, ct = source.mean(axis=0), target.mean(axis=0)
    h = (source - cs).T @ (target - ct)
    u, _, vt = np.linalg.svd(h)
    sign = np.sign(np.linalg.det(vt.T @ u.T)) or 1.0
    rot = vt.T @ np.diag([1.0, 1.0, sign]) @ u.T
    return rot, ct - rot @ cs


def _fit_at(recording: TipRecording, sim: TipTrajectory, offset: float
            ) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
    valid = recording.valid
    t = recording.time_s[valid] - offset
    inside = (t >= sim.time_s[0]) & (t <= sim.time_s[-1])
    src = recording.position_m[valid][inside]
    dst = sim.at(t[inside])
    rot, trans = kabsch(src, dst)
    rms = float(np.sqrt(np.mean(np.sum((src @ rot.T + trans - dst) ** 2, axis=1))))
    return rms, rot, trans


def align(recording: TipRecording, sim: TipTrajectory, rest_window_s: float = 0.3,
          search_s: float = 0.05) -> Alignment:
    """Align ``recording`` with ``sim`` (steps 1–4 of the module docstring).

    Args:
        recording: The recorded tip (mocap frame, any clock).
        sim: A simulation of the same motion (robot frame, t = 0 at the motion's start), e.g. at the initial
            material guess: vibration differences hardly move the alignment, which is dominated by the step.
        rest_window_s: Length of the rest phase used at the start of the recording [s].
        search_s: Half-width of the offset refinement window around the onset estimate [s].

    Raises:
        AlignmentError: No rest phase, no step, or too few overlapping samples.
    """
    from scipy.optimize import minimize_scalar

    rest = rest_pose(recording.time_s, recording.position_m, rest_window_s)
    threshold = max(6.0 * rest.noise_std_m, 0.005)
    onset_rec = detect_onset(recording.time_s, recording.position_m, rest.position_m, threshold)
    onset_sim = detect_onset(sim.time_s, sim.position_m, sim.position_m[0], threshold)
    offset0 = onset_rec - onset_sim
    n_overlap = int(np.sum(recording.valid & (recording.time_s - offset0 >= sim.time_s[0])
                           & (recording.time_s - offset0 <= sim.time_s[-1])))
    if n_overlap < 20:
        raise AlignmentError("recording and simulation hardly overlap in time",
                             {"overlap_samples": n_overlap, "offset_s": offset0})
    # Search the change of the offset, not the offset: epoch-sized values would swamp the solver's relative
    # tolerance (√eps · 1.7e9 s ≈ 25 s).
    res = minimize_scalar(lambda d: _fit_at(recording, sim, offset0 + d)[0], bounds=(-search_s, search_s),
                          method="bounded", options={"xatol": 1e-5})
    offset = offset0 + float(res.x)
    rms, rot, trans = _fit_at(recording, sim, offset)
    return Alignment(offset, rot, trans, rms, rest)
