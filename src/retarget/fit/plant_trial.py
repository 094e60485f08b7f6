"""A trial of a plan on a robot the planner does not know, recorded as OptiTrack would: the rehearsal of
``retarget refine`` without hardware.

:func:`play_trial` plays a plan (its angles as the servo's goals) in the servo–beam plant of a single-rod robot
(:mod:`retarget.fit.beam_servo`: its own beam, loop and integrator, none of the planner's code) with a model error
(:class:`PlantPerturbation`: Young's modulus, Rayleigh damping, the loop's gains, a latency on the goal) and
measures it as :mod:`retarget.fit.replay` does: the tip's deviation from the plant's own intent (the quasi-static tip
with the shaft at the input angle, in this plant's beam), peak, RMS and ring-out, and the servo's peak torque over
stall. :func:`write_take` writes what a motion-capture system would have recorded of it (:class:`CaptureSettings`:
rate, marker noise, occlusions, the capture frame rotated and offset from the robot's, a capture that starts before
or after the motion) as a Motive CSV export (format 1.23, millimetres, Y up), the file ``retarget refine`` reads.

The latency delays the goal: the plant plays ``g(t − latency)``. The deviation is measured in the plant's clock
(``deviation_m``) and against the intent delayed by the latency (``delayed_deviation_m``: what a robot whose
commands all arrive late could at best do, since a take without a shared clock cannot show a pure delay).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from retarget.errors import InputError
from retarget.fit.beam_servo import ServoBeam, build_servo_beam, quasi_static_tip
from retarget.fit.replay import goal_profile, motor_column
from retarget.fit.rig import StepTestRig

__all__ = ["CaptureSettings", "PlantPerturbation", "PlantTrial", "TrialMetrics", "capture_transform", "play_trial",
           "write_take"]


@dataclass(frozen=True)
class PlantPerturbation:
    """How the plant differs from the robot's description (the model error the planner does not know).

    Attributes:
        youngs_factor: the rod's Young's modulus over the robot's material [-].
        alpha: Rayleigh mass damping [1/s]; None: the material's.
        beta: Rayleigh stiffness damping [s]; None: the material's.
        kp_factor, kd_factor: the loop's P gain and D gain over the robot's servo [-] (kd over the servo's kd, or
            ``kd`` added when the servo has none).
        kd: a D gain added to the loop [N m s/rad] (0: none).
        latency_s: the goal reaches the loop this late [s].
    """

    youngs_factor: float = 1.0
    alpha: float | None = None
    beta: float | None = None
    kp_factor: float = 1.0
    kd_factor: float = 1.0
    kd: float = 0.0
    latency_s: float = 0.0

    def plant(self, rig: StepTestRig, n_elements: int = 12) -> ServoBeam:
        """The rig's servo–beam plant with this error.

        Raises:
            InputError: a factor that is not positive, a negative latency, a rig without a modelled servo.
        """
        if not (self.youngs_factor > 0 and self.kp_factor > 0 and self.kd_factor >= 0 and self.kd >= 0):
            raise InputError("plant perturbation: youngs_factor and kp_factor must be positive, kd and kd_factor "
                             f"non-negative (got {self})")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise InputError(f"plant perturbation: latency must be 0 or more [s], got {self.latency_s}")
        servo = rig.servo
        if servo is None or servo.ideal:
            raise InputError(f"robot {rig.name!r}: a plant trial needs a modelled servo")
        servo = servo.with_values(kp=servo.kp * self.kp_factor, kd=servo.kd * self.kd_factor + self.kd)
        mat = rig.material
        return build_servo_beam(rig, servo, n_elements, youngs_modulus=float(mat.youngs_modulus) * self.youngs_factor,
                                alpha=self.alpha, beta=self.beta)


@dataclass(frozen=True)
class TrialMetrics:
    """What one trial did, in the plant.

    Attributes:
        peak_deviation_m, rms_deviation_m: |tip − intent| over the run [m] (plant clock).
        ring_out_peak_m: its peak once the goals stop moving [m].
        delayed_peak_deviation_m, delayed_rms_deviation_m: the same against the intent delayed by the latency [m].
        peak_torque_ratio: the servo's peak |torque| over its stall torque [-].
        clipped_s: time the duty spent at its limit [s].
    """

    peak_deviation_m: float
    rms_deviation_m: float
    ring_out_peak_m: float
    delayed_peak_deviation_m: float
    delayed_rms_deviation_m: float
    peak_torque_ratio: float
    clipped_s: float


@dataclass(frozen=True, eq=False)
class PlantTrial:
    """One trial on the plant's grid.

    Attributes:
        time_s: (n,) [s], 0 at the motion's start. goal: what the loop received (n,) [rad] (delayed).
        tip_position_m: the tip's centre of mass (n, 3) [m], robot frame.
        orientation: the tip body's orientation (n, 3, 3) (robot frame).
        deviation_m: |tip − intent| (n,) [m]. metrics: its figures.
    """

    time_s: NDArray[np.float64]
    goal: NDArray[np.float64]
    tip_position_m: NDArray[np.float64]
    orientation: NDArray[np.float64]
    deviation_m: NDArray[np.float64]
    metrics: TrialMetrics


def play_trial(rig: StepTestRig, input_motion: object, plan_motion: object,
               perturbation: PlantPerturbation = PlantPerturbation(), dt: float = 1e-3, tail_s: float = 1.0,
               n_elements: int = 12) -> PlantTrial:
    """Play ``plan_motion`` (its angles as goals) on the perturbed plant, from rest at its first goal.

    Args:
        rig: the single-rod robot (:func:`retarget.fit.rig.load_rig`).
        input_motion: the motion as authored (the intent).
        plan_motion: the goals to play (a plan, or the input itself: the naive playback).
        perturbation: the model error.
        dt: step [s]. tail_s: simulated after the later of the two motions ends [s].
        n_elements: beam elements.

    Raises:
        InputError: a motion not for this robot; PlantError: a pose the servo cannot hold.
    """
    from retarget.fit.beam import rotation_about

    plant = perturbation.plant(rig, n_elements)
    intent_samples = motor_column(input_motion, rig.motor, "the input motion")
    plan_samples = motor_column(plan_motion, rig.motor, "the plan")
    start = min(intent_samples[0][0], plan_samples[0][0])
    end = max(intent_samples[0][-1], plan_samples[0][-1]) + tail_s + perturbation.latency_s
    time = start + dt * np.arange(int(np.ceil((end - start) / dt - 1e-9)) + 1)
    goal, rate, _ = goal_profile(*plan_samples, time - perturbation.latency_s)
    run = plant.simulate(time, goal, rate)
    intent = quasi_static_tip(plant.model, plant.youngs_modulus, goal_profile(*intent_samples, time)[0])
    delayed = quasi_static_tip(plant.model, plant.youngs_modulus,
                               goal_profile(*intent_samples, time - perturbation.latency_s)[0])
    dev = np.linalg.norm(run.tip_position_m - intent, axis=1)
    dev_delayed = np.linalg.norm(run.tip_position_m - delayed, axis=1)
    moving = np.flatnonzero(np.abs(goal - goal[-1]) > 1e-3)
    after = time >= (time[min(moving[-1] + 1, len(time) - 1)] if moving.size else time[0])
    servo = plant.servo
    metrics = TrialMetrics(
        peak_deviation_m=float(dev.max()), rms_deviation_m=float(np.sqrt(np.mean(dev**2))),
        ring_out_peak_m=float(dev[after].max()) if after.any() else 0.0,
        delayed_peak_deviation_m=float(dev_delayed.max()),
        delayed_rms_deviation_m=float(np.sqrt(np.mean(dev_delayed**2))),
        peak_torque_ratio=float(np.abs(run.torque).max() / servo.stall_torque),
        clipped_s=float(np.sum(np.abs(run.duty) >= servo.duty_limit * (1.0 - 1e-12)) * dt))
    slope = run.q[:, -1] if run.q.shape[1] else np.zeros(len(time))
    orientation = rotation_about(rig.axis, run.shaft + slope)
    return PlantTrial(time, goal, run.tip_position_m, orientation, dev, metrics)


@dataclass(frozen=True)
class CaptureSettings:
    """How the motion-capture system sees the trial.

    Attributes:
        body: the rigid body's name in the export.
        rate_hz: capture rate [Hz].
        noise_m: position noise per axis [m] (0.3 mm: a rigid body of a few markers in a small volume).
        occlusion: probability that a frame misses the body (its cells left empty) [-].
        rotation_rpy_deg: the robot frame's roll, pitch, yaw in the capture frame [deg], applied after
            Motive's Y-up convention (robot z → mocap y).
        offset_m: where the robot frame's origin sits in the capture frame [m].
        lead_s: the capture starts this long before the motion [s] (negative: after it started).
        tail_s: the capture ends this long after the trial's last sample [s] (negative: before it).
        seed: noise and occlusion seed.
        robot_clock: the time column is the robot's clock (0 at the motion's start; a capture starting late
            begins later) instead of Motive's (0 at the take's first frame).
    """

    body: str = "tip"
    rate_hz: float = 120.0
    noise_m: float = 3e-4
    occlusion: float = 0.0
    rotation_rpy_deg: tuple[float, float, float] = (0.0, 0.0, 0.0)
    offset_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    lead_s: float = 0.5
    tail_s: float = 0.0
    seed: int = 0
    robot_clock: bool = False


def capture_transform(capture: CaptureSettings) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(R (3, 3), t (3,))`` with ``x_mocap = R x_robot + t``: Motive's Y up, then the settings' rotation and
    offset."""
    from scipy.spatial.transform import Rotation

    y_up = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
    rot = Rotation.from_euler("xyz", capture.rotation_rpy_deg, degrees=True).as_matrix() @ y_up
    return rot, np.asarray(capture.offset_m, dtype=float)


