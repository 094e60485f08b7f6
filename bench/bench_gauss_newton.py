"""One Gauss–Newton iteration's linearization on a character: the robust objective's models (nominal, stiffness
× 0.9 and × 1.1) one after another in this process, against the members' runs and tangent passes in the forked
workers while this process runs the nominal model's (:func:`retarget.optimize.gauss_newton.ensemble_gauss_newton`).

Both paths run in one process on the same plan problem and the same point (the input's fit), and must give the same
Hessian and gradient. Prints the thread settings and one JSON object with both wall times and their ratio; writes it
to ``bench/results/gauss-newton-<robot>-<motion>.json``.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_gauss_newton.py \\
        [--robot dancer --motion dancer/wave]

The character's planning model is its ``retarget reduce`` artifact in a model folder (bench/bench_examples.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robot", default="dancer")
    p.add_argument("--motion", default="dancer/wave")
    p.add_argument("--results", default=str(Path(__file__).parent / "results"))
    args = p.parse_args()
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    import numpy as np

    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.optimize.adjoint import Window, evaluate, window_parameters
    from retarget.optimize.gauss_newton import ensemble_gauss_newton, tangent_least_squares
    from retarget.optimize.parallel import default_workers, fork_pool
    from retarget.optimize.problem import build_plan_problem, limits_for
    from retarget.optimize.weights import parse_tracked_bodies
    from retarget.planning.model import planning_model
    from retarget.planning.options import PlanOptions
    from retarget.sim.adapters import planner_engine
    from retarget.sim.reduced.system import with_stiffness_scale

    motion = load_motion(library.resolve_motion(args.motion))
    options = PlanOptions()
    pm = planning_model(args.robot, motion, allow_training=False)
    engine = planner_engine(pm.reduced)
    members = [(f, planner_engine(with_stiffness_scale(pm.reduced, f)))
               for f in options.stiffness_band]
    pp = build_plan_problem(engine, motion, parse_tracked_bodies(pm.config.get("tracked_bodies")),
                            limits_for(pm.model, pm.config), options, members=members)
    assert pp.ensemble is not None
    x = pp.fit.parameters
    nominal = pp.problem
    # Compile every kernel once on a short window so neither path pays for it.
    free = window_parameters(nominal, 0, 20)
    short = replace(nominal, window=Window(0, 20, nominal.start, None, free, x.copy()))
    tangent_least_squares(short, x[free], evaluate(short, x[free], gradient=False).rollout)
    run = pp.evaluate(x, gradient=False).rollout  # the nominal rollout LM has from its accepted trial
    t0 = time.perf_counter()
    h_seq, g_seq = ensemble_gauss_newton(pp, x, run)
    sequential = time.perf_counter() - t0
    workers = default_workers()
    with fork_pool(pp.ensemble.members, workers) as pool:
        forked = replace(pp, ensemble=replace(pp.ensemble, pool=pool))
        t0 = time.perf_counter()
        h_par, g_par = ensemble_gauss_newton(forked, x, run)
        parallel = time.perf_counter() - t0
    same = bool(np.allclose(h_par, h_seq, rtol=1e-10, atol=1e-12 * np.abs(h_seq).max())
                and np.allclose(g_par, g_seq, rtol=1e-10, atol=1e-12 * np.abs(g_seq).max()))
    line = {"robot": args.robot, "motion": args.motion, "parameters": int(x.size), "steps": nominal.n_steps,
            "models": pp.ensemble.size, "workers": workers, "sequential_s": sequential, "forked_s": parallel,
            "speedup": sequential / parallel, "same_hessian_and_gradient": same, "threads": threads,
            "cpus": os.cpu_count(), "load_average": os.getloadavg(), "model": str(pm.info.get("file"))}
    text = json.dumps(line)
    out = Path(args.results) / f"gauss-newton-{args.robot}-{args.motion.replace('/', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
