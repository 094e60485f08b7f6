"""The compiled reduced engine: BDF residual, exact Jacobian, condensed chord Newton and the time loop in numba.

Same DAE, unknowns, BDF coefficients, Baumgarte ``a = 1/h``, predictor and convergence test as the dense reference
stepper (:mod:`retarget.sim.reduced.stepper`, the test oracle): only the implementation differs.

- Residual and exact Jacobian: rigid Newton–Euler, each deformable body's relative inertial forces
  (:func:`retarget.sim.reduced.dynamics.body_forces`), its cubature forces, tangent and damping derivative (the
  Neo-Hookean kernel in reduced form, :func:`retarget.sim.reduced.cubature.cubature_tangents`), the constraint rows
  of :mod:`retarget.sim.reduced.kernels` with complex-step curvature terms (couplings through their slot map,
  :func:`retarget.sim.reduced.kernels.coupling_curvature`). A residual-only call (every chord iteration that does not refactorize) forms no stiffness or
  Jacobian: inertial forces alone, the reduced-form cubature value kernel
  (:func:`retarget.sim.reduced.cubature.cubature_force_value`) and the constraint rows in real arithmetic.
- Newton: the kinematic rows ``R_U = U − Ū − h T(U) V`` are eliminated exactly per body (``J_UU`` is
  block-diagonal: ``I`` for c and z, ``I − ½hΩ(ω)`` for q), leaving the condensed ``(V, λ)`` system
  ``K = J_WW + J_WU X`` (``X = −J_UU⁻¹ J_UV``), factorized by LAPACK ``getrf`` (numba's own binding, so the
  functions stay cacheable) and reused across iterations and steps (chord Newton) until the contraction
  degrades (update > 0.3 × previous), exactly the reference stepper's policy. Measured: a dense LU of the
  condensed system beats a Schur complement on λ here, see docs/reduced.md §5 — the exact Newton matrix is not
  block-diagonal in V (joint curvature terms couple the two bodies of every joint).
- Time loop: :func:`run_chunk` advances a block of steps without returning to Python, writing every converged
  ``S_n`` into a preallocated array (the adjoint's stored states).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numba import types
from numba.np.linalg import _LAPACK, ensure_lapack
from numpy.typing import NDArray
from scipy.linalg import lu_solve

from retarget.sim.reduced.cubature import cubature_force_directional, cubature_force_value, cubature_tangents
from retarget.sim.reduced.dynamics import body_force, body_forces
from retarget.sim.reduced.kernels import COUPLING_CODE, block_eval, coupling_curvature
from retarget.sim.reduced.tensors import InertiaTensors
from retarget.sim.rotation_kernels import omega_half, quat_rate_half
from retarget.sim.servo import servo_torque
from retarget.jit import njit

if TYPE_CHECKING:
    from numba.core.registry import CPUDispatcher

__all__ = [
    "STATUS_DIVERGED",
    "STATUS_INVERTED",
    "STATUS_NEWTON_FAILED",
    "STATUS_OK",
    "Kernels",
    "Packed",
    "Workspace",
    "condensed_solve",
    "condensed_solve_transposed",
    "converged",
    "factorize_exact",
    "make_workspace",
    "residual_jacobian",
    "run_chunk",
]

ensure_lapack()
_GETRF = _LAPACK().numba_xxgetrf(types.float64)
_H = 1e-30

STATUS_OK = 0
STATUS_NEWTON_FAILED = 1
STATUS_DIVERGED = 2  # non-finite residual or update
STATUS_INVERTED = 3  # an element of a cubature inverted
#: What a refactorization (the chord Jacobian and its LU) costs, in residual-only Newton iterations (residual and
#: condensed solve): profiled 3.7 on the boxer's planning model and 4.2 on the demo's drummer model (docs/reduced.md
#: "Compiled engine").
REFACTOR_COST = 4.0
#: The contraction per iteration a fresh chord matrix gives (measured 0.005 on the boxer; a stale one 0.02-0.15).
FRESH_CONTRACTION = 0.01
#: A stale matrix whose update shrinks by less than this is refactorized within the step whatever the cost.
STALE_CONTRACTION_MAX = 0.5


class Packed(NamedTuple):
    """A :class:`~retarget.sim.reduced.system.ReducedSystem` as plain arrays for the compiled engine.

    Rigid bodies (b): ``rmass`` (b,) [kg], ``rinertia`` (b, 3, 3) [kg m²]. Deformable bodies (d): ``bref``,
    ``bzu``, ``bzv``, ``bsize`` (d,) reference body, z start in U and in V, r; per body in typed lists the
    :class:`~retarget.sim.reduced.tensors.InertiaTensors` fields, the Rayleigh factors ``balpha`` (d,) [1/s] (mass
    part, on the absolute node velocities) and ``bbeta`` (d,) [s] (stiffness part, ``β K(z) ż`` with the cubature
    tangent at the current z) and the
    cubature (``cub_qw`` (k, q), ``cub_w`` (k,) and ``cub_d`` (k, q, 9, r), the reduced displacement-gradient maps
    of :func:`~retarget.sim.reduced.cubature.reduced_gradients`, which every cubature kernel evaluates); ``bmass``,
    ``bmu``, ``blam`` (d,). Blocks (n_b): ``kind``, ``motor``, ``present_a``, ``present_b``, ``separate``,
    ``n_rigid_seg`` (n_b,), ``lam_off`` (n_b+1,), ``fvec`` (n_b, 6), ``fmat`` (n_b, 6, 3), ``y0`` / ``ymap`` (typed
    lists), local U/V indices ``ui``/``vi`` flattened with offsets ``ui_off``/``vi_off`` (n_b+1,). ``gravity`` (3,)
    [m/s²]; ``sizes`` = (n_u, n_v, n_λ, n_motors). ``curv`` (as ``ui``): 1 where the block's ``∂C/∂y`` depends on
    that local coordinate (0: ``C`` is affine in it, e.g. a joint in a body's position; its curvature column is
    zero and the exact Jacobian skips its complex-step evaluation). Modelled servos (:mod:`retarget.sim.servo`):
    ``sv_motor`` (n_m,) servo index per motor (-1: ideal), ``sv_par`` (n_s, N_PARAMS) packed parameters, ``sv_u``,
    ``sv_v`` (n_s,) U index of θ and V index of ω, ``sv_ui``, ``sv_ve`` (n_s,) of ι and e (-1: no integral action).
    """

    rmass: NDArray
    rinertia: NDArray
    bref: NDArray
    bzu: NDArray
    bzv: NDArray
    bsize: NDArray
    bmass: NDArray
    s0: object
    s1: object
    p0: object
    p1: object
    p2: object
    c0: object
    c1: object
    mzz: object
    balpha: NDArray
    cub_qw: object
    cub_w: object
    cub_d: object
    bmu: NDArray
    blam: NDArray
    bbeta: NDArray
    kind: NDArray
    motor: NDArray
    present_a: NDArray
    present_b: NDArray
    separate: NDArray
    n_rigid_seg: NDArray
    lam_off: NDArray
    fvec: NDArray
    fmat: NDArray
    y0: object
    ymap: object
    ui: NDArray
    ui_off: NDArray
    vi: NDArray
    vi_off: NDArray
    gravity: NDArray
    sizes: NDArray
    curv: NDArray
    sv_motor: NDArray
    sv_par: NDArray
    sv_u: NDArray
    sv_v: NDArray
    sv_ui: NDArray
    sv_ve: NDArray


class Workspace(NamedTuple):
    """The chord Newton's cached factorization, carried across steps and chunks (arrays updated in place).

    ``lu`` (n_W, n_W) Fortran-ordered LU of the condensed matrix, ``ipiv`` (n_W,) int32, ``jwu`` (n_W, n_U) the
    ``J_WU`` block it was built with, ``jqq_inv`` (b, 4, 4) and ``xq`` (b, 4, 3) the quaternion rows' elimination,
    ``scalars`` = [h of the factorization (0: none), factorization count, last Newton iteration count, the current
    factorization's cost so far in residual iterations (:func:`outlived`), the steps it has served].
    """

    lu: NDArray
    ipiv: NDArray
    jwu: NDArray
    jqq_inv: NDArray
    xq: NDArray
    scalars: NDArray


class BlockPoint(NamedTuple):
    """One constraint block evaluated at its local coordinates: what its Jacobian helpers read.

    ``ul`` (n,), ``vl`` (nvl,): the block's local U and V; ``c`` (nrow,): ``C``; ``cu`` (nrow, n): ``∂C/∂y``;
    ``cth`` (nrow,): ``∂C/∂θ``; ``cuth`` (nrow, n): ``∂²C/∂y∂θ``; ``ydot`` (n,): the local rate; ``lb`` (nrow,): the
    block's multipliers; ``gv`` (n,): ``cuᵀ lb``; ``th`` [rad] or [m], ``thd``: the motor angle and rate the block
    sees (0 without a motor).
    """

    ul: NDArray
    vl: NDArray
    c: NDArray
    cu: NDArray
    cth: NDArray
    cuth: NDArray
    ydot: NDArray
    lb: NDArray
    gv: NDArray
    th: float
    thd: float


class BodyDerivatives(NamedTuple):
    """A deformable body's force derivatives, what :func:`_deformable_jacobian` scatters into the Jacobian.

    From :func:`~retarget.sim.reduced.dynamics.body_forces` (generalized force ``f`` (6 + r,) of the body):
    ``f_q`` (6 + r, 4) ``∂f/∂q_ref``, ``f_z`` (6 + r, r) ``∂f/∂z``, ``f_acc`` (6 + r, 6 + r) ``∂f/∂a`` (the
    generalized mass), ``f_w`` (6 + r, 3) ``∂f/∂ω_ref``, ``f_zd`` (6 + r, r) ``∂f/∂ż``; from the cubature: ``k_el``
    (r, r) ``K(z)`` and ``dk`` (r, r) ``dK(z)[ż]`` (empty unless needed).
    """

    f_q: NDArray
    f_z: NDArray
    f_acc: NDArray
    f_w: NDArray
    f_zd: NDArray
    k_el: NDArray
    dk: NDArray


def _kind(value: object) -> Hashable:
    """What fixes ``value``'s numba type, cheaply: an array's dtype, rank, layout, alignment and writability, a
    tuple's class and its items' kinds, else the Python type."""
    if isinstance(value, np.ndarray):
        f = value.flags
        return value.dtype.str, value.ndim, f.c_contiguous, f.f_contiguous, f.aligned, f.writeable
    if isinstance(value, tuple):
        return type(value), *map(_kind, value)
    return type(value)


class Kernels:
    """The compiled kernels called on one packed system, without numba typing the :class:`Packed` on every call.

    A numba dispatcher types each argument of every call; a ``Packed`` is a tuple of 40 arrays, which numba types in
    Python (about 0.5 ms on the demo's drummer model, a sixth of a step's own work at dt 2 ms). ``kernels(run_chunk, *args)``
    looks the compiled entry point up once per kernel and kinds of the other arguments (:func:`_kind`: dtype, rank,
    layout, alignment, writability of each array; the Python type of each scalar) and calls it with ``packed``
    first. The entry point is numba's own for the signature numba would pick (``Dispatcher.compile`` of the
    arguments' ``typeof_pyval``), so the call computes what the dispatcher's would. Pass every argument: a kernel's
    defaults are not filled in.

    Attributes:
        packed: the system every call passes first.
    """

    def __init__(self, packed: Packed) -> None:
        self.packed = packed
        self._entries: dict[tuple[Hashable, ...], Callable[..., Any]] = {}

    def __call__(self, kernel: CPUDispatcher, *args: object) -> Any:
        key = (kernel, *map(_kind, args))
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = kernel.compile(tuple(kernel.typeof_pyval(a) for a in (self.packed, *args)))
        return entry(self.packed, *args)


def make_workspace(p: Packed) -> Workspace:
    """An empty workspace (no factorization yet) for ``p``."""
    nu, nv, m = int(p.sizes[0]), int(p.sizes[1]), int(p.sizes[2])
    nb = len(p.rmass)
    nw = nv + m
    return Workspace(
        np.zeros((nw, nw), order="F"), np.zeros(nw, dtype=np.int32), np.zeros((nw, nu)), np.zeros((nb, 4, 4)),
        np.zeros((nb, 4, 3)), np.zeros(5),
    )


@njit(cache=True)
def _block_rate(ul: NDArray, vl: NDArray, nrs: int) -> NDArray:
    """``ẏ = T(ul) vl`` (n,) of a block's local vector: ``[v, ½Q(q)ω]`` per rigid segment, then ``ż``."""
    n = ul.shape[0]
    out = np.empty(n)
    for sg in range(nrs):
        for a in range(3):
            out[7 * sg + a] = vl[6 * sg + a]
        qd = quat_rate_half(ul[7 * sg + 3 : 7 * sg + 7]) @ vl[6 * sg + 3 : 6 * sg + 6]
        for a in range(4):
            out[7 * sg + 3 + a] = qd[a]
    for k in range(n - 7 * nrs):
        out[7 * nrs + k] = vl[6 * nrs + k]
    return out


@njit(cache=True)
def _block_rate_matrix(ul: NDArray, nrs: int, nvl: int) -> NDArray:
    """``T(ul)`` (n, nvl) of a block's local vector, as a matrix (for the Jacobian; :func:`_block_rate` applies it)."""
    n = ul.shape[0]
    tl = np.zeros((n, nvl))
    for sg in range(nrs):
        for a in range(3):
            tl[7 * sg + a, 6 * sg + a] = 1.0
        qh = quat_rate_half(ul[7 * sg + 3 : 7 * sg + 7])
        for a in range(4):
            for b in range(3):
                tl[7 * sg + 3 + a, 6 * sg + 3 + b] = qh[a, b]
    for k in range(n - 7 * nrs):
        tl[7 * nrs + k, 6 * nrs + k] = 1.0
    return tl


@njit(cache=True, nogil=True, inline="always")
def _transposed_product_into(m: NDArray, v: NDArray, v0: int, out: NDArray, o0: int) -> None:
    """``out[o0 + b] = Σ_a m[a, b] v[v0 + a]``: a small matrix's transpose times a stretch of ``v``, by hand
    (numba's ``m.T @ v[...]`` warns of and copies its non-contiguous operands)."""
    for b in range(m.shape[1]):
        acc = 0.0
        for a in range(m.shape[0]):
            acc += m[a, b] * v[v0 + a]
        out[o0 + b] = acc


@njit(cache=True)
def _block_rate_transposed(ul: NDArray, g: NDArray, nrs: int, nvl: int) -> NDArray:
    """``T(ul)ᵀ g`` (nvl,): the generalized force of a block's constraint force ``g`` (n,) on its V entries."""
    n = ul.shape[0]
    out = np.empty(nvl)
    for sg in range(nrs):
        for a in range(3):
            out[6 * sg + a] = g[7 * sg + a]
        _transposed_product_into(quat_rate_half(ul[7 * sg + 3 : 7 * sg + 7]), g, 7 * sg + 3, out, 6 * sg + 3)
    for k in range(n - 7 * nrs):
        out[6 * nrs + k] = g[7 * nrs + k]
    return out


@njit(cache=True)
def _count_integral(p: Packed) -> int:
    """Servos with integral action (each adds ι to U and e to V)."""
    n = 0
    for k in range(p.sv_ui.shape[0]):
        if p.sv_ui[k] >= 0:
            n += 1
    return n


@njit(cache=True, nogil=True)
def _servo_rows(p: Packed, u: NDArray, v: NDArray, v_bar: NDArray, h: float, goal: NDArray, goal_dot: NDArray,
                r: NDArray, jac: NDArray, mass: NDArray, rth: NDArray, rthd: NDArray, want_jac: bool) -> None:
    """The servo rows of the residual (:mod:`retarget.sim.servo`) into ``r`` and, with ``want_jac``, their
    Jacobian entries, generalized mass and goal sensitivities (in place). The kinematic rows of the servo
    coordinates (``θ − θ̄ − hω``, ``ι − ῑ − he``) and the reaction ``C_θᵀλ`` are added with the other rows."""
    nu = p.sizes[0]
    nm = p.sizes[3]
    for mm in range(nm):
        ks = p.sv_motor[mm]
        if ks < 0:
            continue
        par = p.sv_par[ks]
        it = p.sv_u[ks]
        io = p.sv_v[ks]
        ii = p.sv_ui[ks]
        ie = p.sv_ve[ks]
        iota = u[ii] if ii >= 0 else 0.0
        tau, d = servo_torque(par, goal[mm], goal_dot[mm], u[it], v[io], iota)
        inertia = par[6]
        rw = nu + io
        r[rw] += inertia * (v[io] - v_bar[io]) / h - tau
        if ie >= 0:
            r[nu + ie] += v[ie] - (goal[mm] - u[it])
        if not want_jac:
            continue
        jac[rw, rw] += inertia / h - d[3]
        jac[rw, it] += -d[2]
        mass[io, io] += inertia
        rth[rw, mm] += -d[0]
        rthd[rw, mm] += -d[1]
        if ie >= 0:
            jac[rw, ii] += -d[4]
            jac[nu + ie, nu + ie] += 1.0
            jac[nu + ie, it] += 1.0
            rth[nu + ie, mm] += -1.0


@njit(cache=True, nogil=True, inline="always")
def body_inertia(p: Packed, d: int) -> InertiaTensors:
    """Deformable body ``d``'s inertia tensors, a record over the packed copies (no copy)."""
    return InertiaTensors(p.bmass[d], p.s0[d], p.s1[d], p.p0[d], p.p1[d], p.p2[d], p.c0[d], p.c1[d], p.mzz[d])


@njit(cache=True, nogil=True, inline="always")
def _rigid_rows(p: Packed, u: NDArray, v: NDArray, v_bar: NDArray, h: float, r: NDArray, jac: NDArray,
                mass: NDArray, want_jac: bool) -> None:
    """Every rigid body's kinematic rows (``− h T(q) V``; the ``U − Ū`` part is added before) and Newton–Euler
    rows into ``r`` and, with ``want_jac``, their Jacobian entries and generalized mass (in place)."""
    iv = p.sizes[0]
    g = p.gravity
    for i in range(p.rmass.shape[0]):
        q = u[7 * i + 3 : 7 * i + 7]
        w = v[6 * i + 3 : 6 * i + 6]
        qh = quat_rate_half(q)
        qw = qh @ w
        for k in range(3):
            r[7 * i + k] -= h * v[6 * i + k]
        for k in range(4):
            r[7 * i + 3 + k] -= h * qw[k]
        inertia = p.rinertia[i]
        iw = inertia @ w
        dw = (w - v_bar[6 * i + 3 : 6 * i + 6]) / h
        idw = inertia @ dw
        rv = iv + 6 * i
        mi = p.rmass[i]
        for k in range(3):
            r[rv + k] += mi * ((v[6 * i + k] - v_bar[6 * i + k]) / h - g[k])
        r[rv + 3] += idw[0] + w[1] * iw[2] - w[2] * iw[1]
        r[rv + 4] += idw[1] + w[2] * iw[0] - w[0] * iw[2]
        r[rv + 5] += idw[2] + w[0] * iw[1] - w[1] * iw[0]
        if want_jac:
            om = omega_half(w)
            for a in range(3):
                jac[7 * i + a, 7 * i + a] = 1.0
                jac[7 * i + a, iv + 6 * i + a] = -h
                jac[rv + a, iv + 6 * i + a] += mi / h
                mass[6 * i + a, 6 * i + a] += mi
            for a in range(4):
                for b in range(4):
                    jac[7 * i + 3 + a, 7 * i + 3 + b] = (1.0 if a == b else 0.0) - h * om[a, b]
                for b in range(3):
                    jac[7 * i + 3 + a, iv + 6 * i + 3 + b] = -h * qh[a, b]
            # ∂(ω × Iω)/∂ω = [ω]× I − [Iω]×
            wx = np.zeros((3, 3))
            wx[0, 1], wx[0, 2], wx[1, 0], wx[1, 2], wx[2, 0], wx[2, 1] = -w[2], w[1], w[2], -w[0], -w[1], w[0]
            iwx = np.zeros((3, 3))
            iwx[0, 1], iwx[0, 2], iwx[1, 0] = -iw[2], iw[1], iw[2]
            iwx[1, 2], iwx[2, 0], iwx[2, 1] = -iw[0], -iw[1], iw[0]
            blk = inertia / h + wx @ inertia - iwx
            for a in range(3):
                for b in range(3):
                    jac[rv + 3 + a, iv + 6 * i + 3 + b] += blk[a, b]
                    mass[6 * i + 3 + a, 6 * i + 3 + b] += inertia[a, b]


@njit(cache=True, nogil=True, inline="always")
def _deformable_jacobian(p: Packed, d: int, vrow: NDArray, h: float, exact: bool, der: BodyDerivatives,
                         jac: NDArray, mass: NDArray) -> None:
    """Deformable body ``d``'s Jacobian entries and generalized mass from its force derivatives (in place);
    ``vrow`` (6 + r,): its generalized force's V indices."""
    f_q, f_z, f_acc, f_w, f_zd, k_el, dk = der
    alpha = p.balpha[d]
    beta = p.bbeta[d]
    iv = p.sizes[0]
    ref = p.bref[d]
    zu0 = p.bzu[d]
    zv0 = p.bzv[d]
    rr = p.bsize[d]
    nf = 6 + rr
    for k in range(rr):
        jac[zu0 + k, zu0 + k] = 1.0
        jac[zu0 + k, iv + zv0 + k] = -h
    for a in range(nf):
        ra = iv + vrow[a]
        for b in range(4):
            jac[ra, 7 * ref + 3 + b] += f_q[a, b]
        for b in range(rr):
            jac[ra, zu0 + b] += f_z[a, b]
            jac[ra, iv + zv0 + b] += f_zd[a, b]
        for b in range(nf):
            jac[ra, iv + vrow[b]] += f_acc[a, b] * (1.0 / h + alpha)
            mass[vrow[a], vrow[b]] += f_acc[a, b]
        for b in range(3):
            jac[ra, iv + 6 * ref + 3 + b] += f_w[a, b]
    for a in range(rr):
        for b in range(rr):
            jac[iv + zv0 + a, zu0 + b] += k_el[a, b]
            jac[iv + zv0 + a, iv + zv0 + b] += beta * k_el[a, b]
    if beta != 0.0 and exact:
        # ∂(β K(z) ż)/∂z = β dK(z)[ż], exact (second derivative of the cubature force along ż).
        for a in range(rr):
            for b in range(rr):
                jac[iv + zv0 + a, zu0 + b] += beta * dk[a, b]


@njit(cache=True, nogil=True, inline="always")
def _deformable_rows(p: Packed, u: NDArray, v: NDArray, v_bar: NDArray, h: float, r: NDArray, jac: NDArray,
                     mass: NDArray, want_jac: bool, exact: bool) -> float:
    """Every deformable body's kinematic rows, relative inertial forces, cubature forces and damping into ``r``
    and, with ``want_jac``, their Jacobian entries (in place). Returns the min det F of the cubature elements."""
    iv = p.sizes[0]
    g = p.gravity
    min_det = np.inf
    for d in range(p.bref.shape[0]):
        ref = p.bref[d]
        zu0 = p.bzu[d]
        zv0 = p.bzv[d]
        rr = p.bsize[d]
        z = u[zu0 : zu0 + rr]
        zd = v[zv0 : zv0 + rr]
        for k in range(rr):
            r[zu0 + k] -= h * zd[k]
        acc_v = (v[6 * ref : 6 * ref + 3] - v_bar[6 * ref : 6 * ref + 3]) / h
        acc_w = (v[6 * ref + 3 : 6 * ref + 6] - v_bar[6 * ref + 3 : 6 * ref + 6]) / h
        acc_z = (zd - v_bar[zv0 : zv0 + rr]) / h
        # Mass-proportional damping α M ẋ on the nodes' absolute velocities ẋ = J [v, ω, ż] is α Jᵀ M J [v, ω, ż]:
        # the generalized mass times α [v, ω, ż], i.e. the inertial force at the accelerations shifted by α [v, ω, ż].
        alpha = p.balpha[d]
        if alpha != 0.0:
            acc_v = acc_v + alpha * v[6 * ref : 6 * ref + 3]
            acc_w = acc_w + alpha * v[6 * ref + 3 : 6 * ref + 6]
            acc_z = acc_z + alpha * zd
        qr = u[7 * ref + 3 : 7 * ref + 7]
        wr = v[6 * ref + 3 : 6 * ref + 6]
        if want_jac:
            f, f_q, f_z, f_acc, f_w, f_zd = body_forces(qr, z, zd, wr, acc_v, acc_w, acc_z, g, body_inertia(p, d))
        else:
            f = body_force(qr, z, zd, wr, acc_v, acc_w, acc_z, g, body_inertia(p, d))
        beta = p.bbeta[d]
        if want_jac:
            f_el, k_el, dk, md = cubature_tangents(
                z, zd, p.cub_d[d], p.cub_qw[d], p.cub_w[d], p.bmu[d], p.blam[d], beta != 0.0 and exact
            )
            kzd = k_el @ zd
        elif beta != 0.0:
            # K(z) ż without forming the tangent: the value kernel's exact directional derivative.
            f_el, kzd, md = cubature_force_directional(z, zd, p.cub_d[d], p.cub_qw[d], p.cub_w[d], p.bmu[d], p.blam[d])
            k_el = np.zeros((0, 0))
        else:
            f_el, md = cubature_force_value(z, p.cub_d[d], p.cub_qw[d], p.cub_w[d], p.bmu[d], p.blam[d])
            k_el = np.zeros((0, 0))
            kzd = np.zeros(rr)
        # Stiffness-proportional damping with the current tangent, β K(z) ż (docs/reduced.md §3).
        fd = f_el + beta * kzd
        # rows/cols of body d's generalized force: (v_ref, ω_ref) then ż, in V numbering
        nf = 6 + rr
        vrow = np.empty(nf, dtype=np.int64)
        for k in range(6):
            vrow[k] = 6 * ref + k
        for k in range(rr):
            vrow[6 + k] = zv0 + k
        for a in range(nf):
            r[iv + vrow[a]] += f[a]
        for k in range(rr):
            r[iv + zv0 + k] += fd[k]
        if want_jac:
            _deformable_jacobian(p, d, vrow, h, exact, BodyDerivatives(f_q, f_z, f_acc, f_w, f_zd, k_el, dk), jac, mass)
        if md < min_det:
            min_det = md
    return min_det


@njit(cache=True, nogil=True, inline="always")
def _block_theta_columns(p: Packed, bk: int, pt: BlockPoint, tl: NDArray, ui: NDArray, vi: NDArray,
                         baumgarte: float, jac: NDArray, rth: NDArray) -> None:
    """Block ``bk``'s derivatives in its motor angle θ: into ``jac`` (a modelled servo's shaft coordinate) or
    ``rth`` (an ideal motor's input), in place."""
    c, cth, cuth, ydot, lb, thd = pt.c, pt.cth, pt.cuth, pt.ydot, pt.lb, pt.thd
    iv = p.sizes[0]
    il = p.sizes[0] + p.sizes[1]
    l0 = p.lam_off[bk]
    nrow = p.lam_off[bk + 1] - l0
    n = ui.shape[0]
    nvl = vi.shape[0]
    mot = p.motor[bk]
    servo = p.sv_motor[mot]
    # ∂/∂θ: λ rows ∂C_y/∂θ ẏ + a C_θ + C_θθ θ̇ (hinge: C_θθ = −C on the motor row; slider: 0), V rows.
    rt = cuth @ ydot + baumgarte * cth
    if p.kind[bk] == 1:
        rt[nrow - 1] -= c[nrow - 1] * thd
    tv = tl.T @ (cuth.T @ lb)
    if servo >= 0:
        # The shaft is a coordinate: these are its θ (U) and ω (V) columns; the ω row takes −C_θᵀλ's
        # derivatives (λ, the bodies' U through ∂C_θ/∂y = ∂C_y/∂θ, and θ through C_θθ).
        ct = p.sv_u[servo]
        rw = iv + p.sv_v[servo]
        for a in range(nrow):
            jac[il + l0 + a, ct] += rt[a]
            jac[il + l0 + a, rw] += cth[a]
            jac[rw, il + l0 + a] -= cth[a]
        for k in range(nvl):
            jac[iv + vi[k], ct] -= tv[k]
        for k in range(n):
            acc = 0.0
            for a in range(nrow):
                acc += lb[a] * cuth[a, k]
            jac[rw, ui[k]] -= acc
        if p.kind[bk] == 1:
            jac[rw, ct] += c[nrow - 1] * lb[nrow - 1]
    else:
        for a in range(nrow):
            rth[il + l0 + a, mot] = rt[a]
        for k in range(nvl):
            rth[iv + vi[k], mot] -= tv[k]


@njit(cache=True, nogil=True, inline="always")
def _block_curvature(p: Packed, bk: int, pt: BlockPoint, tl: NDArray, nvl: int, baumgarte: float,
                     exact: bool) -> tuple[NDArray, NDArray]:
    """Block ``bk``'s ``∂r_λ/∂U`` (nrow, n) and ``∂(Tᵀ C_yᵀ λ)/∂U`` at fixed ``T`` (nvl, n) by complex steps of
    ``∂C/∂y`` (left out with ``exact=False``)."""
    ul, lb, ydot, cu, cuth, th, thd = pt.ul, pt.lb, pt.ydot, pt.cu, pt.cuth, pt.th, pt.thd
    n = ul.shape[0]
    nrow = p.lam_off[bk + 1] - p.lam_off[bk]
    mot = p.motor[bk]
    a3 = np.empty((nrow, n))
    hess = np.empty((nvl, n))
    cflags = p.curv[p.ui_off[bk] : p.ui_off[bk + 1]]
    chain = False
    if exact and p.kind[bk] == COUPLING_CODE:
        for j in range(n):
            chain = chain or cflags[j] != 0
    if chain:
        # Chain rule through the coupling slot: 18 small complex steps instead of one per local coordinate.
        curv_dot, hl = coupling_curvature(p.fvec[bk], p.present_a[bk] != 0, p.separate[bk] != 0, p.y0[bk],
                                          p.ymap[bk], ul, lb, ydot, _H)
        for a in range(nrow):
            for j in range(n):
                a3[a, j] = curv_dot[a, j] + baumgarte * cu[a, j] + thd * cuth[a, j]
        hess[:, :] = tl.T @ hl
        return a3, hess
    ulc = ul.astype(np.complex128)
    for j in range(n):
        if cflags[j] == 0 or not exact:
            # ∂C_y/∂y_j = 0: no curvature in this direction (or left out of an inexact Jacobian).
            for a in range(nrow):
                a3[a, j] = baumgarte * cu[a, j] + thd * cuth[a, j]
            for k in range(nvl):
                hess[k, j] = 0.0
            continue
        ulc[j] = ul[j] + 1j * _H
        _, cuj, _, _ = block_eval(
            p.kind[bk], mot >= 0, p.present_a[bk] != 0, p.present_b[bk] != 0, p.fvec[bk], p.fmat[bk],
            p.separate[bk] != 0, p.y0[bk], p.ymap[bk], ulc, th,
        )
        ulc[j] = ul[j]
        dcu = np.ascontiguousarray(cuj.imag) / _H
        col = dcu @ ydot
        for a in range(nrow):
            a3[a, j] = col[a] + baumgarte * cu[a, j] + thd * cuth[a, j]
        hcol = tl.T @ (dcu.T @ lb)
        for k in range(nvl):
            hess[k, j] = hcol[k]
    return a3, hess


@njit(cache=True, nogil=True, inline="always")
def _block_jacobian(p: Packed, bk: int, pt: BlockPoint, baumgarte: float, jac: NDArray, rth: NDArray,
                    exact: bool) -> None:
    """Constraint block ``bk``'s Jacobian entries and motor sensitivities (in place) from its values and first
    derivatives at its local coordinates (:class:`BlockPoint`)."""
    ul, vl, cu, gv = pt.ul, pt.vl, pt.cu, pt.gv
    iv = p.sizes[0]
    il = p.sizes[0] + p.sizes[1]
    ui = p.ui[p.ui_off[bk] : p.ui_off[bk + 1]]
    vi = p.vi[p.vi_off[bk] : p.vi_off[bk + 1]]
    n = ui.shape[0]
    nvl = vi.shape[0]
    l0 = p.lam_off[bk]
    nrow = p.lam_off[bk + 1] - l0
    nrs = p.n_rigid_seg[bk]
    mot = p.motor[bk]
    tl = _block_rate_matrix(ul, nrs, nvl)
    if mot >= 0:
        _block_theta_columns(p, bk, pt, tl, ui, vi, baumgarte, jac, rth)
    a3, hess = _block_curvature(p, bk, pt, tl, nvl, baumgarte, exact)
    for sg in range(nrs):
        om = omega_half(vl[6 * sg + 3 : 6 * sg + 6])
        a3[:, 7 * sg + 3 : 7 * sg + 7] += np.ascontiguousarray(cu[:, 7 * sg + 3 : 7 * sg + 7]) @ om
        gq = gv[7 * sg + 3 : 7 * sg + 7]
        # ∂(½Q(q)ᵀ g)/∂q_k = ½ Q(e_k)ᵀ g
        g0, g1, g2, g3 = gq[0], gq[1], gq[2], gq[3]
        gam = np.empty((3, 4))
        gam[0, 0], gam[1, 0], gam[2, 0] = g1, g2, g3
        gam[0, 1], gam[1, 1], gam[2, 1] = -g0, g3, -g2
        gam[0, 2], gam[1, 2], gam[2, 2] = -g3, -g0, g1
        gam[0, 3], gam[1, 3], gam[2, 3] = g2, -g1, -g0
        for a in range(3):
            for b in range(4):
                hess[6 * sg + 3 + a, 7 * sg + 3 + b] += 0.5 * gam[a, b]
    cv = cu @ tl
    for a in range(nrow):
        for k in range(n):
            jac[il + l0 + a, ui[k]] += a3[a, k]
        for k in range(nvl):
            jac[il + l0 + a, iv + vi[k]] += cv[a, k]
            jac[iv + vi[k], il + l0 + a] -= cv[a, k]
    for k2 in range(nvl):
        for k in range(n):
            jac[iv + vi[k2], ui[k]] -= hess[k2, k]


@njit(cache=True, nogil=True, inline="always")
def _constraint_rows(p: Packed, u: NDArray, v: NDArray, lam: NDArray, th_c: NDArray, thd_c: NDArray,
                     baumgarte: float, r: NDArray, jac: NDArray, rth: NDArray, rthd: NDArray, want_jac: bool,
                     exact: bool) -> None:
    """Every constraint block's λ rows and reaction on its V entries into ``r`` and, with ``want_jac``, their
    Jacobian entries and motor sensitivities (:func:`_block_jacobian`, in place); ``th_c``, ``thd_c``: the motor
    angles the rows see. (One call per residual: the packed system is handed over once, not once per block.)"""
    iv = p.sizes[0]
    il = p.sizes[0] + p.sizes[1]
    for bk in range(p.kind.shape[0]):
        ui = p.ui[p.ui_off[bk] : p.ui_off[bk + 1]]
        vi = p.vi[p.vi_off[bk] : p.vi_off[bk + 1]]
        n = ui.shape[0]
        nvl = vi.shape[0]
        l0 = p.lam_off[bk]
        l1 = p.lam_off[bk + 1]
        nrow = l1 - l0
        ul = np.empty(n)
        for k in range(n):
            ul[k] = u[ui[k]]
        vl = np.empty(nvl)
        for k in range(nvl):
            vl[k] = v[vi[k]]
        nrs = p.n_rigid_seg[bk]
        ydot = _block_rate(ul, vl, nrs)
        mot = p.motor[bk]
        th = th_c[mot] if mot >= 0 else 0.0
        thd = thd_c[mot] if mot >= 0 else 0.0
        servo = p.sv_motor[mot] if mot >= 0 else -1
        # Values and first derivatives in real arithmetic; complex only for the curvature terms below.
        c, cuc, cth, cuthc = block_eval(
            p.kind[bk], mot >= 0, p.present_a[bk] != 0, p.present_b[bk] != 0, p.fvec[bk], p.fmat[bk],
            p.separate[bk] != 0, p.y0[bk], p.ymap[bk], ul, th,
        )
        cu = np.ascontiguousarray(cuc)
        cuth = np.ascontiguousarray(cuthc)
        lb = lam[l0:l1].copy()
        gv = np.zeros(n)
        for a in range(nrow):
            acc = baumgarte * c[a] + cth[a] * thd
            for k in range(n):
                acc += cu[a, k] * ydot[k]
                gv[k] += cu[a, k] * lb[a]
            r[il + l0 + a] = acc
        tg = _block_rate_transposed(ul, gv, nrs, nvl)
        for k in range(nvl):
            r[iv + vi[k]] -= tg[k]
        if servo >= 0:
            # The motor row's reaction on the servo's shaft: R_ω −= C_θᵀλ.
            for a in range(nrow):
                r[iv + p.sv_v[servo]] -= cth[a] * lb[a]
        elif mot >= 0:
            for a in range(nrow):
                rthd[il + l0 + a, mot] = cth[a]
        if want_jac:
            _block_jacobian(p, bk, BlockPoint(ul, vl, c, cu, cth, cuth, ydot, lb, gv, th, thd), baumgarte, jac, rth,
                            exact)


@njit(cache=True, nogil=True)
def residual_jacobian(
    p: Packed,
    s: NDArray,
    u_bar: NDArray,
    v_bar: NDArray,
    h: float,
    theta: NDArray,
    theta_dot: NDArray,
    baumgarte: float,
    want_jac: bool,
    exact: bool = True,
) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray, float]:
    """The BDF residual ``R`` (n_S,) and, with ``want_jac``, its exact Jacobian and sensitivities.

    ``exact=False`` leaves out the two costliest second-order terms of the Jacobian — the constraint blocks'
    curvature (complex steps) and the derivative of the damping force ``β K(z) ż`` in ``z`` — for the chord
    iterations of the forward solve, which need a good Newton matrix, not the exact one (the converged state is the
    same to the tolerance). The adjoint and the static solve use the exact Jacobian.

    Returns:
        ``R`` (n_S,); ``∂R/∂S`` (n_S, n_S) (0×0 without ``want_jac``); ``∂R/∂θ̇`` (n_S, n_m); ``∂R/∂θ`` (n_S, n_m)
        (zero without ``want_jac``); the generalized mass (n_V, n_V) (0×0 without ``want_jac``); min det F of the
        cubature elements.
    """
    nu, nv, m, nm = p.sizes[0], p.sizes[1], p.sizes[2], p.sizes[3]
    ns = nu + nv + m
    u = s[:nu]
    v = s[nu : nu + nv]
    lam = s[nu + nv :]
    iv = nu
    r = np.zeros(ns)
    jac = np.zeros((ns, ns) if want_jac else (0, 0))
    mass = np.zeros((nv, nv) if want_jac else (0, 0))
    rthd = np.zeros((ns, nm))
    rth = np.zeros((ns, nm))
    # The motor angles the constraint rows see: a modelled servo's shaft from the state, an ideal motor's input.
    th_c = theta.copy()
    thd_c = theta_dot.copy()
    for mm in range(nm):
        ks = p.sv_motor[mm]
        if ks >= 0:
            th_c[mm] = u[p.sv_u[ks]]
            thd_c[mm] = v[p.sv_v[ks]]
    _servo_rows(p, u, v, v_bar, h, theta, theta_dot, r, jac, mass, rth, rthd, want_jac)
    for k in range(nu):
        r[k] = u[k] - u_bar[k]
    _rigid_rows(p, u, v, v_bar, h, r, jac, mass, want_jac)
    min_det = _deformable_rows(p, u, v, v_bar, h, r, jac, mass, want_jac, exact)
    # Servo coordinates: U̇ = V on the tail after every z.
    ntail = p.sv_u.shape[0] + _count_integral(p)
    for k in range(ntail):
        ku = nu - ntail + k
        kv = nv - ntail + k
        r[ku] -= h * v[kv]
        if want_jac:
            jac[ku, ku] = 1.0
            jac[ku, iv + kv] = -h
    _constraint_rows(p, u, v, lam, th_c, thd_c, baumgarte, r, jac, rth, rthd, want_jac, exact)
    return r, jac, rthd, rth, mass, min_det


