"""Bring-up: the node-set description, the launch files built on it, and ``retarget up`` as a real process.

The description tests are fast and need no ROS. The launch files cannot run here (no ``launch``/``launch_ros``
wheels): they are compiled, and ``robot.launch.py`` is executed against minimal stand-ins of the launch API
that record what it builds, to check that it turns the description into nodes faithfully. ``retarget up
drummer`` and ``retarget up fit_rig`` (an emulated XM540-W270) run as subprocesses: a FollowJointTrajectory goal
succeeds, and SIGINT leaves no process behind.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import py_compile
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from retarget.errors import InputError
from retarget.model.library import list_rigs, list_robots, resolve_robot, ros_parameters
from retarget.processes import die_with_parent
from retarget.ros.bringup import (
    EMULATED_BUS_OVERRIDES,
    NATNET_PORT_RANGE,
    Supervisor,
    _ephemeral_ports,
    _free_udp_ports,
    describe,
    fastdds_shm_files,
)

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "launch"
ROBOTS = list_robots()


def _ros_params(robot: str) -> dict[str, Any]:
    return ros_parameters(robot)


def test_all_seven_robots_are_shipped() -> None:
    assert ROBOTS == ["bartender", "boxer", "dancer", "drummer", "rapper", "single_rod", "two_rods"]


@pytest.mark.parametrize("robot", ROBOTS)
def test_node_set_is_complete(robot: str, tmp_path: Path) -> None:
    plan = describe(robot, run_dir=tmp_path)
    params = _ros_params(robot)
    assert plan.robot == params["robot_name"] == robot
    assert [n.name for n in plan.nodes] == ["dynamixel_driver", "trajectory_server", "planner", "mocap"]
    assert [p.name for p in plan.processes] == ["dynamixel_emulator"]
    emulator = plan.processes[0]
    ids = ",".join(map(str, params["dynamixel_ids"]))
    assert emulator.args[emulator.args.index("--ids") + 1] == ids
    assert emulator.args[emulator.args.index("--link") + 1] == plan.port == str(tmp_path / "ttyDXL")
    assert emulator.args[emulator.args.index("--return-delay-us") + 1] == "0"
    # The emulated servos are the robot's: its description gives their models, its params file their joints.
    assert emulator.args[emulator.args.index("--robot") + 1] == str(resolve_robot(robot).resolve())
    assert emulator.ready_path == plan.control_socket
    for node in plan.nodes:
        # Every node gets the robot's parameters, including the keys the trajectory server and servos need.
        for key in ("joint_names", "dynamixel_ids", "servo_max_velocity", "default_goal_tolerance",
                    "goal_time_tolerance"):
            assert node.parameters[key] == params[key], (node.name, key)
    driver = plan.node("dynamixel_driver").parameters
    assert driver["port"] == plan.port
    for key, value in EMULATED_BUS_OVERRIDES.items():
        assert driver[key] == value
    description = plan.node("trajectory_server").parameters["robot_description"]
    assert description.lstrip().startswith("<?xml")
    assert all(f'name="{j}"' in description for j in params["joint_names"])
    assert plan.node("planner").parameters["trajectory_server_action"] == plan.follow_joint_trajectory_action
    assert plan.node("mocap").parameters["source"] == "twin"


def test_fit_rig_runs_xm540_servos(tmp_path: Path) -> None:
    """The fitting rig's params file names its servo model: the emulated bus answers as that model and the driver
    loads its control table (the robots' default is the XM430-W210)."""
    assert "fit_rig" in list_rigs()
    plan = describe("fit_rig", run_dir=tmp_path)
    params = _ros_params("fit_rig")
    assert plan.robot == "fit_rig" and params["servo_model"] == "XM540-W270"
    assert [n.name for n in plan.nodes] == ["dynamixel_driver", "trajectory_server", "planner", "mocap"]
    emulator = plan.processes[0]
    assert emulator.args[emulator.args.index("--model") + 1] == "XM540-W270"
    assert plan.node("dynamixel_driver").parameters["servo_model"] == "XM540-W270"
    assert plan.node("trajectory_server").parameters["servo_max_velocity"] == pytest.approx(math.pi, abs=0.01)
    drummer = describe("drummer", run_dir=tmp_path / "drummer").processes[0]
    assert drummer.args[drummer.args.index("--model") + 1] == "XM430-W210"


def test_unknown_servo_model_in_the_params_file_is_an_input_error(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    for suffix in (".yaml", ".params.yaml"):
        shutil.copy(REPO / "config" / f"fit_rig{suffix}", config / f"fit_rig{suffix}")
    params = config / "fit_rig.params.yaml"
    params.write_text(params.read_text().replace("servo_model: XM540-W270", "servo_model: XM999"))
    with pytest.raises(InputError, match="fit_rig.params.yaml: servo_model: unknown servo model 'XM999'"):
        describe(config / "fit_rig.yaml", run_dir=tmp_path / "run")


def test_a_robot_given_by_its_file_is_found_by_its_file_in_every_node(tmp_path: Path) -> None:
    """A library robot's nodes find it by name; a robot of the user's own (not in the library) by its description's
    path, which the planner also accepts a goal naming it by its params file's robot_name or by the file."""
    from retarget.model.library import same_robot

    fixtures = REPO / "tests" / "model" / "fixtures"
    (tmp_path / "arm.urdf").write_text((fixtures / "rigid_arm.urdf").read_text())
    robot = tmp_path / "arm.yaml"
    robot.write_text("retarget:\n  urdf: arm.urdf\n  motors: [shoulder, elbow]\n  servo: {model: XM430-W350}\n")
    (tmp_path / "arm.params.yaml").write_text("/**:\n  ros__parameters:\n    robot_name: my_arm\n"
                                              "    joint_names: [shoulder, elbow]\n    dynamixel_ids: [1, 2]\n"
                                              "    servo_model: XM430-W350\n")
    plan = describe(robot, run_dir=tmp_path / "run")
    assert {n.name: n.parameters["robot_name"] for n in plan.nodes} == dict.fromkeys(
        ("dynamixel_driver", "trajectory_server", "planner", "mocap"), str(robot.resolve()))
    emulator = plan.processes[0]
    assert emulator.args[emulator.args.index("--model") + 1] == "XM430-W350"
    assert {n.parameters["robot_name"] for n in describe("drummer", run_dir=tmp_path / "d").nodes} == {"drummer"}
    mine = str(robot.resolve())
    assert same_robot(mine, "my_arm") and same_robot(mine, "arm") and same_robot(mine, str(robot))
    assert not same_robot(mine, "drummer") and not same_robot("drummer", "my_arm")
    assert same_robot("drummer", str(resolve_robot("drummer"))) and not same_robot("nobody", "my_arm")


def test_hardware_and_options(tmp_path: Path) -> None:
    plan = describe("drummer", hardware="/dev/ttyUSB0", planner=False, mocap="none", namespace="/robot",
                    run_dir=tmp_path)
    assert not plan.emulated and plan.processes == () and plan.control_socket is None
    assert [n.name for n in plan.nodes] == ["dynamixel_driver", "trajectory_server"]
    driver = plan.node("dynamixel_driver").parameters
    assert driver["port"] == "/dev/ttyUSB0" and "return_delay_us" not in driver
    assert plan.retarget_action is None
    assert plan.follow_joint_trajectory_action == "/robot/trajectory_server/follow_joint_trajectory"
    natnet = describe("drummer", mocap="natnet", run_dir=tmp_path)
    assert natnet.node("mocap").parameters["source"] == "natnet"
    assert "server_address" not in natnet.node("mocap").parameters  # the params file's, else the node's default
    assert driver["baudrate"] == 1_000_000  # the driver's default, said out loud


def test_baud_rate_and_mocap_address_options(tmp_path: Path) -> None:
    plan = describe("drummer", baudrate=57_600, mocap="natnet", mocap_server="10.0.0.2", mocap_local="10.0.0.5",
                    run_dir=tmp_path)
    emulator = plan.processes[0]
    # The emulated servos run at the rate the driver opens its port at.
    assert emulator.args[emulator.args.index("--baud") + 1] == "57600"
    assert plan.node("dynamixel_driver").parameters["baudrate"] == 57_600
    mocap = plan.node("mocap").parameters
    assert (mocap["server_address"], mocap["local_address"]) == ("10.0.0.2", "10.0.0.5")
    with pytest.raises(InputError, match="baud rate 12345"):
        describe("drummer", baudrate=12_345, run_dir=tmp_path)
    with pytest.raises(InputError, match="for mocap natnet"):
        describe("drummer", mocap_server="10.0.0.2", run_dir=tmp_path)
    # A params file that names a rate sets both sides.
    config = tmp_path / "config"
    config.mkdir()
    for suffix in (".yaml", ".params.yaml"):
        shutil.copy(REPO / "config" / f"fit_rig{suffix}", config / f"fit_rig{suffix}")
    params = config / "fit_rig.params.yaml"
    params.write_text(params.read_text().replace("servo_model: XM540-W270",
                                                 "servo_model: XM540-W270\n    baudrate: 3000000"))
    rig = describe(config / "fit_rig.yaml", run_dir=tmp_path / "rig")
    assert rig.processes[0].args[rig.processes[0].args.index("--baud") + 1] == "3000000"
    assert rig.node("dynamixel_driver").parameters["baudrate"] == 3_000_000


def test_planner_settings_come_from_the_params_file_unless_a_budget_is_given(tmp_path: Path) -> None:
    planner = describe("drummer", run_dir=tmp_path).node("planner").parameters
    # The drummer's and boxer's measured plan settings (docs/optimize.md), not the node's whole-motion defaults.
    assert (planner["time_budget"], planner["window"], planner["dt"], planner["target_stride"]) == (900.0, 1.0, 0.002,
                                                                                                  5)
    assert describe("drummer", run_dir=tmp_path, plan_time_budget=100.0).node("planner").parameters[
        "time_budget"] == 100.0
    assert "time_budget" not in describe("single_rod", run_dir=tmp_path).node("planner").parameters
    # The optimizer: the params file's (the drummer's windows: Levenberg–Marquardt) unless the caller names one.
    assert planner["method"] == "gauss-newton"
    assert describe("drummer", run_dir=tmp_path, plan_method="lbfgs").node("planner").parameters["method"] == "lbfgs"


@pytest.mark.parametrize("kwargs, text", [({"mocap": "vicon"}, "mocap"), ({"twin": "rigid"}, "twin"),
                                          ({"namespace": "no_slash"}, "namespace")])
def test_bad_options_are_input_errors(kwargs: dict[str, str], text: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=text):
        describe("drummer", run_dir=tmp_path, **kwargs)


def test_reduced_twin_uses_the_model_or_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "empty_cache"))
    plan = describe("single_rod", twin="reduced", run_dir=tmp_path)
    assert plan.twin == "servo" and "--twin" not in plan.processes[0].args
    assert plan.processes[0].module == "retarget.dynamixel.emulator"
    assert "no reduced simulation" in plan.notes[0] and plan.notes[0] in plan.summary()
    assert "the twin plays its built-in step test" in plan.notes[1]  # what the mocap twin shows without it
    assert "twin_motion" not in plan.node("mocap").parameters
    assert "reduced_file" not in plan.node("planner").parameters  # the planner looks for a model itself
    model = tmp_path / "rod.npz"
    model.write_bytes(b"x")
    plan = describe("single_rod", twin="reduced", reduced=model, run_dir=tmp_path)
    args = plan.processes[0].args
    assert plan.twin == "reduced" and args[args.index("--twin") + 1] == "reduced"
    assert plan.processes[0].module == "retarget.twin.emulator"  # the emulator given the twin
    assert args[args.index("--reduced") + 1] == str(model.resolve())
    assert plan.node("mocap").parameters["twin_motion"] == f"live:{plan.twin_channel}"
    assert plan.node("planner").parameters["reduced_file"] == str(model.resolve())  # one model for both
    assert not any("built-in step test" in note for note in plan.notes)


