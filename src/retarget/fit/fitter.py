"""Fit Young's modulus E and Rayleigh damping α, β of a rig's flexible part to recorded step tests.

``build_problem`` aligns each recording with a simulation at the starting material and fixes the samples that enter
the residual; ``solve`` runs the estimator:

1. **Ring-out start.** The free decay after the last motor motion gives the first mode's frequency ``f`` and damping
   ratio ``ζ`` (:func:`retarget.optimize.shaping.identify_from_trajectory`), measured and simulated alike. For this
   rig ``f ∝ √E``, so ``E₀ = E_start (f_meas / f_sim)²``; ``ζ`` is split evenly between α and β at ``ω₁``
   (``ζ = α/(2ω) + βω/2``). A bracketing scan of the residual over E around ``E₀`` guards against a frequency
   estimate off by a cycle.
2. **Least squares.** Bounded trust-region least squares (``scipy.optimize.least_squares``) over
   ``log E, log α, log β`` (any subset) and one time offset per recording; the residual stacks the tip position
   errors of all recordings at the recorded sample times, each recording moved by its best rigid transform
   (Kabsch, re-solved inside the residual). The Jacobian is by forward differences: one simulation per material
   parameter, none for the offsets (the cached simulation is re-interpolated).
3. **Uncertainty.** Gauss–Newton covariance ``σ² (JᵀJ)⁻¹`` with ``σ²`` the residual variance, mapped from log to
   SI values (standard deviations and the correlation matrix).

Identifiability: one dominant mode constrains only ``ζ(ω₁)``. α and β separate through the second bending mode and
through several recordings fitted jointly (different steps excite the modes differently); see docs/fit.md for what
the twin recordings constrain.
"""
from __future__ import annotations

import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.fit.align import Alignment, align, kabsch
from retarget.fit.errors import FitError
from retarget.fit.recording import TipRecording
from retarget.fit.simulators import StepTestSimulator, TipTrajectory, motor_profile
from retarget.jsonsafe import finite_or_none

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

__all__ = ["PARAMETERS", "FitCase", "FitOptions", "FitProblem", "FitResult", "build_problem", "check_fixed",
           "fit_materials", "parse_fixed", "parse_params", "solve"]

#: Material parameters the fitter can estimate, by their ``config/materials.yaml`` key (α, β abbreviated).
PARAMETERS: tuple[str, ...] = ("youngs_modulus", "alpha", "beta")

#: Bounds of each parameter [SI] (E relative to its start value, see :func:`solve`).
_BOUNDS = {"alpha": (1e-4, 1e2), "beta": (1e-9, 1e-1)}


def parse_params(text: str) -> tuple[str, ...]:
    """``"youngs_modulus,alpha"`` → ``("youngs_modulus", "alpha")`` (validated, in :data:`PARAMETERS` order).

    Raises:
        InputError: Unknown or no names.
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(PARAMETERS))
    if unknown or not names:
        raise InputError(f"--params: unknown {unknown or 'empty list'}; choose from {list(PARAMETERS)}")
    return tuple(p for p in PARAMETERS if p in names)


@dataclass(frozen=True, eq=False)
class FitCase:
    """One recording of one step-test motion.

    Attributes:
        recording: The recorded tip (mocap frame).
        motion: The :class:`retarget.motion.Motion` the rig played.
        label: Name in reports (file name).
        motion_start_s: When the motion's command started, in seconds after the recording's first sample
            (negative: before it), known to within 50 ms; None: the start the recording stored
            (:attr:`TipRecording.recorded_start_s`, a bag of ``retarget play --record``) or, without one, the
            alignment finds it (:func:`retarget.fit.align.align`).
    """

    recording: TipRecording
    motion: object
    label: str
    motion_start_s: float | None = None

    @property
    def start_s(self) -> float | None:
        """The motion's start the alignment is given, in seconds after the recording's first sample (None: find
        it): :attr:`motion_start_s`, else the recording's own."""
        if self.motion_start_s is not None:
            return self.motion_start_s
        if self.recording.recorded_start_s is not None:
            return self.recording.recorded_start_s - float(self.recording.time_s[0])
        return None


