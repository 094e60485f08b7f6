"""Input-shaping baselines (ZV, ZVD) and identification of the first vibration mode from a simulated trajectory.

Shapers. For a mode with natural frequency ``f`` [Hz] and damping ratio ``ζ``: ``ω = 2πf``,
``ω_d = ω √(1 − ζ²)``, damped period ``T_d = 2π/ω_d`` and ``K = exp(−ζπ / √(1 − ζ²))``. An input shaper is an
impulse train ``Σ_i A_i δ(t − t_i)`` with ``Σ A_i = 1``; the shaped command is ``θ_s(t) = Σ_i A_i θ(t − t_i)``::

    ZV:   A = [1, K] / (1 + K),            t = [0, T_d/2]
    ZVD:  A = [1, 2K, K²] / (1 + K)²,      t = [0, T_d/2, T_d]

ZV cancels the residual vibration of the mode exactly at the design frequency; ZVD also zeroes its derivative with
respect to the frequency, so it tolerates modelling errors (about ±20% for 5% residual vibration) at the cost of
twice the duration. The residual vibration of a shaper applied to a mode ``(f', ζ')`` is, relative to an unshaped
step, ``V = e^{−ζ'ω' t_N} |Σ_i A_i e^{ζ'ω' t_i} e^{j ω'_d t_i}|`` (:meth:`Shaper.residual_vibration`).

Lag. The shaped motion lasts ``duration = t_N`` longer than the input. Its *lag* is the impulse centroid
``lag_s = Σ_i A_i t_i``: any part of the input that is linear in time (a constant-speed move) comes out delayed by
exactly this, and slow motions are delayed by it to first order. For an undamped mode it is ``T_d/4`` (ZV) and
``T_d/2`` (ZVD).

Identification (:func:`identify_vibration`): the free decay of a tracked body after a move is fitted by
``y(t) = e^{−σ τ}(a cos ω_d τ + b sin ω_d τ) + c`` (``τ = t − t_start``) with nonlinear least squares, started
from the lowest strong FFT peak (Hann window, zero-padded, parabolic peak interpolation) and the logarithmic decrement
of the successive peaks; then ``ω = √(σ² + ω_d²)`` and ``ζ = σ/ω``. When the spectrum shows a second strong mode,
the signal is first low-passed (zero-phase) between the two so that the single-mode fit sees the first one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.motion.motion import Motion
from retarget.optimize.errors import ShapingError

__all__ = [
    "Shaper",
    "VibrationEstimate",
    "identify_from_trajectory",
    "identify_vibration",
    "shape_motion",
    "zv_shaper",
    "zvd_shaper",
]


@dataclass(frozen=True, eq=False)
class Shaper:
    """An impulse train ``Σ A_i δ(t − t_i)``.

    Attributes:
        name: ``"ZV"``, ``"ZVD"`` or a user name.
        amplitudes: ``A_i`` ``(N,)``, summing to one.
        times: ``t_i`` [s] ``(N,)``, starting at 0 and increasing.
        frequency_hz: Design natural frequency [Hz].
        damping_ratio: Design damping ratio.
    """

    name: str
    amplitudes: NDArray[np.float64]
    times: NDArray[np.float64]
    frequency_hz: float
    damping_ratio: float

    @property
    def duration(self) -> float:
        """Time of the last impulse [s]: how much longer the shaped motion is."""
        return float(self.times[-1])

    @property
    def lag_s(self) -> float:
        """Impulse centroid ``Σ A_i t_i`` [s] (see module docstring)."""
        return float(self.amplitudes @ self.times)

    def residual_vibration(self, frequency_hz: float, damping_ratio: float = 0.0) -> float:
        """Residual vibration of a mode ``(f, ζ)`` after the shaped step, relative to the unshaped step."""
        omega = 2.0 * math.pi * frequency_hz
        sigma = damping_ratio * omega
        omega_d = omega * math.sqrt(1.0 - damping_ratio ** 2)
        z = np.sum(self.amplitudes * np.exp(sigma * self.times) * np.exp(1j * omega_d * self.times))
        return float(math.exp(-sigma * self.duration) * abs(z))


def _mode_constants(frequency_hz: float, damping_ratio: float) -> tuple[float, float]:
    """``(T_d [s], K)``."""
    if not (frequency_hz > 0 and math.isfinite(frequency_hz)):
        raise ShapingError(f"shaper frequency must be a positive number of Hz, got {frequency_hz}",
                           frequency_hz=frequency_hz)
    if not 0.0 <= damping_ratio < 1.0:
        raise ShapingError(f"shaper damping ratio must be in [0, 1), got {damping_ratio}", damping_ratio=damping_ratio)
    root = math.sqrt(1.0 - damping_ratio ** 2)
    return 1.0 / (frequency_hz * root), math.exp(-damping_ratio * math.pi / root)


def zv_shaper(frequency_hz: float, damping_ratio: float = 0.0) -> Shaper:
    """The zero-vibration shaper (two impulses) for a mode at ``frequency_hz`` [Hz] with ``damping_ratio``."""
    period, k = _mode_constants(frequency_hz, damping_ratio)
    return Shaper("ZV", np.array([1.0, k]) / (1.0 + k), np.array([0.0, 0.5 * period]), frequency_hz, damping_ratio)


def zvd_shaper(frequency_hz: float, damping_ratio: float = 0.0) -> Shaper:
    """The zero-vibration-and-derivative shaper (three impulses)."""
    period, k = _mode_constants(frequency_hz, damping_ratio)
    return Shaper("ZVD", np.array([1.0, 2.0 * k, k * k]) / (1.0 + k) ** 2, np.array([0.0, 0.5 * period, period]),
                  frequency_hz, damping_ratio)


def shape_motion(motion: Motion, shaper: Shaper, *, rate: float | None = None, method: str = "linear") -> Motion:
    """Convolve a motion with a shaper's impulse train.

    ``θ_s(t) = Σ_i A_i θ(t − t_i)`` with the motion holding its first pose before its start and its last pose after
    its end; the result covers ``[t0, t1 + duration]``.

    Args:
        motion: Input motion.
        shaper: The impulse train.
        rate: Output sampling rate [Hz]; default: the input's median sampling rate.
        method: Interpolation of the input between its samples (see :meth:`Motion.sample`).

    Returns:
        The shaped motion, same joints, on a uniform grid.
    """
    if rate is None:
        if motion.num_samples < 2:
            raise ShapingError("a single-sample motion needs an explicit rate to be shaped")
        rate = 1.0 / float(np.median(np.diff(motion.time)))
    if not (rate > 0 and math.isfinite(rate)):
        raise ShapingError(f"rate must be a positive number of Hz, got {rate}", rate=rate)
    end = motion.time[-1] + shaper.duration
    count = int(math.ceil((end - motion.time[0]) * rate - 1e-9)) + 1
    t = motion.time[0] + np.arange(count) / rate
    q = sum(a * motion.sample(t - ti, method) for a, ti in zip(shaper.amplitudes, shaper.times))
    return Motion(t, motion.joint_names, np.asarray(q))


@dataclass(frozen=True)
class VibrationEstimate:
    """The identified first vibration mode.

    Attributes:
        frequency_hz: Natural frequency ``f`` [Hz].
        damping_ratio: ``ζ``.
        damped_frequency_hz: ``f √(1 − ζ²)`` [Hz], what the signal oscillates at.
        amplitude: Initial amplitude of the fitted decay (signal units).
        offset: Equilibrium of the fitted decay (signal units).
        fft_frequency_hz: The starting guess from the spectrum [Hz].
        relative_residual: RMS fit residual over RMS of the oscillation.
    """

    frequency_hz: float
    damping_ratio: float
    damped_frequency_hz: float
    amplitude: float
    offset: float
    fft_frequency_hz: float
    relative_residual: float


def _spectral_peaks(y: NDArray[np.float64], dt: float, f_min: float, f_max: float
                    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Frequencies [Hz] and heights of the strong spectral peaks (≥ 30% of the largest), lowest first."""
    from scipy.signal import find_peaks

    n = y.size
    n_fft = 1 << int(math.ceil(math.log2(8 * n)))
    spec = np.abs(np.fft.rfft((y - y.mean()) * np.hanning(n), n_fft))
    freqs = np.fft.rfftfreq(n_fft, dt)
    band = (freqs >= f_min) & (freqs <= f_max)
    masked = np.where(band, spec, 0.0)
    if masked.max() <= 0.0:
        raise ShapingError("the signal has no oscillation in the searched band", f_min=f_min, f_max=f_max)
    idx, _ = find_peaks(masked, height=0.3 * masked.max())
    if idx.size == 0:
        idx = np.array([int(np.argmax(masked))])
    out = []
    for i in idx:
        if 0 < i < spec.size - 1:
            # Parabolic interpolation of the log-spectrum around the bin: sub-bin accuracy.
            a, b, c = np.log(spec[i - 1:i + 2] + 1e-300)
            shift = 0.5 * (a - c) / (a - 2 * b + c) if (a - 2 * b + c) != 0 else 0.0
            out.append(freqs[i] + shift * (freqs[1] - freqs[0]))
        else:
            out.append(freqs[i])
    return np.array(out), masked[idx]


