"""The robust objective and the checks in models a plan was not optimized on (retarget.optimize.robust,
retarget.planning.verification, retarget.sim.reduced.system.with_stiffness_scale) on the reduced rod on a motor."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from retarget.motion.motion import Motion
from retarget.sim.adapters import reduced_engine
from retarget.optimize.limits import MotorLimits
from retarget.planning.options import PlanOptions
from retarget.planning.run import run_plan
from retarget.optimize.parallel import fork_pool
from retarget.optimize.robust import BRANCH_RATIO, Ensemble, evaluate_ensemble, without_other_branches
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule
from retarget.sim.reduced.system import with_stiffness_scale
from tests.optimize.test_adjoint import _problem

# The plans these tests run fork worker processes (the full-FEM checks, the robust members).
pytestmark = pytest.mark.integration

OPTIONS = PlanOptions(knot_spacing=0.04, dt=0.005, max_iterations=2, baselines=False, stiffness_band=())


def _motion() -> Motion:
    t = np.linspace(0.0, 0.3, 61)
    return Motion(t, ("m",), (0.25 * np.clip(t / 0.1, 0.0, 1.0))[:, None])


def _bodies():
    return [TrackedBodyWeights("tip", WeightSchedule.constant(1.0), WeightSchedule.constant(0.0))]


def test_stiffness_scale_scales_forces_and_frequencies(rod_systems):
    _, rs = rod_systems
    scaled = with_stiffness_scale(rs, 1.21)
    b0, b1 = rs.bodies[0], scaled.bodies[0]
    z = 1e-4 * np.arange(1, b0.size + 1, dtype=float)
    f0, k0, _ = b0.cubature.evaluate(z)
    f1, k1, _ = b1.cubature.evaluate(z)
    # Neo-Hookean forces are linear in (mu, lambda): scaling E scales them exactly.
    # (rigid-mode rows are round-off of the force's scale)
    np.testing.assert_allclose(f1, 1.21 * f0, rtol=1e-10, atol=1e-12 * np.abs(f0).max())
    np.testing.assert_allclose(k1, 1.21 * k0, rtol=1e-10, atol=1e-12 * np.abs(k0).max())
    np.testing.assert_allclose(b1.stiffness0, 1.21 * b0.stiffness0)
    assert with_stiffness_scale(rs, 1.0) is rs
    with pytest.raises(ValueError):
        with_stiffness_scale(rs, 0.0)


def test_ensemble_gradient_matches_finite_differences(rod_systems):
    _, rs = rod_systems
    problems = []
    for factor in (1.0, 0.9, 1.1):
        engine = reduced_engine(with_stiffness_scale(rs, factor), 1e-12)
        start = engine.solve_static(np.array([0.0]))
        problems.append(_problem(engine, "tip", 0.002, 25, 0.02, start))
    ensemble = Ensemble(problems[0], tuple(problems[1:]), (0.9, 1.1))
    rng = np.random.default_rng(7)
    x = 0.1 * rng.normal(size=problems[0].parametrization.n_parameters)
    seen: list[tuple[int, int]] = []
    ev = evaluate_ensemble(ensemble, x, progress=lambda k, n: seen.append((k, n)))
    assert ev.rollout is not None and "tracking_x0.9" in ev.parts
    # One after another, the bar counts every member's forward and adjoint steps to its end.
    assert seen[-1] == (3 * 2 * 25, 3 * 2 * 25)

    with fork_pool(ensemble.members, 2) as pool:
        pooled = replace(ensemble, pool=pool)
        seen.clear()
        assert evaluate_ensemble(pooled, x, progress=lambda k, n: seen.append((k, n))).value == \
            pytest.approx(ev.value, rel=1e-12)
    # The members alongside the nominal model in workers: the nominal's steps are the bar, to its end.
    assert seen[-1] == (2 * 25, 2 * 25)
    from retarget.optimize.adjoint import evaluate

    members = [evaluate(p, x).value for p in problems]
    assert ev.value == pytest.approx(np.mean(members), rel=1e-12)
    for _ in range(2):
        d = rng.normal(size=x.size)
        eps = 1e-5
        fd = (evaluate_ensemble(ensemble, x + eps * d, gradient=False).value
              - evaluate_ensemble(ensemble, x - eps * d, gradient=False).value) / (2 * eps)
        ad = float(ev.gradient @ d)
        assert abs(fd - ad) <= 1e-6 * abs(ad), (fd, ad)


def test_gauss_newton_over_the_ensemble_has_the_ensemble_gradient_and_plans(rod_systems):
    """The robust objective's Gauss–Newton gradient (each model's tangent-linear ``Jᵣᵀ r`` averaged, plus the
    regularizers) is the ensemble's adjoint gradient; a Levenberg–Marquardt plan on it lowers the averaged ``J``."""
    from retarget.optimize.gauss_newton import ensemble_gauss_newton
    from retarget.optimize.problem import build_plan_problem

    _, rs = rod_systems
    limits = MotorLimits.build(["m"], {"m": (-1.0, 1.0, 0.0)})
    engines = {f: reduced_engine(with_stiffness_scale(rs, f), 1e-12) for f in (1.0, 0.9, 1.1)}
    options = replace(OPTIONS, torque_weight=0.0, stiffness_band=(0.9, 1.1))
    pp = build_plan_problem(engines[1.0], _motion(), _bodies(), limits, options,
                            members=[(0.9, engines[0.9]), (1.1, engines[1.1])])
    assert pp.ensemble is not None and pp.ensemble.size == 3
    x = pp.fit.parameters + 0.02 * np.random.default_rng(3).normal(size=pp.fit.parameters.size)
    ev = pp.evaluate(x)
    hess, grad = ensemble_gauss_newton(pp, x, ev.rollout)
    assert ev.gradient is not None
    np.testing.assert_allclose(grad, ev.gradient, rtol=0, atol=1e-7 * np.abs(ev.gradient).max())
    assert np.all(np.linalg.eigvalsh(hess) > -1e-9 * np.abs(hess).max())  # Gauss–Newton: positive semidefinite
    with fork_pool(pp.ensemble.members, 2) as pool:  # the members' passes in forked workers: the same sums
        if pool is not None:
            forked = replace(pp, ensemble=replace(pp.ensemble, pool=pool))
            hess_f, grad_f = ensemble_gauss_newton(forked, x, ev.rollout)
            np.testing.assert_allclose(hess_f, hess, rtol=1e-12, atol=1e-12 * np.abs(hess).max())
            np.testing.assert_allclose(grad_f, grad, rtol=1e-12, atol=1e-12 * np.abs(grad).max())

    def factory(f: float):
        return engines[f]

    result = run_plan(engines[1.0], _motion(), _bodies(), limits, replace(options, method="gauss-newton"),
                      engine_factory=factory)
    assert result.optimization.method == "gauss-newton" and result.pp.ensemble is not None
    assert result.optimization.objective_final < 0.9 * result.optimization.objective_initial


