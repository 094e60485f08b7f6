"""The driver core over the real dynamixel_sdk: against the in-process emulator (LoopbackPort) for every fault,
and over a real pseudo-terminal for the end-to-end path."""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from retarget.dynamixel.bus import DynamixelBus
from retarget.dynamixel.control_table import (
    HardwareErrorStatus,
    OperatingMode,
    load_control_table,
    position_to_radians,
)
from retarget.dynamixel.emulator import EmulatedBus, PtyEmulator, send_control
from retarget.dynamixel.errors import (
    CrcError,
    DeviceError,
    GoalOutOfRangeError,
    NoReplyError,
    PortGoneError,
    WrongModelError,
)
from retarget.dynamixel.loopback import LoopbackPort
from retarget.errors import InputError


@pytest.fixture
def driver(emulated: EmulatedBus) -> DynamixelBus:
    bus = DynamixelBus(LoopbackPort(emulated), [1, 2, 3], offsets=[0.0, 0.5, 0.0], directions=[1, 1, -1])
    return bus.open()


def test_configure_torque_goals_and_state_in_joint_space(driver: DynamixelBus, emulated: EmulatedBus, clock) -> None:
    assert driver.check_models() == {1: 38, 2: 38, 3: 38}
    driver.configure(OperatingMode.POSITION, return_delay_us=0, profile_velocity=2.0, profile_acceleration=0)
    assert emulated.servos[2].get("Profile Velocity") == round(2.0 / (0.229 * 2 * math.pi / 60))
    driver.set_torque(True)
    goal = np.array([0.3, -0.2, 0.4])
    driver.write_goal_positions(goal)
    snap = emulated.snapshot()
    # servo = direction * joint + offset
    assert snap["goal_position"] == pytest.approx([0.3, 0.3, -0.4], abs=1e-3)
    clock.tick(2.0)
    state = driver.read_state()
    assert state.position == pytest.approx(goal, abs=2e-3)
    assert state.velocity == pytest.approx(np.zeros(3), abs=0.03)
    assert not state.alert.any()


def test_goals_are_validated_before_anything_is_sent(driver: DynamixelBus, emulated: EmulatedBus) -> None:
    port = driver._port
    sent_before = len(port.sent)
    for bad in ([0.0, 0.0, math.nan], [0.0, 0.0, 4.0], [0.0, math.inf, 0.0]):
        with pytest.raises(GoalOutOfRangeError) as info:
            driver.write_goal_positions(np.array(bad))
        assert "servo" in str(info.value)
    with pytest.raises(InputError):
        driver.write_goal_positions(np.zeros(2))
    assert len(port.sent) == sent_before


def test_no_reply_names_the_silent_servo(driver: DynamixelBus, emulated: EmulatedBus) -> None:
    emulated.set_fault(2, drop_replies=True)
    with pytest.raises(NoReplyError) as info:
        driver.read_state()
    assert info.value.servo_id == 2 and "servo 2" in str(info.value)
    with pytest.raises(NoReplyError, match="servo 2"):
        driver.ping(2)
    emulated.clear_faults()
    assert driver.read_state().position.shape == (3,)  # recovered, no stale bytes in the way


def test_corrupt_reply_is_a_crc_error(driver: DynamixelBus, emulated: EmulatedBus) -> None:
    emulated.set_fault(3, corrupt_crc=True)
    with pytest.raises(CrcError) as info:
        driver.read_state()
    assert info.value.servo_id == 3
    emulated.clear_faults()
    driver.read_state()


def test_overload_shutdown_torque_off_and_reboot_recovery(driver: DynamixelBus, emulated: EmulatedBus) -> None:
    driver.set_torque(True)
    emulated.raise_hardware_error(1, ["overload"])
    with pytest.raises(DeviceError) as info:
        driver.read_state()
    exc = info.value
    assert exc.servo_id == 1 and exc.alert and exc.hardware_errors == ["overload"]
    assert "servo 1" in str(exc) and "overload" in str(exc)
    state = driver.read_state(raise_on_alert=False)
    assert state.alert.tolist() == [True, False, False]
    assert driver.read_hardware_errors()[1] == HardwareErrorStatus.OVERLOAD
    assert driver.safe_torque_off() == {}  # alert-only acknowledgements are not failures
    with pytest.raises(DeviceError, match="result fail"):
        driver.set_torque(True, ids=[1])
    driver.reboot(1)
    driver.set_torque(True)
    assert not driver.read_state().alert.any()


