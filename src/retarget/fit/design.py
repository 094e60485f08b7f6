"""Experiment design for material fitting: the identification motion and the predicted uncertainty of a fit.

Step tests excite essentially the first bending mode, whose damping ratio ``ζ₁`` fixes only one combination of
Rayleigh α and β (docs/fit.md, "Identifiability"). The second bending mode has a different shape and frequency, so
its decay rate ``λ₂ = ζ₂ω₂ ≈ α c₂/2 + β ω₂²/2`` weighs β ~100 times more than ``λ₁`` does; recording it ringing
out separates α from β. :func:`design_identification_motion` builds such a motion for a rig:

1. rest, then ``bursts`` trains of ``cycles`` motor oscillations about the rest angle whose keyframes alternate
   ``±a`` every half period of the second mode (``f₂`` from the rig's beam model at the given E, not hard-coded),
   each followed by a ring-out;
2. then a step like ``step_30`` held for the first mode's ring-out (a large planar swing for the alignment, E and
   ``ζ₁``), return and ring-out. The step comes last because its first-mode swing loads the horn for as long as it
   rings. With a torque limit its ramps are lengthened from the speed-limited one until the step's predicted peak
   load torque (:func:`step_peak_torque`, over the torque moduli at the least damping) is within the limit too.

The amplitude ``a`` is the largest that keeps the bursts within a fraction of the servo's stall torque:
:func:`burst_torque_bound` bounds their load torque (:func:`load_torque`) for any true E in the design range at
the least damping of :data:`MATERIAL_RANGES` (resonance loads the horn most when the part is least damped, and
the ringing left by earlier bursts adds up in phase at some E), and ``a`` is scaled so that bound is within the
limit. It is also capped by the servo's speed limit (pchip between alternating extremes peaks at ``3a/h`` for a
half period ``h``). :func:`choose_burst_count` then picks the number of bursts (and the ring-out) from the
predicted uncertainty over the corners of the material ranges.

Short bursts (4 cycles) keep the excitation broad-band enough that a modulus ±25 % off the design value still
drives mode 2 (the phase slip over a burst stays below a cycle).

:func:`predict_uncertainty` is the Cramér–Rao bound of a fit before anything is recorded: the linearized
``σ (JᵀJ)⁻¹`` of the parameters' logs for given motions, true values, capture rate and noise, with one time
offset per recording as a nuisance parameter (the rigid mocap transform is taken as known). It agrees with the
fitter's own 1σ on twin recordings to ~10 % (docs/fit.md), so it compares motions without running fits.

The twin drives the motor angle exactly along the motion (a kinematic drive); see docs/fit.md for what that means
for real servos.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.atomic import write_text_atomic
from retarget.errors import InputError
from retarget.fit.rig import StepTestRig
from retarget.fit.simulators import StepTestSimulator, TipTrajectory

if TYPE_CHECKING:
    from retarget.motion.motion import Motion

__all__ = [
    "DEFAULT_BURSTS",
    "DEFAULT_GAP_S",
    "DEFAULT_HOLD_S",
    "MATERIAL_RANGES",
    "TORQUE_FRACTION",
    "BurstChoice",
    "IdentificationDesign",
    "UncertaintyPrediction",
    "burst_peak_torque",
    "burst_torque_bound",
    "choose_burst_count",
    "design_identification_motion",
    "load_torque",
    "material_corners",
    "predict_uncertainty",
    "step_peak_torque",
    "write_identification_motion",
]

#: The sampling rate written into identification motions [Hz]: ~30 samples per period of a 32 Hz mode.
IDENT_RATE_HZ = 1000.0


#: The material ranges the shipped identification motion is designed for and ``retarget check fit --random`` draws
#: from: E [Pa] (uniform), Rayleigh α [1/s] and β [s] (log-uniform).
MATERIAL_RANGES: dict[str, tuple[float, float]] = {"youngs_modulus": (150e9, 220e9), "alpha": (0.1, 2.0),
                                                   "beta": (1e-5, 3e-4)}

#: Fraction of the servo's stall torque the bursts may load the horn with (margin for the rotor and horn inertia,
#: friction and the model's error).
TORQUE_FRACTION = 0.8


@dataclass(frozen=True, eq=False)
class IdentificationDesign:
    """An identification motion and the numbers it was designed from.

    Attributes:
        robot: Rig name.
        motor: Motor joint name.
        youngs_modulus: E the mode frequencies were computed at [Pa].
        frequencies_hz: First and second bending frequency of the rig at the rest angle [Hz].
        step_rad: Angle of the step that follows the bursts [rad].
        amplitude_rad: Burst amplitude a about the rest angle [rad].
        cycles: Oscillation cycles per burst.
        bursts: Number of bursts.
        peak_rate_rad_s: Largest motor speed of the sampled motion [rad/s].
        max_velocity: The servo speed limit it was designed against [rad/s].
        times_s: Keyframe times (k,) [s].
        angles_rad: Keyframe motor angles (k,) [rad].
        burst_end_s: End of the bursts and their ring-outs, where the step starts [s].
        torque_limit_nm: The torque the bursts were held to (fraction of the stall torque) [N m], or ``None`` when
            the amplitude was set by the speed limit alone.
        burst_torque_nm: Bound on the bursts' peak load torque (beam model, up to ``burst_end_s``, whatever the
            true E in the torque moduli; :func:`burst_torque_bound`) [N m]; NaN without a torque limit.
        torque_damping: Rayleigh (α [1/s], β [s]) the burst torque was predicted with (the least damping
            expected: resonance loads the horn most when the part is least damped).
        step_ramp_s: Duration of the step's rise and of its return [s] (0 without a step).
        step_torque_nm: Predicted peak load torque of the step (:func:`step_peak_torque`, the largest over the
            torque moduli at ``torque_damping``) [N m]; NaN without a torque limit or without a step.
        stall_torque_nm: The servo's stall torque the design is for (``stall_torque`` given, else the rig file's)
            [N m], or ``None`` when neither gives one.
    """

    robot: str
    motor: str
    youngs_modulus: float
    frequencies_hz: tuple[float, float]
    step_rad: float
    amplitude_rad: float
    cycles: int
    bursts: int
    peak_rate_rad_s: float
    max_velocity: float
    times_s: NDArray[np.float64]
    angles_rad: NDArray[np.float64]
    burst_end_s: float = 0.0
    torque_limit_nm: float | None = None
    burst_torque_nm: float = float("nan")
    torque_damping: tuple[float, float] = (0.0, 0.0)
    step_ramp_s: float = 0.0
    step_torque_nm: float = float("nan")
    stall_torque_nm: float | None = None

    @property
    def duration_s(self) -> float:
        """Length of the motion [s]."""
        return float(self.times_s[-1])

    @property
    def description(self) -> str:
        """The motion file's description: what it is and what it was designed from."""
        f1, f2 = self.frequencies_hz
        if self.torque_limit_nm is None:
            limit = "amplitude set by the speed limit"
        else:
            limit = (f"amplitude set so the bursts' load torque stays below {self.burst_torque_nm:.2f} N m <= "
                     f"{self.torque_limit_nm:.2f} N m (bound over E in the design range at the least damping)")
        if self.step_rad == 0.0:
            step = "then ring-out"
        else:
            load = ("load torque not limited" if math.isnan(self.step_torque_nm)
                    else f"load torque {self.step_torque_nm:.2f} N m, same bound")
            step = (f"then a {math.degrees(self.step_rad):.0f} degree step in {self.step_ramp_s:.3f} s ({load}) held "
                    "for the first mode's ring-out, return and ring-out")
        return (
            f"Material-fitting identification motion (generated by `retarget fit-motion`, docs/fit.md): "
            f"{self.bursts} bursts of {self.cycles} motor oscillations of +-{math.degrees(self.amplitude_rad):.3f} "
            f"degrees about the rest angle at the second bending mode (f2 = {f2:.2f} Hz, f1 = {f1:.3f} Hz at "
            f"E = {self.youngs_modulus / 1e9:.0f} GPa, keyframes every half period) with ring-outs between; "
            f"{limit}; {step} ({self.duration_s:.2f} s). Peak motor speed {self.peak_rate_rad_s:.2f} rad/s, within "
            f"the servo speed limit ({self.max_velocity:.2f} rad/s). Record it with the tip's orientation; fit it together with "
            "step_30."
        )

    def keyframes(self) -> object:
        """The motion as :class:`retarget.motion.Keyframes` (pchip, sampled at :data:`IDENT_RATE_HZ`)."""
        from retarget.motion.keyframes import Keyframes

        return Keyframes((self.motor,), self.times_s.copy(), self.angles_rad[:, None].copy(), "pchip",
                         IDENT_RATE_HZ, self.robot, self.description)

    def motion(self) -> object:
        """The sampled :class:`retarget.motion.Motion`."""
        return self.keyframes().to_motion()  # type: ignore[attr-defined]

    def to_yaml(self) -> str:
        """A keyframes YAML file like the hand-written motions (degrees, 5 decimals in time and in angle)."""
        import textwrap

        text = textwrap.fill(self.description, width=112, initial_indent="  ", subsequent_indent="  ")
        rows = [f"  - [{t:.5f}, {math.degrees(q):.5f}]" for t, q in zip(self.times_s, self.angles_rad)]
        return (f"robot: {self.robot}\ndescription: >-\n{text}\nunit: deg\ninterpolation: pchip\n"
                f"rate: {int(IDENT_RATE_HZ)}\njoints: [{self.motor}]\n"
                f"keyframes:                     # [time [s], {self.motor}] [deg]\n" + "\n".join(rows) + "\n")


