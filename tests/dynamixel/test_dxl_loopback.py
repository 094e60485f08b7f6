"""The in-process port: the SDK's bytes reach the emulated bus and its replies come back."""
from __future__ import annotations

import pytest
import serial
from dynamixel_sdk import COMM_SUCCESS, PacketHandler

from retarget.dynamixel.emulator import EmulatedBus
from retarget.dynamixel.loopback import LoopbackPort


def test_sdk_ping_through_loopback_and_vanish(emulated: EmulatedBus) -> None:
    port = LoopbackPort(emulated)
    assert port.openPort()
    assert PacketHandler(2.0).ping(port, 1)[:2] == (1030, COMM_SUCCESS)
    assert port.sent[-1] == bytes.fromhex("FF FF FD 00 01 03 00 01 19 4E")
    port.vanish()
    with pytest.raises(serial.SerialException):
        port.writePort(b"\x00")
