"""Bring-up: one description of a robot's node set, used by the launch files and by ``retarget up``.

:func:`describe` computes, from the robot's description (``config/<robot>.yaml``) and ROS 2 params file
(``config/<robot>.params.yaml``) and a few options, which
processes run and with which parameters: the emulated servo bus (unless a hardware port is given), the
Dynamixel driver, the trajectory server, the planner and the mocap node. ``launch/robot.launch.py`` turns that
description into ``launch_ros`` actions; :class:`Supervisor` (``retarget up``, ``make demo``) starts it as
child processes, waits until it is ready, forwards the logs and stops everything cleanly. Both read the same
:class:`Bringup`, so the two ways of starting a robot cannot drift apart.

This module imports no ROS at import time (the launch files import it inside ``ros2 launch``); only
:meth:`Supervisor.wait_ready` uses rclpy.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from retarget.errors import InputError, RetargetError
from retarget.processes import die_with_parent

if TYPE_CHECKING:
    from retarget.twin.perturbation import TwinPerturbation

__all__ = [
    "BRINGUP_OVERRIDES",
    "Bringup",
    "BringupError",
    "ChildExit",
    "EMULATED_BUS_OVERRIDES",
    "MOCAP_SOURCES",
    "NodeSpec",
    "ProcessSpec",
    "Supervisor",
    "TWIN_DYNAMICS",
    "describe",
    "fastdds_shm_files",
]

#: Values of the ``mocap`` option: the node's ``source`` parameter, or ``none`` for no mocap node.
MOCAP_SOURCES: tuple[str, ...] = ("twin", "natnet", "none")

#: Servo dynamics the emulated bus can run. ``servo``: each servo's position loop on its rotor alone (the robot's
#: servo parameters, no load); ``reduced``: the servos' loops run in the robot's reduced simulation, which reports
#: their shafts and whose body poses feed the mocap twin (docs/twin.md). Without a reduced model ``reduced`` falls
#: back to ``servo`` (see :attr:`Bringup.notes`).
TWIN_DYNAMICS: tuple[str, ...] = ("servo", "reduced")

#: Driver parameters on the emulated bus. The pty emulator is a Python process sharing two cores with the
#: nodes: it answers within microseconds (no Return Delay Time needed). It misses a reply now and then under load,
#: which the driver's ``comm_error_window`` retries as on a real bus.
EMULATED_BUS_OVERRIDES: Mapping[str, object] = {"return_delay_us": 0.0}

#: Parameters every bring-up sets on top of the params YAML, per node.
BRINGUP_OVERRIDES: Mapping[str, Mapping[str, object]] = {
    # A 13-servo Sync Read takes a while on a busy host; 2 s without joint_states still means a dead driver.
    "trajectory_server": {"state_timeout": 2.0},
}

#: The reduced twin's default max lag [s] (the emulator's ``--twin-max-lag``).
TWIN_MAX_LAG_S = 5.0

_NAMESPACE = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)*$")


class BringupError(RetargetError):
    """A bring-up failed: a process did not start, never became ready, or died.

    Attributes:
        process: Name of the process concerned (``"dynamixel_driver"``), or None for the whole set.
        log_tail: Its last output lines, for debugging.
    """

    def __init__(self, message: str, process: str | None = None, log_tail: str = "") -> None:
        self.process = process
        self.log_tail = log_tail
        super().__init__(message + (f"\n--- last output of {process} ---\n{log_tail}" if log_tail else ""))


@dataclass(frozen=True)
class NodeSpec:
    """A ROS 2 node of the set.

    Attributes:
        name: Node name (``trajectory_server``).
        module: Python module run with ``python -m`` (``retarget.ros.trajectory_server``).
        executable: Console script of the ``retarget`` package (``ros2 launch`` uses it).
        parameters: Every parameter the node gets: the robot's ``/**: ros__parameters`` with the bring-up's
            values (port, robot_description, ...) on top. The robot YAML itself cannot be handed to rcl as a
            params file: its ``retarget:`` section is not a node, and rcl rejects the whole file.
        namespace: ROS namespace (``""`` or ``/name``).
        remappings: ``(from, to)`` topic/action remappings.
    """

    name: str
    module: str
    executable: str
    parameters: Mapping[str, object] = field(default_factory=dict)
    namespace: str = ""
    remappings: tuple[tuple[str, str], ...] = ()

    @property
    def fully_qualified_name(self) -> str:
        """``/namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def argv(self, python: str, params_file: Path) -> list[str]:
        """The command line starting this node with ``python -m``.

        Args:
            python: The interpreter.
            params_file: A file holding :attr:`parameters` (written from :meth:`params_yaml`).
        """
        args = [python, "-m", self.module, "--ros-args", "-r", f"__node:={self.name}"]
        if self.namespace:
            args += ["-r", f"__ns:={self.namespace}"]
        args += ["--params-file", str(params_file)]
        for source, target in self.remappings:
            args += ["-r", f"{source}:={target}"]
        return args

    def params_yaml(self) -> str:
        """:attr:`parameters` as a ROS params file keyed to this node."""
        import yaml

        return yaml.safe_dump({self.fully_qualified_name: {"ros__parameters": dict(self.parameters)}},
                              sort_keys=True, width=1 << 20)


