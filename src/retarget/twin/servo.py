"""The emulated servos of the twin: the servos' loops run in the robot's reduced simulation, in another process.

:class:`SimulationDrivenServos` is the :class:`~retarget.dynamixel.dynamics.ServoDynamics` the emulated bus runs
with ``--twin reduced``. Every bus step it sends the twin worker (:mod:`retarget.twin.worker`), per simulated
motor in joint space, what the servo's loop acts on: the goal after the servo's profile (Position and Velocity
Trajectory) and the control-table values that set the loop (Torque Enable, Position P/I/D Gain, PWM Limit). The
worker's reduced simulation moves each servo's shaft by the servo law against the structure; its newest shaft
states come back on the twin channel (:meth:`retarget.twin.channel.PoseRingReader.latest`) and are what the bus
reports: Present Position and Velocity the simulated shaft's (the encoder is on the shaft), Present PWM the loop's
duty, Present Current the motor's electromagnetic torque times the torque constant of the servo's ratings. A
simulation running behind appears as latency: the feedback is the state at the simulation's time.

The servos' own loops (:class:`~retarget.dynamixel.servo_loop.ServoLoop`, on their rotors alone) compute the goal
profiles and stand in whenever the simulation does not report (model loading, kernels compiling, a restart, no
model, worker gone): they are kept at the simulated shafts while it reports, so either takes over where the other
left off (without the robot's load the local loop holds its goal without sag). Sending never blocks: the pipe is
non-blocking and a record that does not fit is dropped and counted (the worker interpolates across gaps).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from retarget.dynamixel.dynamics import ServoCommand, ServoDynamics, ServoFeedback
from retarget.dynamixel.servo_loop import ServoLoop
from retarget.processes import die_with_parent
from retarget.twin.channel import PoseSample
from retarget.twin.simulation import ServoSettings
from retarget.twin.worker import pack_command, pack_epoch

__all__ = ["ChannelShafts", "SimulationDrivenServos", "joint_mapping", "start_worker", "stop_worker"]


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


class ChannelShafts:
    """The newest simulated shafts on the twin channel (a :class:`~retarget.twin.channel.PoseRingReader`), for
    :class:`SimulationDrivenServos`: None while the simulation does not report or reports other motors."""

    def __init__(self, path: str | Path, motors: Sequence[str]) -> None:
        from retarget.twin.channel import PoseRingReader

        self.reader = PoseRingReader(path)
        self.motors = tuple(motors)

    def __call__(self) -> PoseSample | None:
        try:
            sample = self.reader.latest()
        except Exception:  # noqa: BLE001 - a foreign or half-created file: the servos go on alone
            return None
        return sample if sample is not None and self.reader.motors == self.motors else None


class SimulationDrivenServos(ServoDynamics):
    """Servos whose loops run in the twin simulation (module docstring).

    Args:
        local: the servos' own loops (the bus's order), which give the goal profiles and stand in while the
            simulation does not report.
        sink: receives each encoded command record (``bytes``); returns False when it was dropped.
        shafts: returns the simulation's newest sample (its ``shafts`` in the motor order of ``index``), or None.
        index, offset, direction: from :func:`joint_mapping`.

    Attributes:
        sent, dropped: records handed to / refused by the sink.
        simulated_steps: steps whose feedback came from the simulation (the others: the local loops).
        sim_time: the simulation time of the last feedback taken from it [s on the bus's motor clock], or None.
    """

    def __init__(self, local: ServoLoop, sink: Callable[[bytes], bool], shafts: Callable[[], PoseSample | None],
                 index: np.ndarray, offset: np.ndarray, direction: np.ndarray) -> None:
        self.local = local
        self._sink = sink
        self._shafts = shafts
        self._index, self._offset, self._direction = (np.asarray(index, dtype=int), np.asarray(offset, dtype=float),
                                                      np.asarray(direction, dtype=float))
        self._mapped = np.zeros(local.n, dtype=bool)
        self._mapped[self._index] = True
        self._amps = local.amperes_per_newton_metre[self._index]
        # The servos' own settings, for a command that carries no gains (the bus's commands always do).
        self._own = ServoSettings.of([local.servos[i] for i in self._index])
        self._t = 0.0
        self.sent = 0
        self.dropped = 0
        self.simulated_steps = 0
        self.sim_time: float | None = None

    def _settings(self, command: ServoCommand) -> ServoSettings:
        k = self._index
        gains, pwm = command.position_gains, command.pwm_limit
        return ServoSettings(np.asarray(command.torque_enabled, dtype=bool)[k],
                             self._own.gains if gains is None else np.asarray(gains, dtype=float)[k],
                             self._own.pwm_limit if pwm is None else np.asarray(pwm, dtype=float)[k])

    def _send(self, command: ServoCommand) -> None:
        goal, rate = self.local.trajectory
        k = self._index
        record = pack_command(self._t, self._direction * (goal[k] - self._offset), self._direction * rate[k],
                              self._settings(command))
        if self._sink(record):
            self.sent += 1
        else:
            self.dropped += 1

    def _feedback(self, local: ServoFeedback) -> ServoFeedback:
        sample = self._shafts()
        if sample is None:
            return local
        k, d = self._index, self._direction
        shafts = sample.shafts
        position, velocity = local.position.copy(), local.velocity.copy()
        current, pwm = local.current.copy(), local.pwm.copy()
        position[k] = d * shafts[:, 0] + self._offset
        velocity[k] = d * shafts[:, 1]
        current[k] = d * shafts[:, 2] * self._amps
        pwm[k] = d * shafts[:, 3]
        # The local loops continue from the simulated shafts if the simulation stops reporting.
        self.local.set_shafts(position, velocity, self._mapped)
        self.simulated_steps += 1
        self.sim_time = sample.sim_time_s
        return ServoFeedback(position, velocity, current, pwm)

    def reset(self, position: NDArray[np.float64]) -> ServoFeedback:
        self._t = 0.0
        # Motor time 0 on the wall clock, so the worker can stamp poses with the instant they belong to.
        self._sink(pack_epoch(time.time(), len(self._index)))
        feedback = self.local.reset(position)
        self._send(self._command_at_rest(position))
        return feedback

    def _command_at_rest(self, position: NDArray[np.float64]) -> ServoCommand:
        n = self.local.n
        return ServoCommand(np.asarray(position, dtype=float), np.zeros(n, dtype=bool), np.full(n, np.inf),
                            np.full(n, np.inf), np.full(n, np.inf))

    def step(self, command: ServoCommand, dt: float) -> ServoFeedback:
        local = self.local.step(command, dt)
        self._t += dt
        self._send(command)
        return self._feedback(local)


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
                 max_lag: float | None = None,
                 perturb: str = "") -> tuple[subprocess.Popen, Callable[[bytes], bool]]:
    """Start ``python -m retarget.twin.worker`` (its log lines go to this process's stderr); ``perturb``: its
    ``--perturb`` (:func:`retarget.twin.perturbation.parse_perturbation`), empty: the model as it is.

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
    if perturb:
        argv += ["--perturb", str(perturb)]
    # stdout=stderr: the emulator's stdout carries only its ready line (launch files parse it). A session of its own:
    # where the kernel groups CPU time by session (autogroup), the simulation's demand is then not charged to the
    # bus's group, whose serving thread answers the driver and stamps its goals (docs/twin.md "Replays"). It still
    # ends with the emulator: at end of input, or by the parent-death signal.
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=sys.stderr.fileno(), stderr=None,
                            preexec_fn=die_with_parent(signal.SIGTERM), start_new_session=True)
    return proc, _PipeSink(proc)


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
