"""Validation runs behind ``retarget check cantilever`` and ``retarget check fourbar``.

Cantilever: the rod is brought to its static equilibrium (gravity) plus a small lateral tip load, released, and
its free vibration simulated with BDF2; f₁ is fitted to the tip's lateral motion (a damped sinusoid fitted by
least squares, started from the zero-crossing period) and compared with the exact Euler–Bernoulli value.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
from numpy.typing import NDArray

from retarget.fem.beam_theory import (
    cantilever_first_frequency,
    cantilever_static_tip_deflection,
    round_section,
)
from retarget.sim.integrator import State, StepOptions, simulate_states
from retarget.sim.motors import ConstantMotors, FunctionMotors
from retarget.sim.scenarios import CantileverSpec, build_cantilever, build_fourbar
from retarget.sim.statics import solve_static
from retarget.sim.system import System, build_system

__all__ = ["cantilever_layers", "fit_frequency", "run_cantilever", "run_fourbar", "tip_position"]

#: Default axial element layers per rod diameter of the cantilever check (one layer per 1.5 diameters).
LAYERS_PER_DIAMETER: float = 1.0 / 1.5


def cantilever_layers(length: float, diameter: float, layers_per_diameter: float = LAYERS_PER_DIAMETER) -> int:
    """Axial element layers of the cantilever check's rod mesh (at least 4)."""
    return max(4, math.ceil(length / diameter * layers_per_diameter))


def tip_position(system: System, u: NDArray[np.float64], tip_nodes: NDArray[np.int64] | None) -> NDArray[np.float64]:
    """The tip's position (3,) [m]: the tip body's centre of mass, or the mean of the rod's end-face nodes."""
    if tip_nodes is None:
        i = system.rigid_index("tip")
        return u[7 * i : 7 * i + 3].copy()
    body = system.deformable[0]
    off = system.u_offsets[0]
    disp = u[off : off + body.n_dofs].reshape(-1, 3)[tip_nodes]
    return (body.rest_positions[tip_nodes] + disp).mean(axis=0)


def fit_frequency(t: NDArray[np.float64], x: NDArray[np.float64]) -> dict[str, float]:
    """Fit ``x(t) ≈ c + e^{−σ t} (a cos 2πft + b sin 2πft)`` by least squares.

    Returns:
        ``f_hz``, ``decay_per_s`` (σ), ``amplitude`` (initial), and ``f_zero_crossing_hz`` (the starting guess).
    """
    from scipy.optimize import least_squares

    xc = x - x.mean()
    sign = np.signbit(xc)
    idx = np.nonzero(sign[:-1] != sign[1:])[0]
    if len(idx) < 3:
        raise ValueError("fewer than 3 zero crossings: simulate longer")
    tc = t[idx] - xc[idx] * (t[idx + 1] - t[idx]) / (xc[idx + 1] - xc[idx])
    f0 = 0.5 / np.mean(np.diff(tc))

    def model(p: NDArray[np.float64]) -> NDArray[np.float64]:
        c, a, b, f, s = p
        w = 2 * math.pi * f * (t - t[0])
        return c + np.exp(-s * (t - t[0])) * (a * np.cos(w) + b * np.sin(w))

    amp = float(np.max(np.abs(xc)))
    res = least_squares(lambda p: (model(p) - x) / amp, [x.mean(), xc[0], 0.0, f0, 0.0], x_scale="jac")
    c, a, b, f, s = res.x
    return {"f_hz": float(f), "decay_per_s": float(s), "amplitude": float(math.hypot(a, b)), "f_zero_crossing_hz": float(f0)}


def _static_deflection(
    spec: CantileverSpec, system: System, u: NDArray[np.float64], tip_nodes: NDArray[np.int64] | None
) -> dict[str, float]:
    """The static tip sag [m] at the equilibrium ``u`` against beam theory (report keys of :func:`run_cantilever`)."""
    sag = tip_position(system, u, tip_nodes) - tip_position(system, system.reference_u(), tip_nodes)
    static = float(-sag[2])
    theory = cantilever_static_tip_deflection(
        spec.length, spec.diameter, spec.youngs_modulus, spec.density, spec.tip_mass, spec.gravity
    )
    return {
        "static_tip_deflection_m": static,
        "static_tip_deflection_theory_m": theory,
        "static_relative_error": (static - theory) / theory,
    }


