"""Benchmark of a plan: naive vs ZV/ZVD vs optimized on a robot and motion, through the same :func:`retarget.planning.plan`
as ``retarget plan`` (same arguments, same defaults).

Prints the thread settings and, as the last line, one JSON object: ``retarget plan --json``'s metrics plus
``example``, ``threads``, ``load_average`` and ``planning_wall_s`` (model included).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_plan.py single_rod --motion single_rod/step_30_servo
    .venv/bin/python bench/bench_plan.py drummer --motion drummer/drumming --reduced .cache-models/drummer-boxing.npz \\
        --window 1 --time-budget 900

Any option of ``retarget plan`` is accepted (``retarget plan --help``); ``--out`` writes a file (``bench`` adds the
``--result FILE`` to write the JSON line to, e.g. ``bench/results/plan-single_rod.json``).
"""
from __future__ import annotations

import os
import sys
import time


def take_option(argv: list[str], flag: str) -> str | None:
    """The value after ``flag`` in ``argv``, both removed (None when absent)."""
    if flag not in argv:
        return None
    i = argv.index(flag)
    value = argv[i + 1]
    del argv[i : i + 2]
    return value


def emit(out: dict, result_file: str | None) -> None:
    """Print ``out`` as one JSON line and, with ``result_file``, write that line there (replaced whole)."""
    from retarget.jsonsafe import dumps

    line = dumps(out, default=float)
    if result_file:
        tmp = f"{result_file}.tmp"
        with open(tmp, "w") as fh:
            fh.write(line + "\n")
        os.replace(tmp, result_file)
    print(line)


def main() -> int:
    argv = sys.argv[1:]
    result_file = take_option(argv, "--result")
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    from retarget.cli import build_parser
    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.planning import PlanProgress, plan
    from retarget.planning.commands import options_from_args

    args = build_parser().parse_args(["plan", *argv])
    options = options_from_args(args)
    motion = load_motion(args.motion if os.path.isfile(args.motion) else library.resolve_motion(args.motion))
    started = time.perf_counter()

    def iteration(it: dict) -> None:
        where = f" (window {it['window']}/{it['windows']})" if "window" in it else ""
        print(f"iteration {it['iteration']}{where}: J = {it['objective']:.6e}, |g| = {it['gradient_norm']:.3e} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    result = plan(args.robot, motion, options,
                  PlanProgress(iteration=iteration, message=lambda text: print(text, file=sys.stderr)))
    out = {"example": f"{args.robot}/{os.path.basename(str(args.motion)).split('.')[0]}", "robot": args.robot,
           "motion": args.motion, **result.to_json(), "planning_wall_s": time.perf_counter() - started,
           "threads": threads, "load_average": os.getloadavg(), "argv": argv}
    emit(out, result_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
