"""NatNet UDP receiver core (no ROS): connect to Motive, learn names and version, yield decoded frames.

Motive listens for commands on its command port (1510) and streams frames to the data port (1511), either to a
multicast group (default 239.255.42.99) or unicast to each connected client. The client:

1. opens a command socket (ephemeral port) and a data socket (bound to the data port; joins the multicast group on
   ``local_address`` in multicast mode),
2. sends a connect request; the server-info answer gives the NatNet version (frame layout) and the clock frequency
   (latency),
3. requests model definitions to map rigid-body ids to names (again whenever a frame says the models changed),
4. decodes frames from either socket, counts malformed packets and skips them, never raising on bad input.

Stamps: a NatNet 3+ frame reports its camera mid-exposure and transmit instants on Motive's high-resolution clock,
so each frame's capture instant is known exactly on Motive's clock. :class:`CaptureClock` maps that clock onto the
local one by the smallest ``receive time − system latency − capture instant`` seen so far (allowed to creep up by
the clocks' drift): a frame received late (network transit, this process descheduled on a loaded host, a batch of
datagrams read at once) keeps the stamp of its capture instant instead of taking its delay into the stamp. The
stamp is the capture instant on the local clock, to within the smallest transit (not measurable without clock
sync; ``extra_latency_s`` is added to it). A frame whose ticks repeat the previous frame's (a server replaying one
recorded packet under fresh frame numbers) has no capture instant of its own: its stamp is the receive time minus
the system latency it reports and ``extra_latency_s``. Without the ticks (NatNet 2, a server without a clock rate)
the stamp is the receive time minus ``extra_latency_s``.
"""
from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from retarget.mocap.errors import NatNetDecodeError, NatNetTimeoutError
from retarget.mocap.natnet import (
    ConnectRequest,
    EmptyMessage,
    FrameOfData,
    MessageId,
    ModelDefinitions,
    Packet,
    Sender,
    ServerInfo,
    Version,
    decode_packet,
    encode_packet,
)
from retarget.mocap.source import BodyPose, MocapFrame

__all__ = ["CaptureClock", "NatNetClientConfig", "ClientStats", "NatNetClient"]

_MAX_DATAGRAM = 65535 + 4


@dataclass(frozen=True)
class NatNetClientConfig:
    """Where and how to listen.

    Attributes:
        server_address: Motive's IP address (commands go there).
        local_address: this machine's address on the mocap network (socket binding, multicast interface).
        command_port: Motive's command port.
        data_port: port frames are sent to (bound locally; 0 picks a free one, unicast only).
        multicast_address: multicast group of the stream, or ``None`` for unicast.
        client_version: NatNet version announced in the connect request.
        natnet_version: layout to decode frames with until a server-info packet says otherwise.
        extra_latency_s: constant added to the reported latency (network transit) [s].
        keep_alive_interval_s: unicast keep-alive period [s] (Motive drops silent unicast clients).
        rigid_body_names: fallback id → name map used before (or without) model definitions.
    """

    server_address: str = "127.0.0.1"
    local_address: str = "127.0.0.1"
    command_port: int = 1510
    data_port: int = 1511
    multicast_address: str | None = "239.255.42.99"
    client_version: Version = (3, 0, 0, 0)
    natnet_version: Version = (3, 0, 0, 0)
    extra_latency_s: float = 0.0
    keep_alive_interval_s: float = 1.0
    rigid_body_names: dict[int, str] = field(default_factory=dict)


class CaptureClock:
    """Capture instants on the sender's clock → the receiver's clock, by the smallest delay seen.

    Every frame gives ``d = receive − capture`` (the clocks' offset plus that frame's delay, never less than the
    offset plus the smallest delay). The estimate is the running minimum of ``d``, allowed to rise by ``drift``
    × the capture time elapsed (so it follows clocks that run at slightly different rates); a capture clock that
    goes backwards (the sender restarted) starts the estimate afresh.

    Args:
        drift: largest relative rate difference of the two clocks it follows [-] (1e-4: 0.1 ms per second).
    """

    def __init__(self, drift: float = 1e-4) -> None:
        self.drift = float(drift)
        self.offset_s: float | None = None
        self._last_capture_s: float | None = None

    def stamp(self, capture_s: float, receive_s: float) -> float:
        """The capture instant ``capture_s`` [s, sender's clock] on the receiver's clock [s]; ``receive_s``: when
        it arrived there, less any delay the sender reported."""
        delay = receive_s - capture_s
        last = self._last_capture_s
        if self.offset_s is None or last is None or capture_s < last:
            self.offset_s = delay
        else:
            self.offset_s = min(self.offset_s + self.drift * (capture_s - last), delay)
        self._last_capture_s = capture_s
        return capture_s + self.offset_s