@dataclass(frozen=True)
class ProcessSpec:
    """A plain (non-ROS) process of the set, started before the nodes.

    Attributes:
        name: Label in logs (``dynamixel_emulator``).
        module: Python module run with ``python -m``.
        args: Its command-line arguments.
        ready_path: A file the process creates once it serves (waited for before the nodes start).
    """

    name: str
    module: str
    args: tuple[str, ...]
    ready_path: Path | None = None

    def argv(self, python: str) -> list[str]:
        """The command line starting this process."""
        return [python, "-m", self.module, *self.args]


@dataclass(frozen=True)
class Bringup:
    """A robot's node set, as computed by :func:`describe`.

    Attributes:
        robot: Robot name (``robot_name`` of the params YAML).
        params_file: The robot's ROS 2 params file (its ``/**: ros__parameters`` are in every node's parameters).
        joint_names: The robot's motors in wire order, ``(m,)``.
        dynamixel_ids: Servo ID per joint, ``(m,)``.
        port: Serial device the driver opens: the hardware port, or the emulated bus's pty link.
        emulated: Whether the servos are the emulated bus.
        control_socket: The emulator's fault-injection socket (emulated bus only).
        run_dir: Folder for this run's files (pty link, override params files).
        namespace: ROS namespace of every node.
        processes: Non-ROS processes, started first, stopped last.
        nodes: ROS nodes.
        temporary_run_dir: :attr:`run_dir` was made for this run (removed by :meth:`Supervisor.stop`).
        twin: The servo dynamics that will run (``reduced`` may have fallen back to ``servo``).
        twin_channel: The pose channel the reduced simulation writes and the mocap node reads, or None.
        notes: Lines to show the user (e.g. why the twin fell back to ``servo``).
    """

    robot: str
    params_file: Path
    joint_names: tuple[str, ...]
    dynamixel_ids: tuple[int, ...]
    port: str
    emulated: bool
    control_socket: Path | None
    run_dir: Path
    namespace: str
    processes: tuple[ProcessSpec, ...]
    nodes: tuple[NodeSpec, ...]
    temporary_run_dir: bool = False
    twin: str = "servo"
    twin_channel: Path | None = None
    notes: tuple[str, ...] = ()

    def node(self, name: str) -> NodeSpec:
        """The node called ``name``.

        Raises:
            KeyError: No such node in the set.
        """
        for spec in self.nodes:
            if spec.name == name:
                return spec
        raise KeyError(f"no node {name!r} in the {self.robot} bring-up ({[n.name for n in self.nodes]})")

    def has_node(self, name: str) -> bool:
        """Whether the set has a node called ``name``."""
        return any(spec.name == name for spec in self.nodes)

    @property
    def follow_joint_trajectory_action(self) -> str:
        """Fully qualified FollowJointTrajectory action of the trajectory server."""
        return f"{self.namespace}/trajectory_server/follow_joint_trajectory"

    @property
    def retarget_action(self) -> str | None:
        """Fully qualified Retarget action of the planner, or None without a planner."""
        return f"{self.namespace}/planner/retarget" if self.has_node("planner") else None

    @property
    def joint_states_topic(self) -> str:
        """Fully qualified joint_states topic."""
        return f"{self.namespace}/joint_states"

    def summary(self) -> list[str]:
        """One line per process: what runs and with which key settings."""
        lines = [f"{p.name}: python -m {p.module} {' '.join(p.args)}" for p in self.processes]
        lines += list(self.notes)
        from retarget.model.library import read_ros_parameters

        robot = read_ros_parameters(self.params_file)
        for spec in self.nodes:
            keys = {k: v for k, v in spec.parameters.items() if k != "robot_description" and k not in robot}
            if "robot_description" in spec.parameters:
                keys["robot_description"] = f"<URDF, {len(spec.parameters['robot_description'])} chars>"
            lines.append(f"{spec.fully_qualified_name}: {spec.executable}, {self.params_file.name} + {keys}")
        return lines


