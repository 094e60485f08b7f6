"""The L-BFGS-B driver (retarget.optimize.planner) on a reduced rod on a motor: the objective goes down, limits
hold, Ctrl-C returns the best point so far, the ROS entry point validates its request."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.motion.motion import Motion
from retarget.optimize.engines import ReducedEngine
from retarget.optimize.limits import MotorLimits
from retarget.optimize.planner import PlanOptions, build_plan_problem, optimize, plan, run_plan
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule

OPTIONS = PlanOptions(knot_spacing=0.04, dt=0.005, max_iterations=2, baselines=False)


def _motion() -> Motion:
    t = np.linspace(0.0, 0.2, 41)
    return Motion(t, ("m",), (0.25 * np.clip(t / 0.1, 0.0, 1.0))[:, None])


def _bodies():
    return [TrackedBodyWeights("tip", WeightSchedule.constant(1.0), WeightSchedule.constant(0.0))]


def test_plan_lowers_the_objective_and_respects_position_limits(rod_systems):
    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    result = run_plan(ReducedEngine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    opt = result.optimization
    assert opt.iterations >= 1
    assert opt.objective_final < 0.9 * opt.objective_initial
    assert np.all(result.profiles.control_points <= 0.3 + 1e-12)
    m = result.metrics()
    for key in ("objective_initial", "objective_final", "iterations", "wall_s", "optimized", "peak_torque_nm"):
        assert key in m
    assert m["optimized"]["peak_deviation_m"] > 0


def test_keyboard_interrupt_returns_the_best_point(rod_systems):
    _, rs = rod_systems
    limits = MotorLimits.build(("m",), {"m": (-0.2, 0.3, 0.0)})
    pp = build_plan_problem(ReducedEngine(rs, 1e-10), _motion(), _bodies(), limits, OPTIONS)
    seen = []

    def callback(it: dict) -> None:
        seen.append(it)
        raise KeyboardInterrupt

    res = optimize(pp, OPTIONS, callback=callback)
    assert res.interrupted and "interrupted" in res.message
    assert len(seen) == 1 and set(seen[0]) == {"iteration", "objective", "gradient_norm"}
    assert res.objective_final <= res.objective_initial
    assert res.best.value == res.objective_final


def test_plan_request_is_validated():
    with pytest.raises(InputError):
        plan({"robot": "single_rod", "time": [0.0, 1.0]}, None)
