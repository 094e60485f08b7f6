"""Small helpers shared by the ROS integration tests."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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

    Also again when the goal response never arrives (seen with 3 busy processes on 2 cores: the server logged the goal
    executing, the client timed out waiting for the acceptance). rclpy's own client lost such responses to a race
    that ``LockedActionClient`` closes; a response sent before discovery has matched the client's reader would be
    lost too.
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


def sent_goal(client: Any, goal: Any, log: Callable[[], str], attempt_s: float = 10.0, timeout: float = 40.0,
              **kwargs: Any) -> Any:
    """Send ``goal`` with the action ``client`` and return its goal handle once the server has answered; send it
    again when no answer came within ``attempt_s`` (a response lost to discovery, as in
    :func:`retry_stale_states`; seen once in CI: no goal response for 20 s from a planner node that had started).
    Only for goals whose repetition does no harm (a lost answer's goal may still run on the server).

    Raises:
        AssertionError: no answer within ``timeout``; the message carries ``log()`` (the node's side).
    """
    deadline = time.monotonic() + timeout
    while True:
        sent = client.send_goal_async(goal, **kwargs)
        try:
            wait_for(sent.done, attempt_s, "goal response")
            return sent.result()
        except AssertionError as exc:
            if time.monotonic() + attempt_s > deadline:
                raise AssertionError(f"{exc} (sent until {timeout} s); node log:\n{log()}") from exc


def result_of(goal_handle: Any, timeout: float, log: Callable[[], str]) -> Any:
    """The result of the goal behind rclpy's ``goal_handle`` (:func:`retarget.ros.futures.result_or_cancel`: asked
    for again when the goal has ended without it). Keep ``timeout`` under the test's pytest-timeout: a goal that never
    ends then fails the test with the node's log instead of hanging it until the watchdog ends the worker.

    Raises:
        AssertionError: no result within ``timeout`` (the goal is cancelled); the message carries ``log()``.
    """
    from retarget.ros.futures import result_or_cancel

    try:
        return result_or_cancel(goal_handle, timeout, "no result").result
    except TimeoutError as exc:
        raise AssertionError(f"{exc} (goal status {goal_handle.status}); node log:\n{log()}") from exc


@contextmanager
def retarget_up(args: Sequence[str], env: Mapping[str, str] | None = None, ready_s: float = 90.0,
                stop_s: float = 30.0) -> Iterator[list[str]]:
    """``retarget up ARGS`` (stdout and stderr together) until it reports ready; yields its output lines as they
    come, then stops it as Ctrl-C does (SIGKILL after ``stop_s``)."""
    from retarget.processes import die_with_parent

    proc = subprocess.Popen([sys.executable, "-m", "retarget.cli", "up", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ if env is None else env),
                            start_new_session=True, preexec_fn=die_with_parent(signal.SIGINT))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        wait_for(lambda: any('"state": "ready"' in line for line in lines) or proc.poll() is not None, ready_s,
                 f"retarget up {' '.join(args[:1])} to be ready")
        assert proc.poll() is None, "".join(lines[-40:])
        yield lines
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(stop_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5.0)
