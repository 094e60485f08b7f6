"""Small helpers shared by the ROS integration tests."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, step: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def retry_stale_states(attempt: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Run ``attempt()`` (send a goal, return its FollowJointTrajectory result) again while the server rejects it
    for stale joint_states: on a loaded host the server's DDS discovery of the driver may finish after the test's.

    Also again when the goal response never arrives: ``wait_for_server`` can report the server before its response
    writer has matched this client's reader, and a response sent then is lost (seen once with 3 busy processes on 2
    cores: the server logged the goal executing, the client timed out waiting for the acceptance).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = attempt()
        except AssertionError as exc:
            if "goal response" not in str(exc) or time.monotonic() > deadline:
                raise
            continue
        if "no joint_states" not in result.error_string or time.monotonic() > deadline:
            return result
        time.sleep(0.5)
