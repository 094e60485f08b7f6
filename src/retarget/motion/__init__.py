"""Motions: the :class:`Motion` type, its file formats, limits, and BVH character animation.

Formats (read and write, atomic writes): CSV, JSON, JointTrajectory (dict / YAML / duck-typed messages),
keyframes YAML, rosbag2 (JointTrajectory and JointState topics). :func:`load_motion` and :func:`save_motion`
dispatch on the file. BVH reading and forward kinematics are in :mod:`retarget.motion.bvh`.
"""
from retarget.motion.errors import BvhError, JointMismatchError, MotionFormatError, MotionLimitError
from retarget.motion.io import FORMATS, detect_format, load_motion, save_motion
from retarget.motion.keyframes import Keyframes, read_keyframes
from retarget.motion.limits import JointLimit, LimitViolation, as_joint_limits
from retarget.motion.motion import INTERPOLATIONS, Motion
from retarget.motion.trajectory import motion_from_trajectory, motion_to_trajectory_dict

__all__ = [
    "FORMATS",
    "INTERPOLATIONS",
    "BvhError",
    "JointLimit",
    "JointMismatchError",
    "Keyframes",
    "LimitViolation",
    "Motion",
    "MotionFormatError",
    "MotionLimitError",
    "as_joint_limits",
    "detect_format",
    "load_motion",
    "motion_from_trajectory",
    "motion_to_trajectory_dict",
    "read_keyframes",
    "save_motion",
]
