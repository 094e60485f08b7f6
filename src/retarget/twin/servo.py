"""The emulated servos of the twin: the first-order servo model drives the reduced simulation in another process.

:class:`SimulationDrivenServos` is the :class:`~retarget.dynamixel.dynamics.ServoDynamics` the emulated bus runs
with ``--twin reduced``: the servos' own model (:class:`~retarget.dynamixel.dynamics.FirstOrderServo`: first-order
position loop with the XM430 velocity limit) gives the shaft angles θ(t) and rates θ̇(t); the feedback the bus
reports (Present Position) is that angle — the encoder is on the shaft — and each sample is also sent, converted
to joint angles in the simulation's motor order, to the twin worker (:mod:`retarget.twin.worker`), which moves the
simulated robot. Sending never blocks: the pipe is non-blocking and a sample that does not fit is dropped and
counted (the worker interpolates across gaps). If the worker is gone, the servos go on alone.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from retarget.dynamixel.dynamics import FirstOrderServo, ServoCommand, ServoDynamics, ServoFeedback
from retarget.twin.worker import pack_sample

__all__ = ["SimulationDrivenServos", "joint_mapping", "start_worker", "stop_worker"]


def joint_mapping(servo_joints: Sequence[str], motors: Sequence[str], offsets: Sequence[float] | None = None,
                  directions: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How servo-shaft angles become the simulation's motor angles: ``θ[j] = dir[k] (x[k] − offset[k])``.

    Args:
        servo_joints: joint name of each emulated servo, in the bus's ID order ``(n,)``.
        motors: the simulation's motor names ``(m,)``; each must be one of ``servo_joints``.
        offsets: servo angle at joint 0 [rad] per servo (the driver's ``offsets``; default 0).
        directions: ±1 per servo (the driver's ``directions``; default +1).

    Returns:
        ``index (m,)`` (servo of each motor), ``offset (m,)`` [rad], ``direction (m,)``.

    Raises:
        InputError: a motor without a servo, or offsets/directions of the wrong length.
    """
    from retarget.errors import InputError

    n = len(servo_joints)
    off = np.zeros(n) if not offsets else np.asarray(offsets, dtype=float)
    dirs = np.ones(n) if not directions else np.asarray(directions, dtype=float)
    if off.shape != (n,) or dirs.shape != (n,):
        raise InputError(f"offsets/directions need one value per servo ({n}), got {len(off)}/{len(dirs)}")
    missing = [m for m in motors if m not in servo_joints]
    if missing:
        raise InputError(f"simulation motors {missing} have no emulated servo (servo joints: {list(servo_joints)})")
    index = np.array([list(servo_joints).index(m) for m in motors], dtype=int)
    return index, off[index], dirs[index]


class SimulationDrivenServos(ServoDynamics):
    """First-order servos whose shaft angles are streamed to the twin simulation.

    Args:
        n: number of servos.
        sink: receives each encoded sample (``bytes``); returns False when it was dropped.
        index, offset, direction: from :func:`joint_mapping`.
        servo: the servo model (default :class:`FirstOrderServo` ``(n)``).

    Attributes:
        sent, dropped: samples handed to / refused by the sink.
    """

    def __init__(self, n: int, sink: Callable[[bytes], bool], index: np.ndarray, offset: np.ndarray,
                 direction: np.ndarray, servo: ServoDynamics | None = None) -> None:
        self.servo = servo or FirstOrderServo(n)
        self._sink = sink
        self._index, self._offset, self._direction = index, offset, direction
        self._t = 0.0
        self.sent = 0
        self.dropped = 0

    def _send(self, feedback: ServoFeedback) -> ServoFeedback:
        theta = self._direction * (feedback.position[self._index] - self._offset)
        rate = self._direction * feedback.velocity[self._index]
        if self._sink(pack_sample(self._t, theta, rate)):
            self.sent += 1
        else:
            self.dropped += 1
        return feedback

    def reset(self, position: np.ndarray) -> ServoFeedback:
        self._t = 0.0
        # Motor time 0 on the wall clock, so the worker can stamp poses with the instant they belong to.
        self._sink(pack_sample(-time.time(), np.zeros(len(self._index)), np.zeros(len(self._index))))
        return self._send(self.servo.reset(position))

    def step(self, command: ServoCommand, dt: float) -> ServoFeedback:
        feedback = self.servo.step(command, dt)
        self._t += dt
        return self._send(feedback)


class _PipeSink:
    """Non-blocking writes to the worker's stdin; False (dropped) when the pipe is full or the worker gone."""

    def __init__(self, proc: subprocess.Popen) -> None:
        assert proc.stdin is not None
        self.proc = proc
        self._fd = proc.stdin.fileno()
        os.set_blocking(self._fd, False)
        self.closed = False

    def __call__(self, record: bytes) -> bool:
        if self.closed:
            return False
        try:
            os.write(self._fd, record)  # < PIPE_BUF: all or nothing
            return True
        except BlockingIOError:
            return False
        except (BrokenPipeError, OSError):
            self.closed = True
            return False


def start_worker(robot: str | Path, channel: str | Path, reduced: str | Path | None = None,
                 dt: float | None = None, mesh_scale: float | None = None, python: str | None = None,
                 max_lag: float | None = None) -> tuple[subprocess.Popen, Callable[[bytes], bool]]:
    """Start ``python -m retarget.twin.worker`` (its log lines go to this process's stderr).

    Returns:
        The process and a non-blocking sink for :class:`SimulationDrivenServos`; closing the process's stdin
        (:func:`stop_worker`) ends it.
    """
    argv = [python or sys.executable, "-m", "retarget.twin.worker", str(robot), "--channel", str(channel)]
    if reduced:
        argv += ["--reduced", str(reduced)]
    if dt:
        argv += ["--dt", str(dt)]
    if mesh_scale:
        argv += ["--mesh-scale", str(mesh_scale)]
    if max_lag:
        argv += ["--max-lag", str(max_lag)]
    # stdout=stderr: the emulator's stdout carries only its ready line (launch files parse it).
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=sys.stderr.fileno(), stderr=None,
                            preexec_fn=_die_with_parent)
    return proc, _PipeSink(proc)


def _die_with_parent() -> None:
    """In the worker before exec: SIGTERM if the emulator dies without closing the pipe (SIGKILL)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 15)


def stop_worker(proc: subprocess.Popen, timeout: float = 5.0) -> int | None:
    """End the worker: close its input (it exits at end of input), then SIGTERM, then SIGKILL."""
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    for action in (None, proc.terminate, proc.kill):
        if action is not None:
            action()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            continue
    return proc.poll()
