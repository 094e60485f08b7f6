"""The Dynamixel driver node: X-series servos (``servo_model``) over Protocol 2.0 (``retarget.dynamixel.bus``).

Subscribes ``joint_commands`` (trajectory_msgs/JointTrajectory: one point = setpoint, several = interpolated at
``rate``); each tick Sync Writes the goal positions and Sync Reads present position/velocity/current, published
on ``joint_states``. Torque on at start (``torque_on_start``), off at shutdown and on any fault. A fault — host
detected (no reply, CRC error, port gone) or device reported (status error, Hardware Error Status bits) — never
crashes the node: it turns torque off where the bus still answers, stops commanding, and reports on
``/diagnostics`` and the log, naming the servo. ``~/reboot`` (std_srvs/Trigger) reopens the port if needed,
reboots servos with hardware errors and resumes, holding the present position.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from retarget.control import CommandFollower, TrajectoryRejected
from retarget.dynamixel import (DEFAULT_SERVO_MODEL, SERVO_MODELS, CrcError, DeviceError, DynamixelError,
                                GoalOutOfRangeError, HostError, MalformedPacketError, NoReplyError, OperatingMode,
                                load_control_table)
from retarget.errors import InputError
from retarget.ros.conversions import goal_points
from retarget.ros.params import declare

__all__ = ["DynamixelDriver", "Fault", "main"]

#: Host-detected errors that a retry on the next tick may clear.
TRANSIENT = (NoReplyError, CrcError, MalformedPacketError)
R = TypeVar("R")


@dataclass
class Fault:
    """The fault that stopped the driver.

    Attributes:
        kind: ``"host"`` (no reply, CRC, port gone) or ``"device"`` (the servo reported it).
        servo_id: Offending servo, or ``None`` when the whole bus is affected.
        message: Readable text.
        hardware_errors: ``{servo_id: [bit names]}`` read after the fault.
        torque_off_failed: Servos that did not acknowledge torque off.
    """

    kind: str
    servo_id: int | None
    message: str
    hardware_errors: dict[int, list[str]] = field(default_factory=dict)
    torque_off_failed: list[int] = field(default_factory=list)


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
        self.torque_on_start = declare(self, "torque_on_start", T.BOOL, True, "enable torque when started")
        self.max_comm_errors = declare(self, "max_consecutive_comm_errors", T.INTEGER, 3,
                                       "lost or corrupt replies in a row tolerated before a fault (1 = none)",
                                       low=1, high=100)
        self.startup_timeout = declare(self, "startup_timeout", T.DOUBLE, 5.0,
                                       "how long lost replies are retried while starting (model check, configure, "
                                       "first read, torque on) [s]",
                                       low=0.0, high=60.0)
        self._comm_errors = 0
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
        self._lock = threading.Lock()
        self.fault: Fault | None = None
        self._follower: CommandFollower | None = None
        self._commanded = False
        self._hardware: dict[int, list[str]] = {}
        self._states = self.create_publisher(JointState, "joint_states", 10)
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(JointTrajectory, "joint_commands", self._on_command, 10)
        self.create_service(Trigger, "~/reboot", self._on_reboot)
        self.create_timer(1.0 / self.rate, self._tick)
        self.create_timer(1.0, self._publish_diagnostics)
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
            state = self._retry("first read", deadline, self.bus.read_state)
            self._follower = CommandFollower(self.joint_names, state.position)
            self._commanded = False
            if self.torque_on_start:
                self._retry("torque on", deadline, lambda: self.bus.set_torque(True))
            self.fault = None
            self.get_logger().info(f"bus {self.bus.port_name}: {len(self.bus.ids)} servos ready, torque "
                                   f"{'on' if self.torque_on_start else 'off'}")
        except DynamixelError as exc:
            self._enter_fault(exc)

    def _retry(self, what: str, deadline: float, step: Callable[[], R]) -> R:
        """``step()``, again after a lost or corrupt reply until ``deadline`` (monotonic [s]) has passed."""
        while True:
            try:
                return step()
            except TRANSIENT as exc:
                if time.monotonic() > deadline:
                    raise
                self.get_logger().warning(f"{what} failed, retrying: {exc}", throttle_duration_sec=1.0)

    def _on_command(self, msg: JointTrajectory) -> None:
        with self._lock:
            if self.fault is not None or self._follower is None:
                self.get_logger().warning("joint_commands ignored: driver is in fault state (call ~/reboot)",
                                          throttle_duration_sec=1.0)
                return
            try:
                self._follower.command(msg.joint_names, goal_points(msg), self._now())
                self._commanded = True
            except TrajectoryRejected as exc:
                self.get_logger().error(f"joint_commands rejected: {exc}")

    def _tick(self) -> None:
        with self._lock:
            if self.fault is not None or self._follower is None:
                return
            try:
                if self._commanded:
                    goal = self._follower.goal_at(self._now())
                    try:
                        self.bus.write_goal_positions(goal)
                    except GoalOutOfRangeError as exc:
                        # A bad command is not a bus fault: drop it and keep holding the last goal written.
                        self.get_logger().error(f"command dropped: {exc}")
                        self._follower = CommandFollower(self.joint_names, self.bus_state_positions())
                state = self.bus.read_state()
            except TRANSIENT as exc:
                # A lost or corrupt reply now and then is normal on a loaded host or a noisy bus; only a run of
                # them is a fault (a real disconnect or a servo that stopped answering).
                self._comm_errors += 1
                if self._comm_errors >= self.max_comm_errors:
                    self._enter_fault(exc)
                else:
                    self.get_logger().warning(f"communication error {self._comm_errors}/{self.max_comm_errors}: "
                                              f"{exc}", throttle_duration_sec=1.0)
                return
            except DynamixelError as exc:
                self._enter_fault(exc)
                return
            self._comm_errors = 0
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.name = list(self.joint_names)
        msg.position = state.position.tolist()
        msg.velocity = state.velocity.tolist()
        msg.effort = state.current.tolist()  # [A]: the XM430 reports current, not torque
        self._states.publish(msg)

    def bus_state_positions(self) -> np.ndarray:
        """Present positions [rad] ``(m,)`` (raises bus errors)."""
        return self.bus.read_state(raise_on_alert=False).position

    def _enter_fault(self, exc: DynamixelError) -> None:
        """Torque off where possible, record and report the fault. Caller holds the lock."""
        kind = "device" if isinstance(exc, DeviceError) else "host" if isinstance(exc, HostError) else "other"
        servo_id = getattr(exc, "servo_id", None)
        fault = Fault(kind, servo_id, str(exc))
        failed = self.bus.safe_torque_off() if self.bus.is_open else {}
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
        self._comm_errors = 0
        where = f"servo {servo_id}" if servo_id is not None else f"bus {self.bus.port_name}"
        self.get_logger().error(f"{kind} fault on {where}: {exc}; torque off "
                                f"{'failed for ' + str(fault.torque_off_failed) if failed else 'on all servos'}"
                                f"{'; hardware errors ' + str(fault.hardware_errors) if fault.hardware_errors else ''}"
                                "; call ~/reboot once the fault is cleared")
        self._publish_diagnostics()

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
        fault = self.fault
        status = DiagnosticStatus(name="dynamixel_driver: bus", hardware_id=self.bus.port_name)
        status.values = [KeyValue(key="port", value=self.bus.port_name),
                         KeyValue(key="servo_ids", value=str(self.bus.ids))]
        if fault is None:
            status.level, status.message = DiagnosticStatus.OK, "running"
        else:
            status.level = DiagnosticStatus.ERROR
            status.message = f"{fault.kind} fault: {fault.message}"
            status.values += [KeyValue(key="fault_kind", value=fault.kind),
                              KeyValue(key="servo_id", value=str(fault.servo_id)),
                              KeyValue(key="hardware_errors", value=str(fault.hardware_errors)),
                              KeyValue(key="torque_off_failed", value=str(fault.torque_off_failed))]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diagnostics.publish(msg)

    def shutdown(self) -> None:
        """Torque off and close the port (called by :func:`main` on exit)."""
        with self._lock:
            if self.bus.is_open:
                failed = self.bus.safe_torque_off()
                if failed:
                    self.get_logger().warning(f"torque off failed for servos {sorted(failed)}")
                self.bus.close()


def main(args: list[str] | None = None) -> None:
    """Run the driver until Ctrl-C or external shutdown; torque goes off on the way out."""
    node: DynamixelDriver | None = None
    try:
        with rclpy.init(args=args):
            node = DynamixelDriver()
            rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.shutdown()


if __name__ == "__main__":
    main()
