"""The Dynamixel driver node: X-series servos (``servo_model``) over Protocol 2.0 (``retarget.dynamixel.bus``).

Subscribes ``joint_commands`` (trajectory_msgs/JointTrajectory: one point = setpoint, several = interpolated at
``rate``); each tick of the control loop (its own thread, at ``rate``) Sync Writes the goal positions once commanded
(when they changed, and at least every :data:`GOAL_REFRESH_S`) and Sync Reads present position/velocity/current,
published on ``joint_states``. At start, after the model check and with torque off, it writes each servo's Position
P/I/D Gain and PWM Limit from the robot's servo parameters (the ``servo:`` section of the description
``robot_name`` names: :func:`retarget.dynamixel.robot_servos.servos_for_joints`) and reads them back
(:meth:`retarget.dynamixel.bus.DynamixelBus.write_servo_gains`; a value read back otherwise is a fault). Torque on
at start (``torque_on_start``), off at shutdown and on any fault. Lost or
corrupt replies are retried every tick for ``comm_error_window`` seconds before they become a fault; a
device-reported error (status error, Hardware Error Status bits) or a vanished port is a fault at once, latched as
on the servo. A fault never crashes the node: it turns torque off where the bus still answers, stops commanding, and
reports on ``driver_status`` (diagnostic_msgs/DiagnosticStatus, transient local: the trajectory server aborts its
goal on it), ``/diagnostics`` and the log, naming the servo(s), the fault and what to do. ``~/reboot``
(std_srvs/Trigger) reopens the port if needed, reboots servos with hardware errors and resumes, holding the present
position.
"""
from __future__ import annotations

import array
import gc
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from retarget.control import CommandFollower, TrajectoryRejected
from retarget.dynamixel import (
    DEFAULT_SERVO_MODEL,
    SERVO_MODELS,
    CrcError,
    DeviceError,
    DynamixelError,
    GoalOutOfRangeError,
    HostError,
    MalformedPacketError,
    NoReplyError,
    OperatingMode,
    load_control_table,
)
from retarget.dynamixel.robot_servos import servos_for_joints
from retarget.errors import InputError
from retarget.processes import realtime_priority
from retarget.ros.conversions import goal_points
from retarget.ros.params import declare, declare_goal_lead
from retarget.ros.spinning import TEST_STOP_GC_ENV, close_node, spin, stopping_on_signals

__all__ = ["DRIVER_STATUS_QOS", "DynamixelDriver", "Fault", "main"]

#: Host-detected errors that a retry on the next tick may clear.
TRANSIENT = (NoReplyError, CrcError, MalformedPacketError)

#: Longest time an unchanged goal goes without being written again [s]. A goal that changed is written at once;
#: an unchanged one needs no Sync Write each tick (the servos keep their Goal Position), but one lost on a noisy
#: bus (Sync Write has no reply) is repaired within this time.
GOAL_REFRESH_S = 1.0
R = TypeVar("R")

#: How long :meth:`DynamixelDriver.shutdown` waits for the control loop to end its tick [s], and then for the bus
#: [s]: a tick is a Sync Write and a Sync Read (milliseconds; a few reply timeouts of 34 ms when replies are lost).
LOOP_JOIN_S = 2.0
BUS_WAIT_S = 1.5

# Test hook (tests/ros/test_shutdown_cycles.py): when a stop ends the control loop, its last exchange runs a full
# garbage collection between the Sync Write and the Sync Read, holding the bus.
_TEST_STOP_GC = bool(os.environ.get(TEST_STOP_GC_ENV))


class _StartInterrupted(Exception):
    """The context went down (a stop signal) while the servos were being started."""

#: ``driver_status``: the latest status only, kept for late subscribers (a trajectory server started after a fault).
DRIVER_STATUS_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                               durability=DurabilityPolicy.TRANSIENT_LOCAL)


