"""CLI: ``retarget show plan SHOW.yaml [--out DIR] [--address auto|ray://HOST:PORT] [--json]``.

Ray and the planner are imported inside the handler, so ``retarget --help`` stays fast.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm import tqdm


def _show_plan(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from retarget.show.showfile import load_show

    show = load_show(args.show)  # every job checked before Ray starts
    from retarget.show.runner import JobEvent, run_show

    out = Path(args.out) if args.out else Path(args.show).with_suffix("").with_name(Path(args.show).stem + "-results")
    n = len(show.jobs)
    overall = tqdm(total=n, desc="show", unit="job", file=sys.stderr, position=0, dynamic_ncols=True)
    bars: dict[int, tqdm] = {}
    labels = {job.index: f"{job.index:>3} {job.label}"[:48] for job in show.jobs}
    for job in show.jobs:
        bars[job.index] = tqdm(total=0, desc=f"{labels[job.index]}: queued", bar_format="{desc}", file=sys.stderr,
                               position=1 + job.index, dynamic_ncols=True)

    def on_event(event: JobEvent) -> None:
        bar = _Line(bars[event.index], labels[event.index])
        if event.kind == "started":
            bar.set_postfix_str(f"started (attempt {event.attempt})" if event.attempt > 1 else "started")
        elif event.kind == "progress":
            total = f"/{event.total}" if event.total else ""
            again = f" [attempt {event.attempt}]" if event.attempt > 1 else ""
            bar.set_postfix_str(f"{event.stage} {event.done}{total}{again}")
        elif event.row is not None:
            row = event.row
            if row.status.value in ("done", "skipped"):
                bar.set_postfix_str(f"{row.status.value}: verified {_num(row.verified_ratio)} x naive, torque "
                                    f"{_num(row.torque_ratio)} x stall, {_num(row.wall_s, '.0f')} s")
            else:
                bar.set_postfix_str(f"{row.status.value}: {row.error}"[:160])
            overall.update(1)

    try:
        summary = run_show(show, out, args.address, on_event)
    finally:
        for bar in bars.values():
            bar.close()
        overall.close()
    report = summary.to_json()
    print(f"{show.path}: {report['done']} planned, {report['skipped']} skipped (finished before), {report['failed']} "
          f"failed, {report['cancelled']} cancelled in {summary.wall_s:.0f} s; summary {out / 'summary.json'}, "
          f"index {out / 'index.html'}")
    for row in summary.rows:
        if row.error:
            print(f"  job {row.index} ({row.robot} {row.motion}): {row.error}", file=sys.stderr)
    if args.json:
        from retarget.jsonsafe import dumps

        print(dumps(report))
    if summary.interrupted:
        return 130
    return 3 if report["failed"] else 0


class _Line:
    """A job's progress line: its label and its state."""

    def __init__(self, bar: tqdm, label: str) -> None:
        self.bar, self.label = bar, label

    def set_postfix_str(self, text: str) -> None:
        self.bar.set_description_str(f"{self.label}: {text}")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _num(value: float | None, spec: str = ".3g") -> str:
    return "–" if value is None else format(value, spec)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``retarget show`` (``show plan``)."""
    show = sub.add_parser("show", help="plan a whole show (many robots and motions) at once on Ray",
                          description="A show file lists jobs (robot, motion, plan options); `show plan` plans them "
                          "all on a local Ray instance or a Ray cluster (docs/show.md).")
    show_sub = show.add_subparsers(dest="show_command", metavar="COMMAND")
    show.set_defaults(func=lambda args: _usage(show))
    p = show_sub.add_parser("plan", help="plan every job of a show file; a second run resumes",
                            description="Trains each robot's planning model once per training motion, plans each "
                            "job as a Ray task (a failed job does not stop the others; a killed worker's job is "
                            "retried), writes each result as it finishes under --out keyed by the hash of its inputs "
                            "(a second run skips finished jobs), then summary.json and index.html. Exit status: 0 "
                            "every job planned (or finished before), 3 a job failed, 2 a bad show file, 130 Ctrl-C.")
    p.add_argument("show", help="the show file (YAML: `jobs:` a list of {robot, motion, options})")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="results folder (default: <show file name>-results beside the show file)")
    p.add_argument("--address", default=None, metavar="ADDRESS",
                   help="Ray to join: `auto` (a cluster started on this machine with `ray start --head`) or "
                        "ray://HOST:PORT (default: a local Ray instance with one CPU per core)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object as the last line")
    p.set_defaults(func=_show_plan)
