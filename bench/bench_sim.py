"""Full-space simulator benchmark: the paper's single rod (70 cm, 5 mm spring steel on one servo, 100 g tip).

Prints one JSON object per mesh (coarse and ~30 000 DOF): steps/s of BDF2 steps (dt = 0.5 ms) while the servo
turns, Newton iterations, factorizations and peak RSS. Thread settings are printed with the results; run with
``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1`` on a shared machine.

Suites (``--suite``):

- ``rod`` (default): the speed benchmark above;
- ``moving``: the shipped single rod mid-way through ``step_30``'s rise (``--mesh-scale 1.43``: 30 075 DOFs),
  first-order predictor vs the default options;
- ``fourbar``: the 10 s four-bar check (wall time and constraint violation);
- ``cantilever``: the acceptance grid of ``retarget check cantilever`` (lengths 0.2/0.8 m, diameters 3/6 mm, tips
  0/0.3 kg and the centre 0.5 m, 4.5 mm, 0.1 kg): f₁ at zero gravity and the static sag of the horizontal rod
  under gravity, against Euler–Bernoulli;
- ``robots``: every library robot simulates 1 s of its shipped motion in full form; the rapper's loop closure.
  With ``--reduced`` each robot also trains a reduced model on that full run (mass-PCA + cubature, as
  ``retarget reduce``), simulates the same 1 s with the compiled reduced engine and reports its steps/s, its
  position-row constraint violation and the tracked bodies' difference from the full run (issue #6).

Usage: ``python bench/bench_sim.py [--suite rod|fourbar|cantilever|robots] [--steps N] [--only coarse|fine]
[--mesh-scale S] [--robots NAME ...] [--reduced [--modes N]]`` (``--mesh-scale``: robots and moving)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time

import numpy as np


def single_rod(n_axial: int, n_around: int):
    """The single-rod robot: servo at the origin (hinge about z), vertical rod, 100 g brass tip."""
    from retarget.fem.material import MATERIALS
    from retarget.fem.mesh import rod_mesh
    from retarget.model.robot import RobotBuilder
    from retarget.sim.scenarios import box_inertia, sphere_inertia

    length, diameter = 0.70, 0.005
    mesh = rod_mesh(length, diameter, n_axial, n_around)
    b = RobotBuilder("single_rod", gravity=(0, 0, -9.81))
    b.add_link("horn", 0.02, (0, 0, -0.005), box_inertia(0.02, (0.03, 0.03, 0.01)))
    b.add_joint("base_yaw", "hinge", None, "horn", (0, 0, 0), (0, 0, 1), motor=True)
    b.add_link("tip_mass", 0.1, (0, 0, length), sphere_inertia(0.1, 0.0145))
    b.add_flexible_part(
        "rod", mesh, MATERIALS["spring_steel"],
        [("horn", mesh.nodes_on_plane(2, 0.0)), ("tip_mass", mesh.nodes_on_plane(2, length))],
    )
    return b.build()


def run(label: str, n_axial: int, n_around: int, steps: int, dt: float) -> dict:
    from retarget.sim.integrator import FactorizationCache, StepOptions, step
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.statics import solve_static
    from retarget.sim.system import build_system

    t0 = time.perf_counter()
    system = build_system(single_rod(n_axial, n_around))
    build_s = time.perf_counter() - t0
    # Servo starts turning towards 30° (smooth C² ramp): the rod bends and swings.
    ramp = 0.5

    def theta(t: float) -> list[float]:
        s = min(t / ramp, 1.0)
        return [math.radians(30) * s**3 * (10 - 15 * s + 6 * s * s)]

    def theta_dot(t: float) -> list[float]:
        s = min(t / ramp, 1.0)
        return [math.radians(30) * 30 * s * s * (1 - s) ** 2 / ramp]

    motors = FunctionMotors(theta, theta_dot)
    t1 = time.perf_counter()
    state = solve_static(system, [0.0])
    static_s = time.perf_counter() - t1
    options = StepOptions()
    cache = FactorizationCache()
    prev2 = None
    iters = []
    t2 = time.perf_counter()
    for k in range(1, steps + 1):
        new, _, it = step(system, state, prev2, dt, motors, options, k, cache)
        prev2, state = state, new
        iters.append(it)
    wall = time.perf_counter() - t2
    return {
        "bench": "sim_full_single_rod",
        "mesh": label,
        "n_axial": n_axial,
        "n_around": n_around,
        "deformable_dofs": system.n_deformable_dofs,
        "rigid_dofs": 6 * len(system.rigid),
        "constraints": system.n_lambda,
        "dt": dt,
        "steps": steps,
        "steps_per_s": steps / wall,
        "newton_iterations_mean": float(np.mean(iters)),
        "factorizations": cache.factorizations,
        "build_s": build_s,
        "static_solve_s": static_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "threads": {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")},
        "cpu_count": os.cpu_count(),
    }


def moving_suite(steps: int, mesh_scale: float) -> None:
    """The shipped single rod following ``single_rod/step_30`` from t = 0.55 s (mid-rise, the servo at full
    speed): steps/s of the full engine with the first-order predictor (before) and the default options (after),
    one JSON object each."""
    from retarget.model.library import resolve_robot
    from retarget.model.loader import load_robot
    from retarget.sim.integrator import FactorizationCache, StepOptions, initial_state, step
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.statics import solve_static
    from retarget.sim.system import build_system

    model = load_robot(resolve_robot("single_rod"), mesh_scale=mesh_scale)
    system = build_system(model)
    spline, _ = motors_from_motion("single_rod/step_30", model.motors)
    start = 0.55
    motors = FunctionMotors(lambda t: spline.value(t + start), lambda t: spline.derivative(t + start))
    rest = solve_static(system, motors.value(0.0))
    for label, options in (("first-order predictor", StepOptions(predictor="constant_velocity")),
                           ("default", StepOptions()),
                           ("default + error estimate", StepOptions(estimate_error=True))):
        state, prev2, cache, iters = initial_state(system, rest.u).replace(lam=rest.lam), None, FactorizationCache(), []
        t0 = time.perf_counter()
        for k in range(1, steps + 1):
            new, _, it = step(system, state, prev2, 5e-4, motors, options, k, cache)
            prev2, state = state, new
            iters.append(it)
        wall = time.perf_counter() - t0
        print(json.dumps({"bench": "sim_full_single_rod_moving", "options": label, "mesh_scale": mesh_scale,
                          "deformable_dofs": system.n_deformable_dofs, "steps": steps, "steps_per_s": steps / wall,
                          "newton_iterations_mean": float(np.mean(iters)), "factorizations": cache.factorizations,
                          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                          "load_average": os.getloadavg()[0], "threads": _threads()}), flush=True)


def _threads() -> dict:
    return {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}


def fourbar_suite() -> None:
    from retarget.sim.validation import run_fourbar

    run_fourbar(duration=0.02)  # compile / load the kernels first
    out = run_fourbar()
    out.update(bench="sim_fourbar_10s", ms_per_step=1e3 * out["wall_s"] / out["steps"], threads=_threads())
    print(json.dumps(out), flush=True)


def cantilever_suite() -> None:
    from retarget.sim.scenarios import CantileverSpec
    from retarget.sim.validation import cantilever_layers, run_cantilever

    cases = [(length, d, tip) for length in (0.2, 0.8) for d in (0.003, 0.006) for tip in (0.0, 0.3)]
    cases.append((0.5, 0.0045, 0.1))
    for length, d, tip in cases:
        na = cantilever_layers(length, d)
        for gravity in (0.0, 9.81):
            spec = CantileverSpec(length, d, tip, gravity=gravity, n_axial=na, n_around=8)
            res = run_cantilever(spec, dynamics=gravity == 0.0)
            res.pop("spec")
            res.update(bench="check_cantilever", length=length, diameter=d, tip_mass=tip, gravity=gravity, threads=_threads())
            if "static_tip_deflection_m" in res:
                res["static_deflection_over_length"] = res["static_tip_deflection_m"] / length
            print(json.dumps(res), flush=True)


def _generic_motion(n_motors: int):
    """A small motion for a robot without one: every motor 10° in 0.3 s (C² ramp from rest), then hold."""
    from retarget.sim.motors import FunctionMotors

    amp, ramp = math.radians(10.0), 0.3

    def theta(t: float) -> list[float]:
        s = min(max(t / ramp, 0.0), 1.0)
        return [amp * s**3 * (10 - 15 * s + 6 * s * s)] * n_motors

    def theta_dot(t: float) -> list[float]:
        s = min(max(t / ramp, 0.0), 1.0)
        return [amp * 30 * s * s * (1 - s) ** 2 / ramp] * n_motors

    return FunctionMotors(theta, theta_dot)


def _reduced_form(system, model, result, motors, duration: float, dt: float, store_every: int,
                  modes: int | None) -> dict:
    """Train on the full run ``result`` (as ``retarget reduce``), simulate the same motion reduced, compare."""
    from retarget.sim.reduced.commands import max_position_violation, tracked_links
    from retarget.sim.reduced.engine import CompiledRun, simulate_compiled
    from retarget.sim.reduced.training import build_from_result

    t0 = time.perf_counter()
    rs, bases, cubs = build_from_result(system, result, n_modes=modes)
    build_s = time.perf_counter() - t0
    simulate_compiled(rs, motors, 2 * dt, dt)  # compile / load numba's cache outside the timed run
    run = simulate_compiled(rs, motors, duration, dt)
    steps = len(run.time) - 1
    # The full run keeps every store_every-th step: compare on those samples.
    n = len(result.time)
    pick = np.arange(n) * store_every
    tracked = tracked_links(model, system.rigid)
    per_body = {}
    worst, sq, count = 0.0, 0.0, 0
    for name in tracked:
        xf = result.body_position(name)
        xr = run.body_position(name)[pick]
        diff = np.linalg.norm(xr - xf, axis=1)
        travel = float(np.max(np.linalg.norm(xf - xf[0], axis=1)))
        per_body[name] = {"max_diff_m": float(np.max(diff)), "rms_diff_m": float(np.sqrt(np.mean(diff**2))),
                          "full_travel_m": travel}
        worst = max(worst, float(np.max(diff)))
        sq += float(np.sum(diff**2))
        count += len(diff)

    # The reduced run on the full run's stored samples, for the constraint check.
    sampled = CompiledRun(run.system, run.time[pick], run.states[pick], run.newton_iterations[pick], 0, run.wall_s)
    names = [b.name for b in system.deformable]
    return {
        "reduced_ok": True,
        "modes": {nm: b.size - b.n_rigid for nm, b in zip(names, bases)},
        "cubature_elements": {nm: int(len(c.elements)) for nm, c in zip(names, cubs)},
        "reduced_dofs": int(sum(b.size for b in bases)),
        "reduced_build_s": build_s,
        "reduced_sim_s": run.wall_s,
        "reduced_steps_per_s": steps / run.wall_s,
        "reduced_newton_iterations_mean": float(np.mean(run.newton_iterations[1:])),
        "reduced_max_position_violation_m": max_position_violation(sampled, motors),
        "tracked_max_diff_m": worst,
        "tracked_rms_diff_m": math.sqrt(sq / max(count, 1)),
        "tracked": per_body,
    }


def robots_suite(duration: float, dt: float, mesh_scale: float = 1.0, only: list[str] | None = None,
                 reduced: bool = False, modes: int | None = None) -> None:
    from retarget.model.library import list_motions, list_robots, resolve_robot
    from retarget.model.loader import load_robot
    from retarget.motion import load_motion
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.newton import constraint_values
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system
    from retarget.sim.validation import position_rows

    motions = {"bartender": "serve", "boxer": "boxing", "dancer": "wave", "drummer": "drumming", "rapper": "rap",
               "single_rod": "step_30", "two_rods": "swing_90"}
    for robot in list_robots():
        if only and robot not in only:
            continue
        t0 = time.perf_counter()
        model = load_robot(resolve_robot(robot), mesh_scale=mesh_scale)
        system = build_system(model)
        shipped = list_motions(robot)
        motion_name = f"{robot}/{motions[robot]}" if robot in motions else (shipped[0] if shipped else None)
        if motion_name is not None:
            load_motion(motion_name)  # the motion must load
            motors, _ = motors_from_motion(motion_name, model.motors)
        else:
            motion_name, motors = "generic: every motor 10 deg in 0.3 s", _generic_motion(len(model.motors))
        build_s = time.perf_counter() - t0
        out = {"bench": "robot_full_1s" + ("_and_reduced" if reduced else ""), "robot": robot, "motion": motion_name,
               "dofs": system.n_deformable_dofs, "rigid_bodies": len(system.rigid), "constraints": system.n_lambda,
               "dt": dt, "duration": duration, "mesh_scale": mesh_scale}
        store_every = max(1, int(round(0.01 / dt)))
        try:
            t1 = time.perf_counter()
            # Training needs the displacements at full precision; the full-form check alone stores float32.
            result = simulate(system, motors, duration, dt, store_every=store_every, compact=not reduced)
            out["sim_s"] = time.perf_counter() - t1
            out["steps"] = int(round(duration / dt))
            out["steps_per_s"] = out["steps"] / out["sim_s"]
            rows = position_rows(system)
            worst = 0.0
            for k in range(len(result.time)):
                u = np.concatenate([result.rigid_poses[k].ravel(), result.displacements[k].astype(float)])
                c = constraint_values(system, u, result.motor_values[k])
                worst = max(worst, float(np.max(np.abs(c[rows]), initial=0.0)))
            out.update(ok=True, max_position_violation_m=worst,
                       newton_iterations_mean=float(np.mean(result.newton_iterations[1:])))
        except Exception as exc:  # report and go on with the next robot
            out.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        if reduced and out.get("ok"):
            try:
                out.update(_reduced_form(system, model, result, motors, duration, dt, store_every, modes))
            except Exception as exc:  # report and go on with the next robot
                out.update(reduced_ok=False, reduced_error=f"{type(exc).__name__}: {exc}")
        out.update(build_s=build_s, wall_s=time.perf_counter() - t0, threads=_threads(),
                   load_average=os.getloadavg()[0])
        print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("rod", "moving", "fourbar", "cantilever", "robots"), default="rod")
    parser.add_argument("--steps", type=int, default=40, help="BDF2 steps per mesh (default 40)")
    parser.add_argument("--only", choices=("coarse", "fine"), default=None)
    parser.add_argument("--duration", type=float, default=1.0, help="robots: simulated time [s] (default 1)")
    parser.add_argument("--dt", type=float, default=5e-4, help="robots: time step [s] (default 0.0005)")
    parser.add_argument("--mesh-scale", type=float, default=1.0,
                        help="robots: multiply every flexible part's axial layer count (default 1)")
    parser.add_argument("--robots", nargs="*", default=None, help="robots: only these robots")
    parser.add_argument("--reduced", action="store_true",
                        help="robots: also train a reduced model on each 1 s full run and simulate it (issue #6)")
    parser.add_argument("--modes", type=int, default=None,
                        help="robots --reduced: deformation modes per component (default: 99.99 %% variance)")
    args = parser.parse_args()
    if args.suite == "fourbar":
        return fourbar_suite()
    if args.suite == "cantilever":
        return cantilever_suite()
    if args.suite == "moving":
        return moving_suite(args.steps, args.mesh_scale)
    if args.suite == "robots":
        return robots_suite(args.duration, args.dt, args.mesh_scale, args.robots, args.reduced, args.modes)
    # coarse: one element layer per 4 diameters (5 325 DOFs); fine: 30 075 DOFs (paper: 30 390), one layer per
    # 0.7 diameters.
    meshes = {"coarse": (35, 8), "fine": (200, 8)}
    for label, (na, nr) in meshes.items():
        if args.only and label != args.only:
            continue
        print(json.dumps(run(label, na, nr, args.steps, 5e-4)), flush=True)


if __name__ == "__main__":
    main()
