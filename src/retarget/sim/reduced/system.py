"""The reduced system: rigid bodies in absolute coordinates, each deformable body in reduced relative coordinates.

Layout of ``S = [U, V, λ]``: ``U = [c₀, q₀, …, z_A, z_B, …, θ_servo…, ι_servo…]`` (7 per rigid body, then r per
deformable body, then the modelled servos' coordinates of :mod:`retarget.sim.servo`), ``V = [v₀, ω₀, …, ż_A, …,
ω_servo…, e_servo…]`` (world v, body-frame ω, then ż, then the servos' rates), ``λ`` in the constraint order of the absolute
:class:`retarget.sim.system.System` it is built from (joints, motors, couplings: the same blocks, so the same
``λ`` meaning). A deformable body lives in the frame of its *reference* rigid body: the coupled body closest to
the world in the joint graph.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from retarget.errors import NotAvailableError
from retarget.model.servo import ServoParams
from retarget.sim.servo import ServoLayout, servo_layout
from retarget.sim.constraints import CouplingConstraint, InterfaceSlot, JointConstraint, RigidSlot
from retarget.sim.reduced.basis import ReducedBasis
from retarget.sim.reduced.cubature import Cubature
from retarget.sim.reduced.tensors import InertiaTensors, ReducedInterface, inertia_tensors, reduce_interface
from retarget.sim.system import RigidBody, System

__all__ = ["ReducedBody", "ReducedSystem", "build_reduced_system", "loop_couplings", "reference_bodies",
           "reference_couplings", "to_local_displacements", "with_servos", "with_stiffness_scale"]


@dataclass(frozen=True, eq=False)
class ReducedBody:
    """One deformable body in reduced relative coordinates.

    Attributes:
        name: part name.
        reference: index of its reference rigid body.
        rest_world: rest nodes ``X`` (N, 3) [m] (world, reference configuration).
        rest_local: ``X̂⁰ = X − c_ref`` (N, 3) [m] (the reference body's frame is world-parallel at rest).
        basis: the :class:`ReducedBasis`.
        tensors: the :class:`InertiaTensors`.
        cubature: reduced internal forces.
        stiffness0: ``UᵀK(0)U`` (r, r) [N/m], the rest stiffness (documentation, initial guesses, modal
            frequencies). It does not drive the damping: the engines damp with ``β K(z) ż``, the cubature tangent at
            the current z (docs/reduced.md §3).
        alpha, beta: Rayleigh damping [1/s], [s]: ``α M(U) [v_ref, ω_ref, ż]`` (the nodes' absolute velocities, as
            the absolute engine) and ``β K(z) ż`` (docs/reduced.md §3).
    """

    name: str
    reference: int
    rest_world: NDArray[np.float64]
    rest_local: NDArray[np.float64]
    basis: ReducedBasis
    tensors: InertiaTensors
    cubature: Cubature
    stiffness0: NDArray[np.float64]
    alpha: float
    beta: float

    @property
    def size(self) -> int:
        """r."""
        return self.basis.size

    def world_nodes(self, c: NDArray[np.float64], rot: NDArray[np.float64], z: NDArray[np.float64]) -> NDArray[np.float64]:
        """Node positions ``c + R(X̂⁰ + U z)`` (N, 3) [m]."""
        return c + (self.rest_local + (self.basis.modes @ z).reshape(-1, 3)) @ rot.T


@dataclass(frozen=True, eq=False)
class ReducedSystem:
    """Everything the reduced stepper needs (see the module docstring for the layout).

    Attributes:
        rigid: rigid bodies (same as the absolute system).
        bodies: reduced deformable bodies.
        constraints: the absolute system's constraint blocks.
        interfaces: per constraint block, the :class:`ReducedInterface` of a coupling (None for joints).
        motors: motor names. gravity: (3,) [m/s²].
        z_offsets: start of each body's z in U (and of ż in V minus the rigid offset difference).
        lambda_offsets: per block start in λ (len blocks + 1).
        servo: where the modelled servos' coordinates sit (after every z; :mod:`retarget.sim.servo`).
    """

    rigid: tuple[RigidBody, ...]
    bodies: tuple[ReducedBody, ...]
    constraints: tuple
    interfaces: tuple
    motors: tuple[str, ...]
    gravity: NDArray[np.float64]
    lambda_offsets: tuple[int, ...]
    servo: ServoLayout

    @property
    def n_rigid(self) -> int:
        """Number of rigid bodies."""
        return len(self.rigid)

    @property
    def n_z(self) -> int:
        """Σ r: reduced coordinates of every part."""
        return sum(b.size for b in self.bodies)

    @property
    def n_u(self) -> int:
        """Size of U."""
        return 7 * self.n_rigid + self.n_z + self.servo.size

    @property
    def n_v(self) -> int:
        """Size of V."""
        return 6 * self.n_rigid + self.n_z + self.servo.size

    @property
    def n_lambda(self) -> int:
        """Number of scalar constraints."""
        return self.lambda_offsets[-1]

    @property
    def z_slice(self) -> slice:
        """Slice of every part's z in U (and in S = [U, V, λ]), parts in order."""
        return slice(7 * self.n_rigid, 7 * self.n_rigid + self.n_z)

    def z_slice_u(self, d: int) -> slice:
        """Slice of body d's z in U."""
        o = 7 * self.n_rigid + sum(b.size for b in self.bodies[:d])
        return slice(o, o + self.bodies[d].size)

    def z_slice_v(self, d: int) -> slice:
        """Slice of body d's ż in V."""
        o = 6 * self.n_rigid + sum(b.size for b in self.bodies[:d])
        return slice(o, o + self.bodies[d].size)

    def reference_u(self) -> NDArray[np.float64]:
        """U at the reference configuration."""
        u = np.zeros(self.n_u)
        for i, b in enumerate(self.rigid):
            u[7 * i : 7 * i + 3] = b.reference_com
            u[7 * i + 3] = 1.0
        return u

    def rigid_index(self, name: str) -> int:
        """Index of rigid body ``name``."""
        for i, b in enumerate(self.rigid):
            if b.name == name:
                return i
        raise KeyError(f"no rigid body {name!r}")


def reference_bodies(system: System) -> list[int]:
    """Per deformable body, the index of the coupled rigid body closest to the world in the joint graph.

    Raises:
        NotAvailableError: a deformable body coupled to the world only (no rigid frame to ride on).
    """
    nb = len(system.rigid)
    adj: list[set[int]] = [set() for _ in range(nb)]
    roots = set()
    for blk in system.constraints:
        if isinstance(blk, JointConstraint):
            idx = [s.body for s in blk.slots]
            if len(idx) == 1:
                roots.add(idx[0])
            else:
                adj[idx[0]].add(idx[1])
                adj[idx[1]].add(idx[0])
    depth = np.full(nb, np.iinfo(np.int64).max)
    queue = deque(sorted(roots))
    for r in roots:
        depth[r] = 0
    while queue:
        i = queue.popleft()
        for j in adj[i]:
            if depth[j] > depth[i] + 1:
                depth[j] = depth[i] + 1
                queue.append(j)
    refs = []
    for d, body in enumerate(system.deformable):
        linked = [
            blk.slots[0].body
            for blk in system.constraints
            if isinstance(blk, CouplingConstraint) and blk.rigid_present and blk.slots[-1].body == d
        ]
        if not linked:
            raise NotAvailableError(f"deformable body {body.name!r} is coupled to the world only: no reference frame")
        refs.append(min(linked, key=lambda i: (depth[i], i)))
    return refs


def loop_couplings(system: System) -> list[list[int]]:
    """Per deformable body, the constraint-block indices of its couplings that close a loop of the mechanism.

    The mechanism is a multigraph: rigid bodies, deformable bodies and the world are vertices, joints and couplings
    edges. A coupling of body d (other than the one to its reference body) lies on a loop when d stays connected
    to the coupled rigid body (or the world) without it: the drummer's legs, both welded to the base and the pelvis.
    Such couplings get interface modes (:func:`retarget.sim.reduced.basis.interface_modes`).
    """
    nb = len(system.rigid)
    world = nb + len(system.deformable)
    edges: list[tuple[int, int]] = []
    for blk in system.constraints:
        if isinstance(blk, CouplingConstraint):
            edges.append((nb + blk.slots[-1].body, blk.slots[0].body if blk.rigid_present else world))
        else:
            idx = [s.body for s in blk.slots]
            edges.append((idx[0], idx[1] if len(idx) > 1 else world))
    adj: list[list[tuple[int, int]]] = [[] for _ in range(world + 1)]
    for e, (x, y) in enumerate(edges):
        adj[x].append((y, e))
        adj[y].append((x, e))

    def connected_without(skip: int) -> bool:
        a, b = edges[skip]
        seen, queue = {a}, deque([a])
        while queue:
            i = queue.popleft()
            if i == b:
                return True
            for j, e in adj[i]:
                if e != skip and j not in seen:
                    seen.add(j)
                    queue.append(j)
        return False

    held = set(reference_couplings(system))
    out: list[list[int]] = [[] for _ in system.deformable]
    for e, blk in enumerate(system.constraints):
        if isinstance(blk, CouplingConstraint) and e not in held and connected_without(e):
            out[blk.slots[-1].body].append(e)
    return out


def reference_couplings(system: System) -> list[int]:
    """Per deformable body, the constraint-block index of its (first) coupling to its reference body."""
    refs = reference_bodies(system)
    return [next(e for e, blk in enumerate(system.constraints) if isinstance(blk, CouplingConstraint)
                 and blk.rigid_present and blk.slots[-1].body == d and blk.slots[0].body == refs[d])
            for d in range(len(system.deformable))]


def to_local_displacements(
    rest_world: NDArray[np.float64],
    reference_com: NDArray[np.float64],
    c: NDArray[np.float64],
    q: NDArray[np.float64],
    u_world: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Local displacements ``û = Rᵀ(X + u − c) − X̂⁰`` (s, 3N) of world displacements (s, 3N) [m].

    Args:
        rest_world: ``X`` (N, 3). reference_com: the reference body's rest COM (3,).
        c: reference body COM per sample (s, 3). q: its quaternion per sample (s, 4).
        u_world: (s, 3N).
    """
    from retarget.sim.rotation import rotation_matrix

    n = len(rest_world)
    x = rest_world[None] + np.asarray(u_world, dtype=float).reshape(len(c), n, 3)
    rot = rotation_matrix(np.asarray(q, dtype=float))
    local = np.einsum("sji,saj->sai", rot, x - c[:, None, :])
    return (local - (rest_world - reference_com)[None]).reshape(len(c), 3 * n)


def build_reduced_system(system: System, bases: list[ReducedBasis], cubatures: list[Cubature]) -> ReducedSystem:
    """The reduced system of an absolute one, given a basis and a cubature per deformable body."""
    refs = reference_bodies(system)
    bodies = []
    for d, body in enumerate(system.deformable):
        r = refs[d]
        rest_local = body.rest_positions - system.rigid[r].reference_com
        modes = bases[d].modes
        k0 = body.elastic.rest_stiffness
        bodies.append(
            ReducedBody(
                body.name,
                r,
                body.rest_positions,
                rest_local,
                bases[d],
                inertia_tensors(body.mass_matrix, rest_local, modes),
                cubatures[d],
                modes.T @ (k0 @ modes),
                body.alpha,
                body.beta,
            )
        )
    interfaces: list[ReducedInterface | None] = []
    for blk in system.constraints:
        if isinstance(blk, CouplingConstraint):
            slot = blk.slots[-1]
            assert isinstance(slot, InterfaceSlot)
            rb = bodies[slot.body]
            interfaces.append(reduce_interface(slot.map, slot.nodes, rb.rest_local, rb.basis.modes, slot.centroid))
        else:
            assert all(isinstance(s, RigidSlot) for s in blk.slots)
            interfaces.append(None)
    nb = len(system.rigid)
    nz = sum(b.size for b in bodies)
    servo = system.servo.shifted(7 * nb + nz - (7 * nb + system.n_deformable_dofs),
                                 6 * nb + nz - (6 * nb + system.n_deformable_dofs))
    return ReducedSystem(
        system.rigid, tuple(bodies), system.constraints, tuple(interfaces), system.motors, system.gravity,
        system.lambda_offsets, servo,
    )


def with_servos(system: ReducedSystem, servos: Sequence[ServoParams]) -> ReducedSystem:
    """The same reduced model driven by other servos (one per motor, motor order).

    The basis stays the one trained with the servos of its training run: a servo's loop moves the structure's
    modes little, and the model card reports the coupled frequencies of the servos planned for.
    """
    from dataclasses import replace

    prismatic = [False] * len(system.motors)
    for blk in system.constraints:
        if isinstance(blk, JointConstraint) and blk.motor >= 0:
            prismatic[blk.motor] = blk.kind == "prismatic"
    nb = system.n_rigid
    return replace(system, servo=servo_layout(list(servos), prismatic, 7 * nb + system.n_z, 6 * nb + system.n_z))


def with_stiffness_scale(system: ReducedSystem, factor: float) -> ReducedSystem:
    """The same reduced model with every flexible part's stiffness multiplied by ``factor``.

    Young's modulus scales both Lamé parameters (ν fixed), so the cubature forces, their tangent and the Rayleigh
    term ``β K(z) ż`` all scale by ``factor`` and every vibration frequency by ``√factor``; masses, the basis and the
    couplings are unchanged (a uniformly scaled stiffness has the same mode shapes). The planner's robustness band
    uses it for models whose parts are a few per cent stiffer or softer than the nominal one.

    Raises:
        ValueError: ``factor`` not positive.
    """
    from dataclasses import replace

    if not factor > 0.0:
        raise ValueError(f"stiffness factor must be positive, got {factor}")
    if factor == 1.0:
        return system
    bodies = tuple(replace(b, cubature=replace(b.cubature, mu=b.cubature.mu * factor, lam=b.cubature.lam * factor),
                           stiffness0=b.stiffness0 * factor) for b in system.bodies)
    return replace(system, bodies=bodies)