def describe(robot: str | Path, *, hardware: str | None = None, planner: bool = True, mocap: str = "twin",
             namespace: str = "", run_dir: Path | None = None, twin: str = "servo",
             reduced: str | Path | None = None, python: str | None = None,
             plan_time_budget: float = 0.0, verify_model: str | Path | None = None,
             plan_method: str | None = None, baudrate: int | None = None, mocap_server: str | None = None,
             mocap_local: str | None = None, perturb: TwinPerturbation | None = None,
             twin_dt: float | None = None, twin_max_lag: float | None = None,
             planner_parameters: Mapping[str, object] | None = None) -> Bringup:
    """Compute a robot's node set.

    Args:
        robot: Robot name (``"drummer"``) or path to its params YAML.
        hardware: Serial port of the real servos (``/dev/ttyUSB0``); None or ``""``: the emulated bus.
        planner: Start the planner node.
        mocap: ``twin`` (simulated mocap), ``natnet`` (OptiTrack Motive: ``mocap_server``) or ``none``.
        namespace: ROS namespace for every node (``""`` or ``/name``).
        run_dir: Folder for the run's files; a new temporary folder when None (emulated bus: holds the pty
            link).
        twin: Dynamics of the emulated servos, one of :data:`TWIN_DYNAMICS`. ``reduced`` needs a reduced model
            (``reduced``, else the planner's cache; :func:`retarget.twin.find_reduced_model`, file checks only);
            without one it falls back to ``servo`` and says why in :attr:`Bringup.notes` (and the log).
        reduced: Reduced model file (``.npz`` from ``retarget reduce`` or cached by ``retarget plan``) for ``twin="reduced"`` and the
            planner's ``reduced_file`` (None: each finds the newest fresh model itself).
        python: Interpreter for the processes (default: this one); only used in the emulator's command.
        plan_time_budget: The planner node's ``time_budget`` [s] (0: the params file's, else none).
        verify_model: The planner node's ``verify_model`` (a verification model's file, ``full``, ``none``;
            None: the params file's, else ``auto``).
        plan_method: The planner node's ``method`` (``lbfgs``, ``gauss-newton``; None: the params file's).
        baudrate: The servos' rate [bit/s]: the driver's ``baudrate`` and the emulated bus's Baud Rate (None: the
            params file's ``baudrate``, else 1 000 000).
        mocap_server: Motive's IP address, the mocap node's ``server_address`` (natnet only; None: the params
            file's, else the node's default 127.0.0.1).
        mocap_local: This machine's address on the mocap network, the node's ``local_address`` (natnet only).
        perturb: How the reduced twin differs from its model (:mod:`retarget.twin.perturbation`: the emulator's
            ``--twin-perturb``; its ``marker_noise`` the simulated mocap's noise). Needs the emulated bus,
            ``twin="reduced"`` with a model, and for ``marker_noise`` the simulated mocap (``mocap="twin"``, or
            ``"natnet"`` served by the twin).
        twin_dt: The reduced twin's engine step [s] (the emulator's ``--twin-dt``; None: 1 ms).
        twin_max_lag: How far the reduced twin's simulation may run behind the bus before it restarts at rest [s]
            (the emulator's ``--twin-max-lag``; None: 5 s). The trajectory server's ``goal_time_tolerance`` is
            raised to it: the bus reports the simulation's shafts, as late as the simulation runs.
        planner_parameters: Further planner parameters over the params file's (the demo's ``allow_training``,
            ``shipped_model``).

    Returns:
        The node set.

    Raises:
        UnknownNameError: Unknown robot.
        InputError: Bad option, the params YAML lacks joint_names/dynamixel_ids of equal length, or names an
            unknown ``servo_model``.
    """
    _check_options(hardware=hardware, mocap=mocap, namespace=namespace, twin=twin, mocap_server=mocap_server,
                   mocap_local=mocap_local, twin_dt=twin_dt, twin_max_lag=twin_max_lag, perturb=perturb)
    config = _robot_config(robot, baudrate)
    temporary = run_dir is None
    run_dir = Path(tempfile.mkdtemp(prefix=f"retarget-{config.name}-")) if run_dir is None else Path(run_dir)
    emulated = not hardware
    processes: list[ProcessSpec] = []
    notes: list[str] = []
    reduced_twin: _ReducedTwin | None = None
    if emulated and twin == "reduced":
        reduced_twin = _reduced_twin(config.description, reduced, run_dir, perturb=perturb, twin_dt=twin_dt,
                                     twin_max_lag=twin_max_lag, notes=notes)
    twin = "reduced" if reduced_twin is not None else "servo"
    channel = None if reduced_twin is None else reduced_twin.channel
    if emulated:
        link, control = run_dir / "ttyDXL", run_dir / "ttyDXL.ctl"
        twin_args = () if reduced_twin is None else reduced_twin.args
        processes.append(_emulator_process(config, link, control, twin_args))
        port = str(link)
    else:
        control, port = None, str(hardware)
    driver = {**(EMULATED_BUS_OVERRIDES if emulated else {}), "port": port, "baudrate": config.rate}

    reference = _robot_reference(config)

    def node(node_name: str, module: str, executable: str, overrides: Mapping[str, object]) -> NodeSpec:
        merged = {**config.params, "robot_name": reference, **BRINGUP_OVERRIDES.get(node_name, {}), **overrides}
        return NodeSpec(node_name, module, executable, merged, namespace)

    nodes = [node("dynamixel_driver", "retarget.ros.dynamixel_driver", "dynamixel_driver", driver),
             node("trajectory_server", "retarget.ros.trajectory_server", "trajectory_server",
                  _server_parameters(config, twin, twin_max_lag))]
    if planner:
        nodes.append(node("planner", "retarget.ros.planner", "planner", _planner_parameters(
            reference, namespace, plan_time_budget=plan_time_budget, reduced=reduced, verify_model=verify_model,
            plan_method=plan_method, planner_parameters=planner_parameters)))
    natnet_ports = _simulated_natnet(mocap, channel, perturb=perturb, mocap_server=mocap_server,
                                     mocap_local=mocap_local, processes=processes, notes=notes)
    if mocap == "twin" and channel is None:
        notes.append(f"mocap: the twin plays its built-in step test (bodies servo and tip), not {config.name}'s "
                     "tracked bodies: `--twin reduced` feeds it the robot's simulation (docs/twin.md)")
    if mocap != "none":
        nodes.append(node("mocap", "retarget.ros.mocap_node", "mocap", _mocap_parameters(
            mocap, channel, natnet_ports, perturb=perturb, mocap_server=mocap_server, mocap_local=mocap_local)))
    return Bringup(robot=config.name, params_file=config.params_file, joint_names=config.joints,
                   dynamixel_ids=config.ids, port=port, emulated=emulated, control_socket=control, run_dir=run_dir,
                   namespace=namespace, processes=tuple(processes), nodes=tuple(nodes), temporary_run_dir=temporary,
                   twin=twin, twin_channel=channel, notes=tuple(notes))


