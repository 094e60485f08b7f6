"""Replaying a plan in an independent plant: the servo–beam model of a single-rod robot.

A plan is optimized on a reduced FEM model with the servo loop (docs/optimize.md); a number measured only there is
not a result. :func:`replay` plays the input motion (naive: its angles as the servo's goals) and the plan (its
angles as goals) in :class:`retarget.fit.beam_servo.ServoBeam`, a different code (Euler–Bernoulli beam elements in
the turning frame, the Dynamixel loop written from its definition, its own time integration), with the robot's
geometry, and measures what the planner measures, independently:

- the tracked tip's deviation from the **intent**: the quasi-static tip with the **shaft at the input angle**
  (the static deflection under gravity at each input angle, in the beam model), peak and RMS over the whole run,
  and its peak after the run's goals stop moving (the ring-out);
- the servo: the peak error goal − shaft and the peak torque against stall, and how long the duty was clipped.

Both runs start at rest, each from its own static equilibrium at its first goal. Goals are the natural cubic
spline through the motion's samples, held before the first and after the last sample. With an ideal servo the
shaft is prescribed (the goal itself) and the beam alone is simulated.

How the goals reach the servo can be replayed as a robot's bus delivers them (:func:`delivered_goals`): written
every ``goal_period`` and held in between (the trajectory server's and the driver's rate: the servo's goal is a
staircase, its rate zero between writes), each ``latency`` after the plan's clock, each write taking the plan
``goal_lead`` ahead (the driver's parameter of that name: half a period by default). The intent keeps the authored
timing (a delay shows as deviation, for the naive run as for the plan) unless ``intent_delay`` shifts it: with the
delivery's mean delay (``latency + goal_period / 2``) what remains is the motion's shape, its timing set aside.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.fit.beam import BeamModel, build_beam_model
from retarget.fit.beam_servo import ServoBeam, build_servo_beam, quasi_static_tip
from retarget.fit.rig import StepTestRig
from retarget.model.servo import ServoParams

if TYPE_CHECKING:
    from retarget.motion.motion import Motion

__all__ = [
    "ACCEPTANCE_RATIO",
    "ReplayMetrics",
    "ReplayReport",
    "ReplayRun",
    "delivered_goals",
    "goal_profile",
    "motor_column",
    "replay",
]

#: The acceptance of a plan in an independent plant: its peak deviation at most this times the naive one's.
ACCEPTANCE_RATIO: float = 0.15
#: A run's goals have stopped moving once they stay within this of their final value [rad].
STOP_TOLERANCE: float = 1e-3


def motor_column(motion: Motion, motor: str, what: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Times (n,) [s] and angles (n,) [rad] of ``motor`` in a motion made for the rig.

    Raises:
        InputError: The motion has no column for ``motor``, or columns for joints the rig does not have (a motion
            for another robot), or fewer than two samples.
    """
    names = list(motion.joint_names)
    if motor not in names:
        raise InputError(f"{what} has no joint {motor!r} (it has {', '.join(names)}): it is not a motion for this "
                         f"robot, whose motor is {motor!r}")
    others = [n for n in names if n != motor]
    if others:
        raise InputError(f"{what} also drives {', '.join(others)}: it is a motion for another robot (this one has "
                         f"the single motor {motor!r})")
    if motion.num_samples < 2:
        raise InputError(f"{what} has {motion.num_samples} sample; replaying needs at least two")
    return np.asarray(motion.time, dtype=float), np.asarray(motion.positions, dtype=float)[:, names.index(motor)]


