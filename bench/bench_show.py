"""Benchmark of ``retarget show plan``: a show on local Ray against the same plans one after another in one process.

The show (default: ``--jobs 6`` plans on the tiny robots of ``tests/optimize/tiny_robot.py`` — the 20 cm rod's ramp
and the 50 cm rod's step, with other knot spacings and iteration counts; or ``--show FILE``) runs three ways, its
planning models trained once each beforehand (not timed, reported as ``training_s``):

1. ``serial_one_worker``: in this process, one plan after another, each with ``workers=1``;
2. ``serial_default_pool``: the same with ``PlanOptions.workers`` None (forked processes for the robust members and
   the checks, one per core);
3. ``show``: :func:`retarget.show.runner.run_show` on a local Ray instance with one CPU per core (Ray's start-up
   included), each job one task with ``workers=1``.

Every way writes each job's files (optimized motion, report), as the show does. ``throughput_ratio`` is
``serial_one_worker`` over ``show``; ``vs_default_pool`` is ``serial_default_pool`` over ``show``. Ray's overhead:
``ray_start_s`` (``ray.init``), ``empty_task_s`` (round trip of a no-op task on a warm worker), ``artifact_transfer_s``
(a task receiving the planning model's bytes from the object store), and per job ``task_s − wall_s`` (in the worker,
outside ``plan()``: model landing, writing the report, zipping it) and the driver's share. Sizes of what travels per
job: the model artifact, the motion, the result (zip of its files).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_show.py --result bench/results/show-tiny.json
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_show.py --show bench/show-examples.yaml --result bench/results/show-examples.json

``bench/show-examples.yaml`` is the four fastest examples of ``bench/bench_examples.py`` with their planner-node
settings (about 40 minutes of planning one after another; the characters plan on their ``.cache-models/`` artifacts).

Prints the thread settings, and one JSON object as the last line.
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "optimize"))

OPTIONS = ("max_iterations: {iterations}, dt: 0.005, modes: 2, mesh_axial: {axial}, dt_train: 0.002, "
           "knot_spacing: {knots}, allow_unverified_model: true, verify_dt: 0.001, verify_model: none")


def tiny_show(folder: Path, n_jobs: int) -> Path:
    """A show of ``n_jobs`` plans on the two tiny robots (alternating), in ``folder``."""
    from tiny_robot import write_swinging_rod, write_tiny_robot

    write_tiny_robot(folder / "short")
    write_swinging_rod(folder / "long")
    lines = ["jobs:"]
    for i in range(n_jobs):
        robot, motion, axial = (("short", "ramp.csv", 4) if i % 2 == 0 else ("long", "step.csv", 6))
        knots = (0.04, 0.05)[(i // 2) % 2]
        options = OPTIONS.format(iterations=2 + i // 4, axial=axial, knots=knots)
        lines.append(f"  - {{robot: {robot}/tiny_rod.yaml, motion: {robot}/{motion}, options: {{{options}}}}}")
    path = folder / "show.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def plan_serially(show, workers: int | None, folder: Path) -> dict:
    """Every job planned in this process, one after another, its files written as the show writes them."""
    from retarget.motion import load_motion
    from retarget.planning.run import plan
    from retarget.show.results import write_job_files

    started = time.perf_counter()
    walls = []
    for job in show.jobs:
        motion = load_motion(job.motion_path)
        result = plan(job.robot_path, motion, replace(job.options, workers=workers))
        write_job_files(result, motion, folder / f"job{job.index}")
        walls.append(result.wall_s)
    return {"wall_s": time.perf_counter() - started, "plan_wall_s": walls}


def ray_overheads(artifact: Path | None) -> dict:
    """Ray's fixed costs on this machine: start-up, a no-op task's round trip, the model artifact's transfer."""
    import ray

    started = time.perf_counter()
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    out = {"ray_start_s": time.perf_counter() - started}
    env = {"runtime_env": {"env_vars": {"OMP_NUM_THREADS": "1"}}}

    @ray.remote(num_cpus=1)
    def nothing(data=None):
        return 0 if data is None else len(data)

    ray.get(nothing.options(**env).remote())  # a worker started
    rounds = []
    for _ in range(20):
        t = time.perf_counter()
        ray.get(nothing.options(**env).remote())
        rounds.append(time.perf_counter() - t)
    out["empty_task_s"] = sorted(rounds)[len(rounds) // 2]
    if artifact is not None:
        data = artifact.read_bytes()
        transfers = []
        for _ in range(5):
            t = time.perf_counter()
            ray.get(nothing.options(**env).remote(ray.put(data)))
            transfers.append(time.perf_counter() - t)
        out["artifact_transfer_s"] = sorted(transfers)[len(transfers) // 2]
    ray.shutdown()
    return out


def _phase(name: str, wall_s: float, per_job: list[float] | None = None) -> None:
    """One line on stderr as each way finishes (a long run's figures survive an interruption)."""
    jobs = "" if per_job is None else " jobs " + " ".join(f"{w:.1f}" for w in per_job)
    print(f"{name}: {wall_s:.1f} s{jobs}; load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", default=None, help="a show file (default: the tiny robots' show)")
    parser.add_argument("--jobs", type=int, default=6, help="jobs of the tiny show (default 6)")
    parser.add_argument("--result", default=None, help="also write the JSON line to this file")
    args = parser.parse_args()
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    from retarget.motion import load_motion
    from retarget.planning.model import planning_model
    from retarget.show.runner import THREAD_ENV, run_show
    from retarget.show.showfile import load_show

    work = Path(tempfile.mkdtemp(prefix="bench-show-"))
    if args.show is None:  # the tiny robots: a private model cache; a show file: the user's caches and folders
        os.environ.setdefault("RETARGET_CACHE", str(work / "cache"))
        os.environ.setdefault("RETARGET_MODELS", str(work / "models"))
    show = load_show(args.show or tiny_show(work, args.jobs))
    started = time.perf_counter()
    artifacts = set()
    for job in show.jobs:  # each planning model trained (or found) once, before anything is timed
        o = job.options
        pm = planning_model(job.robot_path, load_motion(job.motion_path), n_modes=o.modes, dt_train=o.dt_train,
                            mesh_axial=o.mesh_axial, mesh_around=o.mesh_around, reduced_file=o.reduced_file)
        if pm.info.get("cache_file"):
            artifacts.add(Path(pm.info["cache_file"]))
    training_s = time.perf_counter() - started
    _phase("training", training_s)
    # Warm the kernels in this process (numba's disk cache loaded once), as the serial runs would have them.
    warm = plan_serially(type(show)(show.path, show.jobs[:1]), 1, work / "warm")
    _phase("warm-up", warm["wall_s"])
    one = plan_serially(show, 1, work / "serial1")
    _phase("serial_one_worker", one["wall_s"], one["plan_wall_s"])
    pool = plan_serially(show, None, work / "pool")
    _phase("serial_default_pool", pool["wall_s"], pool["plan_wall_s"])
    overheads = ray_overheads(max(artifacts, key=lambda p: p.stat().st_size) if artifacts else None)
    summary = run_show(show, work / "show")
    _phase("show", summary.wall_s)
    rows = [r for r in summary.rows if r.status.value == "done"]
    result_sizes = [sum(f.stat().st_size for f in (work / "show" / r.folder).rglob("*") if f.is_file())
                    for r in rows]
    out = {
        "benchmark": "show", "show": str(args.show or "tiny robots"), "jobs": len(show.jobs), "cpus": os.cpu_count(),
        "threads": threads, "task_threads": THREAD_ENV, "load_average": list(os.getloadavg()),
        "training_s": training_s, "warm_up_s": warm["wall_s"],
        "serial_one_worker_s": one["wall_s"], "serial_default_pool_s": pool["wall_s"],
        "show_s": summary.wall_s, "show_done": len(rows), "show_ray": summary.ray,
        "throughput_ratio": one["wall_s"] / summary.wall_s,
        "vs_default_pool": pool["wall_s"] / summary.wall_s,
        **overheads,
        "per_job_worker_overhead_s": [r.task_s - r.wall_s for r in rows if r.task_s is not None],
        "per_job_plan_wall_s_show": [r.wall_s for r in rows],
        "per_job_plan_wall_s_serial": one["plan_wall_s"],
        "artifact_bytes": sorted(p.stat().st_size for p in artifacts),
        "motion_pickle_bytes": [len(pickle.dumps(load_motion(j.motion_path))) for j in show.jobs],
        "result_bytes": result_sizes,
    }
    from retarget.jsonsafe import dumps

    line = dumps(out)
    if args.result:
        Path(args.result).write_text(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
