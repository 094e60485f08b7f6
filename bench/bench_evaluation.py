"""One planner evaluation (forward rollout + discrete adjoint) timed stage by stage, per linearization thread count.

The backward pass linearizes every step at the stored forward states (exact Jacobian + condensed LU), independent
of each other, so `retarget.sim.adapters.step_sensitivities` computes them ahead on several threads. This
measures what that buys: for each ``--workers`` count, the forward rollout and the backward pass (best of
``--repeats``), and checks that the gradients are identical.

``--dispatch kernels,numba`` also compares how the engine calls its compiled kernels: through
:class:`retarget.sim.reduced.compiled.Kernels` (the engine's way) or through numba's dispatcher on every call, which
types the 40-array packed system each time (what the engine did before ``Kernels``). ``--newton strict,planner``
compares the Newton stopping tests: the update size alone (``reduced_engine``'s default) against the planner's
(:func:`retarget.sim.adapters.planner_engine`, the remaining-error estimate too), and reports the largest
difference of their gradients relative to the largest gradient entry.

    NUMBA_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python bench/bench_evaluation.py drummer \\
        drummer/drumming --reduced .cache-models/drummer-boxing-v2.npz --dt 0.005 --duration 4 --workers 1,2

The targets are solved at every ``--target-stride``-th step only (default 20): they set the objective's values,
not its cost. Prints the thread settings and, as the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import time


def _dispatched(packed: object) -> object:
    """The engine's kernels called through numba's dispatcher every time (``--dispatch numba``)."""
    from retarget.sim.reduced.compiled import Kernels

    class Dispatched(Kernels):
        def __call__(self, kernel, *args):
            return kernel(self.packed, *args)

    return Dispatched(packed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robot")
    p.add_argument("motion")
    p.add_argument("--reduced", default=None, metavar="FILE", help="reduced model (.npz artifact)")
    p.add_argument("--mesh-axial", type=int, default=20, help="as bench_plan.py (its cached models are reused)")
    p.add_argument("--mesh-around", type=int, default=6)
    p.add_argument("--dt-train", type=float, default=1e-3)
    p.add_argument("--dt", type=float, default=0.005)
    p.add_argument("--duration", type=float, default=None, help="plan only this much of the motion [s]")
    p.add_argument("--knot-spacing", type=float, default=0.05)
    p.add_argument("--target-stride", type=int, default=20)
    p.add_argument("--workers", default="1,2", help="comma-separated linearization thread counts")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--newton", default="planner", help="comma-separated Newton stopping tests: planner (the "
                   "planner's, with the remaining-error estimate), strict (the update size alone)")
    p.add_argument("--dispatch", default="kernels", help="comma-separated: kernels (the engine's), numba (numba's "
                   "dispatcher on every call)")
    args = p.parse_args()
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", flush=True)

    import numpy as np

    import retarget.optimize.adjoint as adjoint
    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.sim.adapters import planner_engine, step_sensitivities
    from retarget.planning.options import PlanOptions
    from retarget.optimize.problem import build_plan_problem, limits_for
    from retarget.planning.model import DEFAULT_PLAN_MODES, planning_model
    from retarget.optimize.weights import parse_tracked_bodies

    motion = load_motion(library.resolve_motion(args.motion))
    pm = planning_model(args.robot, motion, n_modes=DEFAULT_PLAN_MODES, dt_train=args.dt_train,
                        mesh_axial=args.mesh_axial, mesh_around=args.mesh_around, reduced_file=args.reduced)
    engine = planner_engine(pm.reduced)
    options = PlanOptions(knot_spacing=args.knot_spacing, dt=args.dt, duration=args.duration,
                          target_stride=args.target_stride, baselines=False)
    pp = build_plan_problem(engine, motion, parse_tracked_bodies(pm.config.get("tracked_bodies")),
                            limits_for(pm.model, pm.config), options)
    problem, x = pp.problem, pp.fit.parameters
    adjoint.evaluate(problem, x)  # compile / warm caches
    rows, gradients = [], {}
    own = engine.kernels
    for newton, dispatch in ((nt, d) for nt in args.newton.split(",") for d in args.dispatch.split(",")):
        engine.estimate = newton == "planner"
        engine.kernels = own if dispatch == "kernels" else _dispatched(own.packed)
        for workers in (int(w) for w in args.workers.split(",")):
            # The backward pass looks the function up in its module: pin the worker count there.
            adjoint.step_sensitivities = functools.partial(step_sensitivities, workers=workers)
            best = {"forward_s": np.inf, "backward_s": np.inf, "total_s": np.inf}
            for _ in range(args.repeats):
                marks: dict[str, float] = {}
                n = problem.n_steps

                def progress(k: int, total: int, marks: dict = marks) -> None:
                    if k >= n and "forward" not in marks:
                        marks["forward"] = time.perf_counter()

                t0 = time.perf_counter()
                ev = adjoint.evaluate(problem, x, progress=progress)
                t1 = time.perf_counter()
                best = {"forward_s": min(best["forward_s"], marks["forward"] - t0),
                        "backward_s": min(best["backward_s"], t1 - marks["forward"]),
                        "total_s": min(best["total_s"], t1 - t0)}
            gradients[newton, dispatch, workers] = ev.gradient
            rows.append({"newton": newton, "dispatch": dispatch, "workers": workers, **best})
            print(f"{newton}, {dispatch}, workers {workers}: forward {best['forward_s']:.2f} s, backward "
                  f"{best['backward_s']:.2f} s, total {best['total_s']:.2f} s", flush=True)
    engine.kernels = own
    engine.estimate = True
    adjoint.step_sensitivities = step_sensitivities
    by_newton: dict[str, list] = {}
    for (newton, _, _), g in gradients.items():
        by_newton.setdefault(newton, []).append(g)
    firsts = [gs[0] for gs in by_newton.values()]
    out = {"robot": args.robot, "motion": args.motion, "dt": args.dt, "steps": problem.n_steps,
           "parameters": int(x.size), "reduced_unknowns": int(engine.n_state), "rows": rows,
           "gradients_identical": all(np.array_equal(g, gs[0]) for gs in by_newton.values() for g in gs),
           "gradient_rel_difference": max(float(np.max(np.abs(g - firsts[0])) / np.max(np.abs(firsts[0])))
                                          for g in firsts),
           "load_average": os.getloadavg(), "threads": threads}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
