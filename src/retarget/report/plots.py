"""Report plots of a plan: tracked-body trajectories, deviation over time, motor curves (PNG, matplotlib Agg).

:func:`write_plan_report` writes ``tracked_bodies.png`` (target vs naive vs ZVD vs optimized, per tracked body and
axis that moves), ``deviation.png`` (distance to the target over time, max over tracked bodies),
``motors.png`` (input vs optimized motor angles, ZVD-shaped for reference) and ``trajectories.npz``. A plan that
started from the speed-limited input shows it too (``speed_limited``).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from retarget.planning.variants import PlanResult

__all__ = ["write_plan_report"]

_STYLE = {
    "target": {"color": "black", "lw": 2.0, "ls": "--", "label": "target (quasi-static)"},
    "naive": {"color": "tab:red", "lw": 1.2, "label": "naive playback"},
    "speed_limited": {"color": "tab:blue", "lw": 1.0, "ls": "-.", "label": "speed-limited input (optimizer's start)"},
    "zv": {"color": "tab:orange", "lw": 1.0, "ls": ":", "label": "ZV shaped"},
    "zvd": {"color": "tab:purple", "lw": 1.2, "label": "ZVD shaped"},
    "optimized": {"color": "tab:green", "lw": 1.6, "label": "optimized"},
    "optimized_shaft": {"color": "tab:olive", "lw": 1.0, "ls": "--", "label": "optimized: simulated shaft"},
}


def _figure(rows: int, cols: int = 1, height: float = 2.6) -> tuple[Figure, NDArray[np.object_]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=(10, max(3.0, height * rows)), sharex=True, squeeze=False)
    return fig, axes[:, 0]


def write_plan_report(result: PlanResult, folder: str | Path) -> list[Path]:
    """Write the report of a :class:`retarget.planning.variants.PlanResult` into ``folder`` (created).

    Returns:
        The written files.
    """
    import matplotlib.pyplot as plt

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    pp = result.pp
    t = pp.targets.times
    target = pp.targets.positions
    links = list(pp.problem.tracking.links)
    variants = result.variants
    order = [n for n in ("naive", "speed_limited", "zv", "zvd", "optimized") if n in variants]
    files = []

    # Tracked bodies: every axis whose target or naive trajectory moves by more than 1 mm.
    panels = []
    for k, link in enumerate(links):
        for a, axis in enumerate("xyz"):
            span = max(np.ptp(target[:, k, a]), np.ptp(variants[order[0]].positions[:, k, a]) if order else 0.0)
            if span > 1e-3:
                panels.append((k, a, f"{link} {axis} [m]"))
    panels = panels or [(0, 0, f"{links[0]} x [m]")]
    fig, axes = _figure(len(panels))
    for ax, (k, a, label) in zip(axes, panels):
        ax.plot(t, target[:, k, a], **_STYLE["target"])
        for n in order:
            ax.plot(t, variants[n].positions[:, k, a], **_STYLE[n])
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize=8)
    axes[0].set_title(f"tracked bodies ({', '.join(links)}): target vs naive vs shaped vs optimized")
    axes[-1].set_xlabel("time [s]")
    fig.tight_layout()
    files.append(out / "tracked_bodies.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    fig, axes = _figure(1, height=4.0)
    ax = axes[0]
    for n in order:
        dist = np.linalg.norm(variants[n].positions - target, axis=-1).max(axis=1)
        m = variants[n].metrics
        style = dict(_STYLE[n])
        style["label"] = f"{style['label']}: peak {1e3 * m['peak_deviation_m']:.1f} mm, RMS {1e3 * m['rms_deviation_m']:.1f} mm"
        ax.plot(t, 1e3 * dist, **style)
    ax.set_ylabel("deviation from target [mm]\n(max over tracked bodies)")
    ax.set_xlabel("time [s]")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    files.append(out / "deviation.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    names = pp.motion.joint_names
    fig, axes = _figure(len(names))
    for m, (ax, name) in enumerate(zip(axes, names)):
        ax.plot(t, np.degrees(pp.targets.angles[:, m]), **{**_STYLE["target"], "label": "input"})
        for n in ("speed_limited", "zvd", "optimized"):
            if n in variants:
                ax.plot(t, np.degrees(variants[n].angles[:, m]), **_STYLE[n])
        if "optimized" in variants and variants["optimized"].shafts is not None:
            # A modelled servo's shaft lags and sags behind the goal it is sent.
            ax.plot(t, np.degrees(variants["optimized"].shafts[:, m]), **_STYLE["optimized_shaft"])
        ax.set_ylabel(f"{name} [deg]")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize=8)
    axes[0].set_title("motor angles: input vs optimized")
    axes[-1].set_xlabel("time [s]")
    fig.tight_layout()
    files.append(out / "motors.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    arrays: dict[str, np.ndarray] = {"time": t, "target_positions": target, "input_angles": pp.targets.angles,
                              "links": np.array(links), "motors": np.array(names)}
    for n in order:
        arrays[f"{n}_positions"] = variants[n].positions
        arrays[f"{n}_angles"] = variants[n].angles
        arrays[f"{n}_shafts"] = variants[n].shaft_angles
        arrays[f"{n}_torques"] = variants[n].torques
    files.append(out / "trajectories.npz")
    np.savez_compressed(files[-1], **arrays)
    return files
