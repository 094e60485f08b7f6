"""What a show keeps of each plan, and the results folder: one folder per finished job, the summary and its index.

The one place that reads a :class:`~retarget.planning.variants.PlanResult` is :func:`plan_outcome` (a plan's
figures, JSON-safe) and :func:`write_job_files` (the files ``retarget plan --out … --report …`` writes: the
optimized motion and the report). Everything else in the show works on :class:`PlanOutcome` and :class:`JobRow`.

Layout of the results folder ``DIR``::

    DIR/summary.json                       # every job's row (``retarget show plan --json`` prints the same)
    DIR/index.html                         # the rows as a table, each linking its job's report
    DIR/jobs/<robot>-<motion>-<key16>/     # one finished job (key: retarget.show.showfile.job_key)
        result.json                        # the row and the plan's metrics (``retarget plan --json``)
        optimized.csv, optimized.yaml      # the optimized motion (``retarget plan --out``)
        profile.npz                        # joint_names, times [s], positions [rad], parameters (the optimum)
        report/                            # the plan report (``retarget plan --report``: plots, trajectories.npz)

A job's folder is written under a temporary name and renamed into place when complete, so a folder under its final
name is a finished job: a second run skips it. A failed or interrupted job leaves nothing there.
"""
from __future__ import annotations

import enum
import html
import io
import json
import re
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from retarget.atomic import atomic_path
from retarget.jsonsafe import JSONObject

if TYPE_CHECKING:
    from retarget.motion.motion import Motion
    from retarget.planning.variants import PlanResult

__all__ = ["JobRow", "JobStatus", "PlanOutcome", "ResultsFolder", "plan_outcome", "unpack_files",
           "write_job_files"]


class JobStatus(enum.Enum):
    """A job's state in a show's summary."""

    DONE = "done"  # planned in this run
    FAILED = "failed"  # raised (its error in the row); planned again by the next run
    SKIPPED = "skipped"  # finished by an earlier run with the same inputs (its figures from that run)
    CANCELLED = "cancelled"  # the show was interrupted before it finished; planned by the next run


@dataclass(frozen=True)
class PlanOutcome:
    """A plan's figures as a show reports them.

    Attributes:
        verified_ratio: optimized over naive peak deviation in the verification model (``verified_peak_ratio``;
            None: not verified).
        torque_ratio: the optimized motion's peak torque over stall (``optimized_peak_torque_ratio``).
        cut_reached: whether the headline cut is meaningful.
        wall_s: the plan's wall time [s] (model included).
        metrics: ``retarget plan --json``'s report (strict-JSON values).
        joint_names: the motors.
        times: (n,) [s] the optimized trajectory's times (the input's clock).
        positions: (n, n_motors) [rad] the optimized trajectory.
        parameters: (p,) the optimizer's result (the profiles' parameters).
    """

    verified_ratio: float | None
    torque_ratio: float | None
    cut_reached: bool | None
    wall_s: float
    metrics: JSONObject
    joint_names: tuple[str, ...]
    times: NDArray[np.float64]
    positions: NDArray[np.float64]
    parameters: NDArray[np.float64]


def plan_outcome(result: PlanResult, start_time: float = 0.0) -> PlanOutcome:
    """The :class:`PlanOutcome` of a :class:`~retarget.planning.variants.PlanResult`; ``start_time`` [s]: the input
    motion's first time (the optimized trajectory is reported on the input's clock)."""
    from retarget.jsonsafe import dumps

    metrics = json.loads(dumps(result.to_json(), default=float))
    torque = metrics.get("optimized_peak_torque_ratio")
    if torque is None:
        torque = (metrics.get("optimized") or {}).get("peak_torque_ratio")
    names, times, positions = result.trajectory(start_time)
    return PlanOutcome(verified_ratio=metrics.get("verified_peak_ratio"), torque_ratio=torque,
                       cut_reached=metrics.get("cut_reached"), wall_s=float(metrics.get("wall_s") or 0.0),
                       metrics=metrics, joint_names=tuple(names), times=np.asarray(times, dtype=float),
                       positions=np.asarray(positions, dtype=float),
                       parameters=np.asarray(result.optimization.x, dtype=float))


def write_job_files(result: PlanResult, motion: Motion, folder: Path) -> bytes:
    """Write what ``retarget plan --out folder/optimized.csv --report folder/report`` writes for ``result`` (a plan
    of ``motion``) into ``folder``, and return the folder's files as zip bytes (what travels back from a worker).

    The report is :func:`retarget.report.plots.write_plan_report` (plots, ``trajectories.npz``); the animation
    views (page, video, MCAP) are ``retarget plan --report``'s alone.
    """
    from retarget.motion import save_motion
    from retarget.planning.variants import plan_comments
    from retarget.report.plots import write_plan_report

    folder.mkdir(parents=True, exist_ok=True)
    out_motion = result.output_motion(motion)
    save_motion(folder / "optimized.csv", out_motion, comments=plan_comments(result))
    save_motion(folder / "optimized.yaml", out_motion)
    write_plan_report(result, folder / "report")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return buffer.getvalue()


