"""Servo limits on motor profiles: joint position bounds, the servo speed limit, and stall torque.

Positions. A uniform cubic B-spline is, on every segment, a convex combination of four consecutive control points
(the basis weights are non-negative and sum to one). So ``lower ≤ p_j ≤ upper`` for every control point is a
*sufficient* condition for ``lower ≤ θ(t) ≤ upper`` at all times. It is slightly conservative (θ can only reach a
bound when four consecutive control points sit on it) and it is a box constraint on the parameters, which is what
L-BFGS-B accepts: :func:`parameter_bounds`.

Speed. ``θ̇`` is a quadratic B-spline with control points ``(p_{j+1} − p_j)/h``, so ``max |θ̇| ≤ max_j |p_{j+1} −
p_j| / h`` (:func:`velocity_hull_bound`) — but that is a bound on differences, not a box. The optimizer therefore
uses a smooth penalty on the sampled speeds (:class:`VelocityPenalty`)::

    V(P) = weight · Δt Σ_n Σ_m ½ max(0, |θ̇_m(t_n)| − v̄_m)²,   v̄_m = (1 − margin) v_max,m,   θ̇ = B1 P,

which is C¹ with ``∂V/∂P = weight · Δt · B1ᵀ [sign(θ̇) max(0, |θ̇| − v̄)]``, and the result is verified afterwards with
:func:`check_profile_limits` (exact spline speeds on a dense grid).

Torque. The XM430-W210 stalls at 3.0 N·m at 12 V (no-load speed 77 rpm = 8.06 rad/s); :func:`torque_report` compares
the simulated motor torques against the stall torque and produces the warnings to show. The torques are simulated
states (the motor constraints' multipliers), not functions of the profiles alone, so their penalty
(:class:`TorquePenalty`) is a term of the objective on the states, differentiated by the adjoint like the tracking::

    T(S) = weight · Δt Σ_n Σ_m ½ max(0, |τ_m(t_n)| − τ̄_m)²,   τ̄_m = (1 − margin) τ_stall,m,   τ = S[motor rows].
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from retarget.errors import InputError
from retarget.motion.limits import LimitViolation, as_joint_limits, true_runs
from retarget.optimize.bspline import MotorProfiles, ProfileParametrization
from retarget.optimize.errors import ProfileError

if TYPE_CHECKING:
    from retarget.model.servo import ServoParams

__all__ = [
    "XM430_W210",
    "MotorLimits",
    "ServoSpec",
    "SpeedProjection",
    "TorquePenalty",
    "TorqueReport",
    "VelocityPenalty",
    "check_profile_limits",
    "parameter_bounds",
    "speed_feasible_parameters",
    "torque_report",
    "velocity_hull_bound",
]

RPM = 2.0 * math.pi / 60.0  # [rad/s] per rpm


@dataclass(frozen=True)
class ServoSpec:
    """A servo's limits at its supply voltage.

    Attributes:
        model: Model name.
        max_velocity: No-load speed [rad/s].
        stall_torque: Stall torque [N·m].
    """

    model: str
    max_velocity: float
    stall_torque: float

    def __post_init__(self) -> None:
        for name in ("max_velocity", "stall_torque"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise InputError(f"servo {name} must be a positive number, got {value!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, object] | None, default: ServoSpec | None = None) -> ServoSpec:
        """From the robot YAML's ``servo`` mapping (``model``, ``max_velocity`` [rad/s], ``stall_torque`` [N·m]);
        missing keys come from ``default`` (the XM430-W210)."""
        base = default or XM430_W210
        data = dict(data or {})
        unknown = set(data) - {"model", "max_velocity", "stall_torque"}
        if unknown:
            raise InputError(f"servo has unknown keys {sorted(unknown)}; expected model, max_velocity, stall_torque")
        try:
            return cls(str(data.get("model", base.model)), float(data.get("max_velocity", base.max_velocity)),
                       float(data.get("stall_torque", base.stall_torque)))
        except (TypeError, ValueError) as exc:
            raise InputError(f"servo limits are not numbers: {data}") from exc


#: Dynamixel XM430-W210 at 12 V: 77 rpm no load, 3.0 N·m stall.
XM430_W210 = ServoSpec("XM430-W210", 77.0 * RPM, 3.0)


@dataclass(frozen=True, eq=False)
class MotorLimits:
    """Per-motor limits in motor order.

    Attributes:
        joint_names: Motor names ``(n_motors,)``.
        lower: Lowest angle [rad] ``(n_motors,)`` (``-inf``: none).
        upper: Highest angle [rad] ``(n_motors,)`` (``+inf``: none).
        max_velocity: Highest speed [rad/s] ``(n_motors,)``: the smaller of the URDF's and the servo's.
        stall_torque: [N·m] ``(n_motors,)``.
    """

    joint_names: tuple[str, ...]
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    max_velocity: NDArray[np.float64]
    stall_torque: NDArray[np.float64]

    @classmethod
    def build(cls, joint_names: Sequence[str], joint_limits: Mapping[str, object] | None = None,
              servos: ServoSpec | Mapping[str, ServoSpec] | None = None) -> MotorLimits:
        """Combine URDF joint limits and servo specs.

        Args:
            joint_names: Motors, in order.
            joint_limits: ``{joint: (lower [rad], upper [rad], max_velocity [rad/s])}`` or anything
                :func:`retarget.motion.as_joint_limits` accepts; missing joints are unlimited.
            servos: One spec for all motors, or ``{joint: spec}`` (missing joints get the XM430-W210).

        Raises:
            InputError: On an empty position range.
        """
        names = tuple(joint_names)
        lims = as_joint_limits(joint_limits or {})
        lower, upper, vel, tau = [], [], [], []
        for name in names:
            spec = servos.get(name, XM430_W210) if isinstance(servos, Mapping) else (servos or XM430_W210)
            lim = lims.get(name)
            lo = -math.inf if lim is None else lim.lower
            hi = math.inf if lim is None else lim.upper
            if not lo < hi:
                raise InputError(f"joint '{name}' has an empty position range [{lo}, {hi}] rad")
            lower.append(lo)
            upper.append(hi)
            urdf_v = math.inf if lim is None or lim.velocity <= 0 else lim.velocity
            vel.append(min(urdf_v, spec.max_velocity))
            tau.append(spec.stall_torque)
        return cls(names, np.array(lower), np.array(upper), np.array(vel), np.array(tau))

    def as_mapping(self) -> dict[str, tuple[float, float, float]]:
        """``{joint: (lower, upper, max_velocity)}`` as :meth:`retarget.motion.Motion.check_limits` takes it."""
        return {n: (float(lo), float(hi), float(v))
                for n, lo, hi, v in zip(self.joint_names, self.lower, self.upper, self.max_velocity)}


def parameter_bounds(parametrization: ProfileParametrization, limits: MotorLimits
                     ) -> list[tuple[float | None, float | None]]:
    """L-BFGS-B bounds on the parameters that keep θ within the position limits (convex-hull condition).

    Returns:
        One ``(lower, upper)`` per entry of ``x`` [rad], ``None`` for an unlimited side.

    Raises:
        ProfileError: If the fixed start pose is outside the limits (no parameters could fix that).
    """
    if len(limits.joint_names) != parametrization.n_motors:
        raise ProfileError(f"{len(limits.joint_names)} motor limits for {parametrization.n_motors} motors")
    if parametrization.start_pose is not None:
        pose = parametrization.start_pose
        bad = np.flatnonzero((pose < limits.lower) | (pose > limits.upper))
        if bad.size:
            m = int(bad[0])
            raise ProfileError(f"motor '{limits.joint_names[m]}' starts at {pose[m]:.6g} rad, outside its limits "
                               f"[{limits.lower[m]:.6g}, {limits.upper[m]:.6g}] rad",
                               joint=limits.joint_names[m], start=float(pose[m]))
    motor = parametrization.motor_of_parameter()
    return [(None if math.isinf(limits.lower[m]) else float(limits.lower[m]),
             None if math.isinf(limits.upper[m]) else float(limits.upper[m])) for m in motor]


def velocity_hull_bound(profiles: MotorProfiles) -> NDArray[np.float64]:
    """Guaranteed upper bound of ``max_t |θ̇_m(t)|`` per motor [rad/s] ``(n_motors,)``: ``max_j |Δp_j| / h``."""
    diffs = np.abs(np.diff(profiles.control_points, axis=0))
    return diffs.max(axis=0) / profiles.knot_spacing


@dataclass(frozen=True, eq=False)
class VelocityPenalty:
    """Smooth penalty on motor speeds above ``(1 − margin) · max_velocity`` (see module docstring).

    Attributes:
        b1: θ̇ basis at the sample times ``(n_t, n_ctrl)``.
        dt: Sample spacing [s] (the penalty approximates a time integral).
        threshold: ``v̄`` [rad/s] ``(n_motors,)``.
        weight: Penalty weight [s/rad²·objective units].
    """

    b1: sp.csr_matrix
    dt: float
    threshold: NDArray[np.float64]
    weight: float

    @classmethod
    def build(cls, profiles: MotorProfiles, times: ArrayLike, limits: MotorLimits, weight: float,
              margin: float = 0.02) -> VelocityPenalty:
        """Sample θ̇'s basis on a uniform grid (e.g. the simulation grid).

        Args:
            profiles: The spline space.
            times: Uniform grid [s] ``(n_t,)``.
            limits: Motor limits (only ``max_velocity`` is used).
            weight: Penalty weight, ``≥ 0``.
            margin: Fraction of the limit kept free, in ``[0, 1)``, so the penalized optimum stays below the limit.
        """
        t = np.asarray(times, dtype=np.float64)
        if not (0.0 <= margin < 1.0) or not weight >= 0:
            raise InputError(f"velocity penalty needs weight ≥ 0 and 0 ≤ margin < 1, got {weight}, {margin}")
        dt = float(t[1] - t[0]) if t.size > 1 else 1.0
        return cls(profiles.basis_matrix(t, 1), dt, (1.0 - margin) * limits.max_velocity, float(weight))

    def evaluate(self, control_points: ArrayLike) -> tuple[float, NDArray[np.float64]]:
        """``(V, ∂V/∂P)`` at control points ``P`` [rad] ``(n_ctrl, n_motors)``."""
        p = np.asarray(control_points, dtype=np.float64)
        speed = np.asarray(self.b1 @ p)
        excess = np.maximum(np.abs(speed) - self.threshold, 0.0)
        scale = self.weight * self.dt
        value = 0.5 * scale * float(np.sum(excess ** 2))
        grad = scale * np.asarray(self.b1.T @ (np.sign(speed) * excess))
        return value, grad

    def evaluate_parameters(self, x: ArrayLike, parametrization: ProfileParametrization
                            ) -> tuple[float, NDArray[np.float64]]:
        """``(V, ∂V/∂x)`` at parameters ``x`` ``(n_parameters,)``."""
        value, grad = self.evaluate(parametrization.control_points(x))
        return value, parametrization.pullback(grad)


@dataclass(frozen=True, eq=False)
class SpeedProjection:
    """The outcome of :func:`speed_feasible_parameters`.

    Attributes:
        x: Parameters ``(n_parameters,)``: ``x0`` with the projected motors' entries replaced.
        joint_names: All motors.
        projected: Names of the motors that were over their speed limit and were projected.
        max_change: Largest ``|θ(t) − θ_fit(t)|`` per motor [rad] ``(n_motors,)`` (0 for the others).
        remaining: Speed violations left by the dense check (empty unless position bounds got in the way).
    """

    x: NDArray[np.float64]
    joint_names: tuple[str, ...]
    projected: tuple[str, ...]
    max_change: NDArray[np.float64]
    remaining: tuple[LimitViolation, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether any motor was projected."""
        return bool(self.projected)

    def describe(self) -> str:
        """One sentence for the plan's warnings."""
        if not self.projected:
            return "the input is within the servos' speed limits"
        worst = {n: math.degrees(float(c)) for n, c in zip(self.joint_names, self.max_change) if n in self.projected}
        changes = ", ".join(f"{n} by up to {c:.1f}°" for n, c in worst.items())
        text = (f"the input exceeds the speed limit of {', '.join(self.projected)}: the optimizer starts from the "
                f"closest speed-feasible profiles ({changes}); the naive baseline plays the input as authored")
        if self.remaining:
            text += f"; {len(self.remaining)} speed violation(s) remain where position limits bind"
        return text


