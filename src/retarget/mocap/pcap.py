"""UDP datagrams from packet captures (pcapng or classic pcap, Ethernet + IPv4), to replay recorded NatNet traffic.

Only what a NatNet replay needs: IPv4/UDP over Ethernet (link type 1) or raw IPv4 (link type 101/228); other
packets are skipped. IP fragments are skipped too (Motive frames of a few hundred bytes are never fragmented).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from retarget.mocap.errors import MocapError

__all__ = ["UdpDatagram", "PcapError", "read_udp_datagrams"]

_LINK_ETHERNET = 1
_LINK_RAW = (101, 228)
_PCAPNG_SECTION = 0x0A0D0D0A
_PCAPNG_INTERFACE = 1
_PCAPNG_ENHANCED_PACKET = 6
_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
                b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}


class PcapError(MocapError):
    """A capture file is not pcap/pcapng or is truncated.

    Attributes:
        path: the file. offset: byte offset of the bad block.
    """

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        super().__init__(f"{path}: byte {offset}: {reason}")


@dataclass(frozen=True)
class UdpDatagram:
    """One captured UDP datagram.

    Attributes:
        time_s: capture time [s] (seconds since the epoch as the capture recorded it).
        src: source ``(address, port)``.
        dst: destination ``(address, port)``.
        payload: UDP payload.
    """

    time_s: float
    src: tuple[str, int]
    dst: tuple[str, int]
    payload: bytes


def read_udp_datagrams(path: Path | str) -> list[UdpDatagram]:
    """All IPv4 UDP datagrams of a pcapng or pcap file, in capture order.

    Raises:
        PcapError: not a capture file, or a block runs past the end of the file.
    """
    path = Path(path)
    data = path.read_bytes()
    if len(data) >= 4 and struct.unpack_from("<I", data, 0)[0] == _PCAPNG_SECTION:
        return _read_pcapng(path, data)
    if data[:4] in _PCAP_MAGICS:
        return _read_pcap(path, data)
    raise PcapError(path, 0, "neither pcapng nor pcap (unknown magic number)")


def _read_pcapng(path: Path, data: bytes) -> list[UdpDatagram]:
    out: list[UdpDatagram] = []
    links: list[tuple[int, float]] = []
    endian = "<"
    pos = 0
    while pos + 12 <= len(data):
        if struct.unpack_from("<I", data, pos)[0] == _PCAPNG_SECTION:
            endian = "<" if data[pos + 8 : pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            links = []
        block_type, block_len = struct.unpack_from(endian + "II", data, pos)
        if block_len < 12 or pos + block_len > len(data):
            raise PcapError(path, pos, f"block length {block_len} runs past the end of the file")
        body = data[pos + 8 : pos + block_len - 4]
        if block_type == _PCAPNG_INTERFACE:
            links.append((struct.unpack_from(endian + "H", body, 0)[0], _if_tsresol(body[8:], endian)))
        elif block_type == _PCAPNG_ENHANCED_PACKET and len(body) >= 20:
            iface, ts_high, ts_low, caplen, _ = struct.unpack_from(endian + "IIIII", body, 0)
            if iface < len(links):
                link, resolution = links[iface]
                datagram = _udp(link, ((ts_high << 32) | ts_low) * resolution, body[20 : 20 + caplen])
                if datagram is not None:
                    out.append(datagram)
        pos += block_len
    return out


def _if_tsresol(options: bytes, endian: str) -> float:
    """Timestamp resolution of an interface block [s per tick] (default 1 µs)."""
    pos = 0
    while pos + 4 <= len(options):
        code, length = struct.unpack_from(endian + "HH", options, pos)
        if code == 0:
            break
        if code == 9 and length >= 1:
            value = options[pos + 4]
            return 2.0 ** -(value & 0x7F) if value & 0x80 else 10.0 ** -value
        pos += 4 + (length + 3) // 4 * 4
    return 1e-6


def _read_pcap(path: Path, data: bytes) -> list[UdpDatagram]:
    endian, resolution = _PCAP_MAGICS[data[:4]]
    if len(data) < 24:
        raise PcapError(path, 0, "truncated pcap header")
    link = struct.unpack_from(endian + "I", data, 20)[0] & 0xFFFF
    out: list[UdpDatagram] = []
    pos = 24
    while pos + 16 <= len(data):
        seconds, fraction, caplen, _ = struct.unpack_from(endian + "IIII", data, pos)
        if pos + 16 + caplen > len(data):
            raise PcapError(path, pos, f"packet of {caplen} bytes runs past the end of the file")
        datagram = _udp(link, seconds + fraction * resolution, data[pos + 16 : pos + 16 + caplen])
        if datagram is not None:
            out.append(datagram)
        pos += 16 + caplen
    return out


def _udp(link: int, time_s: float, frame: bytes) -> UdpDatagram | None:
    if link == _LINK_ETHERNET:
        if len(frame) < 14:
            return None
        ethertype = struct.unpack_from(">H", frame, 12)[0]
        offset = 14
        if ethertype == 0x8100 and len(frame) >= 18:  # one VLAN tag
            ethertype = struct.unpack_from(">H", frame, 16)[0]
            offset = 18
        if ethertype != 0x0800:
            return None
        ip = frame[offset:]
    elif link in _LINK_RAW:
        ip = frame
    else:
        return None
    if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 17:
        return None
    flags_fragment = struct.unpack_from(">H", ip, 6)[0]
    if flags_fragment & 0x3FFF:  # more-fragments flag or a fragment offset
        return None
    header_len = (ip[0] & 0x0F) * 4
    udp = ip[header_len:]
    if len(udp) < 8:
        return None
    src_port, dst_port, length = struct.unpack_from(">HHH", udp, 0)
    if length < 8 or length > len(udp):
        return None
    src = ".".join(str(b) for b in ip[12:16])
    dst = ".".join(str(b) for b in ip[16:20])
    return UdpDatagram(time_s, (src, src_port), (dst, dst_port), bytes(udp[8:length]))
