"""The simulator as a stepper of converged states: the :class:`Engine` protocol and its sensitivity types.

Both engines — the full absolute one (:mod:`retarget.sim`) and the reduced one (:mod:`retarget.sim.reduced`) —
integrate a BDF2 index-2 DAE ``R_n(S_n, S_{n−1}, S_{n−2}, θ_n, θ̇_n) = 0`` over the state ``S = [U, V, λ]``
(n_S,). What a user of the time loop (the discrete adjoint of :mod:`retarget.optimize.adjoint`, the planner)
needs from either:

- a forward step that stores converged states ``S_n`` (:meth:`Engine.step`), from a quasi-static start
  (:meth:`Engine.solve_static`);
- at a converged step, the exact Jacobian blocks (:class:`StepSensitivity`): a solve with ``(∂R_n/∂S_n)ᵀ``,
  products with ``(∂R_n/∂S_{n−k})ᵀ`` (k = 1, 2), and ``∂R_n/∂θ``, ``∂R_n/∂θ̇`` (θ̈ does not enter the DAE);
- where the tracked rigid bodies sit in ``S`` (both engines store rigid body ``i`` as ``U[7i:7i+7] = [c, q]``)
  and where the motor torques sit in ``λ`` (:func:`motor_rows`, :class:`SystemEngine`).

Implementations: :class:`retarget.sim.reduced.CompiledReducedEngine` (numba), and the adapters of
:mod:`retarget.sim.adapters` around the dense reference reduced stepper and the full absolute engine.
Time starts at 0 at the quasi-static initial state.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import NDArray

from retarget.sim.errors import SimulationError

if TYPE_CHECKING:
    from retarget.model.servo import ServoParams
    from retarget.sim.motors import MotorTrajectory
    from retarget.sim.reduced.system import ReducedSystem
    from retarget.sim.servo import ServoLayout
    from retarget.sim.system import System

__all__ = ["Engine", "EngineState", "StepSensitivity", "SystemEngine", "motor_rows", "warm_u"]


@dataclass(frozen=True, eq=False)
class EngineState:
    """A converged state: time ``t`` [s] and ``S = [U, V, λ]`` (n_S,); ``native`` is the engine's own state object."""

    t: float
    s: NDArray[np.float64]
    native: object = field(repr=False)


@dataclass(frozen=True, eq=False)
class StepSensitivity:
    """Exact derivatives of one BDF residual ``R_n(S_n, S_{n−1}, S_{n−2}, θ_n, θ̇_n)`` at its converged state.

    Attributes:
        solve_transposed: ``rhs ↦ (∂R_n/∂S_n)⁻ᵀ rhs`` (n_S,) → (n_S,).
        history_transposed: ``(k, μ) ↦ (∂R_n/∂S_{n−k})ᵀ μ`` for k = 1, 2 (zero for a state not in the history).
        r_theta: ``∂R_n/∂θ`` (n_S, n_motors).
        r_theta_dot: ``∂R_n/∂θ̇`` (n_S, n_motors).
        solve: ``rhs ↦ (∂R_n/∂S_n)⁻¹ rhs`` for (n_S,) or (n_S, p) (the tangent-linear pass of Gauss–Newton).
        history: ``(k, δ) ↦ (∂R_n/∂S_{n−k}) δ`` for (n_S,) or (n_S, p).
    """

    solve_transposed: Callable[[NDArray[np.float64]], NDArray[np.float64]]
    history_transposed: Callable[[int, NDArray[np.float64]], NDArray[np.float64]]
    r_theta: NDArray[np.float64]
    r_theta_dot: NDArray[np.float64]
    solve: Callable[[NDArray[np.float64]], NDArray[np.float64]] | None = None
    history: Callable[[int, NDArray[np.float64]], NDArray[np.float64]] | None = None


def warm_u(warm: EngineState, n_u: int) -> NDArray[np.float64]:
    """The ``U`` of a warm start for a model with ``n_u`` coordinates: the state's own, or — a state of the same
    model with servo coordinates (more of them, after all others) — its first ``n_u`` (the shafts dropped)."""
    u = np.asarray(warm.native.u, dtype=float)
    return u if len(u) == n_u else u[:n_u].copy()