def test_a_perturbed_twin_reaches_the_worker_the_mocap_noise_and_the_servers_tolerance(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from retarget.twin.perturbation import parse_perturbation

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "empty_cache"))
    model = tmp_path / "rod.npz"
    model.write_bytes(b"x")
    perturb = parse_perturbation("stiffness=1.07,damping=1.5,servo_kp=1.3,latency=0.01,marker_noise=0.0003")
    plan = describe("single_rod", twin="reduced", reduced=model, run_dir=tmp_path, perturb=perturb, twin_dt=0.002,
                    twin_max_lag=30.0)
    args = plan.processes[0].args
    assert parse_perturbation(args[args.index("--twin-perturb") + 1]) == perturb
    assert args[args.index("--twin-dt") + 1] == "0.002" and args[args.index("--twin-max-lag") + 1] == "30.0"
    assert plan.node("mocap").parameters["twin_position_noise_m"] == 0.0003
    assert plan.node("trajectory_server").parameters["goal_time_tolerance"] == 30.0  # feedback as late as the twin
    assert any("perturbed (stiffness=1.07" in line for line in plan.summary())
    plain = describe("single_rod", twin="reduced", reduced=model, run_dir=tmp_path)
    assert "--twin-perturb" not in plain.processes[0].args
    for kwargs, named in [({"twin": "servo"}, "--twin reduced"), ({"twin": "reduced", "hardware": "/dev/ttyUSB0"},
                                                                  "--twin reduced"),
                          ({"twin": "reduced", "mocap": "none"}, "needs --mocap twin"),
                          ({"twin": "reduced", "reduced": None}, "needs the reduced twin's model")]:
        with pytest.raises(InputError, match=named):
            describe("single_rod", run_dir=tmp_path, perturb=perturb, **{"reduced": model, **kwargs})
    with pytest.raises(InputError, match="twin_dt must be positive"):
        describe("single_rod", twin="reduced", reduced=model, run_dir=tmp_path, twin_dt=0.0)


