"""Tests of retarget.fit.fitter: the estimator on a cheap analytic surrogate, and a real twin round trip."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fit.fitter import FitCase, FitOptions, fit_materials, parse_params
from retarget.fit.recording import TipRecording
from retarget.fit.rig import load_rig
from retarget.fit.simulators import BeamEngine, TipTrajectory, motor_profile
from retarget.model.library import resolve_motion
from retarget.motion import load_motion


class TwoModeSurrogate:
    """Analytic stand-in for an engine: the motor's rigid swing plus two damped modes excited at each step edge.

    Mode i rings at ω_i ∝ √E with ζ_i = α c_i / (2 ω_i) + β ω_i / 2 (c_i: the part's share of the modal mass),
    so α and β are separately identifiable, as with a visible second mode.
    """

    def __init__(self) -> None:
        self.rig = load_rig("single_rod")
        self.calls = 0

    def simulate(self, youngs_modulus: float, alpha: float, beta: float, motion: object) -> TipTrajectory:
        self.calls += 1
        p = motor_profile(motion, self.rig.motor, 2e-3)
        t = p.time_s
        lateral = np.zeros_like(t)
        for omega0, c, amp in ((20.0, 0.2, 0.05), (200.0, 1.0, 0.01)):
            omega = omega0 * np.sqrt(youngs_modulus / 2e11)
            zeta = alpha * c / (2 * omega) + beta * omega / 2
            for edge, sign in ((0.6, 1.0), (2.3, -1.0)):
                s = np.clip(t - edge, 0.0, None)
                ring = np.exp(-zeta * omega * s) * np.sin(omega * np.sqrt(1 - zeta**2) * s)
                lateral += sign * amp * (t > edge) * ring
        theta = p.angle
        pos = np.stack([0.7 * np.sin(theta) + lateral * np.cos(theta), np.zeros_like(t),
                        0.7 * np.cos(theta) - lateral * np.sin(theta)], axis=1)
        return TipTrajectory(t, pos, theta)


def _recording(sim, motion, truth, noise, seed, offset=1.7e9 + 0.25):
    rng = np.random.default_rng(seed)
    tr = sim.simulate(*truth, motion)
    t_rec = offset + np.arange(-0.25, 4.0, 1 / 120)
    pos = tr.at(t_rec - offset) @ np.array([[1, 0, 0], [0, 0, 1], [0, -1, 0]]).T + [0.1, 0.2, 0.3]
    pos += rng.normal(0, noise, pos.shape)
    return TipRecording(t_rec, pos, "synthetic", "tip")


def test_parse_params() -> None:
    assert parse_params("beta, youngs_modulus") == ("youngs_modulus", "beta")
    with pytest.raises(InputError, match="unknown"):
        parse_params("youngs_modulus,gamma")
    with pytest.raises(InputError):
        parse_params(" , ")


def test_estimator_recovers_all_three_on_surrogate() -> None:
    sim = TwoModeSurrogate()
    motion = load_motion(resolve_motion("single_rod/step_30"))
    truth = (1.9e11, 0.9, 1.5e-4)
    case = FitCase(_recording(sim, motion, truth, 0.001, 7), motion, "surrogate")
    res = fit_materials(sim, [case])
    for name, value in zip(("youngs_modulus", "alpha", "beta"), truth):
        # Within 4 standard deviations of the truth, and the uncertainty itself small.
        assert abs(res.values[name] - value) < 4 * res.std[name] + 1e-12 * value, name
    assert res.values["youngs_modulus"] == pytest.approx(truth[0], rel=1e-3)
    assert res.values["alpha"] == pytest.approx(truth[1], rel=0.1)
    assert res.values["beta"] == pytest.approx(truth[2], rel=0.1)
    assert res.residual_rms_m == pytest.approx(0.001, rel=0.1)
    assert res.offsets_s[0] - 1.7e9 == pytest.approx(0.25, abs=1e-3)
    assert res.to_dict()["fitted"] == ["youngs_modulus", "alpha", "beta"]


def test_subset_keeps_fixed_parameters() -> None:
    sim = TwoModeSurrogate()
    motion = load_motion(resolve_motion("single_rod/step_30"))
    truth = (2.1e11, sim.rig.material.rayleigh_alpha, sim.rig.material.rayleigh_beta)
    case = FitCase(_recording(sim, motion, truth, 0.0005, 8), motion, "surrogate")
    res = fit_materials(sim, [case], FitOptions(params=("youngs_modulus",)))
    assert res.fitted == ("youngs_modulus",)
    assert res.values["alpha"] == truth[1] and res.values["beta"] == truth[2]
    assert res.values["youngs_modulus"] == pytest.approx(truth[0], rel=1e-4)
    assert set(res.std) == {"youngs_modulus"}


def test_no_cases_is_an_input_error() -> None:
    with pytest.raises(InputError):
        fit_materials(TwoModeSurrogate(), [])


def test_beam_engine_round_trip_recovers_e_and_alpha() -> None:
    """Real engine, twin-like recording with 1 mm noise: E within 2 %, α within 10 % (β held at its truth)."""
    rig = load_rig("single_rod")
    engine = BeamEngine(rig, dt=2e-3)
    motion = load_motion(resolve_motion("single_rod/step_30"))
    truth = (1.93e11, 0.7, rig.material.rayleigh_beta)
    case = FitCase(_recording(engine, motion, truth, 0.001, 9), motion, "beam")
    res = fit_materials(engine, [case], FitOptions(params=("youngs_modulus", "alpha")))
    assert res.values["youngs_modulus"] == pytest.approx(truth[0], rel=0.02)
    assert res.values["alpha"] == pytest.approx(truth[1], rel=0.10)
    assert res.residual_rms_m < 0.0012


def test_recorded_angle_about_the_motor_axis() -> None:
    """A body turning about the robot's y axis, seen in a Y-up mocap frame with an arbitrary marker frame."""
    from scipy.spatial.transform import Rotation

    from retarget.fit.align import Alignment, RestPose
    from retarget.fit.fitter import _recorded_angle

    t = np.arange(0.0, 2.0, 1 / 120)
    angle = np.where(t > 0.5, 0.4 * np.sin(3 * (t - 0.5)), 0.0)
    robot_to_mocap = np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]])
    marker = Rotation.from_rotvec([0.3, -0.2, 0.5])
    body = Rotation.from_matrix(robot_to_mocap) * Rotation.from_rotvec(np.outer(angle, [0, 1, 0])) * marker
    quat = body.as_quat()
    quat[17] = np.nan
    rec = TipRecording(t, np.zeros((t.size, 3)), "synthetic", "tip", quat)
    al = Alignment(0.0, robot_to_mocap.T, np.zeros(3), 0.0, RestPose(np.zeros(3), 0.001, 10))
    measured, weight, noise = _recorded_angle(rec, al, np.array([0.0, 1.0, 0.0]))
    assert np.isnan(measured[17])
    np.testing.assert_allclose(np.delete(measured, 17), np.delete(angle, 17), atol=1e-12)
    assert weight == 5.0 and noise < 1e-6  # noise-free angles: the lever is clipped at its maximum