#: Defaults of the shipped design (single_rod), chosen by :func:`choose_burst_count` (``retarget fit-motion
#: --choose --candidates 1,2,4,8,16 --gaps 0.9,2.0``): the smallest worst-case α, β 1σ over the corners of
#: :data:`MATERIAL_RANGES` within 30 s. The 3 % target is out of reach within the XM430's stall torque (docs/fit.md).
DEFAULT_BURSTS = 8
DEFAULT_GAP_S = 2.0
DEFAULT_HOLD_S = 3.0


def _keyframes(lead_s: float, half: float, amp: float, cycles: int, bursts: int, gap_s: float, step: float,
               ramp: float, hold_s: float, tail_s: float) -> tuple[list[float], list[float], float]:
    """Keyframes of rest, the bursts about 0 with their ring-outs, then step, hold, return, tail.

    Returns:
        ``(times [s], angles [rad], end of the bursts' section [s])``.
    """
    times, angles = [0.0], [0.0]
    t = lead_s
    for _ in range(bursts):
        times.append(t)
        angles.append(0.0)
        t += 0.5 * half
        times.append(t)
        angles.append(amp)
        for k in range(2 * cycles - 1):
            t += half
            times.append(t)
            angles.append(-amp if k % 2 == 0 else amp)
        t += 0.5 * half
        times.append(t)
        angles.append(0.0)
        t += gap_s
    times.append(t)
    angles.append(0.0)
    burst_end = t
    if step != 0.0:
        t += ramp
        times.append(t)
        angles.append(step)
        t += hold_s
        times.append(t)
        angles.append(step)
        t += ramp
        times.append(t)
        angles.append(0.0)
    t += tail_s
    times.append(t)
    angles.append(0.0)
    return times, angles, burst_end


