"""Capture reading: the real NatNet session (pcapng) and a classic pcap written here."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from retarget.mocap.pcap import PcapError, read_udp_datagrams


def test_real_capture(natnet_dir: Path) -> None:
    datagrams = read_udp_datagrams(natnet_dir / "traffic.pcapng")
    assert len(datagrams) == 550
    frames = [d for d in datagrams if d.dst[1] == 1511]
    assert len(frames) == 518 and frames[0].dst[0] == "239.255.42.99"
    assert all(b.time_s >= a.time_s for a, b in zip(datagrams, datagrams[1:]))


def _classic_pcap(payload: bytes) -> bytes:
    udp = struct.pack(">HHHH", 1510, 5000, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, bytes([127, 0, 0, 1]),
                     bytes([127, 0, 0, 2])) + udp
    frame = b"\x00" * 12 + b"\x08\x00" + ip
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    record = struct.pack("<IIII", 10, 500_000, len(frame), len(frame)) + frame
    return header + record


def test_classic_pcap(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(_classic_pcap(b"\x04\x00\x00\x00"))
    (datagram,) = read_udp_datagrams(path)
    assert datagram.payload == b"\x04\x00\x00\x00"
    assert datagram.src == ("127.0.0.1", 1510) and datagram.dst == ("127.0.0.2", 5000)
    assert datagram.time_s == pytest.approx(10.5)
    path.write_bytes(_classic_pcap(b"abcd")[:-2])
    with pytest.raises(PcapError, match="runs past the end"):
        read_udp_datagrams(path)
    path.write_bytes(b"not a capture")
    with pytest.raises(PcapError, match="unknown magic"):
        read_udp_datagrams(path)
