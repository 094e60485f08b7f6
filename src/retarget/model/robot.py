"""The robot description as plain typed objects, and a programmatic builder.

All geometry is expressed in the *world frame at the reference configuration* (every joint at zero), which is
what the simulator needs: a rigid link is its mass, centre of mass and inertia about it; a joint is an anchor
point and axes; a flexible part is a tet mesh already placed in the world. The URDF/YAML loader
(:mod:`retarget.model.loader`) and tests or validation commands (:class:`RobotBuilder`) both produce a
:class:`RobotModel`.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.errors import InputError
from retarget.model.servo import IDEAL, SERVO_MODELS, ServoParams

if TYPE_CHECKING:
    from retarget.fem.material import Material
    from retarget.fem.mesh import TetMesh

__all__ = [
    "FlexiblePart",
    "Interface",
    "Joint",
    "JOINT_KINDS",
    "Link",
    "MeshGenerator",
    "ModelError",
    "RobotBuilder",
    "RobotModel",
    "TrackedBody",
]

JOINT_KINDS: tuple[str, ...] = ("fixed", "hinge", "universal", "ball", "prismatic")


class ModelError(InputError):
    """A robot description is inconsistent (unknown link, bad joint, bad interface). Names the offending item."""


def _vec(value: ArrayLike, name: str, shape: tuple[int, ...] = (3,)) -> NDArray[np.float64]:
    arr = np.asarray(value, dtype=float)
    if arr.shape != shape or not np.all(np.isfinite(arr)):
        raise ModelError(f"{name}: expected finite array of shape {shape}, got {arr.shape}")
    return arr


@dataclass(frozen=True, eq=False)
class Link:
    """A rigid link at the reference configuration.

    Attributes:
        name: link name (URDF).
        mass: [kg], > 0.
        com: centre of mass (3,) [m], world frame.
        inertia: inertia tensor about the centre of mass (3, 3) [kg m²], world axes.
        frame_position: the link frame's origin (3,) [m], world (for link poses).
        frame_rotation: the link frame's orientation (3, 3), world.
    """

    name: str
    mass: float
    com: NDArray[np.float64]
    inertia: NDArray[np.float64]
    frame_position: NDArray[np.float64] = field(default_factory=lambda: np.zeros(3))
    frame_rotation: NDArray[np.float64] = field(default_factory=lambda: np.eye(3))


@dataclass(frozen=True, eq=False)
class Joint:
    """A joint between two links (``None`` = the world) at the reference configuration.

    Attributes:
        name: joint name.
        kind: one of :data:`JOINT_KINDS` (URDF revolute/continuous = hinge).
        parent, child: link names or ``None`` for the world.
        anchor: joint point (3,) [m], world.
        axis: hinge/slider axis (3,) unit, world; for a universal joint the axis fixed in the parent.
        axis2: universal joint only: the axis fixed in the child (3,), perpendicular to ``axis``.
        lower, upper: limits [rad] or [m] (informational; the simulator does not enforce them).
    """

    name: str
    kind: str
    parent: str | None
    child: str | None
    anchor: NDArray[np.float64]
    axis: NDArray[np.float64] = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    axis2: NDArray[np.float64] | None = None
    lower: float = -np.inf
    upper: float = np.inf


@dataclass(frozen=True, eq=False)
class Interface:
    """Where a flexible part is welded to a rigid link (``link=None``: the world).

    Attributes:
        link: rigid link name or ``None``.
        nodes: mesh node ids (k,) of the interface (≥ 3, not collinear).
    """

    link: str | None
    nodes: NDArray[np.int64]


@dataclass(frozen=True)
class MeshGenerator:
    """How a flexible part's mesh was generated (``retarget.fem.mesh.rod_mesh``/``bar_mesh``/``plate_mesh``).

    The generators build the part in its own frame: along +z from z = 0 to ``length``; a bar's or plate's width
    along x and thickness along y.

    Attributes:
        kind: ``"rod"``, ``"bar"`` or ``"plate"``.
        length: extent along the part's z [m].
        diameter: a rod's diameter [m] (0 for bars and plates).
        width: a bar's or plate's extent along x [m] (0 for rods).
        thickness: a bar's or plate's extent along y [m] (0 for rods).
        resolution: the element counts used: ``axial``, ``around`` (rods); ``axial``, ``width``,
            ``thickness`` (bars, plates).
    """

    kind: str
    length: float
    diameter: float = 0.0
    width: float = 0.0
    thickness: float = 0.0
    resolution: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class FlexiblePart:
    """A deformable part: a 10-node tet mesh in world coordinates at the reference, a material, interfaces.

    Attributes:
        name: unique name.
        mesh: a :class:`retarget.fem.mesh.TetMesh` placed in the world [m].
        material: a :class:`retarget.fem.material.Material`: the one the simulator uses, i.e. the nominal
            material with its Young's modulus multiplied by ``stiffness_factor``.
        interfaces: the rigid links it is welded to (two or more close loops).
        replaces: the URDF link this part replaces ('' if none).
        generator: how the mesh was generated (None: read from a file or built by hand).
        pose: the part's own frame in the world at the reference (4, 4): the generator's frame (z along the
            part) for generated meshes, the file's frame for read ones.
        stiffness_factor: the calibration factor c applied to the nominal Young's modulus (1.0: not calibrated),
            c = (f1_reference / f1_mesh)² so that the mesh's first bending frequencies match the mesh-converged
            reference (``retarget.fem.model_card``, docs/fem.md).
    """

    name: str
    mesh: TetMesh
    material: Material
    interfaces: tuple[Interface, ...]
    replaces: str = ""
    generator: MeshGenerator | None = None
    pose: NDArray[np.float64] = field(default_factory=lambda: np.eye(4))
    stiffness_factor: float = 1.0

    @property
    def nominal_material(self) -> Material:
        """The material before calibration (Young's modulus divided by ``stiffness_factor``)."""
        if self.stiffness_factor == 1.0:
            return self.material
        from dataclasses import replace

        return replace(self.material, youngs_modulus=self.material.youngs_modulus / self.stiffness_factor)


@dataclass(frozen=True)
class TrackedBody:
    """A rigid link whose centre of mass (and optionally orientation) the optimizer tracks."""

    link: str
    position_weight: float = 1.0
    orientation_weight: float = 0.0


@dataclass(frozen=True, eq=False)
class RobotModel:
    """A whole robot at its reference configuration.

    Attributes:
        name: robot name.
        links: rigid links (flexible parts' placeholder links removed).
        joints: joints including loop closures.
        flexible_parts: FEM parts.
        motors: names of motorized joints (hinge or prismatic), in command order.
        gravity: (3,) [m/s²].
        tracked_bodies: for the optimizer.
        merged_links: links with mass welded by fixed joints into another link's rigid body (link → body name);
            they are not in ``links`` (their mass and inertia are in the body's).
        servos: per motor (in ``motors`` order), its :class:`~retarget.model.servo.ServoParams`; empty = every
            motor an ideal position source (robots built in code).
    """

    name: str
    links: tuple[Link, ...]
    joints: tuple[Joint, ...]
    flexible_parts: tuple[FlexiblePart, ...] = ()
    motors: tuple[str, ...] = ()
    gravity: NDArray[np.float64] = field(default_factory=lambda: np.array([0.0, 0.0, -9.81]))
    tracked_bodies: tuple[TrackedBody, ...] = ()
    merged_links: Mapping[str, str] = field(default_factory=dict)
    servos: tuple[ServoParams, ...] = ()

    def __post_init__(self) -> None:
        if self.servos and len(self.servos) != len(self.motors):
            raise ModelError(f"robot {self.name!r}: {len(self.servos)} servos for {len(self.motors)} motors")

    def servo(self, motor: str) -> ServoParams:
        """The servo driving ``motor`` (the ideal position source when the robot declares none)."""
        if motor not in self.motors:
            raise ModelError(f"no motor {motor!r} in robot {self.name!r}; motors: {list(self.motors)}")
        return self.servos[self.motors.index(motor)] if self.servos else SERVO_MODELS[IDEAL]

    @property
    def servo_list(self) -> tuple[ServoParams, ...]:
        """Per motor, its servo (ideal ones filled in)."""
        return tuple(self.servo(m) for m in self.motors)

    @property
    def ideal_servos(self) -> bool:
        """Whether every motor is a perfect position source."""
        return all(s.ideal for s in self.servo_list)

    def with_servos(self, servos: Sequence[ServoParams]) -> RobotModel:
        """A copy driven by ``servos`` (one per motor, motor order)."""
        from dataclasses import replace

        return replace(self, servos=tuple(servos))

    def link(self, name: str) -> Link:
        """The link called ``name``."""
        for link in self.links:
            if link.name == name:
                return link
        if name in self.merged_links:
            raise ModelError(f"link {name!r} of robot {self.name!r} is welded by a fixed joint into the rigid body "
                             f"{self.merged_links[name]!r} (its mass and inertia are in that body's)")
        raise ModelError(f"no rigid link {name!r} in robot {self.name!r}; links: {[x.name for x in self.links]}")

    def joint(self, name: str) -> Joint:
        """The joint called ``name``."""
        for joint in self.joints:
            if joint.name == name:
                return joint
        raise ModelError(f"no joint {name!r} in robot {self.name!r}")


class RobotBuilder:
    """Builds a :class:`RobotModel` programmatically (tests, validation commands, the URDF loader).

    Example:
        >>> b = RobotBuilder("pendulum", gravity=(0, 0, -9.81))
        >>> _ = b.add_link("bob", mass=1.0, com=(1, 0, 0), inertia=np.eye(3) * 1e-4)
        >>> _ = b.add_joint("pivot", "hinge", parent=None, child="bob", anchor=(0, 0, 0), axis=(0, 1, 0))
        >>> model = b.build()
    """

    def __init__(self, name: str, gravity: ArrayLike = (0.0, 0.0, -9.81)) -> None:
        self.name = name
        self.gravity = _vec(gravity, "gravity")
        self._links: dict[str, Link] = {}
        self._joints: dict[str, Joint] = {}
        self._parts: dict[str, FlexiblePart] = {}
        self._motors: list[str] = []
        self._tracked: list[TrackedBody] = []
        self._servos: dict[str, ServoParams] = {}

    def add_link(
        self,
        name: str,
        mass: float,
        com: ArrayLike,
        inertia: ArrayLike,
        frame_position: ArrayLike | None = None,
        frame_rotation: ArrayLike | None = None,
    ) -> Link:
        """Add a rigid link (see :class:`Link`; world frame at the reference)."""
        if name in self._links:
            raise ModelError(f"duplicate link {name!r}")
        if not mass > 0:
            raise ModelError(f"link {name!r}: mass must be positive, got {mass}")
        inertia_m = _vec(inertia, f"link {name!r} inertia", (3, 3))
        inertia_m = 0.5 * (inertia_m + inertia_m.T)
        if np.linalg.eigvalsh(inertia_m)[0] <= 0:
            raise ModelError(f"link {name!r}: inertia must be positive definite")
        com_v = _vec(com, f"link {name!r} com")
        link = Link(
            name,
            float(mass),
            com_v,
            inertia_m,
            com_v.copy() if frame_position is None else _vec(frame_position, "frame_position"),
            np.eye(3) if frame_rotation is None else _vec(frame_rotation, "frame_rotation", (3, 3)),
        )
        self._links[name] = link
        return link

    def add_joint(
        self,
        name: str,
        kind: str,
        parent: str | None,
        child: str | None,
        anchor: ArrayLike,
        axis: ArrayLike = (0.0, 0.0, 1.0),
        axis2: ArrayLike | None = None,
        motor: bool = False,
        lower: float = -np.inf,
        upper: float = np.inf,
    ) -> Joint:
        """Add a joint (see :class:`Joint`); ``motor=True`` makes it a motor (hinge or prismatic)."""
        if name in self._joints:
            raise ModelError(f"duplicate joint {name!r}")
        if kind not in JOINT_KINDS:
            raise ModelError(f"joint {name!r}: kind {kind!r} not in {JOINT_KINDS}")
        if motor and kind not in ("hinge", "prismatic"):
            raise ModelError(f"joint {name!r}: a motor must be a hinge or prismatic joint, not {kind}")
        if parent is None and child is None:
            raise ModelError(f"joint {name!r}: at least one side must be a link")
        ax = _vec(axis, f"joint {name!r} axis")
        if np.linalg.norm(ax) < 1e-12:
            raise ModelError(f"joint {name!r}: zero axis")
        ax = ax / np.linalg.norm(ax)
        ax2 = None
        if kind == "universal":
            if axis2 is None:
                raise ModelError(f"universal joint {name!r} needs axis2 (the child's axis)")
            ax2 = _vec(axis2, f"joint {name!r} axis2")
            ax2 = ax2 / np.linalg.norm(ax2)
            if abs(ax @ ax2) > 1e-9:
                raise ModelError(f"universal joint {name!r}: axis and axis2 must be perpendicular")
        joint = Joint(name, kind, parent, child, _vec(anchor, f"joint {name!r} anchor"), ax, ax2, lower, upper)
        self._joints[name] = joint
        if motor:
            self._motors.append(name)
        return joint

    def add_flexible_part(
        self,
        name: str,
        mesh: TetMesh,
        material: Material,
        interfaces: Iterable[tuple[str | None, ArrayLike]],
        replaces: str = "",
        generator: MeshGenerator | None = None,
        pose: ArrayLike | None = None,
    ) -> FlexiblePart:
        """Add a FEM part: ``mesh`` in world coordinates, ``interfaces`` as ``(link or None, node ids)`` pairs;
        ``generator`` and ``pose`` as in :class:`FlexiblePart`."""
        if name in self._parts:
            raise ModelError(f"duplicate flexible part {name!r}")
        ifaces = []
        for link, nodes in interfaces:
            ids = np.unique(np.asarray(nodes, dtype=np.int64))
            if len(ids) < 3:
                raise ModelError(f"flexible part {name!r}: interface to {link!r} has {len(ids)} nodes (need ≥ 3)")
            if ids.min() < 0 or ids.max() >= len(mesh.nodes):
                raise ModelError(f"flexible part {name!r}: interface node ids out of range")
            ifaces.append(Interface(link, ids))
        if not ifaces:
            raise ModelError(f"flexible part {name!r} has no interface: it would fall freely")
        pose_m = np.eye(4) if pose is None else _vec(pose, f"flexible part {name!r} pose", (4, 4))
        part = FlexiblePart(name, mesh, material, tuple(ifaces), replaces, generator, pose_m)
        self._parts[name] = part
        return part

    def track(self, link: str, position_weight: float = 1.0, orientation_weight: float = 0.0) -> None:
        """Mark a link as tracked by the optimizer."""
        self._tracked.append(TrackedBody(link, position_weight, orientation_weight))

    def set_motors(self, names: Sequence[str]) -> None:
        """Set the motor order (each must be a hinge or prismatic joint)."""
        self._motors = list(names)

    def set_servo(self, motor: str, servo: ServoParams) -> None:
        """Drive ``motor`` by ``servo`` (motors without one are ideal position sources)."""
        self._servos[motor] = servo

    def build(self, merged_links: Mapping[str, str] | None = None) -> RobotModel:
        """Validate references and return the model (``merged_links``: see :class:`RobotModel`)."""
        names = set(self._links)
        for j in self._joints.values():
            for side in (j.parent, j.child):
                if side is not None and side not in names:
                    raise ModelError(f"joint {j.name!r} refers to unknown link {side!r}")
        for p in self._parts.values():
            for itf in p.interfaces:
                if itf.link is not None and itf.link not in names:
                    raise ModelError(f"flexible part {p.name!r}: interface to unknown link {itf.link!r}")
        for m in self._motors:
            if m not in self._joints or self._joints[m].kind not in ("hinge", "prismatic"):
                raise ModelError(f"motor {m!r} is not a hinge or prismatic joint")
        for t in self._tracked:
            if t.link not in names:
                raise ModelError(f"tracked body {t.link!r} is not a rigid link")
        unknown = sorted(set(self._servos) - set(self._motors))
        if unknown:
            raise ModelError(f"servo for {unknown} which are not motors; motors: {self._motors}")
        servos = tuple(self._servos.get(m, SERVO_MODELS[IDEAL]) for m in self._motors) if self._servos else ()
        return RobotModel(
            self.name,
            tuple(self._links.values()),
            tuple(self._joints.values()),
            tuple(self._parts.values()),
            tuple(self._motors),
            self.gravity,
            tuple(self._tracked),
            dict(merged_links or {}),
            servos,
        )
