"""The planner node declares every planner setting (retarget.planning.settings.PLAN_SETTINGS) as a parameter with
its descriptor: description with unit and default, range, read-only; a setting added there is a parameter too."""
from __future__ import annotations

from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")
pytest.importorskip("retarget_interfaces.action", reason="retarget_interfaces not built (make setup)")

pytestmark = pytest.mark.integration  # DDS (an rclpy node)


def _planner(**kwargs: Any) -> Any:
    from retarget.ros.planner import Planner

    context = rclpy.Context()
    rclpy.init(context=context)
    return Planner(context=context, **kwargs)


def test_every_setting_is_a_parameter_with_its_descriptor_and_a_new_one_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from retarget.planning import settings
    from retarget.ros import planner

    knob = settings.PlanSetting("test_knob", float, 0.0, "a knob for this test", "s", 0.0, 5.0, "budget",
                                "0: off", "--test-knob")
    monkeypatch.setattr(planner, "PLAN_SETTINGS", (*settings.PLAN_SETTINGS, knob))
    node = _planner()
    try:
        for s in (*settings.PLAN_SETTINGS, knob):
            (descriptor,) = node.describe_parameters([s.name])
            assert descriptor.description == s.description() and descriptor.read_only, s.name
            assert node.get_parameter(s.name).value == s.default, s.name
            if s.kind is float and s.low is not None:
                (r,) = descriptor.floating_point_range
                assert (r.from_value, r.to_value) == (s.low, s.high), s.name
            if s.kind is int and s.low is not None:
                (r,) = descriptor.integer_range
                assert (r.from_value, r.to_value) == (s.low, s.high), s.name
        assert node.describe_parameters(["test_knob"])[0].description == "a knob for this test [s]; 0: off"
    finally:
        node.destroy_node()
        node.context.try_shutdown()


def test_the_servo_file_parameter_reaches_the_plans_options(capfd: pytest.CaptureFixture[str]) -> None:
    from rclpy.parameter import Parameter

    action = pytest.importorskip("retarget_interfaces.action")
    node = _planner(parameter_overrides=[Parameter("servo_file", Parameter.Type.STRING, "/robots/fitted.yaml")])
    try:
        assert node._options(action.Retarget.Goal()).servo_file == "/robots/fitted.yaml"
        said = capfd.readouterr().err  # what the node says at its start (rcutils writes to the process's stderr)
        assert "servo_file /robots/fitted.yaml: no such file; a goal fails until it is there" in said
        assert "ready: robot (unset), 0 joints, the servos of /robots/fitted.yaml" in said
    finally:
        node.destroy_node()
        node.context.try_shutdown()