def _tip_force(system: System, force: NDArray[np.float64], tip_nodes: NDArray[np.int64] | None) -> NDArray[np.float64]:
    """External generalized force (n_V,) putting ``force`` (3,) [N] on the tip: the tip body, or spread evenly
    over the tip nodes of a rod without one."""
    f_ext = np.zeros(system.n_v)
    if tip_nodes is None:
        i = system.rigid_index("tip")
        f_ext[6 * i : 6 * i + 3] = force
    else:
        off = system.v_offsets[0]
        for n in tip_nodes:
            f_ext[off + 3 * n : off + 3 * n + 3] = force / len(tip_nodes)
    return f_ext


def run_cantilever(
    spec: CantileverSpec,
    dt: float | None = None,
    periods: float = 4.0,
    steps_per_period: int = 100,
    perturbation: float = 1e-3,
    progress: Callable[[int, int], None] | None = None,
    dynamics: bool = True,
) -> dict[str, object]:
    """Static deflection and free-vibration f₁ of a cantilever, with the beam-theory references.

    Args:
        spec: the rod.
        dt: time step [s]; default: the beam-theory period / ``steps_per_period``.
        periods: simulated duration in beam-theory periods.
        steps_per_period: see ``dt``.
        perturbation: initial lateral tip displacement as a fraction of the length.
        progress: ``progress(step, n_steps)`` after each step.
        dynamics: False stops after the static solve (no f₁).

    Returns:
        A JSON-able dict (see ``retarget check cantilever``).
    """
    wall0 = time.perf_counter()
    model, axis = build_cantilever(spec)
    system = build_system(model)
    mesh = model.flexible_parts[0].mesh
    area, inertia = round_section(spec.diameter)
    ei = spec.youngs_modulus * inertia
    f_theory = cantilever_first_frequency(spec.length, spec.diameter, spec.youngs_modulus, spec.density, spec.tip_mass)
    period = 1.0 / f_theory
    if dt is None:
        dt = period / steps_per_period
    n_steps = int(math.ceil(periods * period / dt))
    tip_nodes = None
    if spec.tip_mass == 0:
        end = mesh.nodes @ axis
        tip_nodes = np.nonzero(np.abs(end - spec.length) < 1e-9 * spec.length)[0]
    lateral = np.array([0.0, 1.0, 0.0])
    no_motors = np.zeros(0)
    equilibrium = solve_static(system, no_motors)
    out: dict[str, object] = {"spec": asdict(spec)}
    if spec.gravity > 0 and spec.orientation == "horizontal":
        out.update(_static_deflection(spec, system, equilibrium.u, tip_nodes))
    if not dynamics:
        out.update(
            dofs=system.n_deformable_dofs,
            elements=int(len(mesh.tets)),
            n_axial=spec.n_axial,
            n_around=spec.n_around,
            wall_s=time.perf_counter() - wall0,
        )
        return out
    # A lateral tip load giving about `perturbation`·L of extra deflection (Euler–Bernoulli stiffness 3EI/L³).
    load = 3.0 * ei / spec.length**3 * perturbation * spec.length
    f_ext = _tip_force(system, load * lateral, tip_nodes)
    start = solve_static(system, no_motors, u0=equilibrium.u, external_force=f_ext)
    times = np.zeros(n_steps + 1)
    tips = np.zeros((n_steps + 1, 3))
    tips[0] = tip_position(system, start.u, tip_nodes)
    violation = [float(np.max(np.abs(_constraint_values(system, start))))]
    iterations: list[int] = []

    def record(k: int, state: State, iters: int) -> None:
        times[k] = state.t
        tips[k] = tip_position(system, state.u, tip_nodes)
        iterations.append(iters)
        if k % 10 == 0 or k == n_steps:
            violation.append(float(np.max(np.abs(_constraint_values(system, state)))))
        if progress is not None:
            progress(k, n_steps)

    sim0 = time.perf_counter()
    simulate_states(system, start, ConstantMotors(no_motors), dt, n_steps, StepOptions(), record)
    sim_wall = time.perf_counter() - sim0
    y = tips[:, 1]
    fit = fit_frequency(times, y)
    decay_per_period = 1.0 - math.exp(-fit["decay_per_s"] / fit["f_hz"])
    out.update(
        f1_hz=fit["f_hz"],
        f1_theory_hz=f_theory,
        f1_relative_error=(fit["f_hz"] - f_theory) / f_theory,
        f1_zero_crossing_hz=fit["f_zero_crossing_hz"],
        amplitude_decay_per_period=decay_per_period,
        dofs=system.n_deformable_dofs,
        rigid_dofs=6 * len(system.rigid),
        elements=int(len(mesh.tets)),
        n_axial=spec.n_axial,
        n_around=spec.n_around,
        dt=dt,
        steps=n_steps,
        newton_iterations_mean=float(np.mean(iterations)),
        steps_per_s=n_steps / sim_wall,
        max_constraint_violation=max(violation),
        wall_s=time.perf_counter() - wall0,
    )
    return out


