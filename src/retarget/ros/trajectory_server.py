"""The trajectory server node: FollowJointTrajectory with joint_trajectory_controller semantics.

Action ``~/follow_joint_trajectory`` (control_msgs/action/FollowJointTrajectory). A goal is validated by
:func:`retarget.control.validate_trajectory`; an invalid goal is accepted and immediately aborted with its error
code and error_string (so a client learns *why*, where joint_trajectory_controller only rejects it) and nothing
is commanded. The move from the present state to the first point obeys the velocity limits like every other segment
(from the measured state, and from the running goal's last command when it replaces one). A valid goal replaces
(aborts) the active one and is executed from the measured state: a timer at
``control_rate`` samples the trajectory, streams one-point setpoints on ``joint_commands`` and judges the
``joint_states`` against path/goal tolerances; idle, the timer is off and nothing is published (the driver holds
the last setpoint). ``joint_states`` are taken from the subscription when needed, not delivered by the executor,
and count as fresh by their reception time. Cancel → hold the current position. A fault the driver reports on
``driver_status`` aborts the running goal at once with the driver's description (servos, fault, what to do), and
refuses new goals until the driver reports it running again.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import numpy as np
import rclpy
from control_msgs.action import FollowJointTrajectory
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import CallbackGroup, ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.task import Future
from rclpy.time import Time
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from retarget.control import (ErrorCode, ExecutionState, ExecutionStatus, ExecutionStep, TrajectoryExecution,
                              TrajectoryRejected, check_first_segment, late_start_note, limits_from_urdf,
                              resolve_tolerances, start_state, validate_trajectory)
from retarget.errors import InputError
from retarget.motion.limits import JointLimit
from retarget.ros.conversions import (goal_points, goal_tolerances, horizon_msg, point_msg, setpoint_msg,
                                     time_to_seconds)
from retarget.ros.params import declare
from retarget.ros.spinning import close_node, spin, stopping_on_signals

__all__ = ["TrajectoryServer", "main"]

Result = FollowJointTrajectory.Result

#: How far [rad] the measured positions may be from the last command for a new goal to start from the command:
#: a servo's sag under load (an XM430 at factory gains saturates at 0.22 rad of error, so any load it holds).
HOLD_WITHIN_RAD = 0.2

#: How far ahead [s] each tick's ``joint_commands`` carry the trajectory: on a loaded host (load 8–9 on 2 cores)
#: commands reached the driver up to 160 ms late, which a one-point setpoint extrapolated along its velocity turns
#: into a goal degrees off in a fast move.
COMMAND_HORIZON_S = 0.2

#: ``driver_status`` as the driver publishes it: the latest status, kept for late subscribers.
DRIVER_STATUS_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                               durability=DurabilityPolicy.TRANSIENT_LOCAL)


def _level(value: bytes | int) -> int:
    """DiagnosticStatus.level is a ``byte`` field: rclpy gives ``bytes``."""
    return value[0] if isinstance(value, bytes) else int(value)


class _OnDemand(CallbackGroup):
    """A callback group the executor never waits on: its subscriptions' messages are taken when the node needs them.

    The trajectory server needs ``joint_states`` at a goal's start and at each tick of a running goal. Delivered by
    the executor, the driver's 100 Hz stream woke this node 100 times a second while idle, ≈ 9 % of a core on 2
    cores (rclpy rebuilds its wait set in Python at each wake-up); taken on demand it costs nothing until needed,
    and the reception time of each message still says how fresh it is.
    """

    def can_execute(self, entity: object) -> bool:
        return False

    def beginning_execution(self, entity: object) -> bool:
        return False

    def ending_execution(self, entity: object) -> None:
        pass


def _never_called(msg: JointState) -> None:
    """The callback of an :class:`_OnDemand` subscription (rclpy needs one)."""


@dataclass
class _ActiveGoal:
    handle: ServerGoalHandle
    execution: TrajectoryExecution
    done: Future
    ticks: int = 0


class TrajectoryServer(Node):
    """Executes FollowJointTrajectory goals by streaming setpoints to the driver."""

    def __init__(self, **kwargs) -> None:
        super().__init__("trajectory_server", **kwargs)
        T = Parameter.Type
        self.joint_names: tuple[str, ...] = tuple(declare(
            self, "joint_names", T.STRING_ARRAY, [], "controlled joints, in wire order"))
        if not self.joint_names:
            raise InputError("parameter joint_names is empty: give the robot's params file "
                             "(--ros-args --params-file config/<robot>.params.yaml)")
        self.control_rate = declare(self, "control_rate", T.DOUBLE, 100.0,
                                    "setpoint streaming and tolerance check rate [Hz]", low=1.0, high=1000.0)
        self.feedback_rate = declare(self, "action_monitor_rate", T.DOUBLE, 20.0,
                                     "action feedback rate [Hz]", low=0.1, high=1000.0)
        self.default_path = declare(self, "default_path_tolerance", T.DOUBLE, 0.0,
                                    "position tolerance while moving [rad]; 0 = not checked", low=0.0, high=10.0)
        self.default_goal = declare(self, "default_goal_tolerance", T.DOUBLE, 0.02,
                                    "position tolerance at the end [rad]; 0 = not checked", low=0.0, high=10.0)
        self.default_goal_time = declare(self, "goal_time_tolerance", T.DOUBLE, 1.0,
                                         "time allowed after the last point to reach the goal tolerance [s]; "
                                         "0 = no limit", low=0.0, high=1e3)
        self.max_velocity = declare(self, "servo_max_velocity", T.DOUBLE, 0.0,
                                    "servo speed limit for every joint [rad/s]; 0 = none", low=0.0,
                                    high=1e3) or math.inf
        self.open_loop = declare(self, "open_loop", T.BOOL, False,
                                 "start trajectories from the last command instead of the measured state")
        self.horizon = declare(self, "command_horizon", T.DOUBLE, COMMAND_HORIZON_S,
                               "each tick's joint_commands carry the trajectory this far ahead, so the driver follows "
                               "it through a late command [s]; 0 = one setpoint per tick", low=0.0, high=2.0)
        self.hold_within = declare(self, "start_from_command_within", T.DOUBLE, HOLD_WITHIN_RAD,
                                   "a goal starts from the last command while the servos hold it within this of "
                                   "their measured positions (their sag under load), farther from the measured "
                                   "state [rad]; 0 = always the measured state", low=0.0, high=3.2)
        self.state_timeout = declare(self, "state_timeout", T.DOUBLE, 0.5,
                                     "joint_states older than this abort the goal; a goal that arrives "
                                     "without fresh joint_states waits this long for them [s]", low=0.01, high=60.0)
        self.limits = self._limits(declare(self, "robot_description", T.STRING, "", "URDF XML (joint limits)"),
                                   declare(self, "position_lower_limits", T.DOUBLE_ARRAY, [],
                                           "per joint [rad]; overrides the URDF"),
                                   declare(self, "position_upper_limits", T.DOUBLE_ARRAY, [],
                                           "per joint [rad]; overrides the URDF"),
                                   declare(self, "velocity_limits", T.DOUBLE_ARRAY, [],
                                           "per joint [rad/s]; overrides the URDF"))
        self._lock = threading.Lock()
        self._active: _ActiveGoal | None = None
        self._state: tuple[np.ndarray, np.ndarray | None, float] | None = None
        self._last_command: np.ndarray | None = None
        self._driver_fault: str | None = None  # the driver's description of its fault, None while it runs
        group = self._group = ReentrantCallbackGroup()
        self._commands = self.create_publisher(JointTrajectory, "joint_commands", 10)
        # Taken when needed (goal start, each tick), never delivered by the executor: see _OnDemand.
        self._joint_states = self.create_subscription(JointState, "joint_states", _never_called, 10,
                                                      callback_group=_OnDemand())
        self.create_subscription(DiagnosticStatus, "driver_status", self._on_driver_status, DRIVER_STATUS_QOS,
                                 callback_group=group)
        self._server = ActionServer(self, FollowJointTrajectory, "~/follow_joint_trajectory",
                                    execute_callback=self._execute, goal_callback=self._on_goal,
                                    cancel_callback=self._on_cancel, callback_group=group)
        # Runs only while a goal is active: idle, the driver holds the last setpoint by itself (as ros2_control's
        # joint_trajectory_controller holds position), and the wake-ups of a 100 Hz timer with nothing to do cost
        # ≈ 4 % of a core on 2 cores.
        self._ticker = self.create_timer(1.0 / self.control_rate, self._tick, callback_group=group)
        self._ticker.cancel()
        self.get_logger().info(f"ready: {len(self.joint_names)} joints at {self.control_rate:g} Hz")

    def _limits(self, urdf: str, lower: list[float], upper: list[float],
                velocity: list[float]) -> dict[str, JointLimit]:
        limits = limits_from_urdf(urdf) if urdf else {}
        out = {n: limits.get(n, JointLimit()) for n in self.joint_names}
        for values, field in ((lower, "lower"), (upper, "upper"), (velocity, "velocity")):
            if values and len(values) != len(self.joint_names):
                raise InputError(f"{len(values)} {field} limits given for {len(self.joint_names)} joints")
            for name, value in zip(self.joint_names, values):
                out[name] = out[name]._replace(**{field: float(value)})
        return out

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _take_joint_states(self) -> None:
        """Take the joint_states received since the last call and keep the newest that names every joint, with its
        reception time (system clock [s]). The subscription's history (depth 10) holds the newest ten."""
        newest: tuple[JointState, float] | None = None
        handle = self._joint_states.handle
        with handle:
            while (taken := handle.take_message(JointState, False)) is not None:
                msg, info = taken
                if all(n in msg.name for n in self.joint_names) and len(msg.position) == len(msg.name):
                    received_ns = info.get("received_timestamp") or time.time_ns()
                    newest = (msg, received_ns * 1e-9)
        if newest is None:
            return
        msg, received = newest
        index = {n: i for i, n in enumerate(msg.name)}
        order = [index[n] for n in self.joint_names]
        positions = np.asarray(msg.position, dtype=float)[order]
        velocities = (np.asarray(msg.velocity, dtype=float)[order] if len(msg.velocity) == len(msg.name) else None)
        self._state = (positions, velocities, received)

    def _on_driver_status(self, msg: DiagnosticStatus) -> None:
        """A driver fault aborts the running goal now (not ``state_timeout`` later, when joint_states stop)."""
        with self._lock:
            if _level(msg.level) < _level(DiagnosticStatus.ERROR):
                if self._driver_fault is not None:
                    self.get_logger().info(f"driver running again: {msg.message}")
                self._driver_fault = None
                return
            self._driver_fault = msg.message or f"{msg.name}: error (no description)"
            self._last_command = None  # the driver holds what it reads back once it runs again, not this
            active = self._active
            if active is not None:
                self._finish(active, ExecutionStatus.ABORTED, ErrorCode.PATH_TOLERANCE_VIOLATED,
                             f"driver fault: {self._driver_fault}")

    def _measured(self) -> ExecutionState | None:
        """The newest joint_states, or None when none was received within ``state_timeout``."""
        self._take_joint_states()
        state = self._state
        if state is None or time.time() - state[2] > self.state_timeout:
            return None
        return ExecutionState(state[0], state[1])

    def _on_goal(self, goal_request: FollowJointTrajectory.Goal) -> GoalResponse:
        # Validation happens in _execute so that an invalid goal gets a result with its error code.
        return GoalResponse.ACCEPT

    def _on_cancel(self, goal_handle: ServerGoalHandle) -> CancelResponse:
        return CancelResponse.ACCEPT

    def _refuse_on_driver_fault(self) -> None:
        if self._driver_fault is not None:
            raise TrajectoryRejected(ErrorCode.INVALID_GOAL, f"driver fault: {self._driver_fault}")

    def _start_state(self) -> ExecutionState:
        """Where a new goal starts (:func:`retarget.control.start_state`): the last command while the servos hold
        it, else the measured state."""
        self._refuse_on_driver_fault()
        start = start_state(self._measured(), self._last_command, open_loop=self.open_loop,
                            hold_within=self.hold_within, replacing=self._active is not None)
        if start is None:
            raise TrajectoryRejected(ErrorCode.INVALID_GOAL, f"no joint_states for {list(self.joint_names)} within "
                                     f"the last {self.state_timeout:g} s: the driver is not running or not ready")
        return start

    async def _fresh_state(self, timeout: float) -> None:
        """Wait (without holding an executor thread) until joint_states are fresh, or ``timeout`` seconds."""
        arrived = Future()
        deadline = time.monotonic() + timeout

        def poll() -> None:
            if not arrived.done() and (self._measured() is not None or time.monotonic() > deadline):
                arrived.set_result(None)

        timer = self.create_timer(0.02, poll, callback_group=self._group)
        try:
            await arrived
        finally:
            self.destroy_timer(timer)

    async def _execute(self, goal_handle: ServerGoalHandle) -> Result:
        goal: FollowJointTrajectory.Goal = goal_handle.request
        try:
            if goal.multi_dof_trajectory.joint_names or goal.multi_dof_trajectory.points:
                raise TrajectoryRejected(ErrorCode.INVALID_JOINTS, "multi-DOF trajectories are not supported")
            self._refuse_on_driver_fault()  # no joint_states to wait for from a faulted driver
            if self._measured() is None and not (self.open_loop and self._last_command is not None):
                await self._fresh_state(self.state_timeout)  # a goal sent just as the driver comes up
            start = self._start_state()
            now = self._now()
            trajectory = validate_trajectory(
                goal.trajectory.joint_names, goal_points(goal.trajectory), controller_joints=self.joint_names,
                limits=self.limits, max_velocity=self.max_velocity,
                stamp=time_to_seconds(goal.trajectory.header.stamp),
                now=now, start_positions=start.positions, control_period=1.0 / self.control_rate)
            tolerances = resolve_tolerances(
                self.joint_names, default_path=self.default_path, default_goal=self.default_goal,
                default_goal_time=self.default_goal_time, path=goal_tolerances(goal.path_tolerance),
                goal=goal_tolerances(goal.goal_tolerance),
                goal_time=goal.goal_time_tolerance.sec + 1e-9 * goal.goal_time_tolerance.nanosec)
            done = Future()
            execution = TrajectoryExecution(trajectory, tolerances, start, start_offset=now - trajectory.start_time)
            # No await from the validation to the switch: the tick cannot run in between, so the state checked is
            # the state at the switch.
            with self._lock:
                if self._active is not None and self._last_command is not None:
                    # The servos are being commanded along the running goal: the move to the new one starts from
                    # that command as much as from the measured position.
                    check_first_segment(trajectory, self._last_command, now=now, limits=self.limits,
                                        max_velocity=self.max_velocity, control_period=1.0 / self.control_rate,
                                        origin="commanded position")
                if self._active is not None:
                    self._active.done.set_result((ExecutionStatus.ABORTED, ErrorCode.INVALID_GOAL,
                                                  "replaced by a new goal"))
                    self.get_logger().info("active goal replaced by a new goal")
                self._active = _ActiveGoal(goal_handle, execution, done)
                if self._ticker.is_canceled():
                    self._ticker.reset()
        except TrajectoryRejected as exc:
            self.get_logger().error(f"goal rejected ({exc.code.name}): {exc}")
            goal_handle.abort()
            return Result(error_code=int(exc.code), error_string=str(exc))
        self.get_logger().info(f"executing a {len(trajectory.time)}-point trajectory of "
                               f"{trajectory.duration:.3f} s")
        late = late_start_note(now - trajectory.start_time, 1.0 / self.control_rate)
        if late:
            self.get_logger().warning(late)
        status, code, message = await done
        if late:  # a client that stored the stamp as the motion's start (a take's alignment) learns it too
            message = f"{message}; {late}" if message else late
        if status is ExecutionStatus.SUCCEEDED:
            goal_handle.succeed()
        elif status is ExecutionStatus.ABORTED:
            goal_handle.abort()
            self.get_logger().warning(f"goal aborted ({ErrorCode(code).name}): {message}")
        else:
            goal_handle.canceled()
            self.get_logger().info("goal canceled: holding position")
        return Result(error_code=int(code), error_string=message)

    def _hold(self, positions: np.ndarray) -> None:
        self._last_command = positions.copy()
        self._commands.publish(setpoint_msg(self.joint_names, positions, np.zeros_like(positions),
                                            self.get_clock().now().to_msg()))

    def _tick(self) -> None:
        with self._lock:
            active = self._active
            if active is None:
                return
            measured = self._measured()
            if active.handle.is_cancel_requested:
                self._hold(measured.positions if measured is not None else self._last_command_or_start(active))
                self._finish(active, None, ErrorCode.SUCCESSFUL, "canceled")
                return
            if measured is None:
                self._hold(self._last_command_or_start(active))
                self._finish(active, ExecutionStatus.ABORTED, ErrorCode.PATH_TOLERANCE_VIOLATED,
                             f"joint_states stopped: none within the last {self.state_timeout:g} s")
                return
            now = self.get_clock().now()
            step = active.execution.update(now.nanoseconds * 1e-9, measured)
            if step.status is ExecutionStatus.ABORTED:
                self._hold(measured.positions)
            else:
                self._last_command = step.desired.positions.copy()
                self._commands.publish(self._command(active, step, now))
            every = max(1, round(self.control_rate / self.feedback_rate))
            if active.ticks % every == 0 or step.status is not ExecutionStatus.RUNNING:
                self._feedback(active, step, measured)
            active.ticks += 1
            if step.status is not ExecutionStatus.RUNNING:
                self._finish(active, step.status, step.code, step.message)

    def _command(self, active: _ActiveGoal, step: ExecutionStep, now: Time) -> JointTrajectory:
        """This tick's ``joint_commands``, stamped with the instant it samples (the driver runs it on that clock:
        control/setpoints.py): the desired state now and, with a ``command_horizon``, the next ticks' samples."""
        steps = int(round(self.horizon * self.control_rate))
        if steps < 1:
            return setpoint_msg(self.joint_names, step.desired.positions, step.desired.velocities, now.to_msg())
        execution = active.execution
        t = now.nanoseconds * 1e-9 - execution.trajectory.start_time
        times = np.arange(steps + 1) / self.control_rate
        ahead = [step.desired] + [execution.sampler.sample(t + dt) for dt in times[1:]]
        return horizon_msg(self.joint_names, times, np.array([a.positions for a in ahead]),
                           np.array([a.velocities for a in ahead]), now.to_msg())

    def _last_command_or_start(self, active: _ActiveGoal) -> np.ndarray:
        if self._last_command is not None:
            return self._last_command
        return active.execution.sampler.start_positions

    def _finish(self, active: _ActiveGoal, status: ExecutionStatus | None, code: ErrorCode, message: str) -> None:
        """Resolve the goal's future (``status=None`` = canceled) and clear it; caller holds the lock."""
        self._active = None
        self._ticker.cancel()
        if not active.done.done():
            active.done.set_result((status, code, message))

    def _feedback(self, active: _ActiveGoal, step: ExecutionStep, measured: ExecutionState) -> None:
        fb = FollowJointTrajectory.Feedback()
        fb.header.stamp = self.get_clock().now().to_msg()
        fb.joint_names = list(self.joint_names)
        fb.desired = point_msg(step.desired.positions, step.desired.velocities, step.desired.accelerations,
                               max(0.0, self._now() - active.execution.trajectory.start_time))
        fb.actual = point_msg(measured.positions, measured.velocities)
        fb.error = point_msg(step.position_error, step.velocity_error)
        fb.index = int(step.desired.index)
        active.handle.publish_feedback(fb)


def main(args: list[str] | None = None) -> None:
    """Run the trajectory server until Ctrl-C or external shutdown."""
    try:
        with rclpy.init(args=args), stopping_on_signals():
            node = TrajectoryServer()
            # One thread: goal execution is async (awaits, holds no thread). rclpy's MultiThreadedExecutor kept this
            # node at ≈ 98 % of a core with its 100 Hz timer (busy re-waking on a timer whose callback was in flight),
            # which on 2 cores starved joint_states for seconds (flaky cross-process tests); single-threaded: ≈ 16 %.
            spin(node, SingleThreadedExecutor)
            close_node(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == "__main__":
    main()
