"""The planner node: the ``retarget_interfaces/action/Retarget`` action over the optimizer.

Action ``~/refine`` (:mod:`retarget.ros.refine_server`): ``retarget refine`` through ROS, the next plan from a take
of the plan played. Action ``~/retarget``: the goal's animation is validated against the robot's joints; the optimizer
(:func:`retarget.planning.plan`, the same orchestration as ``retarget plan``, with
:class:`~retarget.planning.PlanOptions` built from the node's parameters and the goal) runs with per-iteration
feedback; the result carries the optimized
JointTrajectory and metrics, which is also published latched (transient local) on ``~/optimized_trajectory``.
When no reduced model of the robot is available (and ``allow_training`` is false), or the ``time_budget`` runs out
before the first evaluated trajectory, the result is ``NOT_AVAILABLE`` with the reason — never a fake success. With
``execute: true`` an optimized trajectory is forwarded to the trajectory server, unless the plan's checks judge
it worse than the input or beyond the stall torque (then FAILED, the plan still returned and published: see
:attr:`retarget.planning.checks.Verdict.execution_refusal`). A cancel stops the optimizer as
Ctrl-C stops ``retarget plan``: the result is ``CANCELED`` and carries the best trajectory evaluated so far (with
its metrics), which is neither published nor executed; cancelled before the optimizer's first simulation finished,
it carries none. A stop signal (SIGINT, SIGTERM) ends a running plan the same way, at its next cancel poll, so the
node stops (:mod:`retarget.ros.spinning`).
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import rclpy
from control_msgs.action import FollowJointTrajectory
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from retarget_interfaces.action import Retarget
from trajectory_msgs.msg import JointTrajectory

from retarget.control import TrajectoryRejected, validate_trajectory
from retarget.errors import InputError, NotAvailableError, RetargetError
from retarget.jsonsafe import dumps
from retarget.optimize.errors import NoPlanningModelError, PlanCancelled
from retarget.planning.budget import TRAINING_BUILD_FACTOR, StageEstimate, format_seconds
from retarget.planning.settings import PLAN_SETTINGS, missing_files
from retarget.ros.action_client import LockedActionClient
from retarget.ros.conversions import goal_points
from retarget.ros.params import declare
from retarget.ros.refine_server import RefineServer, served_robot
from retarget.ros.spinning import close_node, spin, stopping_on_signals

if TYPE_CHECKING:
    from retarget.planning.budget import PlanEstimate
    from retarget.planning.options import PlanOptions
    from retarget.planning.run import PlanProgress
    from retarget.planning.variants import PlanResult

__all__ = ["Planner", "TrainingFeedback", "fallback_models", "main"]

Result = Retarget.Result


class Planner(Node):
    """Serves Retarget goals; forwards optimized trajectories to the trajectory server on request."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("planner", **kwargs)
        T = Parameter.Type
        self.robot_name = declare(self, "robot_name", T.STRING, "", "robot served by default")
        self.joint_names = tuple(declare(self, "joint_names", T.STRING_ARRAY, [], "the robot's motors, wire order"))
        self.server_action = declare(self, "trajectory_server_action", T.STRING,
                                     "/trajectory_server/follow_joint_trajectory",
                                     "FollowJointTrajectory action used when a goal asks to execute")
        kinds = {float: T.DOUBLE, int: T.INTEGER, bool: T.BOOL, str: T.STRING}
        for setting in PLAN_SETTINGS:  # the planner settings, each declared once (retarget.planning.settings)
            setattr(self, setting.name, declare(self, setting.name, kinds[setting.kind], setting.default,
                                                setting.description(), low=setting.low, high=setting.high))
        self.shipped_model = declare(self, "shipped_model", T.BOOL, True,
                                     "with no reduced_file and no model cached or in the model folders, plan on the "
                                     "model shipped with retarget for this robot (the drummer's demo model)")
        group = ReentrantCallbackGroup()
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self._optimized = self.create_publisher(JointTrajectory, "~/optimized_trajectory", latched)
        self._follow = LockedActionClient(self, FollowJointTrajectory, self.server_action, callback_group=group)
        self._server = ActionServer(self, Retarget, "~/retarget", execute_callback=self._execute,
                                    goal_callback=lambda _goal: GoalResponse.ACCEPT,
                                    cancel_callback=lambda _handle: CancelResponse.ACCEPT, callback_group=group)
        self._refine = RefineServer(self, group)  # ~/refine: retarget refine through ROS (ros/refine_server.py)
        for line in missing_files({s.name: getattr(self, s.name) for s in PLAN_SETTINGS}):
            self.get_logger().warning(line)
        servos = f", the servos of {self.servo_file}" if self.servo_file else ""
        self.get_logger().info(f"ready: robot {self.robot_name or '(unset)'}, {len(self.joint_names)} joints{servos}")

    def _feedback(self, handle: ServerGoalHandle, started: float, stage: str, iteration: int = 0,
                  objective: float = 0.0, gradient_norm: float = 0.0) -> None:
        handle.publish_feedback(Retarget.Feedback(stage=stage, iteration=iteration, objective=float(objective),
                                                  gradient_norm=float(gradient_norm),
                                                  elapsed_time=time.monotonic() - started))

    def _model_text(self, exc: NoPlanningModelError) -> str:
        """The NOT_AVAILABLE text of a goal without a model: what was searched and exactly what to pass."""
        robot = exc.robot or self.robot_name
        return (f"no reduced model of {robot} to plan with: none given (parameter reduced_file), none cached or in "
                f"the model folders ({', '.join(exc.searched)}), none shipped, and allow_training is false. Pass "
                f"one: `retarget up {robot} --reduced FILE.npz`, `ros2 launch retarget {robot}.launch.py "
                f"reduced:=FILE.npz` or the planner parameter reduced_file: FILE.npz (build it with `retarget reduce "
                f"{robot} --train-motion {robot}/MOTION --out FILE.npz`); or set allow_training: true in "
                f"config/{robot}.params.yaml to train one on the first goal"
                + (f" (skipped: {'; '.join(exc.skipped)})" if exc.skipped else ""))

    def _progress(self, handle: ServerGoalHandle, started: float, info: Mapping[str, object]) -> None:
        """Feedback when a stage begins and per optimizer iteration (with windows the stage names the window)."""
        if "iteration" not in info:
            self._feedback(handle, started, str(info.get("stage", "optimizing")))
            return
        stage = "optimizing"
        if "window" in info:
            stage = f"optimizing window {info['window']} of {info['windows']}"
        self._feedback(handle, started, stage, iteration=int(info.get("iteration", 0)),
                       objective=float(info.get("objective", 0.0)), gradient_norm=float(info.get("gradient_norm", 0.0)))

    def _validate(self, goal: Retarget.Goal) -> None:
        served_robot(self.robot_name, goal.robot)
        if not self.joint_names:
            raise InputError("the planner has no joint_names parameter: start it with the robot's params file")
        validate_trajectory(goal.animation.joint_names, goal_points(goal.animation),
                            controller_joints=self.joint_names, partial=True)  # motors left out hold zero
        if goal.position_weights and len(goal.position_weights) != len(goal.tracked_bodies):
            raise InputError(f"{len(goal.position_weights)} position_weights for {len(goal.tracked_bodies)} "
                             "tracked_bodies")

    async def _execute(self, handle: ServerGoalHandle) -> Result:
        started = time.monotonic()
        goal: Retarget.Goal = handle.request
        self._feedback(handle, started, "validating")
        try:
            self._validate(goal)
        except (TrajectoryRejected, InputError) as exc:
            handle.abort()
            return Result(error_code=Result.INVALID_GOAL, error_string=str(exc), wall_time=time.monotonic() - started)
        try:
            from retarget.motion.motion import Motion
            from retarget.planning import plan

            points = goal_points(goal.animation)
            motion = Motion(np.array([p.time_from_start for p in points], dtype=float),
                            tuple(goal.animation.joint_names),
                            np.array([list(p.positions) for p in points], dtype=float))
            self._feedback(handle, started, "loading")  # the reduced model; plan() reports the stages after it
            options = self._options(goal)
            outcome = plan(self.robot_name or goal.robot, motion, options, self._plan_progress(handle, started))
        except PlanCancelled as exc:
            if not self.context.ok():  # stopped by a signal: nobody is left to answer
                return Result(error_code=Result.CANCELED, error_string="the planner stopped",
                              wall_time=time.monotonic() - started)
            handle.canceled()
            return Result(error_code=Result.CANCELED, error_string=f"{exc} (no optimized trajectory yet)",
                          wall_time=time.monotonic() - started)
        except NotAvailableError as exc:  # includes a time budget that ran out before any result
            text = self._model_text(exc) if isinstance(exc, NoPlanningModelError) else str(exc)
            self.get_logger().warning(text)
            handle.abort()
            return Result(error_code=Result.NOT_AVAILABLE, error_string=text,
                          wall_time=time.monotonic() - started)
        except RetargetError as exc:
            handle.abort()
            return Result(error_code=Result.FAILED, error_string=str(exc), wall_time=time.monotonic() - started)
        except Exception as exc:  # a bug: the goal fails with what happened (rclpy would answer an empty success)
            import traceback

            self.get_logger().error(f"planning failed: {traceback.format_exc()}")
            handle.abort()
            return Result(error_code=Result.FAILED, error_string=f"internal error: {type(exc).__name__}: {exc}",
                          wall_time=time.monotonic() - started)
        result, metrics = self._result(outcome, started, float(motion.time[0]))
        if not self.context.ok():  # stopped by a signal during the plan: neither published nor executed
            result.error_code, result.error_string = Result.CANCELED, "the planner stopped"
            return result
        if handle.is_cancel_requested:
            # The best iterate when the cancel came (or the finished plan, if it came at the very end): returned,
            # but neither published nor executed.
            handle.canceled()
            result.error_code = Result.CANCELED
            result.error_string = (f"cancelled after {result.iterations} iterations: the optimized trajectory is "
                                   "the best one evaluated so far")
            return result
        self._optimized.publish(result.optimized)
        if goal.execute:
            from retarget.planning.variants import servo_refusal

            refused = ((outcome.verdict.execution_refusal if outcome.verdict is not None else "")
                       or servo_refusal(metrics, self.robot_name or goal.robot, options.servo_file))
            if refused:  # the plan is returned and published, for inspection; the robot does not play it
                self.get_logger().error(refused)
                handle.abort()
                result.error_code, result.error_string = Result.FAILED, refused
                return result
            self._feedback(handle, started, "executing")
            error = await self._forward(result.optimized)
            if error:
                handle.abort()
                result.error_code, result.error_string = Result.FAILED, error
                return result
        handle.succeed()
        return result

    def _options(self, goal: Retarget.Goal) -> PlanOptions:
        """The plan's options: the node's parameters, then the goal's fields (0, negative or empty: the default).

        A goal's ``max_iterations`` budgets the plan by iterations as ``retarget plan --max-iterations`` does: the
        work after the optimizer that the count does not bound is skipped (:func:`iteration_budgeted`), and said."""
        from retarget.optimize import TrackedBodyWeights, WeightSchedule
        from retarget.planning.options import ITERATION_BUDGET_SKIPS, iteration_budgeted
        from retarget.planning.settings import NODE_PARAMETERS, options_from_parameters

        def given(value: float) -> float | None:
            return value if isinstance(value, (int, float)) and value > 0 else None

        bodies = None
        if goal.tracked_bodies:
            weights = list(goal.position_weights) or [1.0] * len(goal.tracked_bodies)
            bodies = tuple(TrackedBodyWeights(link, WeightSchedule.constant(float(w)), WeightSchedule.constant(0.0))
                           for link, w in zip(goal.tracked_bodies, weights))
        parameters = {name: getattr(self, name) for name in NODE_PARAMETERS}
        options = options_from_parameters(
            parameters, fallback_models=fallback_models(self.robot_name or goal.robot, self.reduced_file,
                                                        self.shipped_model),
            knot_spacing=given(goal.knot_spacing), max_iterations=given(goal.max_iterations),
            relative_tolerance=given(goal.relative_tolerance),
            deviation_weight=goal.deviation_weight if goal.deviation_weight >= 0 else None,
            acceleration_weight=goal.acceleration_weight if goal.acceleration_weight >= 0 else None, bodies=bodies)
        if given(goal.max_iterations) is None:
            return options
        options, skipped = iteration_budgeted(options)
        for name in skipped:
            self.get_logger().info(f"max_iterations {goal.max_iterations}: skipping {ITERATION_BUDGET_SKIPS[name]}")
        return options

    def _plan_progress(self, handle: ServerGoalHandle, started: float) -> PlanProgress:
        """Feedback when a stage begins and per optimizer iteration; the goal's cancel request."""
        from retarget.planning import PlanProgress
        from retarget.planning.stages import FEEDBACK_STAGES, TRAINING_STAGE

        current: list[str] = []
        training = TrainingFeedback(self.time_budget or None)

        def steps(stage: str, done: int, total: int) -> None:
            if stage == TRAINING_STAGE:
                text = training.stage(done, total, time.monotonic())
                if text:
                    current[:] = [TRAINING_STAGE]
                    self._feedback(handle, started, text)
                return
            name = FEEDBACK_STAGES.get(stage, stage)
            if current != [name]:
                current[:] = [name]
                self._progress(handle, started, {"stage": name})

        def estimate(what: StageEstimate | PlanEstimate) -> None:
            if isinstance(what, StageEstimate):  # the training, before it starts
                training.expected_s = what.seconds
                text = f"{TRAINING_STAGE}: {what.line()}"
            else:
                text = what.summary()
            self.get_logger().info(text)
            self._feedback(handle, started, text)

        return PlanProgress(steps=steps, iteration=lambda info: self._progress(handle, started, info),
                            message=lambda text: self.get_logger().info(text),
                            cancelled=lambda: handle.is_cancel_requested or not self.context.ok(),
                            estimate=estimate)

    def _result(self, outcome: PlanResult, started: float, start_time: float) -> tuple[Result, dict[str, object]]:
        """The action's result of a finished plan, and the plan's metrics it carries as ``metrics_json``."""
        from retarget.ros.conversions import point_msg

        names, times, positions = outcome.trajectory(start_time)
        traj = JointTrajectory(joint_names=list(names))
        traj.points = [point_msg(q, time_from_start=t) for t, q in zip(times.tolist(), positions.tolist())]
        metrics = outcome.to_json()
        for warning in metrics.get("warnings", []):  # also in metrics_json; the log is where operators look
            self.get_logger().warning(f"plan: {warning}")
        return Result(error_code=Result.SUCCESSFUL, optimized=traj,
                      objective_initial=float(metrics.get("objective_initial", 0.0)),
                      objective_final=float(metrics.get("objective_final", 0.0)),
                      iterations=int(metrics.get("iterations", 0)),
                      naive_peak_deviation=float(metrics.get("naive_peak_deviation", 0.0)),
                      optimized_peak_deviation=float(metrics.get("optimized_peak_deviation", 0.0)),
                      naive_rms_deviation=float(metrics.get("naive_rms_deviation", 0.0)),
                      optimized_rms_deviation=float(metrics.get("optimized_rms_deviation", 0.0)),
                      wall_time=time.monotonic() - started, metrics_json=dumps(metrics, default=float)), metrics

    async def _forward(self, trajectory: JointTrajectory) -> str:
        """Execute on the trajectory server; returns an error text, empty on success."""
        if not self._follow.wait_for_server(timeout_sec=5.0):
            return f"trajectory server {self.server_action} is not available"
        handle = await self._follow.send_goal_async(FollowJointTrajectory.Goal(trajectory=trajectory))
        if not handle.accepted:
            return "the trajectory server rejected the optimized trajectory"
        response = await handle.get_result_async()
        if response.result.error_code != 0:
            return f"execution failed ({response.result.error_code}): {response.result.error_string}"
        return ""