@njit(cache=True, nogil=True)
def _factorize(p: Packed, jac: NDArray, ws: Workspace) -> int:
    """Condense ``jac`` onto (V, λ) by eliminating the kinematic rows and LU-factorize it into ``ws``."""
    nu, nv, m = p.sizes[0], p.sizes[1], p.sizes[2]
    nb = p.rmass.shape[0]
    nw = nv + m
    kmat = ws.lu
    for a in range(nw):
        for b in range(nw):
            kmat[a, b] = jac[nu + a, nu + b]
        for b in range(nu):
            ws.jwu[a, b] = jac[nu + a, b]
    for i in range(nb):
        # c rows: J_cc = I, J_cv = −hI ⇒ X = −J_cv
        for a in range(3):
            xa = -jac[7 * i + a, nu + 6 * i + a]
            for row in range(nw):
                kmat[row, 6 * i + a] += ws.jwu[row, 7 * i + a] * xa
        jqq = np.ascontiguousarray(jac[7 * i + 3 : 7 * i + 7, 7 * i + 3 : 7 * i + 7])
        inv = np.linalg.inv(jqq)
        ws.jqq_inv[i] = inv
        xq = -inv @ np.ascontiguousarray(jac[7 * i + 3 : 7 * i + 7, nu + 6 * i + 3 : nu + 6 * i + 6])
        ws.xq[i] = xq
        for row in range(nw):
            for b in range(3):
                acc = 0.0
                for a in range(4):
                    acc += ws.jwu[row, 7 * i + 3 + a] * xq[a, b]
                kmat[row, 6 * i + 3 + b] += acc
    nd = p.bref.shape[0]
    for d in range(nd):
        for k in range(p.bsize[d]):
            xz = -jac[p.bzu[d] + k, nu + p.bzv[d] + k]
            for row in range(nw):
                kmat[row, p.bzv[d] + k] += ws.jwu[row, p.bzu[d] + k] * xz
    ntail = p.sv_u.shape[0] + _count_integral(p)
    for k in range(ntail):
        ku, kv = nu - ntail + k, nv - ntail + k
        xz = -jac[ku, nu + kv]
        for row in range(nw):
            kmat[row, kv] += ws.jwu[row, ku] * xz
    info = _GETRF(ord("d"), nw, nw, kmat.ctypes, nw, ws.ipiv.ctypes)
    ws.scalars[1] += 1.0
    return info