def _check_options(*, hardware: str | None, mocap: str, namespace: str, twin: str, mocap_server: str | None,
                   mocap_local: str | None, twin_dt: float | None, twin_max_lag: float | None,
                   perturb: TwinPerturbation | None) -> None:
    """Refuse :func:`describe`'s options that contradict each other or name nothing known.

    Raises:
        InputError: The first bad option.
    """
    if mocap not in MOCAP_SOURCES:
        raise InputError(f"mocap {mocap!r}: expected one of {', '.join(MOCAP_SOURCES)}")
    if twin not in TWIN_DYNAMICS:
        raise InputError(f"twin dynamics {twin!r} not available; available: {', '.join(TWIN_DYNAMICS)}")
    if namespace and not _NAMESPACE.match(namespace):
        raise InputError(f"namespace {namespace!r}: expected '' or /name[/name...]")
    if (mocap_server or mocap_local) and mocap != "natnet":
        raise InputError(f"a mocap server or local address is for mocap natnet, not {mocap!r}")
    for name, value in (("twin_dt", twin_dt), ("twin_max_lag", twin_max_lag)):
        if value is not None and not value > 0:
            raise InputError(f"{name} must be positive [s], got {value}")
    if perturb is not None and (hardware or twin != "reduced"):
        raise InputError("a perturbation (--perturb) is for the reduced twin: the emulated bus with --twin reduced")
    if perturb is not None and perturb.marker_noise is not None and mocap not in ("twin", "natnet"):
        raise InputError(f"the perturbation's marker_noise is the simulated mocap's noise: it needs --mocap twin, not "
                         f"{mocap!r}")


@dataclass(frozen=True)
class _RobotConfig:
    """What :func:`describe` reads from a robot's files.

    Attributes:
        description: The robot's description YAML.
        params_file: Its ROS 2 params file.
        params: The params file's ``/**: ros__parameters`` (file settings and ``twin_motion`` relative to its
            folder).
        name: Robot name.
        joints: Motor names in wire order, ``(m,)``.
        ids: Servo ID per joint, ``(m,)``.
        servo_model: The servos' control-table model (the emulated bus answers as it).
        rate: The bus's baud rate [bit/s].
    """

    description: Path
    params_file: Path
    params: Mapping[str, object]
    name: str
    joints: tuple[str, ...]
    ids: tuple[int, ...]
    servo_model: str
    rate: int


def _robot_config(robot: str | Path, baudrate: int | None) -> _RobotConfig:
    """Read and check a robot's description and params file (``baudrate``: :func:`describe`'s option).

    Raises:
        UnknownNameError: Unknown robot.
        InputError: No joint_names/dynamixel_ids of equal length, an unknown ``servo_model`` or baud rate.
    """
    from retarget.dynamixel.control_table import (DEFAULT_BAUD_RATE, DEFAULT_SERVO_MODEL, baud_rate_index,
                                                  load_control_table)
    from retarget.model.library import read_ros_parameters, resolve_params, resolve_robot
    from retarget.planning.settings import path_from, with_files_from

    description = resolve_robot(robot).resolve()
    params_file = resolve_params(description).resolve()
    params = with_files_from(read_ros_parameters(params_file), params_file.parent)
    motion = params.get("twin_motion")  # the mocap twin's poses: a file unless builtin:… or live:…
    if isinstance(motion, str) and motion and not motion.startswith(("builtin:", "live:")):
        params["twin_motion"] = path_from(params_file.parent, motion)
    joints = tuple(str(j) for j in params.get("joint_names") or [])
    ids = tuple(int(i) for i in params.get("dynamixel_ids") or [])
    if not joints or len(ids) != len(joints):
        raise InputError(f"{params_file}: need joint_names and one dynamixel_ids entry per joint "
                         f"({len(joints)} joints, {len(ids)} ids)")
    name = str(params.get("robot_name") or description.stem)
    # The driver reads servo_model from the same parameters; the emulated bus must answer as that model.
    try:
        servo_model = load_control_table(model=str(params.get("servo_model") or DEFAULT_SERVO_MODEL)).model
    except InputError as exc:
        raise InputError(f"{params_file}: servo_model: {exc}") from None
    rate = int(baudrate or params.get("baudrate") or DEFAULT_BAUD_RATE)
    try:
        baud_rate_index(rate)
    except InputError as exc:
        raise InputError(f"{params_file if baudrate is None else 'baud'}: {exc}") from None
    return _RobotConfig(description, params_file, params, name, joints, ids, servo_model, rate)


def _robot_reference(config: _RobotConfig) -> str:
    """How the nodes find the robot (their ``robot_name``): its name when that names this robot in the library,
    else the path of its description (a robot of the user's own, which the nodes do not find by name)."""
    from retarget.model.library import resolve_robot

    try:
        if resolve_robot(config.name).resolve() == config.description:
            return config.name
    except InputError:
        pass
    return str(config.description)


@dataclass(frozen=True)
class _ReducedTwin:
    """The reduced twin a bring-up runs.

    Attributes:
        channel: The pose channel the simulation writes.
        args: The emulator's ``--twin ...`` arguments.
    """

    channel: Path
    args: tuple[str, ...]


