"""``make demo``: the drummer on the emulated servo bus, driven through the whole ROS 2 loop.

Steps, each reported on one line and none faked:

1. bring up the drummer's node set (:mod:`retarget.ros.bringup`, the same set as ``retarget up drummer``):
   emulated XM430-W210 bus, Dynamixel driver, trajectory server, planner, mocap twin;
2. load the motion ``drummer/drumming`` and ask the planner (Retarget action) for an optimized trajectory;
   while no reduced model of the drummer is cached (planning trains one from full simulations, which takes
   hours for the drummer; the planner node does not train in-process by default) it answers NOT_AVAILABLE with
   the reason, and the demo says so in one line and plays the input animation instead;
3. move to the trajectory's first pose, then execute the trajectory (optimized or input) with
   FollowJointTrajectory, recording ``joint_states``;
4. print the tracking figures (per-joint RMS and peak error between the executed reference and the measured
   servo positions [deg], the goal's result) and stop every process.

Exit 0 only if every step worked and every process stopped cleanly. DDS stays on loopback
(``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``) in a random ``ROS_DOMAIN_ID`` unless those are set.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["JointTracking", "TrackingFigures", "main", "tracking_figures"]

#: Lead time between sending a goal and its start [s]: the goal's header stamp, so the reference's time base
#: is known exactly (the trajectory server starts a goal with a non-zero stamp at that time).
START_LEAD_S = 0.5

#: Delays searched for the lag estimate of :func:`tracking_figures` [s].
LAG_GRID_S: NDArray[np.float64] = np.arange(0.0, 0.2005, 0.002)

#: Duration of the move from the current pose to the trajectory's first pose [s].
MOVE_TO_START_S = 2.0


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
    """

    joints: tuple[JointTracking, ...]
    samples: int
    duration_s: float
    rms_deg: float
    peak_deg: float
    lag_s: float
    rms_lag_compensated_deg: float

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {"samples": self.samples, "duration_s": self.duration_s, "rms_deg": self.rms_deg,
                "peak_deg": self.peak_deg, "lag_s": self.lag_s,
                "rms_lag_compensated_deg": self.rms_lag_compensated_deg,
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
    return TrackingFigures(joints, int(t.size), float(t_ref[-1] - t_ref[0]),
                           float(np.sqrt(np.mean(error ** 2))), float(np.max(np.abs(error))),
                           float(LAG_GRID_S[best]), rms_by_lag[best])


@dataclass
class _Recorder:
    """joint_states as (stamp [s], positions in the given joint order)."""

    joint_names: tuple[str, ...]
    times: list[float] = field(default_factory=list)
    positions: list[list[float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, msg: Any) -> None:
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


class _Client:
    """The demo's rclpy node: Retarget and FollowJointTrajectory clients, a joint_states recorder."""

    def __init__(self, plan: Any) -> None:
        import rclpy
        from control_msgs.action import FollowJointTrajectory
        from rclpy.action import ActionClient
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from sensor_msgs.msg import JointState

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = Node("retarget_demo", context=self.context)
        self.recorder = _Recorder(plan.joint_names)
        self.node.create_subscription(JointState, plan.joint_states_topic, self.recorder, 200)
        self.follow = ActionClient(self.node, FollowJointTrajectory, plan.follow_joint_trajectory_action)
        self.retarget = None
        if plan.retarget_action:
            from retarget_interfaces.action import Retarget

            self.retarget = ActionClient(self.node, Retarget, plan.retarget_action)
        self.executor = SingleThreadedExecutor(context=self.context)  # callbacks are short; see trajectory_server
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def close(self) -> None:
        import rclpy

        self.executor.shutdown()
        self._thread.join(5)  # before destroying what the spinning thread may be waiting on
        self.follow.destroy()
        if self.retarget is not None:
            self.retarget.destroy()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)

    def now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    @staticmethod
    def _wait(future: Any, timeout: float, what: str, tick: Any = None) -> Any:
        deadline = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout} s")
            if tick is not None:
                tick()
            time.sleep(0.05)
        return future.result()

    def plan_trajectory(self, robot: str, animation: Any, timeout: float) -> tuple[int | None, Any, str]:
        """Ask the planner; returns (error_code or None on timeout, result or None, text)."""
        from retarget_interfaces.action import Retarget

        goal = Retarget.Goal(robot=robot, animation=animation, execute=False, deviation_weight=-1.0,
                             acceleration_weight=-1.0)
        handle = self._wait(self.retarget.send_goal_async(goal), 10.0, "planner goal response")
        if not handle.accepted:
            return Retarget.Result.FAILED, None, "the planner rejected the goal"
        try:
            response = self._wait(handle.get_result_async(), timeout, "planner result")
        except TimeoutError as exc:
            self._wait(handle.cancel_goal_async(), 5.0, "cancel response")
            return None, None, str(exc)
        result = response.result
        return result.error_code, result, result.error_string

    def execute(self, trajectory: Any, start: float, timeout: float, progress: Any = None) -> Any:
        """FollowJointTrajectory of ``trajectory`` from ``start`` [s, node clock]; returns the result."""
        from builtin_interfaces.msg import Time
        from control_msgs.action import FollowJointTrajectory

        goal = FollowJointTrajectory.Goal(trajectory=trajectory)
        ns = int(round(start * 1e9))
        goal.trajectory.header.stamp = Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
        handle = self._wait(self.follow.send_goal_async(goal), 10.0, "trajectory goal response")
        if not handle.accepted:
            raise RuntimeError("the trajectory server did not accept the goal")
        tick = (lambda: progress(self.now() - start)) if progress is not None else None
        return self._wait(handle.get_result_async(), timeout, "trajectory result", tick).result


