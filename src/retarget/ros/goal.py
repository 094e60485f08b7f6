"""``retarget goal ROBOT --motion M``: ask a running planner node for a plan (the Retarget action) and show it.

The client sends the motion (its first ``--duration`` s) as one Retarget goal to ``NS/planner/retarget`` — the
planner of ``retarget up ROBOT`` or ``ros2 launch retarget ROBOT.launch.py`` — shows the feedback as a progress bar
(the planner's estimate of each stage first, an in-process training's progress, then the iterations), and prints
the result's metrics. With ``--execute`` the robot first moves to the motion's first pose (as ``retarget play``),
then the planner plays the plan through the trajectory server. rclpy and the message packages are imported only
when the command runs.
"""
from __future__ import annotations

import argparse
import builtins
import json
import math
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO, TypedDict

from retarget.jsonsafe import JSONObject
from retarget.ros.futures import result_or_cancel, send_goal

if TYPE_CHECKING:
    from retarget_interfaces.action import Retarget
    from trajectory_msgs.msg import JointTrajectory

    from retarget.ros.player import RobotClient

__all__ = ["GOAL_RESULT_NAMES", "GoalSummary", "PlannerProgress", "goal_summary", "register_goal"]

#: The Retarget result's error codes by name.
GOAL_RESULT_NAMES = {0: "SUCCESSFUL", -1: "INVALID_GOAL", -2: "NOT_AVAILABLE", -3: "FAILED", -4: "CANCELED"}

#: Feedback stages before the planner's time budget starts (:func:`retarget.planning.plan`).
PREPARATION_STAGES = frozenset({"validating", "loading", "compiling kernels"})


def preparing(stage: str) -> bool:
    """Whether a feedback ``stage`` comes before the planner's time budget starts: :data:`PREPARATION_STAGES`, the
    plan's estimate (``estimated …``) and an in-process training (``training reduced model…``)."""
    return stage in PREPARATION_STAGES or stage.startswith(("estimated", "training reduced model"))


class PlannerProgress:
    """The planner's feedback as a progress bar over the plan's iteration budget: ``per_window`` iterations in each
    of ``windows`` windows (the count is corrected from the feedback's ``optimizing window K of N``); stage,
    iteration, objective and the seconds since the preparation (:func:`preparing`) ended.

    Where the bar is not shown (``disable``, or stderr not a terminal) each new stage is printed as a line
    ``planner: STAGE`` on stderr instead (``lines``), so a log shows the estimate, the training and the windows.
    """

    def __init__(self, per_window: int, windows: int, disable: bool, lines: bool = False) -> None:
        from tqdm import tqdm

        self.per_window = max(int(per_window), 1)
        # disable=None: no bar when stderr is not a terminal (CI logs).
        self.bar = tqdm(total=self.per_window * max(int(windows), 1), unit="it", file=sys.stderr, mininterval=0.5,
                        disable=True if disable else None, desc="planner",
                        bar_format="{desc}: {bar}| {n}/{total} iterations {postfix}")
        self.lines = lines and self.bar.disable
        self.lock = threading.Lock()
        self.began: float | None = None  # the feedback's elapsed time when the preparation ended [s]
        self.spent = 0.0  # since then [s]
        self.iteration = 0  # the latest iteration reported (counted over the windows)
        self.stages: list[str] = []  # every stage seen, in order

    def __enter__(self) -> PlannerProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()

    def __call__(self, fb: Retarget.Feedback) -> None:
        with self.lock:
            if self.began is None and not preparing(fb.stage):
                self.began = float(fb.elapsed_time)
            self.spent = 0.0 if self.began is None else float(fb.elapsed_time) - self.began
            windows = re.search(r"window \d+ of (\d+)", fb.stage)
            if windows and self.per_window * int(windows.group(1)) != self.bar.total:
                self.bar.total = self.per_window * int(windows.group(1))
            if fb.iteration > self.iteration:
                self.bar.update(int(fb.iteration) - self.iteration)
                self.iteration = int(fb.iteration)
            if not self.stages or self.stages[-1] != fb.stage:
                self.stages.append(str(fb.stage))
                if self.lines:
                    print(f"planner: {fb.stage} ({float(fb.elapsed_time):.0f} s)", file=sys.stderr, flush=True)
            text = fb.stage + (f", iteration {fb.iteration}, objective {fb.objective:.3g}" if fb.iteration else "")
            self.bar.set_postfix_str(f"{text}, {self.spent:.0f} s", refresh=False)


