"""The step-test rig: a robot with one motor, one flexible part and a tip body, reduced to the numbers a fit needs.

The paper's fitting rig (seed §7, Fig. 5) is a flexible part clamped on one servo with a 100 g mass at its tip,
rotated by a 30° or 45° step and back. Any robot YAML of that shape is a rig: :func:`load_rig` loads it with
:func:`retarget.model.load_robot` and extracts the motor axis and pivot, the part's centre line, section and
material, and the tip body. The geometry is what the beam surrogate engine (:mod:`retarget.fit.beam`) needs and
what the adapters of the full and reduced engines use to name the tracked body.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.fit.errors import RigError
from retarget.model.servo import ServoParams

if TYPE_CHECKING:
    from retarget.fem.material import Material
    from retarget.model.robot import RobotModel

__all__ = ["StepTestRig", "load_rig", "resolve_rig_path"]


@dataclass(frozen=True, eq=False)
class StepTestRig:
    """One motor turning one flexible part that carries a tip body, at the reference configuration (θ = 0).

    Attributes:
        name: Robot name.
        path: The robot YAML.
        motor: Motor joint name.
        pivot: A point on the motor axis (3,) [m], world.
        axis: Unit motor axis n (3,), world; θ > 0 turns right-handed about it.
        rod_base: Centre of the clamped end of the part (3,) [m], world.
        rod_direction: Unit centre-line direction e_a from the clamp to the tip (3,), perpendicular to ``axis``.
        length: Free length of the part between its interfaces [m].
        area: Cross-section area A [m²].
        second_moment: Second moment of area I about the motor-axis direction (in-plane bending) [m⁴].
        material: The part's :class:`retarget.fem.material.Material` (library or inline values).
        material_name: The material's name in the robot file (the key ``retarget fit --write`` updates).
        part: Flexible part name.
        tip_link: Rigid link welded to the free end (the tracked tip).
        tip_mass: [kg].
        tip_com: Tip centre of mass (3,) [m], world.
        tip_inertia_axis: Tip inertia about its centre of mass around ``axis`` [kg m²].
        gravity: (3,) [m/s²].
        motor_limits: Lower and upper position limit of the motor joint [rad] (±inf if the URDF has none).
        max_velocity: The servo's speed limit [rad/s] (``servo.max_velocity`` of the robot file), or ``None``.
        stall_torque: The servo's stall torque [N m] (``servo.stall_torque``), or ``None``.
        hub_mass: Mass of the rigid links that turn with the motor shaft (the horn and what is welded to it; not
            the tip) [kg].
        hub_com: Their centre of mass (3,) [m], world.
        hub_inertia_axis: Their inertia about their centre of mass around ``axis`` [kg m²].
        servo: The motor's servo (:class:`retarget.model.servo.ServoParams`; the robot's ``servo:`` section or
            the XM430-W210 default), or ``None`` for a rig built in code without one.
    """

    name: str
    path: Path
    motor: str
    pivot: NDArray[np.float64]
    axis: NDArray[np.float64]
    rod_base: NDArray[np.float64]
    rod_direction: NDArray[np.float64]
    length: float
    area: float
    second_moment: float
    material: Material
    material_name: str
    part: str
    tip_link: str
    tip_mass: float
    tip_com: NDArray[np.float64]
    tip_inertia_axis: float
    gravity: NDArray[np.float64]
    motor_limits: tuple[float, float] = (-math.inf, math.inf)
    max_velocity: float | None = None
    stall_torque: float | None = None
    hub_mass: float = 0.0
    hub_com: NDArray[np.float64] | None = None
    hub_inertia_axis: float = 0.0
    servo: ServoParams | None = None

    @property
    def lateral_direction(self) -> NDArray[np.float64]:
        """In-plane bending direction e_l = n × e_a (3,)."""
        return np.cross(self.axis, self.rod_direction)

    def with_material(self, **values: float) -> StepTestRig:
        """A copy whose material has some of ``youngs_modulus``, ``rayleigh_alpha``, ``rayleigh_beta`` replaced."""
        return replace(self, material=replace(self.material, **values))

    def scaled(self, stiffness: float = 1.0, damping: float = 1.0, tip_mass: float = 1.0) -> StepTestRig:
        """A copy that differs from this robot as a model error would: the part's Young's modulus × ``stiffness``,
        its Rayleigh coefficients × ``damping``, the tip's mass and inertia × ``tip_mass`` (factors > 0).

        Raises:
            InputError: a factor that is not a positive finite number.
        """
        for what, factor in (("stiffness", stiffness), ("damping", damping), ("tip_mass", tip_mass)):
            if not (factor > 0 and math.isfinite(factor)):
                raise InputError(f"{what} factor must be a positive number, got {factor}")
        m = self.material
        rig = self.with_material(youngs_modulus=m.youngs_modulus * stiffness, rayleigh_alpha=m.rayleigh_alpha * damping,
                                 rayleigh_beta=m.rayleigh_beta * damping)
        return replace(rig, tip_mass=self.tip_mass * tip_mass, tip_inertia_axis=self.tip_inertia_axis * tip_mass)


def resolve_rig_path(robot: str | Path) -> Path:
    """A robot YAML path from a path or a shipped robot name (``single_rod``).

    Raises:
        InputError: Neither an existing file nor a known robot.
    """
    from retarget.model.library import resolve_robot

    return Path(resolve_robot(robot))


def _section(spec: Mapping[str, object], nodes: NDArray[np.float64], axis: NDArray[np.float64],
             lateral: NDArray[np.float64], robot: str) -> tuple[float, float]:
    mesh = spec.get("mesh") or {}
    gen = mesh.get("generator")
    if gen == "rod":
        d = float(mesh["diameter"])
        return math.pi * d**2 / 4.0, math.pi * d**4 / 64.0
    if gen in ("bar", "plate"):
        # Straight faces: the node extents across the part are the section's exact sides.
        h_l = float(np.ptp(nodes @ lateral))
        h_n = float(np.ptp(nodes @ axis))
        return h_l * h_n, h_n * h_l**3 / 12.0
    raise RigError(robot, f"flexible part mesh {mesh!r}: the section is known only for the rod, bar and plate "
                          "generators")


def load_rig(robot: str | Path) -> StepTestRig:
    """Load a robot YAML (or shipped robot name) as a step-test rig.

    Args:
        robot: Path of ``config/<robot>.yaml`` or a robot name.

    Raises:
        RigError: Not one motor (a hinge), not one flexible part with two interfaces, or a part not perpendicular
            to the motor axis.
        InputError: Unreadable robot file.
    """
    import yaml

    from retarget.model.loader import load_robot

    path = resolve_rig_path(robot)
    label = str(robot)
    # The rig's material is the file's (physical) one: the beam surrogate is exact Euler–Bernoulli and needs no
    # mesh calibration, and a held E must be the value written in the file or in materials.yaml.
    model = load_robot(path, stiffness_calibration=False)
    if len(model.motors) != 1:
        raise RigError(label, f"needs exactly one motor, has {list(model.motors)}")
    if len(model.flexible_parts) != 1:
        raise RigError(label, f"needs exactly one flexible part, has {[p.name for p in model.flexible_parts]}")
    joint = model.joint(model.motors[0])
    if joint.kind != "hinge":
        raise RigError(label, f"motor {joint.name!r} is a {joint.kind}, not a hinge")
    axis = np.asarray(joint.axis, dtype=float)
    axis = axis / np.linalg.norm(axis)
    part = model.flexible_parts[0]
    ifaces = [i for i in part.interfaces if i.link is not None]
    if len(part.interfaces) != 2 or len(ifaces) != 2:
        raise RigError(label, f"part {part.name!r} needs two interfaces to rigid links (clamp and tip)")
    nodes = np.asarray(part.mesh.nodes, dtype=float)
    pivot = np.asarray(joint.anchor, dtype=float)
    centroids = [nodes[np.asarray(i.nodes)].mean(axis=0) for i in ifaces]

    def radius(p: NDArray[np.float64]) -> float:
        r = p - pivot
        return float(np.linalg.norm(r - (r @ axis) * axis))

    base_i, tip_i = (0, 1) if radius(centroids[0]) <= radius(centroids[1]) else (1, 0)
    base, tip_end = centroids[base_i], centroids[tip_i]
    along = tip_end - base
    length = float(np.linalg.norm(along))
    direction = along / length
    if abs(direction @ axis) > 1e-6:
        raise RigError(label, f"part {part.name!r} is not perpendicular to the motor axis "
                              f"(cos = {direction @ axis:.3g}): in-plane bending is assumed")
    lateral = np.cross(axis, direction)
    raw = yaml.safe_load(path.read_text())["retarget"]
    spec = next(f for f in raw["flexible_parts"] if str(f.get("name", "")) == part.name)
    area, second = _section(spec, nodes, axis, lateral, label)
    material_ref = spec.get("material", "spring_steel")
    material_name = material_ref if isinstance(material_ref, str) else str(material_ref.get("name", part.name))
    tip = model.link(ifaces[tip_i].link)
    hub_mass, hub_com, hub_inertia = _hub(model, joint.child, tip.name, axis)
    return StepTestRig(
        name=model.name,
        path=path,
        motor=joint.name,
        pivot=pivot,
        axis=axis,
        rod_base=base,
        rod_direction=direction,
        length=length,
        area=area,
        second_moment=second,
        material=part.material,
        material_name=material_name,
        part=part.name,
        tip_link=tip.name,
        tip_mass=float(tip.mass),
        tip_com=np.asarray(tip.com, dtype=float),
        tip_inertia_axis=float(axis @ np.asarray(tip.inertia, dtype=float) @ axis),
        gravity=np.asarray(model.gravity, dtype=float),
        motor_limits=(_limit(joint.lower, -math.inf), _limit(joint.upper, math.inf)),
        max_velocity=_servo_value(raw.get("servo"), "max_velocity", label),
        stall_torque=_servo_value(raw.get("servo"), "stall_torque", label),
        hub_mass=hub_mass,
        hub_com=hub_com,
        hub_inertia_axis=hub_inertia,
        servo=model.servo(joint.name),
    )


def _hub(model: RobotModel, first: str | None, tip: str, axis: NDArray[np.float64]
         ) -> tuple[float, NDArray[np.float64] | None, float]:
    """Mass [kg], centre of mass (3,) [m] and inertia about it around ``axis`` [kg m²] of the rigid links that
    turn with the shaft: the motor's child link and every link welded to it by fixed joints (not the tip)."""
    names = {first} if first is not None else set()
    grown = True
    while grown:
        grown = False
        for j in model.joints:
            if j.kind == "fixed" and j.parent in names and j.child is not None and j.child not in names:
                names.add(j.child)
                grown = True
    links = [link for link in model.links if link.name in names and link.name != tip and link.mass > 0.0]
    if not links:
        return 0.0, None, 0.0
    mass = float(sum(link.mass for link in links))
    com = sum(link.mass * np.asarray(link.com, dtype=float) for link in links) / mass
    inertia = 0.0
    for link in links:
        r = np.asarray(link.com, dtype=float) - com
        r_perp = r - (r @ axis) * axis
        inertia += float(axis @ np.asarray(link.inertia, dtype=float) @ axis) + link.mass * float(r_perp @ r_perp)
    return mass, com, inertia


def _limit(value: float | None, default: float) -> float:
    return default if value is None else float(value)


def _servo_value(servo: object, key: str, robot: str) -> float | None:
    """``servo.<key>`` of the robot file (SI), or None when the file does not give it."""
    if not isinstance(servo, dict) or servo.get(key) is None:
        return None
    value = float(servo[key])
    if not value > 0:
        raise RigError(robot, f"servo.{key} must be positive, got {value}")
    return value