@pytest.mark.integration  # picks two free UDP ports
def test_natnet_on_the_reduced_twin_without_a_motive_address_is_a_simulated_motive(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    from retarget.twin.perturbation import parse_perturbation

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "empty_cache"))
    model = tmp_path / "rod.npz"
    model.write_bytes(b"x")
    perturb = parse_perturbation("marker_noise=0.0003")
    served = describe("single_rod", twin="reduced", reduced=model, run_dir=tmp_path, mocap="natnet", perturb=perturb)
    server = served.processes[1]
    assert (server.name, server.module) == ("mocap_twin_natnet", "retarget.mocap.twin_server")
    mocap = served.node("mocap").parameters
    assert mocap["source"] == "natnet" and mocap["multicast_address"] == "" and mocap["server_address"] == "127.0.0.1"
    assert server.args[server.args.index("--command-port") + 1] == str(mocap["command_port"])
    assert server.args[server.args.index("--data-port") + 1] == str(mocap["data_port"])
    assert server.args[server.args.index("--position-noise") + 1] == "0.0003"
    assert server.args[server.args.index("--channel") + 1] == str(served.twin_channel)
    real = describe("single_rod", twin="reduced", reduced=model, run_dir=tmp_path, mocap="natnet",
                    mocap_server="10.0.0.2")
    assert len(real.processes) == 1 and real.node("mocap").parameters["server_address"] == "10.0.0.2"
    with pytest.raises(InputError, match="a real Motive"):
        describe("single_rod", twin="reduced", reduced=model, run_dir=tmp_path, mocap="natnet",
                 mocap_server="10.0.0.2", perturb=perturb)


