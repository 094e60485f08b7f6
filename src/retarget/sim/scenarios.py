"""Ready-made robots for validation and tests: a cantilever rod with a tip mass, a four-bar linkage, a rod
between two motors (a kinematic loop through a deformable body), a rod with a tip mass on one motor."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.model.robot import RobotBuilder, RobotModel

__all__ = [
    "CantileverSpec",
    "build_cantilever",
    "build_fourbar",
    "build_rod_on_motor",
    "box_inertia",
    "build_two_motor_rod",
    "rod_axis_rotation",
    "sphere_inertia",
]


def sphere_inertia(mass: float, radius: float) -> NDArray[np.float64]:
    """Inertia of a solid sphere about its centre (3, 3) [kg m²]."""
    return 0.4 * mass * radius**2 * np.eye(3)


def box_inertia(mass: float, size: tuple[float, float, float]) -> NDArray[np.float64]:
    """Inertia of a solid box about its centre (3, 3) [kg m²]."""
    a, b, c = size
    return mass / 12.0 * np.diag([b * b + c * c, a * a + c * c, a * a + b * b])


def rod_axis_rotation(orientation: str) -> NDArray[np.float64]:
    """Rotation taking a generated rod's +z axis to the world: ``horizontal`` → +x, ``vertical`` → +z."""
    if orientation == "vertical":
        return np.eye(3)
    if orientation == "horizontal":
        return np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])
    raise InputError(f"orientation must be 'horizontal' or 'vertical', got {orientation!r}")


@dataclass(frozen=True)
class CantileverSpec:
    """A round rod clamped to a rigid base (welded to the world) with a compact tip mass at its free end.

    Attributes:
        length, diameter: [m].
        tip_mass: [kg] (0: no tip body).
        youngs_modulus: [Pa]; density [kg/m³]; poisson: [-].
        orientation: ``horizontal`` (rod along +x) or ``vertical`` (rod along +z, tip up).
        gravity: magnitude [m/s²] along −z.
        n_axial, n_around: mesh resolution (None: FEM defaults).
        tip_radius: radius of the tip sphere [m] (rotary inertia 2/5 m r²).
        rayleigh_alpha, rayleigh_beta: damping ([1/s], [s]).
    """

    length: float
    diameter: float
    tip_mass: float = 0.0
    youngs_modulus: float = 200e9
    density: float = 7850.0
    poisson: float = 0.29
    orientation: str = "horizontal"
    gravity: float = 9.81
    n_axial: int | None = None
    n_around: int | None = None
    tip_radius: float = 0.005
    rayleigh_alpha: float = 0.0
    rayleigh_beta: float = 0.0


def build_cantilever(spec: CantileverSpec) -> tuple[RobotModel, NDArray[np.float64]]:
    """The cantilever robot and the rod's world axis (3,)."""
    from retarget.fem.material import Material
    from retarget.fem.mesh import TetMesh, rod_mesh

    if not (spec.length > 0 and spec.diameter > 0 and spec.tip_mass >= 0):
        raise InputError("cantilever: length and diameter must be positive, tip mass non-negative")
    rot = rod_axis_rotation(spec.orientation)
    mesh = rod_mesh(spec.length, spec.diameter, spec.n_axial, spec.n_around)
    world_mesh = TetMesh(mesh.nodes @ rot.T, mesh.tets)
    axis = rot[:, 2]
    material = Material(
        "cantilever_steel", spec.youngs_modulus, spec.poisson, spec.density, spec.rayleigh_alpha, spec.rayleigh_beta
    )
    b = RobotBuilder("cantilever", gravity=(0.0, 0.0, -spec.gravity))
    base_size = 2.0 * spec.diameter
    base_com = -0.5 * base_size * axis
    b.add_link("base", 0.05, base_com, box_inertia(0.05, (base_size,) * 3))
    b.add_joint("weld", "fixed", None, "base", base_com)
    start = mesh.nodes_on_plane(2, 0.0)
    interfaces: list[tuple[str | None, NDArray[np.int64]]] = [("base", start)]
    if spec.tip_mass > 0:
        tip = spec.length * axis
        b.add_link("tip", spec.tip_mass, tip, sphere_inertia(spec.tip_mass, spec.tip_radius))
        interfaces.append(("tip", mesh.nodes_on_plane(2, spec.length)))
    b.add_flexible_part("rod", world_mesh, material, interfaces)
    return b.build(), axis