def goal_profile(times: NDArray[np.float64], angles: NDArray[np.float64], grid: NDArray[np.float64]
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The natural cubic spline through samples on ``grid`` (m,) [s], held outside them.

    Returns:
        ``(angle [rad], rate [rad/s], acceleration [rad/s²])`` (m,) each.
    """
    from scipy.interpolate import CubicSpline

    spline = CubicSpline(times, angles, bc_type="natural")
    inside = (grid >= times[0]) & (grid <= times[-1])
    t = np.clip(grid, times[0], times[-1])
    return spline(t), np.where(inside, spline(t, 1), 0.0), np.where(inside, spline(t, 2), 0.0)


def delivered_goals(times: NDArray[np.float64], angles: NDArray[np.float64], grid: NDArray[np.float64],
                    goal_period: float = 0.0, latency: float = 0.0, goal_lead: float = 0.0
                    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The servo's goal on ``grid`` (m,) [s] as a bus delivers it: :func:`goal_profile` at ``t − latency``, and
    with ``goal_period`` > 0 written every ``goal_period`` from the first sample's time, each write the profile
    ``goal_lead`` ahead, held until the next write (a held goal has zero rate and acceleration).

    Returns:
        ``(angle [rad], rate [rad/s], acceleration [rad/s²])`` (m,) each.
    """
    shifted = grid - latency
    if goal_period <= 0.0:
        return goal_profile(times, angles, shifted)
    written = times[0] + goal_period * np.floor((shifted - times[0]) / goal_period + 1e-9)
    zero = np.zeros_like(grid)
    return goal_profile(times, angles, written + goal_lead)[0], zero, zero


@dataclass(frozen=True)
class ReplayMetrics:
    """What one run did.

    Attributes:
        peak_deviation_m: Max over the run of |tip − intent| [m].
        rms_deviation_m: RMS over the run of |tip − intent| [m].
        ring_out_peak_m: Max of |tip − intent| after ``stop_time_s`` [m] (0 when the goals never stop).
        stop_time_s: When the run's goals stop moving (within 1e-3 rad of their final value) [s].
        peak_servo_error_rad: Max |goal − shaft| [rad] (0 with an ideal servo).
        peak_torque_nm: Max |servo torque| [N m] (``None`` with an ideal servo: it has no torque model).
        peak_torque_ratio: ``peak_torque_nm`` over the stall torque (``None`` with an ideal servo).
        clipped_s: Time the duty spent at its limit [s].
    """

    peak_deviation_m: float
    rms_deviation_m: float
    ring_out_peak_m: float
    stop_time_s: float
    peak_servo_error_rad: float
    peak_torque_nm: float | None
    peak_torque_ratio: float | None
    clipped_s: float


@dataclass(frozen=True, eq=False)
class ReplayRun:
    """One simulated run on the replay grid.

    Attributes:
        name: ``naive`` or ``plan``.
        goal: The servo's goal (n,) [rad]. shaft: The shaft angle (n,) [rad] (the goal with an ideal servo).
        tip_position_m: The tip's centre of mass (n, 3) [m]. deviation_m: |tip − intent| (n,) [m].
        torque: Servo torque (n,) [N m], or ``None`` with an ideal servo.
        metrics: Its figures.
    """

    name: str
    goal: NDArray[np.float64]
    shaft: NDArray[np.float64]
    tip_position_m: NDArray[np.float64]
    deviation_m: NDArray[np.float64]
    torque: NDArray[np.float64] | None
    metrics: ReplayMetrics


@dataclass(frozen=True, eq=False)
class ReplayReport:
    """Naive and plan replayed in the servo–beam plant.

    Attributes:
        rig: The robot's geometry. servo: The servo simulated.
        n_elements: Beam elements. dt: Time step [s].
        time_s: The replay grid (n,) [s]. intent_m: The intended tip (n, 3) [m].
        naive, plan: The two runs.
        goal_period, latency: How the goals reached the servo (:func:`delivered_goals`) [s].
        intent_delay: The intent's delay against the authored timing [s].
        goal_lead: How far ahead each write took the goal [s].
    """

    rig: StepTestRig
    servo: ServoParams
    n_elements: int
    dt: float
    youngs_modulus: float
    time_s: NDArray[np.float64]
    intent_m: NDArray[np.float64]
    naive: ReplayRun
    plan: ReplayRun
    goal_period: float = 0.0
    latency: float = 0.0
    intent_delay: float = 0.0
    goal_lead: float = 0.0

    @property
    def peak_ratio(self) -> float:
        """Plan's peak deviation over the naive one's."""
        return self.plan.metrics.peak_deviation_m / self.naive.metrics.peak_deviation_m

    @property
    def rms_ratio(self) -> float:
        """Plan's RMS deviation over the naive one's."""
        return self.plan.metrics.rms_deviation_m / self.naive.metrics.rms_deviation_m

    @property
    def passes(self) -> bool:
        """Whether the plan's peak is within :data:`ACCEPTANCE_RATIO` of the naive one's."""
        return self.peak_ratio <= ACCEPTANCE_RATIO

    def to_dict(self) -> dict[str, object]:
        """The report as plain JSON-able values (SI units)."""
        return {
            "robot": self.rig.name,
            "motor": self.rig.motor,
            "plant": "servo-beam" if not self.servo.ideal else "beam (ideal servo: prescribed shaft)",
            "servo": self.servo.to_config(),
            "beam_elements": self.n_elements,
            "youngs_modulus_pa": self.youngs_modulus,
            "dt_s": self.dt,
            "goal_period_s": self.goal_period,
            "latency_s": self.latency,
            "intent_delay_s": self.intent_delay,
            "goal_lead_s": self.goal_lead,
            "time_span_s": [float(self.time_s[0]), float(self.time_s[-1])],
            "naive": asdict(self.naive.metrics),
            "plan": asdict(self.plan.metrics),
            "peak_ratio": self.peak_ratio,
            "rms_ratio": self.rms_ratio,
            "acceptance_ratio": ACCEPTANCE_RATIO,
            "passes": self.passes,
        }


def _stop_time(time: NDArray[np.float64], goal: NDArray[np.float64]) -> float:
    away = np.flatnonzero(np.abs(goal - goal[-1]) > STOP_TOLERANCE)
    return float(time[min(away[-1] + 1, len(time) - 1)]) if away.size else float(time[0])


def _run(name: str, plant: ServoBeam | BeamModel, material: tuple[float, float, float], servo: ServoParams,
         time: NDArray[np.float64], samples: tuple[NDArray[np.float64], NDArray[np.float64]],
         intent: NDArray[np.float64], goal_period: float = 0.0, latency: float = 0.0,
         goal_lead: float = 0.0) -> ReplayRun:
    goal, rate, acc = delivered_goals(*samples, time, goal_period, latency, goal_lead)
    dt = float(time[1] - time[0])
    if isinstance(plant, ServoBeam):
        run = plant.simulate(time, goal, rate)
        shaft, tip, torque = run.shaft, run.tip_position_m, run.torque
        clipped = float(np.sum(np.abs(run.duty) >= servo.duty_limit * (1.0 - 1e-12)) * dt)
        peak_torque = float(np.abs(torque).max())
        ratio: float | None = peak_torque / servo.stall_torque
        error = float(np.abs(run.servo_error).max())
    else:
        _, tip = plant.simulate(*material, time, goal, rate, acc)
        shaft, torque, clipped, error = goal, None, 0.0, 0.0
        peak_torque, ratio = None, None
    dev = np.linalg.norm(tip - intent, axis=1)
    stop = _stop_time(time, goal)
    after = time >= stop
    metrics = ReplayMetrics(
        peak_deviation_m=float(dev.max()),
        rms_deviation_m=float(np.sqrt(np.mean(dev**2))),
        ring_out_peak_m=float(dev[after].max()) if after.any() else 0.0,
        stop_time_s=stop,
        peak_servo_error_rad=error,
        peak_torque_nm=peak_torque,
        peak_torque_ratio=ratio,
        clipped_s=clipped,
    )
    return ReplayRun(name, goal, shaft, tip, dev, torque, metrics)


def replay(rig: StepTestRig, input_motion: Motion, plan_motion: Motion, servo: ServoParams | None = None,
           dt: float = 1e-3, tail: float = 1.0, n_elements: int = 12, goal_period: float = 0.0,
           latency: float = 0.0, intent_delay: float = 0.0, goal_lead: float = 0.0) -> ReplayReport:
    """Replay the naive input and a plan in the servo–beam plant of ``rig`` (module docstring).

    Args:
        rig: The single-rod robot (:func:`retarget.fit.rig.load_rig`).
        input_motion: The motion as authored (:class:`retarget.motion.Motion`): the intent, and the naive goals.
        plan_motion: The plan (the motion ``retarget plan --out`` writes): its goals.
        servo: The servo (default: the rig's).
        dt: Time step [s].
        tail: Time simulated after the later of the two motions ends [s].
        n_elements: Beam elements.
        goal_period: The goals are written every this [s] and held in between (0: continuous).
        latency: Each goal reaches the servo this long after the plan's clock [s].
        intent_delay: The intent is the input's at ``t − intent_delay`` [s] (0: the authored timing).
        goal_lead: With ``goal_period``, each write takes the goal this far ahead [s].

    Raises:
        InputError: A motion not for this robot, a bad ``dt``, ``tail``, ``goal_period``, ``latency`` or
            ``intent_delay``, no servo, a ``goal_period`` with an ideal servo (its shaft would jump at every write).
        PlantError: A start pose the servo cannot hold, a step that does not converge.
    """
    if not (dt > 0 and np.isfinite(dt)):
        raise InputError(f"dt must be a positive time step [s], got {dt}")
    if not (tail >= 0 and np.isfinite(tail)):
        raise InputError(f"tail must be 0 or more [s], got {tail}")
    for what, value in (("goal_period", goal_period), ("latency", latency), ("intent_delay", intent_delay),
                        ("goal_lead", goal_lead)):
        if not (value >= 0 and np.isfinite(value)):
            raise InputError(f"{what} must be 0 or more [s], got {value}")
    servo = servo if servo is not None else rig.servo
    if servo is None:
        raise InputError(f"robot {rig.name!r} declares no servo: give one")
    if goal_period > 0 and servo.ideal:
        raise InputError("goal_period needs a modelled servo: an ideal one follows its goal exactly, so a held goal "
                         "would make its shaft jump at every write")
    naive_samples = motor_column(input_motion, rig.motor, "the input motion")
    plan_samples = motor_column(plan_motion, rig.motor, "the plan")
    start = min(naive_samples[0][0], plan_samples[0][0])
    end = max(naive_samples[0][-1], plan_samples[0][-1]) + tail + latency
    time = start + dt * np.arange(int(np.ceil((end - start) / dt - 1e-9)) + 1)
    mat = rig.material
    material = (float(mat.youngs_modulus), float(mat.rayleigh_alpha), float(mat.rayleigh_beta))
    plant: ServoBeam | BeamModel = (build_beam_model(rig, n_elements) if servo.ideal
                                    else build_servo_beam(rig, servo, n_elements))
    beam = plant if isinstance(plant, BeamModel) else plant.model
    intent = quasi_static_tip(beam, material[0], goal_profile(*naive_samples, time - intent_delay)[0])
    naive = _run("naive", plant, material, servo, time, naive_samples, intent, goal_period, latency, goal_lead)
    plan = _run("plan", plant, material, servo, time, plan_samples, intent, goal_period, latency, goal_lead)
    return ReplayReport(rig, servo, n_elements, dt, material[0], time, intent, naive, plan, goal_period, latency,
                        intent_delay, goal_lead)