@pytest.mark.integration  # binds UDP ports
def test_the_simulated_motives_ports_are_free_and_outside_the_kernels_and_ddss_ports(tmp_path: Path) -> None:
    import socket

    ports = _free_udp_ports(2)
    assert len(set(ports)) == 2
    assert all(NATNET_PORT_RANGE[0] <= p < NATNET_PORT_RANGE[1] and p not in _ephemeral_ports() for p in ports)
    # A port bound elsewhere is not chosen, nor one of the ephemeral range: the kernel's choice is the fallback.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", ports[0]))
        assert _free_udp_ports(1, span=(ports[0], ports[0] + 1), ephemeral=range(0)) != [ports[0]]
    assert _free_udp_ports(1, span=(ports[1], ports[1] + 1), ephemeral=range(ports[1], ports[1] + 1)) != [ports[1]]
    assert _free_udp_ports(1, span=(ports[1], ports[1] + 1), ephemeral=range(0)) == [ports[1]]
    (tmp_path / "range").write_text("1024\t9999\n")
    assert _ephemeral_ports(tmp_path / "range") == range(1024, 10000)
    assert _ephemeral_ports(tmp_path / "absent") == range(32768, 61000)


def test_unknown_robot_names_the_known_ones() -> None:
    with pytest.raises(InputError, match="drummer"):
        describe("no_such_robot")


def test_node_command_line_and_params_file(tmp_path: Path) -> None:
    plan = describe("dancer", namespace="/ns", run_dir=tmp_path)
    spec = plan.node("trajectory_server")
    params_file = tmp_path / "p.yaml"
    params_file.write_text(spec.params_yaml())
    argv = spec.argv("/usr/bin/python3", params_file)
    assert argv[:3] == ["/usr/bin/python3", "-m", "retarget.ros.trajectory_server"]
    assert argv[argv.index("--ros-args"):] == ["--ros-args", "-r", "__node:=trajectory_server",
                                               "-r", "__ns:=/ns", "--params-file", str(params_file)]
    # rcl needs a file whose only top-level keys are nodes: the robot YAML's retarget: section would break it.
    data = yaml.safe_load(params_file.read_text())
    assert list(data) == ["/ns/trajectory_server"]
    assert data["/ns/trajectory_server"]["ros__parameters"] == dict(spec.parameters)