@dataclass(frozen=True)
class FitOptions:
    """Estimator settings.

    Attributes:
        params: Parameters to fit (the others stay at the rig's material values).
        fd_step: Forward-difference step in log-parameter space.
        offset_fd_step_s: Forward-difference step of the time offsets [s].
        offset_window_s: Half-width of the allowed time-offset change around the alignment [s].
        bracket_span: Relative half-width of the E bracketing scan.
        bracket_points: Points of that scan (0 skips it).
        max_evaluations: Cap on residual evaluations of the least-squares solver.
        edge_margin_s: Samples this close to the ends of the simulation are left out [s].
        orientation_weight: Weight of the tip body's recorded rotation about the motor axis in the residual,
            relative to the positions when both are weighted by their noise at rest (1: as the noise says; 0:
            positions only). Used when the recording has orientations and the engine gives the tip angle. The
            rotation sees the second bending mode (the end slope) far better than the tip position does, which is
            what separates α from β; a rigid body whose orientation is unreliable (few or close markers, marker
            swaps) biases the damping, which the fit reports (:attr:`FitResult.angle_noise_std_rad`).
        fixed: Values [SI] of parameters not fitted, by name in :data:`PARAMETERS` (the others not fitted stay at
            the rig's material values).
    """

    params: tuple[str, ...] = PARAMETERS
    fd_step: float = 1e-4
    offset_fd_step_s: float = 1e-4
    offset_window_s: float = 0.03
    bracket_span: float = 0.1
    bracket_points: int = 9
    max_evaluations: int = 60
    edge_margin_s: float = 0.05
    orientation_weight: float = 1.0
    fixed: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class FitProblem:
    """The aligned recordings and the starting point, ready for :func:`solve`.

    Attributes:
        simulator: The engine adapter.
        cases: The recordings and motions.
        start: Starting material values (all of :data:`PARAMETERS`) [SI].
        alignments: Per case, the initial alignment.
        samples: Per case, indices of the recording's samples in the residual.
        options: Estimator settings.
        angles: Per case, the recorded tip rotation about the motor axis since the rest pose (n,) [rad] (NaN where
            untracked), or ``None`` when orientation is not used.
        angle_samples: Per case, indices of the samples whose angle enters the residual.
        angle_weights: Per case, the lever [m/rad] that puts angle errors on the scale of position errors
            (position noise / angle noise, so both parts are weighted by their noise, times
            :attr:`FitOptions.orientation_weight`).
        angle_noise: Per case, the recorded angle's noise std [rad] (NaN when orientation is not used).
    """

    simulator: StepTestSimulator
    cases: tuple[FitCase, ...]
    start: dict[str, float]
    alignments: tuple[Alignment, ...]
    samples: tuple[NDArray[np.int64], ...]
    options: FitOptions
    angles: tuple[NDArray[np.float64] | None, ...] = ()
    angle_samples: tuple[NDArray[np.int64], ...] = ()
    angle_weights: tuple[float, ...] = ()
    angle_noise: tuple[float, ...] = ()