@njit(cache=True)
def _lu_solve(lu: NDArray, ipiv: NDArray, b: NDArray) -> NDArray:
    """Solve with a LAPACK ``getrf`` factorization (column-major ``lu``, 1-based ``ipiv``)."""
    n = lu.shape[0]
    x = b.copy()
    for i in range(n):
        piv = ipiv[i] - 1
        if piv != i:
            t = x[i]
            x[i] = x[piv]
            x[piv] = t
    for j in range(n):
        xj = x[j]
        if xj != 0.0:
            for i in range(j + 1, n):
                x[i] -= lu[i, j] * xj
    for j in range(n - 1, -1, -1):
        x[j] /= lu[j, j]
        xj = x[j]
        if xj != 0.0:
            for i in range(j):
                x[i] -= lu[i, j] * xj
    return x


@njit(cache=True)
def _lu_solve_transposed(lu: NDArray, ipiv: NDArray, b: NDArray) -> NDArray:
    """Solve ``Aᵀ x = b`` with a LAPACK ``getrf`` factorization of ``A`` (``PA = LU`` ⇒ ``Aᵀ = Uᵀ Lᵀ P``)."""
    n = lu.shape[0]
    x = b.copy()
    for j in range(n):  # Uᵀ y = b (lower triangular, column j of U is row j of Uᵀ)
        acc = x[j]
        for i in range(j):
            acc -= lu[i, j] * x[i]
        x[j] = acc / lu[j, j]
    for j in range(n - 1, -1, -1):  # Lᵀ w = y (unit upper)
        acc = x[j]
        for i in range(j + 1, n):
            acc -= lu[i, j] * x[i]
        x[j] = acc
    for i in range(n - 1, -1, -1):
        piv = ipiv[i] - 1
        if piv != i:
            t = x[i]
            x[i] = x[piv]
            x[piv] = t
    return x


