"""Simpson quadrature: exact for cubics for every sample count ≥ 3, fourth-order on smooth integrands."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.optimize.quadrature import integrate, simpson_weights, uniform_grid


@pytest.mark.parametrize("n", range(3, 12))
def test_exact_for_cubics(n: int) -> None:
    rng = np.random.default_rng(n)
    coeffs = rng.normal(size=4)
    t0, t1 = 0.3, 1.7
    t = np.linspace(t0, t1, n)
    q = simpson_weights(n, (t1 - t0) / (n - 1))
    poly = np.polynomial.Polynomial(coeffs)
    exact = poly.integ()(t1) - poly.integ()(t0)
    assert q @ poly(t) == pytest.approx(exact, rel=1e-13, abs=1e-13)
    assert q.sum() == pytest.approx(t1 - t0, rel=1e-14)
    assert np.all(q > 0)


def test_small_counts() -> None:
    assert simpson_weights(1, 0.1).tolist() == [0.0]
    np.testing.assert_allclose(simpson_weights(2, 0.1), [0.05, 0.05])
    np.testing.assert_allclose(simpson_weights(4, 1.0), [3 / 8, 9 / 8, 9 / 8, 3 / 8])
    np.testing.assert_allclose(simpson_weights(5, 3.0), [1, 4, 2, 4, 1])
    with pytest.raises(InputError):
        simpson_weights(0, 0.1)
    with pytest.raises(InputError):
        simpson_weights(3, 0.0)


@pytest.mark.parametrize("parity", [0, 1])
def test_fourth_order_convergence(parity: int) -> None:
    errors = []
    for n in (40 + parity, 80 + parity):
        t = np.linspace(0.0, 2.0, n + 1)
        errors.append(abs(integrate(np.exp(np.sin(3 * t)), 2.0 / n) - _reference()))
    assert errors[0] / errors[1] > 12.0  # 16 in the limit


def _reference() -> float:
    t = np.linspace(0.0, 2.0, 20001)
    return float(integrate(np.exp(np.sin(3 * t)), 2.0 / 20000))


def test_integrate_over_axis_zero() -> None:
    t = np.linspace(0, 1, 11)
    out = integrate(np.stack([t ** 2, 3 * t], axis=1), 0.1)
    np.testing.assert_allclose(out, [1 / 3, 1.5], rtol=1e-13)


def test_uniform_grid_covers() -> None:
    g = uniform_grid(0.0, 1.0, 0.1)
    assert g.size == 11 and g[-1] == pytest.approx(1.0)
    g = uniform_grid(0.0, 1.05, 0.1)
    assert g.size == 12 and g[-1] >= 1.05
