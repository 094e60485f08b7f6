"""Euler–Bernoulli beam theory for clamped-free beams: the analytic reference of the FEM and simulator checks.

This module is an oracle: the FEM (:mod:`retarget.fem.cantilever`, :mod:`retarget.fem.modal`) and the simulator
(:mod:`retarget.sim.validation`) are checked against it and never call it to compute their own results.

Bending frequencies of a clamped-free beam of length ``L``, Young's modulus ``E``, second moment ``I``, density
``ρ`` and area ``A``::

    f_k = (β_k L)² / (2π L²) · sqrt(E I / (ρ A))   [Hz]

with ``β_k L`` the roots of ``1 + cos β cosh β = 0`` (:data:`BETA_L_CANTILEVER`). With a tip point mass ``M``
(no tip rotary inertia) and ``μ = M / (ρ A L)`` the first root solves::

    1 + cos β cosh β + μ β (cos β sinh β − sin β cosh β) = 0

(μ = 0 gives β = 1.8751040687). Static tip deflection under a tip load ``P`` [N] and a distributed load ``w``
[N/m]: ``δ = w L⁴ / (8 E I) + P L³ / (3 E I)``.

A beam on a servo (:class:`ServoBeam`): the clamp is a hub turning by ``φ`` about a pivot against a rotational
spring ``k`` (the servo's position gain) with rotary inertia ``J₀`` (rotor and horn about the pivot); the beam's root
sits ``e`` from the pivot along the beam, its tip carries a rigid mass ``m`` (centre of mass ``d`` beyond the end,
rotary inertia ``J_t``). In one bending plane, with ``w(s)`` the lateral displacement and ``ψ = w'`` the slope, the
energies of small motions are::

    T = ½ J₀ φ̇² + ½ ∫ ρA ẇ² ds + ½ m (ẇ(L) + d ψ̇(L))² + ½ J_t ψ̇(L)²
    V = ½ k φ² + ½ ∫ EI w''² ds − ½ g_a [m_h z_h + (ρAL + m) e] φ² − ½ ∫ N(s) ψ² ds − ½ m g_a d ψ(L)²
    w(0) = e φ,  ψ(0) = φ,  N(s) = g_a (m + ρA (L − s))

``g_a`` is gravity's component along the beam from tip to root (positive: the beam stands up and its weight
compresses it; the negative terms are the masses' fall as the beam tilts) and ``m_h z_h`` the hub's first moment
of mass along the beam about the pivot. :func:`servo_beam_modes` solves it with cubic Hermite elements (exact
stiffness and consistent mass per element, the axial-load term by 3-point Gauss, exact for the linear ``N``).
Without gravity and offsets (``g_a = e = d = 0``) the exact frequencies are the roots of the transcendental
frequency equation (:func:`servo_beam_roots`): ``w = A cosh βs + B sinh βs + C cos βs + D sin βs``,
``ω² = β⁴ EI / (ρA)``, with::

    w(0) = 0,   EI w''(0) + (J₀ ω² − k) w'(0) = 0,   EI w'''(L) + m ω² w(L) = 0,   EI w''(L) − J_t ω² w'(L) = 0

(``k → ∞``, ``J_t = 0`` is the cantilever with a tip mass above). At the default 80 elements the Hermite solution
agrees with it within 1e-8 in the lowest three modes (tested); more elements gain nothing (the discretization
error falls as h⁴ while rounding grows as the stiffness matrix's conditioning, h⁻⁴: 1e-5 at 400).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
import scipy.linalg as sla
from scipy.optimize import brentq

from retarget.errors import InputError

__all__ = [
    "BETA_L_CANTILEVER",
    "ServoBeam",
    "ServoBeamModes",
    "bending_frequency",
    "cantilever_beta",
    "cantilever_first_frequency",
    "cantilever_static_tip_deflection",
    "euler_bernoulli_frequencies",
    "euler_bernoulli_tip_deflection",
    "round_section",
    "servo_beam_modes",
    "servo_beam_roots",
]

#: Roots β_k L of 1 + cos βL cosh βL = 0 (clamped-free beam), first four modes.
BETA_L_CANTILEVER: tuple[float, ...] = (1.8751040687, 4.6940911330, 7.8547574382, 10.9955407349)


def round_section(diameter: float) -> tuple[float, float]:
    """Area [m²] and second moment of area [m⁴] of a solid round section of ``diameter`` [m]."""
    return math.pi * diameter**2 / 4.0, math.pi * diameter**4 / 64.0


def bending_frequency(
    beta_l: float | NDArray[np.float64], length: float, youngs_modulus: float, second_moment: float, density: float,
    area: float,
) -> float | NDArray[np.float64]:
    """(β L)² / (2π L²) √(E I / (ρ A)) [Hz], elementwise in ``beta_l``.

    Args:
        beta_l: Root(s) β L of the frequency equation [-], scalar or ``(k,)``.
        length: [m]. youngs_modulus: [Pa]. second_moment: [m⁴]. density: [kg/m³]. area: [m²].
    """
    return beta_l**2 / (2.0 * math.pi * length**2) * math.sqrt(youngs_modulus * second_moment / (density * area))


def euler_bernoulli_tip_deflection(
    force: float, length: float, youngs_modulus: float, second_moment: float
) -> float:
    """Cantilever tip deflection under a tip load, F L³ / (3 E I) [m]."""
    return force * length**3 / (3.0 * youngs_modulus * second_moment)


def euler_bernoulli_frequencies(
    length: float, youngs_modulus: float, second_moment: float, density: float, area: float, n_modes: int = 1
) -> NDArray[np.float64]:
    """Clamped-free bending frequencies (β_k L)² / (2π L²) √(E I / (ρ A)) [Hz], ``(n_modes,)`` (at most 4)."""
    beta_l = np.array(BETA_L_CANTILEVER[:n_modes])
    return bending_frequency(beta_l, length, youngs_modulus, second_moment, density, area)


def _frequency_equation(beta: float, mass_ratio: float) -> float:
    cb, sb, chb, shb = math.cos(beta), math.sin(beta), math.cosh(beta), math.sinh(beta)
    return 1.0 + cb * chb + mass_ratio * beta * (cb * shb - sb * chb)


def cantilever_beta(mass_ratio: float) -> float:
    """The first root ``β = β₁ L`` of the cantilever-with-tip-mass frequency equation.

    Args:
        mass_ratio: ``μ = M_tip / (ρ A L)`` ≥ 0.
    """
    if not mass_ratio >= 0:
        raise InputError(f"tip mass ratio must be non-negative, got {mass_ratio}")
    grid = np.linspace(1e-6, 2.0, 2001)
    vals = np.array([_frequency_equation(b, mass_ratio) for b in grid])
    idx = np.nonzero(np.sign(vals[:-1]) != np.sign(vals[1:]))[0]
    if len(idx) == 0:
        raise InputError(f"no root of the frequency equation for mass ratio {mass_ratio}")
    k = int(idx[0])
    return float(brentq(_frequency_equation, grid[k], grid[k + 1], args=(mass_ratio,), xtol=1e-14, rtol=1e-14))


def cantilever_first_frequency(
    length: float, diameter: float, youngs_modulus: float, density: float, tip_mass: float = 0.0
) -> float:
    """First natural frequency f₁ [Hz] of a round cantilever (``diameter`` [m]) with a tip point mass [kg]."""
    area, inertia = round_section(diameter)
    beta = cantilever_beta(tip_mass / (density * area * length))
    return float(bending_frequency(beta, length, youngs_modulus, inertia, density, area))


def cantilever_static_tip_deflection(
    length: float, diameter: float, youngs_modulus: float, density: float, tip_mass: float, gravity: float
) -> float:
    """Tip deflection [m] of a horizontal round cantilever under its weight and a tip mass's weight.

    Args:
        length: [m]. diameter: [m]. youngs_modulus: [Pa]. density: [kg/m³]. tip_mass: [kg].
        gravity: [m/s²].
    """
    area, inertia = round_section(diameter)
    w = density * area * gravity
    p = tip_mass * gravity
    ei = youngs_modulus * inertia
    return w * length**4 / (8.0 * ei) + p * length**3 / (3.0 * ei)


@dataclass(frozen=True)
class ServoBeam:
    """A beam clamped on a servo's hub, in one bending plane (module docstring).

    Attributes:
        length: L [m]. youngs_modulus: E [Pa]. second_moment: I of the bending plane [m⁴]. density: ρ [kg/m³].
        area: A [m²].
        hub_stiffness: k, the servo's position gain [N m/rad]; ``math.inf``: a rigid clamp (an ideal servo).
        hub_inertia: J₀ about the pivot (rotor inertia plus the horn's) [kg m²].
        hub_offset: e, pivot to the beam's root along the beam [m].
        hub_moment: m_h z_h, the hub's first moment of mass along the beam about the pivot [kg m].
        tip_mass: m [kg]. tip_inertia: J_t about its centre of mass [kg m²]. tip_offset: d, the beam's end to the
            tip's centre of mass along the beam [m].
        axial_gravity: g_a, gravity along the beam from tip to root [m/s²] (positive: standing up).
    """

    length: float
    youngs_modulus: float
    second_moment: float
    density: float
    area: float
    hub_stiffness: float
    hub_inertia: float
    hub_offset: float = 0.0
    hub_moment: float = 0.0
    tip_mass: float = 0.0
    tip_inertia: float = 0.0
    tip_offset: float = 0.0
    axial_gravity: float = 0.0

    def __post_init__(self) -> None:
        for name in ("length", "youngs_modulus", "second_moment", "density", "area", "hub_stiffness"):
            if not getattr(self, name) > 0.0:
                raise InputError(f"servo beam: {name} must be positive, got {getattr(self, name)!r}")
        for name in ("hub_inertia", "tip_mass", "tip_inertia"):
            if not getattr(self, name) >= 0.0:
                raise InputError(f"servo beam: {name} must not be negative, got {getattr(self, name)!r}")

    @property
    def ideal(self) -> bool:
        """Whether the hub is a rigid clamp (an ideal servo)."""
        return math.isinf(self.hub_stiffness)


@dataclass(frozen=True)
class ServoBeamModes:
    """The lowest modes of a :class:`ServoBeam`.

    Attributes:
        frequencies: undamped natural frequencies [Hz] (k,), ascending.
        shares: per mode, the share of its strain energy in the hub's spring, ``k φ² / (qᵀ K q)`` (k,) (0 for a
            rigid clamp; above 1 where gravity's negative stiffness takes part).
        n_elements: Hermite elements of the solution.
    """

    frequencies: NDArray[np.float64]
    shares: NDArray[np.float64]
    n_elements: int


def _hermite_element(h: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Unit-EI stiffness and unit-ρA consistent mass of a cubic Hermite element of length ``h`` (4, 4) each."""
    k = np.array([[12, 6 * h, -12, 6 * h], [6 * h, 4 * h * h, -6 * h, 2 * h * h],
                  [-12, -6 * h, 12, -6 * h], [6 * h, 2 * h * h, -6 * h, 4 * h * h]]) / h**3
    m = np.array([[156, 22 * h, 54, -13 * h], [22 * h, 4 * h * h, 13 * h, -3 * h * h],
                  [54, 13 * h, 156, -22 * h], [-13 * h, -3 * h * h, -22 * h, 4 * h * h]]) * h / 420.0
    return k, m


#: Gauss points and weights on [0, 1] (3 points: exact for the axial-load term's degree-4 integrand).
_GAUSS_X = 0.5 + 0.5 * np.array([-math.sqrt(0.6), 0.0, math.sqrt(0.6)])
_GAUSS_W = np.array([5.0, 8.0, 5.0]) / 18.0


def servo_beam_modes(beam: ServoBeam, n_modes: int = 4, n_elements: int = 80) -> ServoBeamModes:
    """The lowest bending modes of a beam on a servo, by cubic Hermite elements (module docstring).

    Args:
        beam: the beam, its hub and its tip.
        n_modes: modes returned.
        n_elements: elements along the beam (module docstring: 80 is converged for the lowest modes).

    Returns:
        Frequencies [Hz] and the hub spring's share of each mode's strain energy. A rigid clamp
        (``hub_stiffness = inf``) holds ``φ = 0``.
    """
    n = int(n_elements)
    if n < 1:
        raise InputError(f"servo beam: n_elements must be positive, got {n_elements}")
    h = beam.length / n
    ei, rho_a = beam.youngs_modulus * beam.second_moment, beam.density * beam.area
    ke, me = _hermite_element(h)
    size = 2 * n + 2
    kf, mf = np.zeros((size, size)), np.zeros((size, size))
    for i in range(n):
        dofs = slice(2 * i, 2 * i + 4)
        kf[dofs, dofs] += ei * ke
        mf[dofs, dofs] += rho_a * me
        if beam.axial_gravity:
            # −∫ N(s) N'ᵀ N' ds with the Hermite shapes' slopes N' at the Gauss points.
            for x, wq in zip(_GAUSS_X, _GAUSS_W):
                dn = np.array([(6 * x * x - 6 * x) / h, 1 - 4 * x + 3 * x * x, (6 * x - 6 * x * x) / h,
                               3 * x * x - 2 * x])
                axial = beam.axial_gravity * (beam.tip_mass + rho_a * (beam.length - (i + x) * h))
                kf[dofs, dofs] -= wq * h * axial * np.outer(dn, dn)
    tip = slice(size - 2, size)
    d = beam.tip_offset
    mf[tip, tip] += beam.tip_mass * np.array([[1.0, d], [d, d * d]]) + np.diag([0.0, beam.tip_inertia])
    kf[size - 1, size - 1] -= beam.tip_mass * beam.axial_gravity * d
    if beam.ideal:
        k, m = kf[2:, 2:], mf[2:, 2:]
    else:
        # q = [φ, w₁, ψ₁, …]: the root follows the hub, w₀ = e φ, ψ₀ = φ.
        p = np.zeros((size, size - 1))
        p[0, 0], p[1, 0] = beam.hub_offset, 1.0
        p[2:, 1:] = np.eye(size - 2)
        k, m = p.T @ kf @ p, p.T @ mf @ p
        fall = beam.hub_moment + (rho_a * beam.length + beam.tip_mass) * beam.hub_offset
        k[0, 0] += beam.hub_stiffness - beam.axial_gravity * fall
        m[0, 0] += beam.hub_inertia
    # Shift-invert: the largest eigenvalues of (M, K − σM) are accurate to rounding of the largest, where the
    # lowest of (K, M) are not (the rotation DOFs' tiny masses make (K, M)'s spectrum span 1e20).
    # Both scaled symmetrically by diag(K − σM)^(-1/2) (deflections and slopes differ by the element length).
    sigma = -1.0
    count = min(n_modes, len(k))
    shifted = k - sigma * m
    scale = 1.0 / np.sqrt(np.diag(shifted))
    mu, vec = sla.eigh(scale[:, None] * m * scale, scale[:, None] * shifted * scale,
                       subset_by_index=[len(k) - count, len(k) - 1])
    lam = sigma + 1.0 / mu[::-1]
    vec = scale[:, None] * vec[:, ::-1]
    if beam.ideal:
        shares = np.zeros(len(lam))
    else:
        shares = beam.hub_stiffness * vec[0] ** 2 / np.einsum("ik,ij,jk->k", vec, k, vec)
    return ServoBeamModes(np.sqrt(np.maximum(lam, 0.0)) / (2.0 * math.pi), shares, n)


def _servo_beam_matrix(beta: float, beam: ServoBeam) -> NDArray[np.float64]:
    """The boundary conditions' 4 × 4 matrix on (A, B, C, D) at wavenumber ``β`` [1/m] (module docstring), each
    row divided by a power of β (and the tip rows by cosh βL) to keep the determinant finite."""
    ei = beam.youngs_modulus * beam.second_moment
    omega2 = beta**4 * ei / (beam.density * beam.area)
    b = beta * beam.length
    ch, sh, c, s = math.cosh(b), math.sinh(b), math.cos(b), math.sin(b)
    # w, w'/β, w''/β², w'''/β³ at L per coefficient.
    w_l = np.array([ch, sh, c, s])
    d1_l = np.array([sh, ch, -s, c])
    d2_l = np.array([ch, sh, -c, -s])
    d3_l = np.array([sh, ch, s, -c])
    hub = (beam.hub_inertia * omega2 - beam.hub_stiffness) / (ei * beta)
    rows = [
        np.array([1.0, 0.0, 1.0, 0.0]),
        np.array([1.0, 0.0, -1.0, 0.0]) + hub * np.array([0.0, 1.0, 0.0, 1.0]),
        (d3_l + beam.tip_mass * omega2 / (ei * beta**3) * w_l) / ch,
        (d2_l - beam.tip_inertia * omega2 / (ei * beta) * d1_l) / ch,
    ]
    return np.array(rows)


def servo_beam_roots(beam: ServoBeam, n_modes: int = 3, beta_max_l: float = 20.0) -> NDArray[np.float64]:
    """The lowest frequencies [Hz] (≤ n_modes,) of a beam on a servo without gravity and offsets, from the exact
    frequency equation (module docstring): the roots of the boundary matrix's determinant in β L ∈ (0,
    ``beta_max_l``).

    Raises:
        InputError: gravity or an offset (only :func:`servo_beam_modes` has them), or a rigid clamp.
    """
    if beam.axial_gravity or beam.hub_offset or beam.tip_offset or beam.ideal:
        raise InputError("servo_beam_roots: the frequency equation is for g_a = e = d = 0 and a finite hub "
                         "stiffness; use servo_beam_modes")

    def det(beta_l: float) -> float:
        return float(np.linalg.det(_servo_beam_matrix(beta_l / beam.length, beam)))

    grid = np.linspace(1e-3, beta_max_l, 20001)
    vals = np.array([det(b) for b in grid])
    roots: list[float] = []
    for k in np.flatnonzero(np.sign(vals[:-1]) != np.sign(vals[1:])):
        roots.append(float(brentq(det, grid[k], grid[k + 1], xtol=1e-14, rtol=1e-14)))
        if len(roots) == n_modes:
            break
    beta = np.array(roots) / beam.length
    ei, rho_a = beam.youngs_modulus * beam.second_moment, beam.density * beam.area
    return np.sqrt(beta**4 * ei / rho_a) / (2.0 * math.pi)
