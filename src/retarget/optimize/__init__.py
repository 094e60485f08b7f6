"""The optimizer: motor profiles, quadrature and weights, objective terms, servo limits and input-shaping baselines.

Built here (no simulator needed): :mod:`~retarget.optimize.bspline` (C² cubic B-spline motor profiles, basis
matrices, parametrization with rest end conditions, least-squares fit), :mod:`~retarget.optimize.quadrature`
(Simpson weights), :mod:`~retarget.optimize.weights` (time-varying weights, tracked bodies from YAML and command
line), :mod:`~retarget.optimize.objective` (tracking term and its partial derivatives, regularizers),
:mod:`~retarget.optimize.limits` (position bounds, speed penalty, limit and torque checks) and
:mod:`~retarget.optimize.shaping` (ZV/ZVD shapers, vibration identification).

With the simulator (its engines behind the ``Engine`` protocol, :mod:`retarget.sim.adapters`):
:mod:`~retarget.optimize.adjoint` (forward rollout, exact discrete-adjoint gradient),
:mod:`~retarget.optimize.targets` (quasi-static targets), :mod:`~retarget.optimize.problem` (the planning problem),
:mod:`~retarget.optimize.lbfgs` (the L-BFGS-B driver), :mod:`~retarget.optimize.gauss_newton` (exact
sensitivities, Levenberg–Marquardt), :mod:`~retarget.optimize.windows` (receding-horizon windows),
:mod:`~retarget.optimize.settle` (the settle refinement) and :mod:`~retarget.optimize.robust` (the objective over
stiffness-scaled models). They read the planner's settings through the protocols of
:mod:`~retarget.optimize.solver_settings`.

The pipeline around them — :func:`~retarget.planning.run.plan`, its models, variants, verification and settings —
is :mod:`retarget.planning`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from retarget._lazy import lazy_exports

# Public names → defining module. Imported on first access (PEP 562) so that importing the package (every
# `retarget` CLI start, `retarget --help`) does not pull numba and scipy.
_EXPORTS: dict[str, str] = {
    "AdjointProblem": "adjoint",
    "Evaluation": "adjoint",
    "Rollout": "adjoint",
    "TrackedPoses": "adjoint",
    "evaluate": "adjoint",
    "rollout": "adjoint",
    "MotorProfiles": "bspline",
    "ProfileFit": "bspline",
    "ProfileParametrization": "bspline",
    "fit_profiles": "bspline",
    "num_segments": "bspline",
    "OptimizeError": "errors",
    "PlanCancelled": "errors",
    "ProfileError": "errors",
    "ShapingError": "errors",
    "TimeBudgetError": "errors",
    "WeightSyntaxError": "errors",
    "XM430_W210": "limits",
    "MotorLimits": "limits",
    "ServoSpec": "limits",
    "TorqueReport": "limits",
    "VelocityPenalty": "limits",
    "check_profile_limits": "limits",
    "parameter_bounds": "limits",
    "torque_report": "limits",
    "velocity_hull_bound": "limits",
    "MotorRegularizer": "objective",
    "RegularizerValue": "objective",
    "TrackingObjective": "objective",
    "TrackingValue": "objective",
    "deviation_metrics": "objective",
    "OptimizationResult": "result",
    "Method": "solver_settings",
    "ProblemOptions": "solver_settings",
    "SolverOptions": "solver_settings",
    "WindowOptions": "solver_settings",
    "PlanProblem": "problem",
    "build_plan_problem": "problem",
    "limits_for": "problem",
    "optimize": "lbfgs",
    "optimize_windows": "windows",
    "integrate": "quadrature",
    "simpson_weights": "quadrature",
    "uniform_grid": "quadrature",
    "Shaper": "shaping",
    "VibrationEstimate": "shaping",
    "identify_from_trajectory": "shaping",
    "identify_vibration": "shaping",
    "shape_motion": "shaping",
    "zv_shaper": "shaping",
    "zvd_shaper": "shaping",
    "Targets": "targets",
    "quasi_static_targets": "targets",
    "TrackedBodyWeights": "weights",
    "WeightSchedule": "weights",
    "merge_tracked_weights": "weights",
    "parse_tracked_bodies": "weights",
    "parse_weight_option": "weights",
}

if TYPE_CHECKING:
    from retarget.optimize.adjoint import AdjointProblem, Evaluation, Rollout, TrackedPoses, evaluate, rollout
    from retarget.optimize.bspline import MotorProfiles, ProfileFit, ProfileParametrization, fit_profiles, num_segments
    from retarget.optimize.errors import (
        OptimizeError,
        PlanCancelled,
        ProfileError,
        ShapingError,
        TimeBudgetError,
        WeightSyntaxError,
    )
    from retarget.optimize.lbfgs import optimize
    from retarget.optimize.limits import (
        XM430_W210,
        MotorLimits,
        ServoSpec,
        TorqueReport,
        VelocityPenalty,
        check_profile_limits,
        parameter_bounds,
        torque_report,
        velocity_hull_bound,
    )
    from retarget.optimize.objective import (
        MotorRegularizer,
        RegularizerValue,
        TrackingObjective,
        TrackingValue,
        deviation_metrics,
    )
    from retarget.optimize.problem import PlanProblem, build_plan_problem, limits_for
    from retarget.optimize.quadrature import integrate, simpson_weights, uniform_grid
    from retarget.optimize.result import OptimizationResult
    from retarget.optimize.shaping import (
        Shaper,
        VibrationEstimate,
        identify_from_trajectory,
        identify_vibration,
        shape_motion,
        zv_shaper,
        zvd_shaper,
    )
    from retarget.optimize.solver_settings import Method, ProblemOptions, SolverOptions, WindowOptions
    from retarget.optimize.targets import Targets, quasi_static_targets
    from retarget.optimize.weights import (
        TrackedBodyWeights,
        WeightSchedule,
        merge_tracked_weights,
        parse_tracked_bodies,
        parse_weight_option,
    )
    from retarget.optimize.windows import optimize_windows


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "AdjointProblem",
    "Evaluation",
    "Method",
    "MotorLimits",
    "MotorProfiles",
    "MotorRegularizer",
    "OptimizationResult",
    "OptimizeError",
    "PlanCancelled",
    "PlanProblem",
    "ProblemOptions",
    "ProfileError",
    "ProfileFit",
    "ProfileParametrization",
    "RegularizerValue",
    "Rollout",
    "ServoSpec",
    "Shaper",
    "ShapingError",
    "SolverOptions",
    "Targets",
    "TimeBudgetError",
    "TorqueReport",
    "TrackedBodyWeights",
    "TrackedPoses",
    "TrackingObjective",
    "TrackingValue",
    "VelocityPenalty",
    "VibrationEstimate",
    "WeightSchedule",
    "WeightSyntaxError",
    "WindowOptions",
    "XM430_W210",
    "build_plan_problem",
    "check_profile_limits",
    "deviation_metrics",
    "evaluate",
    "fit_profiles",
    "identify_from_trajectory",
    "optimize_windows",
    "identify_vibration",
    "integrate",
    "limits_for",
    "merge_tracked_weights",
    "num_segments",
    "optimize",
    "parameter_bounds",
    "parse_tracked_bodies",
    "parse_weight_option",
    "quasi_static_targets",
    "rollout",
    "shape_motion",
    "simpson_weights",
    "torque_report",
    "uniform_grid",
    "velocity_hull_bound",
    "zv_shaper",
    "zvd_shaper",
]
