"""The coupled servo–structure modes of a robot: its DAE linearized at a static equilibrium, servos included.

A modelled servo (:mod:`retarget.sim.servo`) is a spring ``kp`` on its shaft with the rotor's inertia behind it and
the back EMF's damping ``stall_torque / max_velocity`` on it (with ``kd`` and friction): it forms modes with the
structure it holds. At a static equilibrium ``(U*, λ*)`` at given goals (default: every goal 0) the engines'
residual at ``V = V̄ = 0``, ``h = 1``, Baumgarte ``a = 1`` (what the static solves use) gives, in tangent
coordinates ``δW`` (V-space: a rigid body's rotation increment in its body frame; ``δU = T δW``,
:func:`retarget.sim.statics.tangent_map`)::

    K = ∂R_V/∂U T     (nV, nV)  [N/m], [N m/rad]: elasticity, gravity, the constraints' curvature λ·∂²C,
                                the servo's kp (and ki on the integral state, 1 on the e rows)
    G = ∂R_λ/∂U T     (m, nV)   the constraint rows' Jacobian (the motor rows' shaft columns included)
    M                 (nV, nV)  the generalized mass: rigid diag(m I, I_body), FEM consistent mass (the reduced
                                model's M(U)), the servo's rotor inertia (:func:`retarget.sim.servo.servo_mass`)
    D = ∂R_V/∂V − M   (nV, nV)  Rayleigh αM + βK, the servo's back EMF, kd, viscous and (linearized, smoothed)
                                Coulomb friction, the e rows' identity

and the linearized DAE ``M δẄ + D δẆ + K δW + Gᵀ δλ = 0``, ``G δW = 0`` (the holonomic form: the engines'
Baumgarte term only adds a decaying drift mode, not part of the physics).

Undamped modes: the lowest eigenvalues ``ω²`` of the saddle-point pencil ``[[K, Gᵀ], [G, 0]] x = ω² [[M, 0], [0,
0]] x`` on the mechanical coordinates (the integral states ι and their rates e left out: they have no mass and no
spring), K symmetrized (its skew part is round-off at an equilibrium), by shift-invert Lanczos on one sparse
factorization (the full FEM: ``eigsh`` in the pencil's semi-inner product) or, dense, by the symmetric shift-invert
problem on the constraints' null space (the reduced model). Damped modes: eigenvalues ``s`` of the first-order pencil ``[[0, I, 0], [−K, −D, −Gᵀ], [G, 0, 0]] x = s
[[I, 0, 0], [0, M, 0], [0, 0, 0]] x`` (all coordinates: the integral states take part), by shift-invert Arnoldi
(``eigs``, the start vector purified by three applications of the operator so that the pencil's infinite
eigenvalues stay out) or dense on the constraints' null space; each undamped mode's damping ratio ``ζ = −Re s / |s|`` comes from the damped
eigenvalue whose shape matches it best (mass-weighted modal assurance, ties going to ``|s|`` nearest ω); an
overdamped mode (its best match real) has ``ζ = −(s₁ + s₂) / (2 √(s₁ s₂))`` with the real eigenvalue on the other
side of ω most like it (exact for one DOF; the fit rig's XM540-W270 mode at 15 Hz: ζ = 2.4).

Per modelled servo the card's mode (:func:`servo_card`) is the one, among the lowest :data:`DEFAULT_MODES`, with the
largest share of strain energy in that servo's spring, ``k_s δθ_s² / δᵀKδ`` (``k_s = −∂τ/∂θ``, kp below
saturation). Its contrast ``f_ideal_servo`` is the structure's own mode: the same robot with every servo ideal
(each shaft held at its goal), the mode most like it (mass-weighted modal assurance on the shared coordinates, at
least :data:`IDEAL_MATCH`; none for a mode that is mostly the rotor swinging on its own spring). Its reference: the
full FEM when the card is of a reduced model; Euler–Bernoulli theory (:func:`retarget.fem.beam_theory.servo_beam_modes`) for a rod on one servo standing
or hanging along gravity (:func:`rod_on_servo_beam`); none otherwise.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import ArrayLike, NDArray

from retarget.errors import InputError
from retarget.fem.beam_theory import ServoBeam, round_section, servo_beam_modes
from retarget.fem.model_card import ServoModeCard
from retarget.fem.modal import clamp_of, root_interface
from retarget.model.servo import IDEAL, SERVO_MODELS, ServoParams
from retarget.sim.bdf import StepInputs
from retarget.sim.dae import history_jacobian, residual_and_jacobian
from retarget.sim.reduced.stepper import residual_and_jacobian as reduced_residual
from retarget.sim.reduced.stepper import solve_static as reduced_static
from retarget.sim.reduced.system import with_servos as reduced_with_servos
from retarget.sim.rotation import quat_rate_matrix
from retarget.sim.servo import ServoLayout, servo_torque
from retarget.sim.statics import solve_static, tangent_map
from retarget.sim.system import System, build_system, with_servos

if TYPE_CHECKING:
    from retarget.model.robot import RobotModel
    from retarget.sim.reduced.system import ReducedSystem

#: A matrix of :class:`EquilibriumLinearization`: sparse (csr) for the full FEM, dense for a reduced model.
Matrix = Union[sp.csr_matrix, NDArray[np.float64]]

__all__ = [
    "DEFAULT_MODES",
    "IDEAL_MATCH",
    "CoupledModes",
    "EquilibriumLinearization",
    "ServoMode",
    "coupled_modes",
    "linearize_equilibrium",
    "linearize_reduced_equilibrium",
    "rod_on_servo_beam",
    "servo_card",
    "servo_modes",
]

#: Undamped modes searched per model (at least two per modelled servo): the card's mode of a motor is the one of
#: these with the largest share of strain energy in its spring.
DEFAULT_MODES: int = 12
#: The structure's own mode (every servo ideal) matches a coupled mode when their mass-weighted modal assurance is
#: at least this; a mode mostly of the rotor itself (the bare XM430's √(kp/J) = 12.3 Hz) has none.
IDEAL_MATCH: float = 0.5
#: Shift of the undamped pencil [rad²/s²] and of the damped one [1/s]: below every stable mode, so that the
#: factorization exists and the lowest modes are the largest eigenvalues of the shifted inverse.
_SHIFT_UNDAMPED: float = -1.0
_SHIFT_DAMPED: float = -0.5
#: An overdamped mode's second real eigenvalue needs at least this modal assurance with the mode.
_PARTNER_MATCH: float = 0.1
#: Pencils up to this size are solved dense (the reduced models), larger ones sparse (the full FEM).
_DENSE_LIMIT: int = 800


@dataclass(frozen=True, eq=False)
class EquilibriumLinearization:
    """A robot's DAE linearized at a static equilibrium (module docstring), in tangent coordinates.

    Attributes:
        stiffness: K (nV, nV). damping: D (nV, nV). mass: M (nV, nV). constraints: G (m, nV). Sparse (csr) for
            the full FEM, dense for a reduced model.
        servo: where the modelled servos' coordinates are (V indices = tangent indices).
        springs: per modelled servo its tangent spring ``−∂τ/∂θ`` at the equilibrium [N m/rad] (n_s,).
        goals: the motors' goals of the equilibrium [rad] (n_motors,).
        motors: the motor names.
        label: the model (``"full FEM, 21 094 DOF"``, ``"reduced, 8+8 coordinates"``: per flexible part).
    """

    stiffness: Matrix
    damping: Matrix
    mass: Matrix
    constraints: Matrix
    servo: ServoLayout
    springs: NDArray[np.float64]
    goals: NDArray[np.float64]
    motors: tuple[str, ...]
    label: str

    @property
    def n_v(self) -> int:
        """Tangent coordinates."""
        return int(self.mass.shape[0])

    @property
    def mechanical(self) -> NDArray[np.int64]:
        """The tangent coordinates of the undamped problem: all but the servos' integral states."""
        keep = np.ones(self.n_v, dtype=bool)
        keep[self.servo.v_e[self.servo.v_e >= 0]] = False
        return np.flatnonzero(keep)


