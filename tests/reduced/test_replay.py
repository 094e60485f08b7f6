"""The training-replay mode criterion (retarget.sim.reduced.training.build_checked_by_replay).

A 0.3 m steel rod on a motor with a 50 g tip, swung for 0.1 s (the full run is the training run): starting from a
loose variance criterion, the check must tighten the variance tenfold per trial until the reduced replay of the
training motion reproduces the tip, and report errors that a separate replay of the returned model reproduces.
"""
from __future__ import annotations

import numpy as np
import pytest

from retarget.sim.scenarios import build_rod_on_motor


@pytest.fixture(scope="module")
def training():
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    system = build_system(build_rod_on_motor(length=0.3))
    motors = FunctionMotors(lambda t: [0.4 * np.sin(15 * t) ** 2], lambda t: [6.0 * np.sin(30 * t)])
    dt = 2e-3
    return system, motors, dt, simulate(system, motors, 0.1, dt)


def _replay_error(rs, motors, dt, full) -> float:
    from retarget.sim.reduced.engine import simulate_compiled

    run = simulate_compiled(rs, motors, float(full.time[-1]), dt)
    x = full.body_position("tip")
    xr = np.stack([np.interp(full.time, run.time, run.body_position("tip")[:, k]) for k in range(3)], axis=1)
    return float(np.sqrt(np.mean(np.linalg.norm(xr - x, axis=1) ** 2)) / np.max(np.linalg.norm(x - x[0], axis=1)))


def test_variance_is_tightened_until_the_replay_is_accurate(training) -> None:
    from retarget.sim.reduced.training import build_checked_by_replay

    system, motors, dt, full = training
    lines: list[str] = []
    rs, bases, _, trials = build_checked_by_replay(system, full, motors, dt, ["tip"], variance=0.5, tolerance=2e-3,
                                                   log=lines.append)
    assert len(trials) >= 2 and len(lines) == len(trials)
    assert trials[0].modes == (1,) and trials[0].error_rel > 2e-3  # one mode is not enough for this swing
    # Tenfold tightening of the uncaptured variance, more modes each trial, the last within tolerance.
    for a, b in zip(trials, trials[1:]):
        assert (1 - b.variance) < (1 - a.variance) and b.modes[0] > a.modes[0]
    assert {t.cubature_tolerance for t in trials} == {1e-3}  # the modes sufficed: the cubature is left alone
    assert trials[-1].error_rel <= 2e-3 < min(t.error_rel for t in trials[:-1])
    assert [t.kept for t in trials] == [False] * (len(trials) - 1) + [True]
    assert bases[0].size - bases[0].n_rigid == trials[-1].modes[0]
    # The recorded error is the returned model's own replay error.
    assert _replay_error(rs, motors, dt, full) == pytest.approx(trials[-1].error_rel, rel=1e-9)


def test_the_cubature_is_tightened_once_the_variance_is_exhausted(training) -> None:
    """An unreachable tolerance: the variance trials (here one tightening), then tenfold tighter cubatures with the
    last basis down to 1e-6, then the most accurate model tried is kept."""
    from retarget.sim.reduced.training import MIN_CUBATURE_TOLERANCE, build_checked_by_replay

    system, motors, dt, full = training
    rs, _, _, trials = build_checked_by_replay(system, full, motors, dt, ["tip"], variance=0.5, tolerance=1e-12,
                                               max_tightenings=1)
    tolerances = [t.cubature_tolerance for t in trials]
    assert tolerances[-3:] == pytest.approx([1e-4, 1e-5, MIN_CUBATURE_TOLERANCE]) and set(tolerances[:-3]) == {1e-3}
    # (A variance trial with the same modes and cubature as the one before is not replayed again.)
    assert [t.variance for t in trials[-3:]] == pytest.approx([0.95] * 3)
    best = min(range(len(trials)), key=lambda i: trials[i].error_rel)
    assert [t.kept for t in trials] == [i == best for i in range(len(trials))]
    assert _replay_error(rs, motors, dt, full) == pytest.approx(trials[best].error_rel, rel=1e-9)


def test_a_check_that_cannot_pass_stops_at_its_bound_and_says_so(training) -> None:
    """An unreachable tolerance with ``max_trials`` 2: two models, the more accurate kept, and a log line saying the
    check did not pass within the bound (``retarget reduce --max-replay-trials``)."""
    from retarget.sim.reduced.training import build_checked_by_replay

    system, motors, dt, full = training
    lines: list[str] = []
    rs, _, _, trials = build_checked_by_replay(system, full, motors, dt, ["tip"], variance=0.5, tolerance=1e-12,
                                               max_trials=2, log=lines.append)
    assert len(trials) == 2 and sum(t.kept for t in trials) == 1
    kept = next(t for t in trials if t.kept)
    assert kept.error_rel == min(t.error_rel for t in trials)
    assert lines[-1].startswith("replay check: not within 1e-10 % after 2 trials (the bound): keeping the most "
                                "accurate model")
    assert _replay_error(rs, motors, dt, full) == pytest.approx(kept.error_rel, rel=1e-9)


def test_a_first_model_within_tolerance_is_kept(training) -> None:
    from retarget.sim.reduced.training import build_checked_by_replay, build_from_result

    system, motors, dt, full = training
    _, bases, _, trials = build_checked_by_replay(system, full, motors, dt, ["tip"], tolerance=1.0)
    assert len(trials) == 1 and trials[0].kept
    ref = build_from_result(system, full)[1]
    assert [b.size for b in bases] == [b.size for b in ref]