@njit(cache=True)
def condensed_solve(p: Packed, ws: Workspace, res: NDArray) -> NDArray:
    """Newton update ``δS`` (n_S,) = ``−J⁻¹ R`` with the cached condensed factorization in ``ws``."""
    nu, nv, m = p.sizes[0], p.sizes[1], p.sizes[2]
    nb = p.rmass.shape[0]
    nw = nv + m
    # p_U = −J_UU⁻¹ R_U (block-diagonal: I for c, z; cached inverse for q)
    pu = -res[:nu].copy()
    for i in range(nb):
        pq = ws.jqq_inv[i] @ res[7 * i + 3 : 7 * i + 7]
        for a in range(4):
            pu[7 * i + 3 + a] = -pq[a]
    rhs = -res[nu:] - ws.jwu @ pu
    dw = _lu_solve(ws.lu, ws.ipiv, rhs)
    out = np.empty(nu + nw)
    out[nu:] = dw
    for k in range(nu):
        out[k] = pu[k]
    for i in range(nb):
        for a in range(3):
            out[7 * i + a] += ws.scalars[0] * dw[6 * i + a]
        dq = ws.xq[i] @ dw[6 * i + 3 : 6 * i + 6]
        for a in range(4):
            out[7 * i + 3 + a] += dq[a]
    nd = p.bref.shape[0]
    for d in range(nd):
        for k in range(p.bsize[d]):
            out[p.bzu[d] + k] += ws.scalars[0] * dw[p.bzv[d] + k]
    ntail = p.sv_u.shape[0] + _count_integral(p)
    for k in range(ntail):
        out[nu - ntail + k] += ws.scalars[0] * dw[nv - ntail + k]
    return out


