"""A plan for a servo identified on the robot, replayed in an independent plant: the servo issue's check end to end.

The plant is the servo–beam model of a single-rod robot (``retarget.fit.beam_servo``: Euler–Bernoulli elements in
the turning frame, its own implementation of the Dynamixel loop; not the model the planner optimizes on) with a
"true" servo the planner is not told. The benchmark

1. records a step test on the plant as the servo's own feedback would: goal and present position at 100 Hz,
   quantized to 4096 ticks per turn, the first second missing (``time [s], goal [rad], present [rad]``);
2. identifies the servo from it (``retarget fit-servo ROBOT --recording REC.csv --out SERVO.yaml``);
3. plans the motion for the fitted servo (``retarget plan ROBOT --motion M --servo SERVO.yaml --out PLAN.csv``) and,
   for comparison, for the true servo (its parameters written into the robot's config);
4. replays the input (naive) and each plan in the plant with the true servo (``retarget check replay``).

Prints the thread settings, then one JSON line (also written to ``bench/results/servo-plan-<robot>.json``): the
true and fitted servo, each plan's peak ratio on the plant, the planner's own verified ratio, wall times.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_servo_plan.py \\
        [--robot single_rod] [--motion single_rod/step_30_servo] [--p-gain 920] [--rotor-inertia 2.8e-3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def retarget_json(*args: str) -> dict:
    """Run ``retarget ARGS --json`` in a fresh process; its last stdout line as JSON."""
    proc = subprocess.run([sys.executable, "-m", "retarget.cli", *args, "--json"], capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"retarget {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def step_recording(rig, servo, path: Path, amplitude: float, hold: float, rate: float, seed: int) -> None:
    """A goal step recorded on the plant as the servo reports it (module docstring)."""
    from retarget.fit.beam_servo import build_servo_beam

    plant = build_servo_beam(rig, servo=servo)
    dt = 1e-3
    time_s = np.arange(0.0, 1.5 + hold, dt)
    goal = np.where(time_s >= 1.5, amplitude, 0.0)
    run = plant.simulate(time_s, goal, np.zeros_like(goal))
    keep = np.arange(0, len(time_s), int(round(1.0 / (rate * dt))))
    keep = keep[time_s[keep] >= 1.0]  # the first second is missing
    tick = 2.0 * np.pi / 4096.0
    rng = np.random.default_rng(seed)
    present = np.round((run.shaft[keep] + rng.normal(0.0, 0.2 * tick, len(keep))) / tick) * tick
    rows = "\n".join(f"{float(t)!r},{float(g)!r},{float(p)!r}"
                     for t, g, p in zip(time_s[keep], goal[keep], present))
    path.write_text("time [s],goal [rad],present [rad]\n" + rows + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robot", default="single_rod")
    p.add_argument("--motion", default="single_rod/step_30_servo")
    p.add_argument("--p-gain", type=float, default=920.0, help="the true servo's Position P Gain (factory 800)")
    p.add_argument("--rotor-inertia", type=float, default=2.8e-3, help="the true reflected rotor inertia [kg m²]")
    p.add_argument("--viscous-friction", type=float, default=0.01, help="the true viscous friction [N m s/rad]")
    p.add_argument("--step", type=float, default=0.17, help="the step test's goal step [rad]")
    p.add_argument("--results", default=str(Path(__file__).parent / "results"))
    args = p.parse_args()
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    import yaml

    from retarget.fit.rig import load_rig
    from retarget.model.library import resolve_robot
    from retarget.model.servo import servo_params

    rig = load_rig(args.robot)
    base = rig.servo
    true = servo_params({"model": base.model, "p_gain": args.p_gain, "rotor_inertia": args.rotor_inertia,
                         "viscous_friction": args.viscous_friction, "stall_torque": base.stall_torque,
                         "max_velocity": base.max_velocity})
    out: dict = {"robot": args.robot, "motion": args.motion, "threads": threads, "true_servo": true.to_config()}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rec = folder / "step.csv"
        step_recording(rig, true, rec, args.step, 3.0, 100.0, 0)
        t0 = time.perf_counter()
        fitted = retarget_json("fit-servo", args.robot, "--recording", str(rec), "--out", str(folder / "servo.yaml"))
        out["fit_wall_s"] = time.perf_counter() - t0
        out["fitted_servo"] = {k: fitted.get(k) for k in ("kp", "ki", "kd", "rotor_inertia", "coulomb_friction",
                                                          "viscous_friction")}
        out["fit_held"] = fitted.get("held")
        true_file = folder / "true_servo.yaml"  # not true.yaml: plan --out true.csv writes its trajectory there
        true_file.write_text(yaml.safe_dump({"servo": true.to_config()}))
        # The true servo's robot: the robot's config with the true servo section.
        cfg = yaml.safe_load(Path(resolve_robot(args.robot)).read_text())
        cfg["retarget"]["servo"] = true.to_config()
        cfg["retarget"]["urdf"] = str((Path(resolve_robot(args.robot)).parent.parent / "urdf"
                                       / cfg["retarget"]["urdf"]).resolve())
        true_robot = folder / f"{args.robot}.yaml"
        true_robot.write_text(yaml.safe_dump(cfg))
        for name, plan_args in (("fitted", [args.robot, "--servo", str(folder / "servo.yaml")]),
                                ("true", [str(true_robot)])):
            t0 = time.perf_counter()
            planned = retarget_json("plan", *plan_args, "--motion", args.motion, "--out", str(folder / f"{name}.csv"))
            wall = time.perf_counter() - t0
            replayed = retarget_json("check", "replay", args.robot, "--motion", args.motion, "--plan",
                                     str(folder / f"{name}.csv"), "--servo", str(true_file))
            out[f"plan_for_{name}"] = {"planner_verified_peak_ratio": planned.get("verified_peak_ratio"),
                                       "planner_peak_torque_ratio": (planned.get("optimized") or {}).get(
                                           "peak_torque_ratio"),
                                       "plant_peak_ratio": replayed["peak_ratio"],
                                       "plant_naive_peak_m": replayed["naive"]["peak_deviation_m"],
                                       "plant_plan_peak_m": replayed["plan"]["peak_deviation_m"],
                                       "plant_peak_torque_ratio": replayed["plan"]["peak_torque_ratio"],
                                       "plan_wall_s": wall}
    line = json.dumps(out)
    print(line)
    Path(args.results).mkdir(parents=True, exist_ok=True)
    (Path(args.results) / f"servo-plan-{args.robot}.json").write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
