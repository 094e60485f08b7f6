"""Euler–Bernoulli beam theory for clamped-free beams: the analytic reference of the FEM and simulator checks.

This module is an oracle: the FEM (:mod:`retarget.fem.cantilever`, :mod:`retarget.fem.modal`) and the simulator
(:mod:`retarget.sim.validation`) are checked against it and never call it to compute their own results.

Bending frequencies of a clamped-free beam of length ``L``, Young's modulus ``E``, second moment ``I``, density
``ρ`` and area ``A``::

    f_k = (β_k L)² / (2π L²) · sqrt(E I / (ρ A))   [Hz]

with ``β_k L`` the roots of ``1 + cos β cosh β = 0`` (:data:`BETA_L_CANTILEVER`). With a tip point mass ``M``
(no tip rotary inertia) and ``μ = M / (ρ A L)`` the first root solves::

    1 + cos β cosh β + μ β (cos β sinh β − sin β cosh β) = 0

(μ = 0 gives β = 1.8751040687). Static tip deflection under a tip load ``P`` [N] and a distributed load ``w``
[N/m]: ``δ = w L⁴ / (8 E I) + P L³ / (3 E I)``.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import brentq

from retarget.errors import InputError

__all__ = [
    "BETA_L_CANTILEVER",
    "bending_frequency",
    "cantilever_beta",
    "cantilever_first_frequency",
    "cantilever_static_tip_deflection",
    "euler_bernoulli_frequencies",
    "euler_bernoulli_tip_deflection",
    "round_section",
]

#: Roots β_k L of 1 + cos βL cosh βL = 0 (clamped-free beam), first four modes.
BETA_L_CANTILEVER: tuple[float, ...] = (1.8751040687, 4.6940911330, 7.8547574382, 10.9955407349)


def round_section(diameter: float) -> tuple[float, float]:
    """Area [m²] and second moment of area [m⁴] of a solid round section of ``diameter`` [m]."""
    return math.pi * diameter**2 / 4.0, math.pi * diameter**4 / 64.0


def bending_frequency(
    beta_l: float | NDArray[np.float64], length: float, youngs_modulus: float, second_moment: float, density: float,
    area: float,
) -> float | NDArray[np.float64]:
    """(β L)² / (2π L²) √(E I / (ρ A)) [Hz], elementwise in ``beta_l``.

    Args:
        beta_l: Root(s) β L of the frequency equation [-], scalar or ``(k,)``.
        length: [m]. youngs_modulus: [Pa]. second_moment: [m⁴]. density: [kg/m³]. area: [m²].
    """
    return beta_l**2 / (2.0 * math.pi * length**2) * math.sqrt(youngs_modulus * second_moment / (density * area))


def euler_bernoulli_tip_deflection(
    force: float, length: float, youngs_modulus: float, second_moment: float
) -> float:
    """Cantilever tip deflection under a tip load, F L³ / (3 E I) [m]."""
    return force * length**3 / (3.0 * youngs_modulus * second_moment)


def euler_bernoulli_frequencies(
    length: float, youngs_modulus: float, second_moment: float, density: float, area: float, n_modes: int = 1
) -> NDArray[np.float64]:
    """Clamped-free bending frequencies (β_k L)² / (2π L²) √(E I / (ρ A)) [Hz], ``(n_modes,)`` (at most 4)."""
    beta_l = np.array(BETA_L_CANTILEVER[:n_modes])
    return bending_frequency(beta_l, length, youngs_modulus, second_moment, density, area)


def _frequency_equation(beta: float, mass_ratio: float) -> float:
    cb, sb, chb, shb = math.cos(beta), math.sin(beta), math.cosh(beta), math.sinh(beta)
    return 1.0 + cb * chb + mass_ratio * beta * (cb * shb - sb * chb)


def cantilever_beta(mass_ratio: float) -> float:
    """The first root ``β = β₁ L`` of the cantilever-with-tip-mass frequency equation.

    Args:
        mass_ratio: ``μ = M_tip / (ρ A L)`` ≥ 0.
    """
    if not mass_ratio >= 0:
        raise InputError(f"tip mass ratio must be non-negative, got {mass_ratio}")
    grid = np.linspace(1e-6, 2.0, 2001)
    vals = np.array([_frequency_equation(b, mass_ratio) for b in grid])
    idx = np.nonzero(np.sign(vals[:-1]) != np.sign(vals[1:]))[0]
    if len(idx) == 0:
        raise InputError(f"no root of the frequency equation for mass ratio {mass_ratio}")
    k = int(idx[0])
    return float(brentq(_frequency_equation, grid[k], grid[k + 1], args=(mass_ratio,), xtol=1e-14, rtol=1e-14))


def cantilever_first_frequency(
    length: float, diameter: float, youngs_modulus: float, density: float, tip_mass: float = 0.0
) -> float:
    """First natural frequency f₁ [Hz] of a round cantilever (``diameter`` [m]) with a tip point mass [kg]."""
    area, inertia = round_section(diameter)
    beta = cantilever_beta(tip_mass / (density * area * length))
    return float(bending_frequency(beta, length, youngs_modulus, inertia, density, area))


def cantilever_static_tip_deflection(
    length: float, diameter: float, youngs_modulus: float, density: float, tip_mass: float, gravity: float
) -> float:
    """Tip deflection [m] of a horizontal round cantilever under its weight and a tip mass's weight.

    Args:
        length: [m]. diameter: [m]. youngs_modulus: [Pa]. density: [kg/m³]. tip_mass: [kg].
        gravity: [m/s²].
    """
    area, inertia = round_section(diameter)
    w = density * area * gravity
    p = tip_mass * gravity
    ei = youngs_modulus * inertia
    return w * length**4 / (8.0 * ei) + p * length**3 / (3.0 * ei)
