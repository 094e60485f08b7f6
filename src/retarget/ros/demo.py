"""``make demo``: the drummer retargeted end to end — a reduced model, the planner, the emulated servo bus.

Steps, each reported on one line and none faked:

1. find the demo's reduced model of the robot (``--reduced FILE``, else the one an earlier demo trained, else the
   one shipped in :data:`SHIPPED_MODEL_DIR`, each checked against the robot's description: a stale one is
   skipped); without one, train it once (``retarget reduce`` in a child process: a full simulation of
   :data:`DEMO_TRAIN_DURATION_S` s of the training motion — the drummer's is ``boxer/boxing``, the paper's
   transfer experiment — on a coarse mesh, then mass-PCA and cubature; 5-8 minutes for the drummer on 2 cores)
   and keep it in ``<cache>/demo/`` for later demos;
2. bring up the robot's node set (:mod:`retarget.ros.bringup`, the same set as ``retarget up drummer``):
   emulated XM430-W210 bus, Dynamixel driver, trajectory server, planner (given the model file), mocap twin;
3. take the first :data:`DEMO_DURATION_S` s of ``drummer/drumming`` (``--duration``; the whole 10 s needs the
   planner's 15-minute windowed settings, docs/optimize.md) and ask the planner (Retarget action) for an optimized
   trajectory: it loads the model and compiles its kernels (``--prepare-timeout``), then plans
   :data:`DEMO_WINDOW_ITERATIONS` iteration of projected steepest descent (:data:`DEMO_METHOD`) per window
   (``--max-iterations``: the budget is a count of iterations, so a busy machine takes longer and gets the same
   plan; its wall-time budget, ``--plan-timeout``, is only a safety net), re-simulates the result at a finer step
   and in the shipped verification model (:data:`SHIPPED_VERIFY_DIR`: a finer mesh, trained independently); it
   reports the tracked bodies' peak deviation naive → optimized, and the demo whether the ratio in the verification
   model reaches :data:`DEMO_CUT`; NOT_AVAILABLE (``--no-train`` and no model, or the safety net ran out before a
   first result) makes the demo say so in one line and play the input animation instead;
4. move to the trajectory's first pose, then execute the trajectory (optimized or input) with
   FollowJointTrajectory, recording ``joint_states``;
5. print the tracking figures (per-joint RMS and peak error between the executed reference and the measured
   servo positions [deg], the goal's result) and stop every process.

Exit 0 only if every step worked and every process stopped cleanly. DDS stays on loopback
(``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``) in a random ``ROS_DOMAIN_ID`` unless those are set.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retarget.atomic import atomic_path
from retarget.cliargs import add_robot, resolve_legacy
from retarget.jsonsafe import JSONObject
from retarget.planning.checks import FinerStepCheck, StiffnessBand, Verification
from retarget.ros.futures import result_or_cancel, send_goal
from retarget.ros.goal import PREPARATION_STAGES, PlannerProgress, preparing  # noqa: F401 (re-exported)
from retarget.ros.player import (  # noqa: F401 (re-exported: JointTracking, LAG_GRID_S, ...)
    LAG_GRID_S,
    MOVE_TO_START_S,
    JointTracking,
    RobotClient,
    TrackingFigures,
    print_figures,
    trajectory_arrays,
    tracking_figures,
)
from retarget.sim.reduced.store import SHIPPED_DIR

if TYPE_CHECKING:
    from retarget_interfaces.action import Retarget
    from trajectory_msgs.msg import JointTrajectory

    from retarget.motion.motion import Motion
    from retarget.ros.bringup import Bringup, ChildExit, Supervisor

__all__ = ["DemoModel", "JointTracking", "TrackingFigures", "add_demo_arguments", "cut_verdict", "demo_command",
           "demo_model", "demo_model_path", "excerpt", "main", "tracking_figures", "window_count"]

#: How much of the motion the demo plans and executes by default [s]: the first 3 s of the drummer's drumming (the
#: whole 10 s needs the planner's 15-minute windowed settings, docs/optimize.md).
DEMO_DURATION_S = 3.0

#: The demo's plan budget: optimizer iterations per receding-horizon window (the Retarget goal's ``max_iterations``;
#: the drummer's planner cuts the 3 s into 5 windows of 1 s, 0.5 s apart: 10 iterations). A count, not a wall-clock
#: figure: a busy machine takes longer over it and gets the same plan. Measured on the shipped models with the
#: XM430-W210's loop modelled (docs/ros.md "make demo"): 1 per window reaches 0.349 x naive at peak in the
#: verification model (143 s demo), 2 reach 0.27 x (168 s), beside other jobs on 2 cores.
DEMO_WINDOW_ITERATIONS = 2

#: The demo planner's optimizer in each window, over the params file's (the drummer's: Levenberg–Marquardt, for its
#: 10 s plans): projected steepest descent, L-BFGS-B's first iteration with its line search on values alone (one
#: gradient per window). On the demo's 3 s with one iteration per window (docs/optimize.md "The optimizer") it
#: reaches 0.257 x naive in the verification model in 63 s of optimization, L-BFGS-B 0.259 x in 109 s (the same
#: run, bench/results/methods-drummer-drumming.json) and Levenberg–Marquardt 0.202 x in 139 s: all within the demo's
#: cut, and the demo's wall time is the tighter limit.
DEMO_METHOD = "descent"

#: The cut the demo's plan is to reach: optimized peak deviation of the tracked bodies at most this fraction of the
#: naive playback's, re-simulated in a model the plan was not optimized on (the shipped verification model, a finer
#: mesh trained on the demo's own motion). The demo reports whether it did.
DEMO_CUT = 0.35

#: Default plan timeout [s]: a safety net, not the budget. The planner's wall-time budget is 20 s less (it then
#: returns its best iterate, flagged budget-limited); the iteration budget ends the plan well before it, on an idle
#: machine and with other CPU-bound processes running alike (docs/ros.md "make demo").
DEMO_PLAN_TIMEOUT_S = 1500.0

#: Default longest wait [s] for the planner to load the model and compile its kernels (its time budget starts
#: after them): with an empty numba cache the drummer's take 144-232 s on a 2-core machine
#: (bench/results/warm-up-drummer-drumming.json; docs/ros.md "make demo").
DEMO_PREPARE_TIMEOUT_S = 900.0

#: The demo model's training motion per robot (the paper's transfer experiment: the drummer learns from boxing);
#: robots not listed train on the demo motion itself.
DEMO_TRAINING_MOTION: dict[str, str] = {"drummer": "boxer/boxing", "boxer": "boxer/boxing"}

#: Seconds of the training motion the demo model's full simulation covers, and its mesh scale (coarse: the
#: full simulation dominates the training time; the reduced model's cost does not depend on the mesh).
DEMO_TRAIN_DURATION_S = 2.0
DEMO_TRAIN_MESH_SCALE = 0.25

#: Demo models shipped with retarget (``retarget/data/demo/``, named as :func:`demo_model_path` names them): the
#: drummer's, so that a first demo need not train it (5-8 min on 2 cores). Checked against the robot's description
#: like a cached one; a stale one is retrained into the cache. ``retarget/data/demo/README.md`` has the command
#: that rebuilds it.
SHIPPED_MODEL_DIR = SHIPPED_DIR

#: Verification models shipped for the demo (``<SHIPPED_MODEL_DIR>/verify/<robot>-*.npz``): trained independently of
#: the planning model, on a finer mesh and on the demo's segment of the motion itself; the planner re-simulates
#: naive, ZVD and optimized in one, and the demo's cut is judged there.
SHIPPED_VERIFY_DIR = SHIPPED_MODEL_DIR / "verify"


class _Client(RobotClient):
    """The demo's rclpy node: the trajectory server's and the planner's action clients, a joint_states recorder."""

    def __init__(self, plan: Bringup) -> None:
        # joint_states are recorded from the execution on: while the planner plans, receiving them would take a
        # seventh of a core from it.
        super().__init__(plan.joint_names, plan.joint_states_topic, plan.follow_joint_trajectory_action,
                         plan.retarget_action, node_name="retarget_demo", record=False)

    def plan_trajectory(self, robot: str, animation: JointTrajectory, timeout: float,
                        feedback: Callable[[Retarget.Feedback], None] | None = None,
                        prepare_timeout: float = DEMO_PREPARE_TIMEOUT_S,
                        max_iterations: int = DEMO_WINDOW_ITERATIONS
                        ) -> tuple[int | None, Retarget.Result | None, str]:
        """Ask the planner for at most ``max_iterations`` optimizer iterations (per window when it plans in windows);
        returns (error_code or None on timeout, result or None, text). ``feedback`` gets each feedback message (on
        the executor's thread).

        The planner loads the model and compiles its kernels before its time budget starts (minutes after an
        install or update, seconds after): the wait for the result is ``timeout`` from the first feedback after
        those stages (:data:`PREPARATION_STAGES`), and at most ``prepare_timeout`` for them.
        """
        from retarget_interfaces.action import Retarget

        goal = Retarget.Goal(robot=robot, animation=animation, execute=False, deviation_weight=-1.0,
                             acceleration_weight=-1.0, max_iterations=int(max_iterations))
        budget_began: list[float] = []

        def on_feedback(msg: Retarget.Impl.FeedbackMessage) -> None:
            if not budget_began and not preparing(msg.feedback.stage):
                budget_began.append(time.monotonic())
            if feedback is not None:
                feedback(msg.feedback)

        handle = send_goal(self.retarget, goal, 10.0, "no planner goal response", feedback_callback=on_feedback,
                           warn=lambda text: print(f"demo: warning: {text}", file=sys.stderr, flush=True))
        if not handle.accepted:
            return Retarget.Result.FAILED, None, "the planner rejected the goal"
        accepted = time.monotonic()

        def check_deadlines() -> None:
            now = time.monotonic()
            if not budget_began and now - accepted > prepare_timeout:
                raise TimeoutError(f"the planner did not start planning within {prepare_timeout:g} s (loading "
                                   "the model, compiling its kernels)")
            if budget_began and now - budget_began[0] > timeout:
                raise TimeoutError(f"no planner result within {timeout:g} s of the start of its budget")

        try:
            response = result_or_cancel(handle, math.inf, "no planner result", tick=check_deadlines)
        except TimeoutError as exc:
            return None, None, str(exc)
        result = response.result
        return result.error_code, result, result.error_string