@pytest.mark.parametrize("workers", [1, 2])
def test_a_member_tracking_another_branch_is_left_out(rod_systems, workers):
    """A member whose tracking term is many times the nominal model's (a loop assembled on its other branch; here
    its targets moved 0.2 m away) leaves the robust objective with a warning naming it; the others stay, in order."""
    _, rs = rod_systems
    problems = {}
    for factor in (1.0, 0.9, 1.1):
        engine = reduced_engine(with_stiffness_scale(rs, factor), 1e-12)
        problems[factor] = _problem(engine, "tip", 0.002, 25, 0.02, engine.solve_static(np.array([0.0])))
    off = problems[0.9].tracking
    problems[0.9] = replace(problems[0.9], tracking=replace(off, target_positions=off.target_positions + 0.2))
    ensemble = Ensemble(problems[1.0], (problems[0.9], problems[1.1]), (0.9, 1.1))
    x = 0.05 * np.random.default_rng(2).normal(size=problems[1.0].parametrization.n_parameters)
    parts = evaluate_ensemble(ensemble, x, gradient=False).parts
    assert parts["tracking_x0.9"] > BRANCH_RATIO * parts["tracking_nominal"] > parts["tracking_x1.1"] * 2
    kept, warnings = without_other_branches(ensemble, x, workers)
    assert kept.factors == (0.9, 1.1)[1:] and kept.members == (problems[1.1],) and kept.nominal is problems[1.0]
    assert len(warnings) == 1 and "×0.9" in warnings[0] and "branch" in warnings[0]
    same, none = without_other_branches(replace(ensemble, members=(problems[1.1],), factors=(1.1,)), x, workers)
    assert same.factors == (1.1,) and none == []


def test_a_looped_robots_plan_screens_its_robust_models(rod_systems):
    """With ``follow_playback`` (robots with closed loops) the plan checks the robust models at the start: on the
    rod every model tracks the same branch, so all stay and nothing is said."""
    _, rs = rod_systems
    limits = MotorLimits.build(["m"], {"m": (-1.0, 1.0, 0.0)})

    def factory(f: float):
        return reduced_engine(with_stiffness_scale(rs, f), 1e-10)

    stages: list[str] = []
    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, replace(OPTIONS, stiffness_band=(
        0.9, 1.1)), progress=lambda stage, k, n: stages.append(stage), engine_factory=factory, follow_playback=True)
    assert "robust models at the start" in stages
    assert result.pp.ensemble is not None and result.pp.ensemble.factors == (0.9, 1.1)
    assert not any("robust objective:" in w for w in result.warnings)


