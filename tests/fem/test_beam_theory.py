"""Euler–Bernoulli reference values (retarget.fem.beam_theory): the cantilever, and the beam on a servo's spring
(Hermite elements against the exact frequency equation)."""
import math

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fem.beam_theory import (
    ServoBeam,
    cantilever_beta,
    cantilever_first_frequency,
    cantilever_static_tip_deflection,
    round_section,
    servo_beam_modes,
    servo_beam_roots,
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


def _xm430_rod(**changes):
    """The 70 cm × 5 mm steel rod with a 100 g tip on an XM430-W210's spring (kp 13.8 N m/rad, 2.3e-3 kg m²)."""
    area, inertia = round_section(0.005)
    values = {"hub_stiffness": 13.81, "hub_inertia": 2.31e-3, "tip_mass": 0.1, "tip_inertia": 8e-6, **changes}
    return ServoBeam(0.7, 200e9, inertia, 7850.0, area, **values)


@pytest.mark.parametrize("changes", [{}, {"tip_mass": 0.0, "tip_inertia": 0.0}, {"hub_stiffness": 400.0},
                                     {"hub_inertia": 0.05}])
def test_hermite_beam_on_a_servo_matches_the_frequency_equation(changes):
    beam = _xm430_rod(**changes)
    exact = servo_beam_roots(beam, n_modes=3)
    hermite = servo_beam_modes(beam, n_modes=3)
    assert len(exact) == 3
    np.testing.assert_allclose(hermite.frequencies, exact, rtol=1e-7)
    assert np.all((hermite.shares > 0) & (hermite.shares < 1))


def test_a_stiff_hub_is_the_clamped_cantilever_with_a_tip_mass():
    rigid = _xm430_rod(hub_stiffness=1e12, hub_inertia=0.0, tip_inertia=0.0)
    expected = cantilever_first_frequency(0.7, 0.005, 200e9, 7850.0, tip_mass=0.1)
    assert servo_beam_roots(rigid, n_modes=1)[0] == pytest.approx(expected, rel=1e-9)
    clamped = servo_beam_modes(_xm430_rod(hub_stiffness=math.inf, tip_inertia=0.0), n_modes=1)
    assert clamped.frequencies[0] == pytest.approx(expected, rel=1e-7) and clamped.shares[0] == 0.0


def test_the_rod_swings_on_the_servo_spring_below_its_clamped_bending():
    modes = servo_beam_modes(_xm430_rod())
    clamped = servo_beam_modes(_xm430_rod(hub_stiffness=math.inf))
    # The first mode is the rod swinging on the servo's spring (most of its strain energy there), far below the
    # clamped rod's first bending; the second is the bending mode with the hub turning against it.
    assert modes.shares[0] > 0.6 and modes.frequencies[0] < 0.6 * clamped.frequencies[0]
    # A rigid pendulum on the spring bounds it from above: k / (J₀ + m L² + ρA L³/3).
    area, _ = round_section(0.005)
    rigid = 13.81 / (2.31e-3 + 0.1 * 0.7**2 + 7850.0 * area * 0.7**3 / 3.0)
    assert modes.frequencies[0] < math.sqrt(rigid) / (2 * math.pi)


def test_gravity_softens_a_standing_rod_and_stiffens_a_hanging_one():
    base = servo_beam_modes(_xm430_rod(hub_offset=0.027, tip_offset=0.008)).frequencies
    standing = servo_beam_modes(_xm430_rod(hub_offset=0.027, tip_offset=0.008, axial_gravity=9.81)).frequencies
    hanging = servo_beam_modes(_xm430_rod(hub_offset=0.027, tip_offset=0.008, axial_gravity=-9.81)).frequencies
    assert np.all(standing < base) and np.all(hanging > base)
    # The swinging mode: mostly the pendulum's m g (L + e) against kp.
    assert 0.9 < (base[0] ** 2 - standing[0] ** 2) / (hanging[0] ** 2 - base[0] ** 2) < 1.1


def test_servo_beam_inputs_are_checked():
    with pytest.raises(InputError, match="hub_stiffness"):
        _xm430_rod(hub_stiffness=0.0)
    with pytest.raises(InputError, match="frequency equation"):
        servo_beam_roots(_xm430_rod(axial_gravity=9.81))