def test_torque_off_with_a_lost_reply_is_confirmed_by_reading_it_back(driver: DynamixelBus,
                                                                       emulated: EmulatedBus) -> None:
    # The write is executed, only its reply is lost: the servo's torque is off and it must not be listed.
    driver.set_torque(True)
    emulated.set_fault(2, drop_next_replies=1)
    assert driver.safe_torque_off() == {}
    assert emulated.snapshot()["torque_enabled"] == [False, False, False]


def test_torque_off_lists_only_servos_whose_torque_is_unknown(driver: DynamixelBus, emulated: EmulatedBus) -> None:
    driver.set_torque(True)
    emulated.set_fault(3, disconnected=True)  # unplugged: nothing reaches it, its torque stays as it was
    emulated.set_fault(1, corrupt_crc=True)  # executes the write, every reply corrupt: nothing confirms it
    failed = driver.safe_torque_off()
    assert sorted(failed) == [1, 3]
    assert isinstance(failed[3], NoReplyError) and isinstance(failed[1], CrcError)
    assert emulated.snapshot()["torque_enabled"] == [False, False, True]


def test_persistent_fault_survives_reboot_until_cleared(driver: DynamixelBus, emulated: EmulatedBus) -> None:
    emulated.raise_hardware_error(2, ["overheating"], persistent=True)
    driver.reboot(2)
    assert driver.read_hardware_errors()[2] == HardwareErrorStatus.OVERHEATING
    emulated.clear_faults(2)
    driver.reboot(2)
    assert driver.read_hardware_errors()[2] == 0


def test_eeprom_write_with_torque_on_is_a_device_error(driver: DynamixelBus) -> None:
    driver.set_torque(True)
    with pytest.raises(DeviceError, match="access error") as info:
        driver.write(2, "Operating Mode", 4)
    assert info.value.servo_id == 2 and info.value.error_number == 7
    driver.configure()  # turns torque off first, so the EEPROM write is allowed


def test_port_gone_and_reopen(driver: DynamixelBus) -> None:
    driver._port.vanish()
    with pytest.raises(PortGoneError, match="loopback"):
        driver.read_state()
    assert driver.safe_torque_off()[1].__class__ is PortGoneError
    driver._port.gone = False
    driver.reopen()
    driver.read_state()


def test_wrong_model_and_bad_arguments(emulated: EmulatedBus) -> None:
    emulated.servos[3].image[0:2] = (1020).to_bytes(2, "little")
    bus = DynamixelBus(LoopbackPort(emulated), [1, 2, 3]).open()
    with pytest.raises(WrongModelError, match="servo 3"):
        bus.check_models()
    for kwargs in ({"ids": []}, {"ids": [1, 1]}, {"ids": [1], "directions": [2]}, {"ids": [1], "offsets": [0, 1]}):
        with pytest.raises(InputError):
            DynamixelBus(LoopbackPort(emulated), **kwargs)
    with pytest.raises(InputError, match="baud"):
        DynamixelBus(LoopbackPort(emulated), [1], baudrate=123).open()
    with pytest.raises(PortGoneError):
        DynamixelBus("/nonexistent/ttyDXL", [1]).open()


