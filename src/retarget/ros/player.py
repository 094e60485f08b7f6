"""Play trajectories on a running robot and measure how its servos followed (``make demo``, ``retarget play``).

:class:`RobotClient` is an rclpy node of its own (own context, spinning on a thread) with the trajectory server's
FollowJointTrajectory client and a joint_states recorder; :func:`tracking_figures` compares the recorded servo
positions with the executed reference. rclpy and the message packages are imported only when a client is made.
"""
from __future__ import annotations

import argparse
import math
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.jsonsafe import finite_or_none
from retarget.ros.futures import result_or_cancel, send_goal

if TYPE_CHECKING:
    from control_msgs.action import FollowJointTrajectory
    from rclpy.subscription import Subscription
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

__all__ = ["CANCEL_TIMEOUT_S", "LAG_GRID_S", "LEAD_PER_POINT_S", "MOVE_TO_START_S", "START_LEAD_S",
           "JointStateRecorder", "JointTracking", "RobotClient", "TrackingFigures", "point_trajectory", "print_figures",
           "start_lead", "trajectory_arrays", "tracking_figures"]

#: Lead time between sending a goal and its start [s]: the goal's header stamp, so the reference's time base
#: is known exactly (the trajectory server starts a goal with a non-zero stamp at that time).
START_LEAD_S = 0.5

#: Added to the lead per trajectory point [s]: a long goal takes longer to reach the trajectory server and be
#: checked there (a 22 223-point goal began 0.28 s after a 0.5 s lead at load 5 on 2 cores, 35 µs per point); a
#: goal that still begins late succeeds with a note (docs/ros.md).
LEAD_PER_POINT_S = 50e-6

#: Delays searched for the lag estimate of :func:`tracking_figures` [s].
LAG_GRID_S: NDArray[np.float64] = np.arange(0.0, 0.2005, 0.002)

#: Duration of the move from the current pose to the trajectory's first pose [s].
MOVE_TO_START_S = 2.0

#: Longest wait for the trajectory server to confirm a goal's cancel (after a Ctrl-C or a missing result) [s].
CANCEL_TIMEOUT_S = 5.0

#: A goal whose result is late is still waited for while the trajectory server sends its feedback (a robot, or a
#: twin running behind the bus, still within the server's goal_time_tolerance): until this long without any [s] ...
FEEDBACK_SILENCE_S = 5.0
#: ... and at most this long past the result's own timeout [s].
LATE_RESULT_LIMIT_S = 120.0


@dataclass(frozen=True)
class JointTracking:
    """Tracking error of one joint.

    Attributes:
        joint: Joint name.
        rms_deg: Root mean square of measured − reference [deg].
        peak_deg: Largest absolute error [deg].
        final_deg: Error at the last sample [deg].
    """

    joint: str
    rms_deg: float
    peak_deg: float
    final_deg: float


@dataclass(frozen=True)
class TrackingFigures:
    """How well the measured joint positions followed the executed trajectory.

    Attributes:
        joints: Per joint, in the trajectory's joint order.
        samples: joint_states messages inside the trajectory's time span.
        duration_s: Trajectory duration [s].
        rms_deg: RMS over all joints and samples [deg].
        peak_deg: Largest error over all joints [deg].
        lag_s: The delay of the measurement behind the reference that best explains it [s] (searched on a grid
            of :data:`LAG_GRID_S`): the servo loop's response time plus the command path's latency.
        rms_lag_compensated_deg: RMS error against the reference delayed by ``lag_s`` [deg]: what is left is
            shape error (the servos cutting corners, speed saturation), not delay.
        median_interval_s, max_interval_s: the median and the longest interval between consecutive joint_states
            within the span [s]: the driver's tick period, and its latest tick (a loaded host holds the servos'
            goals that long).
    """

    joints: tuple[JointTracking, ...]
    samples: int
    duration_s: float
    rms_deg: float
    peak_deg: float
    lag_s: float
    rms_lag_compensated_deg: float
    median_interval_s: float = math.nan
    max_interval_s: float = math.nan

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"samples": self.samples, "duration_s": self.duration_s, "rms_deg": self.rms_deg,
                "peak_deg": self.peak_deg, "lag_s": self.lag_s,
                "rms_lag_compensated_deg": self.rms_lag_compensated_deg,
                "median_interval_s": finite_or_none(self.median_interval_s),
                "max_interval_s": finite_or_none(self.max_interval_s),
                "joints": {j.joint: {"rms_deg": j.rms_deg, "peak_deg": j.peak_deg, "final_deg": j.final_deg}
                           for j in self.joints}}