def _reduced_twin(description: Path, reduced: str | Path | None, run_dir: Path, *, perturb: TwinPerturbation | None,
                  twin_dt: float | None, twin_max_lag: float | None, notes: list[str]) -> _ReducedTwin | None:
    """The reduced twin for ``description``, or None (the servos' own loops) without a reduced model.

    Appends to ``notes`` what runs, or why the twin fell back to the servos' loops (also logged).

    Raises:
        InputError: A perturbation was asked for and there is no model to perturb.
    """
    from retarget.twin.errors import TwinModelUnavailable
    from retarget.twin.model import find_reduced_model

    try:
        source = find_reduced_model(description, reduced)
    except TwinModelUnavailable as exc:
        if perturb is not None:  # asked for a twin that differs from the model: there is none to perturb
            raise InputError(f"--perturb needs the reduced twin's model: {exc.reason}") from None
        notes.append(f"twin: the servos' own loops, no reduced simulation ({exc.reason})")
        logging.getLogger(__name__).warning(notes[-1])
        return None
    channel = run_dir / "twin.poses"
    twin_args: tuple[str, ...] = ("--twin", "reduced", "--reduced", str(source.path), "--twin-channel", str(channel))
    notes.append(f"twin: reduced simulation, model {source.describe()}, poses on {channel}")
    if twin_dt is not None:
        twin_args += ("--twin-dt", repr(float(twin_dt)))
    if twin_max_lag is not None:
        twin_args += ("--twin-max-lag", repr(float(twin_max_lag)))
    if perturb is not None and perturb.to_text():
        twin_args += ("--twin-perturb", perturb.to_text())
        notes.append(f"twin: perturbed ({perturb.to_text()}; docs/twin.md)")
    return _ReducedTwin(channel, twin_args)


def _emulator_process(config: _RobotConfig, link: Path, control: Path, twin_args: tuple[str, ...]) -> ProcessSpec:
    """The emulated servo bus serving ``link``, with its control socket ``control`` (``twin_args``: the reduced
    twin's, or none)."""
    return ProcessSpec(
        # The twin builds on the emulator: its entry runs the emulator with --twin reduced available.
        "dynamixel_emulator", "retarget.twin.emulator" if twin_args else "retarget.dynamixel.emulator",
        # --robot: the emulated servos are the robot's (its servo: section), mapped by its params file.
        ("--ids", ",".join(map(str, config.ids)), "--model", config.servo_model, "--robot", str(config.description),
         "--link", str(link), "--control", str(control), "--return-delay-us", "0", "--baud", str(config.rate),
         "--json", *twin_args),
        ready_path=control)


def _server_parameters(config: _RobotConfig, twin: str, twin_max_lag: float | None) -> dict[str, object]:
    """The trajectory server's parameters over the params file's (``twin``: the dynamics that run)."""
    from retarget.model.library import urdf_xml

    server: dict[str, object] = {"robot_description": urdf_xml(config.description)}
    if twin == "reduced":  # a goal is judged on the simulated shafts, which arrive as late as the simulation runs
        server["goal_time_tolerance"] = max(float(config.params.get("goal_time_tolerance") or 0.0),
                                            TWIN_MAX_LAG_S if twin_max_lag is None else float(twin_max_lag))
    return server


def _simulated_natnet(mocap: str, channel: Path | None, *, perturb: TwinPerturbation | None,
                      mocap_server: str | None, mocap_local: str | None, processes: list[ProcessSpec],
                      notes: list[str]) -> tuple[int, int] | None:
    """The command and data ports of a simulated Motive streaming the twin's bodies from ``channel``, or None
    without one; appends its process to ``processes`` and says so in ``notes`` (the rest: :func:`describe`'s).

    Raises:
        InputError: Marker noise asked of a real Motive.
    """
    # The emulated bus, the reduced twin and natnet without a Motive address: a simulated Motive streams the twin.
    simulated_natnet = mocap == "natnet" and channel is not None and not (mocap_server or mocap_local)
    noise = None if perturb is None else perturb.marker_noise
    if noise is not None and mocap == "natnet" and not simulated_natnet:
        raise InputError("the perturbation's marker_noise is the simulated mocap's noise: a real Motive "
                         "(--mocap-server) has its own")
    if not simulated_natnet or channel is None:
        return None
    command_port, data_port = _free_udp_ports(2)
    processes.append(ProcessSpec(
        "mocap_twin_natnet", "retarget.mocap.twin_server",
        ("--channel", str(channel), "--command-port", str(command_port), "--data-port", str(data_port),
         *(("--position-noise", repr(float(noise))) if noise is not None else ()))))
    notes.append(f"mocap: a simulated Motive streams the twin's bodies over NatNet (127.0.0.1:{command_port}, "
                 f"data port {data_port})")
    return command_port, data_port


def _planner_parameters(name: str, namespace: str, *, plan_time_budget: float, reduced: str | Path | None,
                        verify_model: str | Path | None, plan_method: str | None,
                        planner_parameters: Mapping[str, object] | None) -> dict[str, object]:
    """The planner node's parameters over the params file's (arguments: :func:`describe`'s)."""
    planner_params: dict[str, object] = {"robot_name": name,
                                         "trajectory_server_action": f"{namespace}/trajectory_server/"
                                                                     "follow_joint_trajectory"}
    if plan_time_budget > 0:  # else the params file's (the drummer's and boxer's: 15 minutes)
        planner_params["time_budget"] = float(plan_time_budget)
    if reduced:
        planner_params["reduced_file"] = str(Path(reduced).expanduser().resolve())
    if verify_model:
        planner_params["verify_model"] = (str(Path(verify_model).expanduser().resolve())
                                          if str(verify_model).lower().endswith(".npz") else str(verify_model))
    if plan_method:
        planner_params["method"] = str(plan_method)
    planner_params.update(planner_parameters or {})
    return planner_params