def unpack_files(data: bytes, folder: Path) -> None:
    """Extract :func:`write_job_files`' zip bytes into ``folder`` (names checked to stay inside it)."""
    root = folder.resolve()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            target = (folder / name).resolve()
            if root not in target.parents:
                raise ValueError(f"refusing to write {name} outside {folder}")
        archive.extractall(folder)


@dataclass(frozen=True)
class JobRow:
    """One job in a show's summary (``--json``'s ``jobs`` entries; ``error`` only when failed or cancelled).

    Attributes:
        index: the job's position in the show file.
        robot, motion: as written in the show file.
        status: done, failed, skipped or cancelled.
        verified_ratio, torque_ratio, cut_reached, wall_s: :class:`PlanOutcome`'s (None: no plan).
        error: why the job failed ("" otherwise).
        key: the job's input hash (:func:`~retarget.show.showfile.job_key`).
        folder: the job's results folder, relative to the show's results folder ("" without a result).
        attempts: how many times a worker started the job in this run (more than 1: a worker died and Ray retried
            it); 0 for a skipped job.
        node: the Ray node that ran the job's last attempt ("" when none did).
        task_s: the job's task from its start in a worker to its return, files zipped [s] (None: not run).
        cpus: the CPUs its task reserved, which its plan used as ``workers`` unless the show file set them (0: not
            run; :func:`retarget.show.runner.task_cpus`).
    """

    index: int
    robot: str
    motion: str
    status: JobStatus
    verified_ratio: float | None = None
    torque_ratio: float | None = None
    cut_reached: bool | None = None
    wall_s: float | None = None
    error: str = ""
    key: str = ""
    folder: str = ""
    attempts: int = 0
    node: str = ""
    task_s: float | None = None
    cpus: int = 0

    def to_json(self) -> JSONObject:
        """The row as ``--json`` prints it."""
        out = asdict(self)
        out["status"] = self.status.value
        if not self.error:
            del out["error"]
        return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:40] or "job"


class ResultsFolder:
    """A show's results folder (module docstring): finished jobs by key, the summary and the index."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.jobs = self.root / "jobs"

    def job_folder(self, label: str, key: str) -> Path:
        """The folder of a finished job (``jobs/<label>-<key16>``)."""
        return self.jobs / f"{_slug(label)}-{key[:16]}"

    def finished(self, label: str, key: str) -> JSONObject | None:
        """The ``result.json`` of the finished job with this key, or None."""
        path = self.job_folder(label, key) / "result.json"
        if not path.is_file():
            return None
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def commit(self, label: str, key: str, files: bytes, result: Mapping[str, object],
               more: Mapping[str, bytes] | None = None) -> Path:
        """Write a finished job: its files (zip bytes, and ``more`` by name), and ``result.json``, under a temporary
        name, then renamed into place (a complete folder or none). Returns the folder."""
        from retarget.jsonsafe import dumps

        final = self.job_folder(label, key)
        # An older copy of the same inputs' result (e.g. written by a concurrent run) is replaced.
        with atomic_path(final, directory=True) as staging:
            staging.mkdir()
            unpack_files(files, staging)
            for name, data in (more or {}).items():
                (staging / name).write_bytes(data)
            (staging / "result.json").write_text(dumps(result, indent=1))
        return final

    def write_summary(self, summary: JSONObject) -> tuple[Path, Path]:
        """``summary.json`` and ``index.html``, each written to a temporary name and renamed."""
        from retarget.jsonsafe import dumps

        paths = (self.root / "summary.json", self.root / "index.html")
        for path, text in zip(paths, (dumps(summary, indent=1), index_html(summary))):
            with atomic_path(path) as tmp:
                tmp.write_text(text)
        return paths


def _figure(value: object, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}" if isinstance(value, float) else html.escape(str(value))


def index_html(summary: JSONObject) -> str:
    """A small page: one table row per job (robot, motion, status, verified ratio, torque ratio, wall time, error)
    linking its report folder."""
    rows = []
    for row in summary["jobs"]:
        folder = row.get("folder") or ""
        link = (f'<a href="{html.escape(folder)}/report/">report</a> · '
                f'<a href="{html.escape(folder)}/result.json">metrics</a>') if folder else ""
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
            row["index"], html.escape(row["robot"]), html.escape(row["motion"]), row["status"],
            _figure(row.get("verified_ratio")), _figure(row.get("torque_ratio")),
            _figure(row.get("wall_s"), 4), link, html.escape(row.get("error", "")))) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("#", "robot", "motion", "status", "verified ratio",
                                              "torque ratio [× stall]", "wall [s]", "report", "error"))
    counts = ", ".join(f"{summary.get(k, 0)} {k}" for k in ("done", "skipped", "failed", "cancelled"))
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>retarget show</title>\n"
            "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}"
            "tr:nth-child(even){background:#f2f2f2}</style></head><body>\n"
            f"<h1>{html.escape(str(summary.get('show', 'show')))}</h1>\n<p>{counts}; "
            f"{_figure(summary.get('wall_s'), 4)} s</p>\n"
            f"<table>\n<tr>{head}</tr>\n" + "\n".join(rows) + "\n</table>\n</body></html>\n")