def tracking_figures(joint_names: Sequence[str], reference_time: NDArray[np.float64],
                     reference_positions: NDArray[np.float64], sample_time: NDArray[np.float64],
                     sample_positions: NDArray[np.float64]) -> TrackingFigures:
    """Compare measured joint positions with a reference trajectory.

    The reference is interpolated linearly at the sample times (as the trajectory server interpolates a
    positions-only trajectory); samples outside ``[reference_time[0], reference_time[-1]]`` are ignored.

    Args:
        joint_names: Joint names ``(m,)``.
        reference_time: Reference times ``(n,)`` [s], increasing, same clock as ``sample_time``.
        reference_positions: Reference positions ``(n, m)`` [rad].
        sample_time: Times of the measurements ``(k,)`` [s].
        sample_positions: Measured positions ``(k, m)`` [rad].

    Returns:
        The figures.

    Raises:
        InputError: Shapes disagree, or no sample falls inside the reference's span.
    """
    from retarget.errors import InputError

    t_ref = np.asarray(reference_time, dtype=float)
    q_ref = np.asarray(reference_positions, dtype=float)
    t = np.asarray(sample_time, dtype=float)
    q = np.asarray(sample_positions, dtype=float)
    m = len(joint_names)
    if q_ref.shape != (t_ref.size, m) or q.shape != (t.size, m):
        raise InputError(f"shapes: reference {q_ref.shape} for {t_ref.size} times, samples {q.shape} for "
                         f"{t.size} times, {m} joints")
    inside = (t >= t_ref[0]) & (t <= t_ref[-1])
    if not inside.any():
        raise InputError(f"no sample between {t_ref[0]:.3f} s and {t_ref[-1]:.3f} s ({t.size} samples)")
    t, q = t[inside], q[inside]

    def error_deg(delay: float) -> NDArray[np.float64]:
        # np.interp holds the end values outside the span: the reference before its start is its first pose.
        expected = np.column_stack([np.interp(t - delay, t_ref, q_ref[:, j]) for j in range(m)])
        return np.degrees(q - expected)

    error = error_deg(0.0)
    rms_by_lag = [float(np.sqrt(np.mean(error_deg(d) ** 2))) for d in LAG_GRID_S]
    best = int(np.argmin(rms_by_lag))
    joints = tuple(JointTracking(name, float(np.sqrt(np.mean(error[:, j] ** 2))),
                                 float(np.max(np.abs(error[:, j]))), float(error[-1, j]))
                   for j, name in enumerate(joint_names))
    intervals = np.diff(t)
    return TrackingFigures(joints, int(t.size), float(t_ref[-1] - t_ref[0]),
                           float(np.sqrt(np.mean(error ** 2))), float(np.max(np.abs(error))),
                           float(LAG_GRID_S[best]), rms_by_lag[best],
                           float(np.median(intervals)) if intervals.size else math.nan,
                           float(np.max(intervals)) if intervals.size else math.nan)


