"""The simulated system: rigid bodies, deformable bodies, constraint blocks and the layout of ``S = [U, V, λ]``.

Layout (fixed at build time): ``U = [c₀, q₀, c₁, q₁, …, u_A, u_B, …, θ_servo…, ι_servo…]`` (7 per rigid body,
then 3N per deformable body, node-major, then the modelled servos' shaft angles and integral states,
:mod:`retarget.sim.servo`), ``V = [v₀, ω₀, …, u̇_A, …, ω_servo…, e_servo…]`` (6 per rigid body: world linear
velocity [m/s], *body-frame* angular velocity [rad/s]; then 3N; then the servos' rates), ``λ`` one entry per scalar
constraint, in block order. Body-frame ``ω`` keeps each rigid mass matrix constant, ``diag(m I, I_body)``.
Everything after the rigid bodies pairs one to one between U and V (``U̇ = V`` there).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from retarget.model.servo import IDEAL, SERVO_MODELS, ServoParams
from retarget.sim.servo import ServoLayout, servo_layout
from retarget.sim.constraints import (
    Constraint,
    CouplingConstraint,
    InterfaceSlot,
    JointConstraint,
    RigidSlot,
    interface_map,
    perpendicular_axes,
)

if TYPE_CHECKING:
    from retarget.fem.elastic import ElasticBody
    from retarget.model.robot import Joint, Link, RobotModel

__all__ = ["DeformableBody", "RigidBody", "System", "build_system", "with_servos"]


@dataclass(frozen=True, eq=False)
class RigidBody:
    """A rigid body; its frame is its centre of mass with world-parallel axes at the reference.

    Attributes:
        name: link name.
        mass: [kg].
        inertia: about the centre of mass in the body frame (3, 3) [kg m²].
        reference_com: (3,) [m].
        frame_offset: link frame origin minus centre of mass at the reference (3,) [m].
        frame_rotation: link frame orientation at the reference (3, 3).
    """

    name: str
    mass: float
    inertia: NDArray[np.float64]
    reference_com: NDArray[np.float64]
    frame_offset: NDArray[np.float64]
    frame_rotation: NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class DeformableBody:
    """A FEM body in world coordinates (displacements ``u`` (3N,) [m] from ``rest_positions``).

    Attributes:
        name: part name.
        elastic: the :class:`retarget.fem.elastic.ElasticBody` (forces, stiffness).
        rest_positions: (N, 3) [m].
        mass_matrix: consistent mass, csr (3N, 3N) [kg].
        gravity_force: (3N,) [N].
        alpha: Rayleigh mass damping [1/s].
        beta: Rayleigh stiffness damping [s].
    """

    name: str
    elastic: ElasticBody
    rest_positions: NDArray[np.float64]
    mass_matrix: sp.csr_matrix
    gravity_force: NDArray[np.float64]
    alpha: float
    beta: float

    @property
    def n_dofs(self) -> int:
        """3N."""
        return 3 * len(self.rest_positions)


@dataclass(frozen=True, eq=False)
class System:
    """Everything the integrator needs, immutable.

    Attributes:
        rigid: rigid bodies.
        deformable: deformable bodies.
        constraints: constraint blocks (joints, motors, couplings).
        motors: motor joint names; ``θ`` vectors follow this order.
        gravity: (3,) [m/s²].
        slot_u, slot_v: per constraint, per slot, the global indices into U and V.
        u_offsets, v_offsets: start of each deformable body in U and V.
        lambda_offsets: start of each block in λ (len = blocks + 1).
        servo: where the modelled servos' coordinates sit (:class:`retarget.sim.servo.ServoLayout`; empty when
            every motor is an ideal position source).
    """

    rigid: tuple[RigidBody, ...]
    deformable: tuple[DeformableBody, ...]
    constraints: tuple[Constraint, ...]
    motors: tuple[str, ...]
    gravity: NDArray[np.float64]
    slot_u: tuple[tuple[NDArray[np.int64], ...], ...]
    slot_v: tuple[tuple[NDArray[np.int64], ...], ...]
    u_offsets: tuple[int, ...]
    v_offsets: tuple[int, ...]
    lambda_offsets: tuple[int, ...]
    servo: ServoLayout

    @property
    def n_u(self) -> int:
        """Size of U."""
        return 7 * len(self.rigid) + sum(d.n_dofs for d in self.deformable) + self.servo.size

    @property
    def n_v(self) -> int:
        """Size of V."""
        return 6 * len(self.rigid) + sum(d.n_dofs for d in self.deformable) + self.servo.size

    @property
    def n_lambda(self) -> int:
        """Number of scalar constraints."""
        return self.lambda_offsets[-1]

    @property
    def n_s(self) -> int:
        """Size of S = [U, V, λ]."""
        return self.n_u + self.n_v + self.n_lambda

    @property
    def n_deformable_dofs(self) -> int:
        """Σ 3N over deformable bodies."""
        return sum(d.n_dofs for d in self.deformable)

    def rigid_index(self, name: str) -> int:
        """Index of the rigid body called ``name``."""
        for i, b in enumerate(self.rigid):
            if b.name == name:
                return i
        raise KeyError(f"no rigid body {name!r}; bodies: {[b.name for b in self.rigid]}")

    def deformable_index(self, name: str) -> int:
        """Index of the deformable body called ``name``."""
        for i, b in enumerate(self.deformable):
            if b.name == name:
                return i
        raise KeyError(f"no deformable body {name!r}")

    def reference_u(self) -> NDArray[np.float64]:
        """U at the reference configuration (c = reference COM, q = identity, u = 0)."""
        u = np.zeros(self.n_u)
        for i, b in enumerate(self.rigid):
            u[7 * i : 7 * i + 3] = b.reference_com
            u[7 * i + 3] = 1.0
        return u

    def split_s(self, s: NDArray[np.float64]) -> tuple[NDArray, NDArray, NDArray]:
        """Views ``(U, V, λ)`` of ``S``."""
        return s[: self.n_u], s[self.n_u : self.n_u + self.n_v], s[self.n_u + self.n_v :]


def _joint_block(joint: Joint, index: dict[str, int], links: dict[str, Link], motor: int) -> JointConstraint:
    present = (joint.parent is not None, joint.child is not None)
    slots = tuple(RigidSlot(index[n]) for n in (joint.parent, joint.child) if n is not None)

    def local(name: str | None) -> NDArray[np.float64]:
        return joint.anchor - (links[name].com if name is not None else 0.0)

    e1, e2 = perpendicular_axes(joint.axis)
    frame = np.array([e1, e2, joint.axis])
    axes_a = axes_b = frame
    if joint.kind == "universal":
        # Row 0 of the parent frame and row 1 of the child frame carry the two cross axes.
        n2 = joint.axis2
        axes_a = np.array([joint.axis, n2, np.cross(joint.axis, n2)])
        axes_b = axes_a
    kind_rows = JointConstraint.rows(joint.kind, motor >= 0)
    return JointConstraint(
        name=joint.name,
        slots=slots,
        size=kind_rows,
        motor=motor,
        kind=joint.kind,
        present=present,
        anchor_a=local(joint.parent),
        anchor_b=local(joint.child),
        axes_a=axes_a,
        axes_b=axes_b,
    )


def build_system(model: RobotModel) -> System:
    """Build the simulated :class:`System` from a :class:`retarget.model.RobotModel`.

    Flexible parts become :class:`DeformableBody` objects (``retarget.fem.elastic.ElasticBody``), every
    interface a :class:`CouplingConstraint` with area weights from the mesh faces.
    """
    from retarget.fem.elastic import ElasticBody

    links = {link.name: link for link in model.links}
    index = {link.name: i for i, link in enumerate(model.links)}
    rigid = tuple(
        RigidBody(
            link.name,
            link.mass,
            link.inertia,
            link.com,
            link.frame_position - link.com,
            link.frame_rotation,
        )
        for link in model.links
    )
    gravity = np.asarray(model.gravity, dtype=float)
    deformable = []
    for part in model.flexible_parts:
        body = ElasticBody(part.mesh, part.material)
        deformable.append(
            DeformableBody(
                part.name,
                body,
                np.asarray(part.mesh.nodes, dtype=float),
                body.mass_matrix().tocsr(),
                np.asarray(body.gravity_forces(gravity), dtype=float),
                float(part.material.rayleigh_alpha),
                float(part.material.rayleigh_beta),
            )
        )
    blocks: list[Constraint] = []
    motors = tuple(model.motors)
    for joint in model.joints:
        motor = motors.index(joint.name) if joint.name in motors else -1
        blocks.append(_joint_block(joint, index, links, motor))
    for d, (part, body) in enumerate(zip(model.flexible_parts, deformable)):
        for itf in part.interfaces:
            weights = np.asarray(body.elastic.face_area_weights(itf.nodes), dtype=float)
            # Nodes on no covered boundary face (interior nodes of a region) carry no area: leave them out.
            nodes = np.asarray(itf.nodes)[weights > 0]
            wmat, centroid = interface_map(body.rest_positions[nodes], weights[weights > 0])
            islot = InterfaceSlot(d, nodes, wmat, centroid)
            present = itf.link is not None
            slots: tuple = (RigidSlot(index[itf.link]), islot) if present else (islot,)
            blocks.append(
                CouplingConstraint(
                    name=f"{part.name}@{itf.link or 'world'}",
                    slots=slots,
                    size=6,
                    rigid_present=present,
                    rigid_reference=links[itf.link].com if present else np.zeros(3),
                )
            )
    joints = {j.name: j for j in model.joints}
    servos = model.servo_list if hasattr(model, "servo_list") else ()
    prismatic = [joints[m].kind == "prismatic" for m in motors]
    return assemble_system(rigid, tuple(deformable), tuple(blocks), motors, gravity, servos, prismatic)


def assemble_system(
    rigid: tuple[RigidBody, ...],
    deformable: tuple[DeformableBody, ...],
    constraints: tuple[Constraint, ...],
    motors: tuple[str, ...],
    gravity: NDArray[np.float64],
    servos: Sequence[ServoParams] = (),
    prismatic: Sequence[bool] = (),
) -> System:
    """Compute the layout (offsets, slot index arrays, servo coordinates) and return the :class:`System`.

    ``servos``: per motor its :class:`retarget.model.servo.ServoParams` (empty: every motor ideal);
    ``prismatic``: per motor whether it slides (a modelled servo must be rotary).
    """
    nb = len(rigid)
    u_off, v_off = [], []
    ou, ov = 7 * nb, 6 * nb
    for d in deformable:
        u_off.append(ou)
        v_off.append(ov)
        ou += d.n_dofs
        ov += d.n_dofs
    slot_u, slot_v = [], []
    for blk in constraints:
        su, sv = [], []
        for s in blk.slots:
            if isinstance(s, RigidSlot):
                su.append(7 * s.body + np.arange(7))
                sv.append(6 * s.body + np.arange(6))
            else:
                dofs = (3 * s.nodes[:, None] + np.arange(3)).ravel()
                su.append(u_off[s.body] + dofs)
                sv.append(v_off[s.body] + dofs)
        slot_u.append(tuple(su))
        slot_v.append(tuple(sv))
    lam = np.concatenate([[0], np.cumsum([b.size for b in constraints], dtype=np.int64)]).astype(int)
    servo_list = list(servos) or [SERVO_MODELS[IDEAL]] * len(motors)
    try:
        layout = servo_layout(servo_list, list(prismatic) or [False] * len(motors), ou, ov)
    except ValueError as exc:
        raise ValueError(f"{exc}; motors: {list(motors)}") from exc
    return System(
        rigid,
        deformable,
        constraints,
        motors,
        np.asarray(gravity, dtype=float),
        tuple(slot_u),
        tuple(slot_v),
        tuple(u_off),
        tuple(v_off),
        tuple(int(x) for x in lam),
        layout,
    )


def with_servos(system: System, servos: Sequence[ServoParams]) -> System:
    """The same system driven by other servos (one :class:`retarget.model.servo.ServoParams` per motor)."""
    from dataclasses import replace

    prismatic = [False] * len(system.motors)
    for blk in system.constraints:
        if isinstance(blk, JointConstraint) and blk.motor >= 0:
            prismatic[blk.motor] = blk.kind == "prismatic"
    start_u = 7 * len(system.rigid) + system.n_deformable_dofs
    start_v = 6 * len(system.rigid) + system.n_deformable_dofs
    return replace(system, servo=servo_layout(list(servos), prismatic, start_u, start_v))