@dataclass
class Fault:
    """The fault that stopped the driver.

    Attributes:
        kind: ``"host"`` (no reply, CRC, port gone) or ``"device"`` (the servo reported it).
        servo_id: Offending servo, or ``None`` when the whole bus is affected.
        message: Readable text.
        hardware_errors: ``{servo_id: [bit names]}`` read after the fault.
        torque_off_failed: Servos whose torque state is unknown: neither the torque-off write nor a read-back of
            Torque Enable got through (a lost port: every servo). Nothing reaches them, so torque stays as it was.
        port: The bus's serial port.
    """

    kind: str
    servo_id: int | None
    message: str
    hardware_errors: dict[int, list[str]] = field(default_factory=dict)
    torque_off_failed: list[int] = field(default_factory=list)
    port: str = ""

    @property
    def servo_ids(self) -> list[int]:
        """Every servo the fault concerns: the offending one, those with hardware errors, those out of reach."""
        ids = {*self.hardware_errors, *self.torque_off_failed}
        if self.servo_id is not None:
            ids.add(self.servo_id)
        return sorted(ids)

    def describe(self, reboot_service: str) -> str:
        """One line for a person: which servo(s), what happened, what torque is doing and what to do."""
        where = f"servo {self.servo_id}" if self.servo_id is not None else f"bus {self.port}"
        parts = [f"{self.kind} fault on {where}: {self.message}"]
        if self.hardware_errors:
            parts.append("hardware errors: " + ", ".join(f"servo {i} {'+'.join(bits)}"
                                                          for i, bits in sorted(self.hardware_errors.items())))
        if self.torque_off_failed:
            parts.append(f"torque state unknown on servos {self.torque_off_failed} (nothing reaches them: torque "
                         "stays as it was, on if it was on), torque off on the others")
        else:
            parts.append("torque off on every servo")
        if self.kind == "device":
            todo = "remove the cause (load, heat, supply voltage)"
        else:
            todo = "check the adapter, cables and servo power"
        parts.append(f"{todo}, then call {reboot_service}")
        return "; ".join(parts)


