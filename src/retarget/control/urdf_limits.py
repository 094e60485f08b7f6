"""Joint limits read from URDF XML (the ``robot_description`` string ROS nodes receive).

Only ``<joint>`` elements with a ``<limit>`` child are read; a continuous joint has no position limits. Parsed with
the standard library so nodes need no URDF package to check goals.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from retarget.errors import InputError
from retarget.motion.limits import JointLimit

__all__ = ["limits_from_urdf"]


def _attr(element: ET.Element, name: str, default: float) -> float:
    value = element.get(name)
    return default if value is None else float(value)


def limits_from_urdf(urdf_xml: str) -> dict[str, JointLimit]:
    """``{joint: JointLimit}`` for every revolute, prismatic or continuous joint of a URDF.

    Args:
        urdf_xml: The URDF document (already xacro-expanded).

    Returns:
        Limits [rad], [rad/s]; a missing or zero ``velocity`` attribute means unlimited speed.

    Raises:
        InputError: The XML does not parse or is not a ``<robot>``.
    """
    try:
        root = ET.fromstring(urdf_xml)
    except ET.ParseError as exc:
        raise InputError(f"robot_description is not valid XML: {exc}") from exc
    if root.tag != "robot":
        raise InputError(f"robot_description root element is <{root.tag}>, expected <robot>")
    out: dict[str, JointLimit] = {}
    for joint in root.iter("joint"):
        kind = joint.get("type", "")
        if kind not in ("revolute", "prismatic", "continuous"):
            continue
        limit = joint.find("limit")
        lower, upper, velocity = -math.inf, math.inf, math.inf
        if limit is not None:
            if kind != "continuous":
                lower = _attr(limit, "lower", 0.0)
                upper = _attr(limit, "upper", 0.0)
            velocity = _attr(limit, "velocity", math.inf) or math.inf
        out[joint.get("name", "")] = JointLimit(lower, upper, velocity)
    return out
