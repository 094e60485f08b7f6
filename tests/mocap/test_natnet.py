"""NatNet codec: ground truth from real Motive 2.1 packets, robustness to truncation/corruption, round trips."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from retarget.mocap.errors import NatNetDecodeError, NatNetEncodeError
from retarget.mocap.natnet import (
    AnalogData,
    AssetData,
    AssetMarkerData,
    CameraDescription,
    CommandRequest,
    ConnectRequest,
    DeviceDescription,
    DiscoveryRequest,
    EchoRequest,
    EchoResponse,
    EmptyMessage,
    ForcePlateDescription,
    FrameOfData,
    LabeledMarkerData,
    MarkerSetData,
    MarkerSetDescription,
    MessageId,
    MessageString,
    ModelDefinitions,
    OpaqueDescription,
    Response,
    RigidBodyData,
    RigidBodyDescription,
    Sender,
    ServerInfo,
    SkeletonData,
    SkeletonDescription,
    decode_header,
    decode_packet,
    encode_packet,
)
from retarget.mocap.pcap import read_udp_datagrams

F32 = 1e-6  # float32 values printed with 7 significant digits


def _read(natnet_dir: Path, name: str) -> bytes:
    return (natnet_dir / name).read_bytes()


def test_server_info_ground_truth(natnet_dir: Path) -> None:
    info = decode_packet(_read(natnet_dir, "serverinfo_packet_v3.bin"))
    assert isinstance(info, ServerInfo)
    assert info.sender.app_name == "Motive"
    assert info.sender.app_version == (2, 1, 0, 0)
    assert info.sender.natnet_version == (3, 0, 0, 0)
    assert info.high_resolution_clock_hz == 3312787
    assert info.data_port == 1511
    assert info.is_multicast
    assert info.multicast_address == "239.255.42.99"


def test_frame_ground_truth(natnet_dir: Path) -> None:
    frame = decode_packet(_read(natnet_dir, "mocapframe_packet_v3.bin"), (3, 0, 0, 0))
    assert isinstance(frame, FrameOfData)
    assert frame.frame_number == 162734
    assert len(frame.rigid_bodies) == 1
    body = frame.rigid_bodies[0]
    assert body.id == 2
    np.testing.assert_allclose(body.position, (0.1744466, 1.4471314, -0.7343040), atol=F32)
    np.testing.assert_allclose(body.orientation, (-0.05459423, 0.5099482, 0.04370357, -0.8573577), atol=F32)
    assert body.mean_error == pytest.approx(0.0005152203, rel=1e-6)
    assert body.tracking_valid
    assert len(frame.labeled_markers) == 6
    assert frame.timestamp == pytest.approx(1356.117, abs=1e-3)
    # SampleClient printout of the same frame: 5 other markers, labeled marker ids, latencies.
    assert len(frame.unlabeled_markers) == 5
    assert [(m.model_id, m.marker_id) for m in frame.labeled_markers] == [(2, i) for i in range(1, 6)] + [(0, 50007)]
    assert all(not m.occluded and m.point_cloud_solved and not m.model_solved for m in frame.labeled_markers)
    assert frame.software_latency_s(3312787) * 1e3 == pytest.approx(0.88, abs=0.005)
    assert frame.system_latency_s(3312787) * 1e3 == pytest.approx(5.50, abs=0.005)
    assert frame.skeletons == () and frame.force_plates == () and frame.devices == ()


def test_occluded_frame_flags_the_occluded_marker(natnet_dir: Path) -> None:
    frame = decode_packet(_read(natnet_dir, "mocapframe_packet_occluded_v3.bin"))
    assert isinstance(frame, FrameOfData)
    assert frame.frame_number == 269007
    assert [(m.name, len(m.positions)) for m in frame.marker_sets] == [("FakeTree", 5), ("all", 5)]
    assert [(b.id, b.tracking_valid) for b in frame.rigid_bodies] == [(7, True)]
    # Marker 1 of the 5 is missing and marker 2 is occluded (its position filled in by the model).
    assert [(m.model_id, m.marker_id, m.occluded, m.model_solved) for m in frame.labeled_markers] == [
        (7, 2, True, False), (7, 3, False, False), (7, 4, False, False), (7, 5, False, False)
    ]


def test_model_definitions_ground_truth(natnet_dir: Path) -> None:
    models = decode_packet(_read(natnet_dir, "modeldef_packet_v3.bin"))
    assert isinstance(models, ModelDefinitions)
    assert len(models.datasets) == 3
    (quad,) = models.rigid_bodies
    assert (quad.name, quad.id, quad.parent_id, len(quad.marker_positions)) == ("RaceQuad", 2, -1, 5)
    assert models.rigid_body_names() == {2: "RaceQuad"}
    assert [(m.name, len(m.marker_names)) for m in models.marker_sets] == [("RaceQuad", 5), ("all", 5)]
    assert models.marker_sets[1].marker_names == tuple(f"RaceQuad_{i}" for i in range(1, 6))


def test_command_packets(natnet_dir: Path) -> None:
    connect = decode_packet(_read(natnet_dir, "connect_packet_v3.bin"))
    assert connect == ConnectRequest(Sender("NatNetLib", (3, 0, 0, 0), (3, 0, 0, 0)))
    assert isinstance(decode_packet(_read(natnet_dir, "discovery_packet_v3.bin")), DiscoveryRequest)
    assert decode_packet(_read(natnet_dir, "requestmodeldef_packet_v3.bin")) == EmptyMessage(
        MessageId.REQUEST_MODEL_DEF
    )
    request = decode_packet(_read(natnet_dir, "echorequest_packet_v3.bin"))
    response = decode_packet(_read(natnet_dir, "echoresponse_packet_v3.bin"))
    assert isinstance(request, EchoRequest) and isinstance(response, EchoResponse)
    assert response.client_timestamp == request.client_timestamp == 278554190


@pytest.mark.parametrize(
    "name",
    [
        "connect_packet_v3.bin",
        "discovery_packet_v3.bin",
        "echorequest_packet_v3.bin",
        "echoresponse_packet_v3.bin",
        "mocapframe_packet_v3.bin",
        "mocapframe_packet_occluded_v3.bin",
        "modeldef_packet_v3.bin",
        "requestmodeldef_packet_v3.bin",
    ],
)
def test_reencoding_real_packets_is_byte_identical(natnet_dir: Path, name: str) -> None:
    raw = _read(natnet_dir, name)
    assert encode_packet(decode_packet(raw)) == raw


def test_server_info_reencodes_to_same_values(natnet_dir: Path) -> None:
    # Motive leaves stale bytes after the NUL of its name field, so only the values round-trip.
    info = decode_packet(_read(natnet_dir, "serverinfo_packet_v3.bin"))
    assert decode_packet(encode_packet(info)) == info


@pytest.mark.parametrize("name", ["mocapframe_packet_v3.bin", "modeldef_packet_v3.bin", "serverinfo_packet_v3.bin"])
def test_every_truncation_is_rejected(natnet_dir: Path, name: str) -> None:
    raw = _read(natnet_dir, name)
    for length in range(len(raw)):
        with pytest.raises(NatNetDecodeError) as info:
            decode_packet(raw[:length])
        assert 0 <= info.value.offset <= len(raw)


def test_truncated_payload_with_consistent_header_is_rejected(natnet_dir: Path) -> None:
    raw = _read(natnet_dir, "mocapframe_packet_v3.bin")
    for length in range(4, len(raw), 7):
        shortened = (raw[:2] + (length - 4).to_bytes(2, "little") + raw[4:length])
        with pytest.raises(NatNetDecodeError):
            decode_packet(shortened)


def test_trailing_bytes_are_rejected(natnet_dir: Path) -> None:
    raw = _read(natnet_dir, "mocapframe_packet_v3.bin")
    longer = raw[:2] + (len(raw) - 4 + 3).to_bytes(2, "little") + raw[4:] + b"abc"
    with pytest.raises(NatNetDecodeError, match="unexpected bytes"):
        decode_packet(longer)


@pytest.mark.parametrize(
    "name", ["mocapframe_packet_v3.bin", "mocapframe_packet_occluded_v3.bin", "modeldef_packet_v3.bin"]
)
def test_random_corruption_never_crashes(natnet_dir: Path, name: str) -> None:
    raw = _read(natnet_dir, name)
    rng = np.random.default_rng(8)
    outcomes = {"decoded": 0, "rejected": 0}
    for _ in range(400):
        data = bytearray(raw)
        for position in rng.integers(0, len(data), size=int(rng.integers(1, 4))):
            data[position] ^= int(rng.integers(1, 256))
        try:
            decode_packet(bytes(data))
            outcomes["decoded"] += 1
        except NatNetDecodeError:
            outcomes["rejected"] += 1
    assert outcomes["rejected"] > 0 and outcomes["decoded"] > 0


def test_header_errors() -> None:
    with pytest.raises(NatNetDecodeError, match="header needs 4 bytes"):
        decode_header(b"\x07\x00")
    with pytest.raises(NatNetDecodeError, match="announces 10 payload bytes"):
        decode_header(b"\x07\x00\x0a\x00abc")
    assert decode_packet(b"\x63\x00\x02\x00hi") == EmptyMessage(99, b"hi")


def test_versions_before_3_are_rejected_for_frames(natnet_dir: Path) -> None:
    with pytest.raises(NatNetDecodeError, match="not supported"):
        decode_packet(_read(natnet_dir, "mocapframe_packet_v3.bin"), (2, 10, 0, 0))


def test_negative_count_is_rejected() -> None:
    payload = (1).to_bytes(4, "little") + (-3).to_bytes(4, "little", signed=True)
    packet = (7).to_bytes(2, "little") + len(payload).to_bytes(2, "little") + payload
    with pytest.raises(NatNetDecodeError, match="negative") as info:
        decode_packet(packet)
    assert info.value.offset == 8 and info.value.message_id == 7


# --- round trips over every layout version ------------------------------------------------------------------


def _f32(rng: np.random.Generator, n: int) -> tuple[float, ...]:
    return tuple(float(v) for v in rng.normal(size=n).astype(np.float32))


def _rigid_body(rng: np.random.Generator, body_id: int) -> RigidBodyData:
    return RigidBodyData(body_id, _f32(rng, 3), _f32(rng, 4), abs(_f32(rng, 1)[0]), int(rng.integers(0, 2)))


def _random_frame(rng: np.random.Generator, version: tuple[int, int, int, int]) -> FrameOfData:
    v41 = version[:2] >= (4, 1)
    return FrameOfData(
        frame_number=int(rng.integers(0, 2**31)),
        marker_sets=(MarkerSetData("tip", tuple(_f32(rng, 3) for _ in range(3))), MarkerSetData("all", ())),
        unlabeled_markers=tuple(_f32(rng, 3) for _ in range(2)),
        rigid_bodies=tuple(_rigid_body(rng, i) for i in range(1, 4)),
        skeletons=(SkeletonData(7, (_rigid_body(rng, 70), _rigid_body(rng, 71))),),
        assets=(
            AssetData(
                9, (_rigid_body(rng, 90),), (AssetMarkerData(91, _f32(rng, 3), 2.0**-7, 3, 2.0**-11),)
            ),
        )
        if v41
        else (),
        labeled_markers=tuple(
            LabeledMarkerData((2 << 16) | i, _f32(rng, 3), 2.0**-6, int(rng.integers(0, 8)), 2.0**-13) for i in range(4)
        ),
        force_plates=(AnalogData(1, (_f32(rng, 4), _f32(rng, 4))),),
        devices=(AnalogData(2, (_f32(rng, 2),)),),
        timecode=123,
        timecode_subframe=4,
        timestamp=float(rng.uniform(0, 1e4)),
        camera_mid_exposure_ticks=10_000,
        camera_data_received_ticks=20_000,
        transmit_ticks=25_000,
        precision_timestamp_seconds=1_700_000_000 if v41 else 0,
        precision_timestamp_fraction=12345 if v41 else 0,
        params=2,
    )


def _random_models(rng: np.random.Generator, version: tuple[int, int, int, int]) -> ModelDefinitions:
    v4 = version[0] >= 4
    body = RigidBodyDescription(
        "tip", 3, -1, _f32(rng, 3), (_f32(rng, 3), _f32(rng, 3)), (0, 5), ("m1", "m2") if v4 else ()
    )
    datasets: list = [
        MarkerSetDescription("tip", ("m1", "m2")),
        body,
        SkeletonDescription("skel", 4, (body,)),
        ForcePlateDescription(1, "FP-1", 0.5, 0.625, _f32(rng, 3), _f32(rng, 144), _f32(rng, 12), 2, 1, ("Fx", "Fy")),
        DeviceDescription(2, "daq", "SN2", 1, 1, ("a0",)),
        CameraDescription("cam 1", _f32(rng, 3), _f32(rng, 4)),
    ]
    if version[:2] >= (4, 1):
        datasets.append(OpaqueDescription(6, b"\x01\x02\x03\x04"))
    return ModelDefinitions(tuple(datasets))


@pytest.mark.parametrize("version", [(3, 0, 0, 0), (3, 1, 0, 0), (4, 0, 0, 0), (4, 1, 0, 0), (4, 2, 0, 0)])
def test_round_trip_all_layouts(version: tuple[int, int, int, int]) -> None:
    rng = np.random.default_rng(sum(version))
    for packet in (_random_frame(rng, version), _random_models(rng, version)):
        assert decode_packet(encode_packet(packet, version), version) == packet


@pytest.mark.parametrize("version", [(3, 0, 0, 0), (4, 1, 0, 0)])
def test_truncated_round_trip_frames_are_rejected(version: tuple[int, int, int, int]) -> None:
    raw = encode_packet(_random_frame(np.random.default_rng(1), version), version)
    for length in range(0, len(raw), 3):
        with pytest.raises(NatNetDecodeError):
            decode_packet(raw[:length], version)


def test_version_41_section_sizes_are_checked() -> None:
    version = (4, 1, 0, 0)
    raw = bytearray(encode_packet(_random_frame(np.random.default_rng(2), version), version))
    raw[12:16] = (10_000).to_bytes(4, "little")  # marker-set section byte count
    with pytest.raises(NatNetDecodeError, match="byte count"):
        decode_packet(bytes(raw), version)


def test_simple_messages_round_trip() -> None:
    info = ServerInfo(Sender("Motive", (3, 1, 0, 0), (4, 1, 0, 0)), 10_000_000, 1511, False, "0.0.0.0")
    for packet in (
        info,
        CommandRequest("FrameRate"),
        Response(b"\x00\x00\xf0B"),
        MessageString("hello"),
        EchoRequest(5),
        EchoResponse(5, 6),
        EmptyMessage(MessageId.KEEP_ALIVE),
    ):
        assert decode_packet(encode_packet(packet)) == packet


def test_encode_errors() -> None:
    with pytest.raises(NatNetEncodeError):
        encode_packet(ConnectRequest(Sender("x" * 256, (0, 0, 0, 0), (0, 0, 0, 0))))
    with pytest.raises(NatNetEncodeError):
        encode_packet(FrameOfData(0, rigid_bodies=(RigidBodyData(2**40, (0, 0, 0), (0, 0, 0, 1), 0, 0),)))
    with pytest.raises(NatNetEncodeError, match="4.1"):
        encode_packet(_random_frame(np.random.default_rng(0), (4, 1, 0, 0)), (3, 0, 0, 0))


# --- the captured session against the SampleClient printout ---------------------------------------------------


def _sample_client_frames(text: str) -> dict[int, dict[str, object]]:
    """FrameID → first rigid-body row and latencies, from the SampleClient printout (lines may interleave)."""
    frames: dict[int, dict[str, object]] = {}
    current: dict[str, object] | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if m := re.match(r"FrameID : (\d+)", line):
            current = frames.setdefault(int(m.group(1)), {})
        elif current is None:
            continue
        elif m := re.match(r"Software latency : ([\d.]+)", line):
            current.setdefault("software_ms", float(m.group(1)))
        elif m := re.match(r"System latency : ([\d.]+)", line):
            current.setdefault("system_ms", float(m.group(1)))
        elif m := re.match(r"Rigid Body \[ID=(\d+)\s+Error=[\d.]+\s+Valid=(\d)\]", line):
            current.setdefault("id", int(m.group(1)))
            current.setdefault("valid", m.group(2) == "1")
        elif line.strip().startswith("x\ty\tz") and i + 1 < len(lines) and "pose" not in current:
            values = [float(v) for v in lines[i + 1].split()]
            if len(values) == 7:
                current["pose"] = values
    return frames


def test_captured_session_matches_sample_client(natnet_dir: Path) -> None:
    expected = _sample_client_frames((natnet_dir / "SampleClient_output.txt").read_text(errors="replace"))
    version = (3, 0, 0, 0)
    clock_hz = None
    checked = 0
    for datagram in read_udp_datagrams(natnet_dir / "traffic.pcapng"):
        packet = decode_packet(datagram.payload, version)
        if isinstance(packet, ServerInfo):
            clock_hz = packet.high_resolution_clock_hz
            version = packet.sender.natnet_version
        if not isinstance(packet, FrameOfData) or packet.frame_number not in expected:
            continue
        truth = expected[packet.frame_number]
        assert clock_hz is not None
        if "software_ms" in truth:
            assert packet.software_latency_s(clock_hz) * 1e3 == pytest.approx(truth["software_ms"], abs=0.006)
            assert packet.system_latency_s(clock_hz) * 1e3 == pytest.approx(truth["system_ms"], abs=0.006)
        if "pose" in truth:
            body = packet.rigid_body(int(truth["id"]))  # type: ignore[arg-type]
            assert body.tracking_valid == truth["valid"]
            np.testing.assert_allclose((*body.position, *body.orientation), truth["pose"], atol=0.0051)
        checked += 1
    assert checked == len(expected) == 251  # every frame of the printout is in the capture