@dataclass(frozen=True, eq=False)
class FitResult:
    """Fitted material parameters and diagnostics.

    Attributes:
        values: All of :data:`PARAMETERS` [SI] (fixed ones at their start values).
        std: Standard deviations of the fitted ones [SI] (Gauss–Newton).
        correlation: Correlation matrix of the fitted parameters' logs, in ``fitted`` order.
        fitted: Names of the fitted parameters.
        start: Values the least squares started from (after the ring-out guess and the bracketing).
        ringout: Measured ``frequency_hz`` and ``damping_ratio`` of the first recording's free decay.
        residual_rms_m: RMS tip position error per coordinate at the optimum [m].
        angle_residual_rms_rad: RMS error of the tip angle at the optimum [rad] (None when not used).
        noise_std_m: Per-axis noise of the recordings at rest [m] (what the residual should approach).
        angle_noise_std_rad: Noise of the recorded tip angle [rad] (what its residual should approach; None when
            not used).
        orientation_weight: :attr:`FitOptions.orientation_weight`.
        orientation_used: Per case, whether its orientation entered the residual.
        fixed: Values of the parameters held fixed [SI] (given ones and the rig's), by name.
        bounds: Per fitted parameter, the (lower, upper) bounds of the least squares [SI].
        at_bound: Fitted parameters that ended at a bound: ``{name: "lower" | "upper"}``. Such a value is not
            an estimate: the recordings push it beyond the bound (or do not constrain it).
        offsets_s: Per case, ``t_sim = t_rec − offset`` [s].
        alignments: Per case, the final alignment (transform re-fitted at the optimum).
        simulations: Per case, the simulated tip at the optimum.
        iterations: Jacobian evaluations of the least squares.
        evaluations: Simulations run in total.
        wall_s: Wall time [s].
        message: The solver's termination message.
    """

    values: dict[str, float]
    std: dict[str, float]
    correlation: NDArray[np.float64]
    fitted: tuple[str, ...]
    start: dict[str, float]
    ringout: dict[str, float]
    residual_rms_m: float
    angle_residual_rms_rad: float | None
    noise_std_m: float
    offsets_s: tuple[float, ...]
    alignments: tuple[Alignment, ...]
    simulations: tuple[TipTrajectory, ...]
    iterations: int
    evaluations: int
    wall_s: float
    message: str
    cases: tuple[FitCase, ...] = field(default=())
    angle_noise_std_rad: float | None = None
    orientation_weight: float = 1.0
    orientation_used: tuple[bool, ...] = ()
    fixed: dict[str, float] = field(default_factory=dict)
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    at_bound: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary (SI values; uncertainties as ``<name>_std``); strict JSON: a value that is not
        a finite number (no angle residual, an undefined correlation) is None, never NaN."""
        out: dict[str, object] = {k: float(v) for k, v in self.values.items()}
        for k, v in self.std.items():
            out[f"{k}_std"] = float(v)
        out.update(
            fitted=list(self.fitted),
            fixed={k: float(v) for k, v in self.fixed.items()},
            bounds={k: [float(lo), float(hi)] for k, (lo, hi) in self.bounds.items()},
            at_bound=dict(self.at_bound),
            residual_rms_m=float(self.residual_rms_m),
            angle_residual_rms_rad=self.angle_residual_rms_rad,
            noise_std_m=float(self.noise_std_m),
            angle_noise_std_rad=self.angle_noise_std_rad,
            orientation_weight=float(self.orientation_weight),
            orientation_used=list(self.orientation_used),
            offsets_s=[float(o) for o in self.offsets_s],
            correlation=np.asarray(self.correlation).round(4).tolist(),
            start={k: float(v) for k, v in self.start.items()},
            ringout={k: float(v) for k, v in self.ringout.items()},
            iterations=int(self.iterations),
            simulations=int(self.evaluations),
            wall_s=float(self.wall_s),
            message=self.message,
        )
        return finite_or_none(out)


class _Evaluator:
    """Simulations cached by material values, and the stacked residual."""

    def __init__(self, problem: FitProblem, progress: Callable[[], None] | None) -> None:
        self.problem = problem
        self.progress = progress
        self.cache: dict[tuple[float, ...], tuple[TipTrajectory, ...]] = {}
        self.count = 0

    def simulate(self, values: dict[str, float]) -> tuple[TipTrajectory, ...]:
        key = tuple(float(values[p]) for p in PARAMETERS)
        if key not in self.cache:
            if len(self.cache) > 64:
                self.cache.clear()
            sims = []
            for case in self.problem.cases:
                sims.append(self.problem.simulator.simulate(key[0], key[1], key[2], case.motion))
                self.count += 1
                if self.progress is not None:
                    self.progress()
            self.cache[key] = tuple(sims)
        return self.cache[key]

    def parts(self, values: dict[str, float], offsets: Sequence[float]
              ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Position residuals [m] and weighted angle residuals [m] of all cases."""
        pb = self.problem
        pos, ang = [], []
        for k, (sim, case, idx, off) in enumerate(zip(self.simulate(values), pb.cases, pb.samples, offsets)):
            src = case.recording.position_m[idx]
            dst = sim.at(case.recording.time_s[idx] - off)
            rot, trans = kabsch(src, dst)
            pos.append((src @ rot.T + trans - dst).ravel())
            if pb.angles and pb.angles[k] is not None:
                ia = pb.angle_samples[k]
                simulated = sim.angle_at(case.recording.time_s[ia] - off)
                # The recorded angle's zero is the orientation at the rest window, wherever that is (a pose the
                # motion reaches, not necessarily its start): a constant per recording, removed like the offset.
                diff = pb.angles[k][ia] - simulated
                ang.append(pb.angle_weights[k] * (diff - np.mean(diff)))
        return np.concatenate(pos), (np.concatenate(ang) if ang else np.zeros(0))

    def residual(self, values: dict[str, float], offsets: Sequence[float]) -> NDArray[np.float64]:
        return np.concatenate(self.parts(values, offsets))


