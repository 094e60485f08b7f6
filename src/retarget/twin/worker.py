"""The twin's simulation process: motor samples in on stdin, simulated body poses out on the pose channel.

``python -m retarget.twin.worker ROBOT --channel PATH [--reduced FILE] [--dt S] [--max-lag S]`` is started by the
emulated servo bus (:class:`retarget.twin.servo.SimulationDrivenServos`). It runs in its own process, not a
thread of the emulator, because the compiled engine holds the GIL for a whole step (numba kernels without
``nogil``; a drummer step takes ~20 ms): in a thread it would delay the bus's replies to the driver.

Input: fixed-size binary records on stdin, ``<d`` time [s] then ``m`` angles [rad] and ``m`` rates [rad/s] in the
model's motor order (:func:`pack_sample`); records are smaller than ``PIPE_BUF``, so each write is atomic. A first
record with a negative time ``−T`` gives the wall-clock time ``T`` [s since the epoch] of motor time 0, so the
poses can be stamped with the instant they belong to. End of
input (the emulator exited) ends the worker. Output: every step's poses on a :class:`PoseRingWriter`; log lines
on stderr (``twin: ...``), including the real-time factor and lag every ``--report`` seconds. Exit codes: 0 on end
of input or SIGINT/SIGTERM, 2 when no usable reduced model (the line says why).
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

__all__ = ["main", "pack_sample", "record_size"]


def record_size(n_motors: int) -> int:
    """Bytes of one input record."""
    return 8 * (1 + 2 * n_motors)


def pack_sample(t: float, theta: np.ndarray, theta_dot: np.ndarray) -> bytes:
    """One input record: time [s], angles [rad] ``(m,)``, rates [rad/s] ``(m,)``."""
    return struct.pack(f"<{1 + 2 * len(theta)}d", t, *theta, *theta_dot)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Load the model, then step the simulation as motor samples arrive until end of input or a signal."""
    from retarget.errors import RetargetError
    from retarget.twin.channel import PoseRingWriter
    from retarget.twin.model import find_reduced_model, load_twin_model
    from retarget.twin.simulation import TwinSimulation

    stop: list[int] = []
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, _f: stop.append(signum))
    started = time.perf_counter()
    try:
        source = find_reduced_model(args.robot, args.reduced)
        model = load_twin_model(args.robot, source, args.mesh_scale)
        sim = TwinSimulation(model, dt=args.dt, max_lag_s=args.max_lag, log=_log)
    except RetargetError as exc:
        _log(f"twin: cannot run the reduced simulation: {exc}; the servos keep the first-order model, no "
             "simulated mocap poses")
        return 2
    m = len(model.motors)
    size = record_size(m)
    _log(f"twin: reduced model {source.describe()}, modes {model.info.get('modes')}, cubature elements "
         f"{model.info.get('cubature_elements')}, dt {sim.dt * 1e3:g} ms, bodies {list(model.bodies)} -> "
         f"{args.channel} (loaded in {time.perf_counter() - started:.1f} s)")
    writer = PoseRingWriter(args.channel, list(model.bodies))
    fd = sys.stdin.buffer.fileno()
    os.set_blocking(fd, False)
    buffer = b""
    wall0 = time.time() - time.monotonic()
    epoch: float | None = None  # wall-clock time of motor time 0 (sent by the emulator as the first record)
    last_report = time.monotonic()
    report_steps, report_wall = 0, 0.0
    eof = False
    code = 0

    def publish(t: float, poses: np.ndarray) -> None:
        writer.write(t, (epoch or wall0) + t, poses, sim.lag_s)

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
                    vals = struct.unpack_from(f"<{1 + 2 * m}d", buffer, k * size)
                    if epoch is None and vals[0] < 0:  # header record: -epoch
                        epoch = -vals[0]
                        continue
                    sim.push(vals[0], np.asarray(vals[1 : 1 + m]), np.asarray(vals[1 + m :]))
                buffer = buffer[n * size :]
            if not sim.started and len(sim.history):
                sim.start()
                publish(sim.time, sim.poses())
                _log(f"twin: simulation started at t = {sim.time:.3f} s (quasi-static at the servo angles)")
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
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