@dataclass
class JointStateRecorder:
    """joint_states as (stamp [s], positions in the given joint order)."""

    joint_names: tuple[str, ...]
    times: list[float] = field(default_factory=list)
    positions: list[list[float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, msg: JointState) -> None:
        index = {name: i for i, name in enumerate(msg.name)}
        if not all(name in index for name in self.joint_names):
            return
        with self.lock:
            self.times.append(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)
            self.positions.append([msg.position[index[name]] for name in self.joint_names])

    def latest(self) -> NDArray[np.float64] | None:
        with self.lock:
            return np.array(self.positions[-1]) if self.positions else None

    def arrays(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        with self.lock:
            return np.array(self.times), np.array(self.positions).reshape(-1, len(self.joint_names))


class RobotClient:
    """An rclpy node in its own context, spinning on a thread: the trajectory server's FollowJointTrajectory client,
    a joint_states recorder and, when ``retarget_action`` is given, the planner's Retarget client.

    Args:
        joint_names: The robot's joints, the recorder's column order.
        joint_states_topic: Fully qualified (``/ns/joint_states``).
        follow_action: Fully qualified FollowJointTrajectory action of the trajectory server.
        retarget_action: Fully qualified Retarget action of the planner, or None.
        node_name: The client node's name.
        record: Record ``joint_states`` from the start (else from :meth:`record`).
    """

    def __init__(self, joint_names: Sequence[str], joint_states_topic: str, follow_action: str,
                 retarget_action: str | None = None, node_name: str = "retarget_client", record: bool = True) -> None:
        import rclpy
        from control_msgs.action import FollowJointTrajectory
        from retarget.ros.action_client import LockedActionClient
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.signals import SignalHandlerOptions

        self.context = rclpy.Context()
        # No rclpy signal handler: Ctrl-C is Python's KeyboardInterrupt alone, so the context stays up for the
        # goal's cancel (rclpy's handler would shut it down concurrently, and the cancel could not be sent).
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = Node(node_name, context=self.context)
        self.recorder = JointStateRecorder(tuple(joint_names))
        self._joint_states_topic = joint_states_topic
        self._subscription: Subscription | None = None
        self.follow = LockedActionClient(self.node, FollowJointTrajectory, follow_action)
        self.retarget = None
        if retarget_action:
            from retarget_interfaces.action import Retarget

            self.retarget = LockedActionClient(self.node, Retarget, retarget_action)
        self.executor = SingleThreadedExecutor(context=self.context)  # callbacks are short; see trajectory_server
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()
        if record:
            self.record()

    def record(self, wait: float = 0.0) -> bool:
        """Record ``joint_states`` from now on (subscribes once; a client made with ``record=False`` receives none
        before: at 100 Hz, receiving them costs the rclpy client about a seventh of a core). With ``wait`` > 0, waits
        up to that long [s] for a first message; returns whether one has come."""
        if self._subscription is None:
            from sensor_msgs.msg import JointState

            self._subscription = self.node.create_subscription(JointState, self._joint_states_topic, self.recorder,
                                                               200)
        deadline = time.monotonic() + wait
        while self.recorder.latest() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.recorder.latest() is not None

    def close(self) -> None:
        # Bounded: after a Ctrl-C rclpy's signal thread shuts the context down concurrently, and an unbounded wait
        # for the spinning thread's work could keep the process from exiting.
        self.executor.shutdown(timeout_sec=5.0)
        self._thread.join(5)  # before destroying what the spinning thread may be waiting on
        self.follow.destroy()
        if self.retarget is not None:
            self.retarget.destroy()
        self.node.destroy_node()
        self.context.try_shutdown()

    def now(self) -> float:
        """The node clock [s]."""
        return self.node.get_clock().now().nanoseconds * 1e-9

    def execute(self, trajectory: JointTrajectory, start: float, timeout: float,
                progress: Callable[[float], None] | None = None,
                goal_tolerance: float = 0.0) -> FollowJointTrajectory.Result:
        """FollowJointTrajectory of ``trajectory`` from ``start`` [s, node clock]; returns the result.

        ``goal_tolerance`` [rad] is sent as every joint's position goal tolerance (0: the server's default, -1: none).

        ``progress(elapsed [s])`` is called while waiting. A Ctrl-C (KeyboardInterrupt) or no result within
        ``timeout`` [s] — or later, while the server's feedback still comes (:data:`FEEDBACK_SILENCE_S`) — cancels
        the goal (the trajectory server stops the robot where it is) and re-raises; a
        cancel not confirmed within :data:`CANCEL_TIMEOUT_S` is said on stderr (a Ctrl-C) or in the TimeoutError.

        Raises:
            RuntimeError: The trajectory server rejected the goal.
            TimeoutError: No goal response within 10 s, or no result within ``timeout``.
        """
        from builtin_interfaces.msg import Time
        from control_msgs.action import FollowJointTrajectory

        goal = FollowJointTrajectory.Goal(trajectory=trajectory)
        if goal_tolerance:
            from control_msgs.msg import JointTolerance

            goal.goal_tolerance = [JointTolerance(name=j, position=float(goal_tolerance))
                                   for j in trajectory.joint_names]
        ns = int(round(start * 1e9))
        goal.trajectory.header.stamp = Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
        fed = [-math.inf]  # the last feedback's arrival (written on the executor's thread)

        def on_feedback(_: FollowJointTrajectory.Feedback) -> None:
            fed[0] = time.monotonic()

        handle = send_goal(self.follow, goal, 10.0, "no trajectory goal response", feedback_callback=on_feedback,
                           warn=lambda text: print(f"retarget play: warning: {text}", file=sys.stderr, flush=True))
        if not handle.accepted:
            raise RuntimeError("the trajectory server did not accept the goal")
        tick = (lambda: progress(self.now() - start)) if progress is not None else None
        # The robot must not go on moving without anyone waiting for it: cancelled on a timeout or a Ctrl-C.
        return result_or_cancel(handle, timeout, "no trajectory result", cancel_timeout_s=CANCEL_TIMEOUT_S,
                                unconfirmed="the robot may still be moving", tick=tick, alive=lambda: fed[0],
                                silence_s=FEEDBACK_SILENCE_S, late_limit_s=LATE_RESULT_LIMIT_S).result

    def move_to(self, positions: NDArray[np.float64], seconds: float) -> FollowJointTrajectory.Result:
        """Reach ``positions`` [rad] (the recorder's joint order) in ``seconds`` s from wherever the robot is: a
        one-point goal starting :data:`START_LEAD_S` from now; returns the result. Raises as :meth:`execute`."""
        home = point_trajectory(self.recorder.joint_names, positions, seconds)
        return self.execute(home, self.now() + START_LEAD_S, seconds + 10.0)

    def play(self, trajectory: JointTrajectory, show_progress: bool = True,
             goal_tolerance: float = 0.0) -> tuple[FollowJointTrajectory.Result, float]:
        """Execute ``trajectory`` starting :func:`start_lead` from now, with a progress bar on stderr (none when
        ``show_progress`` is false or stderr is not a terminal); waits up to its duration + 20 s, longer while the
        server's feedback comes (:meth:`execute`). Returns the result
        and the start [s, node clock]. Raises as :meth:`execute`."""
        from tqdm import tqdm

        start = self.now() + start_lead(len(trajectory.points))
        duration = float(trajectory_arrays(trajectory)[0][-1])
        # disable=None: no bar when stderr is not a terminal (CI logs).
        with tqdm(total=round(duration, 1), unit="s", file=sys.stderr, disable=None if show_progress else True,
                  mininterval=0.5, bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} s") as bar:
            def progress(elapsed: float) -> None:
                bar.update(round(min(max(elapsed, 0.0), duration), 1) - bar.n)

            return self.execute(trajectory, start, duration + 20.0, progress, goal_tolerance), start


def start_lead(points: int) -> float:
    """How far ahead of now a goal of ``points`` points is stamped to start [s]: :data:`START_LEAD_S` plus
    :data:`LEAD_PER_POINT_S` per point."""
    return START_LEAD_S + LEAD_PER_POINT_S * points


def trajectory_arrays(trajectory: JointTrajectory) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """A JointTrajectory's times ``(n,)`` [s] and positions ``(n, m)`` [rad]."""
    times = np.array([p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec for p in trajectory.points])
    positions = np.array([list(p.positions) for p in trajectory.points])
    return times, positions


def point_trajectory(joint_names: Sequence[str], positions: NDArray[np.float64], at: float) -> JointTrajectory:
    """A one-point JointTrajectory: reach ``positions`` [rad] ``at`` s after the start."""
    from trajectory_msgs.msg import JointTrajectory

    from retarget.ros.conversions import point_msg

    msg = JointTrajectory(joint_names=list(joint_names))
    msg.points = [point_msg(positions, time_from_start=at)]
    return msg


def print_figures(figures: TrackingFigures, result: FollowJointTrajectory.Result) -> None:
    """The goal's outcome (with the server's note on a success) and the tracking figures, a table per joint, on
    stdout."""
    # A goal may succeed with a note (the trajectory server began it late: docs/ros.md).
    note = f" ({result.error_string})" if result.error_string else ""
    outcome = f"SUCCESSFUL{note}" if result.error_code == 0 else f"error {result.error_code}: {result.error_string}"
    print(f"tracking: goal {outcome}; {figures.samples} joint_states over {figures.duration_s:.2f} s; "
          f"all joints RMS {figures.rms_deg:.2f} deg, peak {figures.peak_deg:.2f} deg; measured lag "
          f"{figures.lag_s * 1e3:.0f} ms (RMS {figures.rms_lag_compensated_deg:.2f} deg once the lag is "
          f"removed); joint_states every {figures.median_interval_s * 1e3:.1f} ms, the longest interval "
          f"{figures.max_interval_s * 1e3:.1f} ms",
          flush=True)
    print(f"  {'joint':24s} {'RMS [deg]':>10s} {'peak [deg]':>10s} {'final [deg]':>11s}")
    for joint in figures.joints:
        print(f"  {joint.joint:24s} {joint.rms_deg:10.2f} {joint.peak_deg:10.2f} {joint.final_deg:11.2f}")


# ---- retarget play --------------------------------------------------------------------------------------------

#: How far [rad] the robot may be from a motion's first pose before ``retarget play`` moves it there first, when the
#: robot's params file has no ``default_goal_tolerance``.
DEFAULT_START_TOLERANCE = 0.02


def register_play(subparsers: argparse._SubParsersAction) -> None:
    """Add ``retarget play`` to the top-level ``retarget`` parser."""
    p = subparsers.add_parser(
        "play",
        help="play a motion on a running robot (FollowJointTrajectory) and report how its servos followed",
        description="Send a motion (a file, a bag, or a library name such as fit_rig/ident_mode2) as one "
        "FollowJointTrajectory goal to the trajectory server of a robot already brought up (`retarget up ROBOT`, "
        "`ros2 launch retarget ROBOT.launch.py`; same ROS_DOMAIN_ID and discovery range). Moves to the motion's "
        "first pose first when the robot is not there (with --record always: every take starts at rest after the "
        "same move), shows the progress, and prints the goal's result and the "
        "tracking figures (measured joint_states against the motion). With --record, records topics (e.g. the "
        "mocap of a fitting rig's tip) into a rosbag2 bag from --record-lead s before the motion to --record-tail s "
        "after it. Ctrl-C cancels the goal: the robot stops where it is (a recording is finished cleanly). Exit 0 "
        "when the goal succeeded, 1 when it failed or no robot answered, 2 on bad input.",
    )
    p.add_argument("robot", nargs="?", default=None,
                   help="robot or rig name or params YAML (default: the ROBOT part of a library motion name)")
    p.add_argument("--motion", default=None,
                   help="motion file or bag, or library name ROBOT/MOTION (retarget motions ROBOT)")
    p.add_argument("--robot", dest="robot_option", default=None, help=argparse.SUPPRESS)
    p.set_defaults(legacy_form=_play_legacy)
    p.add_argument("--namespace", default="", help="the robot's ROS namespace (as given to retarget up)")
    p.add_argument("--move-to-start", type=float, default=MOVE_TO_START_S, metavar="S",
                   help=f"duration of the move to the first pose [s] (default {MOVE_TO_START_S:g})")
    p.add_argument("--wait", type=float, default=10.0, metavar="S",
                   help="how long to wait for the trajectory server and the first joint_states [s] (default 10)")
    p.add_argument("--servo", default=None, metavar="SERVO.yaml",
                   help="the servo file laid over the robot's servos that the plan was made for (`retarget plan "
                   "--servo`): the warning on a plan made for other servos compares with it (default: the params "
                   "file's servo_file)")
    rec = p.add_argument_group("recording the take (retarget record, docs/mocap.md)")
    rec.add_argument("--record", type=Path, default=None, metavar="BAG",
                     help="bag folder to create (must not exist), recording --record-topics around the motion")
    rec.add_argument("--record-topics", nargs="+", default=None, metavar="TOPIC",
                     help="topics to record, e.g. /mocap/tip/pose")
    rec.add_argument("--record-lead", type=float, default=1.0, metavar="S",
                     help="seconds recorded at rest before the motion starts (default 1; a fit needs 0.3)")
    rec.add_argument("--record-tail", type=float, default=1.0, metavar="S",
                     help="seconds recorded after the goal ended (default 1)")
    rec.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="bag storage (default mcap)")
    p.add_argument("--goal-tolerance", type=float, default=0.0, metavar="RAD",
                   help="every joint's position tolerance at the end of the motion, sent with the goal [rad] "
                   "(default 0: the server's default_goal_tolerance; -1: none, the goal ends with its last point — "
                   "a plan whose goals pre-compensate the servos' sag ends that sag away from them)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    p.set_defaults(func=_play_command)


def _play_legacy(args: argparse.Namespace) -> str:
    """``play MOTION [--robot R]`` (the old spelling) as ``play [R] --motion MOTION``, with its deprecation note."""
    from retarget.errors import InputError

    note = ""
    if args.motion is None:
        if args.robot is None:
            raise InputError("which motion? `retarget play ROBOT --motion M` (retarget motions ROBOT)")
        args.motion, args.robot = args.robot, args.robot_option
        note = (f"`retarget play {args.motion}{' --robot ' + args.robot if args.robot else ''}` is deprecated: "
                f"`retarget play {args.robot or 'ROBOT'} --motion {args.motion}`")
    elif args.robot_option is not None:
        if args.robot is not None and args.robot != args.robot_option:
            raise InputError(f"two robots: {args.robot} and --robot {args.robot_option}")
        args.robot = args.robot_option
        note = f"`--robot {args.robot}` is deprecated: `retarget play {args.robot} --motion {args.motion}`"
    return note


def _robot_of(motion: str, robot: str | None) -> str:
    """The ``--robot`` given, else the ROBOT of a library name ``ROBOT/MOTION`` that is not a path."""
    from retarget.errors import InputError
    from retarget.model.library import robots_then_rigs

    if robot:
        return robot
    head = str(motion).split("/", 1)[0]
    if not Path(motion).exists() and "/" in str(motion) and head in robots_then_rigs():
        return head
    raise InputError(f"which robot plays {motion}? give it first, `retarget play ROBOT --motion {motion}` (a library "
                     "name ROBOT/MOTION names it)")


def planned_servo_warnings(motion_file: str | Path, robot: str, servo_file: str | None = None) -> list[str]:
    """Warnings when a plan CSV says it was made for servos other than the robot config declares, with
    ``servo_file`` laid over it (its params file's ``servo_file``; a plan's goals pre-compensate the sag and lag of
    the servos it was made for: on other gains it cuts less)."""
    from pathlib import Path

    from retarget.planning.variants import declared_servos, declared_with, planned_servos, servo_mismatches

    if not Path(str(motion_file)).is_file():
        return []
    planned = planned_servos(motion_file)
    if planned is None:
        return []
    diffs = servo_mismatches(planned, declared_servos(robot, servo_file))
    if not diffs:
        return []
    return [f"{motion_file} was planned for other servos than {robot}'s config declares{declared_with(servo_file)} "
            f"({'; '.join(diffs)}): "
            "its goals pre-compensate those servos' sag and lag; plan again for this robot's servos"]


def plan_assumptions(motion_file: str | Path) -> list[str]:
    """What a plan CSV says it assumes of the hardware (``retarget plan --out``'s comment lines); [] for another
    file or a motion that is not a plan."""
    from pathlib import Path

    from retarget.planning.variants import planned_assumptions

    if Path(str(motion_file)).suffix.lower() != ".csv" or not Path(str(motion_file)).is_file():
        return []
    return planned_assumptions(motion_file)


def _play_command(args: argparse.Namespace) -> int:
    import json

    from retarget.errors import InputError
    from retarget.info import components
    from retarget.model.library import resolve_robot
    from retarget.motion import load_motion
    from retarget.planning.settings import given_servo_file, robot_settings
    from retarget.ros.motion_convert import for_joints

    _check_play_options(args)
    robot = _robot_of(args.motion, args.robot)
    name = resolve_robot(robot).name.removesuffix(".yaml")
    params = robot_settings(robot)
    joints = [str(j) for j in params.get("joint_names") or []]
    motion = for_joints(load_motion(args.motion), joints, "play")
    for line in planned_servo_warnings(args.motion, robot, given_servo_file(args.servo, params)):
        print(f"retarget play: warning: {line}", file=sys.stderr, flush=True)
    assumptions = plan_assumptions(args.motion)
    if assumptions:
        print("retarget play: the plan assumes of the hardware (not modelled):\n"
              + "\n".join(f"  - {line}" for line in assumptions), flush=True)
    tolerance = float(params.get("default_goal_tolerance") or DEFAULT_START_TOLERANCE)
    missing = [c for c in ("rclpy", "control_msgs") if not components()[c]]
    if missing:
        raise InputError(f"retarget play needs ROS 2 ({', '.join(missing)} missing): run `make setup`")
    from retarget.ros.motion_convert import to_joint_trajectory_msg

    namespace = args.namespace.rstrip("/")
    follow = f"{namespace}/trajectory_server/follow_joint_trajectory"
    report: dict[str, object] = {"ok": False, "robot": name, "motion": str(args.motion), "action": follow,
                                 "duration_s": round(float(motion.time[-1]), 3), "moved_to_start": False}
    if assumptions:
        report["assumptions"] = assumptions

    def fail(text: str) -> int:
        report["error"] = text
        print(f"retarget play: error: {text}", file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps(report), flush=True)
        return 1

    client = RobotClient(joints, f"{namespace}/joint_states", follow, node_name="retarget_play")
    recording: _Recording | None = None
    try:
        if not client.follow.wait_for_server(timeout_sec=args.wait):
            return fail(f"no trajectory server at {follow} within {args.wait:g} s: is `retarget up {name}` (or "
                        "its launch file) running, with the same ROS_DOMAIN_ID and ROS_AUTOMATIC_DISCOVERY_RANGE?")
        if not client.record(wait=args.wait):
            return fail(f"no joint_states of {joints} on {namespace}/joint_states within {args.wait:g} s")
        current = client.recorder.latest()
        trajectory = to_joint_trajectory_msg(motion)
        error = _move_to_start(client, trajectory, current, tolerance, args.move_to_start, report,
                               always=args.record is not None)
        if error is not None:
            return fail(error)
        if args.record is not None:
            recording = _Recording(args.record, args.record_topics, args.storage, args.wait)
            if not recording.started():
                return fail(f"recording {args.record_topics}: {recording.error}")
            print(f"recording {', '.join(args.record_topics)} into {args.record}; {args.record_lead:g} s at rest "
                  "first", file=sys.stderr, flush=True)
            time.sleep(args.record_lead)
        error = _play_take(client, trajectory, args, name, recording, report)
        if error is not None:
            return fail(error)
        if args.json:
            print(json.dumps(report), flush=True)
        return 0
    finally:
        if recording is not None:
            recording.finish()  # after a failure or Ctrl-C too: the bag is finished cleanly
        client.close()


def _check_play_options(args: argparse.Namespace) -> None:
    """Refuse ``retarget play`` options out of range or missing their partner.

    Raises:
        InputError: The first bad option.
    """
    from retarget.errors import InputError

    if args.move_to_start <= 0 or args.wait <= 0:
        raise InputError("--move-to-start and --wait must be positive")
    if not (args.goal_tolerance >= 0 or args.goal_tolerance == -1):
        raise InputError(f"--goal-tolerance must be 0 or more, or -1 (none), got {args.goal_tolerance}")
    if (args.record is None) != (args.record_topics is None):
        raise InputError("--record BAG and --record-topics TOPIC ... go together")
    if args.record_lead < 0 or args.record_tail < 0:
        raise InputError("--record-lead and --record-tail must be >= 0")
    if args.record is not None and args.record.exists():
        raise InputError(f"{args.record} exists: give a new bag folder")


def _move_to_start(client: RobotClient, trajectory: JointTrajectory, current: NDArray[np.float64] | None,
                   tolerance: float, seconds: float, report: dict[str, object], always: bool = False) -> str | None:
    """Move the robot to the trajectory's first pose in ``seconds`` [s] when it is farther than ``tolerance``
    [rad] from ``current``, or ``always`` (a recorded take: every take then starts at rest after the same move, where
    a robot left within the tolerance would be swung there in the goal's lead and ring into the motion); what failed,
    or None (``report["moved_to_start"]`` says whether it moved)."""
    import math

    positions = trajectory_arrays(trajectory)[1]
    away = float(np.max(np.abs(positions[0] - current)))
    if away <= tolerance and not always:
        return None
    print(f"moving to the first pose ({math.degrees(away):.1f} deg away) in {seconds:g} s",
          file=sys.stderr, flush=True)
    try:
        result = client.move_to(positions[0], seconds)
    except (RuntimeError, TimeoutError) as exc:
        return f"the move to the first pose failed: {exc}"
    report["moved_to_start"] = True
    if result.error_code != 0:
        return f"the move to the first pose failed ({result.error_code}): {result.error_string}"
    return None


def _play_take(client: RobotClient, trajectory: JointTrajectory, args: argparse.Namespace, name: str,
               recording: _Recording | None, report: dict[str, object]) -> str | None:
    """Play ``trajectory`` on robot ``name``, finish the ``recording`` after its tail, and report the goal and how
    the servos followed; what failed, or None when the goal succeeded."""
    from retarget.errors import InputError

    times, positions = trajectory_arrays(trajectory)
    joints = client.recorder.joint_names
    duration = float(times[-1])
    print(f"playing {args.motion} on {name} ({duration:.2f} s, {len(times)} points, {len(joints)} joints)",
          file=sys.stderr, flush=True)
    try:
        result, start = client.play(trajectory, show_progress=not args.no_progress,
                                    goal_tolerance=args.goal_tolerance)
    except (RuntimeError, TimeoutError) as exc:
        return str(exc)
    report["goal"] = {"error_code": result.error_code, "error_string": result.error_string}
    report["motion_start_s"] = start
    if recording is not None:
        recording.mark_start(start)
        time.sleep(args.record_tail)
        report["record"] = recording.finish()
    sample_time, sample_positions = client.recorder.arrays()
    try:
        figures = tracking_figures(joints, times + start, positions, sample_time, sample_positions)
    except InputError as exc:  # no joint_states during the goal: say so, the goal's result still stands
        print(f"no tracking figures: {exc}", file=sys.stderr, flush=True)
    else:
        report["tracking"] = figures.as_dict()
        print_figures(figures, result)
    report["ok"] = result.error_code == 0
    if result.error_code != 0:
        return f"the goal ended with error {result.error_code}: {result.error_string}"
    return None


class _Recording:
    """``retarget record`` on a thread for ``retarget play --record``: started, then finished on demand."""

    def __init__(self, bag: Path, topics: Sequence[str], storage: str, wait_s: float) -> None:
        from retarget.ros.record import record

        self.bag = bag
        self._topics = list(topics)
        self.error: str | None = None
        self.summary: dict[str, object] | None = None
        #: Stored in the bag's metadata when it is closed (:meth:`mark_start` adds the motion's start).
        self.custom_data: dict[str, str] = {}
        self._stop = threading.Event()
        self._first = threading.Event()

        def run() -> None:
            try:
                summary = record(topics, bag, storage, None, progress=False, stop=self._stop, wait_s=wait_s,
                                 first_message=self._first, custom_data=self.custom_data)
            except Exception as exc:  # noqa: BLE001 (reported to the caller, which fails with it)
                self.error = str(exc)
            else:
                self.summary = summary.to_dict()
                print(f"bag {summary.path} ({summary.storage}, {summary.duration_s:.1f} s, "
                      f"{summary.message_count} messages)", file=sys.stderr, flush=True)

        self._thread = threading.Thread(target=run, name="retarget-play-record", daemon=True)
        self._thread.start()
        self._wait_s = wait_s

    def started(self) -> bool:
        """Wait until every topic has a message in the bag (the rest before the motion is then in the take of each);
        False (with :attr:`error`) when the recording failed or a topic stayed silent."""
        deadline = time.monotonic() + 2.0 * self._wait_s
        while not self._first.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                if self.error is None:
                    self.error = (f"not every one of {', '.join(self._topics)} sent a message within "
                                  f"{2.0 * self._wait_s:g} s (is each body tracked, its mocap node running?)")
                self._stop.set()
                self._thread.join(10.0)
                if self.summary is not None:  # a bag of some topics only is no take: nothing is left
                    shutil.rmtree(self.bag, ignore_errors=True)
                    self.summary = None
                return False
        return True

    def mark_start(self, start_s: float) -> None:
        """Store the played motion's start [s, ROS clock] in the bag's metadata (:data:`MOTION_START_KEY`): the
        take's own alignment in time, for ``retarget refine``."""
        from retarget.mocap.bags import MOTION_START_KEY

        self.custom_data[MOTION_START_KEY] = str(int(round(start_s * 1e9)))

    def finish(self) -> dict[str, object] | None:
        """Stop and close the bag (idempotent); its summary, or None when it failed."""
        self._stop.set()
        self._thread.join(30.0)
        return self.summary