def speed_feasible_parameters(profiles: MotorProfiles, parametrization: ProfileParametrization, x0: ArrayLike,
                              limits: MotorLimits, bounds: Sequence[tuple[float | None, float | None]] | None = None,
                              *, rate: float = 1000.0, margin: float = 0.02, weight: float = 1e4,
                              max_newton: int = 100) -> SpeedProjection:
    """Project the motors that exceed their speed limit onto speed-feasible profiles (module docstring).

    Args:
        profiles: The spline space (e.g. the input's fit; its control points are not used).
        parametrization: The spline parameters' map to control points.
        x0: Starting parameters (the input's fit) ``(n_parameters,)``.
        limits: Motor limits (speed; positions through ``bounds``).
        bounds: Per-parameter ``(lower, upper)`` [rad] (:func:`parameter_bounds`); the projection is clipped to them.
        rate: Sampling rate of the least-squares fit and of the speed samples [Hz].
        margin: Fraction of the speed limit kept free.
        weight: Initial penalty weight ``λ`` [s²]; raised a hundredfold (at most three times) while the dense
            check still finds a violation.
        max_newton: Newton iterations per motor and weight.

    Raises:
        InputError: ``margin`` outside ``[0, 1)``, a non-positive rate or weight, or a wrong-length ``x0``.
    """
    x0 = np.asarray(x0, dtype=np.float64)
    if not (0.0 <= margin < 1.0) or not rate > 0 or not weight > 0:
        raise InputError(f"speed projection needs 0 ≤ margin < 1, rate > 0 and weight > 0, got {margin}, {rate}, "
                         f"{weight}")
    if x0.shape != (parametrization.n_parameters,):
        raise InputError(f"parameter vector has shape {x0.shape}, expected ({parametrization.n_parameters},)")
    fit = profiles.with_control_points(parametrization.control_points(x0))
    over = {v.joint for v in check_profile_limits(fit, limits, rate=rate) if v.kind == "velocity"}
    names = limits.joint_names
    x = x0.copy()
    change = np.zeros(len(names))
    if not over:
        return SpeedProjection(x, names, (), change)
    t = fit.t0 + np.arange(int(math.floor((fit.t_end - fit.t0) * rate + 1e-9)) + 1) / rate
    b0, b1 = fit.basis_matrix(t, 0), fit.basis_matrix(t, 1)
    a0, a1 = parametrization.parameter_basis(b0), parametrization.parameter_basis(b1)
    off0, off1 = np.asarray(b0 @ parametrization.offset), np.asarray(b1 @ parametrization.offset)
    theta = fit.evaluate(t)
    g0 = (a0.T @ a0).tocsr()
    nf = parametrization.n_free
    lo = np.array([-np.inf if b is None else b for b, _ in (bounds or [(None, None)] * x.size)])
    hi = np.array([np.inf if b is None else b for _, b in (bounds or [(None, None)] * x.size)])
    projected = tuple(n for n in names if n in over)
    remaining: list[LimitViolation] = []
    lam = float(weight)
    for _ in range(4):
        for m, name in enumerate(names):
            if name not in over:
                continue
            cols = slice(m * nf, (m + 1) * nf)
            x[cols] = _project_motor(a0, a1, g0, theta[:, m] - off0[:, m], off1[:, m],
                                     (1.0 - margin) * float(limits.max_velocity[m]), lam, x0[cols], max_newton)
        np.clip(x, lo, hi, out=x)
        result = fit.with_control_points(parametrization.control_points(x))
        remaining = [v for v in check_profile_limits(result, limits, rate=rate) if v.kind == "velocity"]
        if not remaining:
            break
        lam *= 100.0
    change = np.abs(result.evaluate(t) - theta).max(axis=0)
    return SpeedProjection(x, names, projected, change, tuple(remaining))


