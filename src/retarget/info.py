"""``retarget status``: what this installation can do, honestly."""
from __future__ import annotations

import argparse
import importlib.util
import json


def components() -> dict[str, bool]:
    """Which optional runtime pieces are importable here."""
    found = {}
    for label, module in (
        ("rclpy", "rclpy"),
        ("control_msgs", "control_msgs"),
        ("retarget_interfaces", "retarget_interfaces"),
        ("dynamixel_sdk", "dynamixel_sdk"),
        ("rosbags", "rosbags"),
        ("numba", "numba"),
    ):
        try:
            found[label] = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found[label] = False
    return found


def _status(args: argparse.Namespace) -> int:
    found = components()
    if args.json:
        print(json.dumps(found))
    else:
        for label, ok in found.items():
            print(f"{label:22s} {'ok' if ok else 'missing'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="list which runtime components are installed")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=_status)