def _constraint_values(system: System, state: State) -> NDArray[np.float64]:
    from retarget.sim.newton import constraint_values

    return constraint_values(system, state.u, np.zeros(len(system.motors)))


def run_fourbar(
    duration: float = 10.0,
    dt: float = 2e-3,
    amplitude: float = 0.8,
    frequency: float = 0.5,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, float]:
    """Drive the four-bar's crank with ``θ(t) = A (1 − cos 2πft)`` [rad] and record the constraint violation.

    Returns:
        A JSON-able dict with ``max_constraint_violation`` [m] (position rows) and
        ``max_orientation_violation`` [-] (dot-product rows), ``steps``, ``wall_s``.
    """
    from retarget.sim.newton import constraint_values

    wall0 = time.perf_counter()
    system = build_system(build_fourbar())
    w = 2 * math.pi * frequency
    motors = FunctionMotors(lambda t: [amplitude * (1 - math.cos(w * t))], lambda t: [amplitude * w * math.sin(w * t)])
    n_steps = int(round(duration / dt))
    rows = position_rows(system)
    worst = {"pos": 0.0, "ori": 0.0}

    def record(k: int, state: State, iters: int) -> None:
        c = constraint_values(system, state.u, motors.value(state.t))
        worst["pos"] = max(worst["pos"], float(np.max(np.abs(c[rows]))))
        worst["ori"] = max(worst["ori"], float(np.max(np.abs(np.delete(c, rows)))))
        if progress is not None:
            progress(k, n_steps)

    from retarget.sim.integrator import initial_state

    simulate_states(system, initial_state(system), motors, dt, n_steps, StepOptions(), record)
    return {
        "max_constraint_violation": worst["pos"],
        "max_orientation_violation": worst["ori"],
        "steps": n_steps,
        "dt": dt,
        "duration_s": duration,
        "wall_s": time.perf_counter() - wall0,
    }


def position_rows(system: System) -> NDArray[np.int64]:
    """Indices of constraint rows measured in metres (joint points, coupling centroids, prismatic offsets)."""
    from retarget.sim.constraints import CouplingConstraint, JointConstraint

    rows: list[int] = []
    for blk, l0 in zip(system.constraints, system.lambda_offsets):
        if isinstance(blk, CouplingConstraint):
            rows.extend(range(l0, l0 + 3))
        elif isinstance(blk, JointConstraint):
            k = l0
            if blk.kind in ("fixed", "prismatic"):
                k += 3
            if blk.kind in ("fixed", "hinge", "universal", "ball"):
                rows.extend(range(k, k + 3))
            if blk.kind == "prismatic":
                rows.extend(range(k, k + 2))
                if blk.motor >= 0:
                    rows.append(k + 2)
    return np.asarray(rows, dtype=np.int64)