def _motion_of(motor: str, times: Sequence[float], angles: Sequence[float], robot: str) -> Motion:
    from retarget.motion.keyframes import Keyframes

    return Keyframes((motor,), np.asarray(times, dtype=float), np.asarray(angles, dtype=float)[:, None], "pchip",
                     IDENT_RATE_HZ, robot, "").to_motion()


def burst_peak_torque(engine: object, youngs_modulus: float, alpha: float, beta: float, motion: object,
                      until_s: float) -> float:
    """Peak load torque of a motion up to a time (the bursts' section of an identification motion) [N m].

    Args:
        engine: A :class:`retarget.fit.simulators.BeamEngine`.
        youngs_modulus, alpha, beta: Material [Pa], [1/s], [s].
        motion: The motion.
        until_s: End of the window [s].
    """
    t, tau = load_torque(engine, youngs_modulus, alpha, beta, motion)
    return float(np.abs(tau[t <= until_s]).max())


def burst_torque_bound(rig: StepTestRig, moduli: Sequence[float], damping: tuple[float, float], lead_s: float,
                       half: float, amp: float, cycles: int, bursts: int, gap_s: float) -> float:
    """An upper bound of the bursts' peak load torque that holds whatever the phase of the earlier bursts' ringing.

    The load torque is linear in the motion (up to small centrifugal and gravity terms), so during burst ``j`` it is
    the sum of the responses to bursts ``0..j``, each the response ``τ₁`` to a single burst shifted by a multiple
    of the burst period ``T``. Hence ``|τ| ≤ Σ_m max_{[mT, (m+1)T)} |τ₁|``, for any true E: whether the ringing
    left by the earlier bursts adds up in phase depends on E to within ~1 % (the phase slip over the gaps), so
    the exact peak at one E says nothing about a nearby one, while this bound does not depend on that phase. It
    assumes the part rests at the rest angle without load torque (an upright part, as single_rod). The
    single-burst response is simulated over all the bursts' time at every E of ``moduli`` (it is broad-band in E,
    so a coarse set suffices) and the largest bound is returned.

    Args:
        rig: The rig.
        moduli: E values [Pa].
        damping: Rayleigh (α [1/s], β [s]).
        lead_s: Rest before the first burst [s].
        half: Half period of the drive [s].
        amp: Burst amplitude [rad].
        cycles: Cycles per burst.
        bursts: Number of bursts.
        gap_s: Ring-out after each burst [s].

    Returns:
        The bound [N m].
    """
    from retarget.fit.simulators import BeamEngine

    engine = BeamEngine(rig)
    period = 2 * cycles * half + gap_s
    times, angles, _ = _keyframes(lead_s, half, amp, cycles, 1, bursts * period, 0.0, 0.0, 1.0, 1e-3)
    single = _motion_of(rig.motor, times[:-1], angles[:-1], rig.name)
    worst = 0.0
    for e in moduli:
        t, tau = load_torque(engine, float(e), *damping, single)
        rel = t - lead_s
        # The first window takes in the lead: the part rests there (no load torque at the rest angle for an
        # upright part), and the difference quotient of the first burst's onset reaches back one sample into it.
        windows = [np.abs(tau[(rel >= (m * period if m else -np.inf)) & (rel < (m + 1) * period)])
                   for m in range(bursts)]
        worst = max(worst, sum(float(w.max(initial=0.0)) for w in windows))
    return worst


