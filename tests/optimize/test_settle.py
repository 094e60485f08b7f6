"""The settle refinement (retarget.optimize.settle) on the reduced rod on a motor: the deviations' and torques'
Jacobians against central differences, and a refinement that lowers the ring-out across the band without raising
a peak deviation or torque."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tests.optimize.test_adjoint import _problem

from retarget.motion.motion import Motion
from retarget.optimize.limits import MotorLimits
from retarget.optimize.settle import linearize, settle_refinement
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule
from retarget.planning.options import PlanOptions
from retarget.planning.run import run_plan
from retarget.sim.adapters import reduced_engine
from retarget.sim.reduced.system import with_stiffness_scale


def test_deviation_and_torque_jacobians_match_finite_differences(rod_systems):
    _, rs = rod_systems
    engine = reduced_engine(rs, 1e-12)
    problem = _problem(engine, "tip", 0.002, 25, 0.02, engine.solve_static(np.array([0.0])))
    rng = np.random.default_rng(5)
    x = 0.1 * rng.normal(size=problem.parametrization.n_parameters)
    lin = linearize(problem, x)
    assert lin.d_deviation is not None and lin.d_torque is not None
    assert np.abs(lin.torque).max() > 0
    eps = 1e-5
    for _ in range(2):
        d = rng.normal(size=x.size)
        plus, minus = linearize(problem, x + eps * d, False), linearize(problem, x - eps * d, False)
        fd_dev = (plus.deviation - minus.deviation) / (2 * eps)
        fd_tau = (plus.torque - minus.torque) / (2 * eps)
        jd_dev = lin.d_deviation @ d
        jd_tau = lin.d_torque @ d
        assert np.max(np.abs(fd_dev - jd_dev)) <= 1e-6 * np.max(np.abs(jd_dev))
        assert np.max(np.abs(fd_tau - jd_tau)) <= 1e-6 * np.max(np.abs(jd_tau))


def _step_and_rest() -> Motion:
    t = np.linspace(0.0, 0.6, 121)
    return Motion(t, ("m",), (0.3 * np.clip(t / 0.08, 0.0, 1.0))[:, None])


def test_refinement_lowers_the_ring_out_across_the_band_without_raising_the_peak(rod_systems):
    _, rs = rod_systems
    limits = MotorLimits.build(["m"], {"m": (-1.0, 1.0, 0.0)})
    engines = {f: reduced_engine(with_stiffness_scale(rs, f), 1e-10) for f in (1.0, 0.9, 1.1)}
    options = PlanOptions(knot_spacing=0.04, dt=0.005, max_iterations=3, baselines=False, stiffness_band=(),
                          torque_weight=0.0, settle_iterations=0, rest_after=0.1)
    bodies = [TrackedBodyWeights("tip", WeightSchedule.constant(1.0), WeightSchedule.constant(0.0))]
    result = run_plan(engines[1.0], _step_and_rest(), bodies, limits, options)
    pp = result.pp
    problems = [(1.0, pp.problem)] + [(f, replace(pp.problem, engine=engines[f],
                                                  start=engines[f].solve_static(np.array([0.0]))))
                                      for f in (0.9, 1.1)]
    caps = np.array([1e3])
    lower = np.full(result.optimization.x.size, -np.inf)
    upper = np.full(result.optimization.x.size, np.inf)
    x, nominal, report = settle_refinement(problems, result.optimization.x, 0.3, caps, lower, upper, iterations=3)
    assert report.iterations >= 1
    assert report.ring_after_m < 0.7 * report.ring_before_m, report
    assert report.peak_after_m <= report.peak_before_m * 1.01
    # The report is what the models show at the refined point, the nominal evaluation is at that point.
    ring = pp.problem.tracking.times >= 0.3
    rings = [linearize(p, x, False).peak(ring) for _, p in problems]
    assert max(rings) == report.ring_after_m
    np.testing.assert_allclose(nominal.positions, linearize(pp.problem, x, False, True).evaluation.positions)


def test_plan_runs_the_refinement_and_reports_it(rod_systems):
    _, rs = rod_systems
    limits = MotorLimits.build(["m"], {"m": (-1.0, 1.0, 0.0)})

    def factory(f: float):
        return reduced_engine(with_stiffness_scale(rs, f), 1e-10)

    options = PlanOptions(knot_spacing=0.04, dt=0.005, max_iterations=2, baselines=False, stiffness_band=(),
                          torque_weight=0.0, settle_iterations=2, settle_band=(0.9, 1.1), rest_after=0.1,
                          workers=1)
    motion = Motion(np.linspace(0.0, 0.9, 181), ("m",),
                    (0.3 * np.clip(np.linspace(0.0, 0.9, 181) / 0.08, 0.0, 1.0))[:, None])
    bodies = [TrackedBodyWeights("tip", WeightSchedule.constant(1.0), WeightSchedule.constant(0.0))]
    result = run_plan(factory(1.0), motion, bodies, limits, options, engine_factory=factory)
    assert result.settle is not None and result.settle.factors == (1.0, 0.9, 1.1)
    m = result.to_json()
    assert m["settle"]["ring_after_m"] <= m["settle"]["ring_before_m"]
    assert "settle" in result.timings
    # The optimized variant is the refined point's simulation.
    np.testing.assert_allclose(result.variants["optimized"].angles,
                               np.asarray(result.profiles.evaluate(result.pp.targets.times)))
    off = run_plan(factory(1.0), motion, bodies, limits, replace(options, settle_iterations=0),
                   engine_factory=factory)
    assert off.settle is None and "settle" not in off.to_json()


def test_norm_directions_bound_planar_deviations_within_two_percent():
    from retarget.optimize.settle import norm_directions

    rng = np.random.default_rng(2)
    plane = np.linalg.qr(rng.normal(size=(3, 3)))[0][:, :2]  # an arbitrary plane through the origin
    d = rng.normal(size=(500, 2)) @ plane.T + 1e-4 * rng.normal(size=(500, 3))
    u = norm_directions(d)
    np.testing.assert_allclose(np.linalg.norm(u, axis=1), 1.0)
    bound = (d @ u.T).max(axis=1)
    norm = np.linalg.norm(d, axis=1)
    assert np.all(bound <= norm + 1e-12)
    assert np.all(bound >= norm * np.cos(np.pi / 16) - 1e-3 * norm.max())


def test_a_cancel_stops_the_refinement_at_the_last_step_taken(rod_systems):
    from retarget.optimize.errors import PlanCancelled
    from retarget.optimize.settle import STOPPED

    _, rs = rod_systems
    engine = reduced_engine(rs, 1e-10)
    problem = _problem(engine, "tip", 0.005, 40, 0.04, engine.solve_static(np.array([0.0])))
    x0 = 0.05 * np.random.default_rng(1).normal(size=problem.parametrization.n_parameters)

    def cancel(done: int, total: int) -> None:
        if done >= 1:
            raise PlanCancelled("settle refinement")

    inf = np.full(x0.size, np.inf)
    x, nominal, report = settle_refinement([(1.0, problem)], x0, 0.1, np.array([1e3]), -inf, inf, iterations=3,
                                           progress=cancel)
    assert report.message == f"{STOPPED}cancel requested"
    assert report.iterations <= 1
    np.testing.assert_allclose(nominal.positions, linearize(problem, x, False, True).evaluation.positions)


def test_plan_command_passes_the_settle_settings_and_refuses_bad_ones():
    from retarget.cli import build_parser
    from retarget.errors import InputError
    from retarget.planning.commands import options_from_args

    parser = build_parser()
    args = parser.parse_args(["plan", "single_rod", "--motion", "single_rod/step_30_servo", "--settle-iterations", "3",
                              "--settle-peak-allowance", "1.1"])
    options = options_from_args(args)
    assert options.settle_iterations == 3 and options.settle_peak_allowance == 1.1
    for flag, value in (("--settle-iterations", "-1"), ("--settle-peak-allowance", "0.9"), ("--settle-weight", "-1"),
                        ("--dt", "0"), ("--time-budget", "-5")):
        bad = parser.parse_args(["plan", "single_rod", "--motion", "single_rod/step_30_servo", flag, value])
        with pytest.raises(InputError, match=flag):
            options_from_args(bad)


def test_a_step_that_is_not_admissible_is_not_taken(rod_systems):
    _, rs = rod_systems
    engine = reduced_engine(rs, 1e-10)
    problem = _problem(engine, "tip", 0.005, 40, 0.04, engine.solve_static(np.array([0.0])))
    x0 = 0.05 * np.random.default_rng(1).normal(size=problem.parametrization.n_parameters)
    inf = np.full(x0.size, np.inf)
    seen = []

    def never(x):
        seen.append(x.copy())
        return False

    x, _, report = settle_refinement([(1.0, problem)], x0, 0.1, np.array([1e3]), -inf, inf, iterations=2,
                                     admissible=never)
    assert seen and report.iterations == 0 and report.rejected == len(seen)
    np.testing.assert_array_equal(x, x0)
