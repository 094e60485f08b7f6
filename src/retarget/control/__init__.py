"""retarget.control: trajectory execution with joint_trajectory_controller semantics, free of ROS.

Validation of FollowJointTrajectory goals (:func:`validate_trajectory`), time sampling with linear / cubic /
quintic segments (:class:`TrajectorySampler`), tolerances (:func:`resolve_tolerances`), the per-tick execution of
one goal (:class:`TrajectoryExecution`), URDF limits and a first-order servo stand-in for the servo twin node.
"""
from retarget.control.errors import ErrorCode, TrajectoryRejected
from retarget.control.execution import ExecutionState, ExecutionStatus, ExecutionStep, TrajectoryExecution, start_state
from retarget.control.interpolation import TrajectorySample, TrajectorySampler, segment_coefficients
from retarget.control.servo_model import ServoState, step_servos
from retarget.control.setpoints import CommandFollower
from retarget.control.tolerances import (GoalTolerance, Tolerances, ToleranceViolation, check_tolerance,
                                         resolve_tolerances)
from retarget.control.trajectory import (GoalPoint, Trajectory, check_first_segment, late_start_note,
                                        validate_trajectory)
from retarget.control.urdf_limits import limits_from_urdf

__all__ = [
    "CommandFollower", "ErrorCode", "ExecutionState", "ExecutionStatus", "ExecutionStep", "GoalPoint",
    "GoalTolerance", "ServoState", "ToleranceViolation", "Tolerances", "Trajectory", "TrajectoryExecution",
    "TrajectoryRejected", "TrajectorySample", "TrajectorySampler", "check_first_segment", "check_tolerance",
    "late_start_note", "limits_from_urdf", "resolve_tolerances", "segment_coefficients", "start_state", "step_servos",
    "validate_trajectory",
]
