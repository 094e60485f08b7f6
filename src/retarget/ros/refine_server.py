"""The planner node's ``~/refine`` action: ``retarget refine`` through ROS (docs/refine.md "Through ROS").

:class:`RefineServer` serves ``retarget_interfaces/action/Refine`` for the node that hosts it (the planner): a goal
names the input motion (a file or library name, or the animation itself), CURRENT (a plan file, or its samples
as a JointTrajectory) and the take (a rosbag2 of PoseStamped topics or a Motive CSV export, a path this machine
reads); the server calls :func:`retarget.planning.refine.refine` — the same core as ``retarget refine`` — and
returns NEXT as a JointTrajectory with the measured and predicted peak, NEXT's torque ratio and the whole
refinement as JSON. With ``out`` it writes NEXT, its JointTrajectory YAML and its history
(:func:`~retarget.planning.refine.write_refinement`); with ``report_dir`` the trial's report. A plan file's
history (``NEXT.history.json`` beside it) continues the chain, so the trend, the trust region and the best trial
carry from one goal to the next.

The planning model, problem and naive playback of a robot, input and plan settings
(:func:`~retarget.planning.refine.refine_context`) are kept for the next trials (the :data:`CONTEXTS_KEPT` most
recent), so only the first goal of a chain loads the model. The plan's settings come from its file when it records
them, else from the node's planner parameters — those the node's own ``~/retarget`` plans were made with.

Results: SUCCESSFUL; REFUSED (the take and plan do not belong together: ``refusal`` names the kind, nothing
written); INVALID_GOAL (missing or unreadable inputs, another robot); NOT_AVAILABLE (no planning model);
CANCELED (a cancel stops the refinement at its next stage; nothing written); FAILED.
"""
from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from retarget_interfaces.action import Refine

from retarget.errors import InputError, NotAvailableError, RetargetError
from retarget.jsonsafe import dumps
from retarget.model.library import same_robot

if TYPE_CHECKING:
    from rclpy.callback_groups import CallbackGroup

    from retarget.motion.motion import Motion
    from retarget.planning.options import PlanOptions
    from retarget.planning.refine import PlanFile, RefineContext
    from retarget.ros.planner import Planner

__all__ = ["CONTEXTS_KEPT", "RefineServer"]

Result = Refine.Result

#: How many refine contexts (model, problem, naive run) the server keeps, most recent first.
CONTEXTS_KEPT = 2

#: Feedback stage per core progress stage (others pass through).
_STAGES = {"model training": "loading", "targets": "loading", "naive playback": "loading"}


class _Cancelled(Exception):
    """Raised from the progress callback when the goal's cancel is requested (or the node stops)."""


def served_robot(serving: str, asked: str) -> str:
    """The robot a goal of the planner node is for: the node's own (``serving``, its ``robot_name``), which the goal
    may name as :func:`~retarget.model.library.same_robot` allows, else the goal's (``asked``); "" when neither names
    one.

    Raises:
        InputError: the goal names another robot than the node's.
    """
    if asked and serving and not same_robot(serving, asked):
        raise InputError(f"this planner serves robot {serving!r}, the goal asks for {asked!r}")
    return serving or asked


