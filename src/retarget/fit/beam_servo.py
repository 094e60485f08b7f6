"""The turning beam with its motor shaft as a degree of freedom, driven by a Dynamixel position loop.

:mod:`retarget.fit.beam` prescribes the motor angle ``θ(t)``. Here ``θ`` is a coordinate: the shaft (the motor's
rotor reflected through the gearbox, ``J_r``, plus the horn and the links welded to it, the *hub*) carries the beam
clamped on it, and the servo's torque ``τ`` drives it towards a goal ``g(t)``. It is a plant to replay motor plans
in that shares neither the planner's model (a reduced FEM) nor its servo code (:mod:`retarget.sim.servo`): the
loop is re-implemented here from its definition (:class:`DynamixelLoop`) and the shaft equation is derived from
the turning-beam Lagrangian.

**Equations.** The beam coordinates ``q`` keep the equation of :mod:`retarget.fit.beam`; its ``θ̈`` terms
(``θ̈ m GᵀJG`` in the stiffness, ``−θ̈ (∫N ρA a ds + m GᵀJ y_t + J_tip e_φ)`` in the load) now couple ``q̈`` to
the shaft's acceleration. The shaft's equation is ``d/dt ∂T/∂θ̇ = τ + Q_g`` (``T`` does not depend on ``θ`` in the
turning frame), to first order in the deflection as the beam equation is::

    P = ∂T/∂θ̇ = cᵀ q̇ + θ̇ (I₀ + J_r + hᵀ q)                                     [N m s]
    (I₀ + J_r + hᵀq) θ̈ + cᵀ q̈ + θ̇ hᵀ q̇ = τ(g, ġ, θ, θ̇, ι) + g_loc(θ) · J (s₀ + S q)       [N m]

    c = ∫ N ρA a ds + m Gᵀ J y_t + J_tip e_φ          (shaft–beam inertial coupling, (n,) [kg m])
    I₀ = ∫ ρA (a² + b₀²) ds + m |y_t|² + J_tip + J_hub + m_hub |y_hub|²     (rotary inertia at rest [kg m²])
    h = 2 b₀ ∫ N ρA ds + 2 m Gᵀ y_t                    (∂I/∂q, (n,) [kg m])
    s₀ = ∫ ρA (a, b₀) ds + m y_t + m_hub y_hub         (first moment of mass about the pivot [kg m])
    S = e_l ⊗ ∫ N ρA ds + m G                         (its change with q, (2, n) [kg])

(in-plane (along, across) components in the turning frame as in :mod:`retarget.fit.beam`; ``g_loc · J x`` is the
moment of gravity about the axis). The beam's moment on the hub is this equation less the rotor's and the hub's
own terms: ``(J_r + J_hub + m_hub |y_hub|²) θ̈ = τ + Q_g,hub − M_base``. Rayleigh damping is internal to the beam
(no shaft term); the back EMF and friction are the loop's.

**The loop** (:class:`DynamixelLoop`, SI at the output shaft, the definition of :mod:`retarget.model.servo`)::

    u = kp (g − θ) + ki ι + kd (ġ − θ̇) + kff1 ġ,   ι̇ = g − θ
    d = clip(u / stall, ±duty_limit)                     (the PWM limit: a hard clip)
    τ = stall (d − θ̇ / no_load) − coulomb tanh(θ̇ / 0.02 rad/s) − viscous θ̇

**Time integration**: the trapezoidal rule (Newmark average acceleration) on ``(q, θ)`` and on ``ι``, the
equations enforced at the end of each step. For a trial shaft acceleration the beam's equation is linear in
``q̈`` (one dense solve of its ``n × n`` effective matrix), so each step is a scalar root find on the shaft's
equation (secant from a finite-difference slope; it converges in a few evaluations, also across the duty clip).
Second order, no numerical damping; ``dt = 1 ms`` is converged (tests/fit/test_beam_servo.py).

Verified (tests/fit/test_beam_servo.py): the rigid limit against the one-degree-of-freedom shaft ODE and against
the saturated motor's exponential run-up, the coupled hub–beam–spring frequencies against the closed-form
Euler–Bernoulli frequency equation, the static sag ``kp δθ = M_gravity``, angular momentum with a free shaft, the
prescribed mode as the limit of a stiff loop, and a step-size refinement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.errors import RetargetError
from retarget.fit.beam import BeamModel, _c, build_beam_model
from retarget.fit.rig import StepTestRig
from retarget.model.servo import ServoParams

if TYPE_CHECKING:
    from retarget.fit.beam_servo_kernels import ShaftLoop

__all__ = [
    "FRICTION_SPEED",
    "DynamixelLoop",
    "PlantError",
    "PlantModes",
    "PlantState",
    "ServoBeam",
    "ServoBeamRun",
    "ShaftTerms",
    "build_servo_beam",
    "quasi_static_tip",
    "shaft_terms",
    "static_deflection",
]

#: Coulomb friction is regularized as ``coulomb · tanh(ω / FRICTION_SPEED)`` [rad/s] (the engines use the same
#: speed, so that a difference between the plants is not the friction model's).
FRICTION_SPEED: float = 0.02
_J2 = np.array([[0.0, -1.0], [1.0, 0.0]])


class PlantError(RetargetError):
    """The servo–beam plant cannot do what was asked: a pose the servo cannot hold, a step that does not converge.

    Attributes:
        reason: What failed.
        time_s: Simulation time of the failure [s], or ``None`` (a static solve).
    """

    def __init__(self, reason: str, time_s: float | None = None) -> None:
        self.reason = reason
        self.time_s = time_s
        where = f" at t = {time_s:.4f} s" if time_s is not None else ""
        super().__init__(f"servo–beam plant{where}: {reason}")


@dataclass(frozen=True)
class DynamixelLoop:
    """A Dynamixel position loop in SI at the output shaft, written from its definition (module docstring).

    Attributes:
        kp [N m/rad], ki [N m/(rad s)], kd [N m s/rad], kff1 [N m s/rad]: PID gains and velocity feedforward.
        stall_torque [N m], max_velocity [rad/s] (no-load speed), rotor_inertia [kg m²] (reflected),
        coulomb_friction [N m], viscous_friction [N m s/rad], duty_limit [-] (PWM Limit / 885).
    """

    kp: float
    ki: float
    kd: float
    kff1: float
    stall_torque: float
    max_velocity: float
    rotor_inertia: float
    coulomb_friction: float
    viscous_friction: float
    duty_limit: float

    @classmethod
    def from_params(cls, servo: ServoParams) -> DynamixelLoop:
        """The loop of a modelled servo's parameters.

        Raises:
            PlantError: ``servo`` is the ideal position source (it has no loop).
        """
        if servo.ideal:
            raise PlantError("the ideal position source has no loop to simulate (prescribe the angle instead)")
        return cls(servo.kp, servo.ki, servo.kd, servo.kff1, servo.stall_torque, servo.max_velocity,
                   servo.rotor_inertia, servo.coulomb_friction, servo.viscous_friction, servo.duty_limit)

    def command(self, goal: NDArray | float, goal_rate: NDArray | float, shaft: NDArray | float,
                speed: NDArray | float, integral: NDArray | float) -> NDArray | float:
        """The loop's output ``u`` before the duty clip [N m] (any broadcastable shapes)."""
        return (self.kp * (goal - shaft) + self.ki * integral + self.kd * (goal_rate - speed)
                + self.kff1 * goal_rate)

    def duty(self, goal: NDArray | float, goal_rate: NDArray | float, shaft: NDArray | float,
             speed: NDArray | float, integral: NDArray | float) -> NDArray | float:
        """The clipped PWM duty (−duty_limit … duty_limit)."""
        u = self.command(goal, goal_rate, shaft, speed, integral)
        return np.minimum(np.maximum(u / self.stall_torque, -self.duty_limit), self.duty_limit)

    def torque(self, goal: NDArray | float, goal_rate: NDArray | float, shaft: NDArray | float,
               speed: NDArray | float, integral: NDArray | float) -> NDArray | float:
        """Output torque on the shaft [N m]: the duty's torque less the back EMF and friction."""
        d = self.duty(goal, goal_rate, shaft, speed, integral)
        tau = self.stall_torque * (d - speed / self.max_velocity) - self.viscous_friction * speed
        if self.coulomb_friction:
            tau = tau - self.coulomb_friction * np.tanh(speed / FRICTION_SPEED)
        return tau

    @property
    def holding_limit(self) -> float:
        """The largest torque the loop holds at rest [N m] (``duty_limit · stall``)."""
        return self.duty_limit * self.stall_torque