def test_tracked_distances_need_the_same_time_grid(training) -> None:
    from retarget.sim.reduced.engine import simulate_compiled
    from retarget.sim.reduced.training import build_from_result, tracked_distances

    system, motors, dt, full = training
    rs = build_from_result(system, full, n_modes=2)[0]
    same = tracked_distances(full, simulate_compiled(rs, motors, 0.1, dt), ["tip"])["tip"]
    assert same.shape == (len(full.time),) and np.all(np.isfinite(same))
    with pytest.raises(ValueError, match="time grids"):
        tracked_distances(full, simulate_compiled(rs, motors, 0.1, 2 * dt), ["tip"])


def test_training_range_flags_a_motion_beyond_the_training_one(training) -> None:
    """The replay stays within the training range; a swing twice as large is reported, by part name."""
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.reduced.engine import simulate_compiled
    from retarget.sim.reduced.training import (TRAINING_RANGE_WARN, build_from_result, training_range,
                                               training_range_warning)

    system, motors, dt, full = training
    rs = build_from_result(system, full, n_modes=3)[0]
    name = rs.bodies[0].name
    replay = training_range(rs, simulate_compiled(rs, motors, 0.1, dt).coordinates)
    assert list(replay) == [name] and 0.9 < replay[name] < 1.1
    assert training_range_warning(replay) is None
    larger = FunctionMotors(lambda t: [0.8 * np.sin(15 * t) ** 2], lambda t: [12.0 * np.sin(30 * t)])
    ratios = training_range(rs, simulate_compiled(rs, larger, 0.1, dt).coordinates)
    assert ratios[name] > TRAINING_RANGE_WARN
    warning = training_range_warning(ratios)
    assert warning is not None and f"{name} {ratios[name]:.2f}x" in warning and "extrapolates" in warning
    # Bases that do not record their range (older artifacts) are left out.
    from dataclasses import replace

    body = replace(rs.bodies[0], basis=replace(rs.bodies[0].basis, training_norm=0.0))
    assert training_range(replace(rs, bodies=(body,)), np.zeros((2, body.size))) == {}


def test_several_training_motions_are_all_replayed_and_covered(training) -> None:
    """Trained on the swing and one twice as large, the model covers both (training range ≤ 1), each replay is
    checked (the worst counts), and it reproduces the large swing better than a model of the small one alone."""
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.reduced.engine import simulate_compiled
    from retarget.sim.reduced.training import build_checked_by_replay, training_range
    from retarget.sim.simulate import simulate

    system, motors, dt, full = training
    larger = FunctionMotors(lambda t: [0.8 * np.sin(15 * t) ** 2], lambda t: [12.0 * np.sin(30 * t)])
    full_large = simulate(system, larger, 0.1, dt)
    lines: list[str] = []
    rs, _, _, trials = build_checked_by_replay(system, [full, full_large], [motors, larger], dt, ["tip"],
                                               variance=0.5, tolerance=2e-3, log=lines.append)
    kept = next(t for t in trials if t.kept)
    assert all(len(t.errors_rel) == 2 and t.error_rel == max(t.errors_rel) for t in trials)
    assert kept.error_rel <= 2e-3 and "per motion" in lines[-1]
    assert kept.errors_rel == pytest.approx([_replay_error(rs, motors, dt, full),
                                             _replay_error(rs, larger, dt, full_large)], rel=1e-9)
    name = rs.bodies[0].name
    assert training_range(rs, simulate_compiled(rs, larger, 0.1, dt).coordinates)[name] <= 1.0 + 1e-9
    small = build_checked_by_replay(system, full, motors, dt, ["tip"], variance=0.5, tolerance=2e-3)[0]
    assert _replay_error(rs, larger, dt, full_large) < _replay_error(small, larger, dt, full_large)
    with pytest.raises(ValueError, match="2 training runs but 1 motor"):
        build_checked_by_replay(system, [full, full_large], motors, dt, ["tip"])


def test_given_bases_retrain_only_the_cubature(training) -> None:
    """The replay check's cubature phase keeps its bases: the cubature trained on them equals a full rebuild's."""
    from retarget.sim.reduced.training import build_from_result

    system, _, _, full = training
    fresh = build_from_result(system, full, variance=0.5, cubature_tolerance=1e-4)
    first = build_from_result(system, full, variance=0.5)
    kept = build_from_result(system, full, cubature_tolerance=1e-4, bases=first[1])
    assert kept[1] == first[1]  # the very bases given
    for a, b in zip(fresh[1], kept[1]):
        np.testing.assert_array_equal(a.modes, b.modes)
    for a, b in zip(fresh[2], kept[2]):
        np.testing.assert_array_equal(a.elements, b.elements)
        np.testing.assert_array_equal(a.weights, b.weights)


def test_the_trials_solve_each_bodys_eigenproblem_once_and_build_what_each_alone_builds(training,
                                                                                       monkeypatch) -> None:
    """The trials share the snapshots' mass-PCA (one ``eigh`` per body in all); each trial's bases equal, value for
    value, those a fresh :func:`build_from_result` at its variance builds."""
    from retarget.sim.reduced import training as tr

    system, motors, dt, full = training
    calls = []
    real = tr.mass_pca_spectrum
    monkeypatch.setattr(tr, "mass_pca_spectrum", lambda *a, **k: calls.append(1) or real(*a, **k))
    _, bases, _, trials = tr.build_checked_by_replay(system, full, motors, dt, ["tip"], variance=0.5, tolerance=2e-3)
    assert len(trials) >= 2 and len(calls) == len(system.deformable)
    alone = tr.build_from_result(system, full, variance=trials[-1].variance)[1]
    for a, b in zip(bases, alone):
        assert np.array_equal(a.modes, b.modes) and np.array_equal(a.spectrum, b.spectrum)
        assert a.training_norm == b.training_norm and a.captured_variance == b.captured_variance
