"""An rclpy action client whose goal responses cannot be lost to its own threads.

rclpy 9.1.2's ``ActionClient.send_goal_async`` registers a future for the goal's response under the client's lock,
then, after releasing the lock, replaces it with a new future and returns that one. A response that an executor's
thread takes in between completes the first; the returned future never completes while the goal runs on the server.
On a loaded host this happens: 2 of 40 plays on the twin got feedback for a goal whose response never came.
With the client's lock made re-entrant and held across the whole call, the executor takes the response only once
the returned future is registered (tests/ros/test_goal_request.py pauses the sending thread inside the call to show
both).
"""
from __future__ import annotations

import threading
from typing import Any

from rclpy.action import ActionClient

__all__ = ["LockedActionClient"]


class LockedActionClient(ActionClient):
    """``rclpy.action.ActionClient`` whose ``send_goal_async`` holds the client's lock until its future is the one
    that the response completes."""

    def __init__(self, node: Any, action_type: Any, action_name: str, **kwargs: Any) -> None:
        super().__init__(node, action_type, action_name, **kwargs)
        #: The action's type (e.g. ``FollowJointTrajectory``): its goal service's response is built from it when a
        #: goal is taken as accepted from its feedback (:func:`retarget.ros.futures.send_goal`).
        self.action_type = action_type
        if not hasattr(self, "_lock"):
            raise RuntimeError("rclpy's ActionClient has no _lock: check retarget.ros.action_client against this "
                               "rclpy release")
        # Re-entrant: rclpy's send_goal_async takes it again inside. Swapped before any goal is sent, so no response
        # can be taken under the old lock.
        self._lock = threading.RLock()

    def send_goal_async(self, goal: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return super().send_goal_async(goal, *args, **kwargs)
