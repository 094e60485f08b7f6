"""Why the planner has a settle refinement: on a one-mode model of the single rod, the best least-squares plans of
the servo-feasible 30° step-and-return and what they leave across Young's modulus × 0.9 … × 1.1.

The surrogate: the rod's first mode as a base-excited oscillator ``φ'' = ω² (θ − φ) − 2ζω φ'`` (tip deviation
``L (φ − θ_target)``), ``θ`` the motor's cubic B-spline with the planner's knot spacing, simulated exactly for a
piecewise-linear input. Its ``f1``, ``L`` and ``ζ`` reproduce the full FEM's naive playback (peak and ring-out at E × 1,
× 0.9, × 1.1: printed beside the full FEM's from ``bench/results/plan-single_rod-step_30_servo.json``). On it:

the minimizer of the tracking integral over E × {0.9, 1, 1.1} (the planner's robust objective) with the ring-out
weighted by the settle weight, the motor at rest from 0.3 s after the motion — the optimum the L-BFGS-B plans
approach. Every settle weight buys ring-out with peak deviation; the settle refinement (a minimax program,
:mod:`retarget.optimize.settle`) finds profiles with both small. Prints the thread settings and one JSON object.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python bench/bench_settle_surrogate.py
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
from scipy.interpolate import BSpline, PchipInterpolator
from scipy.linalg import expm, toeplitz

#: The motion's keyframes (src/retarget/motions/single_rod/step_30_servo.yaml) [s], [deg].
KEYFRAMES = np.array([[0.0, 0.0], [0.5, 0.0], [0.9, 30.0], [2.4, 30.0], [2.8, 0.0], [4.6, 0.0]])
#: The surrogate's first mode [Hz], tip radius [m], damping ratio: fitted to the full FEM's naive playback.
F1, RADIUS, ZETA = 3.155, 0.75, 0.0013
DT, KNOT, STOP, REST = 0.005, 0.05, 2.8, 3.1
E_BAND = (0.9, 0.95, 1.0, 1.05, 1.1)


def response_matrix(t: np.ndarray, omega: float) -> np.ndarray:
    """``φ = G θ`` for a piecewise-linear ``θ`` sampled on ``t`` (exact discretization), from rest."""
    dt, n = t[1] - t[0], len(t)
    m = np.zeros((4, 4))
    m[:2, :2] = [[0.0, 1.0], [-omega * omega, -2.0 * ZETA * omega]]
    m[1, 2], m[2, 3] = omega * omega, 1.0 / dt
    e = expm(m * dt)
    ad, b0, b1 = e[:2, :2], e[:2, 2], e[:2, 3]
    h = np.zeros((n, 2))
    h[0], h[1] = b1, ad @ b1 + b0 - b1
    for k in range(2, n):
        h[k] = ad @ h[k - 1]
    return toeplitz(h[:, 0], np.zeros(n))


def main() -> int:
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", file=sys.stderr)
    started = time.perf_counter()
    t = np.arange(0.0, KEYFRAMES[-1, 0] + 1e-9, DT)
    target = np.radians(PchipInterpolator(KEYFRAMES[:, 0], KEYFRAMES[:, 1])(t))
    knots = np.arange(-3 * KNOT, t[-1] + 4 * KNOT, KNOT)
    nb = len(knots) - 4
    basis = np.nan_to_num(np.array([BSpline(knots, np.eye(nb)[i], 3, extrapolate=False)(t) for i in range(nb)]).T)
    g = {e: response_matrix(t, 2 * np.pi * F1 * np.sqrt(e)) @ basis for e in E_BAND}
    fit = np.linalg.lstsq(basis, target, rcond=None)[0]
    after = rest = t >= REST

    def measure(c: np.ndarray) -> dict:
        out = {}
        for e in E_BAND:
            d = RADIUS * np.abs(g[e] @ c - target)
            out[f"E x{e:g}"] = {"peak_mm": round(1e3 * d.max(), 2), "ring_out_mm": round(1e3 * d[after].max(), 3)}
        return out

    naive = measure(fit)
    fixed = np.vstack([basis[rest] - basis[-1], basis[:1]])  # motor at rest from REST; starts at 0

    def least_squares(weight: float) -> np.ndarray:
        w = np.sqrt(np.where(t >= STOP, weight, 1.0))[:, None]
        rows = [w * RADIUS * g[e] for e in (0.9, 1.0, 1.1)] + [1e4 * fixed]
        rhs = [w[:, 0] * RADIUS * target for _ in range(3)] + [np.zeros(len(fixed))]
        return np.linalg.lstsq(np.vstack(rows), np.concatenate(rhs), rcond=None)[0]

    nominal_naive = naive["E x1"]["peak_mm"]
    out = {"benchmark": "settle_surrogate", "threads": threads, "surrogate": {"f1_hz": F1, "radius_m": RADIUS,
                                                                              "damping_ratio": ZETA},
           "naive": naive,
           "full_fem_naive_mm": {"E x1": [62.2, 3.4], "E x0.9": [124.6, 94.7], "E x1.1": [52.3, 36.0]},
           "least_squares": {}}
    for weight in (1.0, 10.0, 100.0, 1000.0):
        c = least_squares(weight)
        m = measure(c)
        out["least_squares"][f"settle weight {weight:g}"] = {
            "peak_ratio": round(m["E x1"]["peak_mm"] / nominal_naive, 3),
            "ring_out_mm": {k: v["ring_out_mm"] for k, v in m.items()}}
    out["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