def _ringout(problem: FitProblem, sims: tuple[TipTrajectory, ...]) -> tuple[float, float, float] | None:
    """(f_measured, ζ_measured, f_simulated) of the first case's free decay, or None if it cannot be identified."""
    from retarget.optimize.shaping import identify_from_trajectory

    case, sim, al = problem.cases[0], sims[0], problem.alignments[0]
    stop = motor_profile(case.motion, problem.simulator.rig.motor, 1e-3).moving_interval[1] + 0.1
    rec = case.recording
    valid = rec.valid
    t_rec = rec.time_s[valid] - al.offset_s
    keep = (t_rec >= stop) & (t_rec <= sim.time_s[-1])
    if keep.sum() < 32:
        return None
    dt = float(np.median(np.diff(t_rec)))
    grid = np.arange(t_rec[keep][0], t_rec[keep][-1], dt)
    pos = al.apply(rec.position_m[valid])
    measured = np.stack([np.interp(grid, t_rec, pos[:, k]) for k in range(3)], axis=1)
    try:
        est_m = identify_from_trajectory(grid, measured)
        sgrid = sim.time_s[sim.time_s >= stop]
        est_s = identify_from_trajectory(sgrid, sim.at(sgrid))
    except Exception:  # a non-oscillating or too short decay: start from the rig's values instead
        return None
    return est_m.frequency_hz, est_m.damping_ratio, est_s.frequency_hz