def write_take(trial: PlantTrial, capture: CaptureSettings, out: str | Path) -> Path:
    """Write what the capture saw of ``trial`` as a Motive CSV export (module docstring); returns the path.

    Raises:
        InputError: a rate that is not positive, or a capture that sees nothing of the trial.
    """
    from scipy.spatial.transform import Rotation

    from retarget.fit.twin import write_motive_csv

    if not (capture.rate_hz > 0 and math.isfinite(capture.rate_hz)):
        raise InputError(f"capture rate must be positive [Hz], got {capture.rate_hz}")
    t0 = -float(capture.lead_s)
    t1 = float(trial.time_s[-1]) + float(capture.tail_s)
    if t1 <= t0:
        raise InputError("the capture sees nothing of the trial: it starts after the trial ends")
    times = t0 + np.arange(int(np.floor((t1 - t0) * capture.rate_hz)) + 1) / capture.rate_hz
    # Before the trial the robot rests at its first pose; the capture samples the plant's grid linearly (1 ms).
    inside = np.clip(times, trial.time_s[0], trial.time_s[-1])
    pos = np.stack([np.interp(inside, trial.time_s, trial.tip_position_m[:, a]) for a in range(3)], axis=1)
    index = np.clip(np.searchsorted(trial.time_s, inside), 0, len(trial.time_s) - 1)
    rot, trans = capture_transform(capture)
    rng = np.random.default_rng(capture.seed)
    mocap = pos @ rot.T + trans + capture.noise_m * rng.standard_normal(pos.shape)
    quats = Rotation.from_matrix(rot[None] @ trial.orientation[index]).as_quat()
    tracked = rng.random(len(times)) >= capture.occlusion
    clock = times if capture.robot_clock else times - times[0]
    return write_motive_csv(out, capture.body, clock, mocap, quats, tracked, capture.rate_hz)
