"""A small cantilever against Euler–Bernoulli (f₁, static sag) and BDF2's numerical damping (α = β = 0)."""
import math

import pytest

from retarget.sim.scenarios import CantileverSpec
from retarget.sim.validation import fit_frequency, run_cantilever


@pytest.fixture(scope="module")
def cantilever():
    # Coarse but converged enough for 2 %: 2 diameters per element layer (static −1.1 %, f₁ +0.6 %), dt = 0.5 ms (≈ 160 steps per period).
    spec = CantileverSpec(0.3, 0.005, 0.1, n_axial=30, n_around=8, gravity=9.81)
    return run_cantilever(spec, dt=5e-4, periods=2.2)


def test_cantilever_first_frequency_matches_beam_theory(cantilever):
    assert abs(cantilever["f1_relative_error"]) < 0.02
    assert cantilever["max_constraint_violation"] < 1e-9


def test_cantilever_static_sag_matches_beam_theory(cantilever):
    assert abs(cantilever["static_relative_error"]) < 0.02


def test_bdf2_numerical_damping_is_small(cantilever):
    """α = β = 0: the fitted amplitude decay over 10 periods at dt = 0.5 ms stays below 1 %."""
    per_period = cantilever["amplitude_decay_per_period"]
    assert 1 - (1 - per_period) ** 10 < 0.01


def test_fit_frequency_recovers_a_damped_sinusoid():
    import numpy as np

    t = np.linspace(0, 1, 2001)
    x = 0.3 + np.exp(-0.2 * t) * (1e-3 * np.cos(2 * math.pi * 7.3 * t) + 2e-4 * np.sin(2 * math.pi * 7.3 * t))
    fit = fit_frequency(t, x)
    assert fit["f_hz"] == pytest.approx(7.3, rel=1e-9)
    assert fit["decay_per_s"] == pytest.approx(0.2, rel=1e-6)