class GoalSummary(TypedDict):
    """A Retarget result's figures as plain data (:func:`goal_summary`); deviations in [m], times in [s]."""

    error_code: int
    status: str
    error_string: str
    iterations: int
    objective_initial: float
    objective_final: float
    naive_peak_deviation_m: float
    optimized_peak_deviation_m: float
    naive_rms_deviation_m: float
    optimized_rms_deviation_m: float
    wall_time_s: float
    points: int
    metrics: JSONObject


def goal_summary(result: Retarget.Result) -> GoalSummary:
    """The Retarget result's figures as plain data: ``error_code``, ``status``, ``error_string``, ``iterations``,
    the deviations [m], ``wall_time_s``, ``points`` (of the optimized trajectory) and ``metrics`` (its
    ``metrics_json``)."""
    try:
        metrics = json.loads(result.metrics_json) if result.metrics_json else {}
    except json.JSONDecodeError:
        metrics = {"unparsed": result.metrics_json}
    return {"error_code": int(result.error_code), "status": GOAL_RESULT_NAMES.get(int(result.error_code), "?"),
            "error_string": result.error_string, "iterations": int(result.iterations),
            "objective_initial": result.objective_initial, "objective_final": result.objective_final,
            "naive_peak_deviation_m": result.naive_peak_deviation,
            "optimized_peak_deviation_m": result.optimized_peak_deviation,
            "naive_rms_deviation_m": result.naive_rms_deviation,
            "optimized_rms_deviation_m": result.optimized_rms_deviation,
            "wall_time_s": result.wall_time, "points": len(result.optimized.points), "metrics": metrics}


def _print_result(summary: GoalSummary, robot: str, out: TextIO | None = None) -> None:
    """The result's figures, on ``out`` (default stdout)."""
    from retarget.planning.checks import Verification

    out = sys.stdout if out is None else out

    def print(*parts: object, **kwargs: object) -> None:  # every line goes to ``out``
        kwargs.setdefault("file", out)
        builtins.print(*parts, **kwargs)

    print(f"{robot}: planner {summary['status']}" + (f": {summary['error_string']}" if summary["error_string"]
                                                     else "") + f" ({summary['wall_time_s']:.0f} s)")
    if not summary["points"]:
        return
    print(f"  {summary['iterations']} iterations, J {summary['objective_initial']:.4g} -> "
          f"{summary['objective_final']:.4g}")
    naive, optimized = summary["naive_peak_deviation_m"], summary["optimized_peak_deviation_m"]
    ratio = f" ({optimized / naive:.2f} x)" if naive > 0 else ""
    print(f"  tracked bodies, peak {1e3 * naive:.2f} -> {1e3 * optimized:.2f} mm{ratio}, RMS "
          f"{1e3 * summary['naive_rms_deviation_m']:.2f} -> {1e3 * summary['optimized_rms_deviation_m']:.2f} mm")
    metrics = summary["metrics"]
    verify = metrics.get("verify") or {}
    if verify.get("peak_ratio") is not None:
        print(f"  re-simulated at dt {verify.get('dt_s', 0.0):g} s: {verify['peak_ratio']:.2f} x naive"
              + ("" if verify.get("holds", True) else " (the improvement does NOT hold)"))
    verified = Verification.from_json(metrics["verified"]) if metrics.get("verified") else None
    if verified is not None and verified.peak_ratio is not None:
        print(f"  verified in the {verified.described}: {verified.peak_ratio:.2f} x naive")
    if metrics.get("budget_limited"):
        print("  stopped by its time budget: the best iterate so far")
    if metrics.get("assumptions"):
        print("  what the plan assumes of the hardware (not modelled):")
        for line in metrics["assumptions"]:
            print(f"    - {line}")
    for warning in metrics.get("warnings") or []:
        print(f"retarget goal: plan warning: {warning}", file=sys.stderr)


