"""Shared fixtures of the Dynamixel tests: emulated buses on a fake clock, in-process and on a pseudo-terminal."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from retarget.dynamixel.emulator import EmulatedBus, PtyEmulator


class FakeClock:
    """A monotonic clock the test advances by hand [s]."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulated(clock: FakeClock) -> EmulatedBus:
    """Three servos (IDs 1, 2, 3) on a fake clock, zero return delay, short boot."""
    return EmulatedBus([1, 2, 3], clock=clock, return_delay_us=0, boot_time=0.0)


@pytest.fixture
def pty_emulator(tmp_path: Path) -> Iterator[PtyEmulator]:
    """Three real-time servos at 3 Mbit/s on a pseudo-terminal with a link and a control socket."""
    bus = EmulatedBus([1, 2, 3], return_delay_us=0, boot_time=0.02, baudrate=3_000_000)
    emulator = PtyEmulator(bus, link=tmp_path / "ttyDXL", control_path=tmp_path / "ttyDXL.ctl")
    with emulator:
        yield emulator
