"""Benchmark of the paper's seven examples, each planned with its default settings through :func:`retarget.planning.plan`.

Each example is a robot and its motion; its settings are the robot's planner-node parameters
(``config/<robot>.params.yaml``: windows, time budget, steps) over :class:`~retarget.planning.PlanOptions`' defaults,
as the ROS planner node plans it. single_rod and two_rods train their reduced model in-process (counted in
``planning_wall_s`` and reported as ``model_wall_s``); the characters plan on a reduced-model artifact in the model
folders (``$RETARGET_MODELS``, ``~/.cache/retarget/models``, ``.cache-models/``), built once by::

    retarget reduce ROBOT --train-motion ROBOT/MOTION --mesh-scale 0.25 --dt 0.002 --out .cache-models/ROBOT-MOTION.npz

(the boxer's with ``--cubature-points``: docs/reduced.md §4; an example without one prints ``"error"`` with that
command), and verified in a verification model trained independently on a finer mesh, kept in the model folders'
``verify/`` subfolder::

    retarget reduce ROBOT --train-motion ROBOT/MOTION --mesh-scale 0.5 --out .cache-models/verify/ROBOT-MOTION.npz

``planning_wall_s`` is the plan's wall time without the re-simulation in the verification model
(``verification_wall_s``; ``total_wall_s`` both).

Prints the thread settings, then one JSON line per example with at least ``example``, ``verified_peak_ratio``
(optimized over naive peak in the full FEM or the verification model, ``verification_model`` says which; null where
neither was available), ``planning_peak_ratio``, ``optimized_peak_torque_ratio``,
``iterations``, ``planning_wall_s``, the stages' timings, each window's iterations and wall time (windowed plans),
the naive/ZVD/optimized deviations, the planning model's file and training settings (``model_file``,
``model_training``: ``ROBOT-MOTION.npz`` in the first model folder that has one, else the newest fresh artifact of
the robot there) and the thread settings;
each line is also written to ``bench/results/example-<robot>.json`` (overwritten: git keeps the old ones).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_examples.py \
        [--verify-model full] [NAME ...]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

#: (robot, motion) of the paper's examples (Table 1), in the paper's order; the single rod's and the boxer's are
#: their paper motions made playable: step_30 with ramps within stall, boxing within the servos' speed and leaning
#: less, so that its plan stays within stall (boxer/boxing asks 1.3-1.7 x stall: docs/optimize.md "Characters").
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("single_rod", "single_rod/step_30_servo"), ("two_rods", "two_rods/swing_90"), ("dancer", "dancer/wave"),
    ("bartender", "bartender/serve"), ("rapper", "rapper/rap"), ("drummer", "drummer/drumming"),
    ("boxer", "boxer/boxing_servo"),
)

#: Examples whose reduced model is trained in-process on the input motion (small robots).
TRAINED_IN_PROCESS = ("single_rod", "two_rods")


def documented_artifact(robot: str, motion_name: str) -> str | None:
    """The example's planning model as the documented command names it (``ROBOT-MOTION.npz`` in the first model
    folder that has one), so that another artifact of the robot dropped into a model folder (a comparison model)
    is not planned on; None: the planner's own search (the newest fresh artifact)."""
    from retarget.sim.reduced.store import artifact_dirs

    name = f"{robot}-{motion_name.split('/')[-1]}.npz"
    return next((str(d / name) for d in artifact_dirs() if (d / name).is_file()), None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="examples to run (robot names; default: all seven)")
    p.add_argument("--results", default=str(Path(__file__).parent / "results"), help="folder for the JSON lines")
    p.add_argument("--verify-model", default=None, metavar="auto|full|none|FILE.npz",
                   help="verification model for every example (default: each robot's planner parameter, else auto)")
    args = p.parse_args()
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                       "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    from retarget.errors import RetargetError
    from retarget.jsonsafe import dumps
    from retarget.model import library
    from retarget.motion import load_motion
    from retarget.planning import PlanProgress, plan
    from retarget.planning.options import options_from_parameters

    chosen = [e for e in EXAMPLES if not args.names or e[0] in args.names]
    unknown = set(args.names) - {e[0] for e in EXAMPLES}
    if unknown:
        p.error(f"unknown examples {sorted(unknown)}; known: {[e[0] for e in EXAMPLES]}")
    for robot, motion_name in chosen:
        params = library.read_ros_parameters(library.resolve_params(library.resolve_robot(robot)))
        options = options_from_parameters(params, allow_training=robot in TRAINED_IN_PROCESS,
                                          verify_model=args.verify_model,
                                          reduced_file=None if robot in TRAINED_IN_PROCESS
                                          else documented_artifact(robot, motion_name))
        started = time.perf_counter()
        line: dict = {"example": robot, "motion": motion_name, "threads": threads}
        try:
            result = plan(robot, load_motion(library.resolve_motion(motion_name)), options,
                          PlanProgress(message=lambda text: print(text, file=sys.stderr)))
        except RetargetError as exc:
            line.update(error=str(exc), planning_wall_s=time.perf_counter() - started)
        else:
            m = result.to_json()
            line.update({k: m.get(k) for k in ("verified_peak_ratio", "planning_peak_ratio", "verification_model",
                                               "optimized_peak_torque_ratio", "iterations", "evaluations",
                                               "cut_reached", "within_stall", "cut_verdict", "budget_limited",
                                               "warnings")})
            for name in ("naive", "zvd", "optimized"):
                if name in m:
                    line[name] = {k: m[name].get(k) for k in ("peak_deviation_m", "rms_deviation_m",
                                                               "peak_torque_ratio")}
            total = time.perf_counter() - started
            verification = float((m.get("verified") or {}).get("wall_s") or 0.0)
            model = m.get("model", {})
            line.update(verified=m.get("verified"), band=m.get("band"), verify=m.get("verify"),
                        method=m.get("method"), timings_s=m.get("timings_s"),
                        check_timings_s=m.get("check_timings_s"), windows=m.get("windows"),
                        model_source=model.get("source"), model_file=model.get("file") or model.get("cache_file"),
                        model_training=model.get("training"), model_wall_s=model.get("wall_s_train_full"),
                        planning_wall_s=total - verification, verification_wall_s=verification, total_wall_s=total,
                        load_average=os.getloadavg())
        text = dumps(line, default=float)
        out = Path(args.results) / f"example-{robot}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(out)
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