def test_robust_plan_averages_the_band_and_reports_it(rod_systems):
    from retarget.planning.verification import stiffness_band

    _, rs = rod_systems
    limits = MotorLimits.build(["m"], {"m": (-1.0, 1.0, 0.0)})

    def factory(f: float):
        return reduced_engine(with_stiffness_scale(rs, f), 1e-10)

    options = replace(OPTIONS, stiffness_band=(0.9, 1.1))
    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options, engine_factory=factory)
    assert result.pp.ensemble is not None and result.pp.ensemble.factors == (0.9, 1.1)
    assert result.optimization.objective_final <= result.optimization.objective_initial
    band = stiffness_band(result, (0.9, 1.1), factory, variants=("naive", "optimized"))
    assert band.factors == (0.9, 1.1)
    for entry in band.results:
        assert entry.naive is not None and entry.naive.peak_deviation_m > 0
        assert entry.peak_ratio is not None and np.isfinite(entry.peak_ratio)
    assert band.worst_peak_ratio == max(entry.peak_ratio for entry in band.results)
    with pytest.raises(Exception, match="engine factory"):
        run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, options)


def test_the_checks_run_half_the_band_in_a_worker_with_the_same_figures(rod_systems):
    """Both cores busy after a plan: with two workers, one band factor runs in a forked worker process while the
    planning process verifies at the finer step and runs the others; the band's figures are the ones run here
    one after another (``workers=1``), factor by factor."""
    from retarget.planning.verification import check_plan
    from rod_fixtures import rod_on_motor

    _, rs = rod_systems
    limits = MotorLimits.build(["m"], {"m": (-1.0, 1.0, 0.0)})

    def factory(f: float):
        return reduced_engine(with_stiffness_scale(rs, f), 1e-10)

    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    options = replace(OPTIONS, verify_dt=0.0025, band=(0.9, 1.1, 1.2), verify_model="none")
    said: list[str] = []
    alone = check_plan(result, rod_on_motor(), replace(options, workers=1), factory, say=said.append)
    assert not any("worker process" in s for s in said)
    beside = check_plan(result, rod_on_motor(), replace(options, workers=2), factory, say=said.append)
    assert any("x 0.9, 1.1 in a worker process" in s for s in said), said
    assert beside.band is not None and beside.band.factors == (0.9, 1.1, 1.2)
    assert beside.band == alone.band and beside.band.worst_peak_ratio == alone.band.worst_peak_ratio
    assert beside.verify is not None and alone.verify is not None
    assert beside.verify.peak_ratio == alone.verify.peak_ratio


def test_full_verification_reproduces_the_naive_run_of_the_training_model(rod_systems):
    """The full-FEM re-simulation of the naive profile agrees with the reduced model's naive playback to within
    the reduction error (the rod's reduced model was trained on the full model)."""
    from retarget.planning.verification import verify_full
    from rod_fixtures import rod_on_motor

    _, rs = rod_systems
    limits = MotorLimits.build(["m"], {"m": (-1.0, 1.0, 0.0)})
    result = run_plan(reduced_engine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    out = verify_full(result, rod_on_motor(), 0.002, variants=("naive", "optimized"))
    assert out.model == "full FEM" and out.deformable_dofs > 100
    naive, optimized = out.naive, out.optimized
    assert naive is not None and optimized is not None
    naive_reduced = result.variants["naive"].metrics["peak_deviation_m"]
    assert naive.peak_deviation_m == pytest.approx(naive_reduced, rel=0.25)
    assert out.peak_ratio == pytest.approx(optimized.peak_deviation_m / naive.peak_deviation_m)
    assert 0.0 <= naive.ring_out_peak_m <= naive.peak_deviation_m
    stiff = verify_full(result, rod_on_motor(), 0.002, stiffness=1.5, variants=("naive",))
    assert stiff.stiffness_factor == 1.5 and stiff.naive is not None and stiff.optimized is None
    assert stiff.naive.peak_deviation_m != pytest.approx(naive.peak_deviation_m, rel=1e-6)


def test_commanded_stop_time_is_when_the_motors_settle():
    from retarget.planning.verification import commanded_stop_time

    t = np.linspace(0.0, 2.0, 201)
    ramp = np.clip(t - 0.5, 0.0, 0.5)[:, None]  # moves 0.5 s -> 1.0 s, then holds
    assert commanded_stop_time(t, ramp) == pytest.approx(1.0, abs=0.011)
    tiny = ramp + 1e-4 * np.sin(20 * t)[:, None]  # hundredths of a degree of correction until the end
    assert commanded_stop_time(t, tiny) == pytest.approx(1.0, abs=0.011)
    assert commanded_stop_time(t, np.zeros((201, 2))) == 0.0
