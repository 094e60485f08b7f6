"""Bring up a retarget robot: Dynamixel driver (real port or emulated bus), trajectory server, planner, mocap.

    ros2 launch retarget robot.launch.py robot:=drummer [hardware:=/dev/ttyUSB0] [baud:=1000000] [planner:=true]
        [mocap:=twin|natnet|none] [mocap_server:=10.0.0.2] [mocap_local:=10.0.0.5] [namespace:=/drummer]

The per-robot files (``drummer.launch.py`` ...) include this one with ``robot`` set. The node set and every
parameter come from ``retarget.ros.bringup.describe`` — the same description ``retarget up`` starts without
``ros2 launch`` — built from ``config/<robot>.yaml`` (description) and ``config/<robot>.params.yaml`` (ROS 2
parameters) in the package's share folder. With ``hardware`` empty
the emulated XM430-W210 bus runs first (``python -m retarget.dynamixel.emulator``); the nodes start once it
prints its ready line, and the whole launch shuts down if it exits. The run's temporary folder (pty link,
control socket) is removed at shutdown.
"""
import shutil
import sys
from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, EmitEvent, ExecuteProcess, OpaqueFunction,
                            RegisterEventHandler)
from launch.event_handlers import OnProcessExit, OnProcessIO, OnShutdown
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

PACKAGE = "retarget"

ARGUMENTS = (
    ("robot", "drummer", "robot name: config/<robot>.yaml of the retarget package"),
    ("hardware", "", "serial port of the real servos (e.g. /dev/ttyUSB0); empty: the emulated servo bus"),
    ("baud", "", "the servos' baud rate [bit/s] (empty: the params file's baudrate, else 1000000)"),
    ("planner", "true", "start the planner node (true|false)"),
    ("mocap", "twin", "mocap node source: twin (simulated), natnet (OptiTrack Motive) or none"),
    ("mocap_server", "", "with mocap:=natnet, Motive's IP address (empty: the params file's, else 127.0.0.1)"),
    ("mocap_local", "", "with mocap:=natnet, this machine's IP address on the mocap network"),
    ("namespace", "", "ROS namespace of every node (empty or /name)"),
    ("twin", "servo", "emulated servo dynamics: servo (each servo's loop alone), or reduced (the servos' loops run "
                      "in the reduced simulation, whose poses feed the mocap twin; docs/twin.md)"),
    ("reduced", "", "reduced model file for twin:=reduced and the planner (empty: the newest fresh one found)"),
)


def _truthy(text):
    return text.strip().lower() in ("1", "true", "yes", "on")


def _parameters(spec):
    """A node's parameters for launch_ros; strings (the URDF) stay strings instead of being parsed as YAML."""
    return {key: ParameterValue(value, value_type=str) if isinstance(value, str) else value
            for key, value in spec.parameters.items()}


def _node(spec):
    return Node(package=PACKAGE, executable=spec.executable, name=spec.name, namespace=spec.namespace or "",
                parameters=[_parameters(spec)], remappings=list(spec.remappings), output="screen",
                emulate_tty=True)


def launch_setup(context, *args, **kwargs):
    """Evaluate the launch arguments and return the robot's actions (called by OpaqueFunction)."""
    from retarget.ros.bringup import describe

    def arg(name):
        return LaunchConfiguration(name).perform(context)

    description = Path(get_package_share_directory(PACKAGE)) / "config" / f"{arg('robot')}.yaml"
    plan = describe(description, hardware=arg("hardware") or None, planner=_truthy(arg("planner")),
                    mocap=arg("mocap"), namespace=arg("namespace"), twin=arg("twin"),
                    reduced=arg("reduced") or None, baudrate=int(arg("baud")) if arg("baud") else None,
                    mocap_server=arg("mocap_server") or None, mocap_local=arg("mocap_local") or None)
    nodes = [_node(spec) for spec in plan.nodes]
    cleanup = []
    if plan.temporary_run_dir:
        cleanup.append(RegisterEventHandler(OnShutdown(
            on_shutdown=lambda event, context: shutil.rmtree(plan.run_dir, ignore_errors=True))))
    if not plan.processes:
        return nodes + cleanup
    actions = []
    for spec in plan.processes:
        process = ExecuteProcess(cmd=spec.argv(sys.executable), name=spec.name, output="screen")
        actions.append(process)
        actions.append(RegisterEventHandler(OnProcessExit(
            target_action=process,
            on_exit=[EmitEvent(event=Shutdown(reason=f"{spec.name} exited"))])))
    started = []

    def start_nodes_when_ready(event):
        # The emulator prints exactly one line once the pty link and the control socket exist.
        if started or b'"control"' not in event.text:
            return None
        started.append(True)
        return nodes

    actions.append(RegisterEventHandler(OnProcessIO(target_action=actions[0],
                                                    on_stdout=start_nodes_when_ready)))
    return actions + cleanup


def generate_launch_description():
    """The launch arguments and the robot's node set."""
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text)
         for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=launch_setup)])