def test_fastdds_shm_files_follow_flock_holders(tmp_path: Path) -> None:
    import fcntl

    held = tmp_path / "fastdds_port7411_el"
    free = tmp_path / "fastdds_0123456789abcdef_el"
    for path in (held, free, tmp_path / "fastdds_port7411", tmp_path / "fastdds_0123456789abcdef"):
        path.touch()
    with held.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = fastdds_shm_files({os.getpid()}, shm=tmp_path)
    assert found == {held, tmp_path / "fastdds_port7411", tmp_path / "sem.fastdds_port7411_mutex"}
    assert fastdds_shm_files({os.getpid()}, shm=tmp_path) == set()


# ---- launch files ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(LAUNCH.glob("*.launch.py")), ids=lambda p: p.name)
def test_launch_files_compile(path: Path, tmp_path: Path) -> None:
    py_compile.compile(str(path), cfile=str(tmp_path / "out.pyc"), doraise=True)


def test_one_launch_file_per_robot_and_rig_with_a_params_file() -> None:
    per_robot = sorted(p.name.removesuffix(".launch.py") for p in LAUNCH.glob("*.launch.py")
                       if p.name != "robot.launch.py")
    assert per_robot == sorted(ROBOTS + ["fit_rig"])
    for robot in per_robot:
        text = (LAUNCH / f"{robot}.launch.py").read_text()
        assert f'ROBOT = "{robot}"' in text and "robot.launch.py" in text


