"""OptiTrack NatNet 3.x/4.x packets: pure decode and encode functions over bytes.

Every NatNet UDP datagram is a 4-byte header (``uint16`` message id, ``uint16`` payload size, little-endian)
followed by the payload. Frame and model-definition layouts depend on the NatNet version the server speaks, which
the client learns from the server-info packet (:class:`ServerInfo`), so :func:`decode_packet` takes that version.

Layout differences handled here (versions below 3.0 are rejected):

* 3.0: labeled markers carry a residual; the frame suffix carries three camera timestamps (mid-exposure, data
  received, transmit) in high-resolution clock ticks; rigid-body descriptions list marker offsets and labels.
* 4.0: rigid-body descriptions also list marker names; camera descriptions appear in model definitions.
* 4.1: every frame section count and every model-definition dataset type is followed by its size in bytes; frames
  carry an assets section and a precision timestamp (seconds + fractional seconds).

Only the 3.0 layouts are checked against real Motive packets (``shared/data/optitrack``); the 4.x branches are
checked by ``decode(encode(x)) == x`` round trips.

Positions are whatever Motive streams, metres by default; quaternions are ``(x, y, z, w)``.
Decoding never raises anything but :class:`~retarget.mocap.errors.NatNetDecodeError` on bad input.
"""
from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar, Union

from retarget.mocap.errors import NatNetDecodeError, NatNetEncodeError

__all__ = [
    "MessageId",
    "Version",
    "Vec3",
    "Quat",
    "Sender",
    "ServerInfo",
    "ConnectRequest",
    "DiscoveryRequest",
    "EchoRequest",
    "EchoResponse",
    "CommandRequest",
    "Response",
    "MessageString",
    "EmptyMessage",
    "MarkerSetData",
    "RigidBodyData",
    "SkeletonData",
    "AssetMarkerData",
    "AssetData",
    "LabeledMarkerData",
    "AnalogData",
    "FrameOfData",
    "MarkerSetDescription",
    "RigidBodyDescription",
    "SkeletonDescription",
    "ForcePlateDescription",
    "DeviceDescription",
    "CameraDescription",
    "OpaqueDescription",
    "ModelDefinitions",
    "Packet",
    "HEADER_SIZE",
    "SENDER_NAME_SIZE",
    "MIN_VERSION",
    "decode_header",
    "decode_packet",
    "encode_packet",
]

Version = tuple[int, int, int, int]
Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]

HEADER_SIZE = 4
#: Fixed size of the application-name field of a sender record [bytes].
SENDER_NAME_SIZE = 256
#: Oldest NatNet version whose frame layout this module decodes.
MIN_VERSION: Version = (3, 0, 0, 0)
_MAX_PAYLOAD = 0xFFFF


class MessageId(enum.IntEnum):
    """NatNet message ids (the first ``uint16`` of every packet)."""

    CONNECT = 0
    SERVER_INFO = 1
    REQUEST = 2
    RESPONSE = 3
    REQUEST_MODEL_DEF = 4
    MODEL_DEF = 5
    REQUEST_FRAME_OF_DATA = 6
    FRAME_OF_DATA = 7
    MESSAGE_STRING = 8
    DISCONNECT = 9
    KEEP_ALIVE = 10
    DISCONNECT_BY_TIMEOUT = 11
    ECHO_REQUEST = 12
    ECHO_RESPONSE = 13
    DISCOVERY = 14
    UNRECOGNIZED_REQUEST = 100


# ----------------------------------------------------------------------------------------------------------------
# Message types


@dataclass(frozen=True)
class Sender:
    """Who sent a connect/discovery/server-info packet.

    Attributes:
        app_name: application name ("Motive", "NatNetLib").
        app_version: application version, 4 numbers.
        natnet_version: NatNet protocol version, 4 numbers.
    """

    app_name: str
    app_version: Version
    natnet_version: Version


@dataclass(frozen=True)
class ServerInfo:
    """Server description (message 1), the answer to a connect request.

    Attributes:
        sender: the server application and the NatNet version it streams; decode frames with it.
        high_resolution_clock_hz: frequency of the tick counters in frame timestamps [Hz].
        data_port: UDP port frames are sent to.
        is_multicast: whether frames go to ``multicast_address`` (else unicast to each client).
        multicast_address: dotted quad.
    """

    MESSAGE_ID: ClassVar[MessageId] = MessageId.SERVER_INFO
    sender: Sender
    high_resolution_clock_hz: int
    data_port: int
    is_multicast: bool
    multicast_address: str


@dataclass(frozen=True)
class ConnectRequest:
    """Connect request (message 0) sent by a client to the command port; answered by :class:`ServerInfo`."""

    MESSAGE_ID: ClassVar[MessageId] = MessageId.CONNECT
    sender: Sender


@dataclass(frozen=True)
class DiscoveryRequest:
    """Discovery broadcast (message 14), same payload as a connect request."""

    MESSAGE_ID: ClassVar[MessageId] = MessageId.DISCOVERY
    sender: Sender


@dataclass(frozen=True)
class EchoRequest:
    """Clock-sync ping (message 12).

    Attributes:
        client_timestamp: the client's clock, echoed back unchanged [client ticks].
    """

    MESSAGE_ID: ClassVar[MessageId] = MessageId.ECHO_REQUEST
    client_timestamp: int


@dataclass(frozen=True)
class EchoResponse:
    """Answer to :class:`EchoRequest` (message 13).

    Attributes:
        client_timestamp: the request's timestamp [client ticks].
        server_timestamp: the server's high-resolution clock when it answered [server ticks].
    """

    MESSAGE_ID: ClassVar[MessageId] = MessageId.ECHO_RESPONSE
    client_timestamp: int
    server_timestamp: int


