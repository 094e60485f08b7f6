"""Quadrature rules on the reference tetrahedron and triangle.

Reference tetrahedron: corners (0,0,0), (1,0,0), (0,1,0), (0,0,1), volume 1/6; points are given in reference
coordinates ξ = (ξ1, ξ2, ξ3) (= barycentric L1, L2, L3; L0 = 1 − ξ1 − ξ2 − ξ3) and weights sum to the
reference volume. Reference triangle: corners (0,0), (1,0), (0,1), area 1/2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["QuadratureRule", "tet_rule", "triangle_rule"]


@dataclass(frozen=True)
class QuadratureRule:
    """Points and weights of a rule exact for polynomials up to ``degree``.

    Attributes:
        points: Reference coordinates, ``(q, dim)``.
        weights: Weights summing to the reference measure (1/6 for the tet, 1/2 for the triangle), ``(q,)``.
        degree: Highest total polynomial degree integrated exactly.
    """

    points: NDArray[np.float64]
    weights: NDArray[np.float64]
    degree: int

    @property
    def n_points(self) -> int:
        return int(self.weights.shape[0])


def _tet_orbit_4(a: float) -> NDArray[np.float64]:
    """The 4 permutations of barycentric (a, a, a, 1 − 3a), as reference coordinates (L1, L2, L3)."""
    b = 1.0 - 3.0 * a
    bary = np.array([[b, a, a, a], [a, b, a, a], [a, a, b, a], [a, a, a, b]])
    return bary[:, 1:]


def _tet_orbit_6(a: float) -> NDArray[np.float64]:
    """The 6 permutations of barycentric (a, a, 1/2 − a, 1/2 − a)."""
    b = 0.5 - a
    bary = np.array([[a, a, b, b], [a, b, a, b], [a, b, b, a], [b, a, a, b], [b, a, b, a], [b, b, a, a]])
    return bary[:, 1:]


def _tet_rule_1() -> QuadratureRule:
    return QuadratureRule(np.full((1, 3), 0.25), np.array([1.0 / 6.0]), 1)


def _tet_rule_4() -> QuadratureRule:
    # Degree-2 rule with points on the medians at barycentric (a, a, a, 1 − 3a), a = (5 − √5)/20.
    a = (5.0 - np.sqrt(5.0)) / 20.0
    return QuadratureRule(_tet_orbit_4(a), np.full(4, 1.0 / 24.0), 2)


def _tet_rule_14() -> QuadratureRule:
    # Degree-5 rule with positive weights (14 points in orbits 4 + 4 + 6), the usual choice for degree-4
    # integrands such as the consistent mass of the quadratic tet.
    a1, w1 = 0.0927352503108912264, 0.01224884051939365827
    a2, w2 = 0.3108859192633006097, 0.01878132095300264180
    a3, w3 = 0.0455037041256496494, 0.007091003462846911495
    pts = np.vstack([_tet_orbit_4(a1), _tet_orbit_4(a2), _tet_orbit_6(a3)])
    wts = np.concatenate([np.full(4, w1), np.full(4, w2), np.full(6, w3)])
    return QuadratureRule(pts, wts, 5)


def tet_rule(degree: int) -> QuadratureRule:
    """The cheapest built-in tetrahedron rule exact for polynomials of total degree ``degree``.

    Args:
        degree: Required exactness, 0 to 5 (1, 4 or 14 points).

    Raises:
        ValueError: ``degree`` outside 0..5.
    """
    if degree < 0 or degree > 5:
        raise ValueError(f"no built-in tetrahedron rule of degree {degree} (0..5)")
    if degree <= 1:
        return _tet_rule_1()
    if degree == 2:
        return _tet_rule_4()
    return _tet_rule_14()


def triangle_rule(degree: int) -> QuadratureRule:
    """A triangle rule exact for polynomials of total degree ``degree`` (0..4: 1, 3 or 6 points).

    Raises:
        ValueError: ``degree`` outside 0..4.
    """
    if degree < 0 or degree > 4:
        raise ValueError(f"no built-in triangle rule of degree {degree} (0..4)")
    if degree <= 1:
        return QuadratureRule(np.array([[1.0 / 3.0, 1.0 / 3.0]]), np.array([0.5]), 1)
    if degree == 2:
        pts = np.array([[1.0 / 6.0, 1.0 / 6.0], [2.0 / 3.0, 1.0 / 6.0], [1.0 / 6.0, 2.0 / 3.0]])
        return QuadratureRule(pts, np.full(3, 1.0 / 6.0), 2)
    # Strang-Fix / Dunavant degree-4 rule, 6 points in two orbits of (a, a, 1 − 2a).
    a1, w1 = 0.445948490915965, 0.223381589678011
    a2, w2 = 0.091576213509771, 0.109951743655322
    pts = []
    for a in (a1, a2):
        b = 1.0 - 2.0 * a
        pts += [[a, a], [b, a], [a, b]]
    wts = np.array([w1] * 3 + [w2] * 3) * 0.5
    return QuadratureRule(np.array(pts), wts, 4)