def _mocap_parameters(mocap: str, channel: Path | None, natnet_ports: tuple[int, int] | None, *,
                      perturb: TwinPerturbation | None, mocap_server: str | None,
                      mocap_local: str | None) -> dict[str, object]:
    """The mocap node's parameters over the params file's (``natnet_ports``: the simulated Motive's command and
    data ports, None without one; the rest: :func:`describe`'s)."""
    mocap_params: dict[str, object] = {"source": mocap}
    if natnet_ports is not None:
        command_port, data_port = natnet_ports
        mocap_params.update(server_address="127.0.0.1", local_address="127.0.0.1", command_port=command_port,
                            data_port=data_port, multicast_address="")
    if mocap == "twin" and channel is not None:
        mocap_params["twin_motion"] = f"live:{channel}"
    if mocap == "twin" and perturb is not None and perturb.marker_noise is not None:
        mocap_params["twin_position_noise_m"] = float(perturb.marker_noise)
    if mocap_server:
        mocap_params["server_address"] = str(mocap_server)
    if mocap_local:
        mocap_params["local_address"] = str(mocap_local)
    return mocap_params


#: Where the simulated Motive's ports are drawn from: above the well-known ports, below Fast DDS's port space (7400 +
#: 250 × domain, up to 32 899 for domains 0–101) and, unless configured otherwise, the kernel's ephemeral range
#: (``net.ipv4.ip_local_port_range``, from 32 768). A port probed free there is not handed to another socket before
#: its server binds it: no socket that asks the kernel for any free port (the mocap client's own command socket, a
#: DDS participant's) gets one from this range, and DDS binds none of it.
NATNET_PORT_RANGE = (4000, 7400)


def _ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> range:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def _free_udp_ports(count: int, span: tuple[int, int] = NATNET_PORT_RANGE,
                    ephemeral: range | None = None) -> list[int]:
    """``count`` distinct UDP ports free on loopback now, drawn at random from ``span`` outside the ``ephemeral``
    range (:data:`NATNET_PORT_RANGE`; the kernel's range by default); ports the kernel chooses where ``span`` has
    too few free ones. Each is bound to check it, and all are released together."""
    import random
    import socket

    ephemeral = _ephemeral_ports() if ephemeral is None else ephemeral
    candidates = [port for port in range(*span) if port not in ephemeral]
    random.SystemRandom().shuffle(candidates)
    sockets: list[socket.socket] = []
    try:
        for port in [*candidates, *[0] * count]:
            if len(sockets) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def fastdds_shm_files(pids: set[int], shm: Path = Path("/dev/shm")) -> set[Path]:
    """Fast DDS shared-memory files owned by ``pids``.

    Fast DDS holds an ``flock`` on ``<segment>_el`` for as long as its process uses ``<segment>`` (that is how
    its own clean-up tells live segments from dead ones); ``/proc/locks`` names the holder. A process killed
    with SIGKILL leaves the segment, the ``_el`` file and (for ports) ``sem.<segment>_mutex`` behind.

    Args:
        pids: Process IDs, still alive (their locks are read now).
        shm: The shared-memory folder.

    Returns:
        The segment files, their ``_el`` lock files and port mutexes that those processes hold.
    """
    inodes: set[int] = set()
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            parts = line.split()
            # "1: FLOCK  ADVISORY  WRITE 29672 00:1b:8932 0 EOF"
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[4].isdigit() and int(parts[4]) in pids:
                inodes.add(int(parts[5].rsplit(":", 1)[-1]))
    except OSError:
        return set()
    found: set[Path] = set()
    for lock in shm.glob("fastdds_*_el"):
        try:
            if lock.stat().st_ino not in inodes:
                continue
        except OSError:
            continue
        segment = lock.with_name(lock.name[: -len("_el")])
        found.update({lock, segment, shm / f"sem.{segment.name}_mutex"})
    return found


#: In each child before exec: SIGINT (as from stop()) when the supervisor dies (e.g. SIGKILL).
_DIE_WITH_PARENT = die_with_parent(signal.SIGINT)


#: The line Python prints before a traceback (an uncaught exception, in any thread of the child).
_TRACEBACK = "Traceback (most recent call last):"
#: What a node's stop watchdog prints first (faulthandler.dump_traceback_later), then every thread's stack.
_WATCHDOG = "Timeout ("
#: A thread's header in faulthandler's dump (the watchdog's or SIGUSR1's).
_STACK_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):")
#: How many lines printed while stopping are kept per child.
_STOP_OUTPUT_LINES = 400


@dataclass(frozen=True)
class ChildExit:
    """How one child of a :class:`Supervisor` ended.

    Attributes:
        name: The child (``trajectory_server``).
        code: Its exit code (negative: killed by that signal), None while it runs.
        killed: The supervisor had to kill it (it did not stop within the timeout).
        traceback: The exception line of the last traceback it printed (``InvalidHandle: ...``), "" if none.
        hung: Its stop watchdog fired: it did not end within its stop timeout and exited by itself with its
            threads' stacks (:data:`retarget.ros.spinning.STOP_TIMEOUT_S`).
        stacks: The threads' stacks it printed while stopping (its watchdog's, or on the supervisor's SIGUSR1
            before a kill), "" if none.
    """

    name: str
    code: int | None
    killed: bool = False
    traceback: str = ""
    hung: bool = False
    stacks: str = ""

    @property
    def clean(self) -> bool:
        """Exited by itself with code 0 and printed no traceback."""
        return self.code == 0 and not self.killed and not self.traceback and not self.hung

    def describe(self) -> str:
        """One phrase for the summary line, e.g. ``mocap printed a traceback (InvalidHandle: ...)``."""
        parts = []
        if self.killed:
            parts.append("was killed after the stop timeout")
        elif self.hung:
            parts.append("did not stop within its stop timeout (its watchdog printed its stacks and ended it)")
        elif self.code is None:
            parts.append("is still running")
        elif self.code < 0:
            parts.append(f"died of signal {signal.Signals(-self.code).name}")
        elif self.code != 0:
            parts.append(f"exited with code {self.code}")
        if self.traceback:
            parts.append(f"printed a traceback ({self.traceback})")
        return f"{self.name} " + " and ".join(parts or ["exited cleanly"])