@dataclass(frozen=True, eq=False)
class CoupledModes:
    """The lowest undamped modes of a :class:`EquilibriumLinearization` robot and their damping.

    Attributes:
        frequencies: undamped natural frequencies [Hz] (k,), ascending (an unstable mode: ``−√|ω²| / 2π``).
        shapes: the modes in tangent coordinates, M-normalized (nV, k) (zero on the integral states).
        shares: per mode and modelled servo, the servo spring's share of the mode's strain energy (k, n_s).
        damping_ratios: per mode ζ of the damped eigenvalue that matches it (k,); NaN where none does (or not
            computed).
    """

    frequencies: NDArray[np.float64]
    shapes: NDArray[np.float64]
    shares: NDArray[np.float64]
    damping_ratios: NDArray[np.float64]


@dataclass(frozen=True)
class ServoMode:
    """The coupled servo–structure mode of one motor in one model.

    Attributes:
        motor: the motor. servo_index: its modelled servo's index. mode: rank among the lowest modes (0-based).
        frequency: undamped [Hz]. damping_ratio: [-] (NaN: no damped eigenvalue matched). share: [-].
    """

    motor: str
    servo_index: int
    mode: int
    frequency: float
    damping_ratio: float
    share: float


def _goals(n_motors: int, goals: ArrayLike | None) -> NDArray[np.float64]:
    if goals is None:
        return np.zeros(n_motors)
    g = np.atleast_1d(np.asarray(goals, dtype=float))
    if g.shape != (n_motors,) or not np.all(np.isfinite(g)):
        raise InputError(f"servo modes: expected {n_motors} finite goals [rad], got {g.tolist()}")
    return g


