"""Time and space alignment of a recorded tip with a simulated one.

The recording is in the mocap frame with its own clock; the simulation is in the robot's world frame with time 0
at the start of the motion. Alignment finds ``t_sim = t_rec − offset`` and a rigid transform ``x_robot = R x_mocap
+ t``:

1. the rest pose and the noise level come from the stillest window of the recording, wherever it is (before the
   motion, between its parts or after the ring-out);
2. a first time offset comes from the known start of the motion in the recording when it is given; otherwise from
   two estimates, the better kept: the step onset, where the tip leaves its rest pose by more than a threshold
   (when the recording starts at rest; the same detector runs on the simulation, so its threshold delay largely
   cancels), and a scan of every offset that overlaps recording and simulation for the smallest residual of the
   rigid fit below (it needs no rest at the start: a recording that starts with the motion aligns too);
3. the rigid transform is the weighted least-squares (Kabsch) fit of the recorded samples onto the simulated ones
   at the aligned times — the swing of the step makes the point set non-degenerate;
4. the offset is refined by minimizing that fit's residual over a small window.

Occluded samples (NaN) are ignored everywhere. The fitter re-fits the transform inside its residual
(:func:`kabsch`), so the material parameters are fitted against the best transform for each trial.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from retarget.fit.errors import AlignmentError
from retarget.fit.recording import TipRecording
from retarget.fit.simulators import TipTrajectory
from retarget.mocap.onset import crossing_time, departure

__all__ = ["Alignment", "RestPose", "align", "detect_onset", "difference_noise", "kabsch", "rest_pose", "still_pose"]


@dataclass(frozen=True)
class RestPose:
    """The tip at rest.

    Attributes:
        position_m: Median rest position (3,) [m].
        noise_std_m: Robust per-axis noise estimate (median absolute deviation × 1.4826, averaged) [m].
        samples: Number of samples used.
        start_s: Time of the window's first sample [s] (recording clock).
        end_s: Time of the window's last sample [s] (recording clock).
    """

    position_m: NDArray[np.float64]
    noise_std_m: float
    samples: int
    start_s: float = float("nan")
    end_s: float = float("nan")


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


def _window_pose(time_s: NDArray[np.float64], position_m: NDArray[np.float64]) -> RestPose:
    median = np.median(position_m, axis=0)
    mad = np.median(np.abs(position_m - median), axis=0) * 1.4826
    return RestPose(median, float(np.mean(mad)), len(time_s), float(time_s[0]), float(time_s[-1]))


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
    return _window_pose(time_s[window], position_m[window])


def still_pose(time_s: NDArray[np.float64], position_m: NDArray[np.float64], duration_s: float = 0.3) -> RestPose:
    """Rest pose from the stillest ``duration_s`` [s] window of tracked samples, anywhere in the recording.

    Windows start every quarter window; the stillest is the one with the smallest robust spread (MAD). A window
    needs at least 5 tracked samples and two thirds of the samples of the densest window (so a window that is
    mostly occluded cannot win by having few samples). The noise is :func:`difference_noise` of the whole
    recording (the window's spread when too few samples are evenly spaced).

    Raises:
        AlignmentError: No window with 5 tracked samples.
    """
    valid = np.isfinite(position_m).all(axis=1)
    t, p = time_s[valid], position_m[valid]
    if t.size < 5:
        raise AlignmentError("too few tracked samples to find a rest pose", {"samples": int(t.size)})
    starts = np.arange(t[0], max(t[-1] - duration_s, t[0]) + 1e-12, duration_s / 4.0)
    first = np.searchsorted(t, starts, side="left")
    last = np.searchsorted(t, starts + duration_s, side="right")
    counts = last - first
    enough = counts >= max(5, int(np.ceil(2.0 / 3.0 * counts.max())))
    if not enough.any():
        raise AlignmentError("too few tracked samples in any window to find a rest pose",
                             {"window_s": duration_s, "most_samples": int(counts.max())})
    best: RestPose | None = None
    for a, b in zip(first[enough], last[enough]):
        pose = _window_pose(t[a:b], p[a:b])
        if best is None or pose.noise_std_m < best.noise_std_m:
            best = pose
    assert best is not None
    # The noise from the differences of the whole recording: the stillest window's spread is the smallest of many
    # (biased low), and a recording that never comes to rest (cut before the ring-out ends) has no still window.
    noise = difference_noise(time_s, position_m)
    return replace(best, noise_std_m=noise) if np.isfinite(noise) else best


#: Fourth-difference stencil: blind to cubics, ``(ω dt)⁴`` of a sinusoid, ``Σc² = 70`` times white noise's variance.
_D4 = np.array([1.0, -4.0, 6.0, -4.0, 1.0])


def difference_noise(time_s: NDArray[np.float64], values: NDArray[np.float64]) -> float:
    """Noise std of samples from their fourth differences [unit of ``values``], averaged over columns.

    For white noise σ, ``Σ c_k x[i+k]`` with ``c = (1, −4, 6, −4, 1)`` has std ``√70 σ``; a smooth motion adds
    only ``(ω dt)⁴`` of its amplitude (a 3 Hz swing at 120 Hz: 8e-4). Robust (median absolute deviation); only
    evenly spaced runs of five tracked samples count.

    Args:
        time_s: (n,) [s].
        values: (n, k) or (n,) samples, NaN where untracked.

    Returns:
        The estimate, or ``inf`` with fewer than 10 usable runs.
    """
    v = values.reshape(len(time_s), -1)
    n = len(time_s)
    if n < 5:
        return float("inf")
    ok = np.isfinite(v).all(axis=1)
    dt = np.diff(time_s)
    step = float(np.median(dt))
    even = np.abs(dt - step) <= 0.1 * step
    use = np.ones(n - 4, dtype=bool)
    for k in range(5):
        use &= ok[k:n - 4 + k]
    for k in range(4):
        use &= even[k:n - 4 + k]
    if use.sum() < 10:
        return float("inf")
    vz = np.nan_to_num(v)
    d4 = sum(c * vz[k:n - 4 + k] for k, c in enumerate(_D4))[use]
    mad = np.median(np.abs(d4 - np.median(d4, axis=0)), axis=0) * 1.4826
    return float(np.mean(mad) / np.sqrt(70.0))


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
    i = departure(dist, threshold_m, consecutive)
    if i is None:
        raise AlignmentError("the tip never leaves its rest pose (no step found)",
                             {"threshold_m": threshold_m, "max_distance_m": float(dist.max(initial=0.0))})
    return float(t[0]) if i == 0 else crossing_time(t, dist, i, threshold_m)


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


def _scan_offset(recording: TipRecording, sim: TipTrajectory, step_s: float, min_overlap: float = 0.9
                 ) -> float | None:
    """The offset on a grid of ``step_s`` [s] with the smallest rigid-fit residual, over every offset at which
    recording and simulation overlap by at least ``min_overlap`` of the shorter one; None if there is none."""
    valid = recording.valid
    t, p = recording.time_s[valid], recording.position_m[valid]
    if t.size < 20:
        return None
    s0, s1 = float(sim.time_s[0]), float(sim.time_s[-1])
    need = min_overlap * min(t[-1] - t[0], s1 - s0)
    lo, hi = t[0] - s1 + need, t[-1] - s0 - need
    if hi < lo:
        return None
    best, best_rms = None, np.inf
    for off in np.arange(lo, hi + 0.5 * step_s, step_s):
        ts = t - off
        inside = (ts >= s0) & (ts <= s1)
        if inside.sum() < 20:
            continue
        src, dst = p[inside], sim.at(ts[inside])
        rot, trans = kabsch(src, dst)
        rms = float(np.sqrt(np.mean(np.sum((src @ rot.T + trans - dst) ** 2, axis=1))))
        if rms < best_rms:
            best, best_rms = float(off), rms
    return best


def _onset_offset(recording: TipRecording, sim: TipTrajectory, rest_window_s: float,
                  still: RestPose) -> float | None:
    """The offset from the step onset when the recording starts at rest (its first window as still as the
    stillest one, within 3× the noise and 6σ/5 mm of its pose); None otherwise."""
    try:
        first = rest_pose(recording.time_s, recording.position_m, rest_window_s)
    except AlignmentError:
        return None
    threshold = max(6.0 * first.noise_std_m, 0.005)
    if first.noise_std_m > 3.0 * max(still.noise_std_m, 1e-6) and first.noise_std_m > 0.5e-3:
        return None
    try:
        onset_rec = detect_onset(recording.time_s, recording.position_m, first.position_m, threshold)
        onset_sim = detect_onset(sim.time_s, sim.position_m, sim.position_m[0], threshold)
    except AlignmentError:
        return None
    return onset_rec - onset_sim


def align(recording: TipRecording, sim: TipTrajectory, rest_window_s: float = 0.3,
          search_s: float = 0.05, motion_start_s: float | None = None) -> Alignment:
    """Align ``recording`` with ``sim`` (steps 1–4 of the module docstring).

    Args:
        recording: The recorded tip (mocap frame, any clock).
        sim: A simulation of the same motion (robot frame, t = 0 at the motion's start), e.g. at the initial
            material guess: vibration differences hardly move the alignment, which is dominated by the step.
        rest_window_s: Length of the rest window [s].
        search_s: Half-width of the offset refinement window around the first estimate [s].
        motion_start_s: When the motion's command started, in seconds after the recording's first sample
            (negative: before it), known to within ``search_s``; None: find it (step 2).

    Raises:
        AlignmentError: No rest window, no offset at which recording and simulation overlap, or too few
            overlapping samples.
    """
    from scipy.optimize import minimize_scalar

    rest = still_pose(recording.time_s, recording.position_m, rest_window_s)
    if motion_start_s is not None:
        candidates = [float(recording.time_s[0]) + float(motion_start_s)]
    else:
        candidates = [c for c in (_onset_offset(recording, sim, rest_window_s, rest),
                                  _scan_offset(recording, sim, min(0.01, search_s / 2))) if c is not None]
        if not candidates:
            raise AlignmentError("the recording and the simulation of its motion overlap nowhere by 90 % of the "
                                 "shorter: is it the recording of this motion? (give the motion's start in the "
                                 "recording with --motion-start)",
                                 {"recording_s": float(np.ptp(recording.time_s)),
                                  "motion_s": float(np.ptp(sim.time_s))})
    best: tuple[float, float] | None = None
    for offset0 in candidates:
        n_overlap = int(np.sum(recording.valid & (recording.time_s - offset0 >= sim.time_s[0])
                               & (recording.time_s - offset0 <= sim.time_s[-1])))
        if n_overlap < 20:
            continue
        # Search the change of the offset, not the offset: epoch-sized values would swamp the solver's relative
        # tolerance (√eps · 1.7e9 s ≈ 25 s).
        res = minimize_scalar(lambda d, o=offset0: _fit_at(recording, sim, o + d)[0], bounds=(-search_s, search_s),
                              method="bounded", options={"xatol": 1e-5})
        if best is None or float(res.fun) < best[1]:
            best = (offset0 + float(res.x), float(res.fun))
    if best is None:
        raise AlignmentError("recording and simulation hardly overlap in time",
                             {"offset_s": candidates[0], "motion_start_s": motion_start_s})
    offset = best[0]
    rms, rot, trans = _fit_at(recording, sim, offset)
    return Alignment(offset, rot, trans, rms, rest)