def _project_motor(a0: sp.csr_matrix, a1: sp.csr_matrix, g0: sp.csr_matrix, b: NDArray[np.float64],
                   c: NDArray[np.float64], vbar: float, lam: float, x: NDArray[np.float64], max_newton: int
                   ) -> NDArray[np.float64]:
    """One motor: ``min ½|A0 x − b|² + ½ λ |max(0, |A1 x + c| − v̄)|²`` by semismooth Newton with backtracking."""
    def objective(y: NDArray[np.float64]) -> float:
        r = a0 @ y - b
        e = np.maximum(np.abs(a1 @ y + c) - vbar, 0.0)
        return 0.5 * float(r @ r) + 0.5 * lam * float(e @ e)

    rhs0 = a0.T @ b
    value = objective(x)
    for _ in range(max_newton):
        # The Newton step of the quadratic that the penalty is on the current active set.
        v = a1 @ x + c
        active = np.abs(v) > vbar
        a_s = a1[active]
        step = _banded_solve((g0 + lam * (a_s.T @ a_s)).tocsr(),
                             rhs0 + lam * (a_s.T @ (np.sign(v[active]) * vbar - c[active]))) - x
        s = 1.0
        while s > 1e-8:
            trial = objective(x + s * step)
            if trial <= value:
                break
            s *= 0.5
        else:
            return x
        x = x + s * step
        converged = trial >= value - 1e-15 * max(1.0, value)
        value = trial
        if converged:
            break
    return x


