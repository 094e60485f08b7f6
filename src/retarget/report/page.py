"""The animation as one self-contained HTML page: a WebGL viewer (three.js r170, MIT, inlined).

The runs stand side by side, each in its own viewport under one camera (drag to orbit, wheel to zoom, both panels
follow); play/pause, a time slider and a playback speed below; the time in the top-left corner. The frames are
embedded as base64 float32 arrays, decimated to at most ``fps`` frames per second (default 25: the drummer's 10 s
of three runs is about 3 MB). ``#t=1.5`` in the address opens the page paused at 1.5 s.

three.js's ``build/three.module.min.js`` and ``examples/jsm/controls/OrbitControls.js`` are vendored in ``web/``
(npm package ``three`` 0.170.0, its licence in ``web/LICENSE.three.txt``) and inlined as ``data:`` URLs of an
import map, so the page needs no network and no server.
"""
from __future__ import annotations

import base64
import json
import math
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from retarget.atomic import write_text_atomic
from retarget.report.animation import CENTRE_LINE_POINTS, VARIANT_LABELS, PlanAnimation

__all__ = ["CAMERA_DIRECTION", "page_html", "write_page"]

_WEB = Path(__file__).with_name("web")


def camera_direction(elevation_deg: float = 20.0, azimuth_deg: float = -50.0) -> np.ndarray:
    """Unit vector (3,) from the scene's centre towards the camera (matplotlib's elevation/azimuth convention)."""
    el, az = math.radians(elevation_deg), math.radians(azimuth_deg)
    return np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])


#: The camera of the page and the video: 20 deg above the robot, 50 deg to its right from the front (+x).
CAMERA_DIRECTION = camera_direction()


def _b64(array: ArrayLike) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


def _data_url(name: str) -> str:
    return "data:text/javascript;base64," + base64.b64encode((_WEB / name).read_bytes()).decode("ascii")


def page_html(animation: PlanAnimation, fps: float = 25.0) -> str:
    """The page's HTML text (module docstring).

    Args:
        animation: the frames.
        fps: at most this many frames per second are embedded.
    """
    frame_dt = float(np.median(np.diff(animation.times))) if len(animation.times) > 1 else 1.0
    stride = max(1, math.ceil(1.0 / (fps * frame_dt) - 1e-9))
    keep = np.arange(0, len(animation.times), stride)
    vis = animation.visuals
    low, high = animation.bounds()
    data = {
        "variants": list(animation.variants),
        "labels": [VARIANT_LABELS.get(v, v) for v in animation.variants],
        "metrics": animation.metrics,
        "links": list(animation.links),
        "parts": list(animation.parts),
        "tracked": list(animation.tracked),
        "centre_points": CENTRE_LINE_POINTS,
        "part_radii": [float(r) for r in animation.part_radii],
        "ghost_links": [int(g) for g in animation.ghost_links],
        "visuals": [{"link": int(vis.link[i]), "kind": int(vis.kind[i]), "size": vis.size[i].tolist(),
                     "origin": vis.origin[i].T.reshape(-1).tolist(), "rgba": vis.rgba[i].tolist()}
                    for i in range(len(vis))],
        "bounds": [low.tolist(), high.tolist()],
        "camera": CAMERA_DIRECTION.tolist(),
        "times": _b64(animation.times[keep] - animation.times[0]),
        "link_positions": _b64(animation.link_positions[:, keep]),
        "link_quaternions": _b64(animation.link_quaternions[:, keep]),
        "part_lines": _b64(animation.part_lines[:, keep]),
        "ghost_positions": _b64(animation.ghost_positions[keep]),
        "ghost_quaternions": _b64(animation.ghost_quaternions[keep]),
        "target_positions": _b64(animation.target_positions[keep]),
    }
    text = (_WEB / "page.html").read_text()
    title = f"{Path(animation.robot).stem}: {' vs '.join(VARIANT_LABELS.get(v, v) for v in animation.variants)}"
    # "</" inside the JSON would end its <script> element.
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    for key, value in (("__TITLE__", title), ("__THREE_URL__", _data_url("three.module.min.js")),
                       ("__ORBIT_URL__", _data_url("OrbitControls.js")), ("__DATA__", payload)):
        text = text.replace(key, value, 1)
    return text


def write_page(animation: PlanAnimation, path: str | Path, fps: float = 25.0) -> Path:
    """Write the page of ``animation`` to ``path`` via a temporary name; returns ``path``."""
    return write_text_atomic(path, page_html(animation, fps))