def build_problem(simulator: StepTestSimulator, cases: Sequence[FitCase], options: FitOptions = FitOptions(),
                  start: dict[str, float] | None = None) -> FitProblem:
    """Align every case with a simulation at ``start`` (default: the rig's material) and pick the samples.

    Raises:
        InputError: No cases or unknown parameters. AlignmentError: A recording cannot be aligned.
    """
    if not cases:
        raise InputError("fitting needs at least one recording")
    if not options.params or set(options.params) - set(PARAMETERS):
        raise InputError(f"parameters must be a non-empty subset of {list(PARAMETERS)}, got {options.params}")
    check_fixed(options.fixed, options.params)
    if not (np.isfinite(options.orientation_weight) and options.orientation_weight >= 0):
        raise InputError(f"the orientation weight must be >= 0 (0: positions only), got {options.orientation_weight}")
    mat = simulator.rig.material
    values = {"youngs_modulus": float(mat.youngs_modulus), "alpha": float(mat.rayleigh_alpha),
              "beta": float(mat.rayleigh_beta)}
    values.update(start or {})
    values.update(options.fixed)
    alignments, samples, angles, angle_samples, angle_weights, angle_noise = [], [], [], [], [], []
    for case in cases:
        sim = simulator.simulate(values["youngs_modulus"], values["alpha"], values["beta"], case.motion)
        al = align(case.recording, sim, motion_start_s=case.start_s)
        t = case.recording.time_s - al.offset_s
        lo = sim.time_s[0] + options.edge_margin_s + options.offset_window_s
        hi = sim.time_s[-1] - options.edge_margin_s - options.offset_window_s
        idx = np.flatnonzero(case.recording.valid & (t >= lo) & (t <= hi))
        alignments.append(al)
        samples.append(idx)
        angle = None
        if options.orientation_weight > 0 and case.recording.orientation_xyzw is not None \
                and sim.angle_rad is not None:
            angle, weight, noise = _recorded_angle(case.recording, al, simulator.rig.axis)
            finite = np.isfinite(angle)
            angle_idx = np.flatnonzero(finite & (t >= lo) & (t <= hi))
            if angle_idx.size >= 20:
                angles.append(angle)
                angle_samples.append(angle_idx)
                angle_weights.append(options.orientation_weight * weight)
                angle_noise.append(noise)
                continue
        angles.append(None)
        angle_samples.append(np.zeros(0, dtype=np.int64))
        angle_weights.append(0.0)
        angle_noise.append(float("nan"))
    return FitProblem(simulator, tuple(cases), values, tuple(alignments), tuple(samples), options,
                      tuple(angles), tuple(angle_samples), tuple(angle_weights), tuple(angle_noise))


def check_fixed(fixed: dict[str, float], params: Sequence[str]) -> None:
    """Validate held values: known names, not also fitted, positive finite SI values.

    Raises:
        InputError: Naming the parameter and the value.
    """
    for name, value in fixed.items():
        if name not in PARAMETERS:
            raise InputError(f"cannot fix {name!r}: not a material parameter; choose from {list(PARAMETERS)}")
        if name in params:
            raise InputError(f"{name} is both fitted and fixed (at {value:g}); leave it out of --params to fix it")
        if not (np.isfinite(value) and (value > 0 or (name != "youngs_modulus" and value == 0))):
            raise InputError(f"fixed {name} = {value!r}: must be a finite number, > 0 (alpha and beta may be 0)")


def parse_fixed(items: Sequence[str]) -> dict[str, float]:
    """``["alpha=0", "beta=4e-5"]`` → ``{"alpha": 0.0, "beta": 4e-05}`` (``--fix NAME=VALUE``, SI units).

    Raises:
        InputError: Not ``NAME=VALUE``, an unknown name, a repeated name, or a value that is not a finite number.
    """
    from retarget.cliargs import parse_assignments

    return parse_assignments(items, PARAMETERS, "--fix", units="SI units: Pa, 1/s, s")


def _recorded_angle(recording: TipRecording, alignment: Alignment, axis: NDArray[np.float64]
                    ) -> tuple[NDArray[np.float64], float, float]:
    """The recorded body's rotation about the motor axis since its orientation in the rest window (n,) [rad], the
    lever [m/rad] weighting it (position noise over angle noise, clipped to [0.05, 5] m/rad) and the angle noise
    [rad].

    The rigid body's own frame (set by its markers) cancels in ``R(t) R_restᵀ``; the motor axis is taken into the
    mocap frame with the alignment's rotation. The angle noise is :func:`retarget.fit.align.difference_noise`
    (the rest window's spread when too few samples are evenly spaced).
    """
    from scipy.spatial.transform import Rotation

    from retarget.fit.align import difference_noise

    quat = recording.orientation_xyzw
    assert quat is not None
    finite = np.isfinite(quat).all(axis=1) & (np.linalg.norm(np.nan_to_num(quat), axis=1) > 0.5)
    t = recording.time_s
    if finite.sum() < 20:
        return np.full(len(t), np.nan), 0.0, float("nan")
    rest_win = finite & (t >= alignment.rest.start_s) & (t <= alignment.rest.end_s)
    if rest_win.sum() < 5:
        rest_win = finite & (t <= t[finite][0] + 0.3)
    q_rest = quat[rest_win].copy()
    q_rest *= np.sign(q_rest @ q_rest[0])[:, None]
    rest = Rotation.from_quat(q_rest.mean(axis=0) / np.linalg.norm(q_rest.mean(axis=0)))
    axis_mocap = alignment.rotation.T @ axis
    angle = np.full(len(t), np.nan)
    angle[finite] = (Rotation.from_quat(quat[finite]) * rest.inv()).as_rotvec() @ axis_mocap
    at_rest = angle[rest_win]
    sigma_angle = difference_noise(t, angle)
    if not np.isfinite(sigma_angle):
        sigma_angle = float(np.median(np.abs(at_rest - np.median(at_rest))) * 1.4826)
    sigma_pos = alignment.rest.noise_std_m
    weight = float(np.clip(sigma_pos / max(sigma_angle, 1e-6), 0.05, 5.0)) if sigma_pos > 0 else 1.0
    return angle, weight, sigma_angle


