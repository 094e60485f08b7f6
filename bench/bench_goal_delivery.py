"""Does a plan hold when its goals reach the servo as a bus delivers them: written every control period and held in
between, each some latency late?

The planner's model has the servo follow its goals continuously and at once. A robot's bus writes them at a rate
(the trajectory server and the driver at 100 Hz by default: the servo's goal is a staircase) and a little late
(DDS, the driver's cycle, the bus transfer). The benchmark plans the motion once for the robot's servo (``retarget
plan ROBOT --motion M --verify-model none --out PLAN.csv``, or takes ``--plan``), then replays the input (naive)
and the plan in the independent servo-beam plant (``retarget.fit.beam_servo``, not the model the plan was
optimized on) with each goal period and latency (``retarget check replay ... --goal-period S --latency S``), and
measures the tip's deviation twice: against the intent with its authored timing, and against the intent delayed by
the delivery's mean delay, ``latency + period / 2`` (``--intent-delay``): the motion's shape, its timing set aside;
and, as the driver writes by default, each write taking the plan half a period ahead (``--goal-lead``), against the
authored timing.

Prints the thread settings, then one JSON line (also written to ``bench/results/goal-delivery-<robot>.json``): per
period and latency the naive and planned peaks and their ratio, the three ways.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_goal_delivery.py \\
        [--robot single_rod] [--motion single_rod/step_30_servo] [--plan PLAN.csv] \\
        [--periods 0,0.005,0.01,0.02] [--latencies 0,0.005,0.01]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from plant_replay import plan_once, replay_figures, retarget_json, thread_settings, write_result  # noqa: E402  (beside)


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robot", default="single_rod")
    parser.add_argument("--motion", default="single_rod/step_30_servo")
    parser.add_argument("--plan", help="a plan of the motion for the robot's servo (default: plan it here)")
    parser.add_argument("--periods", default="0,0.005,0.01,0.02", help="goal periods [s] (0: continuous)")
    parser.add_argument("--latencies", default="0,0.005,0.01", help="latencies [s]")
    args = parser.parse_args()
    threads = thread_settings()
    out: dict[str, object] = {"what": "a plan replayed in the servo-beam plant (retarget check replay) with its goals "
                              "written every period and held, each latency late; the deviation against the intent "
                              "as authored and against the intent delayed by latency + period / 2",
                              "robot": args.robot, "motion": args.motion, "threads": threads}
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_once(args.robot, args.motion, args.plan, Path(tmp), out)
        runs = []
        for period in _floats(args.periods):
            for latency in _floats(args.latencies):
                common = ("check", "replay", args.robot, "--motion", args.motion, "--plan", plan, "--goal-period",
                          str(period), "--latency", str(latency))
                authored = retarget_json(*common)
                delay = latency + period / 2.0
                shifted = retarget_json(*common, "--intent-delay", str(delay))
                runs.append({"goal_period_s": period, "latency_s": latency, "mean_delay_s": delay,
                             **replay_figures(authored), **replay_figures(shifted, "_delayed_intent")})
                if period > 0:  # the driver's default: each write half a period ahead, the authored timing
                    led = retarget_json(*common, "--goal-lead", str(period / 2.0))
                    runs[-1].update(replay_figures(led, "_half_period_lead"))
                print(json.dumps(runs[-1]), flush=True)
        out["runs"] = runs
    write_result("goal-delivery", args.robot, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