class _Recorded:
    """Stand-in for a launch action or substitution: keeps its constructor arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


def _launch_api_stand_ins(share: Path, configuration: dict[str, str]) -> dict[str, types.ModuleType]:
    """Stand-ins for the parts of ament_index_python, launch, launch_ros the launch files use."""
    def module(name: str, **attrs: Any) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        return mod

    class LaunchConfiguration(_Recorded):
        def perform(self, context: Any) -> str:
            return configuration[self.args[0]]

    class LaunchDescription(_Recorded):
        pass

    recorded = {name: type(name, (_Recorded,), {}) for name in (
        "DeclareLaunchArgument", "EmitEvent", "ExecuteProcess", "OpaqueFunction", "RegisterEventHandler",
        "OnProcessExit", "OnProcessIO", "OnShutdown", "Shutdown", "Node", "ParameterValue", "IncludeLaunchDescription",
        "PythonLaunchDescriptionSource")}
    return {
        "ament_index_python": module("ament_index_python"),
        "ament_index_python.packages": module("ament_index_python.packages",
                                              get_package_share_directory=lambda _pkg: str(share)),
        "launch": module("launch", LaunchDescription=LaunchDescription),
        "launch.actions": module("launch.actions", **{k: recorded[k] for k in (
            "DeclareLaunchArgument", "EmitEvent", "ExecuteProcess", "OpaqueFunction", "RegisterEventHandler",
            "IncludeLaunchDescription")}),
        "launch.event_handlers": module("launch.event_handlers", OnProcessExit=recorded["OnProcessExit"],
                                        OnProcessIO=recorded["OnProcessIO"], OnShutdown=recorded["OnShutdown"]),
        "launch.events": module("launch.events", Shutdown=recorded["Shutdown"]),
        "launch.substitutions": module("launch.substitutions", LaunchConfiguration=LaunchConfiguration),
        "launch.launch_description_sources": module("launch.launch_description_sources",
                                                    PythonLaunchDescriptionSource=recorded[
                                                        "PythonLaunchDescriptionSource"]),
        "launch_ros": module("launch_ros"),
        "launch_ros.actions": module("launch_ros.actions", Node=recorded["Node"]),
        "launch_ros.parameter_descriptions": module("launch_ros.parameter_descriptions",
                                                    ParameterValue=recorded["ParameterValue"]),
    }


def _run_launch_file(path: Path, monkeypatch: pytest.MonkeyPatch, configuration: dict[str, str]) -> Any:
    for name, mod in _launch_api_stand_ins(REPO, configuration).items():
        monkeypatch.setitem(sys.modules, name, mod)
    namespace: dict[str, Any] = {"__file__": str(path), "__name__": "launch_file"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("hardware", ["", "/dev/ttyUSB0"])
def test_robot_launch_builds_the_described_nodes(hardware: str, monkeypatch: pytest.MonkeyPatch) -> None:
    configuration = {"robot": "drummer", "hardware": hardware, "baud": "", "planner": "true", "mocap": "twin",
                     "mocap_server": "", "mocap_local": "", "namespace": "", "twin": "servo", "reduced": ""}
    launch_file = _run_launch_file(LAUNCH / "robot.launch.py", monkeypatch, configuration)
    description = launch_file["generate_launch_description"]()
    declared = [a.kwargs.get("name", a.args[0] if a.args else None) for a in description.args[0][:-1]]
    assert declared == ["robot", "hardware", "baud", "planner", "mocap", "mocap_server", "mocap_local", "namespace",
                        "twin", "reduced"]
    made: list[Path] = []
    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: made.append(Path(real_mkdtemp(**kw))) or str(made[-1]))
    actions = launch_file["launch_setup"](context=None)
    # The run's temporary folder is removed at shutdown (no folder left behind per launch).
    *actions, cleanup = actions
    assert len(made) == 1 and made[0].is_dir()
    cleanup.args[0].kwargs["on_shutdown"](None, None)
    assert not made[0].exists()
    plan = describe("drummer", hardware=hardware or None, run_dir=Path("/unused"))
    if hardware:
        nodes = actions
    else:
        emulator, on_exit, on_ready = actions
        cmd = emulator.kwargs["cmd"]
        assert cmd[1:3] == ["-m", "retarget.dynamixel.emulator"]
        assert cmd[cmd.index("--ids") + 1] == "1,2,3,4,5,6,7,8,9,10,11,12,13"
        handler = on_ready.args[0]
        assert handler.kwargs["target_action"] is emulator
        start = handler.kwargs["on_stdout"]
        assert start(types.SimpleNamespace(text=b"starting\n")) is None
        nodes = start(types.SimpleNamespace(text=json.dumps({"port": "x", "control": "y"}).encode()))
        assert start(types.SimpleNamespace(text=b'{"control": "again"}')) is None, "nodes must start once"
        assert on_exit.args[0].kwargs["target_action"] is emulator
    assert [n.kwargs["executable"] for n in nodes] == [s.executable for s in plan.nodes]
    for node, spec in zip(nodes, plan.nodes):
        assert node.kwargs["package"] == "retarget" and node.kwargs["name"] == spec.name
        (params,) = node.kwargs["parameters"]
        unwrapped = {k: v.args[0] if hasattr(v, "args") else v for k, v in params.items()}
        expected = dict(spec.parameters)
        if not hardware and spec.name == "dynamixel_driver":
            assert unwrapped.pop("port") != "" and expected.pop("port")  # a fresh pty link per run
        assert unwrapped == expected


def test_per_robot_launch_includes_the_shared_one(monkeypatch: pytest.MonkeyPatch) -> None:
    launch_file = _run_launch_file(LAUNCH / "drummer.launch.py", monkeypatch, {})
    (include,) = launch_file["generate_launch_description"]().args[0]
    assert include.args[0].args[0] == str(LAUNCH / "robot.launch.py")
    assert dict(include.kwargs["launch_arguments"]) == {"robot": "drummer"}


# ---- retarget up as a process ----------------------------------------------------------------------------

def _pids_in_groups(groups: set[int]) -> list[int]:
    """Live processes whose process group is one of ``groups`` (each child leads its own group)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields: state, ppid, pgrp, ...; a zombie (Z) has exited already.
        if fields[0] != "Z" and int(fields[2]) in groups:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.integration
