"""``retarget tune ROBOT --motion M --trials N``: the plan → play → record → refine loop on a running robot.

Against a robot brought up by ``retarget up ROBOT`` (or its launch file; the twin or hardware): trial 1's plan is
the planner node's (``~/retarget``, not executed) or a plan file (``--plan``); each trial plays its plan with
``retarget play --record`` (a child process: FollowJointTrajectory, the mocap poses recorded into a rosbag2 from
1 s at rest before the motion to 1 s after it) and refines it from that bag on the planner node (``~/refine``:
:mod:`retarget.ros.refine_server`, the core of ``retarget refine``), whose NEXT is the next trial's plan. One line
per trial on stdout (trial, measured peak, NEXT's predicted peak and torque, the trend); ``DIR/history.json``
(the trials) and per trial ``DIR/planK.csv``, ``DIR/takeK/`` (the bag) and ``DIR/trialK.json`` (the refinement's
report); ``planK.history.json`` beside each plan is the refine chain's own history. The last trial is refined too
(its measurement needs it): ``DIR/plan<N+1>.csv`` is the plan to play next. The loop ends before the N trials
when a refinement says it stopped improving (each play costs the robot a run; ``--all-trials`` plays them all).
A take refused for that run alone (:data:`~retarget.planning.refine.REPLAYABLE`) is played again, at most
``--replays`` times.

Exit codes: 0 after the N trials; 1 when a trial fails (the plan, the play or the refinement: a refusal says
why); 2 on bad input or when no planner node or trajectory server answers (the message names which);
130 on Ctrl-C (a running goal is cancelled).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from retarget.atomic import write_text_atomic
from retarget.errors import InputError
from retarget.ros.futures import result_or_cancel, send_goal

if TYPE_CHECKING:
    from rclpy.action import ActionClient
    from retarget_interfaces.action import Refine, Retarget

    from retarget.motion.motion import Motion

__all__ = ["TrialLine", "register_tune", "stops_the_loop"]

#: Each play's goal tolerance [rad] (``--goal-tolerance``): above the sag a plan pre-compensates (single_rod's
#: XM430 at 20°: about 0.02 rad), so the goal ends when the robot — or a twin running behind — has arrived.
GOAL_TOLERANCE_RAD = 0.1

#: Default folder of a tune run (``--out``).
DEFAULT_OUT = "tune-{robot}"


@dataclass(frozen=True)
class TrialLine:
    """One trial as ``retarget tune`` prints and records it.

    Attributes:
        trial: 1 for the first plan played. plan: the plan played. take: its bag.
        measured_peak_deviation_m: the take's peak deviation from the intent [m].
        predicted_peak_deviation_m: NEXT's predicted peak [m]. peak_torque_ratio: NEXT's torque over stall [-].
        decision: the trend (first trial, improving, stopped improving, rose). next_plan: NEXT.
        report: the refinement's JSON report. play_s, refine_s: wall time of the play and the refinement [s].
        replays: plays of this plan before this one whose takes were refused for that run alone (``--replays``).
    """

    trial: int
    plan: str
    take: str
    measured_peak_deviation_m: float
    predicted_peak_deviation_m: float
    peak_torque_ratio: float
    decision: str
    next_plan: str
    report: str
    play_s: float
    refine_s: float
    replays: int = 0

    def line(self) -> str:
        """The trial's line on stdout."""
        replayed = f" ({self.replays} replay{'s' if self.replays > 1 else ''})" if self.replays else ""
        return (f"trial {self.trial}: measured peak {1e3 * self.measured_peak_deviation_m:7.2f} mm, next predicted "
                f"{1e3 * self.predicted_peak_deviation_m:7.2f} mm, torque {self.peak_torque_ratio:.2f} x stall, "
                f"{self.decision}{replayed}")


