"""Tests of retarget.fem.cantilever: the FEM rod against Euler-Bernoulli beam theory (statics and modes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from retarget.fem.cantilever import (
    clamped_dofs,
    euler_bernoulli_frequencies,
    euler_bernoulli_tip_deflection,
    natural_frequencies,
    solve_static,
    tip_load_deflection,
)
from retarget.fem.elastic import ElasticBody
from retarget.fem.material import MATERIALS
from retarget.fem.mesh import rod_mesh

STEEL = MATERIALS["spring_steel"]


def _section(diameter: float) -> tuple[float, float]:
    return math.pi * diameter**4 / 64.0, math.pi * diameter**2 / 4.0


def test_static_tip_deflection_matches_euler_bernoulli() -> None:
    length, diameter = 0.2, 0.005
    body = ElasticBody(rod_mesh(length, diameter), STEEL)
    second_moment, _ = _section(diameter)
    force = 0.05  # [N]: tip deflection ~ 2e-5 m, deep in the linear range
    deflection, sol = tip_load_deflection(body, length, np.array([force, 0.0, 0.0]))
    expected = euler_bernoulli_tip_deflection(force, length, STEEL.youngs_modulus, second_moment)
    assert deflection == pytest.approx(expected, rel=0.02)
    # Newton converges (the first step's residual is dominated by solver round-off and geometric stiffening).
    assert sol.residual_norms[-1] < 1e-8 * force
    assert len(sol.residual_norms) <= 6
    # Symmetry: the y load gives the same deflection on this 8-fold symmetric section within 0.5 %.
    deflection_y, _ = tip_load_deflection(body, length, np.array([0.0, force, 0.0]))
    assert deflection_y == pytest.approx(deflection, rel=5e-3)


def test_first_frequency_of_the_default_paper_rod_matches_euler_bernoulli() -> None:
    # The paper's rod: 70 cm, 5 mm spring steel, default mesh (8 around, one layer per diameter).
    length, diameter = 0.7, 0.005
    body = ElasticBody(rod_mesh(length, diameter), STEEL)
    second_moment, area = _section(diameter)
    freqs = natural_frequencies(body, clamped_dofs(body), n_modes=4)
    expected = euler_bernoulli_frequencies(
        length, STEEL.youngs_modulus, second_moment, STEEL.density, area, 2
    )
    # Two degenerate bending pairs (x and y) on the symmetric section.
    assert freqs[0] == pytest.approx(expected[0], rel=0.01)
    assert freqs[1] == pytest.approx(freqs[0], rel=1e-3)
    assert freqs[2] == pytest.approx(expected[1], rel=0.01)
    assert freqs[0] == pytest.approx(
        1.875104**2
        / (2 * math.pi * length**2)
        * math.sqrt(STEEL.youngs_modulus * second_moment / (STEEL.density * area)),
        rel=0.005,
    )


def test_static_solve_reports_non_convergence() -> None:
    from retarget.fem.cantilever import NewtonNotConvergedError

    body = ElasticBody(rod_mesh(0.05, 0.005, n_axial=4), STEEL)
    f_ext = np.zeros(body.n_dofs)
    f_ext.reshape(-1, 3)[body.mesh.nodes_on_plane(2, 0.05), 0] = 50.0
    with pytest.raises(NewtonNotConvergedError) as info:
        solve_static(body, clamped_dofs(body), f_ext, max_iterations=1)
    assert len(info.value.residual_norms) == 2
