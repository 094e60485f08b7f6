"""Euler–Bernoulli reference values for a round clamped-free rod with a tip point mass.

First natural frequency from the exact transcendental frequency equation of a cantilever with a tip mass ``M``
(no tip rotary inertia), with ``μ = M / (ρ A L)``::

    1 + cos β cosh β + μ β (cos β sinh β − sin β cosh β) = 0,     f₁ = β² / (2π L²) · sqrt(E I / (ρ A))

(μ = 0 gives β = 1.8751040687). Static tip deflection under the rod's own weight ``w = ρ A g`` [N/m] and a tip
load ``P = M g`` [N]: ``δ = w L⁴ / (8 E I) + P L³ / (3 E I)``.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

from retarget.errors import InputError

__all__ = [
    "cantilever_beta",
    "cantilever_first_frequency",
    "cantilever_static_tip_deflection",
    "round_section",
]


def round_section(diameter: float) -> tuple[float, float]:
    """Area [m²] and second moment of area [m⁴] of a solid round section."""
    return math.pi * diameter**2 / 4.0, math.pi * diameter**4 / 64.0


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
    """First natural frequency f₁ [Hz] of a round cantilever with a tip point mass."""
    area, inertia = round_section(diameter)
    beta = cantilever_beta(tip_mass / (density * area * length))
    return beta**2 / (2.0 * math.pi * length**2) * math.sqrt(youngs_modulus * inertia / (density * area))


def cantilever_static_tip_deflection(
    length: float, diameter: float, youngs_modulus: float, density: float, tip_mass: float, gravity: float
) -> float:
    """Tip deflection [m] of a horizontal round cantilever under its weight and a tip mass's weight."""
    area, inertia = round_section(diameter)
    w = density * area * gravity
    p = tip_mass * gravity
    ei = youngs_modulus * inertia
    return w * length**4 / (8.0 * ei) + p * length**3 / (3.0 * ei)