def condensed_solve_columns(p: Packed, ws: Workspace, res: NDArray) -> NDArray:
    """:func:`condensed_solve` of every column of ``res`` (n_S, n_columns) at once, as matrix products: the
    ``J_WU`` product is one GEMM and the LU solve one LAPACK ``getrs`` over all columns, where a loop over the
    columns does a matrix–vector product and two triangular sweeps per column (a tangent-linear pass solves one
    column per parameter and step: the drummer's 260 columns × 323 unknowns, docs/optimize.md)."""
    nu = int(p.sizes[0])
    nb = p.rmass.shape[0]
    res = np.asarray(res, dtype=float)
    cols = res.shape[1]
    q_rows = (7 * np.arange(nb)[:, None] + 3 + np.arange(4)).ravel()
    pu = -res[:nu]
    pu[q_rows] = -np.matmul(ws.jqq_inv, res[q_rows].reshape(nb, 4, cols)).reshape(4 * nb, cols)
    dw = lu_solve((ws.lu, ws.ipiv - 1), -res[nu:] - ws.jwu @ pu, overwrite_b=True, check_finite=False)
    out = np.empty_like(res)
    out[nu:] = dw
    out[:nu] = pu
    c_rows = (7 * np.arange(nb)[:, None] + np.arange(3)).ravel()
    out[c_rows] += ws.scalars[0] * dw[(6 * np.arange(nb)[:, None] + np.arange(3)).ravel()]
    w_rows = (6 * np.arange(nb)[:, None] + 3 + np.arange(3)).ravel()
    out[q_rows] += np.matmul(ws.xq, dw[w_rows].reshape(nb, 3, cols)).reshape(4 * nb, cols)
    for d in range(p.bref.shape[0]):
        size = int(p.bsize[d])
        out[p.bzu[d] : p.bzu[d] + size] += ws.scalars[0] * dw[p.bzv[d] : p.bzv[d] + size]
    ntail = int(p.sv_u.shape[0] + np.sum(p.sv_ui >= 0))
    if ntail:
        nv = int(p.sizes[1])
        out[nu - ntail : nu] += ws.scalars[0] * dw[nv - ntail : nv]
    return out