def window_count(duration: float, dt: float, window: float, overlap: float) -> int:
    """How many receding-horizon windows the planner cuts a ``duration`` [s] plan into at step ``dt`` (the spans of
    :func:`retarget.optimize.windows.optimize_windows`: ``window`` long, a new one every ``window - overlap``);
    1 without windows (``window`` not positive)."""
    if not window > 0.0:
        return 1
    n = max(1, round(duration / dt))
    span = max(1, round(window / dt))
    stride = max(1, span - round(overlap / dt))
    count, start = 1, 0
    while min(start + span, n) < n:
        start += stride
        count += 1
    return count


def _isolate_dds() -> tuple[str, str]:
    """Loopback discovery and a random domain (unless set), for this process and the children it starts."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    # Domains 1..101 keep the ports of every participant below the ephemeral range on Linux.
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 101)))
    return os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"], os.environ["ROS_DOMAIN_ID"]


def excerpt(motion: Motion, seconds: float | None) -> Motion:
    """The first ``seconds`` of ``motion`` (the end sample interpolated); the motion itself when ``seconds`` is
    None, not positive, or not shorter than it."""
    from retarget.motion.motion import Motion

    if seconds is None or seconds <= 0 or seconds >= motion.duration:
        return motion
    end = float(motion.time[0]) + float(seconds)
    keep = motion.time < end - 1e-9
    times = np.append(motion.time[keep], end)
    positions = np.vstack([motion.positions[keep], motion.sample(end)[None, :]])
    return Motion(times, motion.joint_names, positions)


@dataclass(frozen=True)
class DemoModel:
    """The reduced model the demo's planner uses.

    Attributes:
        path: The artifact (``.npz`` of ``retarget reduce``).
        source: ``given`` (``--reduced``), ``cached`` (an earlier demo's), ``shipped`` (in
            :data:`SHIPPED_MODEL_DIR`) or ``trained`` (now).
        train_s: Wall time of the training [s] (0 unless trained now).
    """

    path: Path
    source: str
    train_s: float = 0.0


def demo_model_path(robot: str, train_motion: str, mesh_scale: float, duration: float) -> Path:
    """Where the demo keeps its model: ``<cache>/demo/<robot>-<motion>-mesh<scale>-<duration>s.npz`` (``<cache>``:
    ``$RETARGET_CACHE`` or ``~/.cache/retarget``; not a folder the planner searches by itself)."""
    from retarget.planning.model import cache_dir

    def safe(text: str) -> str:  # names or paths -> one file-name component
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "_"

    return cache_dir().parent / "demo" / f"{safe(robot)}-{safe(train_motion)}-mesh{mesh_scale:g}-{duration:g}s.npz"


def demo_model(robot: str, train_motion: str, *, mesh_scale: float, duration: float, given: str | None = None,
               train: bool = True, quiet: bool = False, shipped: Path | None = SHIPPED_MODEL_DIR) -> DemoModel | None:
    """The demo's reduced model: ``given``, else an earlier demo's, else the one shipped in ``shipped`` (each if it
    still matches the robot), else trained now with ``retarget reduce`` in a child process (unless ``train`` is
    false: None).

    The child writes a file of the final name in a hidden folder beside it (:func:`retarget.atomic.atomic_path`),
    renamed into place only when it succeeded: an interrupted or failed training leaves nothing behind.

    Raises:
        RetargetError: ``given`` is stale or unreadable, or the training failed (its last output in the message).
    """
    from retarget.errors import InputError
    from retarget.planning.model import load_artifact
    from retarget.sim.reduced.errors import ReducedModelError

    if given:
        load_artifact(robot, Path(given).expanduser())  # a stale or foreign model is the user's error: say so now
        return DemoModel(Path(given).expanduser().resolve(), "given")
    path = demo_model_path(robot, train_motion, mesh_scale, duration)
    reasons: list[str] = []
    for candidate, source in ((path, "cached"), (None if shipped is None else shipped / path.name, "shipped")):
        if candidate is None or not candidate.is_file():
            continue
        try:
            load_artifact(robot, candidate)
            return DemoModel(candidate, source)
        except (ReducedModelError, InputError) as exc:
            reasons.append(f"the one in {candidate} no longer matches the robot: {exc}")
    reason = "; ".join(reasons) or "none yet"
    if not train:
        _say(f"no demo model of {robot} ({reason}) and --no-train: the planner will look for one itself")
        return None
    _say(f"no demo model of {robot} ({reason}): training it once — a full simulation of {duration:g} s of "
         f"{train_motion} on a coarse mesh (scale {mesh_scale:g}), then mass-PCA and cubature checked by replay "
         f"(the drummer: 5-8 min on 2 cores); later demos reuse {path}")
    with atomic_path(path) as partial:
        command = [sys.executable, "-m", "retarget.cli", "reduce", robot, "--train-motion", train_motion,
                   "--mesh-scale", f"{mesh_scale:g}", "--duration", f"{duration:g}", "--out", str(partial)]
        elapsed = _run_child(command, f"training the demo model (command: {' '.join(command[1:])})", quiet)
    _say(f"trained the demo model in {elapsed:.0f} s: {path}")
    return DemoModel(path, "trained", elapsed)


def demo_verification_model(robot: str, folder: Path | None = SHIPPED_MODEL_DIR) -> tuple[Path | None, str]:
    """The newest verification model of ``robot`` in ``folder``'s ``verify/`` that still matches the robot, and why
    none did ("" when one did)."""
    from retarget.planning.model import load_artifact
    from retarget.sim.reduced.store import VERIFY_SUBDIR, find_artifact, verification_candidates

    def checked(name: str, candidate: Path) -> Path:
        load_artifact(name, candidate)  # raises for a stale or foreign file: find_artifact skips it
        return candidate

    if folder is None:
        return None, "no folder"
    path, skipped = find_artifact(robot, robot, verification_candidates(robot, [folder]), checked)
    return path, "" if path is not None else ("; ".join(skipped) or f"none of {robot} in {folder / VERIFY_SUBDIR}")


def _run_child(command: list[str], what: str, quiet: bool) -> float:
    """Run a child process (its stderr — progress bars — shown unless ``quiet``); returns its wall time [s].

    BLAS and OpenMP stay single-threaded in it (numba's own threads do the parallel work; on 2 cores
    oversubscription costs 10-40x).

    Raises:
        RetargetError: it failed; the message ends with its last output lines.
    """
    from retarget.errors import RetargetError

    env = os.environ.copy()
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        env.setdefault(name, "1")
    started = time.monotonic()
    proc = subprocess.run(command, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE if quiet else None)
    if proc.returncode != 0:
        tail = "\n".join(((proc.stdout or "") + (proc.stderr or "")).strip().splitlines()[-5:])
        raise RetargetError(f"{what} failed (exit {proc.returncode}){': ' + tail if tail else ''}")
    return time.monotonic() - started


def _say(text: str) -> None:
    print(f"demo: {text}", flush=True)


def run(args: argparse.Namespace) -> dict[str, object]:
    """The demo's steps; returns the report (``ok`` tells whether everything worked)."""
    from retarget.info import components
    from retarget.motion import load_motion
    from retarget.ros.motion_convert import to_joint_trajectory_msg
    from retarget.ros.bringup import BringupError, Supervisor

    report: dict[str, object] = {"ok": False, "robot": args.robot, "motion": args.motion}
    started = time.monotonic()
    missing = [name for name in ("rclpy", "control_msgs", "retarget_interfaces") if not components()[name]]
    if missing:
        report["error"] = f"set-up incomplete, missing {', '.join(missing)} (run `make setup`)"
        return report
    discovery, domain = _isolate_dds()
    report.update(discovery=discovery, domain_id=int(domain))
    motion = load_motion(args.motion)
    whole = motion.duration
    motion = excerpt(motion, args.duration)
    model = None if args.no_plan else _find_model(args, report)
    # The iterations end the plan; the time budget is a safety net that stops the planner (with its best iterate so
    # far) before the demo stops waiting.
    budget = max(args.plan_timeout - 20.0, 10.0)
    plan = _describe(args, model, budget)
    if list(motion.joint_names) != list(plan.joint_names):
        motion = motion.reorder(list(plan.joint_names))
    windows = _planned_windows(plan, motion.duration)
    log_path = Path(tempfile.gettempdir()) / f"retarget-demo-{os.getpid()}.log"
    sink = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else (lambda line: None)
    part = f"its first {motion.duration:.2f} s of {whole:.2f}" if motion.duration < whole else f"{whole:.2f} s"
    _say(f"{plan.robot}: {len(plan.joint_names)} joints; motion {args.motion} ({part}, "
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
            planned = _plan(client, plan, animation, args, windows=windows, budget=budget, report=report)
            if planned is None:
                return report
            trajectory, source = planned
        else:
            _say("planner skipped (--no-plan): executing the INPUT animation")
        if not _execute(client, plan, supervisor, trajectory, source, args, report):
            return report
    except (BringupError, TimeoutError, RuntimeError) as exc:
        report["error"] = str(exc)
        _say(f"error: {exc}")
    finally:
        if client is not None:
            client.close()
        unclean = _stop(supervisor, report, started, log_path)
    for exit_ in unclean:
        _say(f"{exit_.describe()}" + (f"; its stacks:\n{exit_.stacks}" if exit_.stacks else ""))
    how = "all exited on SIGINT" if not unclean else "not cleanly: " + ", ".join(e.name for e in unclean)
    _say(f"stopped every process ({how}); "
         f"total {report['wall_time_s']:.1f} s")
    return report


def _find_model(args: argparse.Namespace, report: dict[str, object]) -> DemoModel | None:
    """The demo's reduced model (:func:`demo_model` with the demo's options), recorded in ``report["model"]``."""
    train_motion = args.train_motion or DEMO_TRAINING_MOTION.get(args.robot, args.motion)
    model = demo_model(args.robot, train_motion, mesh_scale=args.train_mesh_scale,
                       duration=args.train_duration, given=args.reduced, train=not args.no_train,
                       quiet=args.no_progress, shipped=None if args.no_shipped_model else SHIPPED_MODEL_DIR)
    if model is not None:
        report["model"] = {"file": str(model.path), "source": model.source, "train_s": round(model.train_s, 1)}
        if model.source != "trained":
            _say(f"reduced model ({model.source}): {model.path}")
    return model


def _describe(args: argparse.Namespace, model: DemoModel | None, budget: float) -> Bringup:
    """The demo's node set: the robot's, its planner given ``model``, the verification model and a time ``budget``
    [s]."""
    from retarget.ros.bringup import describe

    verify_model = args.verify_model
    if verify_model is None and not args.no_plan:
        shipped, why = demo_verification_model(args.robot)
        verify_model = None if shipped is None else str(shipped)
        _say(f"verification model (shipped): {shipped}" if shipped is not None else
             f"no shipped verification model ({why}): the planner verifies where its settings say (auto)")
    # Without a model of its own the planner looks for one itself: --no-train and --no-shipped-model hold for it too.
    planner_parameters = {"allow_training": not args.no_train, "shipped_model": not args.no_shipped_model}
    return describe(args.robot, mocap="twin", planner=True, plan_time_budget=budget,
                    reduced=None if model is None else model.path, verify_model=verify_model, plan_method=DEMO_METHOD,
                    planner_parameters=planner_parameters)


def _plan(client: _Client, plan: Bringup, animation: JointTrajectory, args: argparse.Namespace, *, windows: int,
          budget: float, report: dict[str, object]) -> tuple[JointTrajectory, str] | None:
    """Ask the planner for the optimized trajectory; returns the trajectory to execute and what it is (the input
    ``animation`` when the planner answers NOT_AVAILABLE), or None when the planner failed (``report["error"]``).
    The planner's answer goes to ``report["planner"]``.

    Raises:
        BringupError: The planner's action is not visible.
        TimeoutError: No answer from the planner in time.
    """
    from retarget_interfaces.action import Retarget

    from retarget.ros.bringup import BringupError

    assert client.retarget is not None
    if not client.retarget.wait_for_server(timeout_sec=10.0):
        raise BringupError("the planner's action is not visible to the demo client")
    t0 = time.monotonic()
    per_window = args.max_iterations
    what = f"{per_window} iteration{'s' if per_window != 1 else ''} of {DEMO_METHOD}"
    what += f" in each of its {windows} windows" if windows > 1 else ""
    _say(f"asking the planner for an optimized trajectory: it loads the model and compiles its kernels "
         f"(up to 5 min after an install or update, seconds after), then plans {what} (safety net: "
         f"{budget:.0f} s) and verifies the plan")
    with PlannerProgress(per_window, windows, disable=args.no_progress) as shown:
        code, result, text = client.plan_trajectory(plan.robot, animation, args.plan_timeout, shown,
                                                    prepare_timeout=args.prepare_timeout,
                                                    max_iterations=per_window)
    planner: dict[str, object] = {"error_code": code, "error_string": text, "wall_time_s": time.monotonic() - t0,
                                  "max_iterations_per_window": per_window, "windows": windows,
                                  "time_budget_s": budget}
    report["planner"] = planner
    if shown.began is not None:
        planner["prepare_s"] = round(shown.began, 1)
        _say(f"planner: model loaded and kernels compiled in {shown.began:.0f} s")
    if code == Retarget.Result.SUCCESSFUL and result is not None and not result.optimized.points:
        report["error"] = f"planner answered without a trajectory ({text or 'no reason given'})"
        _say(report["error"])
        return None
    if code == Retarget.Result.SUCCESSFUL and result is not None:
        _report_optimized(result, shown.began, planner, wall_time_s=float(planner["wall_time_s"]))
        return result.optimized, "optimized trajectory"
    if code == Retarget.Result.NOT_AVAILABLE:
        _say(f"planner answered NOT_AVAILABLE ({text}): executing the INPUT animation, not an "
             "optimized trajectory")
        return animation, "input animation"
    report["error"] = f"planner failed ({code}): {text}"
    _say(f"planner failed ({code}): {text}")
    return None


def _report_optimized(result: Retarget.Result, began: float | None, planner: dict[str, object], *,
                      wall_time_s: float) -> None:
    """Add a successful plan's figures and checks (read back from the result's JSON) to ``planner`` (the report's
    ``planner`` entry) and say them; ``began``: when the planner's preparation ended [s] (None: not seen);
    ``wall_time_s``: the plan's wall time [s]."""
    planner.update(iterations=result.iterations, naive_peak_deviation_m=result.naive_peak_deviation,
                   optimized_peak_deviation_m=result.optimized_peak_deviation)
    metrics = json.loads(result.metrics_json or "{}")
    limited = bool(metrics.get("budget_limited", False))
    planner.update(budget_limited=limited, naive_rms_deviation_m=result.naive_rms_deviation,
                   optimized_rms_deviation_m=result.optimized_rms_deviation)
    servos = metrics.get("servos") or {}
    if servos:
        planner["servos"] = servo_line(servos)
        _say(f"planner: planned for {planner['servos']}")
    if metrics.get("assumptions"):
        planner["assumptions"] = list(metrics["assumptions"])
        _say("planner: what the plan assumes of the hardware (not modelled):\n"
             + "\n".join(f"  - {line}" for line in planner["assumptions"]))
    verify = FinerStepCheck.from_json(metrics["verify"]) if metrics.get("verify") else None
    checked = ""
    if verify is not None:
        planner["verify"] = {"dt_s": verify.dt_s, "peak_ratio": verify.peak_ratio, "holds": verify.holds}
        checked = (f"; re-simulated at {verify.dt_s * 1e3:g} ms: {verify.peak_ratio:.2f} x naive"
                   f"{'' if verify.holds else ' (the improvement does NOT hold)'}")
    band = StiffnessBand.from_json(metrics.get("band"))
    if band.worst_peak_ratio is not None:  # the plan re-simulated with the parts' stiffness scaled
        planner["band_worst_peak_ratio"] = band.worst_peak_ratio
        factors = ", ".join(f"{f:g}" for f in band.factors)
        checked += f"; stiffness x {factors}: at worst {band.worst_peak_ratio:.2f} x naive"
    if began is not None:  # the optimization and the checks after it
        planner["after_preparation_s"] = round(wall_time_s - began, 1)
    stages = {**(metrics.get("timings_s") or {}), **(metrics.get("check_timings_s") or {})}
    planner["stages_s"] = {k: round(float(v), 1) for k, v in stages.items()}
    _say(f"planner: optimized in {result.iterations} iterations"
         f"{' (stopped by its time budget: best iterate so far)' if limited else ''}; "
         "tracked-body deviation, peak "
         f"{result.naive_peak_deviation * 100:.1f} cm naive -> "
         f"{result.optimized_peak_deviation * 100:.1f} cm optimized, RMS "
         f"{result.naive_rms_deviation * 100:.2f} -> {result.optimized_rms_deviation * 100:.2f} cm"
         f"{checked}")
    verified = Verification.from_json(metrics["verified"]) if metrics.get("verified") else None
    if verified is not None and verified.naive and verified.optimized and verified.peak_ratio is not None:
        planner["verified"] = {"model": verified.model, "peak_ratio": verified.peak_ratio,
                               "naive_peak_deviation_m": verified.naive.peak_deviation_m,
                               "optimized_peak_deviation_m": verified.optimized.peak_deviation_m}
        _say(f"planner: verified in the {verified.described}: peak "
             f"{verified.naive.peak_deviation_m * 100:.1f} cm naive -> "
             f"{verified.optimized.peak_deviation_m * 100:.1f} cm optimized "
             f"({verified.peak_ratio:.2f} x)")
    cut = cut_verdict(verified, DEMO_CUT)
    planner["cut"] = cut
    _say(cut["verdict"])


def _execute(client: _Client, plan: Bringup, supervisor: Supervisor, trajectory: JointTrajectory, source: str,
             args: argparse.Namespace, report: dict[str, object]) -> bool:
    """Move to the trajectory's first pose, execute it recording joint_states, and report how the servos followed;
    False when the move to the first pose failed (``report["error"]``).

    Raises:
        BringupError: No joint_states of the robot, or a process died.
    """
    from retarget.ros.bringup import BringupError

    report["executed"] = source
    times, positions = trajectory_arrays(trajectory)
    if not client.record(wait=10.0):
        raise BringupError(f"no joint_states of the robot on {plan.joint_states_topic} within 10 s")
    current = client.recorder.latest()
    result = client.move_to(positions[0], MOVE_TO_START_S)
    report["move_to_start"] = {"error_code": result.error_code, "error_string": result.error_string}
    if result.error_code != 0:
        report["error"] = f"move to the first pose failed ({result.error_code}): {result.error_string}"
        return False
    _say(f"moved to the first pose in {MOVE_TO_START_S:.1f} s (largest joint move "
         f"{np.degrees(np.max(np.abs(positions[0] - current))) if current is not None else 0.0:.1f} deg)")
    duration = float(times[-1])
    _say(f"executing the {source} ({duration:.2f} s, {len(times)} points) with FollowJointTrajectory")
    result, start = client.play(trajectory, show_progress=not args.no_progress)
    report["goal"] = {"error_code": result.error_code, "error_string": result.error_string}
    sample_time, sample_positions = client.recorder.arrays()
    figures = tracking_figures(plan.joint_names, times + start, positions, sample_time, sample_positions)
    report["tracking"] = figures.as_dict()
    print_figures(figures, result)
    supervisor.check_alive()
    report["ok"] = result.error_code == 0
    if result.error_code != 0:
        report["error"] = f"goal ended with error {result.error_code}: {result.error_string}"
    return True


def _stop(supervisor: Supervisor, report: dict[str, object], started: float, log_path: Path) -> list[ChildExit]:
    """Stop every process and report how they stopped (``report["stopped"]``, ``ok`` false unless cleanly), the
    wall time since ``started`` and the log; returns the unclean exits."""
    killed = supervisor.stop()
    dead = supervisor.dead()
    # A process that had to be killed, that its stop watchdog ended, that exited non-zero or printed a
    # traceback is a bug: reported by name, with the stacks it printed while stopping.
    unclean = supervisor.unclean_exits()
    report["stopped"] = {"killed": killed, "died": [name for name, _ in dead],
                         "unclean": [e.describe() for e in unclean],
                         "stacks": {e.name: e.stacks for e in unclean if e.stacks}}
    if killed or dead or unclean:
        report["ok"] = False
        report.setdefault("error", "processes did not stop cleanly: " + "; ".join(
            [e.describe() for e in unclean] or [f"killed {killed}, died {dead}"]))
    report["wall_time_s"] = round(time.monotonic() - started, 2)
    report["log"] = str(log_path)
    return unclean


def _planned_windows(plan: Bringup, duration: float) -> int:
    """How many windows the bring-up's planner cuts a ``duration`` [s] plan into (its ``dt``, ``window`` and
    ``window_overlap`` parameters; 1 without a planner or windows)."""
    from retarget.planning.options import PlanOptions

    spec = next((node for node in plan.nodes if node.name == "planner"), None)
    if spec is None:
        return 1
    params = spec.parameters
    dt = float(params.get("dt") or 0.0) or PlanOptions().dt
    return window_count(duration, dt, float(params.get("window") or 0.0), float(params.get("window_overlap") or 0.0))


def cut_verdict(verified: Verification | None, cut: float = DEMO_CUT) -> dict[str, object]:
    """Whether the plan reached ``cut``: its optimized peak deviation over the naive one, re-simulated in a model it
    was not optimized on (the planner's ``verified``), at most ``cut``. A plan not verified in another model has not
    reached it."""
    ratio = None if verified is None else verified.peak_ratio
    if ratio is None:
        return {"limit": cut, "peak_ratio": None, "reached": False,
                "verdict": f"the demo's cut ({cut:g} x naive at peak) is NOT verified: the planner did not "
                           "re-simulate the plan in a model it was not optimized on (no verification model)"}
    reached = bool(float(ratio) <= cut)
    where = f"in {verified.model}" if verified is not None else "in the verification model"
    return {"limit": cut, "peak_ratio": float(ratio), "reached": reached,
            "verdict": (f"the plan reaches the demo's cut: peak {float(ratio):.2f} x naive <= {cut:g} x ({where})"
                        if reached else f"the plan does NOT reach the demo's cut: peak {float(ratio):.2f} x naive > "
                        f"{cut:g} x ({where})")}


def servo_line(servos: JSONObject) -> str:
    """One line naming the servo model(s) a plan was made for (its report's ``servos``), the assumption of an ideal
    servo where there is one."""
    kinds: dict[str, list[str]] = {}
    for name, m in (servos.get("motors") or {}).items():
        label = ("ideal servo" if m.get("model") == "ideal"
                 else f"{m.get('model')} at kp {float(m.get('kp', 0.0)):.3g} N m/rad")
        kinds.setdefault(label, []).append(name)
    parts = [f"{label} ({len(names)} motors)" if len(names) > 2 else f"{label} ({', '.join(names)})"
             for label, names in kinds.items()]
    line = "; ".join(parts) or "no servo information"
    return line + (f" — assumption: {servos['assumption']}" if servos.get("assumption") else "")


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (``retarget demo`` and ``python -m retarget.ros.demo`` take the same)."""
    add_robot(parser, "robot name", default="drummer")
    parser.add_argument("--motion", default="drummer/drumming", help="motion name or file (default: drummer/drumming)")
    parser.add_argument("--duration", type=float, default=DEMO_DURATION_S,
                        help=f"plan and execute the motion's first S seconds; 0: all of it (default "
                             f"{DEMO_DURATION_S:g}; the drummer's whole 10 s is 19 planner windows)")
    parser.add_argument("--no-plan", action="store_true", help="do not ask the planner; execute the input")
    parser.add_argument("--max-iterations", type=int, default=DEMO_WINDOW_ITERATIONS,
                        help=f"the plan's budget: optimizer ({DEMO_METHOD}) iterations per planner window (the "
                             f"drummer's 3 s: 5 windows; default {DEMO_WINDOW_ITERATIONS})")
    parser.add_argument("--plan-timeout", type=float, default=DEMO_PLAN_TIMEOUT_S,
                        help=f"safety net: longest wait for the planner once its preparation ended [s]; its time "
                             f"budget is 20 s less, after which it returns its best iterate (default "
                             f"{DEMO_PLAN_TIMEOUT_S:g})")
    parser.add_argument("--prepare-timeout", type=float, default=DEMO_PREPARE_TIMEOUT_S,
                        help=f"longest wait for the planner to load the model and compile its kernels before its "
                             f"budget begins [s] (default {DEMO_PREPARE_TIMEOUT_S:g})")
    parser.add_argument("--verify-model", default=None, metavar="FILE|auto|full|none",
                        help="the model the plan is verified in (default: the shipped verification model)")
    parser.add_argument("--reduced", default=None, metavar="FILE",
                        help="plan on this reduced model (`retarget reduce` .npz) instead of the demo's own")
    parser.add_argument("--no-train", action="store_true",
                        help="do not train the demo's model when there is none (the planner then answers "
                             "NOT_AVAILABLE unless it finds a model itself, and the input is executed)")
    parser.add_argument("--no-shipped-model", action="store_true",
                        help="ignore the demo model shipped with retarget (retarget/data/demo/): use the cached one "
                             "or train one")
    parser.add_argument("--train-motion", default=None,
                        help="training motion of the demo's model (default: boxer/boxing for the drummer and the "
                             "boxer, else --motion)")
    parser.add_argument("--train-duration", type=float, default=DEMO_TRAIN_DURATION_S,
                        help=f"seconds of the training motion simulated in full (default {DEMO_TRAIN_DURATION_S:g})")
    parser.add_argument("--train-mesh-scale", type=float, default=DEMO_TRAIN_MESH_SCALE,
                        help=f"mesh scale of the training simulation (default {DEMO_TRAIN_MESH_SCALE:g})")
    parser.add_argument("--ready-timeout", type=float, default=60.0, help="longest wait for the bring-up [s]")
    parser.add_argument("--verbose", action="store_true", help="forward the nodes' output to stderr")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON line (the last line)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m retarget.ros.demo`` (the same as ``retarget demo``); exit 0 only if every step worked."""
    parser = argparse.ArgumentParser(prog="python -m retarget.ros.demo", description=__doc__.split("\n\n")[0])
    add_demo_arguments(parser)
    return demo_command(parser.parse_args(argv))


def demo_command(args: argparse.Namespace) -> int:
    """Run the demo for parsed options; exit 0 only if every step worked, 2 for an option out of range."""
    from retarget.errors import RetargetError

    try:
        resolve_legacy(args)  # --robot R: the robot first now
    except RetargetError as exc:
        print(f"demo: error: {exc}", file=sys.stderr, flush=True)
        return 2
    for name in ("max_iterations", "plan_timeout", "prepare_timeout", "train_duration", "train_mesh_scale"):
        if not getattr(args, name) > 0:
            print(f"demo: error: --{name.replace('_', '-')} must be positive", file=sys.stderr, flush=True)
            return 2

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
