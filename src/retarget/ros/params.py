"""Typed, documented parameter declaration shared by the nodes."""
from __future__ import annotations

from typing import TypeVar

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter

from retarget.errors import InputError

__all__ = ["ParameterValue", "declare", "declare_goal_lead"]

#: A parameter's value, of the type of its default: what :func:`declare` returns.
ParameterValue = TypeVar("ParameterValue", bool, int, float, str, list[bool], list[int], list[float], list[str])


def declare(node: Node, name: str, kind: Parameter.Type, default: ParameterValue, description: str, *,
            low: float | None = None, high: float | None = None, read_only: bool = True) -> ParameterValue:
    """Declare a parameter with a :class:`ParameterDescriptor` and return its value.

    Args:
        node: The node.
        name: Parameter name.
        kind: Its type; arrays may default to ``[]``.
        default: Value when not set by ``--ros-args``/params file (``None`` with an array type: empty).
        description: Shown by ``ros2 param describe``; say the unit.
        low, high: Inclusive range for numbers (checked by rclpy on set).
        read_only: Nodes read their parameters once at start.

    Raises:
        InputError: A value of the wrong type was given.
    """
    descriptor = ParameterDescriptor(description=description, read_only=read_only)
    if low is not None and high is not None:
        if kind == Parameter.Type.INTEGER:
            descriptor.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=0)]
        elif kind == Parameter.Type.DOUBLE:
            descriptor.floating_point_range = [FloatingPointRange(from_value=float(low), to_value=float(high),
                                                                  step=0.0)]
    empty_array = isinstance(default, list) and not default
    try:
        if empty_array:
            node.declare_parameter(name, kind, descriptor)
        else:
            node.declare_parameter(name, default, descriptor)
        value = node.get_parameter(name).value
    except ParameterUninitializedException:
        return []
    except Exception as exc:  # rclpy raises several unrelated types for bad overrides
        raise InputError(f"parameter {name!r}: {exc}") from exc
    return list(value) if isinstance(value, (list, tuple)) or hasattr(value, "tolist") else value


def declare_goal_lead(node: Node, rate: float) -> float:
    """Declare ``goal_lead``, how far ahead of its tick a node running at ``rate`` samples the commanded trajectory
    for the goal it writes [s] (default half a period: a goal held until the next tick then follows the trajectory
    with no delay on average; docs/servo.md "How goals reach the servo")."""
    return declare(node, "goal_lead", Parameter.Type.DOUBLE, 0.5 / rate,
                   "each tick writes the commanded trajectory this far ahead [s]: a goal the servo holds until the "
                   "next tick then follows it with no delay on average (default half a period, 1 / (2 rate)); 0 = "
                   "the trajectory at the tick", low=0.0, high=1.0)
