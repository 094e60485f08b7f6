"""Shared fixtures for the reduced-simulation tests: a small steel rod body (513 DOF) and random states."""
from __future__ import annotations

import pytest

from retarget.fem import ElasticBody, get_material, rod_mesh


@pytest.fixture(scope="session")
def small_rod() -> ElasticBody:
    """A 0.3 m x 5 mm spring-steel rod, 4 layers x 6 around (513 DOF), along +z from the origin."""
    return ElasticBody(rod_mesh(0.3, 0.005, 4, 6), get_material("spring_steel"), backend="numba")

