"""NatNet receiver over loopback UDP, against the in-process NatNet server (real sockets, real packets)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retarget.mocap.client import CaptureClock, NatNetClient, NatNetClientConfig
from retarget.mocap.errors import NatNetTimeoutError
from retarget.mocap.natnet import FrameOfData, ModelDefinitions, ServerInfo, decode_packet
from retarget.mocap.server import NatNetServer, default_server_info, model_definitions_for


def _pair(info: ServerInfo, models: ModelDefinitions | None = None) -> tuple[NatNetServer, NatNetClient]:
    server = NatNetServer(info, models).start()
    host, port = server.command_address
    client = NatNetClient(
        NatNetClientConfig(server_address=host, command_port=port, data_port=0, multicast_address=None)
    )
    client.open()
    server.add_data_destination(client.data_address)
    return server, client


@pytest.mark.integration
def test_replayed_motive_packets_arrive_decoded(natnet_dir: Path) -> None:
    """A sender replaying the real Motive packets: the client yields the ground-truth pose under its name."""
    info = decode_packet((natnet_dir / "serverinfo_packet_v3.bin").read_bytes())
    models = decode_packet((natnet_dir / "modeldef_packet_v3.bin").read_bytes())
    assert isinstance(info, ServerInfo) and isinstance(models, ModelDefinitions)
    server, client = _pair(info, models)
    try:
        assert client.connect(timeout_s=2.0) == info
        assert client.version == (3, 0, 0, 0)
        client.request_model_definitions(timeout_s=2.0)
        raw = (natnet_dir / "mocapframe_packet_v3.bin").read_bytes()
        server.send_raw(b"\x07\x00\xff\x00garbage")  # truncated frame: counted, skipped
        server.send_raw(raw)
        frame = client.receive(timeout_s=2.0)
    finally:
        client.close()
        server.stop()
    assert frame is not None and frame.frame_number == 162734
    body = frame.body("RaceQuad")
    assert body.body_id == 2 and body.tracking_valid
    np.testing.assert_allclose(body.position_m, (0.1744466, 1.4471314, -0.7343040), atol=1e-6)
    np.testing.assert_allclose(body.orientation_xyzw, (-0.05459423, 0.5099482, 0.04370357, -0.8573577), atol=1e-6)
    # Stamp = receive time - system latency (5.495 ms for this frame).
    assert frame.latency_s == pytest.approx(18204 / 3312787, abs=1e-6)
    assert frame.receive_time_s - frame.stamp_s == pytest.approx(frame.latency_s, abs=1e-6)
    assert client.stats.malformed == 1 and client.stats.frames == 1


@pytest.mark.integration
def test_frames_stream_and_reordering_is_dropped() -> None:
    info = default_server_info(data_port=0, natnet_version=(4, 1, 0, 0))
    server, client = _pair(info, model_definitions_for({5: "tip"}))
    try:
        client.connect(timeout_s=2.0)
        client.request_model_definitions(timeout_s=2.0)
        for number in (10, 11, 11, 9, 12):
            server.send_frame(FrameOfData(number))
        frames = list(client.frames(max_frames=10, idle_timeout_s=0.3))
    finally:
        client.close()
        server.stop()
    assert [f.frame_number for f in frames] == [10, 11, 12]
    assert client.stats.ignored >= 2 and client.stats.malformed == 0


@pytest.mark.integration
def test_connect_timeout_names_the_server() -> None:
    # A bound but silent socket stands in for a server that never answers.
    import socket

    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    try:
        config = NatNetClientConfig(command_port=port, data_port=0, multicast_address=None)
        with NatNetClient(config) as client, pytest.raises(NatNetTimeoutError, match=f"127.0.0.1:{port}"):
            client.connect(timeout_s=0.2)
    finally:
        silent.close()


def test_handle_datagram_never_raises_on_garbage() -> None:
    client = NatNetClient(NatNetClientConfig(multicast_address=None, data_port=0))
    rng = np.random.default_rng(3)
    for _ in range(200):
        data = bytes(rng.integers(0, 256, size=int(rng.integers(0, 64)), dtype=np.uint8))
        client.handle_datagram(b"\x07\x00" + data, 0.0)
    assert client.stats.packets == 200 and client.stats.frames + client.stats.malformed + client.stats.ignored >= 200


def test_unnamed_bodies_get_a_default_name() -> None:
    client = NatNetClient(NatNetClientConfig(rigid_body_names={3: "base"}))
    assert client.body_name(3) == "base" and client.body_name(4) == "rigid_body_4"


def test_capture_clock_stamps_late_frames_at_their_capture_instant() -> None:
    """Frames at 120 Hz on the sender's clock, received 1000 s later on the receiver's, each after a delay of
    0.2 ms plus an exponential 5 ms (tens of ms at times): every stamp after the first few frames is the capture
    instant plus the offset and the smallest delay, within 0.3 ms (the estimate creeps up by its drift allowance
    between frames of small delay); the receive times were up to 29 ms late."""
    rng = np.random.default_rng(3)
    capture = 50.0 + np.arange(1200) / 120.0
    delay = 2e-4 + rng.exponential(5e-3, capture.size)
    clock = CaptureClock()
    stamps = np.array([clock.stamp(c, c + 1000.0 + d) for c, d in zip(capture, delay)])
    settled = capture > capture[0] + 1.0
    assert np.max(delay[settled]) > 0.02
    np.testing.assert_allclose(stamps[settled] - capture[settled], 1000.0 + 2e-4, atol=3e-4)
    assert np.all(np.diff(stamps) > 0)


def test_capture_clock_follows_a_drifting_clock_and_a_restarted_sender() -> None:
    clock = CaptureClock(drift=1e-4)
    capture = np.arange(6000) / 100.0  # 60 s
    # The receiver's clock runs 50 ppm slow against the sender's: its offset falls by 3 ms over the minute.
    for c in capture:
        stamp = clock.stamp(c, 7.0 + c * (1.0 - 5e-5) + 1e-3)
        assert stamp == pytest.approx(7.0 + c * (1.0 - 5e-5) + 1e-3, abs=1e-9)
    # 50 ppm fast: the offset rises by 3 ms; the estimate follows it within drift x the time between frames.
    clock = CaptureClock(drift=1e-4)
    for c in capture:
        stamp = clock.stamp(c, 7.0 + c * (1.0 + 5e-5))
        assert stamp == pytest.approx(7.0 + c * (1.0 + 5e-5), abs=1e-6)
    # The sender restarts (its clock starts over): the estimate starts afresh.
    assert clock.stamp(0.5, 200.0) == pytest.approx(200.0)
    assert clock.stamp(0.51, 200.03) == pytest.approx(200.01)


def test_frames_whose_capture_ticks_repeat_are_stamped_at_receipt() -> None:
    """A server replaying one recorded packet under fresh frame numbers repeats its camera ticks: those frames
    carry no capture instant, so each is stamped when it arrived less the system latency it reports (5 ms) and the
    configured latency, never all at the one recorded instant."""
    client = NatNetClient(NatNetClientConfig(multicast_address=None, data_port=0, extra_latency_s=0.002))
    client.server_info = default_server_info(data_port=0)
    clock_hz = client.server_info.high_resolution_clock_hz
    assert clock_hz > 0
    receive = 100.0 + np.arange(6) * 0.01
    frames = [client.to_mocap_frame(FrameOfData(k, camera_mid_exposure_ticks=10 * clock_hz,
                                                transmit_ticks=10 * clock_hz + clock_hz // 200), t)
              for k, t in enumerate(receive)]
    stamps = np.array([f.stamp_s for f in frames])
    assert stamps[0] == pytest.approx(receive[0] - 0.002 - 0.005, abs=1e-6)  # ticks new: the capture instant
    np.testing.assert_allclose(stamps[1:], receive[1:] - 0.002 - 0.005, atol=1e-6)
    assert np.all(np.diff(stamps) > 0)
