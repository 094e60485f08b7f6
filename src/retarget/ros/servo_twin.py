"""The servo twin node: a stand-in for driver + servos that needs no serial port.

Subscribes ``joint_commands`` (one point = setpoint, several = interpolated, as the Dynamixel driver does),
moves first-order servo models (:mod:`retarget.control.servo_model`) towards the trajectory ``goal_lead`` ahead of
each tick, as the driver writes its goals, and publishes ``joint_states`` at ``rate``.
The emulated Dynamixel bus with the real driver is the full digital twin; this node keeps the trajectory server
testable on its own.
"""
from __future__ import annotations

import numpy as np
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from retarget.control import CommandFollower, ServoState, TrajectoryRejected, step_servos
from retarget.errors import InputError
from retarget.ros.conversions import goal_points
from retarget.ros.params import declare, declare_goal_lead
from retarget.ros.spinning import close_node, spin, stopping_on_signals

__all__ = ["ServoTwin", "main"]


class ServoTwin(Node):
    """First-order servos driven by ``joint_commands``, reporting ``joint_states``."""

    def __init__(self, **kwargs) -> None:
        super().__init__("servo_twin", **kwargs)
        T = Parameter.Type
        self.joint_names = tuple(declare(self, "joint_names", T.STRING_ARRAY, [], "joints, in wire order"))
        if not self.joint_names:
            raise InputError("parameter joint_names is empty")
        initial = declare(self, "initial_positions", T.DOUBLE_ARRAY, [], "start positions [rad]; empty = zeros")
        self.rate = declare(self, "rate", T.DOUBLE, 100.0, "joint_states rate [Hz]", low=1.0, high=1000.0)
        self.goal_lead = declare_goal_lead(self, self.rate)
        self.tau = declare(self, "servo_time_constant", T.DOUBLE, 0.02, "servo response time constant [s]",
                           low=1e-4, high=10.0)
        self.max_velocity = declare(self, "servo_max_velocity", T.DOUBLE, 8.06, "servo speed limit [rad/s]",
                                    low=1e-3, high=1e3)
        q0 = np.asarray(initial, dtype=float) if initial else np.zeros(len(self.joint_names))
        if q0.shape != (len(self.joint_names),):
            raise InputError(f"{q0.size} initial_positions for {len(self.joint_names)} joints")
        self._servos = ServoState.at_rest(q0)
        self._follower = CommandFollower(self.joint_names, q0)
        self._states = self.create_publisher(JointState, "joint_states", 10)
        self.create_subscription(JointTrajectory, "joint_commands", self._on_command, 10)
        self.create_timer(1.0 / self.rate, self._tick)
        self._last = self._now()

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_command(self, msg: JointTrajectory) -> None:
        try:
            self._follower.command(msg.joint_names, goal_points(msg), self._now())
        except TrajectoryRejected as exc:
            self.get_logger().error(f"joint_commands ignored: {exc}")

    def _tick(self) -> None:
        now = self._now()
        dt, self._last = max(now - self._last, 1e-6), now
        goals = self._follower.goal_at(now + self.goal_lead)
        self._servos = step_servos(self._servos.replace(goals=goals), dt, self.tau, self.max_velocity)
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.name = list(self.joint_names)
        msg.position = self._servos.positions.tolist()
        msg.velocity = self._servos.velocities.tolist()
        self._states.publish(msg)


def main(args: list[str] | None = None) -> None:
    """Run the servo twin until Ctrl-C or external shutdown."""
    try:
        with rclpy.init(args=args), stopping_on_signals():
            node = ServoTwin()
            spin(node)
            close_node(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == "__main__":
    main()
