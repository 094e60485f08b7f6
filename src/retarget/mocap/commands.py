"""``retarget mocap-import``, ``retarget bag-info`` and ``retarget natnet-decode``."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retarget.mocap.bags import BagSummary

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the mocap commands to the top-level ``retarget`` parser."""
    p = subparsers.add_parser(
        "mocap-import",
        help="convert a Motive CSV export to a rosbag2 of PoseStamped (mocap/<body>/pose)",
        description="Convert the rigid bodies of a Motive CSV export (format 1.21-1.23) to a rosbag2 bag with one "
        "geometry_msgs/PoseStamped topic per body, in metres. Untracked (empty) frames are skipped.",
    )
    p.add_argument("csv", type=Path, help="Motive CSV export")
    p.add_argument("--out", type=Path, required=True, help="bag folder to create (must not exist)")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="bag storage (default mcap)")
    p.add_argument("--frame-id", default="world", help="header frame_id of the poses (default world)")
    p.add_argument("--prefix", default="mocap", help="topic prefix: /<prefix>/<body>/pose (default mocap)")
    p.add_argument("--bodies", default="", help="comma-separated rigid bodies to export (default: all)")
    p.add_argument(
        "--start-time", type=float, default=0.0, help="stamp of the take's first frame [s since the epoch] (default 0)"
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.set_defaults(func=_mocap_import)

    p = subparsers.add_parser(
        "bag-info",
        help="summarize a rosbag2 (storage, duration, topics, types, counts)",
        description="Summarize a rosbag2 folder (sqlite3 or MCAP), like 'ros2 bag info', without ROS.",
    )
    p.add_argument("bag", type=Path, help="bag folder")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.set_defaults(func=_bag_info)

    p = subparsers.add_parser(
        "natnet-decode",
        help="decode raw NatNet packets (.bin files) or the NatNet traffic of a capture (.pcap/.pcapng)",
        description="Decode NatNet datagrams and print them; malformed ones are reported and counted.",
    )
    p.add_argument("files", type=Path, nargs="+", help=".bin (one datagram each), .pcap or .pcapng files, or folders "
                   "of them (their files in name order)")
    p.add_argument("--natnet-version", default="3.0", help="NatNet version to decode frames with until a server-info "
                   "packet is seen (default 3.0)")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.set_defaults(func=_natnet_decode)


def _mocap_import(args: argparse.Namespace) -> int:
    import numpy as np

    from retarget.errors import InputError
    from retarget.mocap.bags import PoseSeries, pose_topic, write_pose_bag
    from retarget.mocap.motive_csv import read_motive_csv

    take = read_motive_csv(args.csv)
    wanted = [b.strip() for b in args.bodies.split(",") if b.strip()]
    unknown = [b for b in wanted if b not in take.rigid_bodies]
    if unknown:
        raise InputError(
            f"{args.csv}: no rigid body {', '.join(map(repr, unknown))} "
            f"(rigid bodies: {', '.join(take.rigid_bodies) or 'none'})"
        )
    names = wanted or list(take.rigid_bodies)
    if not names:
        raise InputError(
            f"{args.csv}: the export has no rigid bodies (only {len(take.markers)} markers); "
            "export the take with rigid bodies enabled"
        )
    streams = {}
    for name in names:
        body = take.rigid_bodies[name]
        topic = pose_topic(name, args.prefix)
        if topic in streams:
            raise InputError(f"{args.csv}: rigid bodies map to the same topic {topic}; rename one in Motive")
        stamps = args.start_time + take.time_s
        streams[topic] = PoseSeries(stamps, body.position_m, body.orientation_xyzw, args.frame_id)
    info = write_pose_bag(args.out, streams, storage=args.storage)
    skipped = {
        pose_topic(n, args.prefix): int(np.count_nonzero(~take.rigid_bodies[n].tracked)) for n in names
    }
    bag = info.to_dict()
    summary: dict[str, object] = {**bag, "source": str(args.csv), "untracked_frames_skipped": skipped}
    _print_info(bag)
    if args.json:
        print(json.dumps(summary))
    return 0


def _print_info(summary: BagSummary) -> None:
    print(f"bag:      {summary['path']}")
    print(f"storage:  {summary['storage']} (rosbag2 v{summary['version']})")
    print(f"duration: {summary['duration_s']:.3f} s, {summary['message_count']} messages")
    for t in summary["topics"]:
        print(f"  {t['name']}  [{t['type']}]  {t['count']}")


def _bag_info(args: argparse.Namespace) -> int:
    from retarget.mocap.bags import bag_info

    summary = bag_info(args.bag).to_dict()
    _print_info(summary)
    if args.json:
        print(json.dumps(summary))
    return 0


def _parse_version(text: str) -> tuple[int, int, int, int]:
    from retarget.errors import InputError

    try:
        parts = [int(p) for p in text.split(".")]
    except ValueError:
        raise InputError(f"--natnet-version {text!r} is not like 3.0 or 4.1") from None
    if not 1 <= len(parts) <= 4:
        raise InputError(f"--natnet-version {text!r} is not like 3.0 or 4.1")
    return tuple((parts + [0, 0, 0])[:4])  # type: ignore[return-value]


#: Captures natnet-decode reads the NatNet datagrams of; any other file is one datagram.
CAPTURE_SUFFIXES = (".pcap", ".pcapng")
#: The files natnet-decode reads from a folder.
PACKET_SUFFIXES = (".bin", *CAPTURE_SUFFIXES)


def _packet_files(paths: list[Path]) -> list[Path]:
    """``paths`` with each folder replaced by its packet and capture files (:data:`PACKET_SUFFIXES`), in name order.

    Raises:
        InputError: a path that does not exist, or a folder without such files.
    """
    from retarget.errors import InputError

    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(f for f in path.iterdir() if f.is_file() and f.suffix.lower() in PACKET_SUFFIXES)
            if not found:
                raise InputError(f"{path}: a folder without NatNet packets or captures "
                                 f"({', '.join(PACKET_SUFFIXES)} files)")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: no such file or folder")
    return files


def _natnet_decode(args: argparse.Namespace) -> int:
    from collections import Counter

    from retarget.mocap.errors import NatNetDecodeError
    from retarget.mocap.natnet import FrameOfData, ServerInfo, decode_packet
    from retarget.mocap.pcap import read_udp_datagrams

    version = _parse_version(args.natnet_version)
    kinds: Counter[str] = Counter()
    malformed = 0
    frames = []
    for path in _packet_files(args.files):
        if path.suffix.lower() in CAPTURE_SUFFIXES:
            datagrams = [d.payload for d in read_udp_datagrams(path)]
        else:
            datagrams = [path.read_bytes()]
        for data in datagrams:
            try:
                packet = decode_packet(data, version)
            except NatNetDecodeError as exc:
                malformed += 1
                print(f"{path}: {exc}")
                continue
            kinds[type(packet).__name__] += 1
            if isinstance(packet, ServerInfo):
                version = packet.sender.natnet_version
            if isinstance(packet, FrameOfData):
                frames.append(packet.frame_number)
            if len(datagrams) == 1 or not isinstance(packet, FrameOfData):
                print(f"{path}: {packet}")
    summary = {"messages": dict(kinds), "malformed": malformed, "frames": len(frames),
               "first_frame": min(frames, default=None), "last_frame": max(frames, default=None)}
    print(f"{sum(kinds.values())} decoded, {malformed} malformed, {len(frames)} frames")
    if args.json:
        print(json.dumps(summary))
    return 0
