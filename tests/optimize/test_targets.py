"""Quasi-static targets (retarget.optimize.targets) on the reduced rod on a motor: holds reuse a solve, and
solving every few steps with cubic interpolation in between stays close to solving every step."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.optimize.adjoint import TrackedPoses
from retarget.optimize.targets import quasi_static_targets
from retarget.sim.adapters import reduced_engine


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


def test_targets_solved_from_a_playback_are_the_same_equilibria_where_there_is_one(rod_systems):
    """The rod has one equilibrium per angle: started from a simulated playback's states (far from rest while it
    swings), the solves land on the targets continued from sample to sample."""
    from retarget.motion.motion import Motion
    from retarget.optimize.adjoint import rollout
    from retarget.optimize.bspline import fit_profiles

    engine, poses, times, angles = _setup(rod_systems)
    profiles = fit_profiles(Motion(times, tuple(engine.motor_names), angles), 0.02).profiles
    played = rollout(engine, engine.solve_static(profiles.value(0.0)), profiles, 0.005, len(times) - 1).states
    assert np.abs(poses.positions(np.stack([s.s for s in played])) - quasi_static_targets(
        engine, poses, times, angles).positions).max() > 1e-4  # the playback lags and rings: a different start
    continued = quasi_static_targets(engine, poses, times, angles)
    from_playback = quasi_static_targets(engine, poses, times, angles, warm_states=played)
    np.testing.assert_allclose(from_playback.positions, continued.positions, rtol=0, atol=1e-9)
    assert from_playback.solves == continued.solves


class _TwoBranches:
    """A one-motor 'linkage' with two equilibria ±√θ for θ > 0 that meet at θ = 0 (its change point): the static
    solve converges to the one on the warm start's side, as Newton does."""

    n_state = 1

    def solve_static(self, theta, warm=None):
        if warm is not None and not np.all(np.isfinite(warm.s)):
            from retarget.sim.errors import SimulationError

            raise SimulationError("Newton did not converge from this start")
        side = 1.0 if warm is None or np.asarray(warm.s)[0] >= 0.0 else -1.0
        if getattr(warm, "jump", False):  # Newton from this start lands on the far branch
            side = -side
        return _State(np.array([side * np.sqrt(max(float(theta[0]), 0.0))]))


class _State:
    def __init__(self, s, jump=False):
        self.s = s
        self.jump = jump


class _Poses:
    def positions(self, states):
        return np.stack([states[:, 0], 0.0 * states[:, 0], 0.0 * states[:, 0]], axis=1)[:, None, :]

    def orientations(self, states):
        return np.broadcast_to(np.eye(3), (len(states), 1, 3, 3)).copy()


def test_warm_states_choose_the_branch_the_playback_takes():
    """Continued from sample to sample the targets stay on the branch they start on through the change point;
    started from the playback's states they follow the branch the robot is on (here: it crosses to the other)."""
    times = np.linspace(0.0, 1.0, 11)
    angles = ((times - 0.5) ** 2)[:, None]  # down to the change point at 0.5 s and up again
    played = [_State(np.array([np.sqrt(a[0]) if t < 0.5 else -np.sqrt(a[0])])) for t, a in zip(times, angles)]
    continued = quasi_static_targets(_TwoBranches(), _Poses(), times, angles)
    assert np.all(continued.positions[:, 0, 0] >= 0.0)
    followed = quasi_static_targets(_TwoBranches(), _Poses(), times, angles, warm_states=played)
    np.testing.assert_allclose(followed.positions[:, 0, 0], [s.s[0] for s in played], atol=1e-12)
    # Where Newton fails from the playback's state the solve continues from the previous equilibrium.
    played[-1] = _State(np.array([np.nan]))
    fallback = quasi_static_targets(_TwoBranches(), _Poses(), times, angles, warm_states=played)
    assert fallback.positions[-1, 0, 0] == pytest.approx(fallback.positions[-2, 0, 0] / np.sqrt(0.16) * 0.5)
    # Where Newton restarted from the playback's state lands on the far branch, the continued equilibrium (nearer
    # the playback) is kept.
    played[-1] = _State(np.array([-0.5]), jump=True)
    kept = quasi_static_targets(_TwoBranches(), _Poses(), times, angles, warm_states=played)
    assert kept.positions[-1, 0, 0] == pytest.approx(-0.5)
