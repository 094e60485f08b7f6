"""A twin that differs from the planner's model: the documented perturbation of ``retarget up --perturb``.

The planner plans on the robot's reduced model; a robot is never exactly that model (docs/refine.md). To rehearse
the plan → play → record → refine loop through ROS, the twin runs a perturbed copy of the model it loads:

- ``stiffness``: every flexible part's stiffness × s (Young's modulus: the cubature forces, their tangent, the rest
  stiffness and with them ``β K(z) ż``; every vibration frequency × √s;
  :func:`retarget.sim.reduced.system.with_stiffness_scale`).
- ``damping``: both Rayleigh factors α and β × d (the damping ratio of every mode × d).
- ``servo_kp``, ``servo_kd``: each modelled servo's P and D gain, as its control table sets them, × k
  (:class:`~retarget.model.servo.ServoParams` ``kp``, ``kd``).
- ``latency``: the servos' goals act this late [s]: the simulation plays ``g(t − latency)``.
- ``marker_noise``: the standard deviation of the simulated mocap's seeded Gaussian noise on each position
  coordinate [m] (the mocap node's ``twin_position_noise_m``).

The knobs mirror :class:`retarget.fit.plant_trial.PlantPerturbation` (``youngs_factor`` → ``stiffness``, its
Rayleigh α/β → ``damping`` as a factor on the model's, ``kp_factor``/``kd_factor`` → ``servo_kp``/``servo_kd``,
``latency_s`` → ``latency``). Written as ``key=value`` pairs separated by commas
(``stiffness=1.07,damping=1.5,servo_kp=1.3,latency=0.01,marker_noise=0.0003``); :func:`parse_perturbation` names
the key or value it rejects.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from retarget.errors import InputError
from retarget.model.servo import ServoParams

if TYPE_CHECKING:
    from retarget.sim.reduced.system import ReducedSystem

__all__ = ["PERTURBATION_KEYS", "TwinPerturbation", "parse_perturbation"]

#: Largest latency accepted [s]: beyond it the twin would wait longer than its restart policy allows.
MAX_LATENCY_S = 1.0


@dataclass(frozen=True)
class TwinPerturbation:
    """How the twin differs from the model it loads (module docstring); the defaults change nothing.

    Attributes:
        stiffness: factor on every flexible part's stiffness [-] (> 0).
        damping: factor on the Rayleigh damping α and β [-] (≥ 0).
        servo_kp: factor on each modelled servo's P gain [-] (> 0).
        servo_kd: factor on each modelled servo's D gain [-] (≥ 0).
        latency: delay of the servos' goals [s] (0 to :data:`MAX_LATENCY_S`).
        marker_noise: the simulated mocap's position noise, standard deviation per coordinate [m] (≥ 0); None: the
            mocap node's own setting.
    """

    stiffness: float = 1.0
    damping: float = 1.0
    servo_kp: float = 1.0
    servo_kd: float = 1.0
    latency: float = 0.0
    marker_noise: float | None = None

    def __post_init__(self) -> None:
        for name, why in self.out_of_range():
            raise InputError(f"perturbation {name}={getattr(self, name)}: {why}")

    def out_of_range(self) -> list[tuple[str, str]]:
        """``(key, why)`` for every value out of its range (empty: valid)."""
        bad: list[tuple[str, str]] = []
        for name in ("stiffness", "servo_kp"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0.0):
                bad.append((name, "must be a positive factor"))
        for name in ("damping", "servo_kd"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0.0):
                bad.append((name, "must be a factor of 0 or more"))
        if not (math.isfinite(self.latency) and 0.0 <= self.latency <= MAX_LATENCY_S):
            bad.append(("latency", f"must be within 0 and {MAX_LATENCY_S:g} s"))
        if self.marker_noise is not None and not (math.isfinite(self.marker_noise) and self.marker_noise >= 0.0):
            bad.append(("marker_noise", "must be a standard deviation of 0 or more [m]"))
        return bad

    @property
    def is_identity(self) -> bool:
        """Whether the twin runs its model unchanged (marker noise aside)."""
        return (self.stiffness, self.damping, self.servo_kp, self.servo_kd, self.latency) == (1.0, 1.0, 1.0, 1.0, 0.0)

    def to_text(self) -> str:
        """The ``key=value,...`` form :func:`parse_perturbation` reads (the values that differ from the default)."""
        default = TwinPerturbation()
        return ",".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                        if getattr(self, f.name) != getattr(default, f.name))

    def to_json(self) -> dict[str, float | None]:
        """Every key and its value."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def reduced(self, system: ReducedSystem) -> ReducedSystem:
        """A :class:`~retarget.sim.reduced.ReducedSystem` with this stiffness and damping (servos unchanged)."""
        from retarget.sim.reduced.system import with_stiffness_scale

        scaled = with_stiffness_scale(system, self.stiffness)
        if self.damping == 1.0:
            return scaled
        bodies = tuple(replace(b, alpha=b.alpha * self.damping, beta=b.beta * self.damping) for b in scaled.bodies)
        return replace(scaled, bodies=bodies)

    def servo(self, params: ServoParams) -> ServoParams:
        """``params`` with this P and D gain factor (an ideal motor unchanged)."""
        if params.ideal or (self.servo_kp == 1.0 and self.servo_kd == 1.0):
            return params
        return params.with_values(kp=params.kp * self.servo_kp, kd=params.kd * self.servo_kd)


#: The keys ``--perturb`` accepts.
PERTURBATION_KEYS: tuple[str, ...] = tuple(f.name for f in fields(TwinPerturbation))


def parse_perturbation(text: str) -> TwinPerturbation:
    """``stiffness=1.07,damping=1.5,servo_kp=1.3,latency=0.01,marker_noise=0.0003`` (any subset, any order).

    Raises:
        InputError: an item that is not KEY=VALUE, an unknown key (the known ones listed), a key given twice, a
            value that is not a finite number (:func:`retarget.cliargs.parse_assignments`), or one out of its range
            (:meth:`TwinPerturbation.out_of_range`), each named.
    """
    from retarget.cliargs import parse_assignments

    values = parse_assignments(text.split(","), PERTURBATION_KEYS, "perturbation")
    return TwinPerturbation(**values)