def test_a_bus_of_another_model_needs_its_table(clock) -> None:
    """XM540-W270s answer with model number 1120: a bus configured for XM430-W210s refuses them; with their table
    it runs them, and their own limits apply (Current Limit up to 2 047, the XM430's 1 193)."""
    xm540 = load_control_table(model="XM540-W270")
    emulated = EmulatedBus([1, 2], table=xm540, clock=clock, return_delay_us=0, boot_time=0.0)
    with pytest.raises(WrongModelError, match="servo 1") as refused:
        DynamixelBus(LoopbackPort(emulated), [1, 2]).open().check_models()
    assert "1120" in str(refused.value) and "1030" in str(refused.value)
    bus = DynamixelBus(LoopbackPort(emulated), [1, 2], table=xm540).open()
    assert bus.check_models() == {1: 38, 2: 38}
    bus.write(2, "Current Limit", 2000)
    assert emulated.servos[2].get("Current Limit") == 2000
    bus.configure(OperatingMode.POSITION, return_delay_us=0)
    bus.set_torque(True)
    bus.write_goal_positions(np.array([0.5, -0.5]))
    clock.tick(0.1)
    # The emulated XM540 moves at its no-load speed, 30 rev/min (the XM430 would have covered 0.5 rad in 0.1 s).
    assert np.abs(bus.read_state().position) == pytest.approx([0.1 * math.pi] * 2, abs=0.03)
    clock.tick(1.0)
    assert bus.read_state().position == pytest.approx([0.5, -0.5], abs=2e-3)
    xm430 = EmulatedBus([1], clock=clock, return_delay_us=0, boot_time=0.0)
    with pytest.raises(DeviceError, match="servo 1"):
        DynamixelBus(LoopbackPort(xm430), [1]).open().write(1, "Current Limit", 2000)


@pytest.mark.integration
def test_end_to_end_over_pty_with_faults_from_another_channel(pty_emulator: PtyEmulator, tmp_path) -> None:
    ctl = tmp_path / "ttyDXL.ctl"
    with DynamixelBus(pty_emulator.port, [1, 2, 3], baudrate=3_000_000, latency_timer_ms=100) as bus:
        assert bus.scan() == {1: 1030, 2: 1030, 3: 1030}
        bus.configure(return_delay_us=0)
        bus.set_torque(True)
        goal = np.array([0.2, -0.3, 0.1])
        bus.write_goal_positions(goal)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            state = bus.read_state()
            if np.allclose(state.position, goal, atol=3e-3):
                break
            time.sleep(0.02)
        assert state.position == pytest.approx(goal, abs=3e-3)
        send_control(ctl, {"cmd": "fault", "id": 3, "drop_replies": True})
        with pytest.raises(NoReplyError, match="servo 3"):
            bus.read_state()
        send_control(ctl, {"cmd": "clear_faults"})
        send_control(ctl, {"cmd": "hardware_error", "id": 2, "errors": ["overload"]})
        with pytest.raises(DeviceError, match="servo 2.*overload"):
            bus.read_state()
        bus.reboot(2)
        send_control(ctl, {"cmd": "vanish"})
        with pytest.raises(PortGoneError):
            bus.read_state()
        send_control(ctl, {"cmd": "restore"})
        bus.reopen()
        assert bus.read_state().position.shape == (3,)


@pytest.mark.integration
def test_port_changes_run_on_the_serving_thread(pty_emulator: PtyEmulator, monkeypatch) -> None:
    # Closing the master from another thread would free its descriptor number while the serving thread still
    # selects on it; the next socket (a control connection) would take the number and have its request read as
    # serial bytes. So vanish/restore asked from elsewhere are executed by the serving thread itself.
    threads = []
    close, open_ = pty_emulator._close_pty, pty_emulator._open_pty
    monkeypatch.setattr(pty_emulator, "_close_pty", lambda: (threads.append(threading.current_thread()), close()))
    monkeypatch.setattr(pty_emulator, "_open_pty", lambda: (threads.append(threading.current_thread()), open_()))
    pty_emulator.vanish_port()
    assert pty_emulator._master is None and not Path(pty_emulator.port).exists()
    pty_emulator.restore_port()
    assert pty_emulator._master is not None and Path(pty_emulator.port).exists()
    assert [t.name for t in threads] == ["dxl-emulator", "dxl-emulator"]


