"""Tests of retarget.fem.quadrature: exactness on monomials."""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np
import pytest

from retarget.fem.quadrature import tet_rule, triangle_rule


@pytest.mark.parametrize("degree", [0, 1, 2, 3, 4, 5])
def test_tet_rule_integrates_monomials_exactly(degree: int) -> None:
    rule = tet_rule(degree)
    assert rule.degree >= degree
    assert np.all(rule.weights > 0)
    for a, b, c in itertools.product(range(degree + 1), repeat=3):
        if a + b + c > degree:
            continue
        # ∫_T ξ^a η^b ζ^c = a! b! c! / (a + b + c + 3)!
        exact = factorial(a) * factorial(b) * factorial(c) / factorial(a + b + c + 3)
        p = rule.points
        num = float((rule.weights * p[:, 0] ** a * p[:, 1] ** b * p[:, 2] ** c).sum())
        assert num == pytest.approx(exact, rel=1e-13), (a, b, c)


def test_degree_2_rule_is_not_degree_3() -> None:
    rule = tet_rule(2)
    assert rule.n_points == 4
    num = float((rule.weights * rule.points[:, 0] ** 3).sum())
    assert abs(num - 6 / factorial(6)) > 1e-6


@pytest.mark.parametrize("degree", [0, 1, 2, 3, 4])
def test_triangle_rule_integrates_monomials_exactly(degree: int) -> None:
    rule = triangle_rule(degree)
    for a, b in itertools.product(range(degree + 1), repeat=2):
        if a + b > degree:
            continue
        exact = factorial(a) * factorial(b) / factorial(a + b + 2)
        num = float((rule.weights * rule.points[:, 0] ** a * rule.points[:, 1] ** b).sum())
        assert num == pytest.approx(exact, rel=1e-12), (a, b)


def test_unsupported_degrees_raise() -> None:
    with pytest.raises(ValueError):
        tet_rule(6)
    with pytest.raises(ValueError):
        triangle_rule(5)
