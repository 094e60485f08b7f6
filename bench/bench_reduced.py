"""Reduced-engine benchmark: compiled reduced steps/s, wall time for the shipped motions, accuracy vs dt, peak RSS.

Prints one JSON object per robot (the last line of each block), with the thread settings. Run on a shared
machine as ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python bench/bench_reduced.py``.

Bases: ``--basis modal`` (default) builds each deformable body's basis from its 6 rigid modes and the lowest
``--modes`` free vibration modes (M-orthonormal), with a cubature trained on random modal states — no full
simulation needed, so the *speed* of the reduced engine can be measured on every robot while the full engine is
too slow to produce training runs; ``--basis artifact --artifact FILE`` uses a trained model
(``retarget reduce``). The per-step cost depends on the mode and cubature-element counts, not on which modes.

Accuracy vs dt: the tracked bodies' positions at dt = 1 ms and 2 ms against dt = 0.5 ms of the same engine
(the compiled engine equals the dense reference stepper to Newton tolerance, tests/reduced/test_compiled.py),
RMS and max over the common samples, relative to the peak deviation of the 0.5 ms run from the quasi-static
start.

Speed: per dt, wall time and CPU time of the compiled loop (``cpu_s``, process time: less sensitive to other load on
a shared machine than wall time), Newton iterations per step, factorizations, and the wall time projected to
``--project`` seconds of motion (default 10 s). ``--profile`` adds a single-thread micro-profile measured inside
numba (thread CPU time, best of 5 batches): µs per residual-only evaluation (and its parts: cubature, constraint
blocks, inertial forces), per residual + exact Jacobian, per condensed LU and per condensed solve.

Usage: ``python bench/bench_reduced.py [--robot single_rod --motion single_rod/step_30] [--modes 15]
[--duration S] [--dts 0.0005,0.001,0.002] [--profile] [--project 10]``
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import time

import numpy as np


def micro_profile(packed, state: np.ndarray, prev: np.ndarray, prev2: np.ndarray, dt: float, theta, theta_dot) -> dict:
    """µs per compiled kernel call at a BDF2 step ``(prev2, prev) → state``, timed inside numba (thread CPU time)."""
    import numba

    from retarget.sim.reduced import compiled as ck
    from retarget.sim.reduced.cubature import cubature_force_value
    from retarget.sim.reduced.dynamics import body_force
    from retarget.sim.reduced.kernels import block_eval

    @numba.njit
    def residual_loop(p, s, ub, vb, h, th, thd, n, jac):  # type: ignore[no-untyped-def]
        for _ in range(n):
            ck.residual_jacobian(p, s, ub, vb, h, th, thd, 1.0 / h, jac)

    @numba.njit
    def cubature_loop(p, s, n):  # type: ignore[no-untyped-def]
        for _ in range(n):
            for d in range(p.bref.shape[0]):
                z = s[p.bzu[d] : p.bzu[d] + p.bsize[d]]
                cubature_force_value(z, p.cub_d[d], p.cub_qw[d], p.cub_w[d], p.bmu[d], p.blam[d])

    @numba.njit
    def blocks_loop(p, s, th, n):  # type: ignore[no-untyped-def]
        u = s[: p.sizes[0]]
        for _ in range(n):
            for bk in range(p.kind.shape[0]):
                ui = p.ui[p.ui_off[bk] : p.ui_off[bk + 1]]
                ul = np.empty(ui.shape[0])
                for k in range(ui.shape[0]):
                    ul[k] = u[ui[k]]
                mot = p.motor[bk]
                block_eval(p.kind[bk], mot >= 0, p.present_a[bk] != 0, p.present_b[bk] != 0, p.fvec[bk], p.fmat[bk],
                           p.separate[bk] != 0, p.y0[bk], p.ymap[bk], ul, th[mot] if mot >= 0 else 0.0)

    @numba.njit
    def inertial_loop(p, s, n):  # type: ignore[no-untyped-def]
        nu = p.sizes[0]
        g = p.gravity
        for _ in range(n):
            for d in range(p.bref.shape[0]):
                ref, rr = p.bref[d], p.bsize[d]
                zd = s[nu + p.bzv[d] : nu + p.bzv[d] + rr]
                body_force(s[7 * ref + 3 : 7 * ref + 7], s[p.bzu[d] : p.bzu[d] + rr], zd, s[nu + 6 * ref + 3 : nu + 6 * ref + 6],
                           g, g, zd, g, ck.body_inertia(p, d))

    @numba.njit
    def lu_loop(p, jac, ws, n):  # type: ignore[no-untyped-def]
        for _ in range(n):
            ck._factorize(p, jac, ws)

    @numba.njit
    def solve_loop(p, ws, res, n):  # type: ignore[no-untyped-def]
        for _ in range(n):
            ck.condensed_solve(p, ws, res)

    def best_us(fn, n: int) -> float:
        fn(1)
        best = np.inf
        for _ in range(5):
            t = time.thread_time()
            fn(n)
            best = min(best, (time.thread_time() - t) / n)
        return best * 1e6

    nu, nv = int(packed.sizes[0]), int(packed.sizes[1])
    ub = (4.0 / 3.0) * prev[:nu] - (1.0 / 3.0) * prev2[:nu]
    vb = (4.0 / 3.0) * prev[nu : nu + nv] - (1.0 / 3.0) * prev2[nu : nu + nv]
    h = 2.0 * dt / 3.0
    th, thd = np.atleast_1d(np.asarray(theta, dtype=float)), np.atleast_1d(np.asarray(theta_dot, dtype=float))
    res, jac, *_ = ck.residual_jacobian(packed, state, ub, vb, h, th, thd, 1.0 / h, True)
    ws = ck.make_workspace(packed)
    return {
        "residual_us": best_us(lambda n: residual_loop(packed, state, ub, vb, h, th, thd, n, False), 50),
        "residual_cubature_us": best_us(lambda n: cubature_loop(packed, state, n), 50),
        "residual_constraint_blocks_us": best_us(lambda n: blocks_loop(packed, state, th, n), 50),
        "residual_inertial_us": best_us(lambda n: inertial_loop(packed, state, n), 50),
        "residual_and_jacobian_us": best_us(lambda n: residual_loop(packed, state, ub, vb, h, th, thd, n, True), 3),
        "condensed_lu_us": best_us(lambda n: lu_loop(packed, jac, ws, n), 3),
        "condensed_solve_us": best_us(lambda n: solve_loop(packed, ws, res, n), 50),
    }


def modal_reduced(system, n_modes: int, seed: int = 0):
    """Reduced system with rigid + lowest vibration modes per body and a trained cubature."""
    import scipy.sparse.linalg as spla

    from retarget.sim.reduced.basis import ReducedBasis, _m_orthonormalize, rigid_modes
    from retarget.sim.reduced.cubature import train_cubature
    from retarget.sim.reduced.system import build_reduced_system, reference_bodies

    refs = reference_bodies(system)
    rng = np.random.default_rng(seed)
    bases, cubs = [], []
    for d, body in enumerate(system.deformable):
        local = body.rest_positions - system.rigid[refs[d]].reference_com
        k0 = body.elastic.tangent_stiffness(np.zeros(body.n_dofs)).tocsc()
        m = body.mass_matrix.tocsc()
        # Shift-invert about a small negative shift: K₀ of a free body is singular (6 rigid modes).
        # A fixed start vector: ARPACK's own is random, and the modes' signs (the cubature's samples) with it.
        start = np.random.default_rng(seed).standard_normal(k0.shape[0])
        vals, vecs = spla.eigsh(k0, k=6 + n_modes, M=m, sigma=-1.0, which="LM", v0=start)
        order = np.argsort(vals)
        elastic = vecs[:, order[6:]]
        rig = rigid_modes(local, body.mass_matrix)
        modes = _m_orthonormalize(np.hstack([rig, elastic]), body.mass_matrix)
        basis = ReducedBasis(modes, 6, 1.0, np.sqrt(np.abs(vals[order[6:]])) / (2 * np.pi))
        # Samples: random elastic states with peak displacement ~1 % of the body size.
        size = float(np.ptp(body.rest_positions, axis=0).max())
        amp = np.abs(modes[:, 6:]).max(axis=0)
        zs = np.zeros((40, modes.shape[1]))
        zs[:, 6:] = rng.normal(size=(40, n_modes)) * (0.01 * size / amp) / np.sqrt(n_modes)
        cubs.append(train_cubature(body.elastic, modes, zs, tolerance=1e-3))
        bases.append(basis)
    return build_reduced_system(system, bases, cubs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robot", action="append", default=None, help="robot name (repeatable)")
    ap.add_argument("--motion", action="append", default=None, help="motion per robot (same order)")
    ap.add_argument("--modes", type=int, default=15, help="deformation modes per body (modal basis)")
    ap.add_argument("--basis", choices=("modal", "artifact"), default="modal")
    ap.add_argument("--artifact", default=None, help="reduced-model file (with --basis artifact)")
    ap.add_argument("--duration", type=float, default=None, help="cap on the simulated time [s]")
    ap.add_argument("--dts", default="0.0005,0.001,0.002", help="time steps [s] (the first is the reference)")
    ap.add_argument("--profile", action="store_true", help="add the single-thread micro-profile")
    ap.add_argument("--project", type=float, default=10.0, help="motion length for the projected wall time [s]")
    args = ap.parse_args()
    robots = args.robot or ["single_rod", "two_rods", "drummer"]
    motions = args.motion or {"single_rod": ["single_rod/step_30"], "two_rods": ["two_rods/swing_90"],
                              "drummer": ["drummer/drumming"]}.get(robots[0], []) if args.robot else [
        "single_rod/step_30", "two_rods/swing_90", "drummer/drumming"]
    threads = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    from retarget.model import library
    from retarget.model.loader import load_robot
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.commands import tracked_links
    from retarget.sim.reduced.engine import pack_system, simulate_compiled
    from retarget.sim.reduced.stepper import solve_static
    from retarget.sim.system import build_system

    dts = [float(x) for x in args.dts.split(",")]
    for robot, motion in zip(robots, motions):
        t0 = time.perf_counter()
        if args.basis == "artifact":
            from retarget.sim.reduced.store import load_artifact

            pm = load_artifact(robot, args.artifact)  # on the mesh it was trained on (its --mesh-scale)
            model, rs = pm.model, pm.reduced
        else:
            model = load_robot(library.resolve_robot(robot))
            system = build_system(model)
            rs = modal_reduced(system, args.modes)
        build_s = time.perf_counter() - t0
        motors, t_end = motors_from_motion(library.resolve_motion(motion), model.motors)
        if args.duration is not None:
            t_end = min(t_end, args.duration)
        packed = pack_system(rs)
        start = solve_static(rs, motors.value(0.0))
        simulate_compiled(rs, motors, 0.01, dts[0], start=start, packed=packed)  # compile / warm caches
        tracked = tracked_links(model, rs.rigid)
        runs = {}
        cpu = {}
        for dt in dts:
            c0 = time.process_time()
            run = simulate_compiled(rs, motors, t_end, dt, start=start, packed=packed)
            cpu[dt] = time.process_time() - c0
            runs[dt] = run
        ref = runs[dts[0]]
        idx = [rs.rigid_index(n) for n in tracked]
        xr = np.stack([ref.states[:, 7 * i : 7 * i + 3] for i in idx], axis=1)
        peak = float(np.max(np.linalg.norm(xr - xr[:1], axis=2)))
        per_dt = []
        for dt in dts:
            run = runs[dt]
            stride = int(round(dt / dts[0]))
            x = np.stack([run.states[:, 7 * i : 7 * i + 3] for i in idx], axis=1)
            xs = xr[::stride][: len(x)]
            err = np.linalg.norm(x[: len(xs)] - xs, axis=2)
            per_dt.append({
                "dt": dt,
                "steps": len(run.time) - 1,
                "wall_s": run.wall_s,
                "steps_per_s": (len(run.time) - 1) / run.wall_s,
                "cpu_s": cpu[dt],
                "steps_per_cpu_s": (len(run.time) - 1) / cpu[dt],
                "projected_wall_s": args.project / t_end * run.wall_s,
                "projected_cpu_s": args.project / t_end * cpu[dt],
                "newton_iterations_mean": float(np.mean(run.newton_iterations[1:])),
                "factorizations": run.factorizations,
                "tracked_rms_error_vs_finest_rel": float(np.sqrt(np.mean(err**2)) / peak) if peak > 0 else 0.0,
                "tracked_max_error_vs_finest_m": float(np.max(err)),
            })
        out = {
            "robot": robot,
            "motion": motion,
            "basis": args.basis,
            "modes": [b.size - b.basis.n_rigid for b in rs.bodies],
            "cubature_elements": [int(len(b.cubature.elements)) for b in rs.bodies],
            "n_state": rs.n_u + rs.n_v + rs.n_lambda,
            "condensed_size": rs.n_v + rs.n_lambda,
            "sim_seconds": t_end,
            "peak_tracked_motion_m": peak,
            "build_s": build_s,
            "runs": per_dt,
            "projected_motion_s": args.project,
            "load_average": os.getloadavg(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "threads": threads,
        }
        if args.profile:
            fine = runs[dts[0]]
            k = len(fine.time) - 1
            out["micro_profile"] = micro_profile(packed, fine.states[k], fine.states[k - 1], fine.states[k - 2], dts[0],
                                                 motors.value(fine.time[k]), motors.derivative(fine.time[k]))
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
