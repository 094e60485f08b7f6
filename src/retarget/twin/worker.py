"""The twin's simulation process: servo commands in on stdin, simulated bodies and shafts out on the channel.

``python -m retarget.twin.worker ROBOT --channel PATH [--reduced FILE] [--dt S] [--max-lag S] [--perturb K=V,...]``
is started by the
emulated servo bus (:class:`retarget.twin.servo.SimulationDrivenServos`). It runs in its own process, not a
thread of the emulator, because the compiled engine holds the GIL for a whole step (numba kernels without
``nogil``; a drummer step takes ~20 ms): in a thread it would delay the bus's replies to the driver.

Input: fixed-size binary records on stdin (:func:`pack_command`), ``<d`` time [s] then, per motor in the model's
motor order and joint space, the goal [rad], its rate [rad/s], Torque Enable (0/1), Position P, I, D Gain and PWM
Limit (control table units); records are smaller than ``PIPE_BUF`` (up to 73 motors), so each write is atomic. A
first record with a negative time ``−T`` gives the wall-clock time ``T`` [s since the epoch] of motor time 0, so
the poses can be stamped with the instant they belong to. End of input (the emulator exited) ends the worker.
Output: every step's body poses and shafts (:meth:`TwinSimulation.shafts`) on a :class:`PoseRingWriter`, which
the emulated bus reads back as its servos' state; log lines on stderr (``twin: ...``), including the real-time
factor and lag every ``--report`` seconds. Exit codes: 0 on end of input or SIGINT/SIGTERM, 2 when no usable
reduced model (the line says why: none found, or one trained without the robot's servos in the loop).
"""
from __future__ import annotations

import argparse
import os
import select
import signal
import struct
import sys
import time
from collections.abc import Sequence

import numpy as np

from retarget.twin.simulation import ServoSettings

__all__ = ["main", "pack_command", "pack_epoch", "record_size", "unpack_command"]

#: Doubles per motor in a record: goal, goal rate, Torque Enable, P, I, D Gain, PWM Limit.
_PER_MOTOR = 7


def record_size(n_motors: int) -> int:
    """Bytes of one input record."""
    return 8 * (1 + _PER_MOTOR * n_motors)


def pack_command(t: float, goal: np.ndarray, goal_rate: np.ndarray, settings: ServoSettings) -> bytes:
    """One input record: time [s], goals [rad] ``(m,)``, their rates [rad/s] ``(m,)`` and the servo settings."""
    m = len(goal)
    values = np.concatenate([[t], goal, goal_rate, np.asarray(settings.torque_on, dtype=float),
                             np.asarray(settings.gains, dtype=float).T.reshape(-1), settings.pwm_limit])
    return struct.pack(f"<{1 + _PER_MOTOR * m}d", *values)


def pack_epoch(wall_time: float, n_motors: int) -> bytes:
    """The first record: the wall-clock time [s since the epoch] of motor time 0 (as a negative time)."""
    return struct.pack(f"<{1 + _PER_MOTOR * n_motors}d", -wall_time, *np.zeros(_PER_MOTOR * n_motors))


