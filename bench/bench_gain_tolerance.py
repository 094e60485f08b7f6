"""How well must the servo's gain be known? A plan for the robot's configured servo, replayed in an independent plant
whose servo loop is stiffer or softer than the one planned for.

The plant is the servo–beam model of a single-rod robot (``retarget.fit.beam_servo``: Euler–Bernoulli elements in
the turning frame, its own implementation of the Dynamixel loop; not the model the planner optimizes on). The
benchmark plans the motion once for the robot's servo (``retarget plan ROBOT --motion M --verify-model none --out
PLAN.csv``, or takes ``--plan``), then replays the input (naive) and the plan with the Position P Gain of the plant's
servo at each factor × the planned one (``retarget check replay ROBOT --motion M --plan PLAN.csv --p-gain P``). A
factor stands for what moves a real servo's loop stiffness: its supply voltage, the motor's temperature (winding
resistance), a gain changed after planning.

Prints the thread settings, then one JSON line (also written to ``bench/results/gain-tolerance-<robot>.json``): per
factor the P gain, the naive and planned peak deviation from the intent, their ratio and the plan's ring-out.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_gain_tolerance.py \\
        [--robot single_rod] [--motion single_rod/step_30_servo] [--plan PLAN.csv] \\
        [--factors 0.7,0.8,0.9,0.95,1,1.05,1.1,1.2,1.3]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from plant_replay import plan_once, replay_figures, retarget_json, thread_settings, write_result  # noqa: E402  (beside)


def _planned_p_gain(robot: str) -> float:
    """The Position P Gain of the robot's (first) servo, from its kp and stall torque (docs/servo.md)."""
    from retarget.model.library import resolve_robot
    from retarget.model.servo import table_from_si
    from retarget.model.servo_file import robot_servos

    return float(table_from_si(robot_servos(resolve_robot(robot))[1][0])["Position P Gain"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robot", default="single_rod")
    parser.add_argument("--motion", default="single_rod/step_30_servo")
    parser.add_argument("--plan", help="a plan of the motion for the robot's servo (default: plan it here)")
    parser.add_argument("--factors", default="0.7,0.8,0.9,0.95,1,1.05,1.1,1.2,1.3",
                        help="the plant's P gain as multiples of the planned one")
    args = parser.parse_args()
    threads = thread_settings()
    p_planned = _planned_p_gain(args.robot)
    out: dict[str, object] = {"what": "a plan for the robot's servo replayed in the servo-beam plant (retarget check "
                              "replay) with the servo's P gain scaled", "robot": args.robot, "motion": args.motion,
                              "p_gain_planned": p_planned, "threads": threads}
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_once(args.robot, args.motion, args.plan, Path(tmp), out)
        runs = []
        for factor in (float(f) for f in args.factors.split(",")):
            p_gain = round(p_planned * factor)
            replayed = retarget_json("check", "replay", args.robot, "--motion", args.motion, "--plan", plan,
                            "--p-gain", str(p_gain))
            runs.append({"factor": factor, "p_gain": p_gain, **replay_figures(replayed)})
            print(json.dumps(runs[-1]), flush=True)
        out["runs"] = runs
    write_result("gain-tolerance", args.robot, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