class _Failed(Exception):
    """A step of the loop failed: the message says which and why; ``code`` is the exit code; ``refusal`` the kind of
    a refinement's refusal ("" for another failure)."""

    def __init__(self, message: str, code: int = 1, refusal: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.refusal = refusal


class _Client:
    """The planner's Retarget and Refine clients and the trajectory server's, on a node spinning on a thread."""

    def __init__(self, namespace: str) -> None:
        import rclpy
        from control_msgs.action import FollowJointTrajectory
        from retarget.ros.action_client import LockedActionClient
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.signals import SignalHandlerOptions
        from retarget_interfaces.action import Refine, Retarget

        self.names = {"retarget": f"{namespace}/planner/retarget", "refine": f"{namespace}/planner/refine",
                      "follow": f"{namespace}/trajectory_server/follow_joint_trajectory"}
        self.context = rclpy.Context()
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = Node("retarget_tune", context=self.context)
        # Action clients before the node is spun (ros2/rclpy#1589).
        self.retarget = LockedActionClient(self.node, Retarget, self.names["retarget"])
        self.refine = LockedActionClient(self.node, Refine, self.names["refine"])
        self.follow = LockedActionClient(self.node, FollowJointTrajectory, self.names["follow"])
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def wait_for_servers(self, timeout: float) -> list[str]:
        """The actions that did not answer within ``timeout`` [s] (empty: all did)."""
        deadline = time.monotonic() + timeout
        missing = []
        for key in ("follow", "retarget", "refine"):
            client = getattr(self, key)
            if not client.wait_for_server(timeout_sec=max(deadline - time.monotonic(), 0.1)):
                missing.append(self.names[key])
        return missing

    def call(self, client: ActionClient, goal: Retarget.Goal | Refine.Goal, timeout: float, what: str,
             feedback: Callable[[Retarget.Impl.FeedbackMessage], None] | None = None
             ) -> Retarget.Result | Refine.Result:
        """Send ``goal`` and wait for its result; a Ctrl-C or no result within ``timeout`` [s] cancels it.

        Raises:
            _Failed: not accepted, or no result in time.
        """
        try:
            handle = send_goal(client, goal, 20.0, f"{what}: no goal response", feedback_callback=feedback,
                               warn=lambda text: print(f"retarget tune: warning: {text}", file=sys.stderr, flush=True))
        except TimeoutError as exc:
            raise _Failed(str(exc)) from None
        if not handle.accepted:
            raise _Failed(f"{what}: the goal was not accepted")
        try:
            return result_or_cancel(handle, timeout, f"{what}: no result").result
        except TimeoutError as exc:
            raise _Failed(str(exc)) from None

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self._thread.join(5)
        for client in (self.retarget, self.refine, self.follow):
            client.destroy()
        self.node.destroy_node()
        self.context.try_shutdown()


def register_tune(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget tune`` to the top-level ``retarget`` parser."""
    p = subparsers.add_parser(
        "tune",
        help="run the plan -> play -> record -> refine loop on a running robot (twin or hardware)",
        description="Against a robot brought up with `retarget up ROBOT` (same ROS_DOMAIN_ID): plans the motion on "
        "the planner node (or takes --plan), then per trial plays the plan with `retarget play --record` (the mocap "
        "poses into a rosbag2), refines it from that take on the planner node's ~/refine action and plays the "
        "next. One line per trial; DIR/history.json, each trial's plan, take and report (docs/refine.md, "
        "'Through ROS'). Exit 0 after the trials, 1 when a trial fails, 2 on bad input or when no planner node or "
        "trajectory server answers.")
    p.add_argument("robot", help="robot name (retarget robots) or params YAML")
    p.add_argument("--motion", required=True, help="the input motion (a file or ROBOT/MOTION)")
    p.add_argument("--trials", type=int, default=3, help="trials to play (default 3)")
    p.add_argument("--plan", default=None, metavar="FILE", help="trial 1's plan (as `retarget plan --out` wrote it; "
                   "default: the planner node plans the motion)")
    p.add_argument("--max-iterations", type=int, default=0, metavar="N", help="the node's plan of trial 1: optimizer "
                   "iterations (0: the node's max_iterations, else 50)")
    p.add_argument("--body", action="append", metavar="LINK=RIGIDBODY", help="a tracked body and its mocap body "
                   "(the topic NS/mocap/RIGIDBODY/pose, or a /topic); repeatable; default every tracked body under "
                   "its own name")
    p.add_argument("--out", default=None, metavar="DIR", help="folder of the run (default tune-ROBOT; must not "
                   "hold a history.json)")
    p.add_argument("--namespace", default="", help="the robot's ROS namespace (as given to retarget up)")
    p.add_argument("--replays", type=int, default=1, metavar="N", help="play a trial's plan again, at most N times, "
                   "when its take is refused for that run alone (misaligned, frames missing, clipped: a clock, a "
                   "host or the motion capture behind or dropping out; default 1, 0: end on the first refusal)")
    p.add_argument("--all-trials", action="store_true", help="play every trial even after a refinement says the "
                   "loop stopped improving (default: stop there; its NEXT is still written)")
    p.add_argument("--trust-region", type=float, default=0.0, metavar="RAD", help="the first refinement's trust "
                   "region (0: refine's default; later trials take theirs from the history)")
    p.add_argument("--no-refit", action="store_true", help="refine on the planning model as it is (retarget "
                   "refine --no-refit; default: on the model re-fitted to each take when that explains it better)")
    p.add_argument("--no-recorded-start", action="store_true", help="align each take on its onset, not on the "
                   "plan's start its bag stored (retarget refine --no-recorded-start: a mocap node on a clock not "
                   "synchronized with this computer's)")
    p.add_argument("--goal-tolerance", type=float, default=GOAL_TOLERANCE_RAD, metavar="RAD", help="each play's "
                   "position tolerance at the end [rad]: the goal ends once every joint is this close to its last "
                   "goal, and the recording's tail starts then (a plan's last goals pre-compensate the servos' sag: "
                   f"keep it above that; -1: none, the goal ends with its last point; default {GOAL_TOLERANCE_RAD:g})")
    p.add_argument("--record-tail", type=float, default=1.0, metavar="S", help="seconds recorded after each play's "
                   "goal ended (retarget play's --record-tail; default 1)")
    p.add_argument("--report", action="store_true", help="also write each trial's report page and plots "
                   "(DIR/trialK/)")
    p.add_argument("--wait", type=float, default=15.0, metavar="S", help="how long to wait for the planner and the "
                   "trajectory server [s] (default 15)")
    p.add_argument("--plan-timeout", type=float, default=1800.0, metavar="S", help="longest wait for the plan [s]")
    p.add_argument("--refine-timeout", type=float, default=900.0, metavar="S", help="longest wait for a "
                   "refinement [s]")
    p.add_argument("--json", action="store_true", help="print one JSON object with the trials as the last line")
    p.set_defaults(func=_tune_command)


def _write_json(path: Path, data: object) -> None:
    """``data`` as strict JSON, atomically."""
    from retarget.jsonsafe import dumps

    write_text_atomic(path, dumps(data, indent=1) + "\n")


def _say(text: str) -> None:
    print(f"retarget tune: {text}", file=sys.stderr, flush=True)


def _tune_command(args: argparse.Namespace) -> int:
    from retarget.info import components
    from retarget.model import library
    from retarget.model.library import resolve_robot, ros_parameters
    from retarget.motion import load_motion
    from retarget.ros.motion_convert import for_joints

    if args.trials < 1:
        raise InputError(f"--trials must be 1 or more, got {args.trials}")
    if args.max_iterations < 0:
        raise InputError(f"--max-iterations must be 0 (the node's) or more, got {args.max_iterations}")
    if not (args.goal_tolerance > 0 or args.goal_tolerance == -1):
        raise InputError(f"--goal-tolerance must be positive or -1 (none), got {args.goal_tolerance}")
    if args.replays < 0:
        raise InputError(f"--replays must be 0 or more, got {args.replays}")
    if args.record_tail < 0:
        raise InputError(f"--record-tail must be 0 or more [s], got {args.record_tail}")
    for flag, value in (("--wait", args.wait), ("--plan-timeout", args.plan_timeout),
                        ("--refine-timeout", args.refine_timeout)):
        if not value > 0:
            raise InputError(f"{flag} must be positive, got {value}")
    if args.trust_region < 0:
        raise InputError(f"--trust-region must be positive (0: the default), got {args.trust_region}")
    robot = resolve_robot(args.robot).name.removesuffix(".yaml")
    joints = [str(j) for j in ros_parameters(args.robot).get("joint_names") or []]
    motion_path = Path(args.motion) if Path(args.motion).is_file() else library.resolve_motion(args.motion)
    motion = for_joints(load_motion(motion_path), joints, "tune")
    if args.plan is not None and not Path(args.plan).is_file():
        raise InputError(f"--plan {args.plan}: no such file")
    missing = [c for c in ("rclpy", "control_msgs") if not components()[c]]
    if missing:
        raise InputError(f"retarget tune needs ROS 2 ({', '.join(missing)} missing): run `make setup`")
    from retarget.planning.refine import body_pairs

    namespace = args.namespace.rstrip("/")
    pairs = body_pairs(args.robot, args.body or [])
    topics = [name if name.startswith("/") else f"{namespace}/mocap/{name}/pose" for _, name in pairs]
    bodies = [f"{link}={topic}" for (link, _), topic in zip(pairs, topics)]
    out = Path(args.out or DEFAULT_OUT.format(robot=robot)).resolve()
    if (out / "history.json").exists():
        raise InputError(f"{out} holds a tune run already (history.json): give a new --out folder")
    trials: list[dict[str, object]] = []
    summary: dict[str, object] = {"ok": False, "robot": robot, "motion": str(args.motion), "out": str(out),
                                  "namespace": namespace, "bodies": bodies, "trials": trials}

    def finish(code: int, error: str = "") -> int:
        if error:
            summary["error"] = error
            _say(f"error: {error}")
        summary["ok"] = code == 0
        if out.is_dir():  # nothing is written before the robot answered
            _write_json(out / "history.json", summary)
        if args.json:
            from retarget.jsonsafe import dumps

            print(dumps(summary), flush=True)
        return code

    client = _Client(namespace)
    try:
        missing_servers = client.wait_for_servers(args.wait)
        if missing_servers:
            return finish(2, f"no answer from {', '.join(missing_servers)} within {args.wait:g} s: is `retarget up "
                          f"{robot}` (with its planner) running, with the same ROS_DOMAIN_ID and "
                          "ROS_AUTOMATIC_DISCOVERY_RANGE?")
        out.mkdir(parents=True, exist_ok=True)
        plan = out / "plan1.csv"
        if args.plan is not None:
            import shutil

            shutil.copyfile(args.plan, plan)
        else:
            _plan_on_node(client, robot, motion, plan, args.plan_timeout, args.max_iterations)
        summary["first_plan"] = str(plan)
        for k in range(1, args.trials + 1):
            trial = _played_trial(lambda replay: _trial(client, args, robot, k, plan, out, topics, bodies, replay),
                                  k, plan, args.replays)
            trials.append(asdict(trial))
            print(trial.line(), flush=True)
            _write_json(out / "history.json", summary)
            plan = Path(trial.next_plan)
            if k < args.trials and stops_the_loop(trial.decision, args.all_trials):
                summary["stopped_after"] = k
                _say(f"stopped after trial {k} of {args.trials}: the refinement says the loop stopped improving "
                     f"({plan.name} is the plan to play next; --all-trials plays every trial)")
                break
        summary["next_plan"] = str(plan)
        return finish(0)
    except _Failed as exc:
        return finish(exc.code, str(exc))
    except KeyboardInterrupt:
        finish(130, "interrupted (Ctrl-C)")
        return 130
    finally:
        client.close()


def stops_the_loop(decision: str, all_trials: bool) -> bool:
    """Whether ``retarget tune`` ends after a trial whose refinement decided ``decision``: when the loop
    stopped improving, unless every trial is to be played."""
    from retarget.planning.refine import Decision

    return not all_trials and decision == Decision.STOPPED.value


def _plan_on_node(client: _Client, robot: str, motion: Motion, out: Path, timeout: float,
                  max_iterations: int) -> None:
    """Trial 1's plan from the planner node's ``~/retarget`` (not executed), written to ``out``."""
    from retarget_interfaces.action import Retarget

    from retarget.motion.io import save_motion
    from retarget.ros.motion_convert import from_joint_trajectory_msg, to_joint_trajectory_msg

    goal = Retarget.Goal(robot=robot, animation=to_joint_trajectory_msg(motion), execute=False,
                         max_iterations=int(max_iterations))
    stages: list[str] = []

    def feedback(message: Retarget.Impl.FeedbackMessage) -> None:
        stage = message.feedback.stage
        if not stages or stages[-1] != stage:
            stages.append(stage)
            _say(f"planning: {stage}")

    started = time.monotonic()
    result = client.call(client.retarget, goal, timeout, "the plan (~/retarget)", feedback)
    if result.error_code != Retarget.Result.SUCCESSFUL:
        raise _Failed(f"the planner did not plan the motion ({result.error_code}): {result.error_string}")
    save_motion(out, from_joint_trajectory_msg(result.optimized),
                comments=["retarget tune: trial 1's plan, by the planner node (~/retarget)"])
    _write_json(out.with_suffix(".metrics.json"), json.loads(result.metrics_json or "{}"))
    _say(f"planned in {time.monotonic() - started:.1f} s: peak {1e3 * result.naive_peak_deviation:.2f} mm naive -> "
         f"{1e3 * result.optimized_peak_deviation:.2f} mm in the model; {out}")


def _play_note(stdout: str) -> str:
    """The note of a goal that succeeded with one (its late start) in ``retarget play --json``'s last line, or ""."""
    try:
        goal = json.loads(stdout.strip().splitlines()[-1]).get("goal") or {}
    except (IndexError, ValueError, AttributeError):
        return ""
    return str(goal.get("error_string") or "") if goal.get("error_code") == 0 else ""


def _played_trial(play: Callable[[int], TrialLine], k: int, plan: Path, replays: int) -> TrialLine:
    """Trial ``k``: ``play(replay)`` (:func:`_trial`), again while its take is refused for that run alone
    (:data:`~retarget.planning.refine.REPLAYABLE`), at most ``replays`` more times.

    Raises:
        _Failed: the last play's failure, or any other.
    """
    from retarget.planning.refine import REPLAYABLE

    for replay in range(replays + 1):
        try:
            return replace(play(replay), replays=replay)
        except _Failed as exc:
            if exc.refusal not in {r.value for r in REPLAYABLE} or replay == replays:
                raise
            _say(f"trial {k}: the take was refused ({exc.refusal}), a fault of that run: playing {plan.name} again "
                 f"(replay {replay + 1} of at most {replays})")
    raise AssertionError("unreachable")


def _trial(client: _Client, args: argparse.Namespace, robot: str, k: int, plan: Path, out: Path,
           topics: list[str], bodies: list[str], replay: int = 0) -> TrialLine:
    """Play ``plan`` recording the mocap topics, refine it from the take on the planner node (``replay``: the
    how-manieth play of this plan again; its take and log are named ``takeK-rN``, ``playK-rN.log``)."""
    from retarget_interfaces.action import Refine

    tag = f"{k}-r{replay}" if replay else f"{k}"
    take = out / f"take{tag}"
    if take.exists():
        raise _Failed(f"{take} exists: give a new --out folder")
    command = [sys.executable, "-m", "retarget.cli", "play", args.robot, "--motion", str(plan), "--record", str(take),
               "--record-topics", *topics, "--record-tail", str(args.record_tail), "--goal-tolerance",
               str(args.goal_tolerance),
               "--no-progress", "--json", "--wait", str(args.wait)]
    if args.namespace:
        command += ["--namespace", args.namespace]
    _say(f"trial {k}: playing {plan.name}, recording {', '.join(topics)} into {take.name}")
    started = time.monotonic()
    played = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), check=False)
    play_s = time.monotonic() - started
    (out / f"play{tag}.log").write_text(played.stdout + played.stderr, encoding="utf-8")
    if played.returncode != 0:
        last = (played.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise _Failed(f"trial {k}: `retarget play` exited {played.returncode}: {last} (log: {out}/play{tag}.log)")
    late = _play_note(played.stdout)
    if late:
        _say(f"trial {k}: warning: the trajectory server says: {late}")
    # A file by its absolute path: the node's working folder is not this one.
    motion = str(Path(args.motion).resolve()) if Path(args.motion).is_file() else str(args.motion)
    goal = Refine.Goal(robot=robot, motion=motion, plan_file=str(plan), recording=str(take),
                       bodies=bodies, trust_region=float(args.trust_region), no_refit=bool(args.no_refit),
                       no_recorded_start=bool(args.no_recorded_start),
                       out=str(out / f"plan{k + 1}.csv"),
                       report_dir=str(out / f"trial{k}") if args.report else "")
    _say(f"trial {k}: refining from {take.name} on the planner node")
    started = time.monotonic()
    result = client.call(client.refine, goal, args.refine_timeout, f"trial {k}'s refinement (~/refine)")
    refine_s = time.monotonic() - started
    if result.error_code != Refine.Result.SUCCESSFUL:
        kind = f" ({result.refusal})" if result.refusal else ""
        played_late = f" (the play began late: {late})" if late else ""
        raise _Failed(f"trial {k}: the refinement failed{kind} ({result.error_code}): {result.error_string}"
                      f"{played_late}", refusal=result.refusal)
    report = out / f"trial{k}.json"
    _write_json(report, json.loads(result.metrics_json))
    return TrialLine(trial=k, plan=str(plan), take=str(take),
                     measured_peak_deviation_m=float(result.measured_peak_deviation),
                     predicted_peak_deviation_m=float(result.predicted_peak_deviation),
                     peak_torque_ratio=float(result.peak_torque_ratio), decision=result.decision,
                     next_plan=str(out / f"plan{k + 1}.csv"), report=str(report), play_s=round(play_s, 2),
                     refine_s=round(refine_s, 2))