@dataclass(frozen=True)
class CommandRequest:
    """A text command for Motive (message 2), e.g. ``"FrameRate"``: the text up to the first NUL."""

    MESSAGE_ID: ClassVar[MessageId] = MessageId.REQUEST
    command: str


@dataclass(frozen=True)
class Response:
    """Answer to a :class:`CommandRequest` (message 3): an ``int32`` or a string, depending on the command.

    Attributes:
        payload: the raw payload bytes.
    """

    MESSAGE_ID: ClassVar[MessageId] = MessageId.RESPONSE
    payload: bytes

    @property
    def text(self) -> str:
        """The payload read as a NUL-terminated string (undecodable bytes replaced)."""
        return self.payload.split(b"\0", 1)[0].decode("utf-8", errors="replace")


@dataclass(frozen=True)
class MessageString:
    """A log line from the server (message 8)."""

    MESSAGE_ID: ClassVar[MessageId] = MessageId.MESSAGE_STRING
    text: str


@dataclass(frozen=True)
class EmptyMessage:
    """A message without a structured payload: request-model-definitions, request-frame, keep-alive, disconnect,
    unrecognized-request, or any unknown id (its payload kept raw)."""

    message_id: int
    payload: bytes = b""


@dataclass(frozen=True)
class MarkerSetData:
    """Marker positions of one marker set in a frame.

    Attributes:
        name: marker-set (asset) name.
        positions: marker positions [m], one ``(x, y, z)`` per marker.
    """

    name: str
    positions: tuple[Vec3, ...]


@dataclass(frozen=True)
class RigidBodyData:
    """One rigid body in a frame.

    Attributes:
        id: streaming id (map to a name with :class:`ModelDefinitions`).
        position: pivot position [m].
        orientation: unit quaternion ``(x, y, z, w)``.
        mean_error: mean marker residual [m].
        params: flags; bit 0 = tracking valid.
    """

    id: int
    position: Vec3
    orientation: Quat
    mean_error: float
    params: int

    @property
    def tracking_valid(self) -> bool:
        """Whether Motive tracked the body in this frame (if not, the pose is stale or zero)."""
        return bool(self.params & 0x01)


@dataclass(frozen=True)
class SkeletonData:
    """One skeleton in a frame: its bones as rigid bodies."""

    id: int
    rigid_bodies: tuple[RigidBodyData, ...]


@dataclass(frozen=True)
class AssetMarkerData:
    """A marker of a trained-markerset asset (NatNet 4.1+).

    Attributes:
        id: marker id. position: [m]. size: diameter [m]. params: flags. residual: [m].
    """

    id: int
    position: Vec3
    size: float
    params: int
    residual: float


@dataclass(frozen=True)
class AssetData:
    """A trained-markerset asset in a frame (NatNet 4.1+)."""

    id: int
    rigid_bodies: tuple[RigidBodyData, ...]
    markers: tuple[AssetMarkerData, ...]


@dataclass(frozen=True)
class LabeledMarkerData:
    """A labeled marker in a frame.

    Attributes:
        id: packed id: high 16 bits = model (asset) id, low 16 bits = marker id.
        position: [m].
        size: marker diameter [m].
        params: bit 0 occluded, bit 1 solved from the point cloud, bit 2 solved from the model.
        residual: reconstruction residual [m].
    """

    id: int
    position: Vec3
    size: float
    params: int
    residual: float

    @property
    def model_id(self) -> int:
        """Id of the asset the marker belongs to (0 for none)."""
        return (self.id >> 16) & 0xFFFF

    @property
    def marker_id(self) -> int:
        """Marker id within its asset."""
        return self.id & 0xFFFF

    @property
    def occluded(self) -> bool:
        """Whether the marker was not seen in this frame."""
        return bool(self.params & 0x01)

    @property
    def point_cloud_solved(self) -> bool:
        """Whether the position comes from the point cloud."""
        return bool(self.params & 0x02)

    @property
    def model_solved(self) -> bool:
        """Whether the position was filled in from the asset model."""
        return bool(self.params & 0x04)


@dataclass(frozen=True)
class AnalogData:
    """A force plate or analog device in a frame: per channel, the samples of this mocap frame."""

    id: int
    channels: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class FrameOfData:
    """One mocap frame (message 7).

    Attributes:
        frame_number: Motive's frame counter.
        marker_sets: marker positions grouped by marker set.
        unlabeled_markers: "other" (legacy unlabeled) marker positions [m].
        rigid_bodies: tracked rigid bodies.
        skeletons: skeletons.
        assets: trained-markerset assets (4.1+; empty before).
        labeled_markers: labeled markers.
        force_plates, devices: analog data.
        timecode, timecode_subframe: SMPTE timecode words.
        timestamp: seconds since Motive started streaming [s].
        camera_mid_exposure_ticks, camera_data_received_ticks, transmit_ticks: high-resolution clock at camera
            mid-exposure, at data arrival in Motive and at transmission [ticks of ``high_resolution_clock_hz``].
        precision_timestamp_seconds, precision_timestamp_fraction: PTP-style timestamp (4.1+; 0 before).
        params: bit 0 = recording, bit 1 = tracked models changed (ask for model definitions again).
    """

    MESSAGE_ID: ClassVar[MessageId] = MessageId.FRAME_OF_DATA
    frame_number: int
    marker_sets: tuple[MarkerSetData, ...] = ()
    unlabeled_markers: tuple[Vec3, ...] = ()
    rigid_bodies: tuple[RigidBodyData, ...] = ()
    skeletons: tuple[SkeletonData, ...] = ()
    assets: tuple[AssetData, ...] = ()
    labeled_markers: tuple[LabeledMarkerData, ...] = ()
    force_plates: tuple[AnalogData, ...] = ()
    devices: tuple[AnalogData, ...] = ()
    timecode: int = 0
    timecode_subframe: int = 0
    timestamp: float = 0.0
    camera_mid_exposure_ticks: int = 0
    camera_data_received_ticks: int = 0
    transmit_ticks: int = 0
    precision_timestamp_seconds: int = 0
    precision_timestamp_fraction: int = 0
    params: int = 0

    @property
    def is_recording(self) -> bool:
        """Whether Motive was recording this frame."""
        return bool(self.params & 0x01)

    @property
    def tracked_models_changed(self) -> bool:
        """Whether the asset list changed: model definitions must be requested again."""
        return bool(self.params & 0x02)

    def system_latency_s(self, clock_hz: int) -> float:
        """Time from camera mid-exposure to transmission [s] (Motive's "system latency").

        Args:
            clock_hz: :attr:`ServerInfo.high_resolution_clock_hz` [Hz].
        """
        return (self.transmit_ticks - self.camera_mid_exposure_ticks) / clock_hz

    def software_latency_s(self, clock_hz: int) -> float:
        """Time Motive spent processing the frame, from data arrival to transmission [s]."""
        return (self.transmit_ticks - self.camera_data_received_ticks) / clock_hz

    def rigid_body(self, body_id: int) -> RigidBodyData:
        """The rigid body with streaming id ``body_id``; ``KeyError`` if it is not in this frame."""
        for body in self.rigid_bodies:
            if body.id == body_id:
                return body
        raise KeyError(body_id)


