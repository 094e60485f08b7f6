"""The driver's start-up (in-process, a fake bus): lost replies are retried step by step until startup_timeout; servos
of another model are a fault; the robot's servo gains are written with torque off, before torque comes on; the driver
and the servo twin sample the trajectory goal_lead ahead of their tick."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from rclpy.parameter import Parameter

from retarget.dynamixel import NoReplyError, WrongModelError, load_control_table
from retarget.dynamixel.bus import DynamixelBus as RealBus

pytestmark = pytest.mark.integration  # DDS (rclpy)


class FlakyBus:
    """Stands in for DynamixelBus: each start-up step loses its first ``lost[step]`` replies."""

    def __init__(self, port: str, ids: list[int], **_: object) -> None:
        self.port_name, self.ids, self.is_open = port, list(ids), False
        self.table = load_control_table()
        self.lost = dict(FlakyBus.lost)
        self.calls: list[str] = []

    lost: dict[str, int] = {}

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if self.lost.get(name, 0) > 0:
            self.lost[name] -= 1
            raise NoReplyError(self.ids[-1], name)

    def open(self) -> FlakyBus:
        self.is_open = True
        return self

    def check_models(self) -> dict[int, int]:
        self._step("model check")
        if FlakyBus.model != 1030:
            raise WrongModelError(self.ids[0], 1030, FlakyBus.model)
        return {i: 38 for i in self.ids}

    model = 1030

    def configure(self, *_: object, **__: object) -> None:
        self._step("configure")

    def read_state(self, raise_on_alert: bool = True) -> SimpleNamespace:
        self._step("read")
        n = len(self.ids)
        return SimpleNamespace(position=np.zeros(n), velocity=np.zeros(n), current=np.zeros(n),
                               alert=np.zeros(n, dtype=bool))

    def servo_gains(self, servos: object) -> dict:
        return RealBus.servo_gains(self, servos)  # the real conversion and range check (pure)

    def write_servo_gains(self, servos: object) -> dict:
        self._step("servo gains")
        self.gains = self.servo_gains(servos)
        return self.gains

    def set_torque(self, enabled: bool, ids: object = None) -> None:
        self._step("torque on" if enabled else "torque off")

    def safe_torque_off(self) -> dict:
        self.calls.append("safe torque off")
        return {}

    def read(self, servo_id: int, name: str) -> int:
        return 0  # Hardware Error Status: none

    def write_goal_positions(self, goal: np.ndarray) -> None:
        self.written = [*getattr(self, "written", []), np.array(goal)]

    def close(self) -> None:
        self.is_open = False


@pytest.fixture
def start_driver(ros_context, monkeypatch):
    import retarget.dynamixel.bus as bus_module
    from retarget.ros.dynamixel_driver import DynamixelDriver

    monkeypatch.setattr(bus_module, "DynamixelBus", FlakyBus)
    context, _ = ros_context
    made = []

    def start(lost: dict[str, int], timeout: float = 5.0, model: int = 1030, robot: str = "",
              joints: tuple[str, ...] = ("a", "b"), **more: object) -> DynamixelDriver:
        FlakyBus.lost, FlakyBus.model = lost, model
        params = [Parameter("joint_names", value=list(joints)), Parameter("dynamixel_ids", value=[1, 2]),
                  Parameter("startup_timeout", value=timeout), Parameter("robot_name", value=robot),
                  *(Parameter(name, value=value) for name, value in more.items())]
        made.append(DynamixelDriver(context=context, parameter_overrides=params))
        return made[-1]

    yield start
    for node in made:
        node.destroy_node()


@pytest.mark.parametrize("step", ["model check", "configure", "read", "torque on"])
def test_a_lost_reply_in_any_start_up_step_is_retried(start_driver, step: str) -> None:
    driver = start_driver({step: 2})
    assert driver.fault is None, driver.fault
    assert driver.bus.calls.count(step) == 3  # two lost, the third answered
    # Each step is retried on its own: nothing before it runs again (configure after a torque-on would fail).
    order = ["model check", "configure", "read", "torque on"]
    assert [c for c in driver.bus.calls if c != step] == [c for c in order if c != step]


def test_replies_lost_beyond_the_start_up_timeout_are_a_fault_naming_the_servo(start_driver) -> None:
    driver = start_driver({"torque on": 10**9}, timeout=0.2)
    assert driver.fault is not None and driver.fault.kind == "host" and driver.fault.servo_id == 2
    assert "torque on" in driver.fault.message and "safe torque off" in driver.bus.calls


def test_servos_of_another_model_are_a_fault_before_anything_is_written(start_driver) -> None:
    driver = start_driver({}, model=1120)
    assert driver.fault is not None and driver.fault.servo_id == 1
    assert "model number 1120 (XM540-W270), expected 1030 (XM430-W210)" in driver.fault.message
    assert "servo_model" in driver.fault.message
    assert "configure" not in driver.bus.calls and "torque on" not in driver.bus.calls


def test_the_robots_servo_gains_are_written_with_torque_off_and_retried(start_driver) -> None:
    """rapper's description declares XM430-W210s at factory settings: P 800, I 0, D 0, PWM 885 on each servo of a
    joint it has a motor for (here shoulder_yaw on ID 1; joint "a" has none), written after configure (torque off),
    before the first read and torque on; a lost reply is retried like every start-up step."""
    driver = start_driver({"servo gains": 1}, robot="rapper", joints=("shoulder_yaw", "a"))
    assert driver.fault is None, driver.fault
    assert driver.bus.gains == {1: {"Position P Gain": 800, "Position I Gain": 0, "Position D Gain": 0,
                                    "PWM Limit": 885}}
    calls = [c for c in driver.bus.calls if c != "servo gains"]
    assert calls == ["model check", "configure", "read", "torque on"]
    assert driver.bus.calls.index("servo gains") == 2 and driver.bus.calls.count("servo gains") == 2


def test_without_a_robot_the_gains_are_left_alone(start_driver) -> None:
    driver = start_driver({})
    assert driver.fault is None and "servo gains" not in driver.bus.calls


def test_a_stop_signal_during_start_up_ends_it_before_torque_comes_on(monkeypatch) -> None:
    """SIGINT shuts the context down while configure's replies are being lost and retried: the start-up stops at
    its next retry (no fault, no torque on, no wait for startup_timeout), and shutdown turns the torque off."""
    import threading

    import rclpy

    import retarget.dynamixel.bus as bus_module
    from retarget.ros.dynamixel_driver import DynamixelDriver

    monkeypatch.setattr(bus_module, "DynamixelBus", FlakyBus)
    FlakyBus.lost, FlakyBus.model = {"configure": 10**9}, 1030
    context = rclpy.Context()
    rclpy.init(context=context)
    stopper = threading.Timer(0.3, context.shutdown)  # as rclpy's signal handler does
    stopper.start()
    params = [Parameter("joint_names", value=["a", "b"]), Parameter("dynamixel_ids", value=[1, 2]),
              Parameter("startup_timeout", value=60.0)]
    driver = DynamixelDriver(context=context, parameter_overrides=params)
    try:
        assert not context.ok()
        assert driver.fault is None and driver._follower is None
        assert "torque on" not in driver.bus.calls and driver.bus.calls.count("configure") > 1
        driver.shutdown()
        assert driver.bus.calls[-1] == "safe torque off" and not driver.bus.is_open
    finally:
        stopper.cancel()
        driver.destroy_node()


@pytest.mark.parametrize(("rate", "lead", "expected"), [(100.0, None, 0.005), (50.0, None, 0.01), (100.0, 0.0, 0.0)])
def test_each_tick_writes_the_commanded_trajectory_half_a_period_ahead(start_driver, rate, lead, expected) -> None:
    """The goal a servo holds until the next tick is the trajectory half a period on (``goal_lead``'s default): it
    follows the trajectory with no delay on average (docs/servo.md "How goals reach the servo")."""
    more = {"rate": rate} if lead is None else {"rate": rate, "goal_lead": lead}
    driver = start_driver({}, **more)
    assert driver.goal_lead == pytest.approx(expected)
    driver._follower = SimpleNamespace(goal_at=lambda t: np.array([t, 2.0 * t]))  # the commanded trajectory
    driver._commanded = True
    driver._now = lambda: 10.0
    driver._tick()
    np.testing.assert_allclose(driver.bus.written[-1], [10.0 + expected, 2.0 * (10.0 + expected)], rtol=1e-15)


@pytest.mark.parametrize(("more", "expected"), [({}, 0.005), ({"rate": 50.0}, 0.01), ({"goal_lead": 0.0}, 0.0)])
def test_the_servo_twin_follows_the_trajectory_as_far_ahead_as_the_driver(ros_context, more, expected) -> None:
    """The servo twin (the stand-in for driver + servos) drives its servos towards the goal the driver would write:
    the commanded trajectory ``goal_lead`` after the tick (half a period by default)."""
    from retarget.ros.servo_twin import ServoTwin

    context, _ = ros_context
    params = [Parameter("joint_names", value=["a", "b"]), *(Parameter(k, value=v) for k, v in more.items())]
    twin = ServoTwin(context=context, parameter_overrides=params)
    try:
        assert twin.goal_lead == pytest.approx(expected)
        asked: list[float] = []
        twin._follower = SimpleNamespace(goal_at=lambda t: asked.append(t) or np.zeros(2))
        twin._now = lambda: 10.0
        twin._tick()
        assert asked == [pytest.approx(10.0 + expected, abs=1e-12)]
    finally:
        twin.destroy_node()
