"""The fitter's view of a simulator: the tip trajectory of a step test for given E, α, β, and one adapter per engine.

:class:`StepTestSimulator` is the whole interface the fitter uses. Adapters:

- :class:`BeamEngine`: the turning-beam surrogate (:mod:`retarget.fit.beam`), ~0.4 s for a 4 s step test;
- :class:`FullEngine`: the full-space FEM + rigid-body engine (:mod:`retarget.sim`); exact physics but minutes per
  simulated second on this machine, so it is for checking the surrogate, not for fitting;
- :class:`ReducedEngine`: the compiled reduced engine (:func:`retarget.sim.reduced.simulate_compiled`) on a trained
  reduced model (``retarget reduce``): geometrically exact, ~1 s per simulated second. E varies without
  retraining: the Neo-Hookean energy is linear in (μ, λ), so at fixed ν the cubature forces and the rest stiffness
  ``K₀`` (used by β) scale with E/E₀; α and β are replaced.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError, NotAvailableError
from retarget.fem.material import elastic_constants
from retarget.fit.rig import StepTestRig

__all__ = [
    "ENGINES",
    "BeamEngine",
    "FullEngine",
    "MotorProfile",
    "ReducedEngine",
    "ServoBeamEngine",
    "StepTestSimulator",
    "TipTrajectory",
    "make_simulator",
    "motor_profile",
]

#: Engine names accepted by :func:`make_simulator` (``auto`` = the fastest available).
ENGINES: tuple[str, ...] = ("auto", "beam", "servo-beam", "reduced", "full")


@dataclass(frozen=True, eq=False)
class TipTrajectory:
    """The simulated tip on a uniform time grid.

    Attributes:
        time_s: (n,) [s] from the start of the motion.
        position_m: Tip centre of mass in the robot's world frame (n, 3) [m].
        motor_rad: Motor angle (n,) [rad].
        angle_rad: Rotation of the tip body about the motor axis since the reference configuration (n,) [rad]
            (motor angle plus the part's end slope), or ``None`` if the engine does not provide it.
    """

    time_s: NDArray[np.float64]
    position_m: NDArray[np.float64]
    motor_rad: NDArray[np.float64]
    angle_rad: NDArray[np.float64] | None = None

    def at(self, times: NDArray[np.float64]) -> NDArray[np.float64]:
        """Positions linearly interpolated at ``times`` (m,) [s] → (m, 3) [m]; ends are held."""
        t = np.asarray(times, dtype=float)
        return np.stack([np.interp(t, self.time_s, self.position_m[:, k]) for k in range(3)], axis=1)

    def angle_at(self, times: NDArray[np.float64]) -> NDArray[np.float64]:
        """Tip rotation about the motor axis relative to t = 0, interpolated at ``times`` (m,) [rad].

        Raises:
            ValueError: The engine gave no tip angle.
        """
        if self.angle_rad is None:
            raise ValueError("this simulation has no tip angle")
        return np.interp(np.asarray(times, dtype=float), self.time_s, self.angle_rad - self.angle_rad[0])


@dataclass(frozen=True, eq=False)
class MotorProfile:
    """A motor angle sampled with its derivatives on a uniform grid (C² cubic spline through the motion).

    Attributes:
        time_s: (n,) [s], starting at 0.
        angle: θ (n,) [rad].
        rate: θ̇ (n,) [rad/s].
        acceleration: θ̈ (n,) [rad/s²].
    """

    time_s: NDArray[np.float64]
    angle: NDArray[np.float64]
    rate: NDArray[np.float64]
    acceleration: NDArray[np.float64]

    @property
    def moving_interval(self) -> tuple[float, float]:
        """First and last time the motor moves faster than 1e-3 rad/s [s]."""
        moving = np.nonzero(np.abs(self.rate) > 1e-3)[0]
        if moving.size == 0:
            return 0.0, 0.0
        return float(self.time_s[moving[0]]), float(self.time_s[moving[-1]])


def motor_profile(motion: object, motor: str, dt: float) -> MotorProfile:
    """Sample ``motor``'s column of a :class:`retarget.motion.Motion` on a grid of step ``dt`` [s].

    Raises:
        InputError: The motion has no column for ``motor`` or fewer than two samples.
    """
    from scipy.interpolate import CubicSpline

    names = list(getattr(motion, "joint_names"))
    if motor not in names:
        raise InputError(f"the motion has no joint {motor!r} (it has {names})")
    t = np.asarray(getattr(motion, "time"), dtype=float)
    if t.size < 2:
        raise InputError("a step-test motion needs at least two samples")
    t = t - t[0]
    spline = CubicSpline(t, np.asarray(getattr(motion, "positions"), dtype=float)[:, names.index(motor)],
                         bc_type="natural")
    grid = np.arange(0.0, t[-1] + 0.5 * dt, dt)
    return MotorProfile(grid, spline(grid), spline(grid, 1), spline(grid, 2))


class StepTestSimulator(Protocol):
    """What the fitter needs from an engine."""

    rig: StepTestRig

    def simulate(self, youngs_modulus: float, alpha: float, beta: float, motion: object) -> TipTrajectory:
        """The tip trajectory for material parameters E [Pa], α [1/s], β [s] and a step-test motion."""
        ...


class BeamEngine:
    """The turning-beam surrogate (:mod:`retarget.fit.beam`).

    Args:
        rig: The rig.
        dt: Time step [s] of the trapezoidal rule (1 ms keeps the 2nd mode's period error below 0.2 %).
        n_elements: Beam elements.
    """

    name = "beam"
    #: What the engine assumes of the rig's servo (the fit's report states it).
    servo_assumption = ("not modelled: the shaft follows the motion exactly (a perfect position source); its sag and "
                        "lag go into the fitted material. --engine servo-beam drives the shaft through the rig's "
                        "servo loop")

    def __init__(self, rig: StepTestRig, dt: float = 1e-3, n_elements: int = 12) -> None:
        from retarget.fit.beam import build_beam_model

        if not dt > 0:
            raise InputError(f"time step must be positive, got {dt}")
        self.rig = rig
        self.dt = float(dt)
        self.model = build_beam_model(rig, n_elements)
        # id → (motion, profile): holding the motion keeps its id from being reused by a later object.
        self._profiles: dict[int, tuple[object, MotorProfile]] = {}

    def profile(self, motion: object) -> MotorProfile:
        """The motor profile of ``motion`` (cached per motion object)."""
        entry = self._profiles.get(id(motion))
        if entry is None or entry[0] is not motion:
            entry = (motion, motor_profile(motion, self.rig.motor, self.dt))
            self._profiles[id(motion)] = entry
        return entry[1]

    def simulate(self, youngs_modulus: float, alpha: float, beta: float, motion: object) -> TipTrajectory:
        """See :class:`StepTestSimulator`."""
        p = self.profile(motion)
        q, tip = self.model.simulate(youngs_modulus, alpha, beta, p.time_s, p.angle, p.rate, p.acceleration)
        return TipTrajectory(p.time_s, tip, p.angle, p.angle + q[:, -1])


class ServoBeamEngine:
    """The turning beam on the rig's servo-driven shaft (:mod:`retarget.fit.beam_servo`): the motion is the servo's
    goal; its loop (the rig's ``servo:``, or ``servo``) turns the shaft, which the beam loads back.

    Args:
        rig: The rig.
        dt: Time step [s] of the trapezoidal rule.
        n_elements: Beam elements.
        servo: The servo (default: the rig's).

    Raises:
        PlantError: The rig has no modelled servo (an ideal one is the beam engine's prescribed shaft).
    """

    name = "servo-beam"

    def __init__(self, rig: StepTestRig, dt: float = 1e-3, n_elements: int = 12, servo: object | None = None) -> None:
        from retarget.fit.beam_servo import build_servo_beam

        if not dt > 0:
            raise InputError(f"time step must be positive, got {dt}")
        self.rig = rig
        self.dt = float(dt)
        self.plant = build_servo_beam(rig, servo, n_elements)

    @property
    def servo_assumption(self) -> str:
        """What the engine assumes of the rig's servo (the fit's report states it): the loop it models."""
        servo = self.plant.servo
        return (f"{servo.model or 'servo'} loop, kp {servo.kp:.3g} N m/rad: the motion is its goal, the shaft a "
                "degree of freedom loaded by the part")

    def simulate(self, youngs_modulus: float, alpha: float, beta: float, motion: object) -> TipTrajectory:
        """See :class:`StepTestSimulator`: ``motor_rad`` is the shaft's angle, not the goal's."""
        p = motor_profile(motion, self.rig.motor, self.dt)
        plant = replace(self.plant, youngs_modulus=float(youngs_modulus), alpha=float(alpha), beta=float(beta))
        run = plant.simulate(p.time_s, p.angle, p.rate)
        return TipTrajectory(run.time_s, run.tip_position_m, run.shaft, run.shaft + run.q[:, -1])


class FullEngine:
    """The full-space engine (:func:`retarget.sim.simulate`) on the rig's own mesh.

    Args:
        rig: The rig.
        dt: BDF2 step [s].
        store_every: Keep every k-th step.
        resolution: ``(axial, around)`` mesh resolution of a ``rod`` generator part, overriding the rig file's
            (a coarser mesh for checks; the rig file itself is not changed).
        duration: Simulate only the first ``duration`` [s] of the motion (default: all of it).
    """

    name = "full"

    def __init__(self, rig: StepTestRig, dt: float = 5e-4, store_every: int = 2,
                 resolution: tuple[int, int] | None = None, duration: float | None = None) -> None:
        from retarget.model.loader import load_robot

        self.rig = rig
        self.dt = float(dt)
        self.store_every = int(store_every)
        self.duration = duration
        self.model = load_robot(rig.path) if resolution is None else _load_with_resolution(rig, resolution)

    def simulate(self, youngs_modulus: float, alpha: float, beta: float, motion: object) -> TipTrajectory:
        """See :class:`StepTestSimulator`."""
        from retarget.sim import SplineMotors, build_system, simulate

        # A generated mesh is stiffness-calibrated (FlexiblePart.stiffness_factor: its f₁ matches the converged
        # mesh's); the physical E the fit varies is scaled by the same factor on this mesh.
        parts = tuple(
            replace(p, material=replace(p.material, youngs_modulus=youngs_modulus * p.stiffness_factor,
                                        rayleigh_alpha=alpha, rayleigh_beta=beta))
            for p in self.model.flexible_parts
        )
        system = build_system(replace(self.model, flexible_parts=parts))
        p = motor_profile(motion, self.rig.motor, self.dt)
        motors = SplineMotors(p.time_s, p.angle[:, None])
        end = float(p.time_s[-1]) if self.duration is None else min(self.duration, float(p.time_s[-1]))
        result = simulate(system, motors, end, self.dt, store_every=self.store_every)
        from scipy.spatial.transform import Rotation

        angle = np.interp(result.time, p.time_s, p.angle)
        wxyz = result.rigid_poses[:, result.system.rigid_index(self.rig.tip_link), 3:]
        tip_angle = Rotation.from_quat(wxyz[:, [1, 2, 3, 0]]).as_rotvec() @ self.rig.axis
        return TipTrajectory(np.asarray(result.time), result.body_position(self.rig.tip_link), angle, tip_angle)


def _load_with_resolution(rig: StepTestRig, resolution: tuple[int, int]) -> object:
    """Load the rig's robot with its generated parts' mesh resolution replaced (axial, around); read from the rig's
    own file, so its packages, mesh files and ``materials.yaml`` resolve as they do for the rig."""
    from retarget.model.loader import load_robot, read_robot_yaml

    cfg = read_robot_yaml(rig.path)
    generated = [str(part.get("name", "")) for part in cfg.get("flexible_parts") or []
                 if "file" not in (part.get("mesh") or {})]
    return load_robot(rig.path, resolution={name: {"axial": int(resolution[0]), "around": int(resolution[1])}
                                            for name in generated})


class ReducedEngine:
    """The compiled reduced engine on a reduced model of the rig, with the part's material varied in place.

    ``E`` scales the cubature weights and the rest stiffness ``stiffness0`` of the rig's part by ``E / E₀`` (E₀ from
    the cubature's Lamé parameters, the model's training material, divided by the mesh's stiffness calibration
    factor: E and E₀ are physical moduli); α, β replace the part's damping. Nothing is
    retrained; the frozen model is copied with :func:`dataclasses.replace`. Note that the reduced engine damps the
    relative velocity ``ż`` in the reference body's frame (docs/reduced.md §3), as the beam surrogate damps the
    deflection rate in the turning frame, so fitted α, β mean the same in both.

    Args:
        rig: The rig.
        reduced: A :class:`retarget.sim.reduced.ReducedSystem` of the rig's robot (e.g. :func:`load_reduced_model`).
        dt: Time step [s] (the reduced engine's default, 1 ms).
        stiffness_factor: The calibration factor of the part's mesh the model was trained on
            (``FlexiblePart.stiffness_factor``; 1: not calibrated).
    """

    name = "reduced"

    def __init__(self, rig: StepTestRig, reduced: object, dt: float = 1e-3, stiffness_factor: float = 1.0) -> None:
        if not dt > 0:
            raise InputError(f"time step must be positive, got {dt}")
        if not stiffness_factor > 0:
            raise InputError(f"stiffness factor must be positive, got {stiffness_factor}")
        bodies = getattr(reduced, "bodies")
        names = [b.name for b in bodies]
        if rig.part not in names:
            raise InputError(f"the reduced model has no body {rig.part!r} (it has {names})")
        self.rig = rig
        self.dt = float(dt)
        self.reduced = reduced
        self.part_index = names.index(rig.part)
        cub = bodies[self.part_index].cubature
        self.stiffness_factor = float(stiffness_factor)
        trained, _ = elastic_constants(float(cub.mu), float(cub.lam))
        self.youngs_modulus_trained = trained / self.stiffness_factor

    def system_at(self, youngs_modulus: float, alpha: float, beta: float) -> object:
        """The reduced system with the part's E [Pa], α [1/s], β [s] (a copy; the model is not changed)."""
        scale = float(youngs_modulus) / self.youngs_modulus_trained
        bodies = list(getattr(self.reduced, "bodies"))
        body = bodies[self.part_index]
        bodies[self.part_index] = replace(
            body, cubature=replace(body.cubature, weights=body.cubature.weights * scale),
            stiffness0=body.stiffness0 * scale, alpha=float(alpha), beta=float(beta))
        return replace(self.reduced, bodies=tuple(bodies))  # type: ignore[type-var]

    def simulate(self, youngs_modulus: float, alpha: float, beta: float, motion: object) -> TipTrajectory:
        """See :class:`StepTestSimulator`."""
        from scipy.spatial.transform import Rotation

        from retarget.sim import SplineMotors
        from retarget.sim.reduced import simulate_compiled

        p = motor_profile(motion, self.rig.motor, self.dt)
        motors = SplineMotors(p.time_s, p.angle[:, None])
        run = simulate_compiled(self.system_at(youngs_modulus, alpha, beta), motors, float(p.time_s[-1]), self.dt)
        time = np.asarray(run.time)
        wxyz = run.rigid_poses[:, run.system.rigid_index(self.rig.tip_link), 3:]
        tip_angle = Rotation.from_quat(wxyz[:, [1, 2, 3, 0]]).as_rotvec() @ self.rig.axis
        return TipTrajectory(time, run.body_position(self.rig.tip_link), np.interp(time, p.time_s, p.angle),
                             tip_angle)


def load_reduced_model(rig: StepTestRig, path: str | object) -> object:
    """The reduced model of the rig's robot from an artifact written by ``retarget reduce`` (or cached by
    ``retarget plan``), loaded by the model store on the mesh it was trained on
    (:func:`retarget.sim.reduced.store.load_artifact`).

    Raises:
        StaleReducedModelError: The artifact does not match the robot files (named inputs changed).
        InputError: The artifact's motors differ from the robot's.
    """
    from retarget.sim.reduced.store import load_artifact

    return load_artifact(rig.path, path).reduced


def make_simulator(engine: str, rig: StepTestRig, dt: float | None = None,
                   reduced: str | object | None = None) -> StepTestSimulator:
    """The adapter for ``engine`` (one of :data:`ENGINES`).

    Args:
        engine: ``auto`` (reduced when a reduced model is given, else the beam surrogate), ``beam``,
            ``servo-beam`` (the beam on the rig's servo loop), ``reduced``, ``full``.
        rig: The rig.
        dt: Time step [s] (default: the engine's).
        reduced: A reduced-model artifact path (``retarget reduce``) or a loaded ``ReducedSystem``.

    Raises:
        InputError: Unknown engine name.
        NotAvailableError: The reduced engine was asked for without a reduced model.
    """
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose one of {list(ENGINES)}")
    if engine == "reduced" and reduced is None:
        raise NotAvailableError("the reduced engine needs a trained reduced model of the rig: make one with "
                                "`retarget reduce ROBOT --train-motion ROBOT/step_30 --out FILE.npz` and pass "
                                "--reduced FILE.npz (or use --engine beam)")
    if engine == "full":
        return FullEngine(rig, dt=dt or 5e-4)
    if engine == "servo-beam":
        return ServoBeamEngine(rig, dt=dt or 1e-3)
    if reduced is not None and engine in ("auto", "reduced"):
        from pathlib import Path

        if isinstance(reduced, (str, Path)):
            from retarget.sim.reduced.store import load_artifact

            artifact = load_artifact(rig.path, reduced)
            factors = {p.name: p.stiffness_factor for p in artifact.model.flexible_parts}
            return ReducedEngine(rig, artifact.reduced, dt=dt or 1e-3, stiffness_factor=factors.get(rig.part, 1.0))
        return ReducedEngine(rig, reduced, dt=dt or 1e-3)
    return BeamEngine(rig, dt=dt or 1e-3)
