"""The planning problem: the input fitted by B-splines, its quasi-static targets and the adjoint problem
(:func:`build_plan_problem`), and the motor limits a robot description gives (:func:`limits_for`)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.motion.motion import Motion
from retarget.optimize.adjoint import (
    AdjointProblem,
    Evaluation,
    TrackedPoses,
    evaluate,
    rollout,
)
from retarget.optimize.bspline import ProfileFit, fit_profiles
from retarget.optimize.control import Deadline
from retarget.optimize.errors import OptimizeError, TimeBudgetError
from retarget.optimize.limits import (
    MotorLimits,
    TorquePenalty,
    VelocityPenalty,
    parameter_bounds,
)
from retarget.optimize.objective import MotorRegularizer, TrackingObjective
from retarget.optimize.robust import Ensemble, evaluate_ensemble
from retarget.optimize.solver_settings import ProblemOptions
from retarget.optimize.targets import Targets, quasi_static_targets
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule
from retarget.sim.engine import Engine, EngineState
from retarget.sim.errors import SimulationError
from retarget.sim.servo import holding_goals

if TYPE_CHECKING:
    from retarget.model.robot import RobotModel

__all__ = ["PlanProblem", "build_plan_problem", "limits_for"]

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class PlanProblem:
    """A built planning problem.

    Attributes:
        problem: the adjoint problem.
        fit: the least-squares fit of the input (the naive profiles, ``x₀``).
        targets: the quasi-static targets.
        motion: the input motion, starting at 0.
        bounds: L-BFGS-B bounds per parameter.
        limits: motor limits.
        ensemble: the robust objective's models (:mod:`retarget.optimize.robust`), or None: ``problem`` alone.
        naive_fit: the input as authored fitted by B-splines, where the optimizer starts from something else: with
            modelled servos, ``fit`` holds the goals that hold each target pose at rest (the servos' sag
            pre-compensated), ``naive_fit`` the input itself. None: ``fit`` is the input's.
        naive_start: the static state the naive playback starts from (its first goal held), with ``naive_fit``.
    """

    problem: AdjointProblem
    fit: ProfileFit
    targets: Targets
    motion: Motion
    bounds: list[tuple[float | None, float | None]]
    limits: MotorLimits
    ensemble: Ensemble | None = None
    naive_fit: ProfileFit | None = None
    naive_start: EngineState | None = None

    @property
    def input_fit(self) -> ProfileFit:
        """The input as authored, fitted (what the naive playback sends)."""
        return self.fit if self.naive_fit is None else self.naive_fit

    @property
    def naive_problem(self) -> AdjointProblem:
        """The adjoint problem whose parameters are the input's fit (``input_fit.parameters``), from the naive
        playback's own start: the naive playback is its evaluation."""
        if self.naive_fit is None:
            return self.problem
        return replace(self.problem, start=self.naive_start, template=self.naive_fit.profiles,
                       parametrization=self.naive_fit.parametrization)

    def evaluate(self, x: NDArray[np.float64], gradient: bool = True,
                 progress: Callable[[int, int], None] | None = None) -> Evaluation:
        """``J`` (and its gradient) at ``x``: averaged over the ensemble when there is one."""
        if self.ensemble is None:
            return evaluate(self.problem, x, gradient=gradient, progress=progress)
        return evaluate_ensemble(self.ensemble, x, gradient=gradient, progress=progress)

    def bound_arrays(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(lower, upper)`` per parameter, ``∓inf`` for an unlimited side."""
        return (np.array([-np.inf if lo is None else lo for lo, _ in self.bounds], dtype=float),
                np.array([np.inf if hi is None else hi for _, hi in self.bounds], dtype=float))

    def on_engine(self, engine: Engine) -> AdjointProblem:
        """The nominal problem on another model (a stiffness-scaled one), from that model's static equilibrium."""
        return member_problem(self.problem, engine, self.fit)


def member_problem(problem: AdjointProblem, engine: Engine, fit: ProfileFit) -> AdjointProblem:
    """``problem`` on ``engine``, starting from its static equilibrium at the fit's first pose."""
    return replace(problem, engine=engine, start=engine.solve_static(fit.profiles.value(0.0)))


def build_plan_problem(engine: Engine, motion: Motion, bodies: Sequence[TrackedBodyWeights], limits: MotorLimits,
                       options: ProblemOptions, progress: Callable[[str, int, int], None] | None = None,
                       deadline: Deadline | None = None,
                       members: Sequence[tuple[float, Engine]] = (), follow_playback: bool = False) -> PlanProblem:
    """Fit the profiles, solve the targets and assemble the adjoint problem.

    Args:
        engine: the simulator.
        motion: the input animation; its columns must include every motor of the engine.
        bodies: tracked bodies and weights.
        limits: motor limits in the engine's motor order.
        options: settings.
        progress: ``progress(stage, done, total)``.
        deadline: when the targets must be solved by; None: no limit.
        members: ``(stiffness factor, engine)`` of the robust objective's other models (:mod:`retarget.optimize.robust`;
            empty: the nominal model alone). They track the nominal targets.
        follow_playback: solve each target from the state the input's playback reaches at that sample (one forward
            simulation more), so that a robot with closed kinematic loops is tracked on the assembly branch it takes
            (:func:`~retarget.optimize.targets.quasi_static_targets`); if that playback cannot be simulated, the
            targets are continued from sample to sample.

    Raises:
        OptimizeError: motors missing from the motion, no tracked body, a too short motion.
        TimeBudgetError: the targets were not solved by ``deadline``.
    """
    if not bodies:
        raise OptimizeError("no tracked body: give tracked_bodies in the robot YAML or --weight LINK:pos=1")
    names = list(engine.motor_names)
    missing = [m for m in names if m not in motion.joint_names]
    if missing:
        raise OptimizeError(f"the motion has no column for motors {missing} (it has {list(motion.joint_names)})")
    m0 = motion.shifted(-float(motion.time[0]))
    m0 = Motion(m0.time, tuple(names), np.stack([m0.positions[:, m0.joint_index(n)] for n in names], axis=1))
    duration = m0.duration if options.duration is None else min(float(options.duration), m0.duration)
    if not duration > 2 * options.dt:
        raise OptimizeError(f"the motion is too short to simulate ({duration} s with dt {options.dt} s)")
    n_steps = int(round(duration / options.dt))
    times = np.arange(n_steps + 1) * options.dt
    stop = motion_stop_time(m0)
    rest_from = None if options.rest_after is None else stop + max(float(options.rest_after), 0.0)
    input_fit = fit_profiles(m0, options.knot_spacing, rest_from=rest_from)
    angles = m0.sample(times)
    poses = TrackedPoses.build(engine, [b.link for b in bodies])
    naive_start = engine.solve_static(input_fit.profiles.value(0.0))
    targets = _targets(engine, poses, input_fit, naive_start, times, angles, options, progress, deadline,
                       follow_playback)
    fit, start, reference, naive_fit = input_fit, naive_start, angles, None
    if not engine.servos.ideal:
        # The servos' goals that hold the target poses at rest (sag pre-compensated): the optimizer's start and
        # the regularizer's reference; the naive playback stays the input as authored.
        fit, reference = _holding_fit(engine, m0, times, angles, targets, options.knot_spacing, rest_from)
        start = engine.solve_static(fit.profiles.value(0.0), naive_start)
        naive_fit = input_fit
    tracking = TrackingObjective.build(times, bodies, targets.positions, targets.orientations)
    if options.settle_weight != 1.0:
        tracking = settled(tracking, stop, float(options.settle_weight))
    reg = MotorRegularizer.build(fit.profiles, times, reference, WeightSchedule.parse(options.deviation_weight),
                                 WeightSchedule.parse(options.acceleration_weight))
    vel = VelocityPenalty.build(fit.profiles, times, limits, options.velocity_weight) if options.velocity_weight > 0 \
        else None
    torque = TorquePenalty.build(options.dt, limits, options.torque_weight, options.torque_margin,
                                 engine.servos.per_motor, engine.shaft_speed_index) \
        if options.torque_weight > 0 else None
    problem = AdjointProblem(engine, start, options.dt, n_steps, fit.profiles, fit.parametrization, tracking, poses,
                             reg, vel, torque_penalty=torque)
    bounds = parameter_bounds(fit.parametrization, limits)
    ensemble = None
    if members:
        others = tuple(member_problem(problem, e, fit) for _, e in members)
        ensemble = Ensemble(problem, others, tuple(float(f) for f, _ in members))
    return PlanProblem(problem, fit, targets, m0, bounds, limits, ensemble, naive_fit,
                       naive_start if naive_fit is not None else None)


def _targets(engine: Engine, poses: TrackedPoses, input_fit: ProfileFit, naive_start: EngineState,
             times: NDArray[np.float64], angles: NDArray[np.float64], options: ProblemOptions,
             progress: Callable[[str, int, int], None] | None, deadline: Deadline | None,
             follow_playback: bool) -> Targets:
    """The quasi-static targets at ``times`` [s]: the tracked poses with every shaft at its input angle
    (``angles``: (n_t, n_motors) [rad]; a modelled servo's own sag is not intended), with ``follow_playback`` each
    solved from the state the input's playback reaches there.

    Raises:
        TimeBudgetError: the targets were not solved by ``deadline``.
    """
    started = time.perf_counter()

    def cb(k: int, n: int) -> None:
        if deadline is not None and deadline.passed():
            raise TimeBudgetError(f"the time budget ran out while solving the quasi-static targets ({k} of {n} "
                                  "solves)", stage="targets", elapsed_s=time.perf_counter() - started)
        if progress is not None:
            progress("targets", k, n)

    warm_states = None
    if follow_playback:
        try:
            warm_states = rollout(engine, naive_start, input_fit.profiles, options.dt, len(times) - 1,
                                  None if progress is None else
                                  (lambda k, n: progress("input playback (target branches)", k, n))).states
        except SimulationError as exc:
            _LOG.warning("the input's playback could not be simulated (%s): the targets are continued from sample "
                         "to sample", exc)
    return quasi_static_targets(engine.ideal_servos(), poses, times, angles, cb, options.target_stride, warm_states)


def _holding_fit(engine: Engine, m0: Motion, times: NDArray[np.float64], angles: NDArray[np.float64],
                 targets: Targets, knot_spacing: float,
                 rest_from: float | None) -> tuple[ProfileFit, NDArray[np.float64]]:
    """Modelled servos: the fit of the goals that hold the target poses at rest (the input plus the holding
    offset, on the input's samples: the same spline space as the input's fit) and those goals at ``times``
    ((n_t, n_motors) [rad])."""
    names = list(engine.motor_names)
    assert targets.torques is not None
    reference, beyond = holding_goals(engine.servos.per_motor, angles, -targets.torques)
    if np.any(beyond):
        names_beyond = sorted({names[m] for m in np.flatnonzero(np.any(beyond, axis=0))})
        _LOG.warning("holding the input's poses at rest asks more than the stall torque of %s",
                     ", ".join(names_beyond))
    # Held beyond the simulated grid.
    offset = np.stack([np.interp(m0.time, times, reference[:, m] - angles[:, m]) for m in range(len(names))],
                      axis=1)
    fit = fit_profiles(Motion(m0.time, tuple(names), m0.positions + offset), knot_spacing, rest_from=rest_from)
    return fit, reference


def motion_stop_time(motion: Motion, tolerance: float = 1e-6) -> float:
    """Last time the input moves [s] (start of the free ring-out)."""
    moving = np.flatnonzero(np.any(np.abs(np.diff(motion.positions, axis=0)) > tolerance, axis=1))
    return float(motion.time[moving[-1] + 1]) if moving.size else float(motion.time[0])


def settled(tracking: TrackingObjective, stop: float, factor: float) -> TrackingObjective:
    """``tracking`` with its weights × ``factor`` from ``stop`` [s] on
    (:attr:`~retarget.planning.options.PlanOptions.settle_weight`)."""
    if not (np.isfinite(factor) and factor > 0.0):
        raise OptimizeError(f"settle_weight must be a positive number, got {factor}")
    scale = np.where(tracking.times >= stop - 1e-12, factor, 1.0)[:, None]
    return replace(tracking, position_weights=tracking.position_weights * scale,
                   orientation_weights=tracking.orientation_weights * scale)


def limits_for(model: RobotModel, config: Mapping[str, object] | None = None) -> MotorLimits:
    """Motor limits from the model's joints (URDF position limits) and its servos (stall torque, no-load speed:
    :attr:`retarget.model.RobotModel.servos`, from the YAML's ``servo:`` section)."""
    from retarget.optimize.limits import ServoSpec

    del config  # the servo section is parsed (and checked) when the robot is loaded
    joints = {j.name: j for j in model.joints}
    lims = {}
    for m in model.motors:
        j = joints.get(m)
        if j is not None and (math.isfinite(j.lower) or math.isfinite(j.upper)):
            lims[m] = (j.lower, j.upper, 0.0)
    servos = {m: ServoSpec(s.model, s.max_velocity, s.stall_torque)
              for m, s in zip(model.motors, model.servo_list)}
    return MotorLimits.build(model.motors, lims, servos)