class Engine(Protocol):
    """What the adjoint and the planner need from a simulator (see the module docstring)."""

    @property
    def n_state(self) -> int:
        """Length of ``S``."""
        ...

    @property
    def motor_names(self) -> tuple[str, ...]:
        """Motors in command order."""
        ...

    def rigid_index(self, link: str) -> int:
        """Index ``i`` of the rigid body of link ``link`` (``U[7i:7i+7] = [c, q]``)."""
        ...

    def frame_rotation(self, index: int) -> NDArray[np.float64]:
        """Link frame orientation of rigid body ``index`` at the reference (3, 3)."""
        ...

    def solve_static(self, theta: NDArray[np.float64], warm: EngineState | None = None) -> EngineState:
        """Gravity equilibrium at motor values ``theta`` (n_motors,), ``V = 0``, time 0."""
        ...

    def reference_state(self) -> EngineState:
        """The reference configuration at rest (``V = 0``, ``λ = 0``), time 0."""
        ...

    def step(self, prev: EngineState, prev2: EngineState | None, dt: float, motors: MotorTrajectory, index: int,
             cache: dict) -> EngineState:
        """One BDF step (BDF1 without ``prev2``) converged to the engine's tolerance."""
        ...

    def sensitivity(self, new: EngineState, prev: EngineState, prev2: EngineState | None, dt: float,
                    motors: MotorTrajectory) -> StepSensitivity:
        """The exact Jacobian blocks of the step that produced ``new``."""
        ...

    def motor_torques(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        """Motor constraint multipliers (torque [N m] for hinges, force [N] for sliders) (n_motors,) from ``S``."""
        ...

    @property
    def motor_torque_index(self) -> NDArray[np.int64]:
        """Where the motor torques sit in ``S``: ``motor_torques(s) = s[motor_torque_index]`` (n_motors,)."""
        ...


def motor_rows(constraints: tuple, lambda_offsets: tuple[int, ...], n_motors: int) -> NDArray[np.int64]:
    """Index in ``λ`` of each motor's row (the last row of its motorized joint block) (n_motors,).

    Raises:
        SimulationError: a motor drives no joint block.
    """
    rows = np.full(n_motors, -1, dtype=np.int64)
    for b, blk in enumerate(constraints):
        if getattr(blk, "motor", -1) >= 0:
            rows[blk.motor] = lambda_offsets[b + 1] - 1
    if np.any(rows < 0):
        raise SimulationError(f"motors without a constraint row: {np.flatnonzero(rows < 0).tolist()}")
    return rows


class SystemEngine:
    """What every engine reads off its simulated system (absolute or reduced; both share the state layout and
    constraint bookkeeping): state size, motor names, where tracked rigid bodies sit, the motor rows of λ.

    Args:
        system: a :class:`retarget.sim.System` or :class:`retarget.sim.reduced.ReducedSystem`.
    """

    def __init__(self, system: System | ReducedSystem) -> None:
        self.system = system
        self._motor_rows = motor_rows(system.constraints, system.lambda_offsets, len(system.motors))

    @property
    def n_state(self) -> int:
        return self.system.n_u + self.system.n_v + self.system.n_lambda

    @property
    def motor_names(self) -> tuple[str, ...]:
        return tuple(self.system.motors)

    def rigid_index(self, link: str) -> int:
        """Index of the rigid body of ``link``.

        Raises:
            SimulationError: ``link`` is not a rigid body of the system (the message lists the rigid bodies).
        """
        try:
            return self.system.rigid_index(link)
        except KeyError as exc:
            raise SimulationError(f"tracked link {link!r} is not a rigid body of the model; rigid bodies: "
                                  f"{[b.name for b in self.system.rigid]}") from exc

    def frame_rotation(self, index: int) -> NDArray[np.float64]:
        return np.asarray(self.system.rigid[index].frame_rotation, dtype=float)

    @property
    def motor_torque_index(self) -> NDArray[np.int64]:
        return self.system.n_u + self.system.n_v + self._motor_rows

    @property
    def servos(self) -> ServoLayout:
        """Where the modelled servos' coordinates sit (:class:`retarget.sim.servo.ServoLayout`)."""
        return self.system.servo

    @property
    def shaft_angle_index(self) -> NDArray[np.int64]:
        """Per motor the index in ``S`` of its shaft angle, -1 for an ideal motor (n_motors,)."""
        lay = self.system.servo
        return np.array([lay.u_theta[k] if k >= 0 else -1 for k in lay.motor_servo], dtype=np.int64)

    @property
    def shaft_speed_index(self) -> NDArray[np.int64]:
        """Per motor the index in ``S`` of its shaft speed, -1 for an ideal motor (n_motors,)."""
        lay = self.system.servo
        return np.array([self.system.n_u + lay.v_omega[k] if k >= 0 else -1 for k in lay.motor_servo],
                        dtype=np.int64)

    def shaft_angles(self, s: NDArray[np.float64], goal: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per motor the shaft angle [rad] at state ``s`` (n_S,) (an ideal motor's: its ``goal``)."""
        idx = self.shaft_angle_index
        return np.where(idx >= 0, np.asarray(s)[np.maximum(idx, 0)], np.asarray(goal, dtype=float))

    def with_servos(self, servos: Sequence[ServoParams]) -> SystemEngine:
        """The same engine on the same model driven by other servos (one per motor); the state layout changes
        only in the servo coordinates after every other (:mod:`retarget.sim.servo`)."""
        from retarget.sim.reduced.system import ReducedSystem
        from retarget.sim.reduced.system import with_servos as reduced_with_servos
        from retarget.sim.system import with_servos as full_with_servos

        swap = reduced_with_servos if isinstance(self.system, ReducedSystem) else full_with_servos
        return self._on(swap(self.system, list(servos)))

    def ideal_servos(self) -> SystemEngine:
        """This engine with every motor a perfect position source (itself when it already is)."""
        from retarget.model.servo import IDEAL, SERVO_MODELS

        if self.system.servo.ideal:
            return self
        return self.with_servos([SERVO_MODELS[IDEAL]] * len(self.system.motors))

    def _on(self, system: System | ReducedSystem) -> SystemEngine:
        """An engine of this kind and settings on ``system``."""
        raise NotImplementedError(f"{type(self).__name__} cannot be rebuilt on another system")

    def motor_torques(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(s[self.motor_torque_index])
