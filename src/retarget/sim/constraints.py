"""Constraint blocks ``C(y, θ) = 0`` with exact Jacobians ``∂C/∂y``: joints, motors and FEM couplings.

A block acts on a short *local* vector ``y`` assembled from *slots*:

- :class:`RigidSlot` contributes ``[c (3), q (4)]`` of one rigid body (centre of mass [m], quaternion);
- :class:`InterfaceSlot` contributes ``[x̄ (3), vec(A) (9)]`` of one deformable body's interface: the area-weighted
  centroid [m] and the best-fit linear map, both *linear* in the interface node positions, ``y_s = W x_iface``.

The world is not a body: a joint or coupling to the world simply has no slot for that side. Every ``evaluate``
is holomorphic in ``y`` and ``θ`` (see :mod:`retarget.sim.rotation`), so the system layer obtains the curvature
terms of the Newton Jacobian by complex steps of the analytic ``∂C/∂y``.

Reference configuration: every rigid body's frame is its centre of mass with axes parallel to the world at the
reference (zero motor angles), so a body's quaternion is its rotation since the reference and local vectors are
world vectors at the reference minus the centre of mass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.sim.rotation import (
    cross,
    polar_decomposition,
    rotate,
    rotate_jacobian,
    rotate_transpose,
    rotate_transpose_jacobian,
    rotation_matrix,
    skew,
)

__all__ = [
    "Constraint",
    "CouplingConstraint",
    "InterfaceSlot",
    "JOINT_KINDS",
    "JointConstraint",
    "RigidSlot",
    "interface_map",
    "perpendicular_axes",
    "theta_derivative",
]

JOINT_KINDS: tuple[str, ...] = ("fixed", "hinge", "universal", "ball", "prismatic")
_IDENTITY_Q = np.array([1.0, 0.0, 0.0, 0.0])


@dataclass(frozen=True)
class RigidSlot:
    """The ``[c, q]`` (7,) of rigid body ``body`` (index into the system's rigid bodies)."""

    body: int
    size: ClassVar[int] = 7


@dataclass(frozen=True, eq=False)
class InterfaceSlot:
    """``[x̄, vec(A)]`` (12,) of an interface of deformable body ``body``: ``y = W x[nodes]`` (row-major).

    Attributes:
        body: index into the system's deformable bodies.
        nodes: interface node ids (k,).
        map: ``W`` (12, 3k), acting on the node-major positions of ``nodes``.
        centroid: the reference centroid ``X̄`` (3,) [m].
    """

    body: int
    nodes: NDArray[np.int64]
    map: NDArray[np.float64]
    centroid: NDArray[np.float64]
    size: ClassVar[int] = 12


def interface_map(
    rest_positions: NDArray[np.float64], weights: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The linear map from interface node positions to ``[x̄, vec(A)]``.

    ``x̄ = Σ w̃_i x_i`` with ``w̃ = w / Σ w``; ``A = argmin Σ w_i |A D_i − d_i|² = Σ_i x_i b_iᵀ``,
    ``b_i = w̃_i G⁻¹ D_i``, ``G = Σ w̃_i D_i D_iᵀ`` (the ``x̄`` term drops out because ``Σ w̃_i D_i = 0``).

    Args:
        rest_positions: reference node positions ``X_i`` (k, 3) [m]; must not be collinear.
        weights: positive area weights (k,).

    Returns:
        ``W`` (12, 3k) and the reference centroid ``X̄`` (3,) [m].
    """
    x = np.asarray(rest_positions, dtype=float)
    w = np.asarray(weights, dtype=float)
    if x.ndim != 2 or x.shape[1] != 3 or len(w) != len(x) or len(x) < 3 or np.any(w <= 0):
        raise InputError(f"interface needs ≥ 3 nodes with positive weights, got {x.shape} and {w.shape}")
    wn = w / w.sum()
    centroid = wn @ x
    d = x - centroid
    g = (d * wn[:, None]).T @ d
    # A planar interface (an end face) leaves G singular: the fit cannot see the normal direction. The
    # minimum-norm fit (pseudo-inverse) then gives A = R P at rest and under rigid motions (P the in-plane
    # projector), whose polar rotation is still R and whose derivative stays defined (tr(S) I − S ≻ 0).
    eig, vec = np.linalg.eigh(g)
    if eig[1] <= 1e-12 * eig[2]:
        raise InputError("interface nodes are collinear: orientation is undefined")
    keep = eig > 1e-10 * eig[2]
    ginv = (vec[:, keep] / eig[keep]) @ vec[:, keep].T
    k = len(x)
    wmat = np.zeros((12, 3 * k))
    for j in range(3):
        wmat[j, j::3] = wn
    b = (ginv @ d.T * wn).T  # (k, 3): b_i
    for r in range(3):
        for c in range(3):
            wmat[3 + 3 * r + c, r::3] = b[:, c]
    return wmat, centroid


def perpendicular_axes(n: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Two unit vectors ``e1, e2`` with ``(e1, e2, n)`` right-handed orthonormal (``e2 = n × e1``)."""
    n = n / np.linalg.norm(n)
    trial = np.eye(3)[int(np.argmin(np.abs(n)))]
    e1 = trial - (trial @ n) * n
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(n, e1)


@dataclass(frozen=True, eq=False)
class Constraint:
    """A block of ``size`` scalar constraints over the local vector of its ``slots``.

    Attributes:
        name: for messages and results.
        slots: where ``y`` comes from.
        size: number of scalar constraints.
        motor: index of the motor whose value ``θ`` enters ``C``, or -1.
    """

    name: str
    slots: tuple[RigidSlot | InterfaceSlot, ...]
    size: int
    motor: int = -1

    def evaluate(self, y: NDArray, theta: complex | float = 0.0) -> tuple[NDArray, NDArray]:
        """``C`` (size,) and ``∂C/∂y`` (size, len(y)); holomorphic in ``y`` and ``θ``."""
        raise NotImplementedError


def _pose(y: NDArray, side: int, present: tuple[bool, bool]) -> tuple[NDArray, NDArray]:
    """(c, q) of joint side 0 (parent) or 1 (child) from ``y``; world = origin, identity."""
    if not present[side]:
        return np.zeros(3, dtype=y.dtype), _IDENTITY_Q.astype(y.dtype)
    off = 7 if (side == 1 and present[0]) else 0
    return y[..., off : off + 3], y[..., off + 3 : off + 7]


def _present_columns(present: tuple[bool, bool]) -> NDArray[np.int64]:
    """The columns of a joint's 14 (``[c_a, q_a, c_b, q_b]``) that belong to its bodies (a world side has none)."""
    return np.concatenate([np.arange(7 * k, 7 * k + 7) for k in range(2) if present[k]])


@dataclass(frozen=True, eq=False)
class JointConstraint(Constraint):
    """A joint between a parent (``a``) and a child (``b``) rigid body, either possibly the world.

    Geometry is in body-local vectors (see the module docstring). ``kind`` is one of :data:`JOINT_KINDS`; a
    motorized hinge prescribes the child's rotation about the axis relative to the parent, ``φ = θ``; a motorized
    prismatic joint prescribes the displacement along the axis, ``s = θ`` [m].

    Attributes:
        kind: joint kind.
        present: whether parent and child are bodies (False = world).
        anchor_a, anchor_b: the joint point in each body's local frame (3,) [m].
        axes_a, axes_b: orthonormal joint frames ``(e1, e2, n)`` as rows (3, 3) in each local frame; the hinge or
            slider axis is ``n``; a universal joint's axes are ``e1`` of the parent and ``e2`` of the child.
    """

    kind: str = "fixed"
    present: tuple[bool, bool] = (True, True)
    anchor_a: NDArray[np.float64] = field(default_factory=lambda: np.zeros(3))
    anchor_b: NDArray[np.float64] = field(default_factory=lambda: np.zeros(3))
    axes_a: NDArray[np.float64] = field(default_factory=lambda: np.eye(3))
    axes_b: NDArray[np.float64] = field(default_factory=lambda: np.eye(3))

    @staticmethod
    def rows(kind: str, motorized: bool) -> int:
        """Number of scalar constraints of a joint kind."""
        base = {"fixed": 6, "hinge": 5, "universal": 4, "ball": 3, "prismatic": 5}[kind]
        return base + int(motorized)

    def evaluate(self, y: NDArray, theta: NDArray | complex | float = 0.0) -> tuple[NDArray, NDArray]:
        dt = np.result_type(y, theta)
        batch = y.shape[:-1]
        ca, qa = _pose(y, 0, self.present)
        cb, qb = _pose(y, 1, self.present)
        ca, qa, cb, qb = (np.broadcast_to(x, batch + x.shape[-1:]) for x in (ca, qa, cb, qb))
        pa = ca + rotate(qa, self.anchor_a)
        pb = cb + rotate(qb, self.anchor_b)
        jra = rotate_jacobian(qa, self.anchor_a)
        jrb = rotate_jacobian(qb, self.anchor_b)
        da = rotate(qa[..., None, :], self.axes_a)  # (..., 3 axes, 3)
        db = rotate(qb[..., None, :], self.axes_b)
        jda = rotate_jacobian(qa[..., None, :], self.axes_a)  # (..., 3 axes, 3, 4)
        jdb = rotate_jacobian(qb[..., None, :], self.axes_b)
        z3 = np.zeros(batch + (3,), dtype=dt)
        eye = np.broadcast_to(np.eye(3, dtype=dt), batch + (3, 3))
        rows_c: list[NDArray] = []  # each (..., k)
        rows_j: list[NDArray] = []  # each (..., k, 14) over [ca, qa, cb, qb]

        def vdot(a: NDArray, b: NDArray) -> NDArray:
            return np.einsum("...i,...i->...", a, b)

        def vmat(a: NDArray, m: NDArray) -> NDArray:
            return np.einsum("...i,...ij->...j", a, m)

        def point() -> None:
            rows_c.append(pb - pa)
            rows_j.append(np.concatenate([-eye, -jra, eye, jrb], axis=-1))

        def dot(i: int, j: int) -> None:
            rows_c.append(vdot(da[..., i, :], db[..., j, :])[..., None])
            row = np.concatenate([z3, vmat(db[..., j, :], jda[..., i, :, :]), z3, vmat(da[..., i, :], jdb[..., j, :, :])], -1)
            rows_j.append(row[..., None, :])

        def along(i: int, offset: NDArray | complex | float = 0.0) -> None:
            gap = pb - pa
            di = da[..., i, :]
            rows_c.append((vdot(gap, di) - offset)[..., None])
            row = np.concatenate(
                [-di, -vmat(di, jra) + vmat(gap, jda[..., i, :, :]), di, vmat(di, jrb)], axis=-1
            )
            rows_j.append(row[..., None, :])

        kind = self.kind
        if kind in ("fixed", "prismatic"):
            dot(0, 1), dot(1, 2), dot(2, 0)
        if kind in ("fixed", "hinge", "universal", "ball"):
            point()
        if kind == "hinge":
            dot(0, 2), dot(1, 2)
        elif kind == "universal":
            dot(0, 1)
        elif kind == "prismatic":
            along(0), along(1)
        if self.motor >= 0:
            th = np.broadcast_to(np.asarray(theta, dtype=dt), batch)
            if kind == "hinge":
                # sin(θ − φ) with cos φ = a1·b1, sin φ = a2·b1: zero at φ = θ, slope −1.
                s, c = np.sin(th), np.cos(th)
                b1 = db[..., 0, :]
                rows_c.append((s * vdot(da[..., 0, :], b1) - c * vdot(da[..., 1, :], b1))[..., None])
                ga = s[..., None] * vmat(b1, jda[..., 0, :, :]) - c[..., None] * vmat(b1, jda[..., 1, :, :])
                gb = vmat(s[..., None] * da[..., 0, :] - c[..., None] * da[..., 1, :], jdb[..., 0, :, :])
                rows_j.append(np.concatenate([z3, ga, z3, gb], axis=-1)[..., None, :])
            elif kind == "prismatic":
                along(2, th)
            else:
                raise InputError(f"joint {self.name!r}: only hinges and prismatic joints can be motors")
        cvec = np.concatenate(rows_c, axis=-1).astype(dt)
        jac = np.concatenate(rows_j, axis=-2).astype(dt)
        return cvec, jac[..., _present_columns(self.present)]


@dataclass(frozen=True, eq=False)
class CouplingConstraint(Constraint):
    """Couples a deformable body's interface to a rigid body (or the world): 3 position + 3 orientation rows.

    Position: ``R₀ᵀ(X̄ − c₀) − R(q)ᵀ(x̄ − c) = 0``. Orientation: with ``R_p = PD(A)`` (polar rotation of the
    best-fit map) and ``F = R(q) R₀ᵀ``: ``(R_p e_x)·(F e_y) = (R_p e_y)·(F e_z) = (R_p e_z)·(F e_x) = 0``.
    ``R₀ = I`` by the reference convention, ``c₀`` is the body's reference centre of mass.

    Attributes:
        rigid_present: False when the interface is welded to the world.
        rigid_reference: ``c₀`` (3,) [m] (world: the origin).
    """

    rigid_present: bool = True
    rigid_reference: NDArray[np.float64] = field(default_factory=lambda: np.zeros(3))

    def evaluate(self, y: NDArray, theta: NDArray | complex | float = 0.0) -> tuple[NDArray, NDArray]:
        dt = y.dtype
        batch = y.shape[:-1]
        if self.rigid_present:
            c, q, yi = y[..., :3], y[..., 3:7], y[..., 7:]
        else:
            c = np.zeros(batch + (3,), dt)
            q = np.broadcast_to(_IDENTITY_Q.astype(dt), batch + (4,))
            yi = y
        xbar = yi[..., :3]
        a = yi[..., 3:].reshape(batch + (3, 3))
        slot = self.slots[-1]
        assert isinstance(slot, InterfaceSlot)
        ref = slot.centroid - self.rigid_reference
        jac = np.zeros(batch + (6, 19), dtype=dt)
        gap = xbar - c
        cpos = ref - rotate_transpose(q, gap)
        rt = np.swapaxes(rotation_matrix(q), -1, -2)
        jac[..., :3, 0:3] = rt
        jac[..., :3, 3:7] = -rotate_transpose_jacobian(q, gap)
        jac[..., :3, 7:10] = -rt
        rp, s = polar_decomposition(a)
        minv = np.linalg.inv(np.trace(s, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) - s)
        pairs = np.array([[0, 1], [1, 2], [2, 0]])
        eye = np.eye(3)
        ei, ej = eye[pairs[:, 0]], eye[pairs[:, 1]]  # (3, 3)
        qk = q[..., None, :]
        fj = rotate(qk, ej)  # (..., 3 rows, 3)
        rpi = np.swapaxes(rp[..., :, pairs[:, 0]], -1, -2)  # (..., 3 rows, 3): R_p e_i
        corient = np.einsum("...ki,...ki->...k", rpi, fj)
        jac[..., 3:, 3:7] = np.einsum("...ki,...kij->...kj", rpi, rotate_jacobian(qk, ej))
        # dC = f_jᵀ dR_p e_i with dR_p = R_p [ω]×, ω = M⁻¹ 2 axial(R_pᵀ dA) ⇒ ∂C/∂A = R_p [z]×,
        # z = M⁻¹ (e_i × R_pᵀ f_j) (M symmetric).
        rtf = np.einsum("...ji,...kj->...ki", rp, fj)  # R_pᵀ f_j, (..., 3, 3)
        z = np.einsum("...ij,...kj->...ki", minv, cross(ei, rtf))
        dca = rp[..., None, :, :] @ skew(z)  # (..., 3 rows, 3, 3)
        jac[..., 3:, 10:19] = dca.reshape(batch + (3, 9))
        cvec = np.concatenate([cpos, corient], axis=-1)
        if not self.rigid_present:
            jac = jac[..., 7:]
        return cvec, jac


def motor_theta_terms(block: JointConstraint, y: NDArray[np.float64], theta: float
                      ) -> tuple[float, NDArray[np.float64], float]:
    """The motor row's θ-derivatives of a motorized joint block at one state ``y`` (the block's U entries):
    ``(∂C_m/∂θ, ∂²C_m/∂θ∂y, ∂²C_m/∂θ²)``, the middle one over the block's columns as :meth:`JointConstraint.evaluate`
    orders them. Only the motor row (the block's last) depends on θ, so ``λᵀ ∂C_y/∂θ`` of the whole block is the
    motor row's λ times the middle term.

    Hinge: ``C_m = sin θ a₁·b₁ − cos θ a₂·b₁`` (``aᵢ = R(q_a) eᵢ``, ``b₁ = R(q_b) e₁`` in world axes); its θ-derivatives
    are the same form rotated by 90° and 180° in θ. Prismatic: ``C_m = gap·n − θ``: ``−1``, 0, 0.
    """
    assert block.motor >= 0
    ncols = 7 * sum(block.present)
    if block.kind == "prismatic":
        return -1.0, np.zeros(ncols), 0.0
    _, qa = _pose(y, 0, block.present)
    _, qb = _pose(y, 1, block.present)
    a1, a2 = rotate(qa, block.axes_a[0]), rotate(qa, block.axes_a[1])
    b1 = rotate(qb, block.axes_b[0])
    s, c = math.sin(theta), math.cos(theta)
    a1b1, a2b1 = float(a1 @ b1), float(a2 @ b1)
    row = np.zeros(14)
    row[3:7] = b1 @ (c * rotate_jacobian(qa, block.axes_a[0]) + s * rotate_jacobian(qa, block.axes_a[1]))
    row[10:14] = (c * a1 + s * a2) @ rotate_jacobian(qb, block.axes_b[0])
    return c * a1b1 + s * a2b1, row[_present_columns(block.present)], -s * a1b1 + c * a2b1


def theta_derivative(block: Constraint, y: NDArray, theta: NDArray | complex | float) -> NDArray:
    """``∂C/∂θ`` (..., size) of a motorized joint block (zero except the motor row); holomorphic in θ."""
    assert isinstance(block, JointConstraint) and block.motor >= 0
    dt = np.result_type(y, theta)
    batch = y.shape[:-1]
    out = np.zeros(batch + (block.size,), dtype=dt)
    if block.kind == "prismatic":
        out[..., -1] = -1.0
        return out
    _, qa = _pose(y, 0, block.present)
    _, qb = _pose(y, 1, block.present)
    b1 = rotate(qb, block.axes_b[0])
    th = np.asarray(theta, dtype=dt)
    a1b1 = np.einsum("...i,...i->...", rotate(qa, block.axes_a[0]), b1)
    a2b1 = np.einsum("...i,...i->...", rotate(qa, block.axes_a[1]), b1)
    out[..., -1] = np.cos(th) * a1b1 + np.sin(th) * a2b1
    return out