def design_identification_motion(
    rig: StepTestRig,
    youngs_modulus: float | None = None,
    step_deg: float = 30.0,
    cycles: int = 4,
    bursts: int = DEFAULT_BURSTS,
    gap_s: float = DEFAULT_GAP_S,
    speed_fraction: float = 0.9,
    max_velocity: float | None = None,
    torque_fraction: float | None = TORQUE_FRACTION,
    stall_torque: float | None = None,
    torque_damping: tuple[float, float] | None = None,
    torque_moduli: Sequence[float] | None = None,
    lead_s: float = 0.5,
    hold_s: float = DEFAULT_HOLD_S,
    tail_s: float = 1.0,
) -> IdentificationDesign:
    """Design the identification motion of a rig (module docstring).

    Args:
        rig: The step-test rig.
        youngs_modulus: E [Pa] for the mode frequencies (default: the rig's material; a value fitted from a first
            step test is better when the material is uncertain by more than ~25 %).
        step_deg: Step after the bursts [deg] (0: no step).
        cycles: Oscillation cycles per burst.
        bursts: Number of bursts.
        gap_s: Ring-out after each burst [s].
        speed_fraction: Fraction of the servo speed limit the bursts and the step may use.
        max_velocity: Servo speed limit [rad/s] (default: the rig file's ``servo.max_velocity``).
        torque_fraction: Fraction of the stall torque the bursts' predicted peak load torque may reach, or
            ``None`` to set the amplitude by the speed limit alone.
        stall_torque: Servo stall torque [N m] (default: the rig file's ``servo.stall_torque``).
        torque_damping: Rayleigh (α [1/s], β [s]) for the torque prediction (default: the least damping of
            :data:`MATERIAL_RANGES`, where the resonant bursts load the horn most).
        torque_moduli: E values [Pa] the torque bound is taken over (default: ``youngs_modulus`` and 5 values
            spanning :data:`MATERIAL_RANGES`).
        lead_s: Rest before the bursts [s] (the fitter takes the rest pose and noise from the first 0.3 s).
        hold_s: Hold at the step angle (the first mode's ring-out) [s].
        tail_s: Ring-out after the return [s].

    Raises:
        InputError: Bad arguments, no speed limit or stall torque known, or a motion outside the joint's position
            limits.
    """
    from retarget.fit.beam import build_beam_model

    vmax = rig.max_velocity if max_velocity is None else float(max_velocity)
    if vmax is None or not vmax > 0:
        raise InputError(f"rig {rig.name!r} gives no servo.max_velocity; pass max_velocity [rad/s]")
    if cycles < 1 or bursts < 1:
        raise InputError(f"need at least one cycle and one burst, got cycles={cycles}, bursts={bursts}")
    if not 0.0 < speed_fraction <= 1.0:
        raise InputError(f"speed_fraction must be in (0, 1], got {speed_fraction}")
    if min(gap_s, hold_s, tail_s) <= 0.0 or lead_s < 0.3:
        raise InputError("gap, hold and tail must be positive and the lead at least 0.3 s (the rest pose)")
    limit, stall = _torque_limit(rig, stall_torque, torque_fraction)
    e = float(rig.material.youngs_modulus if youngs_modulus is None else youngs_modulus)
    damping = ((MATERIAL_RANGES["alpha"][0], MATERIAL_RANGES["beta"][0]) if torque_damping is None
               else (float(torque_damping[0]), float(torque_damping[1])))
    step = math.radians(step_deg)
    lo, hi = rig.motor_limits
    if not (lo <= min(step, 0.0) and max(step, 0.0) <= hi):
        raise InputError(f"a {step_deg:.1f} deg step is outside the joint limits [{math.degrees(lo):.1f}, "
                         f"{math.degrees(hi):.1f}] deg; lower step_deg")
    model = build_beam_model(rig)
    # The bursts ride on the rest angle: the step's first-mode swing would keep loading the horn far above stall
    # (~20 N m on single_rod) for the whole ring-out, so the step comes after them.
    f1, f2 = (float(f) for f in model.natural_frequencies(e, theta=0.0)[:2])
    v = speed_fraction * vmax
    half = 0.5 / f2
    # pchip through alternating extremes ±a spaced h has zero slope at the keyframes and peaks at 3a/h (a cubic
    # Hermite segment from −a to a peaks at 1.5 · 2a / h); the first and last quarter-swing share it.
    amp = v * half / 3.0
    ramp = max(0.2, 1.5 * abs(step) / v) if step != 0.0 else 0.0
    moduli = sorted({e, *(float(x) for x in np.linspace(*MATERIAL_RANGES["youngs_modulus"], 5))}
                    if torque_moduli is None else {float(x) for x in torque_moduli})
    step_torque = float("nan")
    if limit is not None and step != 0.0:
        ramp, step_torque = _torque_limited_ramp(rig, moduli, damping, step, ramp, hold_s, tail_s, limit)
    torque = float("nan")
    if limit is not None:
        torque = burst_torque_bound(rig, moduli, damping, lead_s, half, amp, int(cycles), int(bursts), gap_s)
    if limit is not None and torque > limit:
        # The bound is linear in the amplitude (the load torque is, up to centrifugal and gravity terms that are
        # ~1e-3 of it at these amplitudes); aim 0.5 % below the limit.
        scale = 0.995 * limit / torque
        amp *= scale
        torque *= scale
    times, angles, end = _keyframes(lead_s, half, amp, int(cycles), int(bursts), gap_s, step, ramp, hold_s, tail_s)
    if min(angles) < lo or max(angles) > hi:
        raise InputError(f"identification motion spans [{math.degrees(min(angles)):.1f}, "
                         f"{math.degrees(max(angles)):.1f}] deg, outside the joint limits "
                         f"[{math.degrees(lo):.1f}, {math.degrees(hi):.1f}] deg; lower step_deg")
    peak = _peak_speed(_motion_of(rig.motor, times, angles, rig.name), vmax)
    return IdentificationDesign(rig.name, rig.motor, e, (f1, f2), step, amp, int(cycles), int(bursts), peak, vmax,
                                np.asarray(times), np.asarray(angles), end, limit, torque, damping, ramp, step_torque,
                                stall)