class _Child:
    """One started process: its Popen, a thread forwarding its output with a prefix, its last lines and the
    tracebacks it printed."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], sink: Callable[[str], None],
                 log_file: IO[str] | None) -> None:
        self.name = name
        self.tail: list[str] = []
        self.expected_exit = False
        self.killed = False
        self.traceback = ""  # exception line of the last traceback printed
        self._in_traceback = False
        self.stopping = False  # set by Supervisor.stop: the lines after it are kept in stop_output
        self.stop_output: list[str] = []
        self.hung = False  # its stop watchdog fired
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=dict(env), start_new_session=True,
                                     preexec_fn=_DIE_WITH_PARENT)
        self._sink = sink
        self._log_file = log_file
        self._reader = threading.Thread(target=self._forward, name=f"log-{name}", daemon=True)
        self._reader.start()

    def _forward(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.tail = (self.tail + [line])[-40:]
            self._watch_traceback(line)
            if self.stopping and len(self.stop_output) < _STOP_OUTPUT_LINES:
                self.stop_output.append(line)
                self.hung = self.hung or line.startswith(_WATCHDOG)
            text = f"[{self.name}] {line}"
            self._sink(text)
            if self._log_file is not None:
                with contextlib.suppress(ValueError, OSError):
                    self._log_file.write(text + "\n")
                    self._log_file.flush()

    def _watch_traceback(self, line: str) -> None:
        """Keep the exception line that ends a traceback: the first unindented line after its header."""
        if line.startswith(_TRACEBACK):
            self._in_traceback = True
            self.traceback = self.traceback or "exception line not seen"
        elif self._in_traceback and line and not line[0].isspace():
            self._in_traceback = False
            self.traceback = line.strip()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit(self) -> ChildExit:
        """How it ended (``code`` None while it runs)."""
        return ChildExit(self.name, self.proc.poll(), self.killed, self.traceback, self.hung, self.stacks())

    def stacks(self) -> str:
        """The threads' stacks among the lines printed while stopping (faulthandler's dump), "" if none."""
        lines = self.stop_output
        start = next((k for k, line in enumerate(lines)
                      if line.startswith(_WATCHDOG) or _STACK_HEADER.match(line)), None)
        return "" if start is None else "\n".join(lines[start:])

    def signal(self, signum: int) -> None:
        """Signal the child's process group (it leads its own process group, setsid), so helpers it started get it too."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def join_output(self, timeout: float) -> None:
        self._reader.join(timeout)

    def tail_text(self) -> str:
        return "\n".join(self.tail[-20:])


