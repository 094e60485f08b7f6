"""Motor profiles: one C² uniform cubic B-spline per motor, its basis matrices, its parameters and its fit.

A profile on ``[t0, t1]`` with knot spacing ``h`` has ``n_seg = ceil((t1 − t0) / h)`` segments, so it covers
``[t0, t_end]`` with ``t_end = t0 + n_seg h ≥ t1``, and ``n_ctrl = n_seg + 3`` control points per motor. On segment
``s`` (``t0 + s h ≤ t ≤ t0 + (s + 1) h``, local coordinate ``u ∈ [0, 1]``)::

    θ(t) = Σ_{i=0..3} b_i(u) p_{s+i},   b_0 = (1−u)³/6,  b_1 = (3u³ − 6u² + 4)/6,
                                        b_2 = (−3u³ + 3u² + 3u + 1)/6,  b_3 = u³/6,

θ̇ and θ̈ follow with factors ``1/h`` and ``1/h²``. Because θ, θ̇, θ̈ are linear in the control points, sampling them
at fixed times gives constant sparse *basis matrices* ``B0, B1, B2`` (n_times, n_ctrl), four non-zeros per row:
``θ(t_i) = B0 @ P`` — what the simulator and the adjoint use.

End conditions. At a knot ``θ = (p_{j} + 4 p_{j+1} + p_{j+2})/6``, ``θ̇ = (p_{j+2} − p_{j})/(2h)``,
``θ̈ = (p_{j} − 2p_{j+1} + p_{j+2})/h²``. Three equal control points therefore put the curve at rest (zero velocity
*and* acceleration) at that knot. :class:`ProfileParametrization` uses this: with ``hold_start`` the first three
control points equal the input's initial pose and are constants, not parameters (the simulation starts at rest in a
state that does not depend on the parameters); with ``hold_end`` the last three are tied to one free value (the
robot comes to rest at the end, in a pose the optimizer may choose). Outside ``[t0, t_end]`` the profile holds its
end values with zero derivatives, which is C² exactly when the end condition holds.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from retarget.motion.motion import Motion
from retarget.optimize.errors import ProfileError

__all__ = ["MotorProfiles", "ProfileFit", "ProfileParametrization", "fit_profiles", "num_segments"]

#: Tolerance [in knot spacings] under which a time span counts as a whole number of segments.
_SEGMENT_SLACK = 1e-9


def num_segments(t0: float, t1: float, knot_spacing: float) -> int:
    """Number of B-spline segments covering ``[t0, t1]`` (at least one).

    Args:
        t0: Start time [s].
        t1: End time [s], ``≥ t0``.
        knot_spacing: Knot spacing ``h`` [s], positive.

    Raises:
        ProfileError: On a non-positive spacing or a reversed span.
    """
    if not (knot_spacing > 0 and math.isfinite(knot_spacing)):
        raise ProfileError(f"knot spacing must be a positive number of seconds, got {knot_spacing}",
                           knot_spacing=knot_spacing)
    if not (math.isfinite(t0) and math.isfinite(t1) and t1 >= t0):
        raise ProfileError(f"profile time span [{t0}, {t1}] s is not a finite forward interval", t0=t0, t1=t1)
    return max(1, math.ceil((t1 - t0) / knot_spacing - _SEGMENT_SLACK))


def _basis_weights(u: NDArray[np.float64], derivative: int) -> NDArray[np.float64]:
    """The four uniform cubic B-spline weights (or their u-derivatives) at local coordinates u, shape (n, 4)."""
    if derivative == 0:
        v = 1.0 - u
        return np.stack([v ** 3, 3 * u ** 3 - 6 * u ** 2 + 4, -3 * u ** 3 + 3 * u ** 2 + 3 * u + 1, u ** 3],
                        axis=-1) / 6.0
    if derivative == 1:
        return np.stack([-0.5 * (1.0 - u) ** 2, 1.5 * u ** 2 - 2 * u, -1.5 * u ** 2 + u + 0.5, 0.5 * u ** 2], axis=-1)
    if derivative == 2:
        return np.stack([1.0 - u, 3 * u - 2, 1 - 3 * u, u], axis=-1)
    if derivative == 3:
        ones = np.ones_like(u)
        return np.stack([-ones, 3 * ones, -3 * ones, ones], axis=-1)
    raise ProfileError(f"derivative order must be 0..3, got {derivative}", derivative=derivative)


def _scalar_weights(u: float, derivative: int) -> tuple[float, float, float, float]:
    """:func:`_basis_weights` for one scalar u, in plain floats (fast per-step evaluation)."""
    if derivative == 0:
        v = 1.0 - u
        return (v * v * v / 6.0, (3 * u ** 3 - 6 * u * u + 4) / 6.0, (-3 * u ** 3 + 3 * u * u + 3 * u + 1) / 6.0,
                u ** 3 / 6.0)
    if derivative == 1:
        return (-0.5 * (1.0 - u) ** 2, 1.5 * u * u - 2 * u, -1.5 * u * u + u + 0.5, 0.5 * u * u)
    if derivative == 2:
        return (1.0 - u, 3 * u - 2, 1 - 3 * u, u)
    if derivative == 3:
        return (-1.0, 3.0, -3.0, 1.0)
    raise ProfileError(f"derivative order must be 0..3, got {derivative}", derivative=derivative)


@dataclass(frozen=True, eq=False)
class MotorProfiles:
    """Uniform cubic B-spline angle profiles θ(t) of ``n_motors`` motors.

    Also satisfies the simulator's ``MotorTrajectory`` protocol (:meth:`value`, :meth:`derivative`).

    Attributes:
        knot_spacing: Knot spacing ``h`` [s].
        t0: Start of the profiles [s].
        t1: Requested end [s]; the spline covers ``[t0, t_end]``, ``t_end = t0 + n_segments h ≥ t1``.
        control_points: ``P`` [rad], shape ``(n_ctrl, n_motors)`` with ``n_ctrl = n_segments + 3``; read-only.
    """

    knot_spacing: float
    t0: float
    t1: float
    control_points: NDArray[np.float64]

    def __post_init__(self) -> None:
        n_seg = num_segments(float(self.t0), float(self.t1), float(self.knot_spacing))
        p = np.array(self.control_points, dtype=np.float64)
        if p.ndim == 1:
            p = p[:, None]
        if p.ndim != 2 or p.shape[0] != n_seg + 3 or p.shape[1] == 0:
            raise ProfileError(f"control points have shape {p.shape}, expected ({n_seg + 3}, n_motors) for "
                               f"{n_seg} segments of {self.knot_spacing} s on [{self.t0}, {self.t1}] s",
                               shape=p.shape, expected_rows=n_seg + 3)
        if not np.all(np.isfinite(p)):
            raise ProfileError("control points contain non-finite values")
        p.setflags(write=False)
        object.__setattr__(self, "knot_spacing", float(self.knot_spacing))
        object.__setattr__(self, "t0", float(self.t0))
        object.__setattr__(self, "t1", float(self.t1))
        object.__setattr__(self, "control_points", p)

    @classmethod
    def constant(cls, pose: ArrayLike, t0: float, t1: float, knot_spacing: float) -> MotorProfiles:
        """Profiles that hold ``pose`` [rad] (n_motors,) on ``[t0, t1]``."""
        q = np.atleast_1d(np.asarray(pose, dtype=np.float64))
        n_ctrl = num_segments(t0, t1, knot_spacing) + 3
        return cls(knot_spacing, t0, t1, np.tile(q, (n_ctrl, 1)))

    @property
    def n_segments(self) -> int:
        """Number of polynomial segments."""
        return self.control_points.shape[0] - 3

    @property
    def n_control(self) -> int:
        """Control points per motor ``n_ctrl``."""
        return int(self.control_points.shape[0])

    @property
    def n_motors(self) -> int:
        """Number of motors."""
        return int(self.control_points.shape[1])

    @property
    def t_end(self) -> float:
        """End of the last segment [s] (``≥ t1``)."""
        return self.t0 + self.n_segments * self.knot_spacing

    def knots(self) -> NDArray[np.float64]:
        """The full knot vector ``t0 + (j − 3) h``, ``j = 0 … n_ctrl + 3`` [s], shape ``(n_ctrl + 4,)``."""
        return self.t0 + (np.arange(self.n_control + 4) - 3.0) * self.knot_spacing

    def with_control_points(self, control_points: ArrayLike) -> MotorProfiles:
        """The same spline space with other control points ``(n_ctrl, n_motors)``."""
        return MotorProfiles(self.knot_spacing, self.t0, self.t1, np.asarray(control_points, dtype=np.float64))

    def basis_matrix(self, times: ArrayLike, derivative: int = 0) -> sp.csr_matrix:
        """Sparse map from control points to the ``derivative``-th time derivative at ``times``.

        Args:
            times: Sample times [s], shape ``(n_t,)``. Times outside ``[t0, t_end]`` give the held end value
                (derivative 0) or zero rows (derivatives ≥ 1).
            derivative: 0 (θ [rad]), 1 (θ̇ [rad/s]), 2 (θ̈ [rad/s²]) or 3 (jerk, piecewise constant).

        Returns:
            ``B`` with ``B @ P`` the derivative at ``times``, shape ``(n_t, n_ctrl)``, four non-zeros per row.
        """
        return _basis_matrix(np.atleast_1d(np.asarray(times, dtype=np.float64)), self.t0, self.knot_spacing,
                             self.n_segments, derivative)

    def basis_matrices(self, times: ArrayLike) -> tuple[sp.csr_matrix, sp.csr_matrix, sp.csr_matrix]:
        """``(B0, B1, B2)``: :meth:`basis_matrix` for θ, θ̇, θ̈ at ``times``, each ``(n_t, n_ctrl)``."""
        return (self.basis_matrix(times, 0), self.basis_matrix(times, 1), self.basis_matrix(times, 2))

    def evaluate(self, times: ArrayLike, derivative: int = 0) -> NDArray[np.float64]:
        """The ``derivative``-th time derivative of every profile at ``times``.

        Args:
            times: Sample times [s], scalar or shape ``(n_t,)``.
            derivative: 0, 1, 2 or 3 (see :meth:`basis_matrix`).

        Returns:
            Shape ``(n_t, n_motors)`` ([rad], [rad/s], [rad/s²], [rad/s³]); ``(n_motors,)`` for a scalar time.
        """
        if np.ndim(times) == 0:
            # Per-step calls from the simulator: skip building a sparse matrix.
            x = (float(times) - self.t0) / self.knot_spacing
            if derivative > 0 and not 0.0 <= x <= self.n_segments:
                return np.zeros(self.n_motors)
            seg = min(max(math.floor(x), 0), self.n_segments - 1)
            w = _scalar_weights(min(max(x - seg, 0.0), 1.0), derivative)
            scale = self.knot_spacing ** -derivative
            c = self.control_points
            return scale * (w[0] * c[seg] + w[1] * c[seg + 1] + w[2] * c[seg + 2] + w[3] * c[seg + 3])
        return np.asarray(self.basis_matrix(times, derivative) @ self.control_points)

    def value(self, t: float) -> NDArray[np.float64]:
        """θ(t) [rad], shape ``(n_motors,)``."""
        return self.evaluate(float(t), 0)

    def derivative(self, t: float) -> NDArray[np.float64]:
        """θ̇(t) [rad/s], shape ``(n_motors,)``."""
        return self.evaluate(float(t), 1)

    def second_derivative(self, t: float) -> NDArray[np.float64]:
        """θ̈(t) [rad/s²], shape ``(n_motors,)``."""
        return self.evaluate(float(t), 2)

    def to_motion(self, joint_names: Sequence[str], rate: float, *, t_stop: float | None = None) -> Motion:
        """The profiles sampled on the uniform grid ``t0 + k / rate`` up to ``t_stop`` (default ``t1``).

        Args:
            joint_names: One name per motor.
            rate: Sampling rate [Hz].
            t_stop: Last time to cover [s]; the grid ends at the first sample ``≥ t_stop``.

        Raises:
            ProfileError: On a name count that does not match the motors or a non-positive rate.
        """
        if len(joint_names) != self.n_motors:
            raise ProfileError(f"{len(joint_names)} joint names for {self.n_motors} motors",
                               joint_names=list(joint_names))
        if not (rate > 0 and math.isfinite(rate)):
            raise ProfileError(f"sampling rate must be a positive number of Hz, got {rate}", rate=rate)
        stop = self.t1 if t_stop is None else float(t_stop)
        count = int(math.ceil((stop - self.t0) * rate - 1e-9)) + 1
        t = self.t0 + np.arange(count) / rate
        return Motion(t, tuple(joint_names), self.evaluate(t))


def _basis_matrix(t: NDArray[np.float64], t0: float, h: float, n_seg: int, derivative: int) -> sp.csr_matrix:
    x = (t - t0) / h
    seg = np.clip(np.floor(x), 0, n_seg - 1).astype(np.int64)
    u = np.clip(x - seg, 0.0, 1.0)
    w = _basis_weights(u, derivative) / h ** derivative
    if derivative > 0:
        # Outside the spline the profile is held, so every derivative vanishes there.
        w[(x < 0.0) | (x > n_seg)] = 0.0
    rows = np.repeat(np.arange(t.size), 4)
    cols = (seg[:, None] + np.arange(4)).ravel()
    return sp.csr_matrix((w.ravel(), (rows, cols)), shape=(t.size, n_seg + 3))


@dataclass(frozen=True, eq=False)
class ProfileParametrization:
    """The optimization variables ``x`` of a spline space and the end conditions, as an affine map to ``P``.

    Per motor ``m``: ``P[:, m] = T @ X[:, m] + offset[:, m]``, with ``T`` (n_ctrl, n_free) a 0/1 sparse matrix shared
    by all motors and ``X`` (n_free, n_motors). The flat parameter vector is motor-major: ``x = X.ravel("F")``, so
    ``x[m * n_free:(m + 1) * n_free]`` belongs to motor ``m``.

    Attributes:
        n_control: Control points per motor.
        n_motors: Number of motors.
        start_pose: With ``hold_start``, the fixed initial pose [rad] ``(n_motors,)``: ``p_0 = p_1 = p_2`` = it, so
            θ(t0) = pose, θ̇(t0) = θ̈(t0) = 0, and none of these are parameters. ``None``: the first control points
            are free.
        hold_end: Tie the last three control points to one parameter (rest at ``t_end``).
        rest_control: With ``hold_end``, tie every control point from this index on to that parameter (at least the
            last three): the profile is constant from knot ``rest_control`` on (``t0 + rest_control · h``). None:
            only the last three.
    """

    n_control: int
    n_motors: int
    start_pose: NDArray[np.float64] | None = None
    hold_end: bool = True
    rest_control: int | None = None
    _expansion: sp.csr_matrix = field(init=False, repr=False)
    _offset: NDArray[np.float64] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = int(self.n_control)
        head = 3 if self.start_pose is not None else 0
        tail = 3 if self.hold_end else 0
        if self.hold_end and self.rest_control is not None:
            tail = max(tail, n - max(int(self.rest_control), head))
        if n - head - tail < 0 or n < 4:
            raise ProfileError(f"{n} control points cannot hold the start and the end at rest: use a smaller knot "
                               f"spacing (at least {head + tail} control points, i.e. {head + tail - 3} segments, "
                               "are needed)", n_control=n)
        n_free = n - head - (tail - 1 if tail else 0)
        rows = np.arange(head, n)
        cols = np.arange(n - head)
        if tail:
            cols[-tail:] = n_free - 1
        expansion = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n_free))
        offset = np.zeros((n, int(self.n_motors)))
        if self.start_pose is not None:
            pose = np.atleast_1d(np.asarray(self.start_pose, dtype=np.float64))
            if pose.shape != (self.n_motors,):
                raise ProfileError(f"start pose has shape {pose.shape}, expected ({self.n_motors},)")
            pose.setflags(write=False)
            object.__setattr__(self, "start_pose", pose)
            offset[:head] = pose
        offset.setflags(write=False)
        object.__setattr__(self, "_expansion", expansion)
        object.__setattr__(self, "_offset", offset)

    @property
    def hold_start(self) -> bool:
        """Whether the start is held at a fixed pose."""
        return self.start_pose is not None

    @property
    def n_free(self) -> int:
        """Parameters per motor."""
        return int(self._expansion.shape[1])

    @property
    def n_parameters(self) -> int:
        """Length of ``x``: ``n_free · n_motors``."""
        return self.n_free * int(self.n_motors)

    @property
    def expansion(self) -> sp.csr_matrix:
        """``T``, shape ``(n_ctrl, n_free)``."""
        return self._expansion

    @property
    def offset(self) -> NDArray[np.float64]:
        """Constant part of ``P`` [rad], shape ``(n_ctrl, n_motors)`` (the held start pose, else zeros)."""
        return self._offset

    def control_points(self, x: ArrayLike) -> NDArray[np.float64]:
        """``P`` [rad] ``(n_ctrl, n_motors)`` from parameters ``x`` ``(n_parameters,)``."""
        xx = np.asarray(x, dtype=np.float64)
        if xx.shape != (self.n_parameters,):
            raise ProfileError(f"parameter vector has shape {xx.shape}, expected ({self.n_parameters},)")
        return np.asarray(self._expansion @ xx.reshape(self.n_free, self.n_motors, order="F")) + self._offset

    def parameters(self, control_points: ArrayLike) -> NDArray[np.float64]:
        """The parameters ``x`` whose control points are closest (least squares) to ``control_points``.

        Exact inverse of :meth:`control_points` for control points that satisfy the end conditions.
        """
        p = np.asarray(control_points, dtype=np.float64).reshape(self.n_control, self.n_motors)
        t = self._expansion
        counts = np.asarray(t.sum(axis=0)).ravel()
        x = np.asarray(t.T @ (p - self._offset)) / counts[:, None]
        return x.ravel(order="F")

    def pullback(self, grad_control_points: ArrayLike) -> NDArray[np.float64]:
        """Gradient w.r.t. ``x`` ``(n_parameters,)`` from a gradient w.r.t. ``P`` ``(n_ctrl, n_motors)``."""
        g = np.asarray(grad_control_points, dtype=np.float64).reshape(self.n_control, self.n_motors)
        return np.asarray(self._expansion.T @ g).ravel(order="F")

    def parameter_basis(self, basis: sp.spmatrix) -> sp.csr_matrix:
        """``B @ T``: map from one motor's parameters to a sampled derivative, shape ``(n_t, n_free)``.

        The full Jacobian of motor ``m``'s samples w.r.t. ``x`` is this matrix in columns
        ``m * n_free … (m + 1) * n_free``; every motor shares it.
        """
        return sp.csr_matrix(basis @ self._expansion)

    def jacobian(self, basis: sp.spmatrix) -> sp.csr_matrix:
        """The constant Jacobian of sampled motor values w.r.t. ``x``, all motors at once.

        Args:
            basis: ``B`` ``(n_t, n_ctrl)`` (any of B0, B1, B2).

        Returns:
            ``J`` ``(n_t · n_motors, n_parameters)`` with row ``n · n_motors + m`` the derivative of ``(B P)[n, m]``
            (time-major, i.e. ``(B P).ravel()``), so ``d(B P).ravel() = J @ dx``.
        """
        local = sp.coo_matrix(self.parameter_basis(basis))
        m = int(self.n_motors)
        motors = np.arange(m)
        rows = (local.row[:, None] * m + motors).ravel()
        cols = (motors * self.n_free + local.col[:, None]).ravel()
        data = np.repeat(local.data, m)
        return sp.csr_matrix((data, (rows, cols)), shape=(local.shape[0] * m, self.n_parameters))

    def motor_of_parameter(self) -> NDArray[np.int64]:
        """The motor index of every entry of ``x``, shape ``(n_parameters,)``."""
        return np.repeat(np.arange(self.n_motors), self.n_free)


@dataclass(frozen=True, eq=False)
class ProfileFit:
    """A least-squares fit of motor profiles to a motion.

    Attributes:
        profiles: The fitted profiles.
        parametrization: Their parameters and end conditions.
        parameters: The fitted ``x`` ``(n_parameters,)``.
        joint_names: Motor names, in column order.
        max_error: Largest |θ(t_i) − θ̄_i| per joint over the motion's samples [rad] ``(n_motors,)``.
        rms_error: Root mean square of the same [rad] ``(n_motors,)``.
    """

    profiles: MotorProfiles
    parametrization: ProfileParametrization
    parameters: NDArray[np.float64]
    joint_names: tuple[str, ...]
    max_error: NDArray[np.float64]
    rms_error: NDArray[np.float64]

    def summary(self) -> dict[str, object]:
        """JSON-friendly fit report (errors in [rad] and [deg])."""
        return {
            "knot_spacing_s": self.profiles.knot_spacing,
            "control_points_per_motor": self.profiles.n_control,
            "parameters": self.parametrization.n_parameters,
            "max_error_rad": dict(zip(self.joint_names, map(float, self.max_error))),
            "rms_error_rad": dict(zip(self.joint_names, map(float, self.rms_error))),
            "max_error_deg": float(np.degrees(self.max_error.max())),
            "rms_error_deg": float(np.degrees(np.sqrt(np.mean(self.rms_error ** 2)))),
        }


def _acceleration_rows(t0: float, h: float, n_seg: int) -> tuple[sp.csr_matrix, NDArray[np.float64]]:
    """Rows ``B2(t_g)`` and weights ``w_g`` with ``∫ θ̈² dt = Σ_g w_g (B2(t_g) P)²`` exactly (θ̈ is linear per segment,
    so 2-point Gauss–Legendre per segment integrates its square exactly)."""
    g = 0.5 / math.sqrt(3.0)
    centres = t0 + (np.arange(n_seg) + 0.5) * h
    tg = np.concatenate([centres - g * h, centres + g * h])
    return _basis_matrix(tg, t0, h, n_seg, 2), np.full(tg.size, 0.5 * h)


def fit_profiles(motion: Motion, knot_spacing: float, *, smoothing: float = 0.0, hold_start: bool = True,
                 hold_end: bool = True, rest_from: float | None = None) -> ProfileFit:
    """Fit B-spline profiles to a motion by linear least squares.

    Minimizes ``(1/n) Σ_i |θ(t_i) − θ̄_i|² + smoothing · (1/T) ∫ |θ̈|² dt`` over the parameters (the end conditions
    are built in), with ``n`` samples over a duration ``T``. ``smoothing`` [s⁴] trades fit for smaller accelerations;
    with 0 and more control points than samples the minimum-norm solution is taken.

    Args:
        motion: The input animation; its columns are the motors.
        knot_spacing: Knot spacing [s].
        smoothing: Weight of the acceleration term [s⁴], ``≥ 0``.
        hold_start: Start at rest in the motion's first pose (fixed, not a parameter).
        hold_end: End at rest (tied last control points).
        rest_from: With ``hold_end``, the profiles are constant (at rest, in one pose per motor) from the first knot
            at or after this time [s] on; None: from ``t_end``.

    Returns:
        The fit with per-joint max and RMS error at the motion's samples.

    Raises:
        ProfileError: On a negative smoothing or a knot spacing too large for the end conditions.
    """
    if not (smoothing >= 0 and math.isfinite(smoothing)):
        raise ProfileError(f"smoothing must be ≥ 0, got {smoothing}", smoothing=smoothing)
    t0, t1 = float(motion.time[0]), float(motion.time[-1])
    n_seg = num_segments(t0, t1, knot_spacing)
    rest_control = None if rest_from is None else int(math.ceil((float(rest_from) - t0) / knot_spacing - 1e-9))
    param = ProfileParametrization(n_seg + 3, motion.num_joints,
                                   motion.positions[0] if hold_start else None, hold_end, rest_control)
    b0 = _basis_matrix(motion.time, t0, knot_spacing, n_seg, 0)
    a = (param.parameter_basis(b0)).toarray()
    rhs = motion.positions - np.asarray(b0 @ param.offset)
    scale = 1.0 / math.sqrt(motion.num_samples)
    a_rows, rhs_rows = [a * scale], [rhs * scale]
    if smoothing > 0:
        b2, w = _acceleration_rows(t0, knot_spacing, n_seg)
        root = np.sqrt(w * smoothing / max(t1 - t0, knot_spacing))[:, None]
        a_rows.append(root * param.parameter_basis(b2).toarray())
        rhs_rows.append(-root * np.asarray(b2 @ param.offset))
    coef, *_ = np.linalg.lstsq(np.vstack(a_rows), np.vstack(rhs_rows), rcond=None)
    x = coef.ravel(order="F")
    profiles = MotorProfiles(knot_spacing, t0, t1, param.control_points(x))
    err = np.abs(np.asarray(b0 @ profiles.control_points) - motion.positions)
    return ProfileFit(profiles, param, x, motion.joint_names, err.max(axis=0), np.sqrt(np.mean(err ** 2, axis=0)))