def fallback_models(robot: str, reduced_file: str, shipped: bool) -> tuple[str, ...]:
    """The models the node plans with when no ``reduced_file`` is given and none is cached or in the model folders:
    the ones shipped with retarget for ``robot`` (none when ``shipped`` is false or a file is given)."""
    from retarget.sim.reduced.store import shipped_candidates

    if reduced_file or not shipped or not robot:
        return ()
    return tuple(str(p) for p in shipped_candidates(robot))


class TrainingFeedback:
    """The feedback stage of an in-process training: how far its full simulation is, the time left (from the
    estimate, then from the measured rate), and the plan's time budget; at most one text per
    :data:`TRAINING_FEEDBACK_S`."""

    def __init__(self, time_budget: float | None) -> None:
        self.time_budget = time_budget
        self.expected_s: float | None = None
        self._began: float | None = None
        self._last = -math.inf

    def stage(self, done: int, total: int, now: float) -> str:
        """The text for step ``done`` of ``total`` at ``now`` [s, monotonic], or "" when the last is recent."""
        if self._began is None:
            self._began = now
        if now - self._last < TRAINING_FEEDBACK_S and done < total:
            return ""
        self._last = now
        fraction = done / total if total > 0 else 0.0
        if fraction > 0.02:  # the simulation's rest, then mass-PCA and cubature
            simulation = (now - self._began) / fraction
            left = simulation * (1.0 - fraction) + (TRAINING_BUILD_FACTOR - 1.0) * simulation
            eta = f"about {format_seconds(left)} left"
        elif self.expected_s is not None:
            eta = f"expected about {format_seconds(self.expected_s)}"
        else:
            eta = "time left not known yet"
        budget = "no time budget" if not self.time_budget else f"time budget {format_seconds(self.time_budget)}"
        return f"training reduced model: full simulation {100 * fraction:.0f} % (step {done} of {total}), {eta}; {budget}"


#: Shortest interval between two training feedback messages [s].
TRAINING_FEEDBACK_S = 2.0


def main(args: list[str] | None = None) -> None:
    """Run the planner until Ctrl-C or external shutdown."""
    try:
        with rclpy.init(args=args), stopping_on_signals():
            node = Planner()
            # Two threads: the optimization runs inside the goal callback, a cancel needs the other one.
            spin(node, MultiThreadedExecutor)
            close_node(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == "__main__":
    main()
