"""A fast surrogate engine for step-test rigs: an Euler–Bernoulli beam in the frame of the turning motor.

The flexible part is a clamped planar beam (cubic Hermite elements, deflection ``w`` and slope per node) written in
the frame that turns with the motor, ``x = p + R(θ) y``; the tip body is a rigid body welded to the free end (mass,
centre-of-mass offset ``d`` from the end, rotary inertia about the motor axis). The motor angle is exact (large
rotations); the deflection is small, so the equations of motion are linear in the beam coordinates ``q`` with
time-varying coefficients from ``θ(t)``:

    M q̈ + (α M_rod + β E K₁ + 2θ̇ m Gᵀ J G) q̇ + K(t) q = f(t)
    K(t) = E K₁ + K_geo(N(t)) − θ̇² (M_rod + m GᵀG) + θ̈ m Gᵀ J G + k_tip(t) e_φ e_φᵀ
    f(t) = ∫ N ρA (g_l + θ̇² b₀ − θ̈ a(s)) ds + Gᵀ F_tip − J_tip θ̈ e_φ,   F_tip = m (g_loc + θ̇² y_t − θ̈ J y_t)

(``a``, ``b₀``: along/across coordinates of the centre line from the pivot, ``J`` the in-plane cross product with
the axis, ``G`` the map from ``q`` to the tip's in-plane position, ``g_loc`` gravity in the turning frame). The
geometric stiffness ``K_geo = ∫ N(s) N'N'ᵀ ds`` carries the axial force ``N(s)`` from gravity, centrifugal and
Euler forces of everything beyond ``s`` (a vertical rod under a 100 g tip is softened by ~3 %); ``k_tip = d·F_tip``
is the tip's own pendulum term. Rayleigh damping acts on the part only (as in the full engine,
``D = α M + β K``). Time integration is the trapezoidal rule (Newmark average acceleration): second order and free
of numerical damping, so fitted α, β are physical and not integrator artefacts.

Scope: in-plane bending only (a part perpendicular to the motor axis, tip offsets along the axis ride along);
no axial or torsional deformation; linear in the deflection. It is validated against beam theory (tests) and is
the fitting engine until the reduced engine lands; see docs/fit.md.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from retarget.fit.rig import StepTestRig

__all__ = ["BeamModel", "build_beam_model", "rotation_about"]

_J2 = np.array([[0.0, -1.0], [1.0, 0.0]])
_GAUSS_X, _GAUSS_W = np.polynomial.legendre.leggauss(4)


def rotation_about(axis: NDArray[np.float64], angle: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rotation matrices about a unit ``axis`` (3,) by ``angle`` (n,) [rad] → (n, 3, 3) (Rodrigues)."""
    a = np.atleast_1d(np.asarray(angle, dtype=float))
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    s, c = np.sin(a)[:, None, None], np.cos(a)[:, None, None]
    return np.eye(3)[None] + s * k[None] + (1.0 - c) * (k @ k)[None]