def _decrement_guess(y: NDArray[np.float64], dt: float, f_d: float) -> float:
    """Decay rate σ [1/s] from the logarithmic decrement of successive positive peaks."""
    from scipy.signal import find_peaks

    peaks, _ = find_peaks(y, distance=max(1, int(0.7 / (f_d * dt))))
    peaks = peaks[y[peaks] > 0]
    if peaks.size < 2:
        return 0.01 * 2 * math.pi * f_d
    slope = np.polyfit(peaks * dt, np.log(y[peaks]), 1)[0]
    return max(-float(slope), 0.0)


def identify_vibration(time: ArrayLike, signal: ArrayLike, *, min_frequency: float | None = None,
                       max_frequency: float | None = None) -> VibrationEstimate:
    """Identify the first (lowest strong) vibration mode of a free-decay signal.

    Args:
        time: Uniform sample times [s] ``(n,)``.
        signal: Free decay ``(n,)`` (any unit), e.g. a tracked body's displacement along its main direction.
        min_frequency: Lowest frequency searched [Hz] (default: two periods in the record).
        max_frequency: Highest frequency searched [Hz] (default: a quarter of the sampling rate).

    Raises:
        ShapingError: On too short, non-uniform or non-oscillating signals, or a fit that does not converge.
    """
    from scipy.optimize import least_squares

    t = np.asarray(time, dtype=np.float64)
    y = np.asarray(signal, dtype=np.float64)
    if t.ndim != 1 or y.shape != t.shape or t.size < 16:
        raise ShapingError(f"need ≥ 16 samples of a 1-D signal, got shapes {t.shape} and {y.shape}")
    dt = float(t[1] - t[0])
    if not np.allclose(np.diff(t), dt, rtol=1e-6):
        raise ShapingError("identification needs uniformly sampled times")
    if np.ptp(y) <= 1e-12 * max(1.0, float(np.abs(y).max())):
        raise ShapingError("the signal is constant: nothing vibrates")
    span = t[-1] - t[0]
    f_min = 2.0 / span if min_frequency is None else float(min_frequency)
    f_max = 0.25 / dt if max_frequency is None else float(max_frequency)
    freqs, _ = _spectral_peaks(y, dt, f_min, f_max)
    f_guess = float(freqs[0])
    work = y
    if freqs.size > 1:
        from scipy.signal import butter, sosfiltfilt

        cutoff = math.sqrt(freqs[0] * freqs[1])
        work = sosfiltfilt(butter(4, cutoff, fs=1.0 / dt, output="sos"), y - y[-1]) + y[-1]
    tau = t - t[0]
    offset0 = float(np.mean(work[-max(1, work.size // 10):]))
    sigma0 = _decrement_guess(work - offset0, dt, f_guess)
    omega0 = 2 * math.pi * f_guess
    # Linear least squares for a, b, c at the guessed σ, ω_d gives a good start for the full fit.
    basis = np.stack([np.exp(-sigma0 * tau) * np.cos(omega0 * tau), np.exp(-sigma0 * tau) * np.sin(omega0 * tau),
                      np.ones_like(tau)], axis=1)
    a0, b0, c0 = np.linalg.lstsq(basis, work, rcond=None)[0]

    def residual(z: NDArray[np.float64]) -> NDArray[np.float64]:
        a, b, sigma, omega, c = z
        e = np.exp(-sigma * tau)
        return e * (a * np.cos(omega * tau) + b * np.sin(omega * tau)) + c - work

    fit = least_squares(residual, np.array([a0, b0, sigma0, omega0, c0]), x_scale="jac", method="lm")
    a, b, sigma, omega_d, c = fit.x
    if not fit.success or omega_d <= 0 or not np.all(np.isfinite(fit.x)):
        raise ShapingError(f"vibration fit did not converge: {fit.message}", guess_hz=f_guess)
    omega_d = abs(omega_d)
    omega_n = math.hypot(sigma, omega_d)
    osc = work - c
    rel = float(np.sqrt(np.mean(fit.fun ** 2)) / max(np.sqrt(np.mean(osc ** 2)), 1e-300))
    return VibrationEstimate(float(omega_n / (2 * math.pi)), float(sigma / omega_n), float(omega_d / (2 * math.pi)),
                             float(math.hypot(a, b)), float(c), f_guess, rel)


def identify_from_trajectory(time: ArrayLike, positions: ArrayLike, *, start_time: float | None = None,
                             end_time: float | None = None, **options: float) -> VibrationEstimate:
    """Identify the first vibration mode of a tracked body from its simulated trajectory.

    The segment ``[start_time, end_time]`` (default: all) should be a free decay, e.g. after the motors stop. The
    3-D displacement is projected on its principal direction (largest variance) before :func:`identify_vibration`.

    Args:
        time: Sample times [s] ``(n,)``.
        positions: Body positions [m] ``(n, 3)`` (or a 1-D signal ``(n,)``).
        start_time: Start of the free decay [s].
        end_time: End of the free decay [s].
        **options: ``min_frequency`` / ``max_frequency`` [Hz] for :func:`identify_vibration`.
    """
    t = np.asarray(time, dtype=np.float64)
    x = np.asarray(positions, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.shape[0] != t.size:
        raise ShapingError(f"{t.size} times for {x.shape[0]} positions")
    keep = np.ones(t.size, dtype=bool)
    if start_time is not None:
        keep &= t >= start_time
    if end_time is not None:
        keep &= t <= end_time
    seg_t, seg = t[keep], x[keep]
    centred = seg - seg.mean(axis=0)
    direction = np.linalg.svd(centred, full_matrices=False)[2][0]
    return identify_vibration(seg_t, centred @ direction, **options)
