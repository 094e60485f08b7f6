"""Quasi-static targets (retarget.optimize.targets) on the reduced rod on a motor: holds reuse a solve, and
solving every few steps with cubic interpolation in between stays close to solving every step."""
from __future__ import annotations

import numpy as np

from retarget.optimize.adjoint import TrackedPoses
from retarget.optimize.engines import reduced_engine
from retarget.optimize.targets import quasi_static_targets


def _setup(rod_systems):
    _, rs = rod_systems
    engine = reduced_engine(rs, 1e-10)
    times = np.arange(61) * 0.005
    # Smooth swing then a hold: the interpolated part must follow the curve, the hold must cost one solve.
    angles = np.where(times < 0.2, 0.3 * np.sin(np.pi * times / 0.4) ** 2, 0.3)[:, None]
    return engine, TrackedPoses.build(engine, ["tip"]), times, angles


def test_holds_reuse_the_previous_solve(rod_systems):
    engine, poses, times, angles = _setup(rod_systems)
    exact = quasi_static_targets(engine, poses, times, angles)
    assert exact.solves == int(np.sum(times < 0.2)) + 1
    assert np.allclose(exact.positions[-1], exact.positions[int(np.sum(times < 0.2))])


def test_strided_targets_interpolate_the_exact_ones(rod_systems):
    engine, poses, times, angles = _setup(rod_systems)
    exact = quasi_static_targets(engine, poses, times, angles)
    strided = quasi_static_targets(engine, poses, times, angles, stride=4)
    assert strided.solves < exact.solves / 3
    keep = np.arange(0, len(times), 4)
    np.testing.assert_allclose(strided.positions[keep], exact.positions[keep], rtol=0, atol=1e-12)
    # 20 ms between solves on a 0.4 s swing of a 20 cm rod: interpolation error well below a millimetre
    # (the tip moves ~60 mm).
    error = np.abs(strided.positions - exact.positions).max()
    assert error < 2e-4, error
    assert np.ptp(exact.positions[:, 0, 0]) > 0.03
    r = strided.orientations
    np.testing.assert_allclose(r @ np.swapaxes(r, -1, -2), np.broadcast_to(np.eye(3), r.shape), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=1e-12)
    assert np.abs(strided.orientations - exact.orientations).max() < 5e-3