def _springs(layout: ServoLayout, u: NDArray[np.float64], goals: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per modelled servo ``−∂τ/∂θ`` at rest at shaft angle ``u[θ]`` (kp below saturation, 0 saturated)."""
    out = np.zeros(layout.n_servos)
    for m, k in enumerate(layout.motor_servo):
        if k < 0:
            continue
        iota = u[layout.u_iota[k]] if layout.u_iota[k] >= 0 else 0.0
        _, d = servo_torque(layout.params[k], float(goals[m]), 0.0, float(u[layout.u_theta[k]]), 0.0, float(iota))
        out[k] = -d[2]
    return out


def linearize_equilibrium(system: System, goals: ArrayLike | None = None) -> EquilibriumLinearization:
    """The full engine's DAE linearized at its gravity equilibrium at ``goals`` (module docstring).

    Args:
        system: the full system (:func:`retarget.sim.system.build_system`).
        goals: per motor its goal [rad] (the angle of an ideal motor) (n_motors,); default every goal 0.

    Raises:
        NewtonFailed: no equilibrium (e.g. a load beyond a servo's stall torque).
    """
    g = _goals(len(system.motors), goals)
    state = solve_static(system, g)
    nu, nv = system.n_u, system.n_v
    zero = np.zeros(nv)
    lin = residual_and_jacobian(system, np.concatenate([state.u, zero, state.lam]), StepInputs.static(state.u, nv, g))
    tmap = tangent_map(system, state.u)
    mass = history_jacobian(system, 1.0, -1.0)[nu : nu + nv, nu : nu + nv].tocsr()
    return EquilibriumLinearization(
        (lin.j_vu @ tmap).tocsr(), (lin.j_vv - mass).tocsr(), mass, (lin.j_lu @ tmap).tocsr(), system.servo,
        _springs(system.servo, state.u, g), g, tuple(system.motors), f"full FEM, {_thousands(system.n_v)} DOF")


def linearize_reduced_equilibrium(reduced: ReducedSystem, goals: ArrayLike | None = None) -> EquilibriumLinearization:
    """A reduced model's DAE linearized at its gravity equilibrium at ``goals`` (dense; the reference stepper's
    residual, :func:`retarget.sim.reduced.stepper.residual_and_jacobian`).

    Args:
        reduced: a :class:`retarget.sim.reduced.ReducedSystem`.
        goals: per motor its goal [rad] (n_motors,); default every goal 0.
    """
    g = _goals(len(reduced.motors), goals)
    state = reduced_static(reduced, g)
    nu, nv, nb = reduced.n_u, reduced.n_v, reduced.n_rigid
    zero = np.zeros(nv)
    lin = reduced_residual(reduced, np.concatenate([state.u, zero, state.lam]), StepInputs.static(state.u, nv, g))
    assert lin.jacobian is not None and lin.mass is not None
    tmap = np.zeros((nu, nv))
    for i in range(nb):
        tmap[7 * i : 7 * i + 3, 6 * i : 6 * i + 3] = np.eye(3)
        q = state.u[7 * i + 3 : 7 * i + 7]
        tmap[7 * i + 3 : 7 * i + 7, 6 * i + 3 : 6 * i + 6] = 0.5 * quat_rate_matrix(q)
    tmap[7 * nb :, 6 * nb :] = np.eye(nu - 7 * nb)
    jac = lin.jacobian
    sizes = "+".join(str(b.size) for b in reduced.bodies)
    return EquilibriumLinearization(
        jac[nu : nu + nv, :nu] @ tmap, jac[nu : nu + nv, nu : nu + nv] - lin.mass, lin.mass.copy(),
        jac[nu + nv :, :nu] @ tmap, reduced.servo, _springs(reduced.servo, state.u, g), g, tuple(reduced.motors),
        f"reduced, {sizes} coordinates")


def _thousands(n: int) -> str:
    """``21 075``: the docs' digit grouping."""
    return f"{n:,}".replace(",", " ")


def _dense(a: Matrix) -> NDArray[np.float64]:
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def _undamped(lin: EquilibriumLinearization, n_modes: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(ω² (k,), shapes (n_mech, k))``: the lowest undamped modes on the mechanical coordinates, M-normalized."""
    keep = lin.mechanical
    nk, m = len(keep), lin.constraints.shape[0]
    k_full = lin.stiffness[keep][:, keep] if sp.issparse(lin.stiffness) else lin.stiffness[np.ix_(keep, keep)]
    mass = lin.mass[keep][:, keep] if sp.issparse(lin.mass) else lin.mass[np.ix_(keep, keep)]
    g = lin.constraints[:, keep]
    sym = 0.5 * (k_full + k_full.T)
    count = min(n_modes, nk - m)
    sigma = _SHIFT_UNDAMPED
    if count <= 0:  # every coordinate held (rigid bodies on ideal motors)
        return np.zeros(0), np.zeros((nk, 0))
    if nk + m <= _DENSE_LIMIT:
        # On the constraints' null space N: the largest μ of N̂ᵀMN̂ y = μ N̂ᵀ(K − σM)N̂ y, μ = 1 / (ω² − σ) (N̂: N
        # scaled to a unit diagonal of the right-hand side): symmetric, real shapes, degenerate pairs kept apart.
        basis = sla.null_space(_dense(g))
        kr, mr = basis.T @ _dense(sym) @ basis, basis.T @ _dense(mass) @ basis
        scale = 1.0 / np.sqrt(np.abs(np.diag(kr - sigma * mr)))
        kr, mr = scale[:, None] * kr * scale, scale[:, None] * mr * scale
        r = len(kr)
        try:
            mu, y = sla.eigh(mr, kr - sigma * mr, subset_by_index=[r - count, r - 1])
        except np.linalg.LinAlgError:  # an unstable equilibrium: K − σM is not positive definite
            mu, y = sla.eigh(kr - sigma * mr, mr)
            mu, y = 1.0 / mu[:count][::-1], y[:, :count][:, ::-1]
        lam = sigma + 1.0 / mu[::-1]
        shapes = basis @ (scale[:, None] * y[:, ::-1])
    else:
        a = sp.bmat([[sym, g.T], [g, None]], format="csc")
        b = sp.block_diag([mass, sp.csr_matrix((m, m))], format="csc")
        lu = spla.splu((a - sigma * b).tocsc(), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.1,
                       options={"SymmetricMode": True})
        opinv = spla.LinearOperator(a.shape, matvec=lu.solve, dtype=float)
        start = np.random.default_rng(0).standard_normal(a.shape[0])  # ARPACK's own start vector is random
        lam, vec = spla.eigsh(a, k=count, M=b, sigma=sigma, OPinv=opinv, which="LM", tol=1e-10, v0=start)
        order = np.argsort(lam)
        lam, shapes = lam[order], vec[:nk, order]
    norms = np.sqrt(np.einsum("ik,ik->k", shapes, mass @ shapes))
    return lam, shapes / norms


def _damped_operator(lin: EquilibriumLinearization, sigma: float) -> spla.LinearOperator:
    """``x ↦ (A − σB)⁻¹ B x`` of the first-order pencil (module docstring) through its Schur complement: one sparse
    factorization of ``[[K + σD + σ²M, Gᵀ], [G, 0]]`` (the undamped pencil's pattern) instead of the first-order
    matrix's, whose identity blocks fill in."""
    nv, m = lin.n_v, lin.constraints.shape[0]
    k, d, mass, g = lin.stiffness, lin.damping, lin.mass, lin.constraints
    schur = sp.bmat([[k + sigma * d + sigma**2 * mass, g.T], [g, None]], format="csc")
    lu = spla.splu(schur, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.1, options={"SymmetricMode": True})
    shifted = (d + sigma * mass).tocsr()

    def apply(x: NDArray[np.float64]) -> NDArray[np.float64]:
        # (A − σB) y = B x with B x = (x₁, M x₂, 0): y₂ = x₁ + σ y₁ and
        # [[K + σD + σ²M, Gᵀ], [G, 0]] [y₁; y₃] = [−(M x₂ + (D + σM) x₁); 0].
        x1, x2 = x[:nv], x[nv : 2 * nv]
        y13 = lu.solve(np.concatenate([-(mass @ x2 + shifted @ x1), np.zeros(m)]))
        y1 = y13[:nv]
        return np.concatenate([y1, x1 + sigma * y1, y13[nv:]])

    return spla.LinearOperator((2 * nv + m, 2 * nv + m), matvec=apply, dtype=float)


def _sparse_spectrum(lin: EquilibriumLinearization, sigma: float,
                     count: int) -> tuple[NDArray[np.complex128], NDArray[np.complex128]]:
    """The ``count`` damped eigenvalues nearest ``sigma`` [1/s] and their δW parts (nV, count), by shift-invert
    Arnoldi (:func:`_damped_operator`)."""
    n_state = 2 * lin.n_v + lin.constraints.shape[0]
    op = _damped_operator(lin, sigma)
    v0 = np.random.default_rng(0).standard_normal(n_state)
    for _ in range(3):
        v0 = op @ v0  # the pencil's infinite eigenvalues (index 3) have no component left
    nu_, vec = spla.eigs(op, k=min(count, n_state - 2), which="LM", v0=v0, tol=1e-9)
    finite = np.abs(nu_) > 1e-12 * np.max(np.abs(nu_))
    return sigma + 1.0 / nu_[finite], vec[: lin.n_v, finite]


def _mac(phi: NDArray[np.float64], mass: Matrix, disp: NDArray[np.complex128]) -> NDArray[np.float64]:
    """Mass-weighted modal assurance of the real shape ``phi`` (nV,) with each column of ``disp`` (nV, k)."""
    md = mass @ disp
    dnorm = np.real(np.einsum("ik,ik->k", disp.conj(), md))
    return np.abs(phi @ md) ** 2 / (dnorm * float(phi @ (mass @ phi)))


def _damping_ratios(lin: EquilibriumLinearization, shapes: NDArray[np.float64],
                    wanted: Sequence[int]) -> NDArray[np.float64]:
    """Per undamped mode (columns of ``shapes``, nV rows) ζ of the damped eigenvalue matching it; only the modes in
    ``wanted`` are matched (NaN elsewhere)."""
    nv, m = lin.n_v, lin.constraints.shape[0]
    out = np.full(shapes.shape[1], np.nan)
    if not len(wanted):
        return out
    sigma = _SHIFT_DAMPED
    dense = 2 * nv + m <= _DENSE_LIMIT
    if dense:
        # On the constraints' null space N (δW = N y): [[0, I], [−NᵀKN, −NᵀDN]] vs [[I, 0], [0, NᵀMN]].
        k, d, mass, g = (_dense(x) for x in (lin.stiffness, lin.damping, lin.mass, lin.constraints))
        basis = sla.null_space(g)
        r = basis.shape[1]
        eye = np.eye(r)
        a = np.block([[np.zeros((r, r)), eye], [-basis.T @ k @ basis, -basis.T @ d @ basis]])
        b = sla.block_diag(eye, basis.T @ mass @ basis)
        nu_, vec = sla.eig(sla.lu_solve(sla.lu_factor(a - sigma * b), b))
        finite = np.abs(nu_) > 1e-12 * np.max(np.abs(nu_))
        s, disp = sigma + 1.0 / nu_[finite], (basis @ vec[:r])[:, finite]
    else:
        s, disp = _sparse_spectrum(lin, sigma, 2 * (max(wanted) + 1) + 8)
    upper = s.imag >= 0.0  # one of each conjugate pair; real (overdamped) eigenvalues kept
    s, disp = s[upper], disp[:, upper]
    for j in wanted:
        phi = shapes[:, j]
        omega = math.sqrt(abs(float(phi @ (lin.stiffness @ phi)) / float(phi @ (lin.mass @ phi))))
        mac = _mac(phi, lin.mass, disp)
        size = np.abs(s)
        # Shape first, then |s| near ω: an integral state's slow real root can share a mode's shape exactly.
        best = int(np.argmax(mac * np.minimum(size, omega) / np.maximum(size, omega)))
        if abs(s[best].imag) > 1e-9 * size[best]:
            out[j] = -s[best].real / size[best]
            continue
        # Overdamped: the mode's two real eigenvalues, one on each side of ω (s₁ s₂ = ω² for one DOF); the second
        # may lie beyond the eigenvalues found, so look near ω² / s₁ too.
        cands, cand_mac = s, mac
        if not dense and s[best].real < 0.0:
            near, near_disp = _sparse_spectrum(lin, omega**2 / s[best].real, 6)
            cands, cand_mac = np.concatenate([s, near]), np.concatenate([mac, _mac(phi, lin.mass, near_disp)])
        real = np.abs(cands.imag) <= 1e-9 * np.abs(cands)
        other = np.flatnonzero(real & ((np.abs(cands) - omega) * (size[best] - omega) < 0.0))
        if len(other):
            partner = int(other[np.argmax(cand_mac[other])])
            # Strong non-proportional damping splits the shape too (the slow root: the structure creeping, the
            # fast one: the rotor), so the partner only needs some of the mode's shape.
            if cand_mac[partner] >= _PARTNER_MATCH and s[best].real * cands[partner].real > 0.0:
                s1, s2 = s[best].real, cands[partner].real
                out[j] = -(s1 + s2) / (2.0 * math.sqrt(s1 * s2))
    return out


def coupled_modes(lin: EquilibriumLinearization, n_modes: int | None = None,
                  damped: Sequence[int] | None = ()) -> CoupledModes:
    """The lowest undamped modes of ``lin``, their servo shares and (for the modes in ``damped``) damping ratios.

    Args:
        lin: the linearized robot.
        n_modes: modes (default :data:`DEFAULT_MODES`, at least two per modelled servo).
        damped: indices of the modes whose damping ratio to compute (None: all of them; empty: none).
    """
    n = max(DEFAULT_MODES, 2 * lin.servo.n_servos) if n_modes is None else int(n_modes)
    keep = lin.mechanical
    lam, shapes_m = _undamped(lin, n)
    shapes = np.zeros((lin.n_v, len(lam)))
    shapes[keep] = shapes_m
    energy = np.einsum("ik,ik->k", shapes, lin.stiffness @ shapes)
    shares = (lin.springs[None, :] * shapes[lin.servo.v_omega].T ** 2) / energy[:, None]
    freqs = np.sign(lam) * np.sqrt(np.abs(lam)) / (2.0 * math.pi)
    wanted = range(len(lam)) if damped is None else list(damped)
    return CoupledModes(freqs, shapes, shares, _damping_ratios(lin, shapes, wanted))


def _selection(lin: EquilibriumLinearization, modes: CoupledModes) -> list[tuple[str, int, int]]:
    """(motor, servo index, mode index) per modelled servo: the mode with the largest share of its spring."""
    return [(lin.motors[m], int(k), int(np.argmax(modes.shares[:, k])))
            for m, k in enumerate(lin.servo.motor_servo) if k >= 0]


def servo_modes(lin: EquilibriumLinearization,
                n_modes: int | None = None) -> tuple[tuple[ServoMode, ...], CoupledModes]:
    """Per modelled servo its coupled servo–structure mode (module docstring), and the modes it was chosen from
    (damping ratios computed for the chosen ones only)."""
    modes = coupled_modes(lin, n_modes, damped=())
    picks = _selection(lin, modes)
    ratios = _damping_ratios(lin, modes.shapes, sorted({j for _, _, j in picks}))
    modes = CoupledModes(modes.frequencies, modes.shapes, modes.shares, ratios)
    return tuple(ServoMode(motor, k, j, float(modes.frequencies[j]), float(ratios[j]), float(modes.shares[j, k]))
                 for motor, k, j in picks), modes


def _ideal_match(lin: EquilibriumLinearization, shape: NDArray[np.float64], ideal_lin: EquilibriumLinearization,
                 ideal: CoupledModes) -> float | None:
    """The frequency of the ideal-servo mode most like ``shape`` (mass-weighted MAC on the coordinates both
    share: every one but the servo tail), None below :data:`IDEAL_MATCH`."""
    n = ideal_lin.n_v
    if not len(ideal.frequencies) or n > lin.n_v:
        return None
    mass = ideal_lin.mass
    a = shape[:n]
    ma = mass @ a
    norm_a = float(a @ ma)
    if not norm_a > 0.0:
        return None
    mac = (ideal.shapes.T @ ma) ** 2 / (norm_a * np.einsum("ik,ik->k", ideal.shapes, mass @ ideal.shapes))
    best = int(np.argmax(mac))
    return float(ideal.frequencies[best]) if mac[best] >= IDEAL_MATCH else None


def _rotate(v: NDArray[np.float64], axis: NDArray[np.float64], angle: float) -> NDArray[np.float64]:
    """``v`` turned by ``angle`` [rad] about the unit ``axis`` (Rodrigues)."""
    c, s = math.cos(angle), math.sin(angle)
    return v * c + np.cross(axis, v) * s + axis * (axis @ v) * (1.0 - c)


def rod_on_servo_beam(model: RobotModel, goals: ArrayLike | None = None) -> ServoBeam | None:
    """The Euler–Bernoulli model of a rod on one servo (:class:`retarget.fem.beam_theory.ServoBeam`), or None when
    ``model`` is not one.

    It is one when the robot has one motor, a modelled servo on a hinge, and one generated rod whose root interface
    is on the motor's child link (the hub: horn, clamp) and whose other interface (if any) is on a link with no
    joint (the tip mass); every other link is welded to the world; the rod is perpendicular to the hinge, its root
    and tip on the line through the pivot along the rod, and the rod along gravity at the goal (standing or
    hanging: a transverse load would bend it, which the beam model leaves out). The rod's nominal material is used
    (the reference is the physics, not the calibrated mesh).
    """
    if len(model.motors) != 1 or len(model.flexible_parts) != 1:
        return None
    servo = model.servo_list[0]
    joint = model.joint(model.motors[0])
    part = model.flexible_parts[0]
    gen = part.generator
    if servo.ideal or joint.kind != "hinge" or gen is None or gen.kind != "rod" or joint.child is None:
        return None
    root = root_interface(model, part)
    hub = part.interfaces[root].link
    others = [itf.link for i, itf in enumerate(part.interfaces) if i != root]
    if hub != joint.child or len(others) > 1 or None in others:
        return None
    tip = others[0] if others else None
    fixed: set[str | None] = {None}
    rest = [j for j in model.joints if j.name != joint.name]
    for _ in range(len(rest) + 1):
        for j in rest:
            if j.kind == "fixed" and (j.parent in fixed or j.child in fixed):
                fixed |= {j.parent, j.child}
    if any(j.kind != "fixed" or j.parent not in fixed or j.child not in fixed for j in rest):
        return None
    if joint.parent not in fixed or tip in fixed or hub in fixed:
        return None
    if {link.name for link in model.links} - fixed - {hub, tip}:
        return None
    g = _goals(1, goals)[0]
    axis = np.asarray(joint.axis, dtype=float)
    pivot = np.asarray(joint.anchor, dtype=float)
    nodes = np.asarray(part.mesh.nodes, dtype=float)
    root_centre = nodes[np.unique(part.interfaces[root].nodes)].mean(axis=0)
    clamp = clamp_of(part, root)
    if clamp.end is None:
        return None
    length = gen.length
    # The part's z runs from its start face; clamped at its far end, the rod runs the other way.
    along = np.asarray(part.pose[:3, 2], dtype=float) * (1.0 if clamp.end < 0.5 * length else -1.0)
    lateral = np.cross(axis, along)
    if abs(axis @ along) > 1e-6 or abs((root_centre - pivot) @ lateral) > 1e-6 * length:
        return None
    gravity = np.asarray(model.gravity, dtype=float)
    along_g = _rotate(along, axis, g)
    if np.linalg.norm(np.cross(gravity, along_g)) > 1e-6 * max(float(np.linalg.norm(gravity)), 1e-300):
        return None
    hub_link = model.link(hub)
    arm = hub_link.com - pivot
    hub_inertia = (float(axis @ hub_link.inertia @ axis) + hub_link.mass * float(arm @ arm - (arm @ axis) ** 2)
                   + servo.rotor_inertia)
    tip_mass = tip_inertia = tip_offset = 0.0
    if tip is not None:
        tip_link = model.link(tip)
        offset = tip_link.com - (root_centre + length * along)
        if abs(offset @ lateral) > 1e-6 * length:
            return None
        tip_mass, tip_inertia = tip_link.mass, float(axis @ tip_link.inertia @ axis)
        tip_offset = float(offset @ along)
    material = part.nominal_material
    area, second = round_section(gen.diameter)
    return ServoBeam(length, material.youngs_modulus, second, material.density, area, servo.kp, hub_inertia,
                     hub_offset=float((root_centre - pivot) @ along), hub_moment=hub_link.mass * float(arm @ along),
                     tip_mass=tip_mass, tip_inertia=tip_inertia, tip_offset=tip_offset,
                     axial_gravity=-float(gravity @ along_g))


def _beam_reference(model: RobotModel, goals: NDArray[np.float64], n_modes: int) -> tuple[float, str] | None:
    """(frequency [Hz], name) of the Euler–Bernoulli reference's coupled mode, None when it does not apply."""
    beam = rod_on_servo_beam(model, goals)
    if beam is None:
        return None
    modes = servo_beam_modes(beam, n_modes=n_modes)
    j = int(np.argmax(modes.shares))
    return (float(modes.frequencies[j]), f"Euler-Bernoulli rod on the servo spring (nominal E, gravity's axial "
                                         f"load; Hermite, {modes.n_elements} elements)")


def _all_ideal(n_motors: int) -> list[ServoParams]:
    return [SERVO_MODELS[IDEAL]] * n_motors


def servo_card(model: RobotModel, reduced: ReducedSystem | None = None, goals: ArrayLike | None = None,
               n_modes: int | None = None) -> tuple[ServoModeCard, ...]:
    """The model card's servo rows (:class:`retarget.fem.model_card.ServoModeCard`): per modelled servo its
    coupled servo–structure mode.

    Without ``reduced`` the rows are of the full FEM of ``model`` (its own mesh, stiffness-calibrated), against
    Euler–Bernoulli theory for a rod on one servo (:func:`rod_on_servo_beam`) and without a reference otherwise.
    With ``reduced`` (the reduced model of ``model``, e.g. a planning model's) they are of the reduced model,
    against the full FEM of ``model`` driven by the reduced model's servos.

    Args:
        model: a :class:`retarget.model.RobotModel`.
        reduced: its :class:`retarget.sim.reduced.ReducedSystem`, or None.
        goals: per motor its goal [rad] at the equilibrium (default every goal 0: the reference pose).
        n_modes: undamped modes searched (default :data:`DEFAULT_MODES`, at least two per servo).

    Returns:
        One row per modelled servo, motor order; empty when every motor is ideal.

    Raises:
        NewtonFailed: no static equilibrium at the goals.
    """
    g = _goals(len(model.motors), goals)
    system = build_system(model)
    if reduced is not None:
        system = with_servos(system, reduced.servo.per_motor)
    if system.servo.ideal:
        return ()
    ideal = _all_ideal(len(model.motors))
    full_lin = linearize_equilibrium(system, g)
    full, full_modes = servo_modes(full_lin, n_modes)
    count = len(full_modes.frequencies)
    references: list[tuple[float, str] | None]
    if reduced is None:
        target, target_lin, target_modes = full, full_lin, full_modes
        ideal_lin = linearize_equilibrium(with_servos(system, ideal), g)
        references = [_beam_reference(model, g, count)] * len(full)
    else:
        target_lin = linearize_reduced_equilibrium(reduced, g)
        target, target_modes = servo_modes(target_lin, n_modes)
        ideal_lin = linearize_reduced_equilibrium(reduced_with_servos(reduced, ideal), g)
        by_motor = {r.motor: r.frequency for r in full}
        references = [(by_motor[r.motor], full_lin.label) for r in target]
    ideal_modes = coupled_modes(ideal_lin, count, damped=())
    rows = []
    for row, ref in zip(target, references):
        m = model.motors.index(row.motor)
        f_ref = None if ref is None else ref[0]
        rows.append(ServoModeCard(
            motor=row.motor, servo=target_lin.servo.servos[row.servo_index].model, goal=float(g[m]),
            mode=row.mode + 1, f_model=row.frequency, model=target_lin.label, f_reference=f_ref,
            reference="no reference" if ref is None else ref[1],
            error=None if f_ref is None else row.frequency / f_ref - 1.0,
            damping_ratio=None if not math.isfinite(row.damping_ratio) else row.damping_ratio, share=row.share,
            f_ideal_servo=_ideal_match(target_lin, target_modes.shapes[:, row.mode], ideal_lin, ideal_modes),
        ))
    return tuple(rows)