@pytest.mark.parametrize("robot", ["drummer", "fit_rig"])  # 13 XM430-W210s; one XM540-W270 (servo_model)
def test_retarget_up_goal_then_sigint(robot: str, ros_context: Any) -> None:
    pytest.importorskip("control_msgs", reason="control_msgs is not built (make setup)")
    from control_msgs.action import FollowJointTrajectory
    from retarget.ros.action_client import LockedActionClient
    from rclpy.node import Node
    from trajectory_msgs.msg import JointTrajectoryPoint
    from ros_helpers import result_of, retry_stale_states, wait_for

    namespace = "/test_bringup"
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "retarget.cli", "up", robot, "--namespace", namespace,
                             "--mocap", "none", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ.copy(), start_new_session=True,
                            preexec_fn=die_with_parent(signal.SIGINT))
    lines: list[str] = []
    errors: list[str] = []
    readers = [threading.Thread(target=lambda s=s, out=out: out.extend(s), daemon=True)
               for s, out in ((proc.stdout, lines), (proc.stderr, errors))]
    for reader in readers:
        reader.start()
    context, executor = ros_context
    node = Node("bringup_test", context=context)
    client = LockedActionClient(node, FollowJointTrajectory,
                                f"{namespace}/trajectory_server/follow_joint_trajectory")
    executor.add_node(node)  # after the action client: rclpy#1589
    try:
        try:
            wait_for(lambda: any('"state": "ready"' in line for line in lines) or proc.poll() is not None, 45.0,
                     "retarget up to be ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{''.join(errors[-40:])}") from None
        assert proc.poll() is None, "".join(errors[-40:])
        ready = json.loads(next(line for line in lines if '"state": "ready"' in line))
        pids = ready["pids"]
        assert set(pids) == {"dynamixel_emulator", "dynamixel_driver", "trajectory_server", "planner"}
        assert client.wait_for_server(timeout_sec=10.0), "".join(errors[-40:])
        # The server rejects goals while its joint_states are stale (state_timeout): on a loaded machine, wait
        # until this process sees them flow too.
        from sensor_msgs.msg import JointState

        seen: list[float] = []
        node.create_subscription(JointState, f"{namespace}/joint_states", lambda _m: seen.append(time.monotonic()), 10)
        try:
            wait_for(lambda: len(seen) > 10 and time.monotonic() - seen[-1] < 0.2, 30.0, "joint_states flowing")
        except AssertionError as exc:  # none at all (discovery) or late ones (a starved executor): say which
            last = f", the last {time.monotonic() - seen[-1]:.2f} s ago" if seen else ""
            raise AssertionError(f"{exc}: {len(seen)} received{last}\n{''.join(errors[-40:])}") from None

        joints = _ros_params(robot)["joint_names"]
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = joints
        for t, scale in ((0.5, 0.1), (1.0, 0.2)):
            point = JointTrajectoryPoint(positions=[scale * (-1) ** i for i in range(len(joints))])
            point.time_from_start.sec, point.time_from_start.nanosec = int(t), int(round((t % 1) * 1e9))
            goal.trajectory.points.append(point)

        def attempt() -> Any:
            sent = client.send_goal_async(goal)
            wait_for(sent.done, 10.0, "goal response")
            return result_of(sent.result(), 15.0, lambda: "".join(errors[-40:]))

        try:
            result = retry_stale_states(attempt)
        except AssertionError as exc:  # the nodes' side: did the server execute the goals?
            raise AssertionError(f"{exc}\n{''.join(errors[-40:])}") from None
        assert result.error_code == FollowJointTrajectory.Result.SUCCESSFUL, (result.error_string,
                                                                               "".join(errors[-40:]))

        os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the whole foreground group
        code = proc.wait(20.0)
        for reader in readers:  # all of the output, the children's last words and the stop report included
            reader.join(5.0)
        assert code == 0, "".join(errors[-80:]) + "".join(lines[-1:])
        stopped = json.loads(lines[-1])
        assert stopped["state"] == "stopped" and stopped["killed"] == []
        assert stopped["reason"] == "signal SIGINT"
        assert _pids_in_groups(set(pids.values())) == [], "processes left behind"
        assert not Path(ready["run_dir"]).exists(), "the run's temporary folder must be removed"
        assert time.monotonic() - started < 60.0
    finally:
        executor.remove_node(node)
        client.destroy()
        node.destroy_node()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.mark.integration
def test_supervisor_names_a_node_that_dies(tmp_path: Path) -> None:
    """A driver whose port does not exist faults but stays up; a node that cannot start is named."""
    from retarget.ros.bringup import BringupError

    plan = describe("single_rod", hardware=str(tmp_path / "no_such_port"), planner=False, mocap="none",
                    namespace="/test_bringup_dies", run_dir=tmp_path)
    broken = plan.node("trajectory_server")
    # An out-of-range control rate makes the trajectory server exit at start-up.
    bad = dataclasses.replace(broken, parameters={**broken.parameters, "control_rate": -5.0})
    plan = dataclasses.replace(plan, nodes=(plan.nodes[0], bad))
    lines: list[str] = []
    with Supervisor(plan, sink=lines.append) as supervisor:
        supervisor.start()
        with pytest.raises(BringupError) as info:
            supervisor.wait_ready(20.0)
        assert info.value.process == "trajectory_server"
        assert "trajectory_server exited unexpectedly" in str(info.value)
    assert supervisor.left_behind == []
    assert _pids_in_groups(set(supervisor.pids.values())) == []


