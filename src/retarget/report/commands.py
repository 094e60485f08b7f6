"""CLI: ``retarget view DIR`` — the animated views of a plan report, rebuilt from its ``animation.npz``."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _view(args: argparse.Namespace) -> int:
    from retarget.errors import InputError
    from retarget.report.animation import ANIMATION_FILE, load_animation
    from retarget.report.views import MCAP_FILE, PAGE_FILE, VIDEO_FILE, ViewOptions, write_views

    folder = Path(args.folder)
    if not folder.is_dir():
        raise InputError(f"no report folder {folder}: give the DIR of `retarget plan --report DIR`")
    source = folder / ANIMATION_FILE
    animation = load_animation(source)
    if args.variants:
        animation = animation.select([v.strip() for v in args.variants.split(",") if v.strip()])
    video = Path(args.video).resolve() if args.video else folder / VIDEO_FILE

    def wanted(path: Path, enabled: bool) -> bool:
        """Enabled, and forced, or missing, or older than the animation."""
        if not enabled:
            return False
        return args.rebuild or not path.is_file() or path.stat().st_mtime < source.stat().st_mtime

    options = ViewOptions(page=wanted(folder / PAGE_FILE, not args.no_page),
                          video=wanted(video, not args.no_video), mcap=wanted(folder / MCAP_FILE, not args.no_mcap),
                          video_file=str(video), video_fps=args.fps, video_width=args.width)
    started = time.perf_counter()
    written = write_views(animation, folder, options)
    for path in written:
        print(path)
    page = folder / PAGE_FILE
    if args.open and page.is_file():
        import webbrowser

        if not webbrowser.open(page.resolve().as_uri()):
            print(f"no browser to open here; open {page.resolve()} in one", file=sys.stderr)
    if args.json:
        print(json.dumps({"folder": str(folder), "files": [str(p) for p in written],
                          "variants": list(animation.variants), "frames": len(animation.times),
                          "duration_s": animation.duration, "timings_s": options.timings,
                          "wall_s": time.perf_counter() - started}))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``retarget view``."""
    p = sub.add_parser("view", help="the animated views of a plan report: page, video, MCAP (rebuilt from DIR)",
                       description="Rebuilds the views of a `retarget plan --report DIR` folder from its "
                       "animation.npz: animation.html (a self-contained WebGL page: play/pause, scrub, orbit), "
                       "animation.mp4 (or --video FILE.gif) and animation.mcap (Foxglove). Views that exist and are "
                       "newer than animation.npz are kept unless --rebuild.")
    p.add_argument("folder", metavar="DIR", help="report folder of `retarget plan --report DIR`")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--rebuild", action="store_true", help="write every selected view again")
    p.add_argument("--variants", default=None, metavar="A,B", help="runs to show side by side, e.g. naive,optimized "
                   "(default: all in the animation: naive, zvd, optimized as the plan has them)")
    p.add_argument("--video", default=None, metavar="FILE", help="the video's path (.mp4 or .gif; default "
                   "DIR/animation.mp4)")
    p.add_argument("--fps", type=float, default=25.0, help="video frames per second (default 25; a GIF needs one "
                   "dividing 100)")
    p.add_argument("--width", type=int, default=480, metavar="PX", help="video width of one run's panel [px] "
                   "(default 480)")
    p.add_argument("--no-page", action="store_true", help="skip the page")
    p.add_argument("--no-video", action="store_true", help="skip the video (the slowest view)")
    p.add_argument("--no-mcap", action="store_true", help="skip the MCAP recording")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_view)
