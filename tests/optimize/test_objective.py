"""Tracking objective and regularizers: values against direct integrals, derivatives against finite differences."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from retarget.errors import InputError
from retarget.optimize.bspline import MotorProfiles, ProfileParametrization
from retarget.optimize.objective import MotorRegularizer, TrackingObjective, deviation_metrics
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule

N_T, K = 41, 2


def _bodies() -> list[TrackedBodyWeights]:
    return [TrackedBodyWeights("tip", WeightSchedule.step([(0.0, 1.0), (0.5, 3.0)]), WeightSchedule.constant(0.0)),
            TrackedBodyWeights("glass", WeightSchedule.constant(2.0),
                               WeightSchedule.spline([(0.0, 0.5), (1.0, 1.5)]))]


@pytest.fixture
def case() -> tuple[TrackingObjective, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(21)
    t = np.linspace(0.0, 1.0, N_T)
    c_bar = rng.normal(size=(N_T, K, 3))
    r_bar = Rotation.random(N_T * K, random_state=1).as_matrix().reshape(N_T, K, 3, 3)
    objective = TrackingObjective.build(t, _bodies(), c_bar, r_bar)
    c = c_bar + 0.1 * rng.normal(size=c_bar.shape)
    r = Rotation.random(N_T * K, random_state=2).as_matrix().reshape(N_T, K, 3, 3)
    return objective, c, r


def test_value_matches_definition(case: tuple[TrackingObjective, np.ndarray, np.ndarray]) -> None:
    objective, c, r = case
    t = objective.times
    integrand = np.zeros(N_T)
    for k, body in enumerate(_bodies()):
        w_pos, w_ori = body.sample(t)
        integrand += w_pos * 0.5 * np.sum((c[:, k] - objective.target_positions[:, k]) ** 2, axis=-1)
        axes = r[:, k] - objective.target_orientations[:, k]  # columns are the body axes
        integrand += w_ori * 0.5 * sum(np.sum(axes[:, :, a] ** 2, axis=-1) for a in range(3))
    assert objective.evaluate(c, r).value == pytest.approx(objective.quadrature @ integrand, rel=1e-13)


def test_partials_against_finite_differences(case: tuple[TrackingObjective, np.ndarray, np.ndarray]) -> None:
    objective, c, r = case
    out = objective.evaluate(c, r)
    rng = np.random.default_rng(5)
    eps = 1e-6
    for _ in range(10):
        dc = rng.normal(size=c.shape)
        dr = rng.normal(size=r.shape)
        fd = (objective.evaluate(c + eps * dc, r + eps * dr).value
              - objective.evaluate(c - eps * dc, r - eps * dr).value) / (2 * eps)
        exact = np.sum(out.d_positions * dc) + np.sum(out.d_orientations * dr)
        assert fd == pytest.approx(exact, rel=1e-7)


def test_zero_at_target_and_positions_only(case: tuple[TrackingObjective, np.ndarray, np.ndarray]) -> None:
    objective, _, _ = case
    at_target = objective.evaluate(objective.target_positions, objective.target_orientations)
    assert at_target.value == 0.0 and not np.any(at_target.d_positions)
    positions_only = TrackingObjective.build(objective.times, _bodies()[:1], objective.target_positions[:, :1])
    assert not positions_only.tracks_orientation
    assert positions_only.evaluate(objective.target_positions[:, :1] + 1.0).d_orientations is None


def test_shape_errors(case: tuple[TrackingObjective, np.ndarray, np.ndarray]) -> None:
    objective, c, r = case
    with pytest.raises(InputError):
        objective.evaluate(c[:, :1], r)
    with pytest.raises(InputError):
        objective.evaluate(c)  # orientations are tracked
    with pytest.raises(InputError, match="orientation"):
        TrackingObjective.build(objective.times, _bodies(), objective.target_positions)
    with pytest.raises(InputError, match="uniform"):
        TrackingObjective.build(objective.times ** 2, _bodies(), objective.target_positions,
                                objective.target_orientations)


@pytest.fixture
def regularizer() -> tuple[MotorRegularizer, ProfileParametrization, np.ndarray]:
    rng = np.random.default_rng(8)
    profiles = MotorProfiles.constant(np.zeros(2), 0.0, 1.0, 0.1)
    t = np.linspace(0.0, 1.0, 201)
    reference = np.stack([np.sin(2 * t), t ** 2], axis=1)
    reg = MotorRegularizer.build(profiles, t, reference, WeightSchedule.step([(0.0, 1.0), (0.5, 4.0)]), 1e-3)
    param = ProfileParametrization(profiles.n_control, 2, np.zeros(2))
    return reg, param, rng.normal(size=param.n_parameters)


def test_regularizer_value(regularizer: tuple[MotorRegularizer, ProfileParametrization, np.ndarray]) -> None:
    reg, param, x = regularizer
    p = param.control_points(x)
    profiles = MotorProfiles(0.1, 0.0, 1.0, p)
    t = np.linspace(0.0, 1.0, 201)
    w_dev = np.where(t < 0.5, 1.0, 4.0)
    dev = 0.5 * w_dev * np.sum((profiles.evaluate(t) - reg.reference) ** 2, axis=1)
    acc = 0.5 * 1e-3 * np.sum(profiles.evaluate(t, 2) ** 2, axis=1)
    out = reg.evaluate(p)
    assert out.deviation == pytest.approx(reg.quadrature @ dev, rel=1e-13)
    assert out.acceleration == pytest.approx(reg.quadrature @ acc, rel=1e-13)
    assert out.value == pytest.approx(out.deviation + out.acceleration)


def test_regularizer_gradient_against_finite_differences(
        regularizer: tuple[MotorRegularizer, ProfileParametrization, np.ndarray]) -> None:
    reg, param, x = regularizer
    value, grad = reg.evaluate_parameters(x, param)
    rng = np.random.default_rng(9)
    eps = 1e-6
    for _ in range(10):
        d = rng.normal(size=x.size)
        fd = (reg.evaluate_parameters(x + eps * d, param)[0] - reg.evaluate_parameters(x - eps * d, param)[0])
        assert fd / (2 * eps) == pytest.approx(grad @ d, rel=1e-7)
    assert value > 0


def test_deviation_metrics() -> None:
    targets = np.zeros((4, 2, 3))
    positions = targets.copy()
    positions[1, 0] = [0.03, 0.04, 0.0]  # 5 cm once
    out = deviation_metrics(positions, targets)
    assert out["peak_deviation_m"] == pytest.approx(0.05)
    assert out["rms_deviation_m"] == pytest.approx(np.sqrt(0.05 ** 2 / 8))
    with pytest.raises(InputError):
        deviation_metrics(positions[:, :, :2], targets[:, :, :2])