def _torque_limit(rig: StepTestRig, stall_torque: float | None,
                  torque_fraction: float | None) -> tuple[float | None, float | None]:
    """The bursts' load-torque limit [N m] (None: no torque bound) and the servo's stall torque [N m] (the argument,
    else the rig file's).

    Raises:
        InputError: a torque bound without a stall torque known, or a fraction outside (0, 1].
    """
    stall = rig.stall_torque if stall_torque is None else float(stall_torque)
    if torque_fraction is None:
        return None, stall
    if stall is None or not stall > 0:
        raise InputError(f"rig {rig.name!r} gives no servo.stall_torque; pass stall_torque [N m] or "
                         "torque_fraction=None")
    if not 0.0 < torque_fraction <= 1.0:
        raise InputError(f"torque_fraction must be in (0, 1], got {torque_fraction}")
    return torque_fraction * stall, stall


def _peak_speed(motion: Motion, vmax: float) -> float:
    """The motion's peak speed [rad/s] between samples.

    Raises:
        InputError: above the servo's limit ``vmax`` [rad/s].
    """
    rate = np.abs(np.diff(np.asarray(motion.positions)[:, 0]) / np.diff(np.asarray(motion.time)))
    peak = float(rate.max())
    if peak > vmax:
        raise InputError(f"identification motion peaks at {peak:.2f} rad/s, above the servo limit {vmax:.2f} rad/s")
    return peak


#: Longest step ramp the torque-limited design tries [s], and the factor between the ramps it tries.
MAX_STEP_RAMP_S = 2.0
_RAMP_FACTOR = 1.15


def step_peak_torque(rig: StepTestRig, moduli: Sequence[float], damping: tuple[float, float], step: float,
                     ramp: float, hold_s: float, tail_s: float) -> float:
    """Peak load torque of a step alone (0.3 s rest, rise in ``ramp``, hold, return in ``ramp``, tail), the largest
    over ``moduli`` at ``damping`` (beam model, :func:`load_torque`) [N m].

    The first-mode swing that a step leaves behind dominates the load; how much of it a ramp excites depends on the
    ramp against the first mode's period (not monotonically), hence the sweep over E.
    """
    from retarget.fit.simulators import BeamEngine

    engine = BeamEngine(rig)
    times, angles, _ = _keyframes(0.3, 1.0, 0.0, 1, 0, 0.0, step, ramp, hold_s, tail_s)
    motion = _motion_of(rig.motor, times, angles, rig.name)
    return max(float(np.abs(load_torque(engine, float(e), *damping, motion)[1]).max()) for e in moduli)


