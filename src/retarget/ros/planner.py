"""The planner node: the ``retarget_interfaces/action/Retarget`` action over the optimizer.

Action ``~/refine`` (:mod:`retarget.ros.refine_server`): ``retarget refine`` through ROS, the next plan from a take
of the plan played. Action ``~/retarget``: the goal's animation is validated against the robot's joints; the optimizer
(:func:`retarget.optimize.plan`, the same orchestration as ``retarget plan``, with
:class:`~retarget.optimize.PlanOptions` built from the node's parameters and the goal) runs with per-iteration
feedback; the result carries the optimized
JointTrajectory and metrics, which is also published latched (transient local) on ``~/optimized_trajectory``.
When no reduced model of the robot is available (and ``allow_training`` is false), or the ``time_budget`` runs out
before the first evaluated trajectory, the result is ``NOT_AVAILABLE`` with the reason — never a fake success. With
``execute: true`` an optimized trajectory is forwarded to the trajectory server, unless the plan's checks judge
it worse than the input or beyond the stall torque (then FAILED, the plan still returned and published: see
:attr:`retarget.optimize.checks.Verdict.execution_refusal`). A cancel stops the optimizer as
Ctrl-C stops ``retarget plan``: the result is ``CANCELED`` and carries the best trajectory evaluated so far (with
its metrics), which is neither published nor executed; cancelled before the optimizer's first simulation finished,
it carries none. A stop signal (SIGINT, SIGTERM) ends a running plan the same way, at its next cancel poll, so the
node stops (:mod:`retarget.ros.spinning`).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import rclpy
from control_msgs.action import FollowJointTrajectory
from rclpy.action import ActionClient, ActionServer, CancelResponse, GoalResponse
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
from retarget.optimize.errors import PlanCancelled
from retarget.optimize.options import REST_AFTER_S, PlanOptions
from retarget.ros.conversions import goal_points
from retarget.ros.params import declare
from retarget.ros.refine_server import RefineServer
from retarget.ros.spinning import close_node, spin, stopping_on_signals

__all__ = ["Planner", "main"]

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
        self.reduced_file = declare(self, "reduced_file", T.STRING, "",
                                    "reduced model to plan with (.npz from `retarget reduce` or cached by "
                                    "`retarget plan`); "
                                    "empty: the newest fresh model of the robot in the model folders and cache")
        self.allow_training = declare(self, "allow_training", T.BOOL, False,
                                      "train a reduced model in-process when none is cached (minutes to hours); "
                                      "false: such goals end NOT_AVAILABLE with the command to build one")
        self.time_budget = declare(self, "time_budget", T.DOUBLE, 0.0,
                                   "wall-time budget of one plan [s] (model, targets, optimization); when it runs "
                                   "out the best iterate is returned (metrics budget_limited), or NOT_AVAILABLE "
                                   "if there is none yet; 0: no limit", low=0.0)
        self.dt = declare(self, "dt", T.DOUBLE, 0.0, "simulation time step of the plan [s]; 0: the optimizer's "
                          "default", low=0.0)
        self.target_stride = declare(self, "target_stride", T.INTEGER, 1, "solve the quasi-static targets every N "
                                     "steps and interpolate between (long motions: 5)", low=1, high=1000)
        self.window = declare(self, "window", T.DOUBLE, 0.0, "optimize in receding-horizon windows of this length "
                              "[s], one after another (long motions); 0: the whole motion at once", low=0.0)
        self.window_tail = declare(self, "window_tail", T.DOUBLE, 0.5, "how far past its span a window's "
                                   "objective reaches [s]", low=0.0)
        self.window_overlap = declare(self, "window_overlap", T.DOUBLE, 0.0, "how much of each window the next "
                                      "one optimizes again [s]", low=0.0)
        self.torque_weight = declare(self, "torque_weight", T.DOUBLE, 10.0, "penalty on simulated motor torques "
                                     "above (1 - torque_margin) x stall [1/(N^2 m^2 s)], e.g. 10; 0: only report "
                                     "and warn", low=0.0)
        self.torque_margin = declare(self, "torque_margin", T.DOUBLE, 0.1, "fraction of the stall torque the "
                                     "torque penalty keeps free", low=0.0, high=0.99)
        self.verify = declare(self, "verify", T.BOOL, True,
                              "re-simulate the naive and optimized trajectories at verify_dt and warn when the "
                              "improvement does not hold there (as `retarget plan`); time_budget keeps time for it "
                              "(skipped if it runs out all the same)")
        self.verify_dt = declare(self, "verify_dt", T.DOUBLE, 0.0, "verification step [s]; 0: the planning dt / 5",
                                 low=0.0)
        self.verify_model = declare(self, "verify_model", T.STRING, "", "the model the plan is verified in, one it "
                                    "was not optimized on: auto (the full FEM where affordable, else the newest "
                                    "verification model in the model folders' verify/), full, none, or a "
                                    "verification model's .npz; empty: auto")
        self.method = declare(self, "method", T.STRING, "", "optimizer: lbfgs (L-BFGS-B, adjoint gradient), "
                              "descent (projected steepest descent, line search on values alone), gauss-newton "
                              "(Levenberg-Marquardt, exact forward sensitivities) or auto; empty: lbfgs")
        self.max_iterations = declare(self, "max_iterations", T.INTEGER, 0, "optimizer iterations (per window with "
                                      "windows); 0: the optimizer's default (50)", low=0, high=100000)
        defaults = PlanOptions()
        self.rest_after = declare(self, "rest_after", T.DOUBLE, REST_AFTER_S, "the optimized motors come to rest "
                                  "this long [s] after the input stops and hold one pose from the next knot on; "
                                  "negative: only the end of the motion is at rest")
        self.settle_weight = declare(self, "settle_weight", T.DOUBLE, defaults.settle_weight, "factor on the "
                                     "tracked bodies' weights once the input stops moving (its ring-out)", low=0.0,
                                     high=1e6)
        self.settle_iterations = declare(self, "settle_iterations", T.INTEGER, defaults.settle_iterations,
                                         "steps of the settle refinement after the optimizer (lowers the largest "
                                         "ring-out across the stiffness band; whole-motion plans of at most 200 "
                                         "parameters); 0: off", low=0, high=1000)
        self.settle_peak_allowance = declare(self, "settle_peak_allowance", T.DOUBLE,
                                             defaults.settle_peak_allowance, "factor by which the settle "
                                             "refinement may raise the peak deviation (1: not raised)", low=1.0,
                                             high=100.0)
        self.allow_unverified_model = declare(self, "allow_unverified_model", T.BOOL, False,
                                              "plan even when a flexible part's frequencies miss the model card's "
                                              "gate (the plan's figures then rest on wrong frequencies; warned)")
        group = ReentrantCallbackGroup()
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self._optimized = self.create_publisher(JointTrajectory, "~/optimized_trajectory", latched)
        self._follow = ActionClient(self, FollowJointTrajectory, self.server_action, callback_group=group)
        self._server = ActionServer(self, Retarget, "~/retarget", execute_callback=self._execute,
                                    goal_callback=lambda _goal: GoalResponse.ACCEPT,
                                    cancel_callback=lambda _handle: CancelResponse.ACCEPT, callback_group=group)
        self._refine = RefineServer(self, group)  # ~/refine: retarget refine through ROS (ros/refine_server.py)
        self.get_logger().info(f"ready: robot {self.robot_name or '(unset)'}, {len(self.joint_names)} joints")

    def _feedback(self, handle: ServerGoalHandle, started: float, stage: str, iteration: int = 0,
                  objective: float = 0.0, gradient_norm: float = 0.0) -> None:
        handle.publish_feedback(Retarget.Feedback(stage=stage, iteration=iteration, objective=float(objective),
                                                  gradient_norm=float(gradient_norm),
                                                  elapsed_time=time.monotonic() - started))

    def _progress(self, handle: ServerGoalHandle, started: float, info: dict[str, Any]) -> None:
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
        if goal.robot and goal.robot != self.robot_name:
            raise InputError(f"this planner serves robot {self.robot_name!r}, the goal asks for {goal.robot!r}")
        if not self.joint_names:
            raise InputError("the planner has no joint_names parameter: start it with the robot's params file")
        validate_trajectory(goal.animation.joint_names, goal_points(goal.animation),
                            controller_joints=self.joint_names)
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
            from retarget.optimize import plan

            points = goal_points(goal.animation)
            motion = Motion(np.array([p.time_from_start for p in points], dtype=float),
                            tuple(goal.animation.joint_names),
                            np.array([list(p.positions) for p in points], dtype=float))
            self._feedback(handle, started, "loading")  # the reduced model; plan() reports the stages after it
            outcome = plan(goal.robot or self.robot_name, motion, self._options(goal),
                           self._plan_progress(handle, started))
        except PlanCancelled as exc:
            if not self.context.ok():  # stopped by a signal: nobody is left to answer
                return Result(error_code=Result.CANCELED, error_string="the planner stopped",
                              wall_time=time.monotonic() - started)
            handle.canceled()
            return Result(error_code=Result.CANCELED, error_string=f"{exc} (no optimized trajectory yet)",
                          wall_time=time.monotonic() - started)
        except NotAvailableError as exc:  # includes a time budget that ran out before any result
            self.get_logger().warning(str(exc))
            handle.abort()
            return Result(error_code=Result.NOT_AVAILABLE, error_string=str(exc),
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
            from retarget.optimize.variants import servo_refusal

            refused = ((outcome.verdict.execution_refusal if outcome.verdict is not None else "")
                       or servo_refusal(metrics, goal.robot or self.robot_name))
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

    def _options(self, goal: Retarget.Goal) -> Any:
        """The plan's options: the node's parameters, then the goal's fields (0, negative or empty: the default)."""
        from retarget.optimize import TrackedBodyWeights, WeightSchedule
        from retarget.optimize.options import NODE_PARAMETERS, options_from_parameters

        def given(value: Any) -> Any:
            return value if isinstance(value, (int, float)) and value > 0 else None

        bodies = None
        if goal.tracked_bodies:
            weights = list(goal.position_weights) or [1.0] * len(goal.tracked_bodies)
            bodies = tuple(TrackedBodyWeights(link, WeightSchedule.constant(float(w)), WeightSchedule.constant(0.0))
                           for link, w in zip(goal.tracked_bodies, weights))
        parameters = {name: getattr(self, name) for name in NODE_PARAMETERS}
        return options_from_parameters(
            parameters, knot_spacing=given(goal.knot_spacing), max_iterations=given(goal.max_iterations),
            relative_tolerance=given(goal.relative_tolerance),
            deviation_weight=goal.deviation_weight if goal.deviation_weight >= 0 else None,
            acceleration_weight=goal.acceleration_weight if goal.acceleration_weight >= 0 else None, bodies=bodies)

    def _plan_progress(self, handle: ServerGoalHandle, started: float) -> Any:
        """Feedback when a stage begins and per optimizer iteration; the goal's cancel request."""
        from retarget.optimize import PlanProgress
        from retarget.optimize.control import FEEDBACK_STAGES

        current: list[str] = []

        def steps(stage: str, done: int, total: int) -> None:
            name = FEEDBACK_STAGES.get(stage, stage)
            if current != [name]:
                current[:] = [name]
                self._progress(handle, started, {"stage": name})

        return PlanProgress(steps=steps, iteration=lambda info: self._progress(handle, started, info),
                            message=lambda text: self.get_logger().info(text),
                            cancelled=lambda: handle.is_cancel_requested or not self.context.ok())

    def _result(self, outcome: Any, started: float, start_time: float) -> tuple[Result, dict[str, Any]]:
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