def _hermite(xi: float, le: float) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Cubic Hermite shape functions, first and second derivatives in s, on an element of length ``le``."""
    n = np.array([1 - 3 * xi**2 + 2 * xi**3, le * (xi - 2 * xi**2 + xi**3), 3 * xi**2 - 2 * xi**3,
                  le * (-xi**2 + xi**3)])
    d1 = np.array([(-6 * xi + 6 * xi**2) / le, 1 - 4 * xi + 3 * xi**2, (6 * xi - 6 * xi**2) / le,
                   -2 * xi + 3 * xi**2])
    d2 = np.array([(-6 + 12 * xi) / le**2, (-4 + 6 * xi) / le, (6 - 12 * xi) / le**2, (-2 + 6 * xi) / le])
    return n, d1, d2


def _c(a: NDArray[np.float64] | float) -> NDArray[np.float64]:
    """A C-ordered float64 copy-if-needed (the one array kind :func:`_trapezoidal` compiles for)."""
    return np.ascontiguousarray(a, dtype=np.float64)


class _BeamConstants(NamedTuple):
    """:class:`BeamModel`'s constant matrices as :func:`_trapezoidal` takes them (see the model's attributes)."""

    mass: NDArray[np.float64]
    mass_rod: NDArray[np.float64]
    stiffness_unit: NDArray[np.float64]
    geo_gravity: NDArray[np.float64]
    geo_centrifugal: NDArray[np.float64]
    geo_euler: NDArray[np.float64]
    gjg: NDArray[np.float64]  # m Gᵀ J G
    ggt: NDArray[np.float64]  # m Gᵀ G
    tip_map_t: NDArray[np.float64]  # Gᵀ (n, 2)
    tip_rest: NDArray[np.float64]
    tip_rest_j: NDArray[np.float64]  # J y_t
    tip_offset: NDArray[np.float64]
    load_gravity_lateral: NDArray[np.float64]
    load_centrifugal: NDArray[np.float64]
    load_euler: NDArray[np.float64]
    tip_mass: float
    tip_inertia: float


@functools.cache
def _trapezoidal_kernel() -> Any:
    """:func:`_trapezoidal` compiled (numba imported on first use: ``retarget --help`` stays light)."""
    from retarget.jit import njit

    return njit(cache=True, nogil=True)(_trapezoidal)


def _trapezoidal(dt: float, youngs_modulus: float, alpha: float, beta: float, theta_dot: NDArray[np.float64],
                 theta_ddot: NDArray[np.float64], gravity_local: NDArray[np.float64], b: _BeamConstants
                 ) -> NDArray[np.float64]:
    """:meth:`BeamModel.simulate`'s time loop: the matrices of :meth:`BeamModel.matrices` at each step (the same
    terms in the same order) and the trapezoidal rule from the static equilibrium at the first step → q (n_t, n)."""
    n_t = theta_dot.shape[0]
    n = b.mass.shape[0]
    q = np.zeros((n_t, n))
    k_bend = youngs_modulus * b.stiffness_unit
    k_rot = b.geo_centrifugal - b.mass_rod - b.ggt
    k_euler = b.geo_euler + b.gjg
    damping = np.empty((n, n))
    stiffness = np.empty((n, n))
    load = np.empty(n)
    f_tip = np.empty(2)
    v = np.zeros(n)
    acc = np.zeros(n)
    h2 = 0.25 * dt * dt
    for i in range(n_t):
        w, x = theta_dot[i], theta_ddot[i]
        w2 = w**2
        damping[:, :] = alpha * b.mass_rod + beta * k_bend + 2.0 * w * b.gjg
        for j in range(2):
            f_tip[j] = b.tip_mass * (gravity_local[i, j] + w2 * b.tip_rest[j] - x * b.tip_rest_j[j])
        stiffness[:, :] = k_bend + gravity_local[i, 0] * b.geo_gravity + w2 * k_rot + x * k_euler
        stiffness[n - 1, n - 1] += b.tip_offset[0] * f_tip[0] + b.tip_offset[1] * f_tip[1]
        load[:] = (gravity_local[i, 1] * b.load_gravity_lateral + w2 * b.load_centrifugal + x * b.load_euler
                   + b.tip_map_t @ f_tip)
        load[n - 1] -= b.tip_inertia * x
        if i == 0:
            q[0] = np.linalg.solve(stiffness, load)
            acc = np.linalg.solve(b.mass, load - damping @ v - stiffness @ q[0])
            continue
        q_pred = q[i - 1] + dt * v + h2 * acc
        v_pred = v + 0.5 * dt * acc
        acc = np.linalg.solve(b.mass + 0.5 * dt * damping + h2 * stiffness,
                              load - damping @ v_pred - stiffness @ q_pred)
        q[i] = q_pred + h2 * acc
        v = v_pred + 0.5 * dt * acc
    return q


@dataclass(frozen=True, eq=False)
class BeamModel:
    """Constant matrices of the turning-beam model; coefficients of the time-varying terms are applied per step.

    Attributes:
        rig: The rig the model was built from.
        n_elements: Beam elements along the part.
        mass_rod: Consistent mass of the part's lateral motion (n, n) [kg].
        mass: ``mass_rod`` plus the tip body (n, n).
        stiffness_unit: Bending stiffness per unit Young's modulus K₁ (n, n) [m³·… so that E K₁ is N/m].
        geo_gravity, geo_centrifugal, geo_euler: Geometric stiffness per unit axial gravity g_a [m/s²],
            per θ̇² [rad²/s²] and per θ̈ [rad/s²] (n, n).
        tip_map: G, the tip centre of mass's in-plane (along, across) position per coordinate (2, n) [m].
        tip_rest: y_t, the tip centre of mass's in-plane position from the pivot when undeformed (2,) [m].
        tip_offset: d, tip centre of mass minus the part's end, in-plane (2,) [m].
        load_gravity_lateral, load_centrifugal, load_euler: ∫ N ρA ds, ∫ N ρA b₀ ds, −∫ N ρA a(s) ds (n,).
        out_of_plane: Tip centre of mass's offset along the motor axis from the pivot [m].
    """

    rig: StepTestRig
    n_elements: int
    mass_rod: NDArray[np.float64]
    mass: NDArray[np.float64]
    stiffness_unit: NDArray[np.float64]
    geo_gravity: NDArray[np.float64]
    geo_centrifugal: NDArray[np.float64]
    geo_euler: NDArray[np.float64]
    tip_map: NDArray[np.float64]
    tip_rest: NDArray[np.float64]
    tip_offset: NDArray[np.float64]
    load_gravity_lateral: NDArray[np.float64]
    load_centrifugal: NDArray[np.float64]
    load_euler: NDArray[np.float64]
    out_of_plane: float

    @property
    def n_dofs(self) -> int:
        """Number of beam coordinates (2 per free node)."""
        return 2 * self.n_elements

    def gravity_local(self, theta: NDArray[np.float64]) -> NDArray[np.float64]:
        """Gravity in the turning frame, (along, across) components (n, 2) [m/s²]."""
        rig = self.rig
        rot = rotation_about(rig.axis, theta)
        e_a = rot @ rig.rod_direction
        e_l = rot @ rig.lateral_direction
        return np.stack([e_a @ rig.gravity, e_l @ rig.gravity], axis=1)

    def matrices(self, youngs_modulus: float, alpha: float, beta: float, theta: float, theta_dot: float,
                 theta_ddot: float, gravity_local: NDArray[np.float64]
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Damping, stiffness and load at one instant.

        Args:
            youngs_modulus: E [Pa].
            alpha: Rayleigh mass damping [1/s].
            beta: Rayleigh stiffness damping [s].
            theta, theta_dot, theta_ddot: Motor angle [rad], rate [rad/s], acceleration [rad/s²].
            gravity_local: (along, across) gravity in the turning frame (2,) [m/s²].

        Returns:
            ``(C (n, n), K (n, n), f (n,))``.
        """
        m_tip = self.rig.tip_mass
        g = self.tip_map
        gjg, ggt = self._constants.gjg, self._constants.ggt
        k_bend = youngs_modulus * self.stiffness_unit
        damping = alpha * self.mass_rod + beta * k_bend + 2.0 * theta_dot * gjg
        y_t = self.tip_rest
        f_tip = m_tip * (gravity_local + theta_dot**2 * y_t - theta_ddot * (_J2 @ y_t))
        stiffness = (k_bend + gravity_local[0] * self.geo_gravity
                     + theta_dot**2 * (self.geo_centrifugal - self.mass_rod - ggt)
                     + theta_ddot * (self.geo_euler + gjg))
        stiffness[-1, -1] += float(self.tip_offset @ f_tip)
        load = (gravity_local[1] * self.load_gravity_lateral + theta_dot**2 * self.load_centrifugal
                + theta_ddot * self.load_euler + g.T @ f_tip)
        load[-1] -= self.rig.tip_inertia_axis * theta_ddot
        return damping, stiffness, load

    def natural_frequencies(self, youngs_modulus: float, theta: float = 0.0) -> NDArray[np.float64]:
        """Undamped natural frequencies [Hz] of the rig held at a fixed motor angle (ascending, (n,))."""
        from scipy.linalg import eigh

        _, k, _ = self.matrices(youngs_modulus, 0.0, 0.0, theta, 0.0, 0.0, self.gravity_local(np.array([theta]))[0])
        w2 = eigh(0.5 * (k + k.T), self.mass, eigvals_only=True)
        return np.sqrt(np.maximum(w2, 0.0)) / (2.0 * np.pi)

    def simulate(self, youngs_modulus: float, alpha: float, beta: float, time: NDArray[np.float64],
                 theta: NDArray[np.float64], theta_dot: NDArray[np.float64], theta_ddot: NDArray[np.float64]
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Integrate from the static equilibrium at ``theta[0]`` with the trapezoidal rule.

        Args:
            youngs_modulus: E [Pa].
            alpha: Rayleigh α [1/s].
            beta: Rayleigh β [s].
            time: Uniform time grid (n,) [s].
            theta, theta_dot, theta_ddot: Motor angle [rad], rate [rad/s], acceleration [rad/s²] on the grid (n,).

        Returns:
            ``(q (n, n_dofs), tip_position (n, 3) [m])``: beam coordinates and the tip centre of mass in the world.
        """
        g_loc = self.gravity_local(theta)
        q = _trapezoidal_kernel()(float(time[1] - time[0]), float(youngs_modulus), float(alpha), float(beta),
                                  _c(theta_dot), _c(theta_ddot), _c(g_loc), self._constants)
        return q, self.tip_positions(theta, q)

    @functools.cached_property
    def _constants(self) -> _BeamConstants:
        """The constant matrices in the record :func:`_trapezoidal` takes (C-ordered float64 arrays), with the tip's
        ``m GᵀJG`` and ``m GᵀG`` that :meth:`matrices` uses too; derived once per model."""
        m_tip = self.rig.tip_mass
        g = self.tip_map
        return _BeamConstants(
            mass=_c(self.mass), mass_rod=_c(self.mass_rod), stiffness_unit=_c(self.stiffness_unit),
            geo_gravity=_c(self.geo_gravity), geo_centrifugal=_c(self.geo_centrifugal), geo_euler=_c(self.geo_euler),
            gjg=_c(m_tip * g.T @ _J2 @ g), ggt=_c(m_tip * g.T @ g), tip_map_t=_c(g.T), tip_rest=_c(self.tip_rest),
            tip_rest_j=_c(_J2 @ self.tip_rest), tip_offset=_c(self.tip_offset),
            load_gravity_lateral=_c(self.load_gravity_lateral), load_centrifugal=_c(self.load_centrifugal),
            load_euler=_c(self.load_euler), tip_mass=float(m_tip), tip_inertia=float(self.rig.tip_inertia_axis))

    def tip_positions(self, theta: NDArray[np.float64], q: NDArray[np.float64]) -> NDArray[np.float64]:
        """Tip centre of mass in the world (n, 3) [m] from motor angles (n,) and beam coordinates (n, n_dofs)."""
        rig = self.rig
        local = self.tip_rest[None] + q @ self.tip_map.T
        rot = rotation_about(rig.axis, theta)
        e_a = rot @ rig.rod_direction
        e_l = rot @ rig.lateral_direction
        return rig.pivot[None] + local[:, :1] * e_a + local[:, 1:] * e_l + self.out_of_plane * rig.axis[None]


def build_beam_model(rig: StepTestRig, n_elements: int = 12) -> BeamModel:
    """Assemble the constant matrices of :class:`BeamModel` for ``rig``.

    Args:
        rig: The step-test rig.
        n_elements: Hermite beam elements (12 puts the first two frequencies within 1e-5 of converged).
    """
    rho_a = rig.material.density * rig.area
    length = rig.length
    le = length / n_elements
    rel = rig.rod_base - rig.pivot
    a0 = float(rel @ rig.rod_direction)
    b0 = float(rel @ rig.lateral_direction)
    end = rig.rod_base + length * rig.rod_direction
    d_vec = rig.tip_com - end
    d = np.array([d_vec @ rig.rod_direction, d_vec @ rig.lateral_direction])
    y_t = np.array([a0 + length + d[0], b0 + d[1]])
    m_tip = rig.tip_mass
    n_full = 2 * (n_elements + 1)
    mass = np.zeros((n_full, n_full))
    stiff = np.zeros_like(mass)
    geo = [np.zeros_like(mass) for _ in range(3)]
    loads = [np.zeros(n_full) for _ in range(3)]

    def axial(s: float) -> tuple[float, float, float]:
        """Axial force per g_a, per θ̇² and per θ̈ at s (tension > 0) from everything beyond s."""
        rest = length - s
        n_g = rho_a * rest + m_tip
        # ∫_s^L a(σ) dσ with a(σ) = a0 + σ.
        n_c = rho_a * (a0 * rest + 0.5 * (length**2 - s**2)) + m_tip * y_t[0]
        n_e = rho_a * b0 * rest + m_tip * y_t[1]
        return n_g, n_c, n_e

    for e in range(n_elements):
        dofs = slice(2 * e, 2 * e + 4)
        for x, w in zip(_GAUSS_X, _GAUSS_W):
            xi = 0.5 * (x + 1.0)
            ds = 0.5 * w * le
            s = (e + xi) * le
            n, d1, d2 = _hermite(xi, le)
            mass[dofs, dofs] += rho_a * np.outer(n, n) * ds
            stiff[dofs, dofs] += rig.second_moment * np.outer(d2, d2) * ds
            for g_mat, coef in zip(geo, axial(s)):
                g_mat[dofs, dofs] += coef * np.outer(d1, d1) * ds
            loads[0][dofs] += rho_a * n * ds
            loads[1][dofs] += rho_a * b0 * n * ds
            loads[2][dofs] -= rho_a * (a0 + s) * n * ds
    free = slice(2, n_full)  # the clamped node's deflection and slope are zero
    n_dof = n_full - 2
    tip_map = np.zeros((2, n_dof))
    tip_map[1, -2] = 1.0
    tip_map[:, -1] = _J2 @ d  # a small end rotation φ moves the offset d by φ n × d
    mass_rod = mass[free, free]
    tip_mass_matrix = m_tip * tip_map.T @ tip_map
    tip_mass_matrix[-1, -1] += rig.tip_inertia_axis
    return BeamModel(
        rig=rig,
        n_elements=n_elements,
        mass_rod=mass_rod,
        mass=mass_rod + tip_mass_matrix,
        stiffness_unit=stiff[free, free],
        geo_gravity=geo[0][free, free],
        geo_centrifugal=geo[1][free, free],
        geo_euler=geo[2][free, free],
        tip_map=tip_map,
        tip_rest=y_t,
        tip_offset=d,
        load_gravity_lateral=loads[0][free],
        load_centrifugal=loads[1][free],
        load_euler=loads[2][free],
        out_of_plane=float((rig.tip_com - rig.pivot) @ rig.axis),
    )
