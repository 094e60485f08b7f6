"""``LockedActionClient``: a goal's response reaches the returned future even when the sending thread pauses inside
``send_goal_async`` (real DDS in this process: an action server and clients, each node spun by its own executor
thread)."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("rclpy")
pytest.importorskip("control_msgs", reason="control_msgs is not built (make setup)")

pytestmark = pytest.mark.integration

#: How long each future that rclpy's action client creates pauses its thread [s]: far longer than a response takes
#: between two nodes of one process.
PAUSE_S = 0.3


@pytest.fixture
def action(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """(rclpy's client, ours) of a FollowJointTrajectory server that accepts and succeeds at once; every future made
    in ``rclpy.action.client`` pauses its thread for :data:`PAUSE_S`."""
    import rclpy
    import rclpy.action.client as action_client
    from control_msgs.action import FollowJointTrajectory
    from rclpy.action import ActionClient, ActionServer
    from rclpy.executors import SingleThreadedExecutor

    from retarget.ros.action_client import LockedActionClient

    context = rclpy.Context()
    rclpy.init(context=context)
    name = f"goal_request_{os.getpid()}"
    server_node = rclpy.create_node("goal_request_server", context=context)

    def execute(handle: Any) -> Any:
        handle.succeed()
        return FollowJointTrajectory.Result()

    server = ActionServer(server_node, FollowJointTrajectory, name, execute_callback=execute)
    client_node = rclpy.create_node("goal_request_client", context=context)
    clients = (ActionClient(client_node, FollowJointTrajectory, name),
               LockedActionClient(client_node, FollowJointTrajectory, name))
    executors = [SingleThreadedExecutor(context=context) for _ in range(2)]
    executors[0].add_node(server_node)
    executors[1].add_node(client_node)  # after the ActionClients: ros2/rclpy#1589
    stop = threading.Event()

    def spin(executor: Any) -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)

    threads = [threading.Thread(target=spin, args=(e,), daemon=True) for e in executors]
    for thread in threads:
        thread.start()
    assert all(client.wait_for_server(timeout_sec=20.0) for client in clients)

    class PausingFuture(action_client.Future):  # type: ignore[name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            time.sleep(PAUSE_S)

    monkeypatch.setattr(action_client, "Future", PausingFuture)
    try:
        yield clients
    finally:
        stop.set()
        for thread in threads:
            thread.join(5.0)
        for client in clients:
            client.destroy()
        server.destroy()
        for executor in executors:
            executor.shutdown()
        rclpy.shutdown(context=context)


def _goal() -> Any:
    from control_msgs.action import FollowJointTrajectory

    return FollowJointTrajectory.Goal()


def test_a_pause_in_send_goal_async_loses_the_response_to_rclpys_client(action: tuple[Any, Any]) -> None:
    """Why ``LockedActionClient`` exists (should an rclpy release fix it, this fails, and rclpy's client will do)."""
    client, _ = action
    future = client.send_goal_async(_goal())
    time.sleep(10 * PAUSE_S)
    assert not future.done(), "rclpy's send_goal_async no longer loses the response: LockedActionClient can go"


def test_our_client_gets_the_response_and_the_result(action: tuple[Any, Any]) -> None:
    from retarget.ros.futures import wait_future

    _, client = action
    for _ in range(2):
        handle = wait_future(client.send_goal_async(_goal()), 10.0, "no goal response")
        assert handle.accepted
        assert wait_future(handle.get_result_async(), 10.0, "no result").status == 4  # GoalStatus.STATUS_SUCCEEDED