def build_fourbar(
    crank: float = 0.05, coupler: float = 0.12, rocker: float = 0.10, ground: float = 0.10, mass: float = 0.05
) -> RobotModel:
    """A planar (x-y plane) four-bar of rigid links: ground hinge (motor) – crank – hinge – coupler – universal –
    rocker – ball – ground. Two hinges, a universal and a ball joint (like the rapper's arm) make the spatial
    mechanism exactly constrained (18 rigid DOF, 17 joint + 1 motor constraints), with no redundant rows.

    Returns a model whose single motor is ``crank_motor`` [rad].
    """
    a = np.array([0.0, 0.0, 0.0])
    d = np.array([ground, 0.0, 0.0])
    # Reference pose: crank straight up; coupler end from the circle intersection.
    bp = a + np.array([0.0, crank, 0.0])
    dist = np.linalg.norm(d - bp)
    if not (abs(coupler - rocker) < dist < coupler + rocker):
        raise InputError("four-bar: link lengths do not close the loop")
    ex = (d - bp) / dist
    along = (coupler**2 - rocker**2 + dist**2) / (2 * dist)
    height = np.sqrt(coupler**2 - along**2)
    ey = np.array([-ex[1], ex[0], 0.0])
    cp = bp + along * ex + height * ey
    z = np.array([0.0, 0.0, 1.0])
    b = RobotBuilder("fourbar", gravity=(0.0, 0.0, -9.81))
    for name, p0, p1 in (("crank", a, bp), ("coupler", bp, cp), ("rocker", cp, d)):
        length = float(np.linalg.norm(p1 - p0))
        inertia = mass * length**2 / 12.0 * np.eye(3) + 1e-6 * np.eye(3)
        b.add_link(name, mass, 0.5 * (p0 + p1), inertia)
    b.add_joint("crank_motor", "hinge", None, "crank", a, z, motor=True)
    b.add_joint("elbow", "hinge", "crank", "coupler", bp, z)
    link_dir = (cp - bp) / np.linalg.norm(cp - bp)
    b.add_joint("wrist", "universal", "coupler", "rocker", cp, z, axis2=np.cross(z, np.cross(link_dir, z)))
    b.add_joint("pivot", "ball", "rocker", None, d)
    return b.build()


def build_two_motor_rod(
    length: float = 0.3, diameter: float = 0.004, separation: float = 0.3, n_axial: int | None = 8, n_around: int | None = 6
) -> RobotModel:
    """A horizontal rod whose ends are welded to two arms, each on its own motor (hinges about z at x = 0 and
    x = ``separation``): a kinematic loop closed through the deformable body. Motors: ``m1``, ``m2`` [rad]."""
    from retarget.fem.material import MATERIALS
    from retarget.fem.mesh import TetMesh, rod_mesh

    mesh = rod_mesh(length, diameter, n_axial, n_around)
    rot = rod_axis_rotation("horizontal")
    offset = np.array([0.5 * (separation - length), 0.05, 0.0])
    world = TetMesh(mesh.nodes @ rot.T + offset, mesh.tets)
    b = RobotBuilder("two_motor_rod", gravity=(0.0, 0.0, -9.81))
    arm_mass = 0.03
    for name, x, end in (("arm1", 0.0, 0.0), ("arm2", separation, length)):
        com = np.array([x, 0.025, 0.0])
        b.add_link(name, arm_mass, com, box_inertia(arm_mass, (0.01, 0.05, 0.01)))
        b.add_joint(f"{'m1' if name == 'arm1' else 'm2'}", "hinge", None, name, (x, 0.0, 0.0), (0, 0, 1), motor=True)
    b.add_flexible_part(
        "rod",
        world,
        MATERIALS["spring_steel"],
        [("arm1", mesh.nodes_on_plane(2, 0.0)), ("arm2", mesh.nodes_on_plane(2, length))],
    )
    return b.build()


def build_rod_on_motor(length: float = 0.2, diameter: float = 0.004, tip_mass: float = 0.05) -> RobotModel:
    """A vertical spring-steel rod (4 layers × 6 around) clamped on a motor horn (hinge ``m`` about y) with a tip
    mass ``tip_mass`` [kg] (tracked)."""
    from retarget.fem.material import MATERIALS
    from retarget.fem.mesh import rod_mesh

    mesh = rod_mesh(length, diameter, 4, 6)
    b = RobotBuilder("rod_on_motor", gravity=(0.0, 0.0, -9.81))
    b.add_link("horn", 0.02, (0.0, 0.0, -0.005), box_inertia(0.02, (0.01, 0.01, 0.01)))
    b.add_joint("m", "hinge", None, "horn", (0.0, 0.0, -0.005), (0.0, 1.0, 0.0), motor=True, lower=-1.0, upper=1.0)
    b.add_link("tip", tip_mass, (0.0, 0.0, length), sphere_inertia(tip_mass, 0.01))
    b.add_flexible_part("rod", mesh, MATERIALS["spring_steel"],
                        [("horn", mesh.nodes_on_plane(2, 0.0)), ("tip", mesh.nodes_on_plane(2, length))])
    b.track("tip")
    return b.build()