def _trajectory_arrays(trajectory: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    times = np.array([p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec for p in trajectory.points])
    positions = np.array([list(p.positions) for p in trajectory.points])
    return times, positions


def _point_trajectory(joint_names: Sequence[str], positions: NDArray[np.float64], at: float) -> Any:
    from trajectory_msgs.msg import JointTrajectory

    from retarget.ros.conversions import point_msg

    msg = JointTrajectory(joint_names=list(joint_names))
    msg.points = [point_msg(positions, time_from_start=at)]
    return msg


def _isolate_dds() -> tuple[str, str]:
    """Loopback discovery and a random domain (unless set), for this process and the children it starts."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    # Domains 1..101 keep the ports of every participant below the ephemeral range on Linux.
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 101)))
    return os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"], os.environ["ROS_DOMAIN_ID"]


def _say(text: str) -> None:
    print(f"demo: {text}", flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The demo's steps; returns the report (``ok`` tells whether everything worked)."""
    from retarget.info import components
    from retarget.motion import load_motion
    from retarget.motion.ros_convert import to_joint_trajectory_msg
    from retarget.ros.bringup import BringupError, Supervisor, describe

    report: dict[str, Any] = {"ok": False, "robot": args.robot, "motion": args.motion}
    started = time.monotonic()
    missing = [name for name in ("rclpy", "control_msgs", "retarget_interfaces") if not components()[name]]
    if missing:
        report["error"] = f"set-up incomplete, missing {', '.join(missing)} (run `make setup`)"
        return report
    discovery, domain = _isolate_dds()
    report.update(discovery=discovery, domain_id=int(domain))
    motion = load_motion(args.motion)
    # The planner stops by itself before the demo stops waiting, returning its best iterate so far.
    plan = describe(args.robot, mocap="twin", planner=True, plan_time_budget=max(args.plan_timeout - 20.0, 10.0))
    if list(motion.joint_names) != list(plan.joint_names):
        motion = motion.reorder(list(plan.joint_names))
    log_path = Path(tempfile.gettempdir()) / f"retarget-demo-{os.getpid()}.log"
    sink = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else (lambda line: None)
    _say(f"{plan.robot}: {len(plan.joint_names)} joints; motion {args.motion} ({motion.duration:.2f} s, "
         f"{motion.num_samples} samples); DDS {discovery}, domain {domain}; node logs in {log_path}")
    supervisor = Supervisor(plan, sink=sink, log_path=log_path)
    client: _Client | None = None
    try:
        supervisor.start()
        ready = supervisor.wait_ready(args.ready_timeout)
        _say(f"bring-up ready in {ready:.1f} s on the emulated bus: "
             + ", ".join(spec.name for spec in (*plan.processes, *plan.nodes)))
        report["ready_s"] = round(ready, 3)
        client = _Client(plan)
        if not client.follow.wait_for_server(timeout_sec=10.0):
            raise BringupError("the trajectory server's action is not visible to the demo client")
        animation = to_joint_trajectory_msg(motion)
        trajectory, source = animation, "input animation"
        if client.retarget is not None and not args.no_plan:
            if not client.retarget.wait_for_server(timeout_sec=10.0):
                raise BringupError("the planner's action is not visible to the demo client")
            t0 = time.monotonic()
            code, result, text = client.plan_trajectory(plan.robot, animation, args.plan_timeout)
            report["planner"] = {"error_code": code, "error_string": text,
                                 "wall_time_s": time.monotonic() - t0}
            from retarget_interfaces.action import Retarget

            if code == Retarget.Result.SUCCESSFUL:
                trajectory, source = result.optimized, "optimized trajectory"
                report["planner"].update(iterations=result.iterations,
                                         naive_peak_deviation_m=result.naive_peak_deviation,
                                         optimized_peak_deviation_m=result.optimized_peak_deviation)
                limited = bool(json.loads(result.metrics_json or "{}").get("budget_limited", False))
                report["planner"]["budget_limited"] = limited
                _say(f"planner: optimized in {result.iterations} iterations"
                     f"{' (stopped by its time budget: best iterate so far)' if limited else ''}; "
                     "tracked-body peak deviation "
                     f"{result.naive_peak_deviation * 100:.1f} cm naive -> "
                     f"{result.optimized_peak_deviation * 100:.1f} cm optimized")
            elif code == Retarget.Result.NOT_AVAILABLE:
                _say(f"planner answered NOT_AVAILABLE ({text}): executing the INPUT animation, not an "
                     "optimized trajectory")
            else:
                report["error"] = f"planner failed ({code}): {text}"
                _say(f"planner failed ({code}): {text}")
                return report
        else:
            _say("planner skipped (--no-plan): executing the INPUT animation")
        report["executed"] = source
        times, positions = _trajectory_arrays(trajectory)
        current = client.recorder.latest()
        home = _point_trajectory(plan.joint_names, positions[0], MOVE_TO_START_S)
        result = client.execute(home, client.now() + START_LEAD_S, MOVE_TO_START_S + 10.0)
        report["move_to_start"] = {"error_code": result.error_code, "error_string": result.error_string}
        if result.error_code != 0:
            report["error"] = f"move to the first pose failed ({result.error_code}): {result.error_string}"
            return report
        _say(f"moved to the first pose in {MOVE_TO_START_S:.1f} s (largest joint move "
             f"{np.degrees(np.max(np.abs(positions[0] - current))) if current is not None else 0.0:.1f} deg)")
        start = client.now() + START_LEAD_S
        duration = float(times[-1])
        _say(f"executing the {source} ({duration:.2f} s, {len(times)} points) with FollowJointTrajectory")
        from tqdm import tqdm

        # disable=None: no bar when stderr is not a terminal (CI logs).
        with tqdm(total=round(duration, 1), unit="s", file=sys.stderr,
                  disable=True if args.no_progress else None, mininterval=0.5,
                  bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} s") as bar:
            def progress(elapsed: float) -> None:
                bar.update(round(min(max(elapsed, 0.0), duration), 1) - bar.n)

            result = client.execute(trajectory, start, duration + 20.0, progress)
        report["goal"] = {"error_code": result.error_code, "error_string": result.error_string}
        sample_time, sample_positions = client.recorder.arrays()
        figures = tracking_figures(plan.joint_names, times + start, positions, sample_time, sample_positions)
        report["tracking"] = figures.as_dict()
        _print_figures(figures, result)
        supervisor.check_alive()
        report["ok"] = result.error_code == 0
        if result.error_code != 0:
            report["error"] = f"goal ended with error {result.error_code}: {result.error_string}"
    except (BringupError, TimeoutError, RuntimeError) as exc:
        report["error"] = str(exc)
        _say(f"error: {exc}")
    finally:
        if client is not None:
            client.close()
        killed = supervisor.stop()
        dead = supervisor.dead()
        report["stopped"] = {"killed": killed, "died": [name for name, _ in dead]}
        if killed or dead:
            report["ok"] = False
            report.setdefault("error", f"processes did not stop cleanly: killed {killed}, died {dead}")
        report["wall_time_s"] = round(time.monotonic() - started, 2)
        report["log"] = str(log_path)
    how = "all exited on SIGINT" if not killed else "killed: " + ", ".join(killed)
    _say(f"stopped every process ({how}); "
         f"total {report['wall_time_s']:.1f} s")
    return report


def _print_figures(figures: TrackingFigures, result: Any) -> None:
    outcome = "SUCCESSFUL" if result.error_code == 0 else f"error {result.error_code}: {result.error_string}"
    print(f"tracking: goal {outcome}; {figures.samples} joint_states over {figures.duration_s:.2f} s; "
          f"all joints RMS {figures.rms_deg:.2f} deg, peak {figures.peak_deg:.2f} deg; measured lag "
          f"{figures.lag_s * 1e3:.0f} ms (RMS {figures.rms_lag_compensated_deg:.2f} deg once the lag is "
          "removed)",
          flush=True)
    print(f"  {'joint':24s} {'RMS [deg]':>10s} {'peak [deg]':>10s} {'final [deg]':>11s}")
    for joint in figures.joints:
        print(f"  {joint.joint:24s} {joint.rms_deg:10.2f} {joint.peak_deg:10.2f} {joint.final_deg:11.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m retarget.demo``; exit 0 only if every step worked."""
    parser = argparse.ArgumentParser(prog="python -m retarget.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--robot", default="drummer", help="robot name (default: drummer)")
    parser.add_argument("--motion", default="drummer/drumming", help="motion name or file")
    parser.add_argument("--no-plan", action="store_true", help="do not ask the planner; execute the input")
    parser.add_argument("--plan-timeout", type=float, default=120.0, help="longest wait for the planner [s]")
    parser.add_argument("--ready-timeout", type=float, default=60.0, help="longest wait for the bring-up [s]")
    parser.add_argument("--verbose", action="store_true", help="forward the nodes' output to stderr")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON line (the last line)")
    args = parser.parse_args(argv)
    from retarget.errors import RetargetError

    try:
        report = run(args)
    except KeyboardInterrupt:
        # run() has stopped every process on its way out.
        print("demo: interrupted", file=sys.stderr, flush=True)
        return 130
    except RetargetError as exc:
        report = {"ok": False, "robot": args.robot, "motion": args.motion, "error": str(exc)}
    if not report["ok"]:
        print(f"demo: FAILED: {report.get('error', 'unknown error')} (node logs: {report.get('log', '-')})",
              file=sys.stderr, flush=True)
    else:
        print("demo: OK", flush=True)
    if args.json:
        print(json.dumps(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
