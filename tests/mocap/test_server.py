"""The loopback NatNet server: answers, and the latency it encodes into frames."""
from __future__ import annotations

import socket

import pytest

from retarget.mocap.natnet import EchoRequest, EchoResponse, decode_packet, encode_packet
from retarget.mocap.server import TWIN_CLOCK_HZ, NatNetServer, default_server_info, frame_of_data
from retarget.mocap.source import BodyPose, MocapFrame


def test_frame_of_data_encodes_latency_and_validity() -> None:
    frame = MocapFrame(
        4, 99.99, 100.0, 0.01, (BodyPose("tip", (1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0), tracking_valid=False),)
    )
    data = frame_of_data(frame, {"tip": 7})
    assert data.frame_number == 4 and data.rigid_bodies[0].id == 7 and not data.rigid_bodies[0].tracking_valid
    assert data.system_latency_s(TWIN_CLOCK_HZ) == pytest.approx(0.01)


@pytest.mark.integration
def test_echo_and_garbage_commands() -> None:
    with NatNetServer(default_server_info(0)) as server, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2.0)
        s.sendto(b"\x02\x00\xff\xff", server.command_address)  # malformed: counted, unanswered
        s.sendto(encode_packet(EchoRequest(42)), server.command_address)
        reply = decode_packet(s.recv(1024))
    assert reply == EchoResponse(42, 0)
    assert server.malformed_commands == 1
