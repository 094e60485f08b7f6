"""The report of ``retarget refine --report DIR``: the trials side by side (PNG plots, a page, the JSON).

:func:`write_refine_report` writes ``trials.png`` (measured peak, RMS and ring-out per trial, and the peak the
next plan is predicted at), ``trial.png`` (this trial: the deviation from the intent over time — measured, the
model's prediction of the plan played, the next plan predicted from the measurement and in the model alone — and the
motor goals of both plans), ``index.html`` (the trials in a table beside both plots) and ``refine.json``.
"""
from __future__ import annotations

import html
from pathlib import Path
from types import ModuleType

import numpy as np

from retarget.jsonsafe import dumps
from retarget.planning.refine import Refinement

__all__ = ["write_refine_report"]


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _trials_plot(refinement: Refinement, path: Path) -> Path:
    plt = _pyplot()
    trials = [*refinement.history.trials, refinement.record]
    index = np.array([t.trial for t in trials])
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(index, [1e3 * t.measured_peak_deviation_m for t in trials], "o-", color="tab:red", label="measured peak")
    ax.plot(index, [1e3 * t.measured_rms_deviation_m for t in trials], "s-", color="tab:blue", label="measured RMS")
    ax.plot(index, [1e3 * t.measured_ring_out_peak_m for t in trials], "^-", color="tab:purple",
            label="measured ring-out peak")
    ax.plot(index + 1, [1e3 * t.predicted_peak_deviation_m for t in trials], "o", mfc="none", color="tab:red",
            label="next plan's peak, predicted")
    ax.set_xlabel("trial (the plan played)")
    ax.set_ylabel("deviation from the intent [mm]")
    ax.set_xticks(np.arange(1, int(index.max()) + 2))
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{len(trials)} trial(s): {refinement.decision.value}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _trial_plot(refinement: Refinement, path: Path) -> Path:
    plt = _pyplot()
    t = refinement.times
    fig, axes = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)

    def dev(positions: np.ndarray) -> np.ndarray:
        return 1e3 * np.nanmax(np.linalg.norm(positions - refinement.targets, axis=2), axis=1)

    measured = np.linalg.norm(refinement.measured - refinement.targets, axis=2)
    measured = np.where(np.isfinite(measured).any(axis=1), np.nanmax(np.where(np.isfinite(measured), measured,
                                                                                -np.inf), axis=1), np.nan)
    axes[0].plot(t, 1e3 * measured, color="tab:red", lw=1.4, label=f"measured (trial {refinement.record.trial})")
    axes[0].plot(t, dev(refinement.model_current), color="tab:gray", lw=1.0, ls="--",
                 label="the model's prediction of this plan")
    axes[0].plot(t, dev(refinement.predicted_next), color="tab:green", lw=1.4,
                 label="next plan, predicted (measured + the model's change)")
    axes[0].plot(t, dev(refinement.model_next), color="tab:olive", lw=1.0, ls=":", label="next plan in the model")
    axes[0].set_ylabel("|tracked body - intent| [mm]\n(max over bodies)")
    axes[0].legend(fontsize=8)
    axes[0].grid(True, alpha=0.3)
    for m, name in enumerate(refinement.motors):
        axes[1].plot(t, np.degrees(refinement.goals_current[:, m]), lw=1.0, label=f"{name}: this plan")
        axes[1].plot(t, np.degrees(refinement.goals_next[:, m]), lw=1.2, ls="--", label=f"{name}: next plan")
    axes[1].set_ylabel("goal [deg]")
    axes[1].set_xlabel("time [s]")
    axes[1].legend(fontsize=8)
    axes[1].grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _page(refinement: Refinement) -> str:
    rows = []
    for t in [*refinement.history.trials, refinement.record]:
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            t.trial, Path(t.plan).name, Path(t.recording).name, f"{1e3 * t.measured_peak_deviation_m:.2f}",
            f"{1e3 * t.measured_rms_deviation_m:.2f}", f"{1e3 * t.measured_ring_out_peak_m:.2f}",
            f"{1e3 * t.predicted_peak_deviation_m:.2f}", f"{t.peak_torque_ratio:.2f}", f"{t.trust_region_rad:.3g}",
            t.decision, t.route)) + "</tr>")
    head = ("trial", "plan played", "take", "peak [mm]", "RMS [mm]", "ring-out [mm]", "next: predicted peak [mm]",
            "next: torque / stall", "trust region [rad]", "trend", "route")
    warnings = "".join(f"<li>{html.escape(w)}</li>" for w in refinement.warnings)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>retarget refine: trial {refinement.record.trial}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #bbb;padding:3px 8px;text-align:right}} .side{{display:flex;flex-wrap:wrap;gap:1em}}
img{{max-width:48vw}}</style></head><body>
<h1>retarget refine: trial {refinement.record.trial}</h1>
<p>{html.escape(refinement.message)}</p>
<p>Route: <b>{html.escape(refinement.route)}</b> &mdash; {html.escape(refinement.route_reason)}</p>
<table><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr>{''.join(rows)}</table>
{f'<ul>{warnings}</ul>' if warnings else ''}
<div class="side"><img src="trials.png" alt="peak per trial"><img src="trial.png" alt="this trial"></div>
</body></html>
"""


def write_refine_report(refinement: Refinement, folder: str | Path) -> list[Path]:
    """Write the report of ``refinement`` into ``folder`` (created); returns the written files."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = [_trials_plot(refinement, out / "trials.png"), _trial_plot(refinement, out / "trial.png")]
    (out / "index.html").write_text(_page(refinement), encoding="utf-8")
    (out / "refine.json").write_text(dumps(refinement.to_json(), indent=1) + "\n", encoding="utf-8")
    return [*files, out / "index.html", out / "refine.json"]
