"""The servo in the twin across processes: what the emulated bus reports while its servo holds single_rod's rod
horizontal.

Starts ``python -m retarget.dynamixel.emulator --twin reduced`` for single_rod with a reduced model (``--reduced``,
default: tests/twin/conftest.py's cheap test model, built into a temporary folder, ~10 s), then, as the driver does,
over the real Dynamixel SDK: configure, write the robot's servo gains (read back), torque on, and once the worker's
simulation runs, a Goal Position step from 0 (upright) to 90° (horizontal). It samples Present Position for
``--seconds`` and prints the trace, the final Present Position error (the sag), Present Current and PWM, and the
worker's log lines (real-time factor, lag).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_twin_sag.py

The last line is one JSON object: ``sag_rad``, ``sag_ticks``, ``current_a``, ``pwm``, ``trace`` (time [s], error
[rad]) and ``worker_log``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _test_model(folder: Path) -> Path:
    spec = importlib.util.spec_from_file_location("twin_conftest", REPO / "tests" / "twin" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module.cantilever_reduced_artifact(folder / "single_rod_twin.npz")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reduced", type=Path, default=None, help="single_rod model artifact (default: the test model)")
    p.add_argument("--seconds", type=float, default=6.0, help="how long to sample after the step [s]")
    args = p.parse_args()

    from retarget.dynamixel.bus import DynamixelBus
    from retarget.dynamixel.robot_servos import servos_for_joints

    with tempfile.TemporaryDirectory(prefix="bench-twin-") as tmp:
        folder = Path(tmp)
        model = args.reduced or _test_model(folder)
        link, log = folder / "ttyDXL", folder / "emulator.log"
        with open(log, "w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "retarget.dynamixel.emulator", "--ids", "1", "--link", str(link),
                 "--return-delay-us", "0", "--json", "--twin", "reduced", "--robot", "single_rod", "--reduced",
                 str(model), "--twin-channel", str(folder / "twin.poses"), "--twin-max-lag", "60"],
                stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            assert proc.stdout is not None
            proc.stdout.readline()  # ready
            goal = np.pi / 2
            with DynamixelBus(str(link), ids=[1], latency_timer_ms=100) as bus:
                bus.configure(return_delay_us=0)
                gains = bus.write_servo_gains(servos_for_joints("single_rod", ["base_pitch"]))
                bus.set_torque(True)
                deadline = time.monotonic() + 300.0
                while "simulation started" not in log.read_text():
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit(f"no simulation: {log.read_text()}")
                    time.sleep(0.2)
                start = time.monotonic()
                bus.write_goal_positions(np.array([goal]))
                trace = []
                while time.monotonic() - start < args.seconds:
                    trace.append((time.monotonic() - start, float(bus.read_state().position[0] - goal)))
                    time.sleep(0.05)
                state = bus.read_state()
                pwm = bus.read(1, "Present PWM")
        finally:
            proc.terminate()
            proc.wait(10)
        worker = [line for line in log.read_text().splitlines() if line.startswith("twin:")]
    sag = float(state.position[0] - goal)
    for t, e in trace[::10]:
        print(f"t {t:4.1f} s  Present Position - goal {e:+.4f} rad")
    print(f"gains {gains}; sag {sag:.4f} rad ({sag / (2 * np.pi / 4096):.0f} ticks), current "
          f"{state.current[0]:.3f} A, PWM {pwm}")
    print("\n".join(worker))
    print(json.dumps({"sag_rad": sag, "sag_ticks": round(sag / (2 * np.pi / 4096)), "current_a": float(state.current[0]),
                      "pwm": int(pwm), "trace": trace, "worker_log": worker}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
