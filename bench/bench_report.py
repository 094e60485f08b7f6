"""Benchmark of rendering a plan report's views: the page, the MCAP recording and the MP4 video from its animation.

Loads ``DIR/animation.npz`` (written by ``retarget plan --report DIR``) and writes the three views into ``--out``
(a new temporary folder by default, so the report is left as it is), timing each; the acceptance is the sum under
120 s for the drummer's 10 s report on the 2-core machine. Prints the settings (threads included) on stderr and, as
the last line, one JSON object.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_report.py DIR
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

#: The acceptance: the drummer's 10 s report rendered within this wall time [s] on 2 cores.
LIMIT_S = 120.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", metavar="DIR", help="report folder of `retarget plan --report DIR`")
    p.add_argument("--out", default=None, metavar="DIR", help="where to write the views (default: a new temporary "
                   "folder)")
    p.add_argument("--fps", type=float, default=25.0, help="video frames per second (default 25)")
    p.add_argument("--width", type=int, default=480, help="video panel width [px] (default 480)")
    args = p.parse_args()
    settings = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    settings["cpu_count"] = os.cpu_count()
    print(json.dumps({"settings": settings, "args": vars(args)}), file=sys.stderr)

    from retarget.report.animation import ANIMATION_FILE, load_animation
    from retarget.report.views import ViewOptions, write_views

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="retarget-bench-report-"))
    started, cpu = time.perf_counter(), time.process_time()
    animation = load_animation(Path(args.report) / ANIMATION_FILE)
    load_s = time.perf_counter() - started
    options = ViewOptions(video_fps=args.fps, video_width=args.width)
    files = write_views(animation, out, options)
    wall = time.perf_counter() - started
    print(json.dumps({
        "report": str(args.report), "robot": animation.robot, "variants": list(animation.variants),
        "duration_s": round(animation.duration, 3), "frames": len(animation.times), "links": len(animation.links),
        "visual_primitives": len(animation.visuals), "flexible_parts": len(animation.parts),
        "settings": settings, "video_fps": args.fps, "video_panel_width_px": args.width,
        "timings_s": {"load": round(load_s, 2), **{k[:-2]: round(v, 2) for k, v in options.timings.items()}},
        "wall_s": round(wall, 1), "process_time_s": round(time.process_time() - cpu, 1),
        "within_limit": wall < LIMIT_S, "limit_s": LIMIT_S,
        "sizes_bytes": {f.name: f.stat().st_size for f in files},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
