"""The optimizer: motor profiles, quadrature and weights, objective terms, servo limits and input-shaping baselines.

Built here (no simulator needed): :mod:`~retarget.optimize.bspline` (C² cubic B-spline motor profiles, basis
matrices, parametrization with rest end conditions, least-squares fit), :mod:`~retarget.optimize.quadrature`
(Simpson weights), :mod:`~retarget.optimize.weights` (time-varying weights, tracked bodies from YAML and command
line), :mod:`~retarget.optimize.objective` (tracking term and its partial derivatives, regularizers),
:mod:`~retarget.optimize.limits` (position bounds, speed penalty, limit and torque checks) and
:mod:`~retarget.optimize.shaping` (ZV/ZVD shapers, vibration identification).

The adjoint gradient of the BDF2 simulation and the L-BFGS driver (``plan``) come with the simulator; the ROS planner
node looks for ``retarget.optimize.plan`` and reports "not available" until it exists.
"""
from retarget.optimize.bspline import MotorProfiles, ProfileFit, ProfileParametrization, fit_profiles, num_segments
from retarget.optimize.errors import OptimizeError, ProfileError, ShapingError, WeightSyntaxError
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
from retarget.optimize.quadrature import integrate, simpson_weights, uniform_grid
from retarget.optimize.shaping import (
    Shaper,
    VibrationEstimate,
    identify_from_trajectory,
    identify_vibration,
    shape_motion,
    zv_shaper,
    zvd_shaper,
)
from retarget.optimize.weights import (
    TrackedBodyWeights,
    WeightSchedule,
    merge_tracked_weights,
    parse_tracked_bodies,
    parse_weight_option,
)

__all__ = [
    "XM430_W210",
    "MotorLimits",
    "MotorProfiles",
    "MotorRegularizer",
    "OptimizeError",
    "ProfileError",
    "ProfileFit",
    "ProfileParametrization",
    "RegularizerValue",
    "ServoSpec",
    "Shaper",
    "ShapingError",
    "TorqueReport",
    "TrackedBodyWeights",
    "TrackingObjective",
    "TrackingValue",
    "VelocityPenalty",
    "VibrationEstimate",
    "WeightSchedule",
    "WeightSyntaxError",
    "check_profile_limits",
    "deviation_metrics",
    "fit_profiles",
    "identify_from_trajectory",
    "identify_vibration",
    "integrate",
    "merge_tracked_weights",
    "num_segments",
    "parameter_bounds",
    "parse_tracked_bodies",
    "parse_weight_option",
    "shape_motion",
    "simpson_weights",
    "torque_report",
    "uniform_grid",
    "velocity_hull_bound",
    "zv_shaper",
    "zvd_shaper",
]