class Supervisor:
    """Runs a :class:`Bringup` as child processes (``retarget up``, ``make demo``).

    Children start in their own process groups (setsid) (a terminal's Ctrl-C reaches only the supervisor, which then stops
    them in order: nodes first, so the driver turns the torque off while the bus still answers, then the
    emulator) and get SIGINT if the supervisor dies. Their output is forwarded line by line with a
    ``[name]`` prefix.

    Use as a context manager: ``with Supervisor(plan) as sup: sup.start(); sup.wait_ready(); ...``; leaving
    the block stops everything.
    """

    def __init__(self, plan: Bringup, *, python: str | None = None, env: Mapping[str, str] | None = None,
                 sink: Callable[[str], None] | None = None, log_path: Path | None = None) -> None:
        """Args:
            plan: The node set.
            python: Interpreter for the children (default: this one).
            env: Their environment (default: this process's).
            sink: Receives each prefixed output line (default: print to stdout).
            log_path: Also append every prefixed line to this file.
        """
        self.plan = plan
        self.python = python or sys.executable
        self.env = dict(os.environ if env is None else env)
        # Children print straight away rather than in blocks when their output is a pipe.
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.env.setdefault("RCUTILS_LOGGING_BUFFERED_STREAM", "0")
        self._sink = sink or (lambda line: print(line, flush=True))
        self._log_file = log_path.open("a") if log_path is not None else None
        self.children: list[_Child] = []
        self.left_behind: list[str] = []
        self.removed_shm: set[Path] = set()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 15.0) -> None:
        """Start the processes, then the nodes; waits until each process's ``ready_path`` exists.

        Raises:
            BringupError: A process died or did not get ready within ``timeout`` [s].
        """
        self.plan.run_dir.mkdir(parents=True, exist_ok=True)
        for spec in self.plan.processes:
            child = self._spawn(spec.name, spec.argv(self.python))
            if spec.ready_path is not None:
                deadline = time.monotonic() + timeout
                while not spec.ready_path.exists():
                    if not child.alive():
                        raise BringupError(f"{spec.name} exited with code {child.proc.returncode} while "
                                           "starting", spec.name, child.tail_text())
                    if time.monotonic() > deadline:
                        raise BringupError(f"{spec.name} not ready after {timeout} s ({spec.ready_path} "
                                           "missing)", spec.name, child.tail_text())
                    time.sleep(0.05)
        for node in self.plan.nodes:
            params_file = self.plan.run_dir / f"{node.name}.params.yaml"
            params_file.write_text(node.params_yaml())
            self._spawn(node.name, node.argv(self.python, params_file))

    def _spawn(self, name: str, argv: list[str]) -> _Child:
        child = _Child(name, argv, self.env, self._sink, self._log_file)
        self.children.append(child)
        return child

    def dead(self) -> list[tuple[str, int]]:
        """Children that exited although nobody stopped them: ``(name, exit code)``."""
        return [(c.name, c.proc.returncode) for c in self.children
                if not c.expected_exit and c.proc.poll() is not None]

    def check_alive(self) -> None:
        """Raise if any child died.

        Raises:
            BringupError: Naming the first dead child, with its exit code and last output.
        """
        for name, code in self.dead():
            child = next(c for c in self.children if c.name == name)
            raise BringupError(f"{name} exited unexpectedly with code {code}", name, child.tail_text())

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Wait until the action servers answer and the driver publishes joint_states.

        Args:
            timeout: Longest wait [s].

        Returns:
            Seconds waited.

        Raises:
            BringupError: A child died, or the set was not ready in time (naming what was missing).
        """
        import rclpy
        from control_msgs.action import FollowJointTrajectory
        from rclpy.action import ActionClient
        from rclpy.node import Node
        from sensor_msgs.msg import JointState

        from rclpy.executors import SingleThreadedExecutor

        started = time.monotonic()
        context = rclpy.Context()
        rclpy.init(context=context)
        node = Node("retarget_up_probe", context=context)
        executor = SingleThreadedExecutor(context=context)
        clients: list[ActionClient] = []
        try:
            states: list[int] = []
            node.create_subscription(JointState, self.plan.joint_states_topic,
                                     lambda _msg: states.append(1), 10)
            waits: dict[str, Callable[[], bool]] = {}
            follow = self.plan.follow_joint_trajectory_action
            clients.append(ActionClient(node, FollowJointTrajectory, follow))
            waits[f"action {self.plan.follow_joint_trajectory_action}"] = clients[-1].server_is_ready
            if self.plan.retarget_action:
                from retarget_interfaces.action import Retarget

                clients.append(ActionClient(node, Retarget, self.plan.retarget_action))
                waits[f"action {self.plan.retarget_action}"] = clients[-1].server_is_ready
            waits[f"topic {self.plan.joint_states_topic} (none means the driver is not reading the servos: "
                  "see its log and /diagnostics)"] = lambda: bool(states)
            executor.add_node(node)
            pending = dict(waits)
            while pending:
                self.check_alive()
                if time.monotonic() - started > timeout:
                    raise BringupError(f"not ready after {timeout} s: waiting for {', '.join(pending)}")
                executor.spin_once(timeout_sec=0.1)
                pending = {k: f for k, f in pending.items() if not f()}
        finally:
            executor.shutdown()
            for client in clients:
                client.destroy()
            node.destroy_node()
            rclpy.shutdown(context=context)
            context.destroy()
            # The DDS participant (and its /dev/shm files) lives until nothing refers to it any more; the
            # supervisor runs on without it, and a SIGKILL later must not leave those files behind.
            del clients, node, executor, context
            gc.collect()
        return time.monotonic() - started

    def stop(self, timeout: float = 8.0) -> list[str]:
        """Stop every child: SIGINT to the nodes, wait, SIGUSR1 to leftovers (their stacks to the log), SIGKILL them;
        then SIGINT, wait and SIGKILL for the processes.

        Fast DDS shared-memory files of killed children are removed. Idempotent.

        Args:
            timeout: Wait per stage before killing [s].

        Returns:
            Names of children that had to be killed (also in :attr:`left_behind`).
        """
        node_names = {n.name for n in self.plan.nodes}
        stages = [[c for c in self.children if c.name in node_names],
                  [c for c in self.children if c.name not in node_names]]
        for stage in stages:
            for child in stage:
                child.expected_exit = child.expected_exit or child.alive()
                child.stopping = True
                if child.alive():
                    child.signal(signal.SIGINT)
            deadline = time.monotonic() + timeout
            for child in stage:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(max(0.0, deadline - time.monotonic()))
            stuck = [c for c in stage if c.alive()]
            if stuck and stage is stages[0]:
                # The nodes print every thread's stack on SIGUSR1 (retarget.ros.spinning.spin): the log then says
                # where a node that ignored SIGINT was stuck before it is killed.
                for child in stuck:
                    child.signal(signal.SIGUSR1)
                time.sleep(1.0)  # for the stacks to reach the log
            if stuck:
                shm = fastdds_shm_files({c.proc.pid for c in stuck})
                for child in stuck:
                    child.signal(signal.SIGKILL)
                    child.proc.wait(5)
                    child.killed = True
                    self.left_behind.append(child.name)
                for path in shm:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                        self.removed_shm.add(path)
            for child in stage:
                child.join_output(2.0)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self.plan.temporary_run_dir and all(not c.alive() for c in self.children):
            shutil.rmtree(self.plan.run_dir, ignore_errors=True)
        return list(self.left_behind)

    def exits(self) -> list[ChildExit]:
        """How every child ended (after :meth:`stop`), in start order."""
        return [c.exit() for c in self.children]

    def unclean_exits(self) -> list[ChildExit]:
        """Children that did not end cleanly: a non-zero exit code, a signal, killed, or a traceback printed (a
        node's thread can print one and the process still exit 0)."""
        return [e for e in self.exits() if not e.clean]

    @property
    def pids(self) -> dict[str, int]:
        """Process ID per child."""
        return {c.name: c.proc.pid for c in self.children}
