"""The retargeting objective on the simulation time grid, minus the simulation itself.

Tracking (depends on the simulated states; its partial derivatives are the adjoint's right-hand sides)::

    G = Σ_n q_n Σ_k [ w_pos,k(t_n) ½|c_k(t_n) − c̄_k(t_n)|² + w_ori,k(t_n) ½ Σ_a |R_k(t_n) e_a − R̄_k(t_n) e_a|² ]

with ``q`` the Simpson weights (:mod:`retarget.optimize.quadrature`), ``c`` the global centre of mass [m] and
``R e_a`` the body axes (columns of the rotation matrix), so ``Σ_a |R e_a − R̄ e_a|² = ‖R − R̄‖_F²``. Then
``∂G/∂c_k(t_n) = q_n w_pos (c − c̄)`` and ``∂G/∂R_k(t_n) = q_n w_ori (R − R̄)``; the simulator chains the latter
through its own ``R(quaternion)``.

Regularizers (depend on the parameters only, through the constant basis matrices of the profiles)::

    R = Σ_n q_n [ w_dev(t_n) ½|B0 P − θ̄|²_n + w_acc(t_n) ½|B2 P|²_n ]
    ∂R/∂P = B0ᵀ diag(q w_dev) (B0 P − θ̄) + B2ᵀ diag(q w_acc) B2 P

and ``∂R/∂x`` by :meth:`ProfileParametrization.pullback`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from retarget.errors import InputError
from retarget.optimize.bspline import MotorProfiles, ProfileParametrization
from retarget.optimize.quadrature import simpson_weights
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule

__all__ = [
    "MotorRegularizer",
    "RegularizerValue",
    "TrackingObjective",
    "TrackingValue",
    "deviation_metrics",
]


@dataclass(frozen=True)
class TrackingValue:
    """The tracking term and its partial derivatives.

    Attributes:
        value: ``G`` [m²·s·weight units].
        d_positions: ``∂G/∂c`` ``(n_t, k, 3)``.
        d_orientations: ``∂G/∂R`` ``(n_t, k, 3, 3)``; ``None`` when orientations are not tracked.
    """

    value: float
    d_positions: NDArray[np.float64]
    d_orientations: NDArray[np.float64] | None


@dataclass(frozen=True, eq=False)
class TrackingObjective:
    """Integrated, time-weighted tracking of rigid bodies' global positions and orientations.

    Attributes:
        times: Simulation grid [s] ``(n_t,)``, uniform.
        quadrature: Simpson weights [s] ``(n_t,)``.
        links: Tracked link names, length ``k``.
        position_weights: ``w_pos`` on the grid ``(n_t, k)``.
        orientation_weights: ``w_ori`` on the grid ``(n_t, k)``.
        target_positions: ``c̄`` [m] ``(n_t, k, 3)``.
        target_orientations: ``R̄`` ``(n_t, k, 3, 3)``, or ``None`` when every orientation weight is zero.
    """

    times: NDArray[np.float64]
    quadrature: NDArray[np.float64]
    links: tuple[str, ...]
    position_weights: NDArray[np.float64]
    orientation_weights: NDArray[np.float64]
    target_positions: NDArray[np.float64]
    target_orientations: NDArray[np.float64] | None

    @classmethod
    def build(cls, times: ArrayLike, bodies: Sequence[TrackedBodyWeights], target_positions: ArrayLike,
              target_orientations: ArrayLike | None = None) -> TrackingObjective:
        """Sample the weights on the grid and check the targets' shapes.

        Args:
            times: Uniform simulation grid [s] ``(n_t,)``.
            bodies: Tracked bodies, in the order of the targets' second axis.
            target_positions: ``c̄`` [m] ``(n_t, k, 3)`` (from quasi-static solves at the input angles).
            target_orientations: ``R̄`` ``(n_t, k, 3, 3)``; required when an orientation weight is non-zero.

        Raises:
            InputError: On mismatched shapes, a non-uniform grid or missing orientation targets.
        """
        t = np.asarray(times, dtype=np.float64)
        if t.ndim != 1 or t.size < 1:
            raise InputError(f"time grid must be one-dimensional and non-empty, got shape {t.shape}")
        dt = float(t[1] - t[0]) if t.size > 1 else 1.0
        if t.size > 1 and not np.allclose(np.diff(t), dt, rtol=1e-9, atol=1e-12):
            raise InputError("the tracking objective needs a uniform time grid")
        k = len(bodies)
        c_bar = np.asarray(target_positions, dtype=np.float64)
        if c_bar.shape != (t.size, k, 3):
            raise InputError(f"target positions have shape {c_bar.shape}, expected {(t.size, k, 3)}")
        w_pos = np.stack([b.position(t) for b in bodies], axis=1) if k else np.zeros((t.size, 0))
        w_ori = np.stack([b.orientation(t) for b in bodies], axis=1) if k else np.zeros((t.size, 0))
        r_bar = None
        if target_orientations is not None:
            r_bar = np.asarray(target_orientations, dtype=np.float64)
            if r_bar.shape != (t.size, k, 3, 3):
                raise InputError(f"target orientations have shape {r_bar.shape}, expected {(t.size, k, 3, 3)}")
        elif np.any(w_ori != 0.0):
            raise InputError("orientation weights are set but no target orientations were given")
        return cls(t, simpson_weights(t.size, dt), tuple(b.link for b in bodies), w_pos, w_ori, c_bar, r_bar)

    def window(self, first: int, last: int) -> TrackingObjective:
        """The part of ``G`` on the grid points ``first … last`` (inclusive): the same Simpson weights of the whole
        grid, so the windows' parts add up to ``G``."""
        cut = slice(int(first), int(last) + 1)
        return TrackingObjective(self.times[cut], self.quadrature[cut], self.links, self.position_weights[cut],
                                 self.orientation_weights[cut], self.target_positions[cut],
                                 None if self.target_orientations is None else self.target_orientations[cut])

    @property
    def tracks_orientation(self) -> bool:
        """Whether any orientation weight is non-zero."""
        return self.target_orientations is not None and bool(np.any(self.orientation_weights != 0.0))

    def evaluate(self, positions: ArrayLike, orientations: ArrayLike | None = None) -> TrackingValue:
        """``G`` and its partial derivatives at simulated trajectories.

        Args:
            positions: ``c`` [m] ``(n_t, k, 3)``.
            orientations: ``R`` ``(n_t, k, 3, 3)``; needed only when orientations are tracked.

        Raises:
            InputError: On shapes that do not match the targets.
        """
        c = np.asarray(positions, dtype=np.float64)
        if c.shape != self.target_positions.shape:
            raise InputError(f"positions have shape {c.shape}, expected {self.target_positions.shape}")
        qw = self.quadrature[:, None] * self.position_weights
        dc = c - self.target_positions
        value = 0.5 * float(np.einsum("nk,nki,nki->", qw, dc, dc))
        d_pos = qw[:, :, None] * dc
        d_ori = None
        if self.tracks_orientation:
            if orientations is None:
                raise InputError("orientations are tracked: pass the simulated rotation matrices")
            r = np.asarray(orientations, dtype=np.float64)
            assert self.target_orientations is not None
            if r.shape != self.target_orientations.shape:
                raise InputError(f"orientations have shape {r.shape}, expected {self.target_orientations.shape}")
            qo = self.quadrature[:, None] * self.orientation_weights
            dr = r - self.target_orientations
            value += 0.5 * float(np.einsum("nk,nkij,nkij->", qo, dr, dr))
            d_ori = qo[:, :, None, None] * dr
        return TrackingValue(value, d_pos, d_ori)