@dataclass(frozen=True)
class MarkerSetDescription:
    """A marker set (asset) and its marker names."""

    name: str
    marker_names: tuple[str, ...]


@dataclass(frozen=True)
class RigidBodyDescription:
    """A rigid body of the model definitions.

    Attributes:
        name: asset name shown in Motive.
        id: streaming id used in frames.
        parent_id: parent id (-1 for none).
        offset: pivot offset from the parent [m].
        marker_positions: marker positions in the body frame [m].
        marker_labels: required active labels (0 for passive markers), one per marker.
        marker_names: marker names (4.0+; empty before).
    """

    name: str
    id: int
    parent_id: int
    offset: Vec3
    marker_positions: tuple[Vec3, ...] = ()
    marker_labels: tuple[int, ...] = ()
    marker_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkeletonDescription:
    """A skeleton: name, id and bone descriptions."""

    name: str
    id: int
    rigid_bodies: tuple[RigidBodyDescription, ...]


@dataclass(frozen=True)
class ForcePlateDescription:
    """A force plate: geometry, calibration and channel names (lengths as Motive sends them)."""

    id: int
    serial: str
    width: float
    length: float
    origin: Vec3
    calibration_matrix: tuple[float, ...]
    corners: tuple[float, ...]
    plate_type: int
    channel_data_type: int
    channel_names: tuple[str, ...]


@dataclass(frozen=True)
class DeviceDescription:
    """An analog device (e.g. an NI-DAQ) and its channel names."""

    id: int
    name: str
    serial: str
    device_type: int
    channel_data_type: int
    channel_names: tuple[str, ...]


@dataclass(frozen=True)
class CameraDescription:
    """A camera: name, position [m] and orientation quaternion ``(x, y, z, w)``."""

    name: str
    position: Vec3
    orientation: Quat


@dataclass(frozen=True)
class OpaqueDescription:
    """A dataset this module does not interpret (4.1+ only, where its size is known): type and raw bytes."""

    dataset_type: int
    payload: bytes


Description = Union[
    MarkerSetDescription,
    RigidBodyDescription,
    SkeletonDescription,
    ForcePlateDescription,
    DeviceDescription,
    CameraDescription,
    OpaqueDescription,
]


@dataclass(frozen=True)
class ModelDefinitions:
    """Model definitions (message 5): the assets Motive streams, in server order."""

    MESSAGE_ID: ClassVar[MessageId] = MessageId.MODEL_DEF
    datasets: tuple[Description, ...] = ()

    @property
    def rigid_bodies(self) -> tuple[RigidBodyDescription, ...]:
        """Top-level rigid-body descriptions."""
        return tuple(d for d in self.datasets if isinstance(d, RigidBodyDescription))

    @property
    def marker_sets(self) -> tuple[MarkerSetDescription, ...]:
        """Marker-set descriptions."""
        return tuple(d for d in self.datasets if isinstance(d, MarkerSetDescription))

    def rigid_body_names(self) -> dict[int, str]:
        """Streaming id → name of every top-level rigid body."""
        return {d.id: d.name for d in self.rigid_bodies}


Packet = Union[
    ServerInfo,
    ConnectRequest,
    DiscoveryRequest,
    EchoRequest,
    EchoResponse,
    CommandRequest,
    Response,
    MessageString,
    EmptyMessage,
    FrameOfData,
    ModelDefinitions,
]

_DATASET_MARKER_SET = 0
_DATASET_RIGID_BODY = 1
_DATASET_SKELETON = 2
_DATASET_FORCE_PLATE = 3
_DATASET_DEVICE = 4
_DATASET_CAMERA = 5


def _at_least(version: Version, major: int, minor: int) -> bool:
    return (version[0], version[1]) >= (major, minor)


def _has_section_sizes(version: Version) -> bool:
    """NatNet 4.1 added a byte count after each frame-section count and each dataset type."""
    return _at_least(version, 4, 1)


# ----------------------------------------------------------------------------------------------------------------
# Decoding


