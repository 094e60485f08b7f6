"""Cross-process FollowJointTrajectory: the trajectory server and the servo twin as real processes over DDS.

The test process is the client: it sends goals, watches ``joint_commands`` and ``joint_states``.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import numpy as np
import pytest

from ros_helpers import retry_stale_states, wait_for

pytestmark = pytest.mark.integration

JOINTS = ["j1", "j2", "j3"]
NS = "/test_trajectory_server"
PARAMS = {"joint_names": JOINTS, "control_rate": 100.0, "default_goal_tolerance": 0.02,
          "goal_time_tolerance": 1.0, "servo_max_velocity": 8.06, "state_timeout": 2.0,
          "position_lower_limits": [-2.0, -2.0, -2.0], "position_upper_limits": [2.0, 2.0, 2.0]}


class Client:
    """Action client + topic monitors living in the test process."""

    def __init__(self, context: Any, executor: Any, namespace: str = NS) -> None:
        from control_msgs.action import FollowJointTrajectory
        from retarget.ros.action_client import LockedActionClient
        from rclpy.node import Node
        from sensor_msgs.msg import JointState
        from trajectory_msgs.msg import JointTrajectory

        self.node = Node("test_client", namespace=namespace, context=context)
        self.action = LockedActionClient(self.node, FollowJointTrajectory,
                                         f"{namespace}/trajectory_server/follow_joint_trajectory")
        self.commands: list[Any] = []
        self.states: list[tuple[float, np.ndarray]] = []
        self.node.create_subscription(JointTrajectory, "joint_commands", self.commands.append, 100)
        self.node.create_subscription(JointState, "joint_states",
                                      lambda m: self.states.append((time.monotonic(), np.array(m.position))), 100)
        self.executor = executor
        self.feedback: list[Any] = []
        executor.add_node(self.node)  # after the action client: rclpy#1589

    def close(self) -> None:
        self.executor.remove_node(self.node)
        self.action.destroy()
        self.node.destroy_node()

    def goal(self, points: list[tuple[float, list[float]]], joints: list[str] = JOINTS, **fields: Any) -> Any:
        from control_msgs.action import FollowJointTrajectory
        from trajectory_msgs.msg import JointTrajectoryPoint

        goal = FollowJointTrajectory.Goal()
        goal.trajectory.joint_names = joints
        for t, q in points:
            p = JointTrajectoryPoint(positions=[float(x) for x in q])
            p.time_from_start.sec, p.time_from_start.nanosec = int(math.floor(t)), int(round((t % 1) * 1e9))
            goal.trajectory.points.append(p)
        for key, value in fields.items():
            setattr(goal, key, value)
        return goal

    def send(self, goal: Any, timeout: float = 5.0) -> Any:
        """Send a goal; returns the accepted goal handle."""
        future = self.action.send_goal_async(goal, feedback_callback=lambda fb: self.feedback.append(fb.feedback))
        wait_for(future.done, timeout, "goal response")
        handle = future.result()
        assert handle.accepted
        return handle

    def result(self, handle: Any, timeout: float = 15.0) -> Any:
        """The goal's result response (``.result``, ``.status``), asked for again if the goal ended without it
        (:func:`retarget.ros.futures.result_or_cancel`; cancelled at ``timeout``)."""
        from retarget.ros.futures import result_or_cancel

        return result_or_cancel(handle, timeout, "no result")


def settled(client: Client, target: list[float]) -> None:
    """The states this process sees reach ``target`` (they may lag the server's view by a few messages)."""
    wait_for(lambda: np.allclose(client.states[-1][1], target, atol=0.02), 10.0,
             f"joint_states at {target} (last {client.states[-1][1]})")


def stationary(client: Client, window: float, atol: float, timeout: float) -> np.ndarray:
    """Wait until every state received in the last ``window`` seconds lies within ``atol`` of the newest one."""
    def still() -> bool:
        now = time.monotonic()
        recent = [q for t, q in client.states[-500:] if now - t <= window]
        return len(recent) >= 5 and all(np.allclose(q, recent[-1], atol=atol) for q in recent) \
            and now - client.states[-1][0] < 0.1
    wait_for(still, timeout, f"joint_states to stop moving (last {client.states[-1][1]})")
    return client.states[-1][1].copy()


@contextlib.contextmanager
def _twin_and_server(start_node: Any, ros_context: Any, namespace: str, params: dict[str, Any],
                     servo_time_constant: float = 0.02) -> Any:
    """A servo twin, a trajectory server with ``params`` and a test client in ``namespace``, warmed up by one goal
    to where the twin is (retried while the server has not yet seen joint_states itself)."""
    twin = start_node("retarget.ros.servo_twin", {"joint_names": JOINTS, "rate": 100.0,
                                                   "servo_time_constant": servo_time_constant}, namespace=namespace)
    server = start_node("retarget.ros.trajectory_server", params, namespace=namespace)
    client = Client(*ros_context, namespace=namespace)
    try:
        assert client.action.wait_for_server(timeout_sec=15.0), server.log()
        wait_for(lambda: len(client.states) > 5, 10.0, "joint_states from the twin")
        here = [float(x) for x in client.states[-1][1]]
        warm = retry_stale_states(lambda: client.result(client.send(client.goal([(0.2, here)]))).result)
        assert warm.error_code == 0, (warm.error_string, server.log())
        yield client, server, twin
    finally:
        client.close()


@pytest.fixture(scope="module")
def system(start_module_node, ros_context) -> Any:
    with _twin_and_server(start_module_node, ros_context, NS, PARAMS) as running:
        yield running


def test_goal_succeeds_and_states_follow(system) -> None:
    from control_msgs.action import FollowJointTrajectory

    client, server, _ = system
    target = [0.5, -0.3, 0.2]
    handle = client.send(client.goal([(0.5, [0.25, -0.15, 0.1]), (1.0, target)]))
    res = client.result(handle)
    assert res.result.error_code == FollowJointTrajectory.Result.SUCCESSFUL, (res.result.error_string, server.log())
    settled(client, target)
    assert client.commands and len(client.feedback) > 5
    fb = client.feedback[-1]
    assert list(fb.joint_names) == JOINTS and fb.index in (0, 1)


def test_reordered_goal(system) -> None:
    client, server, _ = system
    res = client.result(client.send(client.goal([(0.6, [0.3, 0.1, -0.2])], joints=["j3", "j1", "j2"])))
    assert res.result.error_code == 0, res.result.error_string
    settled(client, [0.1, -0.2, 0.3])


def _one_rad_away(client: Client) -> list[float]:
    """The measured pose with j2 1 rad away (towards the middle of its ±2 rad range)."""
    q = client.states[-1][1].copy()
    q[1] += 1.0 if q[1] < 0.0 else -1.0
    return [float(x) for x in q]


@pytest.mark.parametrize("case", ["unknown joint", "duplicate joint", "missing joint", "NaN", "non-monotonic",
                                  "negative time", "out of limits", "too fast", "empty", "jump to the first point"])
def test_rejected_goals_command_nothing(system, case: str) -> None:
    from control_msgs.action import FollowJointTrajectory

    R = FollowJointTrajectory.Result
    client, server, _ = system
    away = _one_rad_away(client)
    goals = {
        "unknown joint": (client.goal([(1.0, [0, 0, 0])], joints=["j1", "j2", "jx"]), R.INVALID_JOINTS),
        "duplicate joint": (client.goal([(1.0, [0, 0, 0])], joints=["j1", "j2", "j2"]), R.INVALID_JOINTS),
        "missing joint": (client.goal([(1.0, [0, 0])], joints=["j1", "j2"]), R.INVALID_JOINTS),
        "NaN": (client.goal([(1.0, [0, math.nan, 0])]), R.INVALID_GOAL),
        "non-monotonic": (client.goal([(1.0, [0, 0, 0]), (0.5, [0, 0, 0])]), R.INVALID_GOAL),
        "negative time": (client.goal([(-1.0, [0, 0, 0])]), R.INVALID_GOAL),
        "out of limits": (client.goal([(1.0, [0, 2.5, 0])]), R.INVALID_GOAL),
        "too fast": (client.goal([(0.1, [0, 1.5, 0])]), R.INVALID_GOAL),
        "empty": (client.goal([]), R.INVALID_GOAL),
        # The segment from the measured state to a first point at t = 0 lasts one control tick: 100 rad/s.
        "jump to the first point": (client.goal([(0.0, away), (1.0, away)]), R.INVALID_GOAL),
    }
    goal, code = goals[case]
    sent = time.time()  # the server stamps its setpoints with the same (system) clock
    res = client.result(client.send(goal))
    assert res.result.error_code == code, res.result.error_string
    assert res.result.error_string
    if case == "jump to the first point":
        assert "'j2'" in res.result.error_string and "above its limit 8.06 rad/s" in res.result.error_string, \
            res.result.error_string
    time.sleep(0.3)
    # Judged by stamp, not by count: under load an earlier test's last setpoints may still be arriving here.
    late = [c for c in client.commands if c.header.stamp.sec + 1e-9 * c.header.stamp.nanosec >= sent]
    assert not late, f"a rejected goal must command nothing; {len(late)} setpoints stamped after it was sent"


def test_cancel_holds_and_replacement_aborts_previous(system) -> None:
    from action_msgs.msg import GoalStatus

    client, server, _ = system
    first = client.send(client.goal([(3.0, [1.5, 1.5, 1.5])]))
    time.sleep(0.8)
    second = client.send(client.goal([(3.0, [-1.0, -1.0, -1.0])]))
    res1 = client.result(first)
    assert res1.status == GoalStatus.STATUS_ABORTED and "replaced" in res1.result.error_string
    time.sleep(0.5)
    cancel = second.cancel_goal_async()
    wait_for(cancel.done, 5.0, "cancel response")
    res2 = client.result(second)
    assert res2.status == GoalStatus.STATUS_CANCELED
    # Under load this process may see joint_states late: wait until what it sees stops moving, then check the
    # hold lasts and is not the cancelled goal's end point.
    held = stationary(client, window=0.5, atol=0.01, timeout=10.0)
    time.sleep(0.5)
    np.testing.assert_allclose(client.states[-1][1], held, atol=0.02)  # holds where it was
    assert not np.allclose(held, -1.0, atol=0.1)  # it did not run on to the cancelled goal


def test_replacing_goal_that_jumps_is_rejected_and_the_running_goal_goes_on(system) -> None:
    from action_msgs.msg import GoalStatus

    client, server, _ = system
    here = stationary(client, window=0.3, atol=0.01, timeout=10.0)
    # The running goal moves j2 only: the other joints stand still, so the client's view of them (a few messages
    # behind the server's on a loaded machine) is where the server sees them too, and only j2 can jump.
    target = [float(h) for h in here]
    target[1] += 0.4 if here[1] < 0.0 else -0.4
    first = client.send(client.goal([(1.5, target)]))
    time.sleep(0.5)
    # From the state at the switch (j2 moving towards target), 1 rad away on j2 at t = 0.
    bad = client.result(client.send(client.goal([(0.0, _one_rad_away(client)), (1.0, _one_rad_away(client))])))
    assert bad.status == GoalStatus.STATUS_ABORTED
    assert bad.result.error_code == -1 and "'j2'" in bad.result.error_string, bad.result.error_string
    res = client.result(first)
    assert res.status == GoalStatus.STATUS_SUCCEEDED, res.result.error_string  # untouched by the rejected goal
    settled(client, target)


def _stamp(msg: Any) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def test_a_goal_that_begins_after_its_stamp_succeeds_and_says_so(system) -> None:
    """A goal stamped 0.4 s ago plays from where its trajectory is now: it succeeds, and its result (and the
    server's log) say how late it began, so a client that took the stamp as the motion's start hears of it."""
    from builtin_interfaces.msg import Time
    from control_msgs.action import FollowJointTrajectory

    client, server, _ = system
    here = [float(q) for q in stationary(client, window=0.3, atol=0.01, timeout=10.0)]
    target = [float(q + (0.1 if q < 0.0 else -0.1)) for q in here]
    goal = client.goal([(0.0, here), (0.6, here), (1.4, target)])
    ns = time.time_ns() - 400_000_000  # the server's clock is the system clock
    goal.trajectory.header.stamp = Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
    res = client.result(client.send(goal))
    assert res.result.error_code == FollowJointTrajectory.Result.SUCCESSFUL, (res.result.error_string, server.log())
    note = res.result.error_string
    assert note.startswith("execution began ") and "after the goal's stamp" in note, note
    assert float(note.split()[2]) >= 0.4
    settled(client, target)
    wait_for(lambda: "execution began" in server.log(), 5.0, "the server's warning in its log")


def test_idle_server_commands_nothing_and_the_next_goal_starts_from_where_the_robot_is(system) -> None:
    """Idle, the server sends no setpoints (its tick runs only for a goal). joint_states are taken on demand: after
    1.5 s of idling (150 of them, 15 times the subscription's history) the next goal starts from where the robot is
    (the last command, which the servos hold)."""
    from control_msgs.action import FollowJointTrajectory

    client, server, _ = system
    here = stationary(client, window=0.3, atol=0.01, timeout=10.0)
    idle_from = time.time()  # setpoints are stamped with the system clock
    time.sleep(1.5)
    assert not [c for c in client.commands if _stamp(c) >= idle_from], "an idle server must command nothing"
    target = [float(q + (0.3 if q < 0.0 else -0.3)) for q in here]
    sent = time.time()
    res = client.result(client.send(client.goal([(0.8, target)])))
    assert res.result.error_code == FollowJointTrajectory.Result.SUCCESSFUL, (res.result.error_string, server.log())
    settled(client, target)
    first = next(c for c in client.commands if _stamp(c) >= sent)
    # The first setpoint is one control period along the move from the held command (0.375 rad/s: ≈ 4 mrad).
    np.testing.assert_allclose(first.points[0].positions, here, atol=0.03)


def test_stopped_joint_states_abort_the_goal_and_refuse_the_next(start_node, ros_context) -> None:
    """The freshness of on-demand joint_states is their reception time: when the twin stops, the running goal aborts
    after state_timeout, and the messages still in the subscription's history do not make the next goal start."""
    from action_msgs.msg import GoalStatus

    with _twin_and_server(start_node, ros_context, "/test_trajectory_server_stale",
                          {**PARAMS, "state_timeout": 0.5}) as (client, server, twin):
        here = [float(x) for x in client.states[-1][1]]
        handle = client.send(client.goal([(6.0, [h + 0.5 for h in here])]))
        time.sleep(0.5)
        twin.stop()
        res = client.result(handle)
        assert res.status == GoalStatus.STATUS_ABORTED, (res.result.error_string, server.log())
        assert "joint_states stopped" in res.result.error_string, (res.result.error_string, server.log())
        refused = client.result(client.send(client.goal([(1.0, here)])))
        assert refused.status == GoalStatus.STATUS_ABORTED, (refused.result.error_string, server.log())
        assert "no joint_states" in refused.result.error_string, (refused.result.error_string, server.log())


@pytest.mark.parametrize("within", [0.2, 0.0])
def test_a_goal_starts_from_the_command_the_servos_still_converge_to(start_node, ros_context, within: float) -> None:
    """A servo that has not reached its goal — here a slow one (0.5 s) whose goal ended within a 0.15 rad tolerance,
    as a servo sagging under a load holds its goal with an error — is holding the last command. The next goal's
    first setpoint continues from that command (``start_from_command_within`` 0.2 rad); with 0 it starts from the
    measured positions, first moving the goal back onto the shaft."""
    from control_msgs.action import FollowJointTrajectory

    params = {**PARAMS, "default_goal_tolerance": 0.15, "start_from_command_within": within}
    with _twin_and_server(start_node, ros_context, f"{NS}_hold_{int(within * 10)}", params,
                          servo_time_constant=0.5) as (client, server, _):
        here = stationary(client, window=0.3, atol=0.005, timeout=10.0)
        target = [float(q + (0.3 if q < 0.0 else -0.3)) for q in here]
        first_goal = client.result(client.send(client.goal([(0.3, target)])))
        assert first_goal.result.error_code == FollowJointTrajectory.Result.SUCCESSFUL, server.log()
        sent = time.time()
        second = client.result(client.send(client.goal([(1.0, target)])))
        assert second.result.error_code == FollowJointTrajectory.Result.SUCCESSFUL, server.log()
        measured_then = next(q for t, q in reversed(client.states) if t <= time.monotonic() - (time.time() - sent))
        first = np.array(next(c for c in client.commands if _stamp(c) >= sent).points[0].positions)
        assert float(np.max(np.abs(measured_then - target))) > 0.03  # still converging when the second goal came
        if within > 0:
            np.testing.assert_allclose(first, target, atol=0.005)
        else:
            assert float(np.max(np.abs(first - target))) > 0.02
