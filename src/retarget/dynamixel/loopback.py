"""An in-process port for the real ``dynamixel_sdk``: its bytes go straight to an :class:`EmulatedBus`.

The fake port that unit tests pass in (no pseudo-terminal, no threads, no global patching): the SDK's packet
handler and group classes run unchanged on top of it, so every byte they frame is decoded by the emulator and
every reply they parse was framed by it. Return delays are not waited for. The port's baud rate (set by
``PortHandler.setBaudRate`` / ``DynamixelBus.open``) is the rate the packets come at: servos at another Baud Rate
stay silent, as on a wire.
"""
from __future__ import annotations

import serial
from dynamixel_sdk import PortHandler

from retarget.dynamixel.emulator import EmulatedBus
from retarget.dynamixel.protocol import PacketStream

__all__ = ["LoopbackPort"]


class LoopbackPort(PortHandler):
    """A ``PortHandler`` whose wire is an :class:`EmulatedBus`.

    Args:
        bus: the emulated servos.
        port_name: name shown in messages.
    """

    def __init__(self, bus: EmulatedBus, port_name: str = "loopback") -> None:
        super().__init__(port_name)
        self.bus = bus
        self.gone = False
        self._rx = bytearray()
        self._stream = PacketStream()
        self.sent: list[bytes] = []

    def vanish(self) -> None:
        """Make every later I/O fail as an unplugged adapter does (pyserial's SerialException)."""
        self.gone = True

    def _check(self) -> None:
        if self.gone:
            raise serial.SerialException(f"[Errno 5] Input/output error: {self.port_name}")

    def setupPort(self, cflag_baud: int) -> bool:  # noqa: N802 (SDK method name)
        self._check()
        self.is_open = True
        self.tx_time_per_byte = (1000.0 / self.baudrate) * 10.0
        self._rx.clear()
        return True

    def closePort(self) -> None:  # noqa: N802
        self.is_open = False

    def clearPort(self) -> None:  # noqa: N802
        self._check()
        self._rx.clear()

    def getBytesAvailable(self) -> int:  # noqa: N802
        self._check()
        return len(self._rx)

    def readPort(self, length: int) -> bytes:  # noqa: N802
        self._check()
        out = bytes(self._rx[:length])
        del self._rx[:length]
        return out

    def writePort(self, packet: list[int] | bytes) -> int:  # noqa: N802
        self._check()
        data = bytes(packet)
        self.sent.append(data)
        for frame in self._stream.feed(data):
            for reply in self.bus.handle(frame, int(self.baudrate)):
                self._rx.extend(reply.data)
        return len(data)