@dataclass(frozen=True, eq=False)
class ShaftTerms:
    """Constants of the shaft equation (module docstring); ``n`` beam coordinates.

    Attributes:
        inertia: ``I₀ + J_r``: rotary inertia of everything turning with the shaft at rest, rotor included [kg m²].
        inertia_gradient: ``h = ∂I/∂q`` (n,) [kg m].
        coupling: ``c``: ``∂²T/∂θ̇∂q̇`` (n,) [kg m] (for the slope coordinate [kg m²]).
        first_moment: ``s₀``: mass times centre of mass about the pivot at rest, (along, across) (2,) [kg m].
        first_moment_map: ``S``: its change per beam coordinate (2, n) [kg].
    """

    inertia: float
    inertia_gradient: NDArray[np.float64]
    coupling: NDArray[np.float64]
    first_moment: NDArray[np.float64]
    first_moment_map: NDArray[np.float64]


def shaft_terms(model: BeamModel, rotor_inertia: float) -> ShaftTerms:
    """The shaft equation's constants of ``model`` with the reflected rotor inertia [kg m²]."""
    rig = model.rig
    rho_a = rig.material.density * rig.area
    length = rig.length
    rel = rig.rod_base - rig.pivot
    a0 = float(rel @ rig.rod_direction)
    b0 = float(rel @ rig.lateral_direction)
    m_tip = rig.tip_mass
    g_map, y_t = model.tip_map, model.tip_rest
    e_phi = np.zeros(model.n_dofs)
    e_phi[-1] = 1.0
    lateral = model.load_gravity_lateral  # ∫ N ρA ds
    along_first = rho_a * (a0 * length + 0.5 * length**2)  # ∫ ρA a ds
    along_second = rho_a * ((a0 + length) ** 3 - a0**3) / 3.0  # ∫ ρA a² ds
    inertia = along_second + rho_a * length * b0**2 + m_tip * float(y_t @ y_t) + rig.tip_inertia_axis
    first = np.array([along_first, rho_a * length * b0]) + m_tip * y_t
    if rig.hub_mass > 0.0 and rig.hub_com is not None:
        hub = rig.hub_com - rig.pivot
        y_hub = np.array([hub @ rig.rod_direction, hub @ rig.lateral_direction])
        inertia += rig.hub_inertia_axis + rig.hub_mass * float(y_hub @ y_hub)
        first = first + rig.hub_mass * y_hub
    s_map = m_tip * g_map.copy()
    s_map[1] += lateral
    return ShaftTerms(
        inertia=float(inertia + rotor_inertia),
        inertia_gradient=2.0 * b0 * lateral + 2.0 * m_tip * g_map.T @ y_t,
        coupling=-model.load_euler + m_tip * g_map.T @ (_J2 @ y_t) + rig.tip_inertia_axis * e_phi,
        first_moment=first,
        first_moment_map=s_map,
    )