def _torque_limited_ramp(rig: StepTestRig, moduli: Sequence[float], damping: tuple[float, float], step: float,
                         ramp: float, hold_s: float, tail_s: float, limit: float) -> tuple[float, float]:
    """The shortest ramp of ``ramp · 1.15^k`` (rounded up to 1 ms, so motion files keep it exactly) whose step
    stays within ``limit`` (:func:`step_peak_torque`), and that torque.

    Raises:
        InputError: No ramp up to :data:`MAX_STEP_RAMP_S` keeps the step within the limit.
    """
    tried = []
    k = 0
    while (candidate := math.ceil(ramp * _RAMP_FACTOR**k * 1e3 - 1e-9) / 1e3) <= MAX_STEP_RAMP_S:
        torque = step_peak_torque(rig, moduli, damping, step, candidate, hold_s, tail_s)
        if torque <= limit:
            return candidate, torque
        tried.append(f"{candidate:.3f} s: {torque:.1f} N m")
        k += 1
    raise InputError(f"no step ramp up to {MAX_STEP_RAMP_S} s keeps a {math.degrees(step):.0f} degree step within "
                     f"{limit:.2f} N m of load torque ({'; '.join(tried)}); lower step_deg or the torque fraction")


def write_identification_motion(design: IdentificationDesign, path: str | Path) -> Path:
    """Write :meth:`IdentificationDesign.to_yaml` to ``path`` atomically (a temporary file renamed over it), with
    the permissions of any new file (a motion file is ordinary data, readable like any other).

    Returns:
        The path written.
    """
    return write_text_atomic(path, design.to_yaml())


@dataclass(frozen=True)
class UncertaintyPrediction:
    """The Cramér–Rao bound of a material fit.

    Attributes:
        relative_std: Predicted 1σ / value of ``youngs_modulus``, ``alpha``, ``beta``.
        correlation: Correlation matrix of the three parameters' logs (3, 3).
        samples: Residual entries that enter (positions and angles of all recordings).
    """

    relative_std: dict[str, float]
    correlation: NDArray[np.float64]
    samples: int

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"relative_std": dict(self.relative_std), "correlation_alpha_beta": float(self.correlation[1, 2]),
                "samples": int(self.samples)}


def predict_uncertainty(
    simulator: StepTestSimulator,
    motions: Sequence[object],
    youngs_modulus: float,
    alpha: float,
    beta: float,
    rate_hz: float = 120.0,
    noise_m: float = 0.001,
    rotation_noise_rad: float | None = 0.005,
    log_step: float = 1e-4,
) -> UncertaintyPrediction:
    """Predicted 1σ of E, α, β from one recording per motion (module docstring).

    Args:
        simulator: The engine (its tip angle is used when ``rotation_noise_rad`` is given).
        motions: One :class:`retarget.motion.Motion` per recording.
        youngs_modulus, alpha, beta: The true values [Pa], [1/s], [s].
        rate_hz: Capture rate [Hz].
        noise_m: Position noise std per axis [m].
        rotation_noise_rad: Orientation noise std [rad], or ``None`` for position-only recordings.
        log_step: Forward-difference step in log-parameter space.

    Raises:
        InputError: No motions or non-positive values.
    """
    if not motions:
        raise InputError("predict_uncertainty needs at least one motion")
    truth = np.array([youngs_modulus, alpha, beta], dtype=float)
    if not (truth > 0).all() or not rate_hz > 0 or not noise_m > 0:
        raise InputError("E, alpha, beta, the rate and the noise must be positive")
    use_angle = rotation_noise_rad is not None and rotation_noise_rad > 0
    blocks = []
    for motion in motions:
        base = simulator.simulate(*truth, motion)
        t = np.arange(0.05, float(base.time_s[-1]) - 0.05, 1.0 / rate_hz)

        def features(tr: TipTrajectory, shift: float = 0.0) -> NDArray[np.float64]:
            parts = [(tr.at(t - shift) / noise_m).ravel()]
            if use_angle and tr.angle_rad is not None:
                parts.append(tr.angle_at(t - shift) / float(rotation_noise_rad))
            return np.concatenate(parts)

        f0 = features(base)
        cols = []
        for k in range(3):
            x = np.log(truth)
            x[k] += log_step
            cols.append((features(simulator.simulate(*np.exp(x), motion)) - f0) / log_step)
        dt = 1e-4
        cols.append((features(base, dt) - f0) / dt)
        blocks.append(np.stack(cols, axis=1))
    n = len(blocks)
    jac = np.zeros((sum(b.shape[0] for b in blocks), 3 + n))
    row = 0
    for k, b in enumerate(blocks):
        jac[row:row + b.shape[0], :3] = b[:, :3]
        jac[row:row + b.shape[0], 3 + k] = b[:, 3]
        row += b.shape[0]
    cov = np.linalg.pinv(jac.T @ jac)[:3, :3]
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    corr = cov / np.outer(np.maximum(sd, 1e-300), np.maximum(sd, 1e-300))
    return UncertaintyPrediction({"youngs_modulus": float(sd[0]), "alpha": float(sd[1]), "beta": float(sd[2])},
                                 corr, int(jac.shape[0]))