class DynamixelDriver(Node):
    """Streams joint commands to Dynamixel servos and publishes their state."""

    def __init__(self, **kwargs) -> None:
        super().__init__("dynamixel_driver", **kwargs)
        from retarget.dynamixel.bus import DynamixelBus  # needs pyserial + dynamixel_sdk

        T = Parameter.Type
        self.joint_names = tuple(declare(self, "joint_names", T.STRING_ARRAY, [], "joints, in wire order"))
        ids = declare(self, "dynamixel_ids", T.INTEGER_ARRAY, [], "servo ID per joint")
        port = declare(self, "port", T.STRING, "/dev/ttyUSB0", "serial device (or the emulated bus's link)")
        baudrate = declare(self, "baudrate", T.INTEGER, 1_000_000, "bus speed [bit/s]", low=9600, high=4_500_000)
        model = declare(self, "servo_model", T.STRING, DEFAULT_SERVO_MODEL,
                        f"servo model of every ID ({', '.join(SERVO_MODELS)}): its control table; a servo "
                        "answering with another model number is refused at start")
        offsets = declare(self, "offsets", T.DOUBLE_ARRAY, [],
                          "servo angle at joint angle 0 per joint [rad] (servo angle 0 = 2048 ticks); "
                          "empty = all 0")
        directions = declare(self, "directions", T.INTEGER_ARRAY, [], "+1 or -1 per joint; empty = all +1")
        mode = declare(self, "operating_mode", T.STRING, "position", "position | extended_position | "
                       "current_based_position")
        delay = declare(self, "return_delay_us", T.DOUBLE, -1.0, "Return Delay Time [us]; -1 = leave as is",
                        low=-1.0, high=508.0)
        self.rate = declare(self, "rate", T.DOUBLE, 100.0, "control and joint_states rate [Hz]", low=1.0,
                            high=1000.0)
        self.goal_lead = declare_goal_lead(self, self.rate)
        self.torque_on_start = declare(self, "torque_on_start", T.BOOL, True, "enable torque when started")
        self.comm_error_window = declare(self, "comm_error_window", T.DOUBLE, 1.5,
                                         "how long lost or corrupt replies are retried, with no good read in "
                                         "between, before they latch a fault [s]; 0 = none", low=0.0, high=60.0)
        self.startup_timeout = declare(self, "startup_timeout", T.DOUBLE, 5.0,
                                       "how long lost replies are retried while starting (model check, configure, "
                                       "first read, torque on) [s]",
                                       low=0.0, high=60.0)
        robot = declare(self, "robot_name", T.STRING, "", "robot whose description (config/<robot>.yaml, servo: "
                        "section) gives the servos' gains; empty: the servos' gains are left as they are")
        self.write_gains = declare(self, "write_servo_gains", T.BOOL, True,
                                   "write each servo's Position P/I/D Gain and PWM Limit from the robot's servo "
                                   "parameters at start and read them back (needs robot_name)")
        self.thread_priority = declare(self, "thread_priority", T.INTEGER, 50,
                                       "SCHED_FIFO priority of the control loop's thread (as ros2_control's "
                                       "controller manager); 0 = ordinary scheduling", low=0, high=99)
        self._comm_errors_since: float | None = None  # monotonic [s] of the first failed read of a run
        if not self.joint_names or len(ids) != len(self.joint_names):
            raise InputError(f"need one dynamixel_ids entry per joint: {len(ids)} ids for "
                             f"{len(self.joint_names)} joint_names")
        try:
            self.operating_mode = OperatingMode[mode.upper()]
        except KeyError as exc:
            raise InputError(f"operating_mode {mode!r} is not a position mode") from exc
        self.return_delay_us = None if delay < 0 else delay
        self.bus = DynamixelBus(port, ids, baudrate=baudrate, offsets=offsets or None,
                                directions=directions or None, table=load_control_table(model=model))
        # The servos' loops as the robot declares them, per joint (None: a joint without servo parameters). Checked
        # here, before anything is written: a gain outside the control table's range stops the node at once.
        self.servo_params: tuple | None = None
        if robot and self.write_gains:
            self.servo_params = servos_for_joints(robot, self.joint_names)
            self.bus.servo_gains(self.servo_params)
        self._lock = threading.Lock()
        self.fault: Fault | None = None
        self._follower: CommandFollower | None = None
        self._commanded = False
        self._written: np.ndarray | None = None  # the goal [rad] last Sync Written, None: write the next one
        self._written_at = -math.inf  # monotonic time of that write [s]
        self._hardware: dict[int, list[str]] = {}
        self._states = self.create_publisher(JointState, "joint_states", 10)
        # One message, its names set once: only the stamp and the arrays change from tick to tick.
        self._state_msg = JointState(name=list(self.joint_names))
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._status = self.create_publisher(DiagnosticStatus, "driver_status", DRIVER_STATUS_QOS)
        self.reboot_service = f"{self.get_fully_qualified_name()}/reboot"
        self.create_subscription(JointTrajectory, "joint_commands", self._on_command, 10)
        self.create_service(Trigger, "~/reboot", self._on_reboot)
        self.create_timer(1.0, self._publish_diagnostics)
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self._loop_error: BaseException | None = None
        self._loop_failed = self.create_guard_condition(self._raise_loop_error)
        with self._lock:
            self._start()

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _start(self) -> None:
        """Open, check the servos' model, configure, torque on, hold the present position; a failure becomes a
        fault. Caller holds lock."""
        try:
            if not self.bus.is_open:
                self.bus.open()
            # A loaded host or a servo still booting often misses the first packets, so each start-up step retries
            # lost or corrupt replies until startup_timeout. Each is safe to repeat: torque is off until configure()
            # succeeds, pings and reads change nothing, and Torque Enable = 1 written twice is written once. (They
            # retry one by one: configure() again after a torque-on whose reply was lost would meet a locked EEPROM.)
            deadline = time.monotonic() + self.startup_timeout
            # A servo of another model than servo_model would be driven through the wrong control table.
            self._retry("model check", deadline, self.bus.check_models)
            self._retry("configure", deadline, lambda: self.bus.configure(self.operating_mode,
                                                                           return_delay_us=self.return_delay_us))
            if self.servo_params is not None:
                # Torque is off (configure): PWM Limit is an EEPROM item.
                params = self.servo_params
                written = self._retry("servo gains", deadline, lambda: self.bus.write_servo_gains(params))
                self.get_logger().info("servo gains written and read back: " + _describe_gains(written))
            state = self._retry("first read", deadline, self.bus.read_state)
            self._follower = CommandFollower(self.joint_names, state.position)
            self._commanded = False
            self._written = None
            if self.torque_on_start:
                self._retry("torque on", deadline, lambda: self.bus.set_torque(True))
            self.fault = None
            self._comm_errors_since = None
            self.get_logger().info(f"bus {self.bus.port_name}: {len(self.bus.ids)} servos ready, torque "
                                   f"{'on' if self.torque_on_start else 'off'}")
            self._publish_diagnostics()
        except DynamixelError as exc:
            self._enter_fault(exc)
        except _StartInterrupted:
            # Stopped while starting: nothing more is started; shutdown() turns the torque off and closes.
            self._follower = None

    def _retry(self, what: str, deadline: float, step: Callable[[], R]) -> R:
        """``step()``, again after a lost or corrupt reply until ``deadline`` (monotonic [s]) has passed."""
        while True:
            if not self.context.ok():
                raise _StartInterrupted(what)
            try:
                return step()
            except TRANSIENT as exc:
                if time.monotonic() > deadline:
                    raise
                self.get_logger().warning(f"{what} failed, retrying: {exc}", throttle_duration_sec=1.0)

    def start_control_loop(self) -> None:
        """Start the thread that runs the control loop at ``rate`` until :meth:`shutdown` (:func:`main` does)."""
        if self._loop is None:
            self._loop = threading.Thread(target=self._control_loop, name="dynamixel-control", daemon=True)
            self._loop.start()

    def raise_executor_priority(self) -> None:
        """Run the calling thread (the executor's) under ``SCHED_FIFO`` one below the control loop.

        The threads of one Python process take turns holding its interpreter lock, so the control loop's tick can
        wait on the executor thread (a command being taken, a status published) to hand the lock over. Ordinarily
        scheduled, that thread waits for a core behind every busy process: on the twin at load 6–9 on 2 cores the
        loop's goal writes stalled for up to 200 ms though the loop itself ran under ``SCHED_FIFO``.
        """
        if self.thread_priority > 1:
            refused = realtime_priority(self.thread_priority - 1)
            if refused is not None:
                self.get_logger().warning(f"the executor runs with ordinary scheduling: {refused}")

    def _control_loop(self) -> None:
        """Tick at ``rate`` on a schedule; a tick that ends late is followed at once by the next (missed ones skipped).

        The bus I/O runs on its own thread, as ros2_control's control loop does, not on an executor timer: each
        executor wake-up costs rclpy's Python wait-set rebuild, and a 100 Hz timer's wake-ups took ≈ 6 % of a core
        on 2 cores on top of the ticks themselves. Callbacks (commands, reboot) share the bus through ``_lock``.
        An error escaping a tick is raised again in the executor (see :meth:`_raise_loop_error`).
        """
        refused = realtime_priority(self.thread_priority)
        if refused is not None:
            self.get_logger().warning(f"the control loop runs with ordinary scheduling: {refused}; on a loaded host "
                                      "its ticks, and the servos' goals, come late")
        period = 1.0 / self.rate
        due = time.monotonic()
        try:
            while not self._stop.wait(max(0.0, due - time.monotonic())):
                try:
                    self._tick()
                except Exception as exc:  # noqa: BLE001 - handed to the executor below
                    if self._stop.is_set() or not self.context.ok():
                        return  # the context went down under the tick (Ctrl-C): the node is stopping anyway
                    self._loop_error = exc
                    try:
                        self._loop_failed.trigger()
                    except Exception:  # noqa: BLE001 - the context went down meanwhile: stopping anyway
                        pass
                    return
                due += period
                if due < time.monotonic() - period:  # more than a period late (a loaded host): skip missed ticks
                    due = time.monotonic()
        finally:
            if _TEST_STOP_GC and (self._stop.is_set() or not self.context.ok()):
                self._collect_mid_exchange()

    def _collect_mid_exchange(self) -> None:
        """Test hook (``RETARGET_TEST_STOP_GC``): the control loop's last exchange during a stop (or the shutdown's,
        when the stop came before the loop started), with a full garbage collection between its Sync Write and its
        Sync Read, holding the bus (the torque-off waits for it). A failed write or read (a reply lost on a loaded
        host) is said on the hook's line: the collection ran all the same."""
        with self._lock:
            if not self.bus.is_open or self.fault is not None or self._follower is None:
                return
            failed = ""
            try:
                if self._written is not None:
                    self.bus.write_goal_positions(self._written)
            except DynamixelError as exc:
                failed += f"; its Sync Write failed: {exc}"
            gc.collect()
            try:
                self.bus.read_state(raise_on_alert=False)
            except DynamixelError as exc:
                failed += f"; its Sync Read failed: {exc}"
        print(f"test hook: full collection in the middle of a bus exchange, during the stop{failed}", file=sys.stderr,
              flush=True)

    def _raise_loop_error(self) -> None:
        """Re-raise, in the executor, the error that ended the control loop: spinning fails as a timer's would."""
        if self._loop_error is not None:
            raise self._loop_error

    def _on_command(self, msg: JointTrajectory) -> None:
        with self._lock:
            if self.fault is not None or self._follower is None:
                self.get_logger().warning("joint_commands ignored: driver is in fault state (call ~/reboot)",
                                          throttle_duration_sec=1.0)
                return
            try:
                stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
                self._follower.command(msg.joint_names, goal_points(msg), self._now(), stamp=stamp or None)
                self._commanded = True
            except TrajectoryRejected as exc:
                self.get_logger().error(f"joint_commands rejected: {exc}")

    def _tick(self) -> None:
        with self._lock:
            if self.fault is not None or self._follower is None:
                return
            try:
                if self._commanded:
                    self._write_goal(self._follower.goal_at(self._now() + self.goal_lead))
                state = self.bus.read_state()
            except TRANSIENT as exc:
                # A lost or corrupt reply now and then is normal on a loaded host or a noisy bus, and a burst of
                # them (electrical noise) passes; only errors lasting comm_error_window are a fault (a disconnect,
                # a servo that stopped answering). Goals are still written meanwhile: Sync Write needs no reply.
                now = time.monotonic()
                if self._comm_errors_since is None:
                    self._comm_errors_since = now
                lasted = now - self._comm_errors_since
                if lasted >= self.comm_error_window:
                    self._enter_fault(exc, lasted)
                else:
                    self.get_logger().warning(f"communication error for {lasted:.2f} s (a fault after "
                                              f"{self.comm_error_window:g} s): {exc}", throttle_duration_sec=1.0)
                return
            except DynamixelError as exc:
                self._enter_fault(exc)
                return
            self._comm_errors_since = None
        msg = self._state_msg
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.position = array.array("d", state.position.tobytes())
        msg.velocity = array.array("d", state.velocity.tobytes())
        msg.effort = array.array("d", state.current.tobytes())  # [A]: the XM430 reports current, not torque
        self._states.publish(msg)

    def _write_goal(self, goal: np.ndarray) -> None:
        """Sync Write ``goal`` [rad] ``(m,)`` if it changed or :data:`GOAL_REFRESH_S` passed. Caller holds lock."""
        now = time.monotonic()
        if (self._written is not None and np.array_equal(goal, self._written)
                and now - self._written_at < GOAL_REFRESH_S):
            return
        try:
            self.bus.write_goal_positions(goal)
        except GoalOutOfRangeError as exc:
            # A bad command is not a bus fault: drop it and keep holding the last goal written.
            self.get_logger().error(f"command dropped: {exc}")
            self._follower = CommandFollower(self.joint_names, self.bus_state_positions())
            self._written = None
            return
        self._written, self._written_at = goal, now

    def bus_state_positions(self) -> np.ndarray:
        """Present positions [rad] ``(m,)`` (raises bus errors)."""
        return self.bus.read_state(raise_on_alert=False).position

    def _enter_fault(self, exc: DynamixelError, lasted: float = 0.0) -> None:
        """Torque off where possible, record and report the fault. Caller holds the lock.

        Args:
            exc: The error that latched the fault.
            lasted: How long transient errors had gone on [s] (0 for an immediate fault).
        """
        kind = "device" if isinstance(exc, DeviceError) else "host" if isinstance(exc, HostError) else "other"
        servo_id = getattr(exc, "servo_id", None)
        message = str(exc) + (f", for {lasted:.2f} s" if lasted > 0.0 else "")
        fault = Fault(kind, servo_id, message, port=self.bus.port_name)
        # A closed port (it vanished under the failed exchange) reaches no servo: every torque state is unknown.
        failed = self.bus.safe_torque_off() if self.bus.is_open else dict.fromkeys(self.bus.ids, exc)
        fault.torque_off_failed = sorted(failed)
        if isinstance(exc, DeviceError) and exc.hardware_errors:
            fault.hardware_errors[exc.servo_id] = exc.hardware_errors
        for sid in self.bus.ids:
            if sid in failed:
                continue
            try:
                bits = self.bus.read(sid, "Hardware Error Status")
            except DynamixelError:
                continue
            if bits:
                from retarget.dynamixel import HardwareErrorStatus

                fault.hardware_errors[sid] = HardwareErrorStatus(bits).names()
        self.fault = fault
        self._follower = None
        self._comm_errors_since = None
        # Reported first (the trajectory server aborts its goal on it), then logged.
        self._publish_diagnostics()
        self.get_logger().error(fault.describe(self.reboot_service))

    def _on_reboot(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            try:
                if not self.bus.is_open or (self.fault is not None and self.fault.kind == "host"):
                    self.bus.reopen()
                for sid in self.bus.ids:
                    if self.fault is None or self.bus.read(sid, "Hardware Error Status") or sid == self.fault.servo_id:
                        self.bus.reboot(sid)
            except DynamixelError as exc:
                self._enter_fault(exc)
                response.success, response.message = False, f"reboot failed: {exc}"
                return response
            self._start()
            response.success = self.fault is None
            response.message = "servos ready" if response.success else f"still faulted: {self.fault.message}"
            self.get_logger().info(f"reboot: {response.message}")
        return response

    def _publish_diagnostics(self) -> None:
        """The bus's status on ``driver_status`` and ``/diagnostics`` (at 1 Hz, at every fault and recovery)."""
        fault = self.fault
        status = DiagnosticStatus(name="dynamixel_driver: bus", hardware_id=self.bus.port_name)
        status.values = [KeyValue(key="port", value=self.bus.port_name),
                         KeyValue(key="servo_ids", value=str(self.bus.ids))]
        if fault is None:
            status.level, status.message = DiagnosticStatus.OK, "running"
        else:
            status.level = DiagnosticStatus.ERROR
            status.message = fault.describe(self.reboot_service)
            status.values += [KeyValue(key="fault_kind", value=fault.kind),
                              KeyValue(key="servo_id", value=str(fault.servo_id)),
                              KeyValue(key="fault_servo_ids", value=str(fault.servo_ids)),
                              KeyValue(key="hardware_errors", value=str(fault.hardware_errors)),
                              KeyValue(key="torque_off_failed", value=str(fault.torque_off_failed)),
                              KeyValue(key="reboot_service", value=self.reboot_service)]
        self._status.publish(status)
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diagnostics.publish(msg)

    def shutdown(self) -> None:
        """Stop the control loop, torque off and close the port (called by :func:`main` on exit; idempotent).

        Bounded: the control loop gets :data:`LOOP_JOIN_S` to end its tick and the bus :data:`BUS_WAIT_S` more; a
        loop that still holds the bus then (a bug) is logged with its stack, and the port is left to the process's
        exit (torque as it was).
        """
        self._stop.set()
        loop = self._loop
        if loop is not None and loop is not threading.current_thread():
            loop.join(timeout=LOOP_JOIN_S)
            if loop.is_alive():
                frame = sys._current_frames().get(loop.ident or -1)
                where = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
                self.get_logger().error(f"the control loop did not end its tick within {LOOP_JOIN_S:g} s:\n{where}")
        elif loop is None and _TEST_STOP_GC:
            # Stopped after the start but before the control loop began: the test hook's exchange here (a second
            # call finds the bus closed, and the hook does nothing).
            self._collect_mid_exchange()
        if not self._lock.acquire(timeout=BUS_WAIT_S):
            self.get_logger().error("the control loop still holds the bus: torque state unknown on every servo "
                                    "(torque stays as it was); the port closes with the process")
            return
        try:
            if self.bus.is_open:
                failed = self.bus.safe_torque_off()
                if failed:
                    self.get_logger().warning(f"torque state unknown for servos {sorted(failed)}: torque off "
                                              "was neither acknowledged nor read back (torque stays as it was)")
                self.bus.close()
        finally:
            self._lock.release()


def _describe_gains(written: dict[int, dict[str, int]]) -> str:
    """One line: the servos sharing each set of values (``P 800 I 0 D 0 PWM 885 on servos [1, 2]``)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for servo_id, values in written.items():
        groups.setdefault(tuple(values.values()), []).append(servo_id)
    if not groups:
        return "none (no joint has servo parameters)"
    return "; ".join(f"P {p} I {i} D {d} PWM {w} on servos {ids}" for (p, i, d, w), ids in groups.items())


def main(args: list[str] | None = None) -> None:
    """Run the driver until Ctrl-C, SIGTERM or external shutdown; torque goes off on the way out.

    From ``rclpy.init()`` on, a stop signal only stops the node (:func:`retarget.ros.spinning.stopping_on_signals`:
    no KeyboardInterrupt in the middle of a bus exchange, a stop during start-up ends it early, and the process
    ends within ``STOP_TIMEOUT_S`` of the first signal or reports where it hangs).
    """
    node: DynamixelDriver | None = None
    try:
        with rclpy.init(args=args), stopping_on_signals():
            node = DynamixelDriver()
            if node.context.ok():
                node.start_control_loop()
                node.raise_executor_priority()
            spin(node, before_shutdown=node.shutdown)
            close_node(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            # Idempotent: torque off also when the node failed before spinning. A Ctrl-C out here must not
            # interrupt the torque-off writes half way (SIGTERM/SIGKILL still end it).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            node.shutdown()


if __name__ == "__main__":
    main()
