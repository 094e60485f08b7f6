"""``simulate``: run the BDF2 integrator over a motion and collect a :class:`SimulationResult`."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from retarget.sim.integrator import State, StepOptions, initial_state, simulate_states
from retarget.sim.motors import MotorTrajectory
from retarget.sim.result import SimulationResult
from retarget.sim.statics import solve_static
from retarget.sim.system import System

__all__ = ["simulate"]


def simulate(
    system: System,
    motors: MotorTrajectory,
    duration: float,
    dt: float = 5e-4,
    start: State | None = None,
    options: StepOptions = StepOptions(),
    store_every: int = 1,
    compact: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> SimulationResult:
    """Simulate ``duration`` [s] with step ``dt`` [s].

    Args:
        system: the system.
        motors: ``θ(t)`` in ``system.motors`` order (the goals of modelled servos).
        duration: [s].
        dt: [s] (the paper used 0.5 ms).
        start: the state at t = 0; default: the quasi-static equilibrium at ``θ(0)`` (at rest: the DAE starts
            consistent only if ``θ̇(0) = 0``).
        options: Newton settings.
        store_every: keep every k-th step.
        compact: store displacements as float32 (halves memory for big meshes).
        progress: ``progress(step, n_steps)``.

    Raises:
        NewtonFailed / SimulationDiverged: with step, time and residual norms.
    """
    n_steps = int(round(duration / dt))
    state0 = start if start is not None else solve_static(system, motors.value(0.0))
    if start is None:
        state0 = initial_state(system, state0.u).replace(lam=state0.lam)
    n_store = n_steps // store_every + 1
    nb = len(system.rigid)
    time = np.zeros(n_store)
    poses = np.zeros((n_store, nb, 7))
    ndef = system.n_deformable_dofs
    nsv = system.servo.size
    disp = np.zeros((n_store, ndef), dtype=np.float32 if compact else np.float64)
    servo = np.zeros((n_store, nsv))
    lam = np.zeros((n_store, system.n_lambda))
    theta = np.zeros((n_store, len(system.motors)))
    iters = np.zeros(n_store, dtype=np.int64)

    def store(j: int, state: State, it: int) -> None:
        time[j] = state.t
        poses[j] = state.u[: 7 * nb].reshape(nb, 7)
        poses[j, :, 3:] /= np.linalg.norm(poses[j, :, 3:], axis=1, keepdims=True)
        disp[j] = state.u[7 * nb : 7 * nb + ndef]
        servo[j] = state.u[7 * nb + ndef :]
        lam[j] = state.lam
        theta[j] = motors.value(state.t)
        iters[j] = it

    store(0, state0, 0)

    def callback(k: int, state: State, it: int) -> None:
        if k % store_every == 0:
            store(k // store_every, state, it)
        if progress is not None:
            progress(k, n_steps)

    simulate_states(system, state0, motors, dt, n_steps, options, callback)
    return SimulationResult(system, time, poses, disp, lam, theta, iters, servo)