@pytest.mark.integration
def test_vanish_and_restore_cycles_while_the_client_talks(pty_emulator: PtyEmulator, tmp_path) -> None:
    ctl = tmp_path / "ttyDXL.ctl"
    stop = threading.Event()
    answered = []

    def client() -> None:
        bus = DynamixelBus(pty_emulator.port, [1, 2, 3], baudrate=3_000_000, latency_timer_ms=100)
        while not stop.is_set():
            try:
                if not bus.is_open:
                    bus.open()
                bus.read_state()
                answered.append(True)
            except (PortGoneError, NoReplyError, CrcError):
                time.sleep(0.001)
        bus.close()

    talker = threading.Thread(target=client, daemon=True)
    talker.start()
    try:
        for _ in range(25):
            assert send_control(ctl, {"cmd": "vanish"}, timeout=5.0)["ok"]
            time.sleep(0.005)
            assert send_control(ctl, {"cmd": "restore"}, timeout=5.0)["ok"]
            time.sleep(0.02)
    finally:
        stop.set()
        talker.join(timeout=10.0)
    assert not talker.is_alive() and answered


class _LateReplyPort(LoopbackPort):
    """A loopback port whose reply to one request comes late: after the next request has been written (and the
    port cleared for it), just before that request's own reply, as a late reply comes from a busy emulator or a USB
    adapter's latency timer."""

    def __init__(self, bus: EmulatedBus) -> None:
        super().__init__(bus)
        self.hold_next = False
        self._held = b""

    def writePort(self, packet: list[int] | bytes) -> int:  # noqa: N802 (SDK method name)
        held, self._held = self._held, b""
        before = len(self._rx)
        written = super().writePort(packet)
        reply = bytes(self._rx[before:])
        del self._rx[before:]
        if self.hold_next:
            self.hold_next, self._held = False, reply
            reply = b""
        self._rx.extend(held + reply)
        return written


@pytest.mark.parametrize("late", ["ping", "firmware", "position", "write"])
def test_a_late_reply_is_not_read_as_the_answer_to_the_next_request(emulated: EmulatedBus, late: str) -> None:
    port = _LateReplyPort(emulated)
    bus = DynamixelBus(port, [1, 2, 3]).open()
    bus.configure(OperatingMode.POSITION)
    position = emulated.servos[1].get("Present Position")  # the fake clock stands still
    late_request = {"ping": lambda: bus.ping(1), "firmware": lambda: bus.read(1, "Firmware Version"),
                    "position": lambda: bus.read(1, "Present Position"),
                    "write": lambda: bus.write(1, "LED", 1)}[late]
    checks = [
        lambda: bus.ping(1) == 1030,  # the model number of the default table (XM430-W210)
        lambda: bus.read(1, "Firmware Version") == 38,
        lambda: bus.read(1, "Present Position") == position,
        lambda: bus.write(1, "Torque Enable", 0) is None,
        lambda: bus.check_models() == {1: 38, 2: 38, 3: 38},
        lambda: bus.read_state().position[0] == pytest.approx(position_to_radians(position)),
    ]
    for k, check in enumerate(checks):
        port.hold_next = True
        with pytest.raises(NoReplyError, match="servo 1"):
            late_request()
        assert check(), f"check {k} after a late reply to {late}"


def test_servo_gains_are_the_tables_of_the_servo_parameters_and_checked_before_writing(
        driver: DynamixelBus, emulated: EmulatedBus) -> None:
    from retarget.dynamixel.errors import GainOutOfRangeError
    from retarget.model.servo import SERVO_MODELS

    xm430 = SERVO_MODELS["XM430-W210"]
    stiff = xm430.with_values(kp=2 * xm430.kp, kd=0.0138, duty_limit=0.5)
    gains = driver.servo_gains([xm430, stiff, None])
    assert gains == {1: {"Position P Gain": 800, "Position I Gain": 0, "Position D Gain": 0, "PWM Limit": 885},
                     2: {"Position P Gain": 1600, "Position I Gain": 0, "Position D Gain": 100, "PWM Limit": 442}}
    before = emulated.received_frames
    too_stiff = r"servo 3: Position P Gain 20000 \(from XM430-W210: kp 345.3 .*outside .*\[0, 16383\]"
    with pytest.raises(GainOutOfRangeError, match=too_stiff):
        driver.servo_gains([xm430, xm430, xm430.with_values(kp=25 * xm430.kp)])
    with pytest.raises(GainOutOfRangeError):
        driver.write_servo_gains([xm430, xm430, xm430.with_values(kp=25 * xm430.kp)])
    assert emulated.received_frames == before  # nothing sent
    with pytest.raises(InputError, match="3 servos"):
        driver.servo_gains([xm430])


