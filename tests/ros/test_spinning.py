"""retarget.ros.spinning.spin: a shutdown race ends spinning quietly, a real error in a callback does not."""
from __future__ import annotations

from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")


@pytest.fixture
def node() -> Any:
    from rclpy.node import Node

    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("spinning_test", context=context)
    yield node
    node.destroy_node()
    context.try_shutdown()


def _raise_in_timer(node: Any, make_error: Any) -> list[str]:
    calls: list[str] = []

    def tick() -> None:
        calls.append("tick")
        raise make_error()

    node.create_timer(0.001, tick)
    return calls


def _interrupted_conversion() -> RuntimeError:
    # What take_message raises when SIGINT's KeyboardInterrupt lands inside the message conversion.
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        try:
            raise RuntimeError("Unable to convert call argument '0' to Python object")
        except RuntimeError as exc:
            return exc


def test_an_error_chained_to_a_keyboard_interrupt_ends_spinning_quietly(node: Any) -> None:
    from retarget.ros.spinning import spin

    calls = _raise_in_timer(node, _interrupted_conversion)
    spin(node, before_shutdown=lambda: calls.append("before shutdown"))
    assert calls == ["tick", "before shutdown"]


def test_an_error_after_the_context_is_shut_down_ends_spinning_quietly(node: Any) -> None:
    from retarget.ros.spinning import spin

    def tick() -> None:
        node.context.shutdown()  # as rclpy's SIGINT handler does, from outside the executor
        raise RuntimeError("InvalidHandle-like failure of a torn-down handle")

    node.create_timer(0.001, tick)
    spin(node)


def test_an_error_just_before_the_context_is_shut_down_ends_spinning_quietly(node: Any) -> None:
    import threading

    from retarget.ros.spinning import spin

    def tick() -> None:
        # rclpy's signal thread shuts the context down a moment after the executor's take failed.
        threading.Timer(0.2, node.context.shutdown).start()
        raise RuntimeError("Unable to convert call argument '0' to Python object")

    node.create_timer(0.001, tick)
    spin(node)


def test_a_real_error_is_raised_and_the_threads_are_stopped_all_the_same(node: Any) -> None:
    from retarget.ros.spinning import spin

    calls = _raise_in_timer(node, lambda: ValueError("a bug in a callback"))
    with pytest.raises(ValueError, match="a bug"):
        spin(node, before_shutdown=lambda: calls.append("before shutdown"))
    assert calls == ["tick", "before shutdown"]