@njit(cache=True)
def converged(size: float, previous: float, tol: float, estimate: bool = True) -> bool:
    """Chord-Newton stopping test on the update sizes ``max(|δU|∞, Δt |δV|∞)`` of two successive iterations.

    Converged when the update is below ``tol``, or (with ``estimate``) when the observed contraction
    ``ρ = size/previous`` (< 0.5) bounds the remaining error of the iterate, ``size ρ/(1 − ρ)``, below ``tol``
    (linear convergence of the chord iteration; saves the last, confirming iteration; needs two iterations).
    Without ``estimate`` only the update size counts, which leaves an error of about ``ρ tol``: the optimizer's
    engine uses that stricter test, because finite-difference checks of its adjoint gradient resolve the
    difference (single_rod gradient check: max relative error 1.4e-5 with the estimate, < 1e-5 without).
    """
    if size <= tol:
        return True
    if not estimate or previous == np.inf:
        return False
    rho = size / previous
    return rho < 0.5 and size * rho / (1.0 - rho) <= tol


@njit(cache=True)
def refactor(size: float, previous: float, tol: float) -> bool:
    """Whether chord Newton refactorizes within a step, after an iteration with an older matrix (the reference
    stepper uses the same rule): when the iterations that matrix still needs at its observed contraction
    ``ρ = size/previous`` cost more than a refactorization (:data:`REFACTOR_COST` residual iterations) plus the
    iterations of a fresh matrix (:data:`FRESH_CONTRACTION`), or ``ρ`` ≥ :data:`STALE_CONTRACTION_MAX`."""
    if not previous < np.inf or size <= tol:
        return False
    rho = size / previous
    if rho >= STALE_CONTRACTION_MAX:
        return True
    remaining = np.log(size / tol)
    return remaining / -np.log(rho) > REFACTOR_COST + remaining / -np.log(FRESH_CONTRACTION)