def solve(problem: FitProblem, progress: Callable[[], None] | None = None) -> FitResult:
    """Run the estimator (ring-out start, E bracketing, bounded least squares, covariance).

    Raises:
        FitError: The least squares failed or every trial simulation diverged.
    """
    t_start = _time.perf_counter()
    opts = problem.options
    ev = _Evaluator(problem, progress)
    values = dict(problem.start)
    ringout = _ringout_start(problem, ev, values)
    offsets0 = _bracketed(problem, ev, values)
    start_values = dict(values)
    names = opts.params
    e_ref = values["youngs_modulus"]
    bounds_si = {**_BOUNDS, "youngs_modulus": (0.25 * e_ref, 4.0 * e_ref)}
    n_p, n_c = len(names), len(problem.cases)
    lsq = _LogSpaceFit(ev, values, offsets0, names, n_c, opts.fd_step, opts.offset_fd_step_s)
    lo = np.concatenate([[np.log(bounds_si[p][0]) for p in names], -opts.offset_window_s * np.ones(n_c)])
    hi = np.concatenate([[np.log(bounds_si[p][1]) for p in names], opts.offset_window_s * np.ones(n_c)])
    res = lsq.solve(lo, hi, opts.max_evaluations)
    fitted, offsets = lsq.unpack(res.x)
    r = res.fun
    pos_part, ang_part = ev.parts(*lsq.unpack(res.x))
    n_res = r.size
    dof = max(n_res - res.x.size, 1)
    sigma2 = float(r @ r) / dof
    jm = res.jac
    cov = sigma2 * np.linalg.pinv(jm.T @ jm)
    log_std = np.sqrt(np.maximum(np.diag(cov)[:n_p], 0.0))
    std = {p: fitted[p] * float(log_std[i]) for i, p in enumerate(names)}
    sub = cov[:n_p, :n_p]
    d = np.sqrt(np.maximum(np.diag(sub), 1e-300))
    corr = sub / np.outer(d, d)
    sims = ev.simulate(fitted)
    final_al = _final_alignments(problem, sims, offsets)
    noise = float(np.mean([a.rest.noise_std_m for a in problem.alignments]))
    used = tuple(bool(problem.angles) and problem.angles[k] is not None for k in range(n_c))
    angle_noise = [n for n, u in zip(problem.angle_noise, used) if u]
    return FitResult(
        values=fitted,
        std=std,
        correlation=corr,
        fitted=names,
        start=start_values,
        ringout=ringout,
        residual_rms_m=float(np.sqrt(np.mean(pos_part**2))),
        angle_residual_rms_rad=_angle_rms(problem, ang_part),
        noise_std_m=noise,
        offsets_s=tuple(float(o) for o in offsets),
        alignments=final_al,
        simulations=sims,
        iterations=int(res.njev or 0),
        evaluations=ev.count,
        wall_s=_time.perf_counter() - t_start,
        message=str(res.message),
        cases=problem.cases,
        angle_noise_std_rad=float(np.mean(angle_noise)) if angle_noise else None,
        orientation_weight=float(opts.orientation_weight),
        orientation_used=used,
        fixed={p: float(values[p]) for p in PARAMETERS if p not in names},
        bounds={p: bounds_si[p] for p in names},
        at_bound=_at_bound(res, names, lo, hi),
    )