@dataclass
class ClientStats:
    """Counters of what the client received.

    Attributes:
        packets: datagrams received on either socket.
        frames: frames decoded and returned.
        malformed: datagrams that failed to decode (skipped).
        ignored: well-formed datagrams that were not frames, or frames older than the last one.
        last_error: the last decode error message (for diagnostics).
    """

    packets: int = 0
    frames: int = 0
    malformed: int = 0
    ignored: int = 0
    last_error: str | None = None


class NatNetClient:
    """Receives OptiTrack NatNet frames over UDP and turns them into :class:`MocapFrame`.

    Use as a context manager::

        with NatNetClient(NatNetClientConfig(server_address="10.0.0.2", local_address="10.0.0.5")) as client:
            client.connect(timeout_s=1.0)
            client.request_model_definitions(timeout_s=1.0)
            for frame in client.frames(max_frames=100):
                ...

    Args:
        config: addresses, ports, versions.
        clock: wall clock [s since the epoch], injectable for tests.
    """

    def __init__(self, config: NatNetClientConfig | None = None, clock: Callable[[], float] = time.time) -> None:
        self.config = config or NatNetClientConfig()
        self._clock = clock
        self._command: socket.socket | None = None
        self._data: socket.socket | None = None
        self.stats = ClientStats()
        self.server_info: ServerInfo | None = None
        self.model_definitions: ModelDefinitions | None = None
        self.version: Version = self.config.natnet_version
        self._names: dict[int, str] = dict(self.config.rigid_body_names)
        self._capture_clock = CaptureClock()
        self._last_ticks = 0
        self._last_keep_alive = 0.0
        self._last_frame_number: int | None = None

    # -- sockets ---------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Create and bind the command and data sockets (idempotent)."""
        if self._command is not None:
            return
        cfg = self.config
        command = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            command.bind((cfg.local_address, 0))
            data.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            data.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            if cfg.multicast_address is None:
                data.bind((cfg.local_address, cfg.data_port))
            else:
                # Binding to the group (not the interface) receives only that group's datagrams on Linux.
                data.bind((cfg.multicast_address, cfg.data_port))
                membership = struct.pack(
                    "4s4s", socket.inet_aton(cfg.multicast_address), socket.inet_aton(cfg.local_address)
                )
                data.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        except OSError:
            command.close()
            data.close()
            raise
        self._command, self._data = command, data

    def close(self) -> None:
        """Close both sockets (idempotent)."""
        for sock in (self._command, self._data):
            if sock is not None:
                sock.close()
        self._command = self._data = None

    def __enter__(self) -> NatNetClient:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def command_address(self) -> tuple[str, int]:
        """Local ``(address, port)`` of the command socket."""
        return self._sockets()[0].getsockname()

    @property
    def data_address(self) -> tuple[str, int]:
        """Local ``(address, port)`` of the data socket."""
        return self._sockets()[1].getsockname()

    @property
    def server_command_address(self) -> tuple[str, int]:
        """Motive's ``(address, command port)``."""
        return (self.config.server_address, self.config.command_port)

    def _sockets(self) -> tuple[socket.socket, socket.socket]:
        if self._command is None or self._data is None:
            self.open()
        assert self._command is not None and self._data is not None
        return self._command, self._data

    # -- commands ----------------------------------------------------------------------------------------------

    def send(self, packet: Packet) -> None:
        """Send one message to Motive's command port."""
        self._sockets()[0].sendto(encode_packet(packet, self.version), self.server_command_address)

    def connect(self, timeout_s: float = 1.0) -> ServerInfo:
        """Send a connect request and wait for the server info; adopt its NatNet version.

        Raises:
            NatNetTimeoutError: no server info within ``timeout_s`` [s].
        """
        version = self.config.client_version
        self.send(ConnectRequest(Sender("NatNetLib", version, version)))
        info = self._await(ServerInfo, "connect", timeout_s)
        assert isinstance(info, ServerInfo)
        return info

    def request_model_definitions(self, timeout_s: float = 1.0) -> ModelDefinitions:
        """Ask for model definitions and wait for them; rigid-body names are then known.

        Raises:
            NatNetTimeoutError: no answer within ``timeout_s`` [s].
        """
        self.send(EmptyMessage(MessageId.REQUEST_MODEL_DEF))
        definitions = self._await(ModelDefinitions, "request model definitions", timeout_s)
        assert isinstance(definitions, ModelDefinitions)
        return definitions

    def keep_alive(self) -> None:
        """Send a keep-alive to Motive (needed in unicast mode)."""
        self.send(EmptyMessage(MessageId.KEEP_ALIVE))
        self._last_keep_alive = self._clock()

    def _await(self, kind: type, request: str, timeout_s: float) -> Packet:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NatNetTimeoutError(request, timeout_s, self.server_command_address)
            for data, _ in self._read_ready(left):
                packet = self._decode(data)
                if isinstance(packet, kind):
                    return packet

    # -- receiving ---------------------------------------------------------------------------------------------

    def _read_ready(self, timeout_s: float) -> list[tuple[bytes, tuple[str, int]]]:
        sockets = self._sockets()
        ready, _, _ = select.select(sockets, [], [], max(timeout_s, 0.0))
        out = []
        for sock in ready:
            try:
                out.append(sock.recvfrom(_MAX_DATAGRAM))
            except OSError as exc:  # e.g. ICMP port unreachable reported on the command socket
                self.stats.last_error = str(exc)
        return out

    def _decode(self, data: bytes) -> Packet | None:
        """Decode and absorb one datagram (server info, model definitions); count it. Never raises on bad data."""
        self.stats.packets += 1
        try:
            packet = decode_packet(data, self.version)
        except NatNetDecodeError as exc:
            self.stats.malformed += 1
            self.stats.last_error = str(exc)
            return None
        if isinstance(packet, ServerInfo):
            self.server_info = packet
            self.version = packet.sender.natnet_version
        elif isinstance(packet, ModelDefinitions):
            self.model_definitions = packet
            self._names.update(packet.rigid_body_names())
        if not isinstance(packet, FrameOfData):
            self.stats.ignored += 1
        return packet

    def handle_datagram(self, data: bytes, receive_time_s: float) -> MocapFrame | None:
        """Decode one datagram; return a frame if it was a new frame of data, else ``None``.

        Malformed datagrams are counted in :attr:`stats` and skipped; duplicate or older frames (UDP reordering)
        are ignored.

        Args:
            data: the datagram.
            receive_time_s: when it arrived [s since the epoch].
        """
        packet = self._decode(data)
        if not isinstance(packet, FrameOfData):
            return None
        if self._last_frame_number is not None and packet.frame_number <= self._last_frame_number:
            # A restarted take resets the counter far below the last one: accept that, drop mere reordering.
            if self._last_frame_number - packet.frame_number < 1000:
                self.stats.ignored += 1
                return None
        self._last_frame_number = packet.frame_number
        if packet.tracked_models_changed and self._command is not None:
            self.send(EmptyMessage(MessageId.REQUEST_MODEL_DEF))
        self.stats.frames += 1
        return self.to_mocap_frame(packet, receive_time_s)

    def to_mocap_frame(self, frame: FrameOfData, receive_time_s: float) -> MocapFrame:
        """Convert a decoded frame: name the bodies, stamp it with its capture instant on the local clock (module
        docstring: :class:`CaptureClock` over the camera mid-exposure ticks)."""
        stamp = receive_time_s - self.config.extra_latency_s
        clock_hz = self.server_info.high_resolution_clock_hz if self.server_info is not None else 0
        ticks, last_ticks = frame.camera_mid_exposure_ticks, self._last_ticks
        self._last_ticks = ticks
        if clock_hz > 0 and ticks > 0:
            system = frame.system_latency_s(clock_hz)
            if 0.0 <= system < 60.0:  # a twin may run seconds behind; a garbled tick counter hours
                if ticks != last_ticks:
                    stamp = self._capture_clock.stamp(ticks / clock_hz, stamp - system)
                else:  # no capture instant of its own: its reported latency before receipt
                    stamp -= system
        latency = receive_time_s - stamp
        bodies = tuple(
            BodyPose(
                name=self.body_name(rb.id),
                position_m=rb.position,
                orientation_xyzw=rb.orientation,
                tracking_valid=rb.tracking_valid,
                mean_error_m=rb.mean_error,
                body_id=rb.id,
            )
            for rb in frame.rigid_bodies
        )
        return MocapFrame(frame.frame_number, stamp, receive_time_s, latency, bodies)

    def body_name(self, body_id: int) -> str:
        """Name of rigid body ``body_id`` from the model definitions, else ``rigid_body_<id>``."""
        return self._names.get(body_id, f"rigid_body_{body_id}")

    def receive(self, timeout_s: float) -> MocapFrame | None:
        """The next frame of data, or ``None`` if none arrived within ``timeout_s`` [s].

        Sends keep-alives in unicast mode. Non-frame packets (server info, model definitions) are absorbed.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if self.config.multicast_address is None:
                if self._clock() - self._last_keep_alive >= self.config.keep_alive_interval_s:
                    self.keep_alive()
            left = deadline - time.monotonic()
            for data, _ in self._read_ready(max(left, 0.0)):
                frame = self.handle_datagram(data, self._clock())
                if frame is not None:
                    return frame
            if left <= 0:
                return None

    def frames(self, max_frames: int | None = None, idle_timeout_s: float = 1.0) -> Iterator[MocapFrame]:
        """Yield frames until ``max_frames`` were yielded or none arrived for ``idle_timeout_s`` [s]."""
        count = 0
        while max_frames is None or count < max_frames:
            frame = self.receive(idle_timeout_s)
            if frame is None:
                return
            count += 1
            yield frame