def _banded_solve(matrix: sp.csr_matrix, rhs: NDArray[np.float64]) -> NDArray[np.float64]:
    """Solve a symmetric positive definite system whose entries lie within three diagonals of the main one
    (cubic B-spline normal equations), dense if it is wider."""
    import scipy.linalg

    n = matrix.shape[0]
    if sp.triu(matrix, 4).nnz:
        return np.linalg.solve(matrix.toarray(), rhs)
    band = np.zeros((4, n))
    for k in range(4):
        band[3 - k, k:] = matrix.diagonal(k)
    return scipy.linalg.solveh_banded(band, rhs)


@dataclass(frozen=True)
class TorquePenalty:
    """Smooth penalty on simulated motor torques above ``(1 − margin) · stall_torque`` (module docstring).

    A modelled servo (:mod:`retarget.sim.servo`) gives less torque the faster its shaft turns: while its torque
    drives the shaft (motoring), the threshold follows the torque–speed line, ``(1 − margin) · stall · (duty_limit −
    |ω| / no-load speed)``, with ``ω`` its simulated shaft speed.

    Attributes:
        dt: Step of the simulation grid [s] (the penalty approximates a time integral).
        threshold: ``τ̄`` [N·m] ``(n_motors,)`` at zero speed.
        weight: Penalty weight [1/(N²·m²·s)·objective units].
        speed_slope: per motor, how much the threshold falls per shaft speed while motoring [N·m·s/rad]
            ``(n_motors,)``, 0 for an ideal motor; None: no speed dependence.
        speed_index: per motor, where its shaft speed sits in ``S`` (-1: an ideal motor) ``(n_motors,)``.
    """

    dt: float
    threshold: NDArray[np.float64]
    weight: float
    speed_slope: NDArray[np.float64] | None = None
    speed_index: NDArray[np.int64] | None = None

    @classmethod
    def build(cls, dt: float, limits: MotorLimits, weight: float, margin: float = 0.1,
              servos: Sequence[ServoParams] | None = None,
              speed_index: ArrayLike | None = None) -> TorquePenalty:
        """The penalty for the motors of ``limits`` on a grid of step ``dt``.

        Args:
            dt: Simulation step [s].
            limits: Motor limits (only ``stall_torque`` is used).
            weight: Penalty weight, ``≥ 0``.
            margin: Fraction of the stall torque kept free, in ``[0, 1)``.
            servos: per motor its :class:`~retarget.model.servo.ServoParams` (duty limit and no-load speed of the
                modelled ones), with ``speed_index`` (an engine's ``shaft_speed_index``); None: the stall torque
                alone.

        Raises:
            InputError: negative weight, margin outside ``[0, 1)`` or ``dt ≤ 0``.
        """
        if not (0.0 <= margin < 1.0) or not weight >= 0 or not dt > 0:
            raise InputError(f"torque penalty needs weight ≥ 0, 0 ≤ margin < 1 and dt > 0, got {weight}, {margin}, {dt}")
        stall = np.asarray(limits.stall_torque, dtype=np.float64)
        index = None if speed_index is None else np.asarray(speed_index, dtype=np.int64)
        if servos is None or index is None or not np.any(index >= 0):
            return cls(float(dt), (1.0 - margin) * stall, float(weight))
        duty = np.array([1.0 if s.ideal else s.duty_limit for s in servos])
        slope = np.array([0.0 if s.ideal else st / s.max_velocity for s, st in zip(servos, stall)])
        return cls(float(dt), (1.0 - margin) * stall * duty, float(weight), (1.0 - margin) * slope, index)

    def thresholds(self, torques: NDArray[np.float64], speeds: NDArray[np.float64] | None
                   ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(τ̄(ω), motoring)`` per sample and motor: the threshold at each shaft speed, and where the torque
        drives the shaft (there ``τ̄`` falls with ``|ω|``). ``torques`` are the motor rows' multipliers (the servo
        gives ``−λ``)."""
        thr = np.broadcast_to(self.threshold, torques.shape).copy()
        motoring = np.zeros(torques.shape, dtype=bool)
        if self.speed_slope is not None and speeds is not None:
            motoring = (-torques * speeds > 0.0) & (self.speed_slope > 0.0)
            thr = np.where(motoring, thr - self.speed_slope * np.abs(speeds), thr)
        return thr, motoring

    def evaluate(self, torques: ArrayLike, speeds: ArrayLike | None = None
                 ) -> tuple[float, NDArray[np.float64], NDArray[np.float64] | None]:
        """``(T, ∂T/∂τ, ∂T/∂ω)`` for simulated torques [N·m] and shaft speeds [rad/s] ``(n_t, n_motors)`` (speeds of
        ideal motors are ignored; ``∂T/∂ω`` None without speeds)."""
        tau = np.asarray(torques, dtype=np.float64)
        w = None if speeds is None else np.asarray(speeds, dtype=np.float64)
        thr, motoring = self.thresholds(tau, w)
        excess = np.maximum(np.abs(tau) - thr, 0.0)
        scale = self.weight * self.dt
        d_speed = None
        if w is not None and self.speed_slope is not None:
            d_speed = scale * excess * np.where(motoring, self.speed_slope * np.sign(w), 0.0)
        return 0.5 * scale * float(np.sum(excess**2)), scale * np.sign(tau) * excess, d_speed

    def speeds(self, states: NDArray[np.float64]) -> NDArray[np.float64] | None:
        """Shaft speeds (n_t, n_motors) read from states (n_t, n_S) (zero for ideal motors), or None."""
        if self.speed_index is None:
            return None
        idx = self.speed_index
        return np.where(idx >= 0, np.asarray(states)[:, np.maximum(idx, 0)], 0.0)


def check_profile_limits(profiles: MotorProfiles, limits: MotorLimits, *, rate: float = 1000.0,
                         position_tolerance: float = 1e-9, velocity_tolerance: float = 1e-9
                         ) -> list[LimitViolation]:
    """Every place where the profiles leave their limits, from exact spline values and speeds on a dense grid.

    Args:
        profiles: Motor profiles, motors in the order of ``limits.joint_names``.
        limits: Motor limits.
        rate: Sampling rate of the check [Hz].
        position_tolerance: Allowed excess over position limits [rad].
        velocity_tolerance: Allowed relative excess over speed limits.

    Returns:
        One :class:`retarget.motion.LimitViolation` per joint, kind and contiguous run (``row`` is the index on
        the check grid ``t0 + row / rate``); empty if within limits.
    """
    count = int(math.ceil((profiles.t_end - profiles.t0) * rate - 1e-9)) + 1
    t = profiles.t0 + np.arange(count) / rate
    theta = profiles.evaluate(t, 0)
    speed = np.abs(profiles.evaluate(t, 1))
    out: list[LimitViolation] = []
    for m, name in enumerate(limits.joint_names):
        checks = (("lower", theta[:, m] < limits.lower[m] - position_tolerance, theta[:, m], limits.lower[m], -1),
                  ("upper", theta[:, m] > limits.upper[m] + position_tolerance, theta[:, m], limits.upper[m], 1),
                  ("velocity", speed[:, m] > limits.max_velocity[m] * (1 + velocity_tolerance), speed[:, m],
                   limits.max_velocity[m], 1))
        for kind, mask, values, limit, sign in checks:
            for a, b in true_runs(mask):
                worst = a + int(np.argmax(sign * values[a:b + 1]))
                out.append(LimitViolation(name, kind, worst, float(t[worst]), float(values[worst]), float(limit),
                                          float(t[a]), float(t[b])))
    return out


@dataclass(frozen=True)
class TorqueReport:
    """Peak motor torques against the servos' stall torque.

    Attributes:
        joint_names: Motors.
        peak_torque: max |τ| per motor [N·m].
        peak_time: When it happens [s].
        stall_torque: [N·m] per motor.
    """

    joint_names: tuple[str, ...]
    peak_torque: tuple[float, ...]
    peak_time: tuple[float, ...]
    stall_torque: tuple[float, ...]

    @property
    def ratio(self) -> tuple[float, ...]:
        """Peak over stall torque per motor."""
        return tuple(p / s for p, s in zip(self.peak_torque, self.stall_torque))

    @property
    def exceeded(self) -> tuple[str, ...]:
        """Motors whose peak torque exceeds the stall torque."""
        return tuple(n for n, r in zip(self.joint_names, self.ratio) if r > 1.0)

    def warnings(self) -> list[str]:
        """One human-readable warning per motor over its stall torque."""
        return [f"motor '{n}' needs {p:.3g} N·m at t = {t:.3g} s, above its stall torque {s:.3g} N·m "
                f"({100 * p / s:.0f}%): the servo cannot follow this trajectory"
                for n, p, t, s in zip(self.joint_names, self.peak_torque, self.peak_time, self.stall_torque)
                if p > s]

    def summary(self) -> dict[str, object]:
        """JSON-friendly form."""
        return {"peak_torque_nm": dict(zip(self.joint_names, self.peak_torque)),
                "stall_torque_nm": dict(zip(self.joint_names, self.stall_torque)),
                "torque_exceeded": list(self.exceeded)}


def torque_report(time: ArrayLike, torques: ArrayLike, limits: MotorLimits) -> TorqueReport:
    """Peak |τ| per motor from a simulated torque history.

    Args:
        time: Sample times [s] ``(n_t,)``.
        torques: Motor torques [N·m] ``(n_t, n_motors)`` (e.g. the motor constraints' multipliers).
        limits: Motor limits with the stall torques.
    """
    t = np.asarray(time, dtype=np.float64)
    tau = np.abs(np.asarray(torques, dtype=np.float64))
    if tau.ndim == 1:
        tau = tau[:, None]
    if tau.shape != (t.size, len(limits.joint_names)):
        raise InputError(f"torques have shape {tau.shape}, expected {(t.size, len(limits.joint_names))}")
    idx = np.argmax(tau, axis=0)
    return TorqueReport(limits.joint_names, tuple(float(tau[i, m]) for m, i in enumerate(idx)),
                        tuple(float(t[i]) for i in idx), tuple(float(s) for s in limits.stall_torque))