@dataclass(frozen=True, eq=False)
class PlantState:
    """The plant at one instant.

    Attributes:
        q, q_rate, q_acc: beam coordinates, rates and accelerations (n,).
        shaft [rad], speed [rad/s], shaft_acc [rad/s²]: the shaft.
        integral: the loop's integral of the error ``ι`` [rad s].
    """

    q: NDArray[np.float64]
    q_rate: NDArray[np.float64]
    q_acc: NDArray[np.float64]
    shaft: float
    speed: float
    shaft_acc: float
    integral: float = 0.0


@dataclass(frozen=True, eq=False)
class PlantModes:
    """Small oscillations about a held pose.

    Attributes:
        frequencies_hz: Damped frequencies of the oscillatory modes, ascending (m,) [Hz].
        damping_ratios: Their damping ratios (m,) [-].
        undamped_hz: Natural frequencies without any damping (Rayleigh, back EMF, kd, friction) (m,) [Hz].
    """

    frequencies_hz: NDArray[np.float64]
    damping_ratios: NDArray[np.float64]
    undamped_hz: NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class ServoBeamRun:
    """A simulated run on the uniform grid ``time_s`` (n,).

    Attributes:
        time_s: [s]. goal [rad], goal_rate [rad/s]: the servo's input.
        shaft [rad], speed [rad/s], shaft_acc [rad/s²]: the shaft.
        q: beam coordinates (n, n_dofs). q_rate: their rates (n, n_dofs).
        tip_position_m: the tip body's centre of mass in the world (n, 3) [m].
        torque: the servo's output torque (n,) [N m]. duty: its PWM duty (n,) [-]. integral: ι (n,) [rad s].
    """

    time_s: NDArray[np.float64]
    goal: NDArray[np.float64]
    goal_rate: NDArray[np.float64]
    shaft: NDArray[np.float64]
    speed: NDArray[np.float64]
    shaft_acc: NDArray[np.float64]
    q: NDArray[np.float64]
    q_rate: NDArray[np.float64]
    tip_position_m: NDArray[np.float64]
    torque: NDArray[np.float64]
    duty: NDArray[np.float64]
    integral: NDArray[np.float64]

    @property
    def servo_error(self) -> NDArray[np.float64]:
        """Goal minus shaft (n,) [rad]."""
        return self.goal - self.shaft


