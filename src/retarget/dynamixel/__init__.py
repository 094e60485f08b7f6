"""Dynamixel Protocol 2.0, X-series control tables (XM430-W210, XM540-W270), an emulated servo bus and the driver
core (no ROS).

- :mod:`~retarget.dynamixel.protocol`: CRC, byte stuffing, packet codecs (pure functions);
- :mod:`~retarget.dynamixel.control_table`: items, unit conversions, Hardware Error Status bits;
- :mod:`~retarget.dynamixel.errors`: device-reported vs host-detected errors;
- :mod:`~retarget.dynamixel.dynamics`: how emulated servos move (pluggable, for the digital twin);
- :mod:`~retarget.dynamixel.servo_loop`: the servos' position loop on their rotors (imported lazily: numba);
- :mod:`~retarget.dynamixel.emulator`: emulated servos on a pseudo-terminal, fault injection;
- :mod:`~retarget.dynamixel.bus`: the driver core over ``dynamixel_sdk`` (imported lazily: it needs pyserial).
"""
from retarget.dynamixel.control_table import (
    DEFAULT_SERVO_MODEL,
    SERVO_MODELS,
    ControlTable,
    ControlTableItem,
    HardwareErrorStatus,
    OperatingMode,
    ServoRatings,
    load_control_table,
)
from retarget.dynamixel.dynamics import CallbackDynamics, ServoCommand, ServoDynamics, ServoFeedback
from retarget.dynamixel.errors import (
    CommunicationError,
    CrcError,
    DeviceError,
    DynamixelError,
    GainMismatchError,
    GainOutOfRangeError,
    GoalOutOfRangeError,
    HostError,
    MalformedPacketError,
    MalformedReplyError,
    NoReplyError,
    PortGoneError,
    WrongModelError,
)

__all__ = [
    "DEFAULT_SERVO_MODEL",
    "SERVO_MODELS",
    "CallbackDynamics",
    "CommunicationError",
    "ControlTable",
    "ControlTableItem",
    "CrcError",
    "DeviceError",
    "DynamixelError",
    "GainMismatchError",
    "GainOutOfRangeError",
    "GoalOutOfRangeError",
    "HardwareErrorStatus",
    "HostError",
    "MalformedPacketError",
    "MalformedReplyError",
    "NoReplyError",
    "OperatingMode",
    "PortGoneError",
    "ServoCommand",
    "ServoDynamics",
    "ServoFeedback",
    "ServoRatings",
    "WrongModelError",
    "load_control_table",
]
