"""Rigid forward kinematics and point Jacobians of a URDF tree, for IK retargeting.

Flexible parts are treated as their rigid placeholder links (the retargeted motion is the artist's intent; the
planner later handles the flexibility). Built from URDF XML with ``yourdfpy`` (no meshes loaded).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from retarget.motion.errors import MotionFormatError
from retarget.motion.limits import JointLimit

__all__ = ["RigKinematics"]


@dataclass(frozen=True)
class _Joint:
    name: str
    parent: str
    child: str
    origin: np.ndarray  # (4, 4) child joint frame in the parent link frame at q = 0
    axis: np.ndarray  # (3,) in the joint frame
    kind: str  # revolute | continuous | prismatic | fixed
    actuated: int  # index into the actuated joint vector, or -1


def _axis_rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    x, y, z = axis
    c, s = np.cos(angle), np.sin(angle)
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + s * k + (1.0 - c) * (k @ k)


class RigKinematics:
    """Forward kinematics of the rigid tree of a URDF.

    Attributes:
        joint_names: Actuated (revolute, continuous, prismatic) joint names in URDF order, length ``m``.
        limits: ``{joint: JointLimit}`` from the URDF ``<limit>`` tags [rad], [rad/s].
        root: Root link name.
    """

    def __init__(self, urdf_xml: str) -> None:
        import yourdfpy
        from lxml import etree

        try:
            robot = yourdfpy.URDF._parse_robot(etree.fromstring(urdf_xml.encode()))
        except Exception as exc:  # yourdfpy raises assorted errors on malformed XML
            raise MotionFormatError(f"cannot parse URDF: {exc}") from exc
        actuated = [j.name for j in robot.joints if j.type in ("revolute", "continuous", "prismatic")]
        self.joint_names: tuple[str, ...] = tuple(actuated)
        self.limits: dict[str, JointLimit] = {}
        joints = []
        for j in robot.joints:
            origin = np.eye(4) if j.origin is None else np.asarray(j.origin, dtype=np.float64)
            axis = np.array([1.0, 0.0, 0.0]) if j.axis is None else np.asarray(j.axis, dtype=np.float64)
            index = actuated.index(j.name) if j.name in actuated else -1
            joints.append(_Joint(j.name, j.parent, j.child, origin, axis / np.linalg.norm(axis), j.type, index))
            if index >= 0 and j.limit is not None and j.type != "continuous":
                self.limits[j.name] = JointLimit(
                    -np.inf if j.limit.lower is None else float(j.limit.lower),
                    np.inf if j.limit.upper is None else float(j.limit.upper),
                    np.inf if not j.limit.velocity else float(j.limit.velocity))
        children = {j.child for j in joints}
        roots = [link.name for link in robot.links if link.name not in children]
        if len(roots) != 1:
            raise MotionFormatError(f"URDF must have exactly one root link, found {roots}")
        self.root = roots[0]
        by_parent: dict[str, list[_Joint]] = {}
        for j in joints:
            by_parent.setdefault(j.parent, []).append(j)
        self._order: list[_Joint] = []
        stack = [self.root]
        while stack:
            link = stack.pop()
            for j in by_parent.get(link, []):
                self._order.append(j)
                stack.append(j.child)
        self._parent_joint = {j.child: j for j in self._order}
        self.link_names: tuple[str, ...] = (self.root, *[j.child for j in self._order])
        self._chains: dict[str, list[_Joint]] = {}

    def lower_upper(self) -> tuple[np.ndarray, np.ndarray]:
        """Position limits as arrays [rad], shape ``(m,)`` each (``±inf`` where unlimited)."""
        lim = [self.limits.get(n, JointLimit()) for n in self.joint_names]
        return np.array([x.lower for x in lim]), np.array([x.upper for x in lim])

    def forward(self, q: np.ndarray) -> dict[str, np.ndarray]:
        """World transform of every link and every actuated joint frame.

        Args:
            q: Actuated joint positions [rad or m], shape ``(m,)``, in :attr:`joint_names` order.

        Returns:
            ``{link name: (4, 4)}`` plus ``{"joint:<name>": (4, 4)}`` joint frames (before the joint's motion).
        """
        frames: dict[str, np.ndarray] = {self.root: np.eye(4)}
        for j in self._order:
            joint_frame = frames[j.parent] @ j.origin
            motion = np.eye(4)
            if j.actuated >= 0:
                if j.kind == "prismatic":
                    motion[:3, 3] = j.axis * q[j.actuated]
                else:
                    motion[:3, :3] = _axis_rotation(j.axis, q[j.actuated])
                frames["joint:" + j.name] = joint_frame
            frames[j.child] = joint_frame @ motion
        return frames

    def _chain(self, link: str) -> list[_Joint]:
        """Actuated joints from the root to ``link`` (cached: the Jacobian is evaluated per IK iteration)."""
        if link not in self._chains:
            if link not in self.link_names:
                raise MotionFormatError(f"robot has no link '{link}'; links: {list(self.link_names)}")
            chain, cur = [], link
            while cur in self._parent_joint:
                j = self._parent_joint[cur]
                if j.actuated >= 0:
                    chain.append(j)
                cur = j.parent
            self._chains[link] = chain[::-1]
        return self._chains[link]

    def ancestors(self, link: str) -> list[str]:
        """Actuated joints between the root and ``link``."""
        return [j.name for j in self._chain(link)]

    def point_jacobian(self, frames: Mapping[str, np.ndarray], link: str) -> np.ndarray:
        """Jacobian of the origin of ``link`` (world frame) w.r.t. the actuated joints, shape ``(3, m)`` [m/rad]."""
        p = frames[link][:3, 3]
        jac = np.zeros((3, len(self.joint_names)))
        for j in self._chain(link):
            frame = frames["joint:" + j.name]
            axis = frame[:3, :3] @ j.axis
            jac[:, j.actuated] = axis if j.kind == "prismatic" else np.cross(axis, p - frame[:3, 3])
        return jac