def load_torque(engine: object, youngs_modulus: float, alpha: float, beta: float, motion: object
                ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The torque the motor must apply to the flexible part and the tip body (rotor and horn excluded).

    ``τ = dH/dt − τ_g`` about the motor axis, with ``H`` the angular momentum of the part (mass-weighted Gauss
    points of the beam model, lateral deflection included) and of the tip body (point mass plus its rotary
    inertia), and ``τ_g`` the moment of gravity about the pivot. It tells whether a servo with a given stall torque
    can play a motion as the twin assumes (the twin drives the motor angle exactly).

    Args:
        engine: A :class:`retarget.fit.simulators.BeamEngine`.
        youngs_modulus, alpha, beta: Material [Pa], [1/s], [s].
        motion: The motion.

    Returns:
        ``(time (n,) [s], torque (n,) [N m])``.
    """
    from retarget.fit.beam import _GAUSS_W, _GAUSS_X, _hermite

    model = engine.model  # type: ignore[attr-defined]
    profile = engine.profile(motion)  # type: ignore[attr-defined]
    rig = model.rig
    t = profile.time_s
    q, _ = model.simulate(youngs_modulus, alpha, beta, t, profile.angle, profile.rate, profile.acceleration)
    qd = np.gradient(q, t, axis=0)
    n_el = model.n_elements
    le = rig.length / n_el
    rel = rig.rod_base - rig.pivot
    a0, b0 = float(rel @ rig.rod_direction), float(rel @ rig.lateral_direction)
    rho_a = rig.material.density * rig.area
    full = np.concatenate([np.zeros((len(t), 2)), q], axis=1)
    full_d = np.concatenate([np.zeros((len(t), 2)), qd], axis=1)
    theta_dot = profile.rate
    g_loc = model.gravity_local(profile.angle)
    momentum = np.zeros(len(t))
    gravity = np.zeros(len(t))
    for e in range(n_el):
        dofs = slice(2 * e, 2 * e + 4)
        for x, w in zip(_GAUSS_X, _GAUSS_W):
            xi = 0.5 * (x + 1.0)
            m = rho_a * 0.5 * w * le
            n, _, _ = _hermite(xi, le)
            ax = a0 + (e + xi) * le
            lat = b0 + full[:, dofs] @ n
            lat_d = full_d[:, dofs] @ n
            momentum += m * (ax * lat_d + theta_dot * (ax**2 + lat**2))
            gravity += m * (ax * g_loc[:, 1] - lat * g_loc[:, 0])
    tip = model.tip_rest[None] + q @ model.tip_map.T
    tip_d = qd @ model.tip_map.T
    m_tip = rig.tip_mass
    momentum += m_tip * (tip[:, 0] * tip_d[:, 1] - tip[:, 1] * tip_d[:, 0] + theta_dot * np.sum(tip**2, axis=1))
    momentum += rig.tip_inertia_axis * (theta_dot + qd[:, -1])
    gravity += m_tip * (tip[:, 0] * g_loc[:, 1] - tip[:, 1] * g_loc[:, 0])
    return t, np.gradient(momentum, t) - gravity


def material_corners(ranges: dict[str, tuple[float, float]] | None = None) -> list[tuple[float, float, float]]:
    """The 8 corners (E [Pa], α [1/s], β [s]) of a box of material parameters (default :data:`MATERIAL_RANGES`)."""
    r = MATERIAL_RANGES if ranges is None else ranges
    return [(e, a, b) for e in r["youngs_modulus"] for a in r["alpha"] for b in r["beta"]]


@dataclass(frozen=True, eq=False)
class BurstChoice:
    """The outcome of :func:`choose_burst_count`.

    Attributes:
        design: The chosen design.
        target_std: The relative 1σ aimed at for α and β.
        met: Whether the chosen design reaches it at every corner.
        rows: One entry per candidate tried: ``bursts``, ``gap_s``, ``duration_s``, ``amplitude_rad``,
            ``burst_torque_nm``, ``worst`` (largest α and β 1σ over the corners), ``worst_corner`` and
            ``corners`` (per corner: truth and the predicted α, β 1σ).
    """

    design: IdentificationDesign
    target_std: float
    met: bool
    rows: list[dict[str, object]]

    @property
    def chosen(self) -> dict[str, object]:
        """The row of the chosen design."""
        return next(r for r in self.rows if r.get("chosen"))


def choose_burst_count(
    rig: StepTestRig,
    reference_motions: Sequence[object],
    target_std: float = 0.03,
    max_duration_s: float = 30.0,
    candidates: Sequence[int] = (2, 4, 8, 16, 24),
    gaps_s: Sequence[float] = (DEFAULT_GAP_S,),
    corners: Sequence[tuple[float, float, float]] | None = None,
    simulator: StepTestSimulator | None = None,
    progress: object = None,
    **design_kwargs: object,
) -> BurstChoice:
    """Choose the number of bursts (and the ring-out) from the predicted uncertainty over a material box.

    For each ring-out ``gap`` and each burst count (ascending) whose motion fits in ``max_duration_s``, the
    Cramér–Rao 1σ of α and β (:func:`predict_uncertainty`, 120 Hz, 1 mm and 0.005 rad noise, the reference motions
    recorded too) is computed at every corner; the worst case over the corners is the design's score. The first
    (shortest) design whose worst α and β 1σ are both within ``target_std`` is chosen; if none is, the one with the
    smallest worst case (the target is then reported as missed, not silently relaxed).

    Args:
        rig: The step-test rig.
        reference_motions: Motions recorded besides the identification motion (``step_30``).
        target_std: Relative 1σ aimed at for α and β (0.03: a 10 % tolerance is more than 3σ).
        max_duration_s: Longest identification motion allowed [s].
        candidates: Burst counts to try.
        gaps_s: Ring-outs after each burst to try [s].
        corners: Material sets (E [Pa], α [1/s], β [s]) (default: :func:`material_corners`).
        simulator: Engine for the prediction (default: the rig's :class:`~retarget.fit.simulators.BeamEngine`).
        progress: Called with no argument after each prediction (a progress bar).
        **design_kwargs: Passed to :func:`design_identification_motion`.

    Raises:
        InputError: No candidate fits in ``max_duration_s``.
    """
    from retarget.fit.simulators import BeamEngine

    sim = BeamEngine(rig) if simulator is None else simulator
    sets = material_corners() if corners is None else [tuple(map(float, c)) for c in corners]
    rows: list[dict[str, object]] = []
    designs: list[IdentificationDesign] = []
    chosen: int | None = None
    for gap in gaps_s:
        for n in sorted(set(int(c) for c in candidates)):
            design = design_identification_motion(rig, bursts=n, gap_s=float(gap), **design_kwargs)  # type: ignore
            if design.duration_s > max_duration_s:
                break
            motion = design.motion()
            per = []
            for e, a, b in sets:
                pred = predict_uncertainty(sim, [*reference_motions, motion], e, a, b)
                per.append({"truth": [e, a, b], "alpha": pred.relative_std["alpha"],
                            "beta": pred.relative_std["beta"],
                            "youngs_modulus": pred.relative_std["youngs_modulus"],
                            "correlation_alpha_beta": float(pred.correlation[1, 2])})
                if callable(progress):
                    progress()
            worst = {p: max(float(c[p]) for c in per) for p in ("alpha", "beta")}  # type: ignore[arg-type]
            hardest = max(per, key=lambda c: max(float(c["alpha"]), float(c["beta"])))  # type: ignore[arg-type]
            rows.append({"bursts": n, "gap_s": float(gap), "duration_s": design.duration_s,
                         "amplitude_rad": design.amplitude_rad, "burst_torque_nm": design.burst_torque_nm,
                         "worst": worst, "worst_corner": hardest["truth"], "corners": per})
            designs.append(design)
            if max(worst.values()) <= target_std:
                chosen = len(rows) - 1
                break
        if chosen is not None:
            break
    if not rows:
        raise InputError(f"no identification motion with {min(candidates)}+ bursts fits in {max_duration_s:.1f} s")
    met = chosen is not None
    if chosen is None:
        chosen = min(range(len(rows)), key=lambda k: (max(rows[k]["worst"].values()),  # type: ignore[union-attr]
                                                      rows[k]["duration_s"]))
    rows[chosen]["chosen"] = True
    return BurstChoice(designs[chosen], float(target_std), met, rows)
