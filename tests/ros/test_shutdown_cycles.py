"""Ctrl-C is clean: every node, started and stopped with SIGINT over and over while messages flow, exits 0 and
prints no traceback: 34 cycles of three nodes, 102 stops (``RETARGET_SHUTDOWN_CYCLES=N`` for another count).

The races this catches: SIGINT shuts the rclpy context down from the signal handler while the executor is
taking a message (``RuntimeError: Unable to convert call argument '0'`` in ``take_message``) or while a node's
own thread still uses a handle (``InvalidHandle``). They show only now and then, hence the cycles, with the stop
at a random moment of the node's life (seeded) and traffic on its topics.

Every stop also runs the garbage collector where a collection hurts most (``RETARGET_TEST_STOP_GC=1``,
:mod:`retarget.ros.spinning`): a full collection in the signal path of every node (on its main thread, wherever
the signal found it) and, in the driver, one in the middle of a bus exchange — its control loop's last exchange,
after the Sync Write of the running goal's setpoint, before the Sync Read, holding the bus — while the torque-off
waits for the bus (every driver stop must show it in its log). The driver runs 4 servos at 200 Hz, so its bus is
busy when the signal comes. A node that does not end within its stop timeout (6 s) prints its threads' stacks and
exits 1: the failure shows them.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from ros_helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CYCLES = int(os.environ.get("RETARGET_SHUTDOWN_CYCLES", "34"))
JOINTS = ["base_yaw", "shoulder_pitch", "elbow_pitch", "wrist_pitch"]
IDS = [1, 2, 3, 4]
NS = "/test_shutdown"
#: What each cycled node logs once it is up (its executor spinning next).
READY = {"trajectory_server": "ready:", "dynamixel_driver": "servos ready", "mocap": "mocap node: source"}


def _clean(node: Any, code: int | None) -> str:
    """An empty string when the node stopped cleanly, else what went wrong with its log (a watchdog's stacks
    included)."""
    log = node.log()
    if code != 0 or "Traceback" in log or "most recent call first" in log:
        return f"exit code {code}; log:\n{log[-6000:]}"
    return ""


class GoalSender:
    """Keeps the trajectory server busy: one goal per cycle, running (timer, feedback, setpoints) at the SIGINT."""

    def __init__(self, context: Any, executor: Any) -> None:
        from control_msgs.action import FollowJointTrajectory
        from retarget.ros.action_client import LockedActionClient
        from rclpy.node import Node

        self.node = Node("shutdown_test", namespace=NS, context=context)
        self.action = LockedActionClient(self.node, FollowJointTrajectory,
                                         f"{NS}/trajectory_server/follow_joint_trajectory")
        self.executor = executor
        executor.add_node(self.node)  # after the action client: rclpy#1589

    def send(self, position: float) -> None:
        from control_msgs.action import FollowJointTrajectory
        from trajectory_msgs.msg import JointTrajectoryPoint

        if not self.action.wait_for_server(timeout_sec=10.0):
            return  # the SIGINT comes all the same; the goal only adds traffic
        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = JOINTS
        point = JointTrajectoryPoint(positions=[position] * len(JOINTS))
        point.time_from_start.sec = 2
        goal.trajectory.points.append(point)
        self.action.send_goal_async(goal)

    def close(self) -> None:
        self.executor.remove_node(self.node)
        self.action.destroy()
        self.node.destroy_node()


def test_nodes_stop_cleanly_on_sigint_again_and_again(start_node, ros_context, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from retarget.ros.spinning import TEST_STOP_GC_ENV

    monkeypatch.setenv(TEST_STOP_GC_ENV, "1")  # inherited by the node processes
    rng = random.Random(29)
    link = tmp_path / "ttyDXL"
    emulator = start_node("retarget.dynamixel.emulator", None, "emulator",
                          argv=["--ids", ",".join(map(str, IDS)), "--link", str(link), "--return-delay-us", "0"])
    wait_for(lambda: Path(f"{link}.ctl").exists(), 10.0, f"emulator control socket ({emulator.log()})")
    # joint_states at 100 Hz for the trajectory server, all the time: its subscription is taking messages when
    # the SIGINT arrives.
    start_node("retarget.ros.servo_twin", {"joint_names": JOINTS, "rate": 100.0}, "servo_twin", namespace=NS)
    params = {
        "trajectory_server": ("retarget.ros.trajectory_server",
                              {"joint_names": JOINTS, "control_rate": 100.0, "servo_max_velocity": 8.06}),
        "dynamixel_driver": ("retarget.ros.dynamixel_driver",
                             {"joint_names": JOINTS, "dynamixel_ids": IDS, "port": str(link), "rate": 200.0,
                              "return_delay_us": 0.0}),
        "mocap": ("retarget.ros.mocap_node", {"source": "twin"}),
    }
    failures: list[str] = []
    mid_exchange: list[int] = []  # cycles whose driver stop ran a collection in the middle of a bus exchange
    sender = GoalSender(*ros_context)
    started = time.monotonic()
    try:
        for cycle in range(CYCLES):
            _cycle(cycle, start_node, params, sender, rng, failures, mid_exchange)
    finally:
        sender.close()
    elapsed = time.monotonic() - started
    assert not failures, f"{len(failures)} unclean stops in {CYCLES} cycles ({elapsed:.0f} s):\n" + \
        "\n\n".join(failures)
    assert mid_exchange == list(range(CYCLES)), f"driver stops without a collection mid-exchange: {mid_exchange}"


def _cycle(cycle: int, start_node: Any, params: dict, sender: GoalSender, rng: random.Random,
           failures: list[str], mid_exchange: list[int]) -> None:
    # The driver (on the emulated bus, in the same namespace: it follows the server's setpoints too) needs the bus
    # to itself, so every node of a cycle is stopped before the next cycle starts.
    nodes = {name: start_node(module, p, f"{name}-{cycle}", namespace=NS) for name, (module, p) in params.items()}
    try:
        for name, node in nodes.items():
            wait_for(lambda: READY[name] in node.log() or node.proc.poll() is not None, 30.0,
                     f"{name} to start (cycle {cycle}): {node.log()[-2000:]}")
        sender.send(0.3 if cycle % 2 else -0.3)
        time.sleep(rng.uniform(0.0, 0.5))
    finally:
        for node in nodes.values():
            node.proc.send_signal(signal.SIGINT)
        for name, node in nodes.items():
            # One SIGINT only, as retarget up sends (node.stop() would send another to a node still running).
            hung = False
            try:
                node.proc.wait(10.0)
            except subprocess.TimeoutExpired:
                hung = True
            problem = _clean(node, node.stop(timeout=5.0))
            if name == "dynamixel_driver" and "full collection in the middle of a bus exchange" in node.log():
                mid_exchange.append(cycle)
            if problem:
                why = " (still running 10 s after its SIGINT: node.stop() sent a second one)" if hung else ""
                failures.append(f"cycle {cycle}, {name}{why}: {problem}")
