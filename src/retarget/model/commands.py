"""``retarget robots`` and ``retarget motions``: list the shipped robots and motions."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TypedDict

__all__ = ["MotionSummary", "RobotSummary", "motion_summary", "register", "robot_summary"]


class RobotSummary(TypedDict):
    """One row of ``retarget robots --json`` (:func:`robot_summary`)."""

    name: str
    dof: int
    motors: list[str]
    flexible_parts: list[str | None]
    tracked_bodies: list[str | None]
    mass_kg: float


class MotionSummary(TypedDict):
    """One row of ``retarget motions --json`` (:func:`motion_summary`); None where the file does not say."""

    name: str
    file: str
    duration_s: float | None
    joints: list[str] | None
    description: str


def robot_summary(robot: str) -> RobotSummary:
    """Name, DOF, motors, flexible parts, tracked bodies and total mass of a shipped robot.

    The mass [kg] is the sum of the URDF inertials; flexible parts count with their placeholder inertial,
    which carries the part's real mass.
    """
    import xml.etree.ElementTree as ET

    from retarget.model.library import robot_config, urdf_xml

    section = robot_config(robot)["retarget"]
    root = ET.fromstring(urdf_xml(robot))
    mass = sum(float(m.get("value", 0.0)) for m in root.iter("mass"))
    motors = list(section.get("motors") or [])
    return {
        "name": robot,
        "dof": len(motors),
        "motors": motors,
        "flexible_parts": [p.get("name") for p in section.get("flexible_parts") or []],
        "tracked_bodies": [b.get("link") for b in section.get("tracked_bodies") or []],
        "mass_kg": round(mass, 4),
    }


def motion_summary(name: str) -> MotionSummary:
    """Name, file, duration [s], joints and description of a shipped motion (keyframes YAML or other file)."""
    import yaml

    from retarget.model.library import resolve_motion

    path = resolve_motion(name)
    info: MotionSummary = {"name": name, "file": str(path), "duration_s": None, "joints": None,
                           "description": ""}
    if path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(path.read_text()) or {}
        keys = data.get("keyframes") or []
        if keys:
            info["duration_s"] = float(keys[-1][0]) - float(keys[0][0])
        info["joints"] = data.get("joints")
        info["description"] = " ".join(str(data.get("description", "")).split())
    return info


def _robots(args: argparse.Namespace) -> int:
    from retarget.model.library import list_rigs, list_robots

    rows = [robot_summary(name) for name in list_robots()]
    rigs = [robot_summary(name) for name in list_rigs()]
    if args.json:
        print(json.dumps({"robots": rows, "rigs": rigs}))
        return 0
    print(f"{'robot':<12} {'DOF':>3} {'mass [kg]':>9}  flexible parts / motors")
    for kind, group in (("", rows), ("rig: ", rigs)):
        for r in group:
            print(f"{r['name']:<12} {r['dof']:>3} {r['mass_kg']:>9.3f}  {kind}{', '.join(r['flexible_parts'])}")
            print(f"{'':<27}  motors: {', '.join(r['motors'])}")
    return 0


def _motions(args: argparse.Namespace) -> int:
    from retarget.model.library import list_motions, resolve_robot, robots_then_rigs

    if args.robot is not None:
        resolve_robot(args.robot)  # unknown names raise with the list of known robots
    robots = [args.robot] if args.robot else robots_then_rigs()
    rows = [motion_summary(n) for robot in robots for n in list_motions(robot)]
    if args.json:
        print(json.dumps({"motions": rows}))
        return 0
    for r in rows:
        duration = f"{r['duration_s']:.2f} s" if r["duration_s"] is not None else "?"
        print(f"{r['name']:<24} {duration:>8}  {Path(r['file']).suffix[1:]:<4}  {r['description']}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget robots`` and ``retarget motions`` to the top-level CLI."""
    robots = subparsers.add_parser(
        "robots", help="list the shipped robots and test rigs (DOF, motors, flexible parts, mass)",
        description="List the shipped robots, then the test rigs (the material-fitting rig fit_rig): DOF, motors, "
        "flexible parts and total mass from the URDF.")
    robots.add_argument("--json", action="store_true", help="print one JSON object")
    robots.set_defaults(func=_robots)

    motions = subparsers.add_parser(
        "motions", help="list the shipped motions of a robot (name, duration, description)",
        description="List the shipped motions <robot>/<motion> with duration and description.")
    motions.add_argument("robot", nargs="?", default=None,
                         help="robot or rig name (all robots and rigs when omitted)")
    motions.add_argument("--json", action="store_true", help="print one JSON object")
    motions.set_defaults(func=_motions)