class _Assembly:
    """:meth:`retarget.fit.beam.BeamModel.matrices` with its constant parts summed once (a step evaluates it a few
    times; tests check it equals the model's)."""

    def __init__(self, model: BeamModel, youngs_modulus: float, alpha: float, beta: float) -> None:
        rig = model.rig
        m_tip = rig.tip_mass
        g = model.tip_map
        self.model = model
        self.gjg = m_tip * g.T @ _J2 @ g
        k_bend = youngs_modulus * model.stiffness_unit
        self.damping = alpha * model.mass_rod + beta * k_bend
        self.stiffness = k_bend
        self.stiffness_rate2 = model.geo_centrifugal - model.mass_rod - m_tip * g.T @ g
        self.stiffness_acc = model.geo_euler + self.gjg
        self.m_tip = m_tip
        self.y_t = model.tip_rest
        self.j_y_t = _J2 @ model.tip_rest
        e_a, e_l = rig.rod_direction, rig.lateral_direction
        # g_loc(θ) = R(θ)ᵀ g in (e_a, e_l): R(θ) e_a = cos θ e_a + sin θ e_l,
        # R(θ) e_l = cos θ e_l − sin θ e_a.
        self.g_a0, self.g_l0 = float(e_a @ rig.gravity), float(e_l @ rig.gravity)

    def gravity_local(self, theta: float) -> NDArray[np.float64]:
        """(along, across) gravity in the turning frame at one angle (2,) [m/s²]."""
        c, s = math.cos(theta), math.sin(theta)
        return np.array([c * self.g_a0 + s * self.g_l0, c * self.g_l0 - s * self.g_a0])

    def matrices(self, theta_dot: float, theta_ddot: float, g_loc: NDArray[np.float64]
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """``(C, K, f)`` as :meth:`BeamModel.matrices`."""
        m = self.model
        damping = self.damping + (2.0 * theta_dot) * self.gjg
        f_tip = self.m_tip * (g_loc + theta_dot**2 * self.y_t - theta_ddot * self.j_y_t)
        stiffness = (self.stiffness + g_loc[0] * m.geo_gravity + theta_dot**2 * self.stiffness_rate2
                     + theta_ddot * self.stiffness_acc)
        stiffness[-1, -1] += float(m.tip_offset @ f_tip)
        load = (g_loc[1] * m.load_gravity_lateral + theta_dot**2 * m.load_centrifugal + theta_ddot * m.load_euler
                + f_tip @ m.tip_map)
        load[-1] -= m.rig.tip_inertia_axis * theta_ddot
        return damping, stiffness, load


@dataclass(frozen=True, eq=False)
class ServoBeam:
    """The turning beam on a servo-driven shaft (module docstring). Build with :func:`build_servo_beam`.

    Attributes:
        model: The beam (:class:`retarget.fit.beam.BeamModel`).
        servo: The servo's parameters. loop: its loop as simulated here.
        youngs_modulus [Pa], alpha [1/s], beta [s]: the part's material.
        shaft: The shaft equation's constants.
    """

    model: BeamModel
    servo: ServoParams
    loop: DynamixelLoop
    youngs_modulus: float
    alpha: float
    beta: float
    shaft: ShaftTerms

    @property
    def n_dofs(self) -> int:
        """Beam coordinates."""
        return self.model.n_dofs

    @cached_property
    def _assembly(self) -> _Assembly:
        return _Assembly(self.model, self.youngs_modulus, self.alpha, self.beta)

    def with_servo(self, servo: ServoParams) -> ServoBeam:
        """The same beam on another servo."""
        return replace(self, servo=servo, loop=DynamixelLoop.from_params(servo),
                       shaft=shaft_terms(self.model, servo.rotor_inertia))

    def gravity_moment(self, shaft: float, q: NDArray[np.float64]) -> float:
        """Moment of gravity about the motor axis on everything turning with the shaft [N m]."""
        g_loc = self._assembly.gravity_local(shaft)
        first = self.shaft.first_moment + self.shaft.first_moment_map @ q
        return float(g_loc @ (_J2 @ first))

    # -- statics ------------------------------------------------------------------------------------------------
    def static_deflection(self, shaft: NDArray[np.float64]) -> NDArray[np.float64]:
        """:func:`static_deflection` of this plant's beam (m,) [rad] → (m, n)."""
        return static_deflection(self.model, self.youngs_modulus, shaft)

    def intent(self, shaft: NDArray[np.float64]) -> NDArray[np.float64]:
        """:func:`quasi_static_tip` of this plant's beam (m,) [rad] → (m, 3) [m]."""
        return quasi_static_tip(self.model, self.youngs_modulus, shaft)

    def equilibrium(self, goal: float) -> PlantState:
        """The rest state holding ``goal`` [rad]: the shaft sags until the loop's torque balances gravity.

        Raises:
            PlantError: The gravity moment exceeds what the loop holds (``duty_limit · stall``).
        """
        loop = self.loop

        def load(theta: float) -> tuple[float, NDArray[np.float64]]:
            q = self.static_deflection(np.array([theta]))[0]
            return -self.gravity_moment(theta, q), q

        if loop.ki > 0.0:  # the integral carries the load, the shaft reaches the goal
            tau, q = load(goal)
            self._check_holdable(tau, goal)
            return PlantState(q, np.zeros_like(q), np.zeros_like(q), float(goal), 0.0, 0.0, tau / loop.ki)
        theta = float(goal)
        for _ in range(50):
            tau, q = load(theta)
            self._check_holdable(tau, goal)
            target = goal - tau / loop.kp
            if abs(target - theta) <= 1e-13 * (1.0 + abs(goal)):
                return PlantState(q, np.zeros_like(q), np.zeros_like(q), target, 0.0, 0.0, 0.0)
            # Fixed point θ = g − τ_load(θ)/kp, accelerated by the load's slope (a Newton step).
            eps = 1e-7
            slope = (load(theta + eps)[0] - tau) / eps
            theta = theta + (target - theta) / (1.0 + slope / loop.kp)
        raise PlantError(f"no static equilibrium found at goal {goal:.6g} rad")

    def _check_holdable(self, tau: float, goal: float) -> None:
        if abs(tau) > self.loop.holding_limit:
            raise PlantError(f"holding goal {goal:.4g} rad takes {abs(tau):.3g} N m, more than the servo gives at "
                             f"rest ({self.loop.holding_limit:.3g} N m = duty limit x stall)")

    # -- dynamics -----------------------------------------------------------------------------------------------
    def residual(self, q: NDArray[np.float64], shaft: float, q_rate: NDArray[np.float64], speed: float,
                 q_acc: NDArray[np.float64], shaft_acc: float, integral: float, goal: float,
                 goal_rate: float) -> NDArray[np.float64]:
        """The equations of motion's residual (n + 1,): the beam's rows [N or N m] then the shaft's [N m]."""
        asm = self._assembly
        g_loc = asm.gravity_local(shaft)
        c, k, f = asm.matrices(speed, shaft_acc, g_loc)
        beam = self.model.mass @ q_acc + c @ q_rate + k @ q - f
        return np.append(beam, self._shaft_residual(q, shaft, q_rate, speed, q_acc, shaft_acc, integral, goal,
                                                    goal_rate, g_loc)[0])

    def _shaft_residual(self, q: NDArray[np.float64], shaft: float, q_rate: NDArray[np.float64], speed: float,
                        q_acc: NDArray[np.float64], shaft_acc: float, integral: float, goal: float, goal_rate: float,
                        g_loc: NDArray[np.float64]) -> tuple[float, float]:
        """The shaft's row [N m] and the size of its terms (the sum of their magnitudes, the loop's included: what
        round-off is relative to) [N m]."""
        s = self.shaft
        loop = self.loop
        terms = ((s.inertia + float(s.inertia_gradient @ q)) * shaft_acc, float(s.coupling @ q_acc),
                 speed * float(s.inertia_gradient @ q_rate),
                 -float(g_loc @ (_J2 @ (s.first_moment + s.first_moment_map @ q))),
                 -float(self.loop.torque(goal, goal_rate, shaft, speed, integral)))
        coupling_terms = float(np.abs(s.coupling) @ np.abs(q_acc))
        loop_terms = (loop.kp * (abs(goal) + abs(shaft)) + loop.ki * abs(integral)
                      + loop.kd * (abs(goal_rate) + abs(speed)) + loop.kff1 * abs(goal_rate)
                      + loop.stall_torque * abs(speed) / loop.max_velocity)
        return sum(terms), sum(abs(v) for v in terms) + coupling_terms + loop_terms

    def modes(self, goal: float, n_modes: int = 3) -> PlantModes:
        """The small oscillations about the rest state at ``goal`` [rad] (a numerical linearization of
        :meth:`residual`; the duty must not be clipped there).

        Returns:
            The lowest ``n_modes`` oscillatory modes.
        """
        from scipy.linalg import eig

        rest = self.equilibrium(goal)
        n = self.n_dofs + 1
        z0 = np.append(rest.q, rest.shaft)
        zero = np.zeros(n)

        def res(z: NDArray, zd: NDArray, zdd: NDArray, iota: float, plant: ServoBeam) -> NDArray:
            return plant.residual(z[:-1], z[-1], zd[:-1], zd[-1], zdd[:-1], zdd[-1], iota, goal, 0.0)

        def jacobians(plant: ServoBeam) -> tuple[NDArray, NDArray, NDArray, NDArray]:
            out = []
            for which in range(3):
                jac = np.zeros((n, n))
                for j in range(n):
                    h = 1e-6 * max(1.0, abs(z0[j])) if which == 0 else 1e-6
                    e = np.zeros(n)
                    e[j] = h
                    args_p = [z0 + e if which == 0 else z0, e if which == 1 else zero, e if which == 2 else zero]
                    args_m = [z0 - e if which == 0 else z0, -e if which == 1 else zero, -e if which == 2 else zero]
                    jac[:, j] = (res(*args_p, rest.integral, plant) - res(*args_m, rest.integral, plant)) / (2 * h)
                out.append(jac)
            h = 1e-6 * max(1.0, abs(rest.integral))
            d_iota = (res(z0, zero, zero, rest.integral + h, plant) - res(z0, zero, zero, rest.integral - h, plant)) \
                / (2 * h)
            return out[0], out[1], out[2], d_iota

        def oscillatory(plant: ServoBeam) -> tuple[NDArray, NDArray]:
            k, c, mass, d_iota = jacobians(plant)
            size = 2 * n + (1 if plant.loop.ki > 0.0 else 0)
            a = np.zeros((size, size))
            a[:n, n:2 * n] = np.eye(n)
            minv = np.linalg.inv(mass)
            a[n:2 * n, :n] = -minv @ k
            a[n:2 * n, n:2 * n] = -minv @ c
            if size > 2 * n:
                a[n:2 * n, -1] = -minv @ d_iota
                a[-1, n - 1] = -1.0  # ι̇ = g − θ
            lam = eig(a, right=False)
            lam = lam[lam.imag > 1e-9]
            order = np.argsort(np.abs(lam))
            lam = lam[order][:n_modes]
            return np.abs(lam.imag) / (2 * np.pi), -lam.real / np.abs(lam)

        freq, zeta = oscillatory(self)
        undamped_loop = replace(self.loop, kd=0.0, max_velocity=math.inf, coulomb_friction=0.0,
                                viscous_friction=0.0)
        undamped = replace(self, alpha=0.0, beta=0.0, loop=undamped_loop)
        k, _, mass, _ = jacobians(undamped)
        from scipy.linalg import eigvals

        w2 = np.sort(np.real(eigvals(k, mass)))
        w2 = w2[w2 > 0][:n_modes]
        return PlantModes(freq, zeta, np.sqrt(w2) / (2 * np.pi))

    def simulate(self, time: NDArray[np.float64], goal: NDArray[np.float64], goal_rate: NDArray[np.float64],
                 start: PlantState | None = None) -> ServoBeamRun:
        """Integrate with the trapezoidal rule on the uniform grid ``time`` (n,) [s] (the compiled loop,
        :func:`retarget.fit.beam_servo_kernels.servo_trapezoidal`; :meth:`simulate_reference` is the same in Python).

        Args:
            time: Uniform grid (n,) [s].
            goal, goal_rate: The servo's goal [rad] and its rate [rad/s] on the grid (n,).
            start: The state at ``time[0]`` (default: :meth:`equilibrium` at ``goal[0]``, at rest).

        Raises:
            PlantError: The start pose cannot be held, or a step does not converge.
        """
        from retarget.fit.beam_servo_kernels import NOT_CONVERGED, SLOPE_LOST, servo_trapezoidal

        t, g, gd = self._grid(time, goal, goal_rate)
        state = start if start is not None else self.equilibrium(float(g[0]))
        q, v, shaft, speed, acc, integral, status, k, value = servo_trapezoidal(
            float(t[1] - t[0]), float(self.youngs_modulus), float(self.alpha), float(self.beta), g, gd,
            _c(state.q), _c(state.q_rate), _c(state.q_acc), float(state.shaft), float(state.speed),
            float(state.shaft_acc), float(state.integral), self.model._constants, self._shaft_loop)
        if status == SLOPE_LOST:
            raise PlantError(f"the shaft equation lost its slope ({value!r}): the step is not solvable", float(t[k]))
        if status == NOT_CONVERGED:
            raise PlantError(f"the step did not converge (shaft residual {value:.3g} N m)", float(t[k]))
        return self._run(t, g, gd, shaft, speed, acc, q, v, integral)

    def simulate_reference(self, time: NDArray[np.float64], goal: NDArray[np.float64],
                           goal_rate: NDArray[np.float64], start: PlantState | None = None) -> ServoBeamRun:
        """:meth:`simulate` in Python, one :meth:`_step` per grid point (the reference the compiled loop is tested
        against)."""
        t, g, gd = self._grid(time, goal, goal_rate)
        dt = float(t[1] - t[0])
        state = start if start is not None else self.equilibrium(float(g[0]))
        n_t, n = len(t), self.n_dofs
        q_out = np.zeros((n_t, n))
        v_out = np.zeros((n_t, n))
        shaft, speed, acc = np.zeros(n_t), np.zeros(n_t), np.zeros(n_t)
        integral = np.zeros(n_t)
        # Accelerations consistent with the start (h = 0: the equations at time[0] solved for q̈, θ̈).
        state, _ = self._step(state, 0.0, float(g[0]), float(gd[0]), float(g[0]), None, float(t[0]))
        slope: float | None = None
        for i in range(n_t):
            if i:
                state, slope = self._step(state, dt, float(g[i]), float(gd[i]), float(g[i - 1]), slope, float(t[i]))
            q_out[i], v_out[i] = state.q, state.q_rate
            shaft[i], speed[i], acc[i], integral[i] = state.shaft, state.speed, state.shaft_acc, state.integral
        return self._run(t, g, gd, shaft, speed, acc, q_out, v_out, integral)

    @staticmethod
    def _grid(time: NDArray[np.float64], goal: NDArray[np.float64], goal_rate: NDArray[np.float64]
              ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        t, g, gd = _c(time), _c(goal), _c(goal_rate)
        if t.ndim != 1 or len(t) < 2 or g.shape != t.shape or gd.shape != t.shape:
            raise ValueError(f"time, goal, goal_rate must be (n,) with n ≥ 2, got {t.shape}, {g.shape}, {gd.shape}")
        return t, g, gd

    def _run(self, t: NDArray[np.float64], g: NDArray[np.float64], gd: NDArray[np.float64],
             shaft: NDArray[np.float64], speed: NDArray[np.float64], acc: NDArray[np.float64],
             q: NDArray[np.float64], v: NDArray[np.float64], integral: NDArray[np.float64]) -> ServoBeamRun:
        """The run's record, with the loop's torque and duty and the tip's positions."""
        tau = np.asarray(self.loop.torque(g, gd, shaft, speed, integral), dtype=float)
        duty = np.asarray(self.loop.duty(g, gd, shaft, speed, integral), dtype=float)
        return ServoBeamRun(t, g, gd, shaft, speed, acc, q, v, self.model.tip_positions(shaft, q), tau, duty,
                            integral)

    @cached_property
    def _shaft_loop(self) -> ShaftLoop:
        """The shaft's constants, the loop's parameters and the rig's gravity as the compiled loop takes them."""
        from retarget.fit.beam_servo_kernels import ShaftLoop

        s, loop, asm = self.shaft, self.loop, self._assembly
        return ShaftLoop(
            float(s.inertia), _c(s.inertia_gradient), _c(s.coupling), _c(s.first_moment),
            _c(s.first_moment_map), float(loop.kp), float(loop.ki), float(loop.kd), float(loop.kff1),
            float(loop.stall_torque), float(loop.max_velocity), float(loop.coulomb_friction),
            float(loop.viscous_friction), float(loop.duty_limit), FRICTION_SPEED, asm.g_a0, asm.g_l0)

    def _step(self, prev: PlantState, dt: float, goal: float, goal_rate: float, goal_prev: float,
              slope: float | None, t: float) -> tuple[PlantState, float]:
        """One trapezoidal step of ``dt`` from ``prev`` (``dt = 0``: the consistent accelerations at ``prev``).

        Returns:
            The new state and the shaft equation's slope ``dF/dθ̈`` (reused by the next step's first iterate).
        """
        asm = self._assembly
        mass = self.model.mass
        h1, h2 = 0.5 * dt, 0.25 * dt * dt
        q_pred = prev.q + dt * prev.q_rate + h2 * prev.q_acc
        v_pred = prev.q_rate + h1 * prev.q_acc
        th_pred = prev.shaft + dt * prev.speed + h2 * prev.shaft_acc
        w_pred = prev.speed + h1 * prev.shaft_acc
        err_prev = goal_prev - prev.shaft
        i_pred = prev.integral + h1 * err_prev

        def evaluate(x: float) -> tuple[float, float, PlantState]:
            th, w = th_pred + h2 * x, w_pred + h1 * x
            g_loc = asm.gravity_local(th)
            c, k, f = asm.matrices(w, x, g_loc)
            a = np.linalg.solve(mass + h1 * c + h2 * k, f - c @ v_pred - k @ q_pred)
            q, v = q_pred + h2 * a, v_pred + h1 * a
            iota = i_pred + h1 * (goal - th) if dt > 0.0 else prev.integral
            r, size = self._shaft_residual(q, th, v, w, a, x, iota, goal, goal_rate, g_loc)
            return r, size, PlantState(q, v, a, th, w, x, iota)

        x = prev.shaft_acc
        r, _, _ = evaluate(x)
        if slope is None:
            dx = 1e-6 * (1.0 + abs(x))
            slope = (evaluate(x + dx)[0] - r) / dx
        for _ in range(60):
            if not (slope > 0.0 and math.isfinite(slope)):
                raise PlantError(f"the shaft equation lost its slope ({slope!r}): the step is not solvable", t)
            x_new = x - r / slope
            r_new, size, state = evaluate(x_new)
            # Converged when the residual is at round-off of its terms, or the iterate stops moving.
            if abs(r_new) <= 1e-12 * size or abs(x_new - x) <= 1e-9 * (1.0 + abs(x_new)):
                return state, slope
            if x_new != x and r_new != r:
                secant = (r_new - r) / (x_new - x)
                if secant > 0.0:
                    slope = secant
            x, r = x_new, r_new
        raise PlantError(f"the step did not converge (shaft residual {r:.3g} N m)", t)


def static_deflection(model: BeamModel, youngs_modulus: float, shaft: NDArray[np.float64]) -> NDArray[np.float64]:
    """Static beam coordinates under gravity with the shaft held at each angle.

    Args:
        model: The beam.
        youngs_modulus: E [Pa].
        shaft: Shaft angles (m,) [rad].

    Returns:
        ``q`` (m, n): the solution of ``K(θ) q = f(θ)`` of :meth:`BeamModel.matrices` at rest, per angle.
    """
    th = np.atleast_1d(np.asarray(shaft, dtype=float))
    g_loc = model.gravity_local(th)
    k = (youngs_modulus * model.stiffness_unit)[None] + g_loc[:, 0, None, None] * model.geo_gravity[None]
    f_tip = model.rig.tip_mass * g_loc  # (m, 2)
    k[:, -1, -1] += f_tip @ model.tip_offset
    f = g_loc[:, 1, None] * model.load_gravity_lateral[None] + f_tip @ model.tip_map
    return np.linalg.solve(k, f[..., None])[..., 0]


def quasi_static_tip(model: BeamModel, youngs_modulus: float, shaft: NDArray[np.float64]) -> NDArray[np.float64]:
    """Where the tip would be if the pose were held with the shaft at each angle (m,) [rad], gravity sag included
    (the intent a plan is measured against) → (m, 3) [m]."""
    th = np.atleast_1d(np.asarray(shaft, dtype=float))
    return model.tip_positions(th, static_deflection(model, youngs_modulus, th))


def build_servo_beam(rig: StepTestRig, servo: ServoParams | None = None, n_elements: int = 12,
                     youngs_modulus: float | None = None, alpha: float | None = None,
                     beta: float | None = None) -> ServoBeam:
    """The rig's beam on a servo-driven shaft.

    Args:
        rig: The rig (its hub: the horn and what is welded to it).
        servo: The servo (default: the rig's, ``rig.servo``).
        n_elements: Beam elements.
        youngs_modulus, alpha, beta: The part's material (default: the rig's).

    Raises:
        PlantError: No servo given and the rig has none, or the servo is the ideal position source.
    """
    servo = servo if servo is not None else rig.servo
    if servo is None:
        raise PlantError(f"rig {rig.name!r} has no servo: give one")
    model = build_beam_model(rig, n_elements)
    mat = rig.material
    return ServoBeam(
        model=model,
        servo=servo,
        loop=DynamixelLoop.from_params(servo),
        youngs_modulus=float(mat.youngs_modulus if youngs_modulus is None else youngs_modulus),
        alpha=float(mat.rayleigh_alpha if alpha is None else alpha),
        beta=float(mat.rayleigh_beta if beta is None else beta),
        shaft=shaft_terms(model, servo.rotor_inertia),
    )
