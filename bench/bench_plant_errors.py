"""How well must the robot be known? A plan for the robot's model, replayed in an independent plant whose rod is
stiffer or softer, more or less damped, and whose tip is heavier or lighter than the model's.

The plant is the servo–beam model of a single-rod robot (``retarget.fit.beam_servo``: Euler–Bernoulli elements in
the turning frame, its own implementation of the Dynamixel loop; not the model the planner optimizes on). The
benchmark plans the motion once (``retarget plan ROBOT --motion M --verify-model none --out PLAN.csv``, or takes
``--plan``), then replays the input (naive) and the plan with one of the plant's parameters scaled at a time
(``retarget check replay ROBOT --motion M --plan PLAN.csv --stiffness-factor F | --damping-factor F |
--tip-mass-factor F``): the errors a material fit, a damping estimate and a weighed (or CAD) tip leave.

Prints the thread settings, then one JSON line (also written to ``bench/results/plant-errors-<robot>.json``): per
parameter and factor the naive and planned peak deviation from the intent, their ratio and the plan's ring-out.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_plant_errors.py \\
        [--robot single_rod] [--motion single_rod/step_30_servo] [--plan PLAN.csv] \\
        [--stiffness 0.8,0.9,1.1,1.2] [--damping 0.2,0.5,2,5] [--tip-mass 0.8,0.9,0.95,1.05,1.1,1.2]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from plant_replay import plan_once, replay_figures, retarget_json, thread_settings, write_result  # noqa: E402  (beside)

#: The replay option that scales each parameter.
OPTIONS = {"stiffness": "--stiffness-factor", "damping": "--damping-factor", "tip_mass": "--tip-mass-factor"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robot", default="single_rod")
    parser.add_argument("--motion", default="single_rod/step_30_servo")
    parser.add_argument("--plan", help="a plan of the motion for the robot (default: plan it here)")
    parser.add_argument("--stiffness", default="0.8,0.9,1.1,1.2", help="factors on the plant's Young's modulus")
    parser.add_argument("--damping", default="0.2,0.5,2,5", help="factors on the plant's Rayleigh damping")
    parser.add_argument("--tip-mass", default="0.8,0.9,0.95,1.05,1.1,1.2",
                        help="factors on the tip's mass and inertia")
    args = parser.parse_args()
    threads = thread_settings()
    out: dict[str, object] = {"what": "a plan for the robot's model replayed in the servo-beam plant (retarget check "
                              "replay) with one plant parameter scaled at a time", "robot": args.robot,
                              "motion": args.motion, "threads": threads}
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_once(args.robot, args.motion, args.plan, Path(tmp), out)
        runs = []
        factors = {"stiffness": args.stiffness, "damping": args.damping, "tip_mass": args.tip_mass}
        for parameter, text in factors.items():
            for factor in [1.0] * (parameter == "stiffness") + [float(f) for f in text.split(",")]:
                replayed = retarget_json("check", "replay", args.robot, "--motion", args.motion, "--plan", plan,
                                         OPTIONS[parameter], str(factor))
                runs.append({"parameter": parameter, "factor": factor, **replay_figures(replayed)})
                print(json.dumps(runs[-1]), flush=True)
        out["runs"] = runs
    write_result("plant-errors", args.robot, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