@njit(cache=True)
def outlived(life_cost: float, life_steps: float, iterations: float) -> bool:
    """Whether the chord matrix is replaced after a step that took ``iterations``: the matrix has served
    ``life_steps`` steps (this one included) at a total of ``life_cost`` residual iterations, its factorization's
    :data:`REFACTOR_COST` included. A matrix grows stale as the state moves away from where it was built, so its
    steps take more iterations; the cost per step of its life is least when it is replaced once a step costs more
    than that average (the replacement rule for a rising running cost)."""
    return life_steps >= 2.0 and iterations > life_cost / life_steps


@njit(cache=True)
def charge(life: NDArray, iterations: float) -> bool:
    """Add a converged step of ``iterations`` to the chord matrix's ``life`` = [cost so far in residual iterations,
    steps served] (in place; :data:`REFACTOR_COST` and 0 when it was factorized) and return :func:`outlived`."""
    life[0] += iterations
    life[1] += 1.0
    return outlived(life[0], life[1], iterations)


@njit(cache=True)
def _predict(p: Packed, states: NDArray, k: int, u_bar: NDArray, h: float, dt: float, order: int) -> NDArray:
    """Newton start of step ``k → k+1``.

    BDF2 steps: V and λ extrapolated from the stored states — cubically (``order`` 3, ``4S_k − 6S_{k−1} +
    4S_{k−2} − S_{k−3}``, once four exist: the drummer's 10 s take 2.33 Newton iterations per step against 2.58 with the
    quadratic start, docs/reduced.md "Compiled engine"), quadratically (``order`` 2, ``3S_k − 3S_{k−1} + S_{k−2}``; linearly
    when ``states`` holds only two), linearly (``order`` 1, ``2S_k − S_{k−1}``) or held (``order`` 0, ``S_k``) —
    and U from the kinematic rows at that V (exact for c and z, ``U* = Ū + h V*``; for q with ``T`` at the
    extrapolated quaternion), so the first residual's kinematic rows nearly vanish. First step
    (BDF1): explicit Euler on U, V and λ held (``order`` 0: the previous state itself).
    """
    nu = p.sizes[0]
    nb = p.rmass.shape[0]
    prev = states[k]
    if k == 0 and order == 0:
        return prev.copy()
    if k == 0:
        s = prev.copy()
        for i in range(nb):
            qd = quat_rate_half(prev[7 * i + 3 : 7 * i + 7]) @ prev[nu + 6 * i + 3 : nu + 6 * i + 6]
            for a in range(3):
                s[7 * i + a] += dt * prev[nu + 6 * i + a]
            for a in range(4):
                s[7 * i + 3 + a] += dt * qd[a]
        for kk in range(7 * nb, nu):
            s[kk] += dt * prev[nu + 6 * nb + kk - 7 * nb]
        return s
    if k >= 3 and order >= 3:
        s = 4.0 * prev - 6.0 * states[k - 1] + 4.0 * states[k - 2] - states[k - 3]
    elif k >= 2 and order >= 2:
        s = 3.0 * prev - 3.0 * states[k - 1] + states[k - 2]
    elif order >= 1:
        s = 2.0 * prev - states[k - 1]
    else:
        s = prev.copy()
    for i in range(nb):
        qd = quat_rate_half(s[7 * i + 3 : 7 * i + 7]) @ s[nu + 6 * i + 3 : nu + 6 * i + 6]
        for a in range(3):
            s[7 * i + a] = u_bar[7 * i + a] + h * s[nu + 6 * i + a]
        for a in range(4):
            s[7 * i + 3 + a] = u_bar[7 * i + 3 + a] + h * qd[a]
    for kk in range(7 * nb, nu):
        s[kk] = u_bar[kk] + h * s[nu + 6 * nb + kk - 7 * nb]
    return s