class _Reader:
    """Bounds-checked little-endian reader; every failure is a NatNetDecodeError at an absolute offset."""

    def __init__(self, data: bytes, start: int, end: int, message_id: int | None) -> None:
        self.data = data
        self.pos = start
        self.end = end
        self.message_id = message_id

    def fail(self, reason: str) -> NatNetDecodeError:
        return NatNetDecodeError(reason, self.pos, self.message_id)

    def remaining(self) -> int:
        return self.end - self.pos

    def unpack(self, fmt: struct.Struct, what: str) -> tuple:
        if self.remaining() < fmt.size:
            raise self.fail(f"truncated: {what} needs {fmt.size} bytes, {self.remaining()} left")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def int32(self, what: str) -> int:
        return int(self.unpack(_I32, what)[0])

    def uint32(self, what: str) -> int:
        return int(self.unpack(_U32, what)[0])

    def int16(self, what: str) -> int:
        return int(self.unpack(_I16, what)[0])

    def uint64(self, what: str) -> int:
        return int(self.unpack(_U64, what)[0])

    def float32(self, what: str) -> float:
        return float(self.unpack(_F32, what)[0])

    def float64(self, what: str) -> float:
        return float(self.unpack(_F64, what)[0])

    def vec3(self, what: str) -> Vec3:
        x, y, z = self.unpack(_VEC3, what)
        return (float(x), float(y), float(z))

    def quat(self, what: str) -> Quat:
        x, y, z, w = self.unpack(_QUAT, what)
        return (float(x), float(y), float(z), float(w))

    def floats(self, n: int, what: str) -> tuple[float, ...]:
        return tuple(float(v) for v in self.unpack(struct.Struct(f"<{n}f"), what))

    def raw(self, n: int, what: str) -> bytes:
        if n < 0 or self.remaining() < n:
            raise self.fail(f"truncated: {what} needs {n} bytes, {self.remaining()} left")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def cstring(self, what: str) -> str:
        nul = self.data.find(b"\0", self.pos, self.end)
        if nul < 0:
            raise self.fail(f"{what}: string without NUL terminator")
        text = _decode_text(self.data[self.pos : nul], self, what)
        self.pos = nul + 1
        return text

    def fixed_string(self, size: int, what: str) -> str:
        field = self.raw(size, what)
        return _decode_text(field.split(b"\0", 1)[0], self, what)

    def count(self, what: str, min_item_size: int) -> int:
        """An int32 element count, rejected if negative or if that many items cannot fit in what is left."""
        n = self.int32(f"{what} count")
        if n < 0:
            raise NatNetDecodeError(f"{what} count is negative ({n})", self.pos - 4, self.message_id)
        if n * min_item_size > self.remaining():
            raise NatNetDecodeError(
                f"{what} count {n} needs at least {n * min_item_size} bytes, {self.remaining()} left",
                self.pos - 4,
                self.message_id,
            )
        return n


