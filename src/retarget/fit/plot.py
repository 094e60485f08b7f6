"""Plot of a fit: measured versus simulated tip motion, per recording."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from retarget.fit.fitter import FitResult

__all__ = ["plot_fit"]


def plot_fit(result: FitResult, out: str | Path) -> Path:
    """Write a PNG with, per recording, the tip's in-plane coordinates (robot frame) measured (dots) and simulated
    at the fitted parameters (lines), and the residual norm below.

    Args:
        result: A fit result (holds the cases, alignments and simulations).
        out: PNG path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(result.cases)
    fig, axes = plt.subplots(2, n, figsize=(7.5 * n, 6.5), squeeze=False, sharex="col",
                             gridspec_kw={"height_ratios": [3, 1]})
    for j, (case, sim, al) in enumerate(zip(result.cases, result.simulations, result.alignments)):
        rec = case.recording
        valid = rec.valid
        t = rec.time_s[valid] - al.offset_s
        inside = (t >= sim.time_s[0]) & (t <= sim.time_s[-1])
        t = t[inside]
        meas = al.apply(rec.position_m[valid][inside])
        start = sim.position_m[0]
        moving = np.ptp(sim.position_m, axis=0) > 1e-6
        top, bottom = axes[0, j], axes[1, j]
        for k, name in enumerate("xyz"):
            if not moving[k]:
                continue
            line, = top.plot(sim.time_s, 1e3 * (sim.position_m[:, k] - start[k]), lw=1.2, label=f"{name} simulated")
            top.plot(t, 1e3 * (meas[:, k] - start[k]), ".", ms=2.5, color=line.get_color(), alpha=0.6,
                     label=f"{name} measured")
        top.set_ylabel("tip displacement from rest [mm]")
        top.set_title(f"{case.label}: measured vs simulated tip (robot frame)")
        top.legend(fontsize=8, ncol=2)
        top.grid(alpha=0.3)
        err = np.linalg.norm(meas - sim.at(t), axis=1)
        bottom.plot(t, 1e3 * err, lw=0.8, color="k")
        bottom.set_ylabel("|error| [mm]")
        bottom.set_xlabel("motion time [s]")
        bottom.grid(alpha=0.3)
    v, s = result.values, result.std
    parts = [f"E = {v['youngs_modulus'] / 1e9:.4g} GPa", f"α = {v['alpha']:.4g} 1/s", f"β = {v['beta']:.4g} s"]
    for i, key in enumerate(("youngs_modulus", "alpha", "beta")):
        if key in s:
            scale = 1e9 if key == "youngs_modulus" else 1.0
            parts[i] += f" ± {s[key] / scale:.2g}"
    fig.suptitle("fitted: " + ",  ".join(parts) + f"\nresidual RMS {1e3 * result.residual_rms_m:.3g} mm per "
                 f"coordinate (noise at rest {1e3 * result.noise_std_m:.3g} mm)", fontsize=10)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
