"""The animated views of a plan report: ``animation.npz``, the page, the video and the MCAP recording.

:func:`write_plan_views` is what ``retarget plan --report DIR`` calls after the plots; :func:`write_views` redraws
the views from a report folder's ``animation.npz`` (``retarget view DIR``).

Files in the report folder:

- ``animation.npz``: the frames (:class:`retarget.report.animation.PlanAnimation`);
- ``animation.html``: one self-contained page, a WebGL viewer (three.js, inlined) with play/pause, a time slider
  and orbiting, the runs side by side under one camera (:mod:`retarget.report.page`);
- ``animation.mp4``: the same side by side as a video (:mod:`retarget.report.video`);
- ``animation.mcap``: TF of every link, the flexible parts and targets as markers, the deviations as plottable
  topics, for Foxglove (:mod:`retarget.report.mcap_export`).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from retarget.progress import stage_bars
from retarget.report.animation import (
    ANIMATION_FILE,
    DEFAULT_VARIANTS,
    PlanAnimation,
    build_plan_animation,
)

if TYPE_CHECKING:
    from retarget.planning.variants import PlanResult

__all__ = ["MCAP_FILE", "PAGE_FILE", "VIDEO_FILE", "ViewOptions", "write_plan_views", "write_views"]

PAGE_FILE = "animation.html"
VIDEO_FILE = "animation.mp4"
MCAP_FILE = "animation.mcap"


@dataclass(frozen=True)
class ViewOptions:
    """Which views to write and how.

    Attributes:
        page, video, mcap: write the page, the video, the MCAP recording.
        video_file: the video's path, relative to the folder or absolute (``.mp4`` or ``.gif``).
        video_fps: video frames per second.
        video_width: width of one run's panel in the video [px].
        timings: filled with the wall time of each output [s].
    """

    page: bool = True
    video: bool = True
    mcap: bool = True
    video_file: str = VIDEO_FILE
    video_fps: float = 25.0
    video_width: int = 480
    timings: dict[str, float] = field(default_factory=dict)


def write_views(animation: PlanAnimation, folder: str | Path, options: ViewOptions | None = None) -> list[Path]:
    """Write the page, video and MCAP recording of ``animation`` into ``folder`` (as ``options`` selects).

    Returns:
        The written files.
    """
    options = options or ViewOptions()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    progress = stage_bars(unit="it")
    files = []
    if options.page:
        from retarget.report.page import write_page

        started = time.perf_counter()
        files.append(write_page(animation, out / PAGE_FILE))
        options.timings["page_s"] = time.perf_counter() - started
    if options.mcap:
        from retarget.report.mcap_export import write_mcap

        started = time.perf_counter()
        files.append(write_mcap(animation, out / MCAP_FILE, progress=progress))
        options.timings["mcap_s"] = time.perf_counter() - started
    if options.video:
        from retarget.report.video import write_video

        started = time.perf_counter()
        files.append(write_video(animation, out / options.video_file, fps=options.video_fps,
                                 panel_width=options.video_width, progress=progress))
        options.timings["video_s"] = time.perf_counter() - started
    return files


def write_plan_views(result: PlanResult, robot: str | Path, folder: str | Path, options: ViewOptions | None = None
                     ) -> list[Path]:
    """Write ``animation.npz`` of a plan and its views (:func:`write_views`) into ``folder``.

    Args:
        result: a :class:`retarget.planning.variants.PlanResult`.
        robot: the robot name or params YAML path the plan was made for.
        folder: the report folder (created).
        options: which views; default all.

    Returns:
        The written files.
    """
    options = options or ViewOptions()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    animation = build_plan_animation(result, robot, DEFAULT_VARIANTS, progress=stage_bars(unit="it"))
    files = [animation.save(out / ANIMATION_FILE)]
    options.timings["animation_s"] = time.perf_counter() - started
    files += write_views(animation, out, options)
    spent = ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in options.timings.items())
    print(f"animation: {', '.join(animation.variants)}, {len(animation.times)} frames ({spent})", file=sys.stderr)
    return files