def _ringout_start(problem: FitProblem, ev: _Evaluator, values: dict[str, float]) -> dict[str, float]:
    """Move the fitted ones of ``values`` (in place) to what the recorded ring-out says: E by the ratio of the
    measured to the simulated frequency squared, the damping from the measured damping ratio; returns the ring-out
    measured (``frequency_hz``, ``damping_ratio``; empty without one)."""
    opts = problem.options
    ringout: dict[str, float] = {}
    est = _ringout(problem, ev.simulate(values))
    if est is not None:
        f_meas, zeta, f_sim = est
        ringout = {"frequency_hz": f_meas, "damping_ratio": zeta}
        if "youngs_modulus" in opts.params and f_sim > 0:
            values["youngs_modulus"] *= (f_meas / f_sim) ** 2
        omega = 2.0 * np.pi * f_meas
        if zeta > 0:
            if "alpha" in opts.params and "beta" in opts.params:
                values["alpha"], values["beta"] = zeta * omega, zeta / omega
            elif "alpha" in opts.params:
                values["alpha"] = max(2.0 * omega * zeta - values["beta"] * omega**2, 1e-3)
            elif "beta" in opts.params:
                values["beta"] = max((2.0 * zeta - values["alpha"] / omega) / omega, 1e-7)
    for p in ("alpha", "beta"):
        values[p] = float(np.clip(values[p], *_BOUNDS[p])) if p in opts.params else values[p]
    return ringout


def _bracketed(problem: FitProblem, ev: _Evaluator, values: dict[str, float]) -> NDArray[np.float64]:
    """The recordings' time offsets [s] after a common shift that best fits ``values``; with E fitted and
    ``bracket_points``, E (in ``values``, in place) is first the best of a grid around its start."""
    opts = problem.options
    offsets0 = np.array([a.offset_s for a in problem.alignments])

    def cost(v: dict[str, float]) -> tuple[float, float]:
        """Residual sum of squares at ``v``, minimized over a common shift of the offsets (no new simulation):
        the initial offsets were aligned at the start material, and a frequency error biases them."""
        from scipy.optimize import minimize_scalar

        w = opts.offset_window_s
        res = minimize_scalar(lambda d: float(np.sum(ev.residual(v, offsets0 + d) ** 2)), bounds=(-w, w),
                              method="bounded", options={"xatol": 1e-5})
        return float(res.fun), float(res.x)

    if "youngs_modulus" in opts.params and opts.bracket_points > 0:
        e0 = values["youngs_modulus"]
        grid = e0 * (1.0 + opts.bracket_span * np.linspace(-1.0, 1.0, opts.bracket_points))
        scans = [cost({**values, "youngs_modulus": float(e)}) for e in grid]
        best = int(np.argmin([c for c, _ in scans]))
        values["youngs_modulus"] = float(grid[best])
        return offsets0 + scans[best][1]
    return offsets0 + cost(values)[1]