def unpack_command(record: bytes | memoryview, n_motors: int,
                   offset: int = 0) -> tuple[float, np.ndarray, np.ndarray, ServoSettings]:
    """The inverse of :func:`pack_command`: ``(t, goal, goal_rate, settings)``."""
    m = n_motors
    vals = np.frombuffer(record, dtype="<f8", count=1 + _PER_MOTOR * m, offset=offset)
    gains = vals[1 + 3 * m : 1 + 6 * m].reshape(3, m).T.copy()
    settings = ServoSettings(vals[1 + 2 * m : 1 + 3 * m] > 0.5, gains, vals[1 + 6 * m : 1 + 7 * m].copy())
    return float(vals[0]), vals[1 : 1 + m].copy(), vals[1 + m : 1 + 2 * m].copy(), settings


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Load the model, then step the simulation as motor samples arrive until end of input or a signal."""
    from retarget.errors import RetargetError
    from retarget.twin.channel import PoseRingWriter
    from retarget.twin.model import find_reduced_model, load_twin_model
    from retarget.twin.perturbation import parse_perturbation
    from retarget.twin.simulation import TwinSimulation

    stop: list[int] = []
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, _f: stop.append(signum))
    started = time.perf_counter()
    try:
        source = find_reduced_model(args.robot, args.reduced)
        model = load_twin_model(args.robot, source, args.mesh_scale)
        perturbation = parse_perturbation(args.perturb or "")
        sim = TwinSimulation(model, dt=args.dt, max_lag_s=args.max_lag, log=_log, perturbation=perturbation)
        sim.warm_up()  # before the channel exists: meanwhile the bus's own servo loops report
    except RetargetError as exc:
        _log(f"twin: cannot run the reduced simulation: {exc}; the emulated servos run their own loops, no "
             "simulated mocap poses")
        return 2
    m = len(model.motors)
    size = record_size(m)
    _log(f"twin: reduced model {source.describe()}, modes {model.info.get('modes')}, cubature elements "
         f"{model.info.get('cubature_elements')}, dt {sim.dt * 1e3:g} ms, bodies {list(model.bodies)} -> "
         f"{args.channel} (loaded in {time.perf_counter() - started:.1f} s)"
         + ("" if perturbation.is_identity else f"; perturbed: {perturbation.to_text()}"))
    writer = PoseRingWriter(args.channel, list(model.bodies), list(model.motors))
    fd = sys.stdin.buffer.fileno()
    os.set_blocking(fd, False)
    buffer = b""
    wall0 = time.time() - time.monotonic()
    epoch: float | None = None  # wall-clock time of motor time 0 (sent by the emulator as the first record)
    last_report = time.monotonic()
    report_steps, report_wall = 0, 0.0
    eof = False
    code = 0

    def publish(t: float, poses: np.ndarray, shafts: np.ndarray) -> None:
        writer.write(t, (epoch or wall0) + t, poses, sim.lag_s, shafts)

    # What the bus sent while the model loaded is stale: the oldest records, as many as the pipe held (the bus
    # dropped the rest). Keep the epoch and start on the first record that comes after.
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if chunk == b"":
            eof = True
            break
        buffer += chunk
        n = len(buffer) // size
        for k in range(n):
            t = struct.unpack_from("<d", buffer, k * size)[0]
            if epoch is None and t < 0:
                epoch = -t
        buffer = buffer[n * size :]

    try:
        while not stop and not eof:
            ready, _, _ = select.select([fd], [], [], 0.0 if sim.started and sim.lag_s >= sim.dt else sim.dt)
            if ready:
                try:
                    chunk = os.read(fd, 1 << 16)
                    eof = chunk == b""
                except BlockingIOError:
                    chunk = b""
                buffer += chunk
                n = len(buffer) // size
                for k in range(n):
                    t, goal, rate, settings = unpack_command(buffer, m, k * size)
                    if epoch is None and t < 0:  # header record: -epoch
                        epoch = -t
                        continue
                    sim.push(t, goal, rate, settings)
                buffer = buffer[n * size :]
            if not sim.started and len(sim.history):
                sim.start()
                publish(sim.time, sim.poses(), sim.shafts())
                _log(f"twin: simulation started at t = {sim.time:.3f} s (quasi-static, the servos holding their "
                     "goals)")
            before = sim.stats.step_wall_s
            report_steps += sim.advance(0.05, publish)
            report_wall += sim.stats.step_wall_s - before
            writer.heartbeat()
            now = time.monotonic()
            if now - last_report >= args.report and report_steps:
                rtf = report_steps * sim.dt / report_wall if report_wall > 0 else float("nan")
                _log(f"twin: real-time factor {rtf:.2f} ({report_steps / report_wall:.0f} steps/s at dt "
                     f"{sim.dt * 1e3:g} ms), lag {sim.lag_s * 1e3:.0f} ms, restarts {sim.stats.resyncs}, "
                     f"engine failures {sim.stats.failures}"
                     + "".join(f", {name} at {r:.2f}x its training range"
                               for name, r in sim.stats.training_range.items()))
                last_report, report_steps, report_wall = now, 0, 0.0
    finally:
        writer.close()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m retarget.twin.worker``."""
    parser = argparse.ArgumentParser(prog="python -m retarget.twin.worker",
                                     description="Reduced simulation of a robot driven by motor samples on stdin.")
    parser.add_argument("robot", help="robot name or description YAML")
    parser.add_argument("--channel", required=True, help="pose channel file to write")
    parser.add_argument("--reduced", default=None, help="reduced model (.npz artifact); default: the "
                                                         "planner's cache")
    parser.add_argument("--mesh-scale", type=float, default=None, help="override the artifact's mesh scale")
    parser.add_argument("--dt", type=float, default=None, help="engine step [s] (default 0.001)")
    parser.add_argument("--max-lag", type=float, default=5.0, help="lag that triggers a restart at rest [s]")
    parser.add_argument("--report", type=float, default=5.0, help="real-time factor report period [s]")
    parser.add_argument("--perturb", default="", metavar="KEY=VALUE,...", help="run a perturbed model: stiffness, "
                        "damping, servo_kp, servo_kd factors, latency [s] (retarget.twin.perturbation)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