# Inlined into run_chunk, its one caller: compiled apart, it would optimize the residual tree once more
# (docs/testing.md "numba's compile").
@njit(cache=True, inline="always")
def _newton(p: Packed, s: NDArray, u_bar: NDArray, v_bar: NDArray, h: float, dt: float, th: NDArray, thd: NDArray,
            tol: float, max_iter: int, ws: Workspace, estimate: bool, iterations: NDArray, k: int,
            exact_chord: bool) -> int:
    """Chord Newton on step ``k → k+1`` from ``s`` (updated in place); returns 0 converged, 1 not converged within
    ``max_iter``, 2 non-finite or singular, 3 an inverted cubature element. The chord matrix is the exact
    Jacobian with ``exact_chord``, else ``residual_jacobian(exact=False)``'s."""
    nu, nv = p.sizes[0], p.sizes[1]
    ns = s.shape[0]
    previous = np.inf
    fresh = False
    for it in range(max_iter):
        need = ws.scalars[0] == 0.0
        res, jac, _, _, _, min_det = residual_jacobian(p, s, u_bar, v_bar, h, th, thd, 1.0 / h, need, exact_chord)
        if not min_det > 0.0:
            return 3
        for a in range(ns):
            if not np.isfinite(res[a]):
                return 2
        if need:
            info = _factorize(p, jac, ws)
            if info != 0:
                return 2
            ws.scalars[0] = h
            ws.scalars[3] = REFACTOR_COST
            ws.scalars[4] = 0.0
            fresh = True
        delta = condensed_solve(p, ws, res)
        size = 0.0
        for a in range(ns):
            if not np.isfinite(delta[a]):
                return 2
            s[a] += delta[a]
            if a < nu:
                size = max(size, abs(delta[a]))
            elif a < nu + nv:
                size = max(size, dt * abs(delta[a]))
        if converged(size, previous, tol, estimate):
            iterations[k + 1] = it + 1
            if charge(ws.scalars[3:5], it + 1.0):
                ws.scalars[0] = 0.0
            return 0
        if (not fresh) and refactor(size, previous, tol):
            ws.scalars[0] = 0.0
        previous = size
        fresh = False
    return 1


@njit(cache=True)
def run_chunk(
    p: Packed,
    states: NDArray,
    iterations: NDArray,
    k0: int,
    k1: int,
    dt: float,
    thetas: NDArray,
    theta_dots: NDArray,
    tol: float,
    max_iter: int,
    ws: Workspace,
    estimate: bool,
    exact_chord: bool,
) -> tuple[int, int]:
    """Advance steps ``k0 … k1−1`` → ``states[k0+1 … k1]`` (BDF1 for step 0, BDF2 after); returns (status, step).

    Chord Newton from :func:`_predict`'s start, stopped by :func:`converged`; the cached factorization is rebuilt
    when ``h`` changes, within a step when :func:`refactor` says so, and after a step when :func:`outlived` does.

    Args:
        p: packed system. states: (n+1, n_S), ``states[0]`` the start, filled in place. iterations: (n+1,).
        dt: time step [s]. thetas, theta_dots: motor values and rates at ``t_k = k dt`` (n+1, n_m).
        tol: Newton tolerance on ``max(|δU|∞, dt |δV|∞)``. max_iter: Newton iteration cap.
        ws: the chord factorization cache (in place).
        estimate: stop on the estimated remaining error too (:func:`converged`).
        exact_chord: factorize the exact Jacobian for the chord iterations (False: without its curvature and
            damping-derivative terms, :func:`residual_jacobian`; same converged states, cheaper refactorizations).

    No argument has a default: numba compiles a call that omits one as another signature, and this function's
    whole call tree with it (minutes of compile in each process that makes such a call).
    """
    nu, nv = p.sizes[0], p.sizes[1]
    for k in range(k0, k1):
        prev = states[k]
        if k == 0:
            u_bar = prev[:nu].copy()
            v_bar = prev[nu : nu + nv].copy()
            h = dt
        else:
            prev2 = states[k - 1]
            u_bar = (4.0 / 3.0) * prev[:nu] - (1.0 / 3.0) * prev2[:nu]
            v_bar = (4.0 / 3.0) * prev[nu : nu + nv] - (1.0 / 3.0) * prev2[nu : nu + nv]
            h = (2.0 / 3.0) * dt
        if ws.scalars[0] != h:
            ws.scalars[0] = 0.0  # invalidate: the factorization belongs to another h
        th = thetas[k + 1]
        thd = theta_dots[k + 1]
        status = 1
        # Newton starts, most to least extrapolated: a fast step can carry the extrapolation into a state the
        # reduced model cannot represent (an inverted cubature element) or out of the chord iteration's reach,
        # while the step's solution itself is fine. The converged state does not depend on the start (to the Newton
        # tolerance).
        for order in range(3, -1, -1):
            s = _predict(p, states, k, u_bar, h, dt, order)
            status = _newton(p, s, u_bar, v_bar, h, dt, th, thd, tol, max_iter, ws, estimate, iterations, k,
                             exact_chord)
            if status == 0:
                break
            ws.scalars[0] = 0.0  # the next start gets a fresh factorization
        if status != 0:
            return status, k + 1
        states[k + 1] = s
    return 0, k1


@njit(cache=True)
def condensed_solve_transposed(p: Packed, ws: Workspace, b: NDArray) -> NDArray:
    """``x = J⁻ᵀ b`` (n_S,) with the condensed factorization of ``J`` in ``ws`` (for the discrete adjoint).

    With ``X = −J_UU⁻¹ J_UW`` and ``K = J_WW + J_WU X``: ``Kᵀ x_W = b_W + Xᵀ b_U``, then
    ``x_U = J_UU⁻ᵀ (b_U − J_WUᵀ x_W)``.
    """
    nu, nv, m = p.sizes[0], p.sizes[1], p.sizes[2]
    nb = p.rmass.shape[0]
    h = ws.scalars[0]
    bu = b[:nu]
    rhs = b[nu:].copy()
    rq = np.empty(3)
    for i in range(nb):
        for a in range(3):
            rhs[6 * i + a] += h * bu[7 * i + a]
        _transposed_product_into(ws.xq[i], bu, 7 * i + 3, rq, 0)  # Xᵀ b_U on the quaternion rows
        for a in range(3):
            rhs[6 * i + 3 + a] += rq[a]
    nd = p.bref.shape[0]
    for d in range(nd):
        for k in range(p.bsize[d]):
            rhs[p.bzv[d] + k] += h * bu[p.bzu[d] + k]
    ntail = p.sv_u.shape[0] + _count_integral(p)
    for k in range(ntail):
        rhs[nv - ntail + k] += h * bu[nu - ntail + k]
    xw = _lu_solve_transposed(ws.lu, ws.ipiv, rhs)
    y = bu - ws.jwu.T @ xw
    out = np.empty(nu + nv + m)
    out[nu:] = xw
    for k in range(nu):
        out[k] = y[k]
    for i in range(nb):
        _transposed_product_into(ws.jqq_inv[i], y, 7 * i + 3, out, 7 * i + 3)
    return out


@njit(cache=True, nogil=True)
def factorize_exact(p: Packed, jac: NDArray, h: float, ws: Workspace) -> int:
    """Condensed LU of an exact Jacobian ``jac`` (n_S, n_S) built with ``h`` into ``ws`` (LAPACK info)."""
    info = _factorize(p, jac, ws)
    ws.scalars[0] = h
    return info