def _decode_text(raw: bytes, reader: _Reader, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise reader.fail(f"{what}: not UTF-8 ({exc.reason})") from None


_I16 = struct.Struct("<h")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_VEC3 = struct.Struct("<3f")
_QUAT = struct.Struct("<4f")
_HEADER = struct.Struct("<HH")
_VERSION = struct.Struct("<4B")

_T = TypeVar("_T")


def decode_header(data: bytes) -> tuple[int, int]:
    """Message id and payload size [bytes] of a packet.

    Raises:
        NatNetDecodeError: fewer than 4 bytes, or fewer payload bytes than the header announces.
    """
    if len(data) < HEADER_SIZE:
        raise NatNetDecodeError(f"truncated: header needs {HEADER_SIZE} bytes, got {len(data)}", 0)
    message_id, size = _HEADER.unpack_from(data, 0)
    if len(data) - HEADER_SIZE < size:
        raise NatNetDecodeError(
            f"truncated: header announces {size} payload bytes, packet has {len(data) - HEADER_SIZE}",
            len(data),
            message_id,
        )
    return int(message_id), int(size)


def decode_packet(data: bytes, version: Version = MIN_VERSION) -> Packet:
    """Decode one NatNet datagram.

    Args:
        data: the whole datagram, header included. Bytes past the announced payload size are ignored.
        version: NatNet version of the server (``ServerInfo.sender.natnet_version``); used for frames and model
            definitions only.

    Returns:
        The typed message; unknown ids come back as :class:`EmptyMessage` with the raw payload.

    Raises:
        NatNetDecodeError: truncated or inconsistent packet, or a frame/model layout older than NatNet 3.0.
    """
    data = bytes(data)
    message_id, size = decode_header(data)
    reader = _Reader(data, HEADER_SIZE, HEADER_SIZE + size, message_id)
    decoder = _DECODERS.get(message_id)
    if decoder is None:
        return EmptyMessage(message_id, reader.raw(size, "payload"))
    if message_id in (MessageId.FRAME_OF_DATA, MessageId.MODEL_DEF) and tuple(version[:2]) < MIN_VERSION[:2]:
        raise NatNetDecodeError(
            f"NatNet {'.'.join(map(str, version))} layout not supported (need >= 3.0)", HEADER_SIZE, message_id
        )
    try:
        packet = decoder(reader, version)
    except (struct.error, IndexError, ValueError, OverflowError) as exc:  # pragma: no cover - guarded above
        raise reader.fail(f"inconsistent packet ({exc})") from None
    if reader.remaining() != 0:
        raise reader.fail(f"{reader.remaining()} unexpected bytes after the {MessageId(message_id).name} payload")
    return packet


def _decode_sender(r: _Reader) -> Sender:
    name = r.fixed_string(SENDER_NAME_SIZE, "application name")
    app = tuple(r.unpack(_VERSION, "application version"))
    natnet = tuple(r.unpack(_VERSION, "NatNet version"))
    return Sender(name, app, natnet)  # type: ignore[arg-type]


def _decode_server_info(r: _Reader, version: Version) -> ServerInfo:
    sender = _decode_sender(r)
    clock_hz = r.uint64("high-resolution clock frequency")
    data_port = int(r.unpack(struct.Struct("<H"), "data port")[0])
    is_multicast = r.unpack(struct.Struct("<B"), "multicast flag")[0] != 0
    address = ".".join(str(b) for b in r.unpack(_VERSION, "multicast address"))
    return ServerInfo(sender, clock_hz, data_port, is_multicast, address)


def _decode_connect(r: _Reader, version: Version) -> ConnectRequest:
    return ConnectRequest(_decode_sender(r))


def _decode_discovery(r: _Reader, version: Version) -> DiscoveryRequest:
    return DiscoveryRequest(_decode_sender(r))


def _decode_echo_request(r: _Reader, version: Version) -> EchoRequest:
    return EchoRequest(r.uint64("client timestamp"))


def _decode_echo_response(r: _Reader, version: Version) -> EchoResponse:
    return EchoResponse(r.uint64("client timestamp"), r.uint64("server timestamp"))


def _lenient_text(r: _Reader, what: str) -> str:
    # Real NatNetLib requests carry binary bytes after the command text ("service20,-1,\r\x08..."), so text
    # messages are read up to the first NUL and never rejected for their content.
    raw = r.raw(r.remaining(), what)
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _decode_request(r: _Reader, version: Version) -> CommandRequest:
    return CommandRequest(_lenient_text(r, "command"))


def _decode_response(r: _Reader, version: Version) -> Response:
    return Response(r.raw(r.remaining(), "response"))


def _decode_message_string(r: _Reader, version: Version) -> MessageString:
    return MessageString(_lenient_text(r, "message"))


def _section(r: _Reader, version: Version, what: str, min_item_size: int) -> int:
    n = r.count(what, min_item_size)
    if _has_section_sizes(version):
        nbytes = r.int32(f"{what} byte count")
        if nbytes < 0 or nbytes > r.remaining():
            raise r.fail(f"{what} byte count {nbytes} exceeds the {r.remaining()} bytes left")
    return n


def _items(r: _Reader, n: int, item: Callable[[], _T]) -> tuple[_T, ...]:
    return tuple(item() for _ in range(n))


def _decode_rigid_body(r: _Reader) -> RigidBodyData:
    body_id = r.int32("rigid body id")
    position = r.vec3("rigid body position")
    orientation = r.quat("rigid body orientation")
    mean_error = r.float32("rigid body mean error")
    params = r.int16("rigid body params")
    return RigidBodyData(body_id, position, orientation, mean_error, params)


_RIGID_BODY_SIZE = 4 + 12 + 16 + 4 + 2
_LABELED_MARKER_SIZE = 4 + 12 + 4 + 2 + 4


def _decode_analog(r: _Reader, what: str) -> AnalogData:
    analog_id = r.int32(f"{what} id")
    n_channels = r.count(f"{what} channel", 4)

    def channel() -> tuple[float, ...]:
        n = r.count(f"{what} sample", 4)
        return r.floats(n, f"{what} samples")

    return AnalogData(analog_id, _items(r, n_channels, channel))


def _decode_frame(r: _Reader, version: Version) -> FrameOfData:
    frame_number = r.int32("frame number")

    def marker_set() -> MarkerSetData:
        name = r.cstring("marker set name")
        n = r.count("marker set marker", 12)
        return MarkerSetData(name, _items(r, n, lambda: r.vec3("marker position")))

    marker_sets = _items(r, _section(r, version, "marker set", 5), marker_set)
    unlabeled = _items(r, _section(r, version, "unlabeled marker", 12), lambda: r.vec3("unlabeled marker"))
    rigid_bodies = _items(r, _section(r, version, "rigid body", _RIGID_BODY_SIZE), lambda: _decode_rigid_body(r))

    def skeleton() -> SkeletonData:
        skeleton_id = r.int32("skeleton id")
        n = r.count("skeleton rigid body", _RIGID_BODY_SIZE)
        return SkeletonData(skeleton_id, _items(r, n, lambda: _decode_rigid_body(r)))

    skeletons = _items(r, _section(r, version, "skeleton", 8), skeleton)

    assets: tuple[AssetData, ...] = ()
    if _at_least(version, 4, 1):

        def asset_marker() -> AssetMarkerData:
            return AssetMarkerData(
                r.int32("asset marker id"),
                r.vec3("asset marker position"),
                r.float32("asset marker size"),
                r.int16("asset marker params"),
                r.float32("asset marker residual"),
            )

        def asset() -> AssetData:
            asset_id = r.int32("asset id")
            bodies = _items(r, r.count("asset rigid body", _RIGID_BODY_SIZE), lambda: _decode_rigid_body(r))
            markers = _items(r, r.count("asset marker", _LABELED_MARKER_SIZE), asset_marker)
            return AssetData(asset_id, bodies, markers)

        assets = _items(r, _section(r, version, "asset", 12), asset)

    def labeled_marker() -> LabeledMarkerData:
        return LabeledMarkerData(
            r.int32("labeled marker id"),
            r.vec3("labeled marker position"),
            r.float32("labeled marker size"),
            r.int16("labeled marker params"),
            r.float32("labeled marker residual"),
        )

    labeled = _items(r, _section(r, version, "labeled marker", _LABELED_MARKER_SIZE), labeled_marker)
    force_plates = _items(r, _section(r, version, "force plate", 8), lambda: _decode_analog(r, "force plate"))
    devices = _items(r, _section(r, version, "device", 8), lambda: _decode_analog(r, "device"))

    timecode = r.uint32("timecode")
    timecode_subframe = r.uint32("timecode subframe")
    timestamp = r.float64("timestamp")
    mid_exposure = r.uint64("camera mid-exposure timestamp")
    data_received = r.uint64("camera data received timestamp")
    transmit = r.uint64("transmit timestamp")
    precision_s = precision_frac = 0
    if _at_least(version, 4, 1):
        precision_s = r.uint32("precision timestamp seconds")
        precision_frac = r.uint32("precision timestamp fraction")
    params = r.int16("frame params")
    end_of_data = r.int32("end-of-data marker")
    if end_of_data != 0:
        raise NatNetDecodeError(f"end-of-data marker is {end_of_data}, expected 0", r.pos - 4, r.message_id)
    return FrameOfData(
        frame_number=frame_number,
        marker_sets=marker_sets,
        unlabeled_markers=unlabeled,
        rigid_bodies=rigid_bodies,
        skeletons=skeletons,
        assets=assets,
        labeled_markers=labeled,
        force_plates=force_plates,
        devices=devices,
        timecode=timecode,
        timecode_subframe=timecode_subframe,
        timestamp=timestamp,
        camera_mid_exposure_ticks=mid_exposure,
        camera_data_received_ticks=data_received,
        transmit_ticks=transmit,
        precision_timestamp_seconds=precision_s,
        precision_timestamp_fraction=precision_frac,
        params=params,
    )


def _decode_rigid_body_description(r: _Reader, version: Version) -> RigidBodyDescription:
    name = r.cstring("rigid body name")
    body_id = r.int32("rigid body id")
    parent_id = r.int32("rigid body parent id")
    offset = r.vec3("rigid body offset")
    n = r.count("rigid body marker", 16)
    positions = _items(r, n, lambda: r.vec3("rigid body marker offset"))
    labels = _items(r, n, lambda: r.int32("rigid body marker label"))
    names: tuple[str, ...] = ()
    if _at_least(version, 4, 0):
        names = _items(r, n, lambda: r.cstring("rigid body marker name"))
    return RigidBodyDescription(name, body_id, parent_id, offset, positions, labels, names)


def _decode_dataset(r: _Reader, version: Version, dataset_type: int, end: int | None) -> Description:
    if dataset_type == _DATASET_MARKER_SET:
        name = r.cstring("marker set name")
        n = r.count("marker set marker name", 1)
        return MarkerSetDescription(name, _items(r, n, lambda: r.cstring("marker name")))
    if dataset_type == _DATASET_RIGID_BODY:
        return _decode_rigid_body_description(r, version)
    if dataset_type == _DATASET_SKELETON:
        name = r.cstring("skeleton name")
        skeleton_id = r.int32("skeleton id")
        n = r.count("skeleton rigid body", 25)
        bodies = _items(r, n, lambda: _decode_rigid_body_description(r, version))
        return SkeletonDescription(name, skeleton_id, bodies)
    if dataset_type == _DATASET_FORCE_PLATE:
        plate_id = r.int32("force plate id")
        serial = r.cstring("force plate serial")
        width = r.float32("force plate width")
        length = r.float32("force plate length")
        origin = r.vec3("force plate origin")
        calibration = r.floats(144, "force plate calibration matrix")
        corners = r.floats(12, "force plate corners")
        plate_type = r.int32("force plate type")
        channel_data_type = r.int32("force plate channel data type")
        n = r.count("force plate channel name", 1)
        names = _items(r, n, lambda: r.cstring("force plate channel name"))
        return ForcePlateDescription(
            plate_id, serial, width, length, origin, calibration, corners, plate_type, channel_data_type, names
        )
    if dataset_type == _DATASET_DEVICE:
        device_id = r.int32("device id")
        name = r.cstring("device name")
        serial = r.cstring("device serial")
        device_type = r.int32("device type")
        channel_data_type = r.int32("device channel data type")
        n = r.count("device channel name", 1)
        names = _items(r, n, lambda: r.cstring("device channel name"))
        return DeviceDescription(device_id, name, serial, device_type, channel_data_type, names)
    if dataset_type == _DATASET_CAMERA:
        return CameraDescription(r.cstring("camera name"), r.vec3("camera position"), r.quat("camera orientation"))
    if end is not None:
        return OpaqueDescription(dataset_type, r.raw(end - r.pos, "dataset"))
    raise NatNetDecodeError(f"unknown dataset type {dataset_type}", r.pos - 4, r.message_id)


def _decode_model_definitions(r: _Reader, version: Version) -> ModelDefinitions:
    n = r.count("dataset", 5)
    datasets = []
    for _ in range(n):
        dataset_type = r.int32("dataset type")
        end = None
        if _has_section_sizes(version):
            nbytes = r.int32("dataset byte count")
            if nbytes < 0 or nbytes > r.remaining():
                raise r.fail(f"dataset byte count {nbytes} exceeds the {r.remaining()} bytes left")
            end = r.pos + nbytes
        datasets.append(_decode_dataset(r, version, dataset_type, end))
        if end is not None and r.pos != end:
            raise r.fail(f"dataset type {dataset_type} used {r.pos - (end - nbytes)} bytes, announced {nbytes}")
    return ModelDefinitions(tuple(datasets))


def _decode_empty(r: _Reader, version: Version) -> EmptyMessage:
    return EmptyMessage(int(r.message_id or 0), r.raw(r.remaining(), "payload"))


_DECODERS: dict[int, Callable[[_Reader, Version], Packet]] = {
    MessageId.CONNECT: _decode_connect,
    MessageId.SERVER_INFO: _decode_server_info,
    MessageId.REQUEST: _decode_request,
    MessageId.RESPONSE: _decode_response,
    MessageId.REQUEST_MODEL_DEF: _decode_empty,
    MessageId.MODEL_DEF: _decode_model_definitions,
    MessageId.REQUEST_FRAME_OF_DATA: _decode_empty,
    MessageId.FRAME_OF_DATA: _decode_frame,
    MessageId.MESSAGE_STRING: _decode_message_string,
    MessageId.DISCONNECT: _decode_empty,
    MessageId.KEEP_ALIVE: _decode_empty,
    MessageId.DISCONNECT_BY_TIMEOUT: _decode_empty,
    MessageId.ECHO_REQUEST: _decode_echo_request,
    MessageId.ECHO_RESPONSE: _decode_echo_response,
    MessageId.DISCOVERY: _decode_discovery,
    MessageId.UNRECOGNIZED_REQUEST: _decode_empty,
}


# ----------------------------------------------------------------------------------------------------------------
# Encoding


@dataclass
class _Writer:
    parts: list[bytes] = field(default_factory=list)

    def put(self, fmt: struct.Struct, *values: object) -> None:
        try:
            self.parts.append(fmt.pack(*values))
        except struct.error as exc:
            raise NatNetEncodeError(f"cannot pack {values!r} as {fmt.format!r}: {exc}") from None

    def cstring(self, text: str) -> None:
        raw = text.encode("utf-8")
        if b"\0" in raw:
            raise NatNetEncodeError(f"string {text!r} contains NUL")
        self.parts.append(raw + b"\0")

    def floats(self, values: tuple[float, ...]) -> None:
        self.put(struct.Struct(f"<{len(values)}f"), *values)

    def tobytes(self) -> bytes:
        return b"".join(self.parts)


def _section_header(w: _Writer, version: Version, n: int, body: _Writer) -> None:
    w.put(_I32, n)
    if _has_section_sizes(version):
        w.put(_I32, len(body.tobytes()))
    w.parts.append(body.tobytes())


def _encode_sender(w: _Writer, sender: Sender) -> None:
    raw = sender.app_name.encode("utf-8")
    if len(raw) >= SENDER_NAME_SIZE or b"\0" in raw:
        raise NatNetEncodeError(f"application name {sender.app_name!r} does not fit {SENDER_NAME_SIZE} bytes")
    w.parts.append(raw.ljust(SENDER_NAME_SIZE, b"\0"))
    w.put(_VERSION, *sender.app_version)
    w.put(_VERSION, *sender.natnet_version)


def _encode_rigid_body(w: _Writer, body: RigidBodyData) -> None:
    w.put(_I32, body.id)
    w.put(_VEC3, *body.position)
    w.put(_QUAT, *body.orientation)
    w.put(_F32, body.mean_error)
    w.put(_I16, body.params)


def _encode_analog(w: _Writer, analog: AnalogData) -> None:
    w.put(_I32, analog.id)
    w.put(_I32, len(analog.channels))
    for samples in analog.channels:
        w.put(_I32, len(samples))
        w.floats(samples)


def _encode_frame(w: _Writer, frame: FrameOfData, version: Version) -> None:
    w.put(_I32, frame.frame_number)
    body = _Writer()
    for marker_set in frame.marker_sets:
        body.cstring(marker_set.name)
        body.put(_I32, len(marker_set.positions))
        for p in marker_set.positions:
            body.put(_VEC3, *p)
    _section_header(w, version, len(frame.marker_sets), body)
    body = _Writer()
    for p in frame.unlabeled_markers:
        body.put(_VEC3, *p)
    _section_header(w, version, len(frame.unlabeled_markers), body)
    body = _Writer()
    for rb in frame.rigid_bodies:
        _encode_rigid_body(body, rb)
    _section_header(w, version, len(frame.rigid_bodies), body)
    body = _Writer()
    for skeleton in frame.skeletons:
        body.put(_I32, skeleton.id)
        body.put(_I32, len(skeleton.rigid_bodies))
        for rb in skeleton.rigid_bodies:
            _encode_rigid_body(body, rb)
    _section_header(w, version, len(frame.skeletons), body)
    if _at_least(version, 4, 1):
        body = _Writer()
        for asset in frame.assets:
            body.put(_I32, asset.id)
            body.put(_I32, len(asset.rigid_bodies))
            for rb in asset.rigid_bodies:
                _encode_rigid_body(body, rb)
            body.put(_I32, len(asset.markers))
            for m in asset.markers:
                body.put(_I32, m.id)
                body.put(_VEC3, *m.position)
                body.put(_F32, m.size)
                body.put(_I16, m.params)
                body.put(_F32, m.residual)
        _section_header(w, version, len(frame.assets), body)
    elif frame.assets:
        raise NatNetEncodeError(f"assets need NatNet >= 4.1, not {version}")
    body = _Writer()
    for m in frame.labeled_markers:
        body.put(_I32, m.id)
        body.put(_VEC3, *m.position)
        body.put(_F32, m.size)
        body.put(_I16, m.params)
        body.put(_F32, m.residual)
    _section_header(w, version, len(frame.labeled_markers), body)
    for analogs in (frame.force_plates, frame.devices):
        body = _Writer()
        for analog in analogs:
            _encode_analog(body, analog)
        _section_header(w, version, len(analogs), body)
    w.put(_U32, frame.timecode)
    w.put(_U32, frame.timecode_subframe)
    w.put(_F64, frame.timestamp)
    w.put(_U64, frame.camera_mid_exposure_ticks)
    w.put(_U64, frame.camera_data_received_ticks)
    w.put(_U64, frame.transmit_ticks)
    if _at_least(version, 4, 1):
        w.put(_U32, frame.precision_timestamp_seconds)
        w.put(_U32, frame.precision_timestamp_fraction)
    w.put(_I16, frame.params)
    w.put(_I32, 0)


def _encode_rigid_body_description(w: _Writer, d: RigidBodyDescription, version: Version) -> None:
    n = len(d.marker_positions)
    if len(d.marker_labels) != n:
        raise NatNetEncodeError(f"rigid body {d.name!r}: {n} marker positions but {len(d.marker_labels)} labels")
    if _at_least(version, 4, 0) and len(d.marker_names) != n:
        raise NatNetEncodeError(f"rigid body {d.name!r}: {n} markers but {len(d.marker_names)} marker names")
    w.cstring(d.name)
    w.put(_I32, d.id)
    w.put(_I32, d.parent_id)
    w.put(_VEC3, *d.offset)
    w.put(_I32, n)
    for p in d.marker_positions:
        w.put(_VEC3, *p)
    for label in d.marker_labels:
        w.put(_I32, label)
    if _at_least(version, 4, 0):
        for name in d.marker_names:
            w.cstring(name)


def _encode_dataset(w: _Writer, d: Description, version: Version) -> int:
    """Write one dataset body; return its type."""
    if isinstance(d, MarkerSetDescription):
        w.cstring(d.name)
        w.put(_I32, len(d.marker_names))
        for name in d.marker_names:
            w.cstring(name)
        return _DATASET_MARKER_SET
    if isinstance(d, RigidBodyDescription):
        _encode_rigid_body_description(w, d, version)
        return _DATASET_RIGID_BODY
    if isinstance(d, SkeletonDescription):
        w.cstring(d.name)
        w.put(_I32, d.id)
        w.put(_I32, len(d.rigid_bodies))
        for rb in d.rigid_bodies:
            _encode_rigid_body_description(w, rb, version)
        return _DATASET_SKELETON
    if isinstance(d, ForcePlateDescription):
        if len(d.calibration_matrix) != 144 or len(d.corners) != 12:
            raise NatNetEncodeError("force plate needs a 12x12 calibration matrix and 4x3 corners")
        w.put(_I32, d.id)
        w.cstring(d.serial)
        w.put(_F32, d.width)
        w.put(_F32, d.length)
        w.put(_VEC3, *d.origin)
        w.floats(d.calibration_matrix)
        w.floats(d.corners)
        w.put(_I32, d.plate_type)
        w.put(_I32, d.channel_data_type)
        w.put(_I32, len(d.channel_names))
        for name in d.channel_names:
            w.cstring(name)
        return _DATASET_FORCE_PLATE
    if isinstance(d, DeviceDescription):
        w.put(_I32, d.id)
        w.cstring(d.name)
        w.cstring(d.serial)
        w.put(_I32, d.device_type)
        w.put(_I32, d.channel_data_type)
        w.put(_I32, len(d.channel_names))
        for name in d.channel_names:
            w.cstring(name)
        return _DATASET_DEVICE
    if isinstance(d, CameraDescription):
        w.cstring(d.name)
        w.put(_VEC3, *d.position)
        w.put(_QUAT, *d.orientation)
        return _DATASET_CAMERA
    if isinstance(d, OpaqueDescription):
        if not _has_section_sizes(version):
            raise NatNetEncodeError(f"opaque dataset type {d.dataset_type} needs NatNet >= 4.1 (sized datasets)")
        w.parts.append(d.payload)
        return d.dataset_type
    raise NatNetEncodeError(f"not a model dataset: {type(d).__name__}")


def _encode_model_definitions(w: _Writer, m: ModelDefinitions, version: Version) -> None:
    w.put(_I32, len(m.datasets))
    for d in m.datasets:
        body = _Writer()
        dataset_type = _encode_dataset(body, d, version)
        w.put(_I32, dataset_type)
        if _has_section_sizes(version):
            w.put(_I32, len(body.tobytes()))
        w.parts.append(body.tobytes())


def encode_packet(packet: Packet, version: Version = MIN_VERSION) -> bytes:
    """Encode a message as a NatNet datagram (header included); the inverse of :func:`decode_packet`.

    Args:
        packet: any message type of this module.
        version: NatNet version whose frame/model layout to write.

    Raises:
        NatNetEncodeError: a value does not fit its wire field, or the payload exceeds 65535 bytes.
    """
    w = _Writer()
    if isinstance(packet, ServerInfo):
        _encode_sender(w, packet.sender)
        w.put(_U64, packet.high_resolution_clock_hz)
        w.put(struct.Struct("<H"), packet.data_port)
        w.put(struct.Struct("<B"), 1 if packet.is_multicast else 0)
        try:
            octets = [int(x) for x in packet.multicast_address.split(".")]
        except ValueError:
            raise NatNetEncodeError(f"bad multicast address {packet.multicast_address!r}") from None
        if len(octets) != 4:
            raise NatNetEncodeError(f"bad multicast address {packet.multicast_address!r}")
        w.put(_VERSION, *octets)
    elif isinstance(packet, (ConnectRequest, DiscoveryRequest)):
        _encode_sender(w, packet.sender)
    elif isinstance(packet, EchoRequest):
        w.put(_U64, packet.client_timestamp)
    elif isinstance(packet, EchoResponse):
        w.put(_U64, packet.client_timestamp)
        w.put(_U64, packet.server_timestamp)
    elif isinstance(packet, CommandRequest):
        w.cstring(packet.command)
    elif isinstance(packet, MessageString):
        w.cstring(packet.text)
    elif isinstance(packet, Response):
        w.parts.append(packet.payload)
    elif isinstance(packet, EmptyMessage):
        w.parts.append(packet.payload)
    elif isinstance(packet, FrameOfData):
        _encode_frame(w, packet, version)
    elif isinstance(packet, ModelDefinitions):
        _encode_model_definitions(w, packet, version)
    else:
        raise NatNetEncodeError(f"not a NatNet message: {type(packet).__name__}")
    payload = w.tobytes()
    if len(payload) > _MAX_PAYLOAD:
        raise NatNetEncodeError(f"payload of {len(payload)} bytes exceeds the 16-bit size field")
    message_id = packet.message_id if isinstance(packet, EmptyMessage) else packet.MESSAGE_ID
    return _HEADER.pack(int(message_id), len(payload)) + payload