def test_gains_written_read_back_and_refused_with_torque_on(driver: DynamixelBus, emulated: EmulatedBus) -> None:
    from retarget.model.servo import SERVO_MODELS

    xm430 = SERVO_MODELS["XM430-W210"]
    driver.configure(return_delay_us=0)
    servos = [xm430.with_values(kp=0.5 * xm430.kp, ki=3.37, kd=0.0276), xm430, SERVO_MODELS["ideal"]]
    written = driver.write_servo_gains(servos)
    assert sorted(written) == [1, 2]
    for servo_id, values in written.items():
        for item, value in values.items():
            assert emulated.servos[servo_id].get(item) == value
    assert written[1] == {"Position P Gain": 400, "Position I Gain": 100, "Position D Gain": 200, "PWM Limit": 885}
    driver.set_torque(True)
    with pytest.raises(DeviceError, match="servo 1"):  # PWM Limit is EEPROM: torque must be off
        driver.write_servo_gains(servos)


def test_gains_that_do_not_read_back_are_a_mismatch(driver: DynamixelBus, emulated: EmulatedBus) -> None:
    from retarget.dynamixel.errors import GainMismatchError
    from retarget.model.servo import SERVO_MODELS

    bus = DynamixelBus(LoopbackPort(emulated), [1, 2]).open()
    bus.configure(return_delay_us=0)
    xm430 = SERVO_MODELS["XM430-W210"]
    original = emulated.servos[2].write

    def ignore_p_gain(address: int, data: bytes) -> int:
        return 0 if address == 84 else original(address, data)

    emulated.servos[2].write = ignore_p_gain  # the servo acknowledges P Gain without taking it
    with pytest.raises(GainMismatchError, match="servo 2: Position P Gain written 1600, read back 800"):
        bus.write_servo_gains([xm430, xm430.with_values(kp=2 * xm430.kp)])


@pytest.mark.integration
def test_gains_over_the_real_sdk_on_a_pty_set_the_emulated_stiffness(tmp_path: Path) -> None:
    """The driver core writes a robot's gains to the emulated bus over the real SDK on a pseudo-terminal, reads
    them back equal, and the emulated servo's stiffness follows: under a constant load the steady error halves
    when P Gain doubles."""
    from retarget.dynamixel.servo_loop import ServoLoop
    from retarget.model.servo import SERVO_MODELS

    xm430 = SERVO_MODELS["XM430-W210"]
    load = -0.8  # [N m]
    emulated = EmulatedBus([1, 2], dynamics=ServoLoop.for_table(2, load_control_table(), load_torque=[load, load]),
                           return_delay_us=0, boot_time=0.02, baudrate=3_000_000)
    with PtyEmulator(emulated, link=tmp_path / "ttyDXL") as emulator, \
            DynamixelBus(emulator.port, [1, 2], baudrate=3_000_000, latency_timer_ms=100) as bus:
        bus.configure(return_delay_us=0)
        written = bus.write_servo_gains([xm430, xm430.with_values(kp=2 * xm430.kp)])
        assert written[1]["Position P Gain"] == 800 and written[2]["Position P Gain"] == 1600
        assert {i: {item: bus.read(i, item) for item in v} for i, v in written.items()} == written
        bus.set_torque(True)
        bus.write_goal_positions(np.array([0.5, 0.5]))
        tick = 2 * math.pi / 4096
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            time.sleep(0.1)
            errors = bus.read_state().position - 0.5
            if np.all(np.abs(errors - load / (xm430.kp * np.array([1.0, 2.0]))) <= tick):
                break
        np.testing.assert_allclose(errors, load / (xm430.kp * np.array([1.0, 2.0])), atol=tick)
