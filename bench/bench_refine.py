"""The closed loop of ``retarget refine`` on a plant with a model error: three trials of a plan of the single rod.

The "robot" is the servo-beam plant (`retarget.fit.plant_trial`, none of the planner's code) with the model error the
planner does not know: Young's modulus x 0.93, Rayleigh damping alpha 0.3 1/s and beta 3e-5 s (the library's 0.2 and
2e-5), the servo's P gain x 1.3, 15 ms latency on the goal. Each trial is recorded as a Motive CSV export at 120 Hz
with 0.3 mm marker noise, in a capture frame rotated and offset from the robot's (Y up, then roll/pitch/yaw
7/-12/35 deg, offset 0.4/0.9/-1.7 m), starting late or early; the export goes to `retarget refine` (the CLI, as a
user runs it), whose NEXT is played as the next trial. Three trials in all (CURRENT, then two refined plans).

    python bench/bench_refine.py single_rod --motion single_rod/step_30_servo --plan PLAN.csv [--out DIR]

PLAN.csv is `retarget plan single_rod --motion single_rod/step_30_servo --out PLAN.csv` (made here when missing).
Writes bench/results/refine-<robot>-<motion>.json: per trial the plant's peak, RMS and ring-out deviation from its
intent (plant clock, and against the intent delayed by the latency), peak torque over stall, and what refine
measured and predicted; the naive playback on the same plant; the acceptance (peak after three trials at most 0.05 x
naive and 0.5 x trial 1's, never rising, every trial within stall).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cli(args: list[str]) -> tuple[int, dict, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "retarget.cli", *args], capture_output=True, text=True, env=env,
                          check=False)
    wall = time.perf_counter() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        last = json.loads(lines[-1]) if lines else {}
    except ValueError:
        last = {}
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
    else:
        sys.stdout.write("\n".join(lines[:-1]) + "\n")
    return proc.returncode, last, wall


def main(argv: list[str] | None = None) -> int:
    from retarget.fit.plant_trial import CaptureSettings, PlantPerturbation, play_trial, write_take
    from retarget.fit.rig import load_rig
    from retarget.model import library
    from retarget.motion import load_motion

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("robot")
    p.add_argument("--motion", required=True)
    p.add_argument("--plan", required=True, help="CURRENT of trial 1 (made with `retarget plan` when missing)")
    p.add_argument("--out", default=None, help="folder for the takes and plans (default: beside --plan)")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--youngs-factor", type=float, default=0.93)
    p.add_argument("--alpha", type=float, default=0.3)
    p.add_argument("--beta", type=float, default=3e-5)
    p.add_argument("--kp-factor", type=float, default=1.3)
    p.add_argument("--latency", type=float, default=0.015)
    p.add_argument("--robot-clock", action="store_true", help="the takes' time column is the robot's clock (0 at the "
                   "motion's start) instead of Motive's (0 at the take's first frame)")
    p.add_argument("--refine-args", default="", help="extra arguments for `retarget refine`")
    p.add_argument("--result", default=None, help="JSON result (default bench/results/refine-<robot>-<motion>.json)")
    args = p.parse_args(argv)

    plan = Path(args.plan)
    folder = Path(args.out) if args.out else plan.parent
    folder.mkdir(parents=True, exist_ok=True)
    commands = []
    if not plan.is_file():
        cmd = ["plan", args.robot, "--motion", args.motion, "--out", str(plan), "--json"]
        code, _, wall = _cli(cmd)
        commands.append({"command": "retarget " + " ".join(cmd), "exit": code, "wall_s": wall})
        if code != 0:
            return code
    rig = load_rig(args.robot)
    motion_path = Path(args.motion) if Path(args.motion).is_file() else library.resolve_motion(args.motion)
    motion = load_motion(motion_path)
    perturbation = PlantPerturbation(youngs_factor=args.youngs_factor, alpha=args.alpha, beta=args.beta,
                                     kp_factor=args.kp_factor, latency_s=args.latency)
    leads = (-0.25, 0.8, 0.3, 0.5, 0.1)
    naive = play_trial(rig, motion, motion, perturbation)
    print(f"naive on the plant: peak {1e3 * naive.metrics.peak_deviation_m:.2f} mm, torque "
          f"{naive.metrics.peak_torque_ratio:.2f} x stall")
    trials = []
    current = plan
    for k in range(1, args.trials + 1):
        run = play_trial(rig, motion, load_motion(current), perturbation)
        entry = {"trial": k, "plan": str(current), "plant": asdict(run.metrics)}
        print(f"trial {k}: plant peak {1e3 * run.metrics.peak_deviation_m:.2f} mm (delayed intent "
              f"{1e3 * run.metrics.delayed_peak_deviation_m:.2f} mm), RMS {1e3 * run.metrics.rms_deviation_m:.2f} mm, "
              f"ring-out {1e3 * run.metrics.ring_out_peak_m:.2f} mm, torque {run.metrics.peak_torque_ratio:.2f} x "
              "stall")
        if k < args.trials:
            capture = CaptureSettings(body="tip", rate_hz=120.0, noise_m=3e-4, rotation_rpy_deg=(7.0, -12.0, 35.0),
                                      offset_m=(0.4, 0.9, -1.7), lead_s=leads[(k - 1) % len(leads)], tail_s=0.4,
                                      seed=100 + k, robot_clock=args.robot_clock)
            take = write_take(run, capture, folder / f"take{k}.csv")
            nxt = folder / f"plan{k + 1}.csv"
            cmd = ["refine", args.robot, "--motion", args.motion, "--plan", str(current), "--recording", str(take),
                   "--body", "tip_mass=tip", "--out", str(nxt), "--json", *args.refine_args.split()]
            code, out, wall = _cli(cmd)
            commands.append({"command": "retarget " + " ".join(cmd), "exit": code, "wall_s": wall})
            entry["refine"] = {key: out.get(key) for key in (
                "measured_peak_deviation_m", "predicted_peak_deviation_m", "peak_torque_ratio",
                "measured_rms_deviation_m", "measured_ring_out_peak_m", "decision", "route", "route_reason",
                "model_fit", "message")}
            entry["refine"]["alignment"] = out.get("alignment")
            entry["refine"]["step"] = out.get("step")
            entry["refine"]["wall_s"] = wall
            if code != 0:
                trials.append(entry)
                print(f"refine failed (exit {code})")
                break
            current = nxt
        trials.append(entry)
    peaks = [t["plant"]["peak_deviation_m"] for t in trials]
    delayed = [t["plant"]["delayed_peak_deviation_m"] for t in trials]
    naive_peak = naive.metrics.peak_deviation_m
    acceptance = {
        "final_over_naive": peaks[-1] / naive_peak,
        "final_over_trial1": peaks[-1] / peaks[0],
        "never_rising": all(b <= a for a, b in pairwise(peaks)),
        "within_stall": all(t["plant"]["peak_torque_ratio"] <= 1.0 for t in trials),
        "delayed_final_over_naive": delayed[-1] / naive.metrics.delayed_peak_deviation_m,
        "delayed_final_over_trial1": delayed[-1] / delayed[0],
        "delayed_never_rising": all(b <= a for a, b in pairwise(delayed)),
    }
    acceptance["passes"] = (acceptance["final_over_naive"] <= 0.05 and acceptance["final_over_trial1"] <= 0.5
                            and acceptance["never_rising"] and acceptance["within_stall"])
    result = {"what": "three trials of retarget refine on the servo-beam plant with a model error",
              "robot": args.robot, "motion": args.motion, "perturbation": asdict(perturbation),
              "capture": "Motive CSV 1.23, mm, 120 Hz, 0.3 mm noise, Y up then rpy (7, -12, 35) deg, offset "
                         "(0.4, 0.9, -1.7) m, capture start (s before the motion) " + str(list(leads[:args.trials]))
                         + (", time column in the robot's clock" if args.robot_clock else
                            ", time column from the take's first frame (Motive's)"),
              "command": "python bench/bench_refine.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "naive": asdict(naive.metrics), "trials": trials, "acceptance": acceptance, "commands": commands}
    out = Path(args.result) if args.result else ROOT / "bench" / "results" / \
        f"refine-{args.robot}-{Path(str(args.motion)).stem}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(acceptance))
    return 0


if __name__ == "__main__":
    sys.exit(main())
