"""A minimal NatNet server: answers a client's commands and streams frames, for the twin and for tests.

It stands in for Motive so the whole receive path (sockets, version negotiation, names, latency) runs without
hardware: :class:`NatNetServer` answers connect (server info), request-model-definitions, echo and keep-alive
on its command socket and sends frames (typed, or raw recorded datagrams) by UDP to the registered data
destinations. Use loopback addresses only.
"""
from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterable, Mapping

from retarget.mocap.errors import NatNetDecodeError
from retarget.mocap.natnet import (
    ConnectRequest,
    EchoRequest,
    EchoResponse,
    EmptyMessage,
    FrameOfData,
    MessageId,
    ModelDefinitions,
    RigidBodyData,
    RigidBodyDescription,
    Sender,
    ServerInfo,
    decode_packet,
    encode_packet,
)
from retarget.mocap.source import MocapFrame

__all__ = ["NatNetServer", "default_server_info", "model_definitions_for", "frame_of_data"]

#: Tick rate of the simulated high-resolution clock [Hz].
TWIN_CLOCK_HZ = 10_000_000


def default_server_info(data_port: int, natnet_version: tuple[int, int, int, int] = (3, 0, 0, 0)) -> ServerInfo:
    """Server info of the twin server: unicast, the given data port and NatNet version."""
    return ServerInfo(
        Sender("retarget twin", (0, 1, 0, 0), natnet_version), TWIN_CLOCK_HZ, data_port, False, "0.0.0.0"
    )


def model_definitions_for(names: Mapping[int, str]) -> ModelDefinitions:
    """Model definitions listing one marker-less rigid body per ``id → name``."""
    return ModelDefinitions(
        tuple(RigidBodyDescription(name, body_id, -1, (0.0, 0.0, 0.0)) for body_id, name in names.items())
    )


def frame_of_data(frame: MocapFrame, ids: Mapping[str, int], clock_hz: int = TWIN_CLOCK_HZ) -> FrameOfData:
    """Encode a source frame as NatNet frame data, with its latency expressed as camera/transmit ticks.

    Args:
        frame: the frame (e.g. from the twin); ``latency_s`` becomes transmit − mid-exposure.
        ids: body name → streaming id.
        clock_hz: tick rate of the high-resolution clock [Hz].
    """
    transmit = int(round(frame.receive_time_s * clock_hz))
    bodies = tuple(
        RigidBodyData(ids[b.name], b.position_m, b.orientation_xyzw, b.mean_error_m, 1 if b.tracking_valid else 0)
        for b in frame.bodies
    )
    return FrameOfData(
        frame_number=frame.frame_number,
        rigid_bodies=bodies,
        timestamp=frame.stamp_s,
        camera_mid_exposure_ticks=transmit - int(round(frame.latency_s * clock_hz)),
        camera_data_received_ticks=transmit,
        transmit_ticks=transmit,
    )


class NatNetServer:
    """Answers NatNet commands on a UDP command socket (in a background thread) and sends frames.

    Args:
        server_info: sent in answer to connect requests; its NatNet version sets the frame layout.
        model_definitions: sent in answer to request-model-definitions.
        address: address to bind (loopback).
        command_port: command port to bind (0: a free one; read :attr:`command_address`).
    """

    def __init__(
        self,
        server_info: ServerInfo,
        model_definitions: ModelDefinitions | None = None,
        address: str = "127.0.0.1",
        command_port: int = 0,
    ) -> None:
        self.server_info = server_info
        self.model_definitions = model_definitions or ModelDefinitions()
        self.version = server_info.sender.natnet_version
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        self._sock.bind((address, command_port))
        self._data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        self._destinations: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.commands_received: list[int] = []
        self.malformed_commands = 0

    @property
    def command_address(self) -> tuple[str, int]:
        """``(address, port)`` the command socket is bound to."""
        return self._sock.getsockname()

    def add_data_destination(self, address: tuple[str, int]) -> None:
        """Send frames to ``address`` too."""
        with self._lock:
            if address not in self._destinations:
                self._destinations.append(address)

    def start(self) -> NatNetServer:
        """Start answering commands in a daemon thread."""
        self._thread = threading.Thread(target=self._serve, name="natnet-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and close the sockets (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        self._sock.close()
        self._data.close()

    def __enter__(self) -> NatNetServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._sock], [], [], 0.05)
                if not ready:
                    continue
                data, client = self._sock.recvfrom(65539)
            except (OSError, ValueError):  # socket closed by stop()
                return
            self._answer(data, client)

    def _answer(self, data: bytes, client: tuple[str, int]) -> None:
        try:
            packet = decode_packet(data, self.version)
        except NatNetDecodeError:
            self.malformed_commands += 1
            return
        message_id = packet.message_id if isinstance(packet, EmptyMessage) else packet.MESSAGE_ID
        self.commands_received.append(int(message_id))
        reply = None
        if isinstance(packet, ConnectRequest):
            reply = self.server_info
            if not self.server_info.is_multicast and self.server_info.data_port:
                self.add_data_destination((client[0], self.server_info.data_port))
        elif isinstance(packet, EmptyMessage) and packet.message_id == MessageId.REQUEST_MODEL_DEF:
            reply = self.model_definitions
        elif isinstance(packet, EchoRequest):
            reply = EchoResponse(packet.client_timestamp, 0)
        if reply is not None:
            try:
                self._sock.sendto(encode_packet(reply, self.version), client)
            except OSError:
                return

    def send_frame(self, frame: FrameOfData) -> int:
        """Encode and send a frame to every data destination; return the datagram size [bytes]."""
        return self.send_raw(encode_packet(frame, self.version))

    def send_raw(self, datagram: bytes) -> int:
        """Send a datagram unchanged (e.g. replayed from a capture) to every data destination."""
        with self._lock:
            destinations = list(self._destinations)
        for destination in destinations:
            self._data.sendto(datagram, destination)
        return len(datagram)

    def send_all(self, datagrams: Iterable[bytes]) -> int:
        """Send several datagrams in order; return how many were sent."""
        count = 0
        for datagram in datagrams:
            self.send_raw(datagram)
            count += 1
        return count