def test_recording_without_orientation_fits_positions_only() -> None:
    from retarget.fit.fitter import build_problem

    sim = BeamEngine(load_rig("single_rod"), dt=4e-3)
    motion = load_motion(resolve_motion("single_rod/step_30"))
    rec = _recording(sim, motion, (2e11, 0.2, 2e-5), 0.001, 10)
    untracked = TipRecording(rec.time_s, rec.position_m, rec.source, rec.body, np.full((rec.time_s.size, 4), np.nan))
    problem = build_problem(sim, [FitCase(untracked, motion, "no orientation")])
    assert problem.angles == (None,) and problem.angle_weights == (0.0,)


def test_parse_and_check_fixed_values() -> None:
    from retarget.fit.fitter import check_fixed, parse_fixed

    assert parse_fixed(["alpha=0", " beta = 4e-5"]) == {"alpha": 0.0, "beta": 4e-5}
    for bad, match in ((["alpha"], "NAME=VALUE"), (["gamma=1"], "unknown name 'gamma'"),
                       (["alpha=x"], "'x' is not a number"), (["alpha=1", "alpha=2"], "given twice")):
        with pytest.raises(InputError, match=match):
            parse_fixed(bad)
    with pytest.raises(InputError, match="both fitted and fixed"):
        check_fixed({"alpha": 0.0}, ("youngs_modulus", "alpha"))
    with pytest.raises(InputError, match="must be a finite number"):
        check_fixed({"youngs_modulus": 0.0}, ("alpha",))
    with pytest.raises(InputError, match="must be a finite number"):
        check_fixed({"beta": -1e-5}, ("alpha",))


def test_fixed_values_are_held_and_a_parameter_at_its_bound_is_flagged() -> None:
    """α = 0 in truth: fitted, it ends at its lower bound (flagged); held at 0 with ``fixed``, E and β are right.
    The recording has no orientation: the JSON has null, never NaN, for the angle residual."""
    import json

    from retarget.fit.fitter import FitResult

    rig = load_rig("single_rod")
    engine = BeamEngine(rig, dt=2e-3)
    motion = load_motion(resolve_motion("single_rod/step_30"))
    truth = (1.93e11, 0.0, 6e-5)
    case = FitCase(_recording(engine, motion, truth, 0.001, 9), motion, "beam")
    free = fit_materials(engine, [case], FitOptions(params=("youngs_modulus", "alpha"), fixed={"beta": 6e-5},
                                                    bracket_points=0, max_evaluations=25))
    assert free.at_bound == {"alpha": "lower"} and free.bounds["alpha"][0] == pytest.approx(1e-4)
    assert free.values["alpha"] == pytest.approx(1e-4, rel=0.01) and free.fixed == {"beta": 6e-5}
    held = fit_materials(engine, [case], FitOptions(params=("youngs_modulus", "beta"), fixed={"alpha": 0.0},
                                                    bracket_points=0, max_evaluations=25))
    assert held.values["alpha"] == 0.0 and held.fixed == {"alpha": 0.0} and held.at_bound == {}
    assert held.values["youngs_modulus"] == pytest.approx(truth[0], rel=0.01)
    assert held.values["beta"] == pytest.approx(truth[2], rel=0.05)
    summary = held.to_dict()
    assert summary["angle_residual_rms_rad"] is None and summary["orientation_used"] == [False]
    text = json.dumps(summary, allow_nan=False)
    assert json.loads(text)["fixed"] == {"alpha": 0.0} and json.loads(text)["at_bound"] == {}
    assert isinstance(held, FitResult)


def test_finite_or_none_makes_strict_json() -> None:
    import json

    from retarget.jsonsafe import finite_or_none

    value = {"a": float("nan"), "b": [1.0, float("inf"), (np.float64("nan"), np.int64(3))], "c": np.array([1.5])}
    assert json.dumps(finite_or_none(value), allow_nan=False) == '{"a": null, "b": [1.0, null, [null, 3]], "c": [1.5]}'