@dataclass(frozen=True)
class RegularizerValue:
    """The regularizers and their gradients.

    Attributes:
        value: ``R``.
        deviation: The deviation part of ``R``.
        acceleration: The acceleration part of ``R``.
        grad_control_points: ``∂R/∂P`` ``(n_ctrl, n_motors)``.
    """

    value: float
    deviation: float
    acceleration: float
    grad_control_points: NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class MotorRegularizer:
    """Deviation-from-input and acceleration regularizers of the motor profiles on the simulation grid.

    Attributes:
        b0: θ basis at the grid ``(n_t, n_ctrl)``.
        b2: θ̈ basis at the grid ``(n_t, n_ctrl)``.
        quadrature: Simpson weights [s] ``(n_t,)``.
        reference: Input angles θ̄ [rad] ``(n_t, n_motors)``.
        deviation_weights: ``w_dev`` on the grid [1/(rad² s)] ``(n_t,)``.
        acceleration_weights: ``w_acc`` on the grid [s³/rad²] ``(n_t,)``.
    """

    b0: sp.csr_matrix
    b2: sp.csr_matrix
    quadrature: NDArray[np.float64]
    reference: NDArray[np.float64]
    deviation_weights: NDArray[np.float64]
    acceleration_weights: NDArray[np.float64]

    @classmethod
    def build(cls, profiles: MotorProfiles, times: ArrayLike, reference: ArrayLike,
              deviation_weight: WeightSchedule | float, acceleration_weight: WeightSchedule | float
              ) -> MotorRegularizer:
        """Basis matrices, quadrature and weights on a uniform grid.

        Args:
            profiles: The spline space (its control points are not used).
            times: Uniform simulation grid [s] ``(n_t,)``.
            reference: θ̄ [rad] ``(n_t, n_motors)``: the input angles on the grid.
            deviation_weight: ``w_dev``, a number or a schedule.
            acceleration_weight: ``w_acc``, a number or a schedule.
        """
        t = np.asarray(times, dtype=np.float64)
        ref = np.asarray(reference, dtype=np.float64)
        if ref.shape != (t.size, profiles.n_motors):
            raise InputError(f"reference angles have shape {ref.shape}, expected {(t.size, profiles.n_motors)}")
        dt = float(t[1] - t[0]) if t.size > 1 else 1.0
        if t.size > 1 and not np.allclose(np.diff(t), dt, rtol=1e-9, atol=1e-12):
            raise InputError("the regularizer needs a uniform time grid")
        w_dev = WeightSchedule.parse(deviation_weight)(t)
        w_acc = WeightSchedule.parse(acceleration_weight)(t)
        return cls(profiles.basis_matrix(t, 0), profiles.basis_matrix(t, 2), simpson_weights(t.size, dt), ref,
                   w_dev, w_acc)

    def evaluate(self, control_points: ArrayLike) -> RegularizerValue:
        """``R`` and ``∂R/∂P`` at control points ``P`` [rad] ``(n_ctrl, n_motors)``."""
        p = np.asarray(control_points, dtype=np.float64)
        dev = np.asarray(self.b0 @ p) - self.reference
        acc = np.asarray(self.b2 @ p)
        qd = (self.quadrature * self.deviation_weights)[:, None]
        qa = (self.quadrature * self.acceleration_weights)[:, None]
        r_dev = 0.5 * float(np.sum(qd * dev * dev))
        r_acc = 0.5 * float(np.sum(qa * acc * acc))
        grad = np.asarray(self.b0.T @ (qd * dev)) + np.asarray(self.b2.T @ (qa * acc))
        return RegularizerValue(r_dev + r_acc, r_dev, r_acc, grad)

    def evaluate_parameters(self, x: ArrayLike, parametrization: ProfileParametrization
                            ) -> tuple[float, NDArray[np.float64]]:
        """``R`` and ``∂R/∂x`` ``(n_parameters,)`` at parameters ``x``."""
        out = self.evaluate(parametrization.control_points(x))
        return out.value, parametrization.pullback(out.grad_control_points)


def deviation_metrics(positions: ArrayLike, targets: ArrayLike) -> dict[str, float]:
    """Peak and RMS distance of tracked bodies to their targets.

    Args:
        positions: Simulated ``c`` [m] ``(n_t, k, 3)``.
        targets: ``c̄`` [m] ``(n_t, k, 3)``.

    Returns:
        ``peak_deviation_m`` (max over time and bodies of ``|c − c̄|``) and ``rms_deviation_m``
        (``sqrt`` of the mean over samples and bodies of ``|c − c̄|²``) [m].
    """
    c = np.asarray(positions, dtype=np.float64)
    c_bar = np.asarray(targets, dtype=np.float64)
    if c.shape != c_bar.shape or c.ndim != 3 or c.shape[-1] != 3:
        raise InputError(f"positions {c.shape} and targets {c_bar.shape} must both be (n_t, k, 3)")
    dist = np.linalg.norm(c - c_bar, axis=-1)
    return {"peak_deviation_m": float(dist.max()), "rms_deviation_m": float(np.sqrt(np.mean(dist ** 2)))}
