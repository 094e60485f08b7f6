"""Bring up the fit_rig: ``ros2 launch retarget fit_rig.launch.py [hardware:=PORT] [planner:=true|false]
[mocap:=twin|natnet|none]``.

Includes the shared ``robot.launch.py`` with ``robot:=fit_rig``; see it for the arguments and the node set.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource

ROBOT = "fit_rig"


def generate_launch_description():
    """The shared robot launch with robot:=fit_rig; other arguments pass through from the command line."""
    shared = os.path.join(get_package_share_directory("retarget"), "launch", "robot.launch.py")
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(shared),
                                 launch_arguments={"robot": ROBOT}.items()),
    ])
