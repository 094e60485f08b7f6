"""A show planned at once: many plans (robots × motions × options) on Ray, locally or on a cluster (docs/show.md).

:mod:`~retarget.show.showfile` (the show file, validated before any work; each job's input hash),
:mod:`~retarget.show.results` (what a show keeps of a plan; the results folder, its summary and HTML index),
:mod:`~retarget.show.runner` (the Ray side: a training task per planning model, a plan task per job, retries, resume,
Ctrl-C) and :mod:`~retarget.show.commands` (``retarget show plan``). Above :mod:`retarget.optimize`, beside the CLI;
no ROS. Ray is imported by :mod:`~retarget.show.runner` alone.
"""
from __future__ import annotations

from retarget._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Show": "showfile", "ShowJob": "showfile", "job_key": "showfile", "load_show": "showfile",
    "JobRow": "results", "JobStatus": "results", "PlanOutcome": "results", "ResultsFolder": "results",
    "plan_outcome": "results",
    "JobEvent": "runner", "ShowSummary": "runner", "connect": "runner", "run_show": "runner",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = ["JobEvent", "JobRow", "JobStatus", "PlanOutcome", "ResultsFolder", "Show", "ShowJob", "ShowSummary",
           "connect", "job_key", "load_show", "plan_outcome", "run_show"]
