"""How past states enter a BDF step: the coefficients, the step's inputs as one record, the history products.

Both engines (absolute, :mod:`retarget.sim.dae`; reduced, :mod:`retarget.sim.reduced.stepper` and its compiled
kernel) solve ``R(S_n; Ū, V̄, h, θ, θ̇, a) = 0`` with the same BDF1/BDF2 coefficients ``(a1, a2, γ)``::

    Ū = a1 U_{n−1} + a2 U_{n−2},   V̄ = a1 V_{n−1} + a2 V_{n−2},   h = γ Δt

(BDF1: ``(1, 0, 1)``, the first step; BDF2: ``(4/3, −1/3, 2/3)``). :class:`StepInputs` holds everything a residual
takes besides ``S_n``; :func:`step_inputs` forms it from the last one or two states. The residual depends on
``S_{n−k}`` only through ``Ū, V̄``: ``∂R/∂S_{n−k}`` is ``−a_k`` on the U rows and ``−a_k M/h`` on the V rows
(:func:`history_jacobian_product`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = ["BDF1", "BDF2", "PastState", "StepInputs", "history_jacobian_product", "step_inputs"]

#: (a1, a2, γ) of the first step: Ū = U_{n−1}, h = Δt.
BDF1: tuple[float, float, float] = (1.0, 0.0, 1.0)
#: (a1, a2, γ) of every later step: Ū = 4/3 U_{n−1} − 1/3 U_{n−2}, h = 2/3 Δt.
BDF2: tuple[float, float, float] = (4.0 / 3.0, -1.0 / 3.0, 2.0 / 3.0)


class PastState(Protocol):
    """A converged state as the history sees it: ``U`` (nU,) and ``V`` (nV,)."""

    @property
    def u(self) -> NDArray[np.float64]: ...

    @property
    def v(self) -> NDArray[np.float64]: ...


@dataclass(frozen=True, eq=False)
class StepInputs:
    """What a BDF residual takes besides ``S_n`` (module docstring).

    Attributes:
        u_bar: ``Ū`` (nU,) [m], [-] (quaternions).
        v_bar: ``V̄`` (nV,) [m/s], [rad/s].
        h: ``γ Δt`` [s].
        theta: motor inputs at ``t_n`` (n_motors,) [rad] or [m] (a modelled servo's goal).
        theta_dot: their rates (n_motors,) [rad/s] or [m/s].
        baumgarte: ``a`` [1/s] in ``Ċ + a C = 0``.
    """

    u_bar: NDArray[np.float64]
    v_bar: NDArray[np.float64]
    h: float
    theta: NDArray[np.float64]
    theta_dot: NDArray[np.float64]
    baumgarte: float

    @classmethod
    def static(cls, u_bar: NDArray[np.float64], n_v: int, theta: NDArray[np.float64]) -> StepInputs:
        """The inputs under which the residual at ``V = 0`` states the static problem: ``Ū = u_bar``, ``V̄ = 0``,
        ``h = 1``, ``θ̇ = 0``, ``a = 1``. Its V rows are then the static balance and its λ rows ``C(U, θ)``; the
        static solves pass the iterate's ``U`` as ``u_bar`` (``R_U = 0``)."""
        return cls(u_bar, np.zeros(n_v), 1.0, theta, np.zeros_like(theta), 1.0)


def step_inputs(prev: PastState, prev2: PastState | None, dt: float, theta: NDArray[np.float64],
                theta_dot: NDArray[np.float64], baumgarte: float | None = None) -> StepInputs:
    """The inputs of the step after ``prev``: BDF1 without ``prev2``, else BDF2 (constant ``dt`` [s]).

    Args:
        prev, prev2: the last two converged states (``prev2`` None on the first step).
        dt: step [s]. theta, theta_dot: motor inputs and rates at the new time (n_motors,).
        baumgarte: ``a`` [1/s]; None: ``1 / h`` (critically damps the constraint drift per step).
    """
    a1, a2, gamma = BDF1 if prev2 is None else BDF2
    u_bar = a1 * prev.u
    v_bar = a1 * prev.v
    if prev2 is not None:
        u_bar = u_bar + a2 * prev2.u
        v_bar = v_bar + a2 * prev2.v
    h = gamma * dt
    return StepInputs(u_bar, v_bar, h, theta, theta_dot, 1.0 / h if baumgarte is None else baumgarte)


def history_jacobian_product(n_u: int, n_v: int, coefficient: float, h: float, mass: NDArray[np.float64],
                             delta: NDArray[np.float64], transposed: bool) -> NDArray[np.float64]:
    """``(∂R_n/∂S_{n−k}) δ`` (or with ``transposed`` its transpose times δ) for a history state of weight
    ``coefficient`` (``a_k``): ``R_U`` holds ``−a_k U_{n−k}``, ``R_V`` holds ``−mass a_k V_{n−k} / h``.

    Args:
        n_u, n_v: lengths of ``U`` and ``V``. h: ``γ Δt`` [s]. mass: generalized mass at ``S_n`` (nV, nV).
        delta: (n_S,) or (n_S, p).
    """
    out = np.zeros_like(delta)
    if coefficient != 0.0:
        out[:n_u] = -coefficient * delta[:n_u]
        out[n_u : n_u + n_v] = -coefficient / h * ((mass.T if transposed else mass) @ delta[n_u : n_u + n_v])
    return out