@dataclass(frozen=True, eq=False)
class _LogSpaceFit:
    """The bounded least squares over ``x = [log p for p in names] + [offset changes]``: the fitted parameters in
    log space, then one time-offset change [s] per case from ``offsets0``; ``values`` holds the others."""

    ev: _Evaluator
    values: dict[str, float]
    offsets0: NDArray[np.float64]
    names: tuple[str, ...]
    n_cases: int
    fd_step: float
    offset_fd_step_s: float

    def unpack(self, x: NDArray[np.float64]) -> tuple[dict[str, float], NDArray[np.float64]]:
        """The material values and the offsets [s] at ``x``."""
        v = dict(self.values)
        for i, p in enumerate(self.names):
            v[p] = float(np.exp(x[i]))
        return v, self.offsets0 + x[len(self.names):]

    def fun(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        v, off = self.unpack(x)
        return self.ev.residual(v, off)

    def jac(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """Forward differences of :meth:`fun`."""
        n_p = len(self.names)
        r0 = self.fun(x)
        cols = []
        for j in range(n_p + self.n_cases):
            h = self.fd_step if j < n_p else self.offset_fd_step_s
            xj = x.copy()
            xj[j] += h
            cols.append((self.fun(xj) - r0) / h)
        return np.stack(cols, axis=1)

    def solve(self, lo: NDArray[np.float64], hi: NDArray[np.float64], max_evaluations: int) -> OptimizeResult:
        """scipy's trust-region least squares within ``[lo, hi]`` from the start values and offsets.

        Raises:
            FitError: the least squares stopped with an error.
        """
        from scipy.optimize import least_squares

        n_p = len(self.names)
        x0 = np.concatenate([[np.log(self.values[p]) for p in self.names], np.zeros(self.n_cases)])
        x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
        scale = np.concatenate([np.ones(n_p), 0.01 * np.ones(self.n_cases)])
        try:
            return least_squares(self.fun, x0, jac=self.jac, bounds=(lo, hi), x_scale=scale, method="trf",
                                 max_nfev=max_evaluations, xtol=1e-8, ftol=1e-9, gtol=1e-9)
        except Exception as exc:
            raise FitError(f"least squares stopped: {type(exc).__name__}: {exc}", self.values) from exc


def _final_alignments(problem: FitProblem, sims: Sequence[TipTrajectory],
                      offsets: NDArray[np.float64]) -> tuple[Alignment, ...]:
    """Each recording aligned again (rotation, translation) to its simulation at the fitted values and offsets."""
    final_al = []
    for case, sim, off, al0 in zip(problem.cases, sims, offsets, problem.alignments):
        idx = np.flatnonzero(case.recording.valid)
        t = case.recording.time_s[idx] - off
        inside = (t >= sim.time_s[0]) & (t <= sim.time_s[-1])
        src, dst = case.recording.position_m[idx][inside], sim.at(t[inside])
        rot, trans = kabsch(src, dst)
        rms = float(np.sqrt(np.mean(np.sum((src @ rot.T + trans - dst) ** 2, axis=1))))
        final_al.append(Alignment(float(off), rot, trans, rms, al0.rest))
    return tuple(final_al)


def _at_bound(res: OptimizeResult, names: Sequence[str], lo: NDArray[np.float64],
              hi: NDArray[np.float64]) -> dict[str, str]:
    """The fitted parameters that ended at a bound, each with its side (``lower`` or ``upper``)."""
    at_bound = {}
    for i, p in enumerate(names):
        # Within 1e-3 in log space (0.1 %) of a bound counts: the trust region stops just inside it.
        if res.active_mask[i] < 0 or res.x[i] - lo[i] < 1e-3:
            at_bound[p] = "lower"
        elif res.active_mask[i] > 0 or hi[i] - res.x[i] < 1e-3:
            at_bound[p] = "upper"
    return at_bound


def _angle_rms(problem: FitProblem, weighted: NDArray[np.float64]) -> float | None:
    """RMS of the angle residual [rad] with the per-case weights taken out (None when no angle is fitted)."""
    if weighted.size == 0:
        return None
    weights = np.concatenate([np.full(len(i), w) for i, w in zip(problem.angle_samples, problem.angle_weights)])
    return float(np.sqrt(np.mean((weighted / weights) ** 2)))


def fit_materials(simulator: StepTestSimulator, cases: Sequence[FitCase], options: FitOptions = FitOptions(),
                  progress: Callable[[], None] | None = None) -> FitResult:
    """:func:`build_problem` then :func:`solve`."""
    return solve(build_problem(simulator, cases, options), progress)