def _goal_command(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.info import components
    from retarget.model.library import resolve_robot, ros_parameters
    from retarget.motion import load_motion
    from retarget.planning.options import PlanOptions
    from retarget.ros.demo import excerpt, window_count
    from retarget.ros.motion_convert import for_joints
    from retarget.ros.player import RobotClient, trajectory_arrays

    if args.duration is not None and not args.duration > 0:
        raise InputError(f"--duration must be positive, got {args.duration}")
    if args.max_iterations is not None and not args.max_iterations > 0:
        raise InputError(f"--max-iterations must be positive, got {args.max_iterations}")
    if not args.wait > 0:
        raise InputError(f"--wait must be positive, got {args.wait}")
    missing = [c for c in ("rclpy", "control_msgs", "retarget_interfaces") if not components()[c]]
    if missing:
        raise InputError(f"retarget goal needs ROS 2 ({', '.join(missing)} missing): run `make setup`")
    name = resolve_robot(args.robot).name.removesuffix(".params.yaml").removesuffix(".yaml")
    params = ros_parameters(args.robot)
    joints = [str(j) for j in params.get("joint_names") or []]
    whole = load_motion(args.motion)
    motion = for_joints(excerpt(whole, args.duration), joints, "goal")
    namespace = args.namespace.rstrip("/")
    action = f"{namespace}/planner/retarget"
    follow = f"{namespace}/trajectory_server/follow_joint_trajectory"
    report: dict[str, object] = {"robot": name, "motion": str(args.motion), "action": action,
                                 "duration_s": round(float(motion.duration), 3), "execute": bool(args.execute)}

    def finish(code: int, error: str = "") -> int:
        if error:
            report["error"] = error
            print(f"retarget goal: error: {error}", file=sys.stderr, flush=True)
        report["ok"] = code == 0
        if args.json:
            print(json.dumps(report, default=float), flush=True)
        return code

    from retarget_interfaces.action import Retarget

    from retarget.ros.motion_convert import to_joint_trajectory_msg

    client = RobotClient(joints, f"{namespace}/joint_states", follow, action, node_name="retarget_goal",
                         record=False)
    try:
        assert client.retarget is not None
        if not client.retarget.wait_for_server(timeout_sec=args.wait):
            return finish(2, f"no planner node answers at {action} within {args.wait:g} s: start the robot's nodes "
                          f"with `retarget up {name}` (or `ros2 launch retarget {name}.launch.py`) in the same "
                          "ROS_DOMAIN_ID and ROS_AUTOMATIC_DISCOVERY_RANGE, with its planner (not --no-planner)")
        animation = to_joint_trajectory_msg(motion)
        if args.execute:
            moved = _move_to_start(client, animation, params, args, name)
            if moved:
                return finish(2 if "no trajectory server" in moved else 1, moved)
        per_window = args.max_iterations or int(params.get("max_iterations") or 0) or PlanOptions.max_iterations
        dt = float(params.get("dt") or 0.0) or PlanOptions.dt
        windows = window_count(motion.duration, dt, float(params.get("window") or 0.0),
                               float(params.get("window_overlap") or 0.0))
        goal = Retarget.Goal(robot=name, animation=animation, execute=bool(args.execute), deviation_weight=-1.0,
                             acceleration_weight=-1.0, max_iterations=int(args.max_iterations or 0))
        print(f"retarget goal: planning {args.motion} on {name} ({motion.duration:.2f} s, {motion.num_samples} "
              f"samples, {len(joints)} joints){' and executing it' if args.execute else ''}", file=sys.stderr,
              flush=True)
        with PlannerProgress(per_window, windows, disable=args.no_progress, lines=True) as shown:
            handle = send_goal(client.retarget, goal, 10.0, "no planner goal response",
                               feedback_callback=lambda m: shown(m.feedback),
                               warn=lambda text: print(f"retarget goal: warning: {text}", file=sys.stderr, flush=True))
            if not handle.accepted:
                return finish(1, "the planner rejected the goal")
            try:
                response = result_or_cancel(handle, args.timeout or math.inf, "no planner result",
                                            cancel_timeout_s=10.0, unconfirmed="the planner may still be planning")
            except TimeoutError as exc:
                return finish(1, str(exc))
        summary = goal_summary(response.result)
        report.update(summary)
        report["stages"] = shown.stages
        _print_result(summary, name, sys.stderr if args.json else sys.stdout)
        if summary["error_code"] != 0:
            return finish(1, f"the planner answered {summary['status']}: {summary['error_string']}")
        if args.execute:
            times, _ = trajectory_arrays(response.result.optimized)
            print(f"  executed: {len(times)} points over {float(times[-1]):.2f} s", flush=True,
                  file=sys.stderr if args.json else sys.stdout)
        return finish(0)
    finally:
        client.close()


def _move_to_start(client: RobotClient, animation: JointTrajectory, params: Mapping[str, object],
                   args: argparse.Namespace, name: str) -> str:
    """Move the robot to the animation's first pose when it is further than its goal tolerance: the planner plays
    the plan from there. Returns an error text, "" when it is there."""
    import numpy as np

    from retarget.ros.player import trajectory_arrays

    if not client.follow.wait_for_server(timeout_sec=args.wait):
        return (f"no trajectory server at {args.namespace.rstrip('/')}/trajectory_server/follow_joint_trajectory "
                f"within {args.wait:g} s (--execute plays the plan through it): is `retarget up {name}` running?")
    if not client.record(wait=args.wait):
        return f"no joint_states of {name} within {args.wait:g} s"
    _, positions = trajectory_arrays(animation)
    away = float(np.max(np.abs(positions[0] - client.recorder.latest())))
    if away <= float(params.get("default_goal_tolerance") or 0.02):
        return ""
    print(f"retarget goal: moving to the first pose ({math.degrees(away):.1f} deg away) in {args.move_to_start:g} s",
          file=sys.stderr, flush=True)
    try:
        result = client.move_to(positions[0], args.move_to_start)
    except (RuntimeError, TimeoutError) as exc:
        return f"the move to the first pose failed: {exc}"
    if result.error_code != 0:
        return f"the move to the first pose failed ({result.error_code}): {result.error_string}"
    return ""


def register_goal(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget goal`` to the top-level ``retarget`` parser."""
    from retarget.ros.player import MOVE_TO_START_S

    p = subparsers.add_parser(
        "goal",
        help="ask a running robot's planner node for a plan of a motion (Retarget action), optionally play it",
        description="Send a motion (its first --duration s) as one Retarget goal to the planner node of a robot "
        "brought up with `retarget up ROBOT` or `ros2 launch retarget ROBOT.launch.py` (same ROS_DOMAIN_ID and "
        "discovery range). Shows the planner's feedback as a progress bar (its estimate of each stage, a model's "
        "training, the iterations) and prints the result's metrics. With --execute the robot moves to the "
        "motion's first pose, and the planner plays the plan through the trajectory server (unless its checks "
        "judge it worse than the input). Ctrl-C cancels the goal. Exit 0 when the planner succeeded, 1 when it "
        "answered otherwise (NOT_AVAILABLE, FAILED, ...), 2 on bad input or when no planner node answers, 130 on "
        "Ctrl-C.",
    )
    p.add_argument("robot", help="robot name (retarget robots) or params YAML")
    p.add_argument("--motion", required=True, help="motion file or library name ROBOT/MOTION")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="plan the motion's first S seconds (default: all of it)")
    p.add_argument("--execute", action="store_true", help="play the plan on the robot when it is done")
    p.add_argument("--max-iterations", type=int, default=None, metavar="N",
                   help="optimizer iterations (per window with the planner's windows; default: the planner's)")
    p.add_argument("--namespace", default="", help="the robot's ROS namespace (as given to retarget up)")
    p.add_argument("--wait", type=float, default=10.0, metavar="S",
                   help="how long to wait for the planner node (and with --execute the trajectory server) [s] "
                   "(default 10)")
    p.add_argument("--timeout", type=float, default=0.0, metavar="S",
                   help="cancel the goal when no result came within S seconds (default 0: wait)")
    p.add_argument("--move-to-start", type=float, default=MOVE_TO_START_S, metavar="S",
                   help=f"with --execute: duration of the move to the first pose [s] (default {MOVE_TO_START_S:g})")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (the stages as lines on stderr)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object with the result's metrics as the last line of stdout")
    p.set_defaults(func=_goal_command)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m retarget.ros.goal`` (the same as ``retarget goal``)."""
    from retarget.cli import main as cli_main

    return cli_main(["goal", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
