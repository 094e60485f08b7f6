"""Euler–Bernoulli reference values (retarget.fem.beam_theory)."""
import math

import pytest

from retarget.fem.beam_theory import (
    cantilever_beta,
    cantilever_first_frequency,
    cantilever_static_tip_deflection,
    round_section,
)


def test_clamped_free_root_without_tip_mass():
    assert cantilever_beta(0.0) == pytest.approx(1.8751040687, abs=1e-9)


def test_known_root_with_equal_tip_mass():
    # Tabulated first root for M_tip = ρAL: β₁L = 1.2479.
    assert cantilever_beta(1.0) == pytest.approx(1.24792, abs=1e-5)


def test_heavy_tip_tends_to_the_massless_spring_limit():
    # μ → ∞: f → (1/2π) sqrt(3EI / (M L³)); β⁴ → 3/μ.
    mu = 1e4
    assert cantilever_beta(mu) ** 4 == pytest.approx(3.0 / mu, rel=1e-3)


def test_frequency_and_deflection_formulas():
    area, inertia = round_section(0.004)
    ei, rho_a = 200e9 * inertia, 7850 * area
    f = cantilever_first_frequency(0.5, 0.004, 200e9, 7850)
    assert f == pytest.approx(1.8751040687**2 / (2 * math.pi * 0.25) * math.sqrt(ei / rho_a), rel=1e-10)
    d = cantilever_static_tip_deflection(0.5, 0.004, 200e9, 7850, 0.1, 9.81)
    assert d == pytest.approx(rho_a * 9.81 * 0.5**4 / (8 * ei) + 0.981 * 0.5**3 / (3 * ei), rel=1e-12)