STUBBORN = '''
import fcntl, os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
name = sys.argv[1]
segment = open(name, "w")
lock = open(name + "_el", "w")
fcntl.flock(lock, fcntl.LOCK_EX)
print("holding", name, flush=True)
while True:
    time.sleep(1)
'''


@pytest.mark.integration
def test_supervisor_kills_a_stubborn_child_and_removes_its_shm(tmp_path: Path) -> None:
    """A child that ignores SIGINT is killed after the timeout; the Fast DDS-style files it held go too."""
    from retarget.ros.bringup import ProcessSpec

    (tmp_path / "stubborn_child.py").write_text(STUBBORN)
    segment = Path("/dev/shm") / f"fastdds_retargettest{os.getpid()}"
    plan = describe("single_rod", hardware="/dev/null", planner=False, mocap="none", run_dir=tmp_path)
    plan = dataclasses.replace(plan, nodes=(), processes=(
        ProcessSpec("stubborn", "stubborn_child", (str(segment),)),))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    lines: list[str] = []
    try:
        with Supervisor(plan, env=env, sink=lines.append) as supervisor:
            supervisor.start()
            from ros_helpers import wait_for

            wait_for(lambda: any("holding" in line for line in lines), 15.0, "the child to hold its files")
            assert supervisor.stop(timeout=1.0) == ["stubborn"]
        assert not segment.exists() and not Path(f"{segment}_el").exists()
        assert Path(f"{segment}_el") in supervisor.removed_shm
        assert _pids_in_groups(set(supervisor.pids.values())) == []
    finally:
        for path in (segment, Path(f"{segment}_el")):
            path.unlink(missing_ok=True)


UNCLEAN = '''
import faulthandler, signal, sys, threading, time
how = sys.argv[1]
stop = threading.Event()
signal.signal(signal.SIGINT, lambda *_: stop.set())
print("up", flush=True)
stop.wait(30)
if how == "hang":  # a node whose stop hangs: its watchdog (retarget.ros.spinning) prints the stacks and ends it
    faulthandler.dump_traceback_later(1.0, exit=True)
    def stuck_in_teardown():
        threading.Event().wait()
    stuck_in_teardown()
if how == "traceback":  # as the mocap node's receive thread did: the process itself still exits 0
    def fail():
        raise RuntimeError("handle used after shutdown")
    thread = threading.Thread(target=fail)
    thread.start()
    thread.join()
    sys.exit(0)
sys.exit({"clean": 0, "code": 3}[how])
'''


@pytest.mark.integration
def test_supervisor_reports_a_non_zero_exit_and_a_traceback_at_stop(tmp_path: Path) -> None:
    """A child that exits non-zero or prints a traceback on SIGINT is not 'exited cleanly'."""
    from retarget.ros.bringup import ProcessSpec

    (tmp_path / "unclean_child.py").write_text(UNCLEAN)
    plan = describe("single_rod", hardware="/dev/null", planner=False, mocap="none", run_dir=tmp_path)
    plan = dataclasses.replace(plan, nodes=(), processes=tuple(
        ProcessSpec(how, "unclean_child", (how,)) for how in ("clean", "code", "traceback", "hang")))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    lines: list[str] = []
    with Supervisor(plan, env=env, sink=lines.append) as supervisor:
        supervisor.start()
        from ros_helpers import wait_for

        wait_for(lambda: sum("up" in line for line in lines) == 4, 15.0, f"the children to start: {lines}")
        assert supervisor.stop(timeout=5.0) == []
    unclean = {e.name: e for e in supervisor.unclean_exits()}
    assert set(unclean) == {"code", "traceback", "hang"}
    hung = unclean["hang"]
    assert hung.hung and hung.code == 1 and not hung.killed
    assert hung.describe() == "hang did not stop within its stop timeout (its watchdog printed its stacks and ended it)"
    assert hung.stacks.startswith("Timeout (0:00:01)!") and "stuck_in_teardown" in hung.stacks
    assert unclean["code"].describe() == "code exited with code 3"
    assert unclean["traceback"].code == 0
    assert unclean["traceback"].describe() == \
        "traceback printed a traceback (RuntimeError: handle used after shutdown)"