class RefineServer:
    """``~/refine`` on ``node`` (the planner node: its ``robot_name``, ``joint_names`` and planner parameters).

    Args:
        node: the hosting node. callback_group: the group its goals run in (a reentrant one beside the planner's).
        work_dir: where a JointTrajectory CURRENT is written as a plan file (default: a temporary folder).
    """

    def __init__(self, node: Planner, callback_group: CallbackGroup | None = None,
                 work_dir: Path | None = None) -> None:
        self.node = node
        self._work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="retarget-refine-"))
        self._contexts: OrderedDict[str, RefineContext] = OrderedDict()
        self._lock = threading.Lock()
        self._server = ActionServer(node, Refine, "~/refine", execute_callback=self._execute,
                                    goal_callback=lambda _goal: GoalResponse.ACCEPT,
                                    cancel_callback=lambda _handle: CancelResponse.ACCEPT,
                                    callback_group=callback_group)

    def destroy(self) -> None:
        """Destroy the action server."""
        self._server.destroy()

    # -- the goal's inputs ----------------------------------------------------------------------------------------

    def _robot(self, goal: Refine.Goal) -> str:
        robot = served_robot(self.node.robot_name, goal.robot)
        if not robot:
            raise InputError("no robot: the goal names none and the planner has no robot_name parameter")
        return robot

    def _motion(self, goal: Refine.Goal) -> Motion:
        from retarget.model import library
        from retarget.motion import load_motion
        from retarget.ros.motion_convert import from_joint_trajectory_msg

        if goal.motion:
            path = Path(goal.motion) if Path(goal.motion).is_file() else library.resolve_motion(goal.motion)
            return load_motion(path)
        if not goal.animation.points:
            raise InputError("no input: give motion (a file or ROBOT/MOTION) or the animation")
        return from_joint_trajectory_msg(goal.animation)

    def _plan(self, goal: Refine.Goal) -> PlanFile:
        """CURRENT as a :class:`~retarget.planning.refine.PlanFile` (a JointTrajectory written to the work folder)."""
        from retarget.motion.io import save_motion
        from retarget.planning.refine import read_plan
        from retarget.ros.motion_convert import from_joint_trajectory_msg

        if goal.plan_file:
            return read_plan(goal.plan_file)
        if not goal.plan.points:
            raise InputError("no plan: give plan_file or the plan's JointTrajectory")
        motion = from_joint_trajectory_msg(goal.plan)
        digest = hashlib.sha256(dumps([motion.joint_names, motion.time.tolist(),
                                       motion.positions.tolist()]).encode()).hexdigest()[:16]
        path = self._work_dir / f"plan-{digest}.csv"
        if not path.exists():
            save_motion(path, motion)
        return read_plan(path)

    def _check_plan(self, robot: str, plan: PlanFile) -> None:
        """A plan of this node's motors, made for the servos the robot declares (when its file says)."""
        from retarget.planning.refine import RefineRefused, Refusal
        from retarget.planning.variants import declared_servos, declared_with, planned_servos, servo_mismatches

        joints = list(self.node.joint_names)
        if joints and sorted(plan.motion.joint_names) != sorted(joints):
            raise RefineRefused(Refusal.WRONG_ROBOT, f"the plan drives {list(plan.motion.joint_names)}, this "
                                f"planner's robot {joints}: a plan of another robot")
        planned = planned_servos(plan.path) if plan.path.suffix.lower() == ".csv" else None
        if planned is not None:
            differ = servo_mismatches(planned, declared_servos(robot, self.node.servo_file or None))
            if differ:
                laid = declared_with(self.node.servo_file)
                raise RefineRefused(Refusal.WRONG_ROBOT, f"the plan {plan.path} was made for other servos than the "
                                    f"robot's config declares{laid} ({'; '.join(differ)}): plan again",
                                    mismatches=differ)

    def _plan_options(self, robot: str) -> PlanOptions:
        """The node's plan options, with the model it plans with when none is given, cached or found (the one
        shipped for ``robot``), so a take of a plan made on that model is refined on it."""
        from retarget.planning.settings import NODE_PARAMETERS, options_from_parameters
        from retarget.ros.planner import fallback_models

        return options_from_parameters({name: getattr(self.node, name) for name in NODE_PARAMETERS},
                                       fallback_models=fallback_models(robot, self.node.reduced_file,
                                                                       self.node.shipped_model))

    def _context(self, robot: str, motion: Motion, plan: PlanFile, options: PlanOptions,
                 progress: Callable[[str, int, int], None]) -> RefineContext:
        """The kept :func:`refine_context` of this robot, input and plan settings, or a new one."""
        from retarget.planning.refine import plan_options_for, refine_context
        from retarget.planning.variants import motion_digest

        run = plan_options_for(plan, options, motion)
        key = dumps([robot, motion_digest(motion), list(motion.joint_names), repr(run)])
        with self._lock:
            if key in self._contexts:
                self._contexts.move_to_end(key)
                return self._contexts[key]
        context = refine_context(robot, motion, plan, options, say=lambda text: self.node.get_logger().info(text),
                                 progress=progress)
        with self._lock:
            self._contexts[key] = context
            while len(self._contexts) > CONTEXTS_KEPT:
                self._contexts.popitem(last=False)
        return context

    # -- the goal -------------------------------------------------------------------------------------------------

    def _execute(self, handle: ServerGoalHandle) -> Result:
        started = time.monotonic()
        goal: Refine.Goal = handle.request
        current: list[str] = []

        def feedback(stage: str) -> None:
            if current != [stage]:
                current[:] = [stage]
                handle.publish_feedback(Refine.Feedback(stage=stage, elapsed_time=time.monotonic() - started))

        def progress(stage: str, _done: int, _total: int) -> None:
            if handle.is_cancel_requested or not self.node.context.ok():
                raise _Cancelled()
            feedback(_STAGES.get(stage, stage))

        def ended(code: int, text: str, **fields: object) -> Result:
            if code == Result.SUCCESSFUL:
                handle.succeed()
            elif code == Result.CANCELED and self.node.context.ok():
                handle.canceled()
            elif code != Result.CANCELED:
                handle.abort()
            if text:
                self.node.get_logger().warning(f"refine: {text}")
            return Result(error_code=code, error_string=text, wall_time=time.monotonic() - started, **fields)

        from retarget.planning.refine import History, RefineRefused, body_pairs, history_path, read_take, refine

        feedback("validating")
        try:
            robot = self._robot(goal)
            if not goal.recording:
                raise InputError("no recording: give the take's bag folder or Motive CSV export")
            if goal.out and goal.plan_file and Path(goal.out).resolve() == Path(goal.plan_file).resolve():
                raise InputError("out must differ from plan_file: CURRENT stays as it was played")
            if goal.trust_region < 0:
                raise InputError(f"trust_region must be positive (0: the default), got {goal.trust_region}")
            motion = self._motion(goal)
            plan = self._plan(goal)
            take = read_take(goal.recording, body_pairs(robot, goal.bodies))
        except RefineRefused as exc:
            return ended(Result.REFUSED, str(exc), refusal=exc.reason.value)
        except RetargetError as exc:
            return ended(Result.INVALID_GOAL, str(exc))
        try:
            from retarget.planning.options import RefineOptions

            self._check_plan(robot, plan)
            options = RefineOptions(refit=not goal.no_refit, recorded_start=not goal.no_recorded_start)
            if goal.trust_region > 0:
                options = replace(options, trust_region_rad=float(goal.trust_region))
            plan_options = self._plan_options(robot)
            feedback("loading")
            context = self._context(robot, motion, plan, plan_options, progress)
            feedback("measuring")
            history = History.load(history_path(plan.path)) if goal.plan_file else History()
            refinement = refine(robot, motion, plan, take, options, plan_options, history, context=context,
                                say=lambda text: self.node.get_logger().info(text), progress=progress)
            if handle.is_cancel_requested or not self.node.context.ok():
                raise _Cancelled()
            feedback("writing")
            files: list[Path] = []
            if goal.out:
                from retarget.planning.refine import write_refinement

                files.extend(write_refinement(refinement, goal.out))
            if goal.report_dir:
                from retarget.report.refine import write_refine_report

                files.extend(write_refine_report(refinement, goal.report_dir))
        except _Cancelled:
            return ended(Result.CANCELED, "cancelled: nothing written")
        except RefineRefused as exc:
            return ended(Result.REFUSED, str(exc), refusal=exc.reason.value)
        except NotAvailableError as exc:
            return ended(Result.NOT_AVAILABLE, str(exc))
        except InputError as exc:
            return ended(Result.INVALID_GOAL, str(exc))
        except RetargetError as exc:
            return ended(Result.FAILED, str(exc))
        except Exception as exc:  # noqa: BLE001 (a bug: the goal fails with it; rclpy would answer a success)
            import traceback

            self.node.get_logger().error(f"refine failed: {traceback.format_exc()}")
            return ended(Result.FAILED, f"internal error: {type(exc).__name__}: {exc}")
        from retarget.ros.motion_convert import to_joint_trajectory_msg

        report = {**refinement.to_json(), "files": [str(f) for f in files]}
        step, measured = refinement.step, refinement.measurement
        self.node.get_logger().info(refinement.message)
        return ended(Result.SUCCESSFUL, "", next_plan=to_joint_trajectory_msg(refinement.next_plan),
                     measured_peak_deviation=float(measured.peak_deviation_m),
                     predicted_peak_deviation=float(step.predicted_peak_deviation_m),
                     peak_torque_ratio=float(step.peak_torque_ratio), trial=int(refinement.record.trial),
                     decision=refinement.decision.value, files=[str(f) for f in files],
                     metrics_json=dumps(report, default=float))

