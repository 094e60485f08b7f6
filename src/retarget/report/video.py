"""The animation as a video, rendered headless: the runs side by side, one camera, the time in the corner.

Drawing is a small painter's-algorithm renderer on Pillow: the URDF primitives as flat-shaded polygons (faces
turned away from the camera culled, the rest drawn far to near), the flexible parts as round-capped thick
lines along their deformed centre lines, the tracked bodies' targets as translucent green ghosts on top, under an
orthographic camera (:data:`retarget.report.page.CAMERA_DIRECTION`) whose scale fits every frame of every run
(:meth:`PlanAnimation.extent_points`).
Frames are drawn at twice the size and averaged down (anti-aliasing).

The format follows the file's suffix: ``.mp4`` (H.264 by the ffmpeg binary of imageio-ffmpeg's wheel) or ``.gif``
(Pillow; its frame durations are whole 10 ms, so ``fps`` must divide 100). A video of ``T`` seconds at ``fps``
has ``floor(T·fps) + 1`` frames, frame ``k`` showing time ``k / fps``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from PIL.Image import Image
    from PIL.ImageDraw import ImageDraw
    from PIL.ImageFont import FreeTypeFont, ImageFont

from retarget.atomic import atomic_path
from retarget.errors import InputError
from retarget.report.animation import VARIANT_LABELS, PlanAnimation

__all__ = ["video_frame_times", "write_video"]

_FLEX_RGB = (51, 115, 242)
_GHOST_RGBA = (40, 200, 70, 80)
_TARGET_RGBA = (30, 170, 60, 200)
_BACKGROUND = ((247, 247, 244), (240, 240, 236))
_LIGHT = np.array([0.4, -0.5, 0.75]) / np.linalg.norm([0.4, -0.5, 0.75])
_SUPERSAMPLE = 2


def video_frame_times(duration: float, fps: float) -> NDArray[np.float64]:
    """Times ``k / fps`` [s] of the frames of a ``duration`` s video (k = 0 … floor(duration·fps))."""
    return np.arange(math.floor(duration * fps + 1e-9) + 1) / fps


@dataclass(frozen=True, eq=False)
class _Faces:
    """Polygons with the same vertex count, in their links' frames."""

    link: NDArray[np.int64]  # (n,)
    points: NDArray[np.float64]  # (n, m, 3) [m]
    normals: NDArray[np.float64]  # (n, 3) outward
    rgb: NDArray[np.float64]  # (n, 3) in [0, 1]


def _primitive_faces(kind: int, size: NDArray[np.float64]) -> list[NDArray[np.float64]]:
    from retarget.report.robot_render import _box_faces, _cylinder_faces, _sphere_faces

    if kind == 0:
        return _box_faces(size)
    if kind == 1:
        return _cylinder_faces(float(size[0]), float(size[2]), segments=12)
    return _sphere_faces(float(size[0]), segments=8)


def _link_faces(animation: PlanAnimation, which: NDArray[np.int64] | None = None) -> list[_Faces]:
    """The visuals' faces grouped by vertex count; ``which``: only visuals of these links (indices into links)."""
    vis = animation.visuals
    groups: dict[int, list[tuple[int, NDArray, NDArray, NDArray]]] = {}
    for i in range(len(vis)):
        link = int(vis.link[i])
        if which is not None and link not in which:
            continue
        origin = vis.origin[i]
        for face in _primitive_faces(int(vis.kind[i]), vis.size[i]):
            pts = face @ origin[:3, :3].T + origin[:3, 3]
            normal = np.cross(pts[1] - pts[0], pts[2] - pts[0])
            if np.linalg.norm(normal) < 1e-15:
                normal = np.cross(pts[2] - pts[0], pts[-1] - pts[0])
            # Outward: away from the primitive's centre.
            if normal @ (pts.mean(axis=0) - origin[:3, 3]) < 0:
                normal = -normal
            normal = normal / max(np.linalg.norm(normal), 1e-15)
            groups.setdefault(len(pts), []).append((link, pts, normal, vis.rgba[i][:3]))
    return [_Faces(np.array([g[0] for g in items]), np.array([g[1] for g in items]),
                   np.array([g[2] for g in items]), np.array([g[3] for g in items])) for items in groups.values()]


def _quaternion_matrices(q: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rotation matrices (..., 3, 3) of quaternions (..., 4) as (x, y, z, w)."""
    x, y, z, w = (q[..., i].astype(float) for i in range(4))
    return np.stack([np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                     np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                     np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


class _Camera:
    """Orthographic camera looking along ``-direction``; pixels from world points."""

    def __init__(self, direction: NDArray[np.float64], points: NDArray[np.float64], radii: NDArray[np.float64],
                 width: int, height: int, margin: float = 0.04) -> None:
        forward = -direction / np.linalg.norm(direction)
        right = np.cross(forward, [0.0, 0.0, 1.0])
        right /= np.linalg.norm(right)
        self.forward, self.right, self.up = forward, right, np.cross(right, forward)
        px, py = points @ self.right, points @ self.up
        sx = np.concatenate([px - radii, px + radii])
        sy = np.concatenate([py - radii, py + radii])
        span_x, span_y = max(np.ptp(sx), 1e-6), max(np.ptp(sy), 1e-6)
        self.scale = (1 - 2 * margin) * min(width / span_x, height / span_y)
        self.cx, self.cy = 0.5 * (sx.min() + sx.max()), 0.5 * (sy.min() + sy.max())
        self.width, self.height = width, height

    def project(self, p: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Pixel coordinates (..., 2) and depth (...) [m] (larger: farther)."""
        x = (p @ self.right - self.cx) * self.scale + 0.5 * self.width
        y = 0.5 * self.height - (p @ self.up - self.cy) * self.scale
        return np.stack([x, y], axis=-1), p @ self.forward


def _font(size: int) -> FreeTypeFont | ImageFont:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType
        return ImageFont.load_default()


def _draw_run(draw: ImageDraw, ghost_draw: ImageDraw, camera: _Camera, faces: list[_Faces],
              ghost_faces: list[_Faces], animation: PlanAnimation, v: int, f: int, ghost_rot: NDArray,
              rot: NDArray) -> None:
    """One run at frame ``f`` onto ``draw`` (ghosts onto ``ghost_draw``)."""
    pos = animation.link_positions[v, f].astype(float)
    items: list[tuple[float, int, NDArray[np.float64], tuple[int, ...]]] = []
    for group in faces:
        r = rot[group.link]
        world = np.einsum("nij,nmj->nmi", r, group.points) + pos[group.link][:, None, :]
        normal = np.einsum("nij,nj->ni", r, group.normals)
        facing = normal @ camera.forward < 0
        if not facing.any():
            continue
        pix, depth = camera.project(world[facing])
        light = 0.45 + 0.55 * np.abs(normal[facing] @ _LIGHT)
        rgb = np.clip(group.rgb[facing] * light[:, None] * 255, 0, 255).astype(int)
        for d, p, c in zip(depth.mean(axis=1), pix, rgb):
            items.append((float(d), 0, p, tuple(c)))
    for p in range(len(animation.parts)):
        pix, depth = camera.project(animation.part_lines[v, f, p].astype(float))
        width = max(2 * _SUPERSAMPLE, round(2 * float(animation.part_radii[p]) * camera.scale))
        for c in range(len(pix) - 1):
            items.append((float(0.5 * (depth[c] + depth[c + 1])), width, pix[c : c + 2], _FLEX_RGB))
    items.sort(key=lambda item: -item[0])
    for _, width, p, colour in items:
        if width == 0:
            draw.polygon([tuple(xy) for xy in p], fill=colour)
        else:
            (x0, y0), (x1, y1) = p
            draw.line([(x0, y0), (x1, y1)], fill=colour, width=width)
            r = 0.5 * width
            for x, y in ((x0, y0), (x1, y1)):
                draw.ellipse([x - r, y - r, x + r, y + r], fill=colour)
    if ghost_faces:
        gpos = animation.ghost_positions[f].astype(float)
        index = {int(link): g for g, link in enumerate(animation.ghost_links)}
        for group in ghost_faces:
            g = np.array([index[int(link)] for link in group.link])
            world = np.einsum("nij,nmj->nmi", ghost_rot[g], group.points) + gpos[g][:, None, :]
            pix, _ = camera.project(world)
            for p in pix:
                ghost_draw.polygon([tuple(xy) for xy in p], fill=_GHOST_RGBA)
    for k in range(len(animation.tracked)):
        (x, y), _ = camera.project(animation.target_positions[f, k].astype(float))
        r = 3 * _SUPERSAMPLE
        ghost_draw.ellipse([x - r, y - r, x + r, y + r], outline=_TARGET_RGBA, width=_SUPERSAMPLE)


def render_frames(animation: PlanAnimation, fps: float = 25.0, panel_width: int = 480,
                  progress: Callable[[str, int, int], None] | None = None) -> Iterator[Image]:
    """Yield the video's frames as RGB ``PIL.Image`` objects (module docstring), all the same even size."""
    from PIL import Image, ImageDraw

    from retarget.report.page import CAMERA_DIRECTION

    n_v = len(animation.variants)
    panel_w = 16 * max(4, round(panel_width / 16))
    panel_h = 16 * max(4, round(0.9 * panel_width / 16))
    big_w, big_h = panel_w * _SUPERSAMPLE, panel_h * _SUPERSAMPLE
    camera = _Camera(CAMERA_DIRECTION, *animation.extent_points(), big_w, big_h)
    faces = _link_faces(animation)
    ghost_faces = _link_faces(animation, animation.ghost_links) if len(animation.ghost_links) else []
    # Text scales with the panel: 15 px titles and 12 px figures on a 480 px panel.
    title_px, small_px = max(9, round(panel_w / 32)), max(8, round(panel_w / 40))
    title_font, small_font = _font(title_px * _SUPERSAMPLE), _font(small_px * _SUPERSAMPLE)
    rel = animation.times - animation.times[0]
    times = video_frame_times(animation.duration, fps)
    frames = np.clip(np.searchsorted(rel, times - 1e-9), 0, len(rel) - 1)
    # The nearer of the two neighbouring animation frames.
    prev = np.clip(frames - 1, 0, len(rel) - 1)
    frames = np.where(np.abs(rel[prev] - times) < np.abs(rel[frames] - times), prev, frames)
    rot_all = _quaternion_matrices(animation.link_quaternions)
    ghost_rot_all = _quaternion_matrices(animation.ghost_quaternions)
    for n, (t, f) in enumerate(zip(times, frames)):
        out = Image.new("RGB", (panel_w * n_v, panel_h))
        for v, name in enumerate(animation.variants):
            panel = Image.new("RGBA", (big_w, big_h), _BACKGROUND[v % 2] + (255,))
            ghosts = Image.new("RGBA", (big_w, big_h), (0, 0, 0, 0))
            _draw_run(ImageDraw.Draw(panel), ImageDraw.Draw(ghosts), camera, faces, ghost_faces, animation, v,
                      int(f), ghost_rot_all[int(f)], rot_all[v, int(f)])
            panel = Image.alpha_composite(panel, ghosts)
            draw = ImageDraw.Draw(panel)
            m = animation.metrics.get(name, {})
            label = VARIANT_LABELS.get(name, name)
            top = title_px // 2 * _SUPERSAMPLE
            draw.text((big_w // 2, top), label, fill=(20, 20, 20), font=title_font, anchor="mt")
            if m:
                draw.text((big_w // 2, top + round(1.3 * title_px) * _SUPERSAMPLE),
                          f"peak {1e3 * m['peak_deviation_m']:.1f} mm · RMS {1e3 * m['rms_deviation_m']:.1f} mm",
                          fill=(60, 60, 60), font=small_font, anchor="mt")
            if v == 0:
                draw.text((top, big_h - top), f"t = {t:5.2f} s", fill=(20, 20, 20), font=title_font, anchor="lb")
            out.paste(panel.convert("RGB").reduce(_SUPERSAMPLE), (v * panel_w, 0))
        if progress is not None:
            progress("video: frames", n + 1, len(times))
        yield out


def write_video(animation: PlanAnimation, path: str | Path, fps: float = 25.0, panel_width: int = 480,
                progress: Callable[[str, int, int], None] | None = None) -> Path:
    """Render ``animation`` into ``path`` (``.mp4`` or ``.gif``) via a temporary name; returns ``path``.

    Args:
        animation: the frames.
        path: the video file.
        fps: frames per second (for a GIF, one that divides 100: 5, 10, 20, 25, 50).
        panel_width: width of one run's panel [px] (rounded to a multiple of 16).
        progress: ``progress(stage, done, total)`` per frame.

    Raises:
        InputError: another suffix, a non-positive ``fps``, or a GIF frame rate that does not divide 100.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".mp4", ".gif"):
        raise InputError(f"video {path}: the name must end in .mp4 or .gif")
    if not fps > 0:
        raise InputError(f"video frame rate must be positive, got {fps}")
    frames = render_frames(animation, fps, panel_width, progress)
    with atomic_path(path) as tmp:  # the same name, so the same suffix: the writers choose the format by it
        if suffix == ".gif":
            duration_ms = 1000.0 / fps
            if abs(duration_ms / 10 - round(duration_ms / 10)) > 1e-9:
                raise InputError(f"a GIF's frame durations are whole 10 ms: {fps} frames/s does not divide 100")
            images = [frame.quantize(colors=64, method=2, dither=0) for frame in frames]
            images[0].save(tmp, save_all=True, append_images=images[1:], duration=round(duration_ms), loop=0,
                           optimize=True, disposal=1)
        else:
            import imageio_ffmpeg

            first = next(frames)
            writer = imageio_ffmpeg.write_frames(str(tmp), first.size, fps=fps, codec="libx264",
                                                 pix_fmt_in="rgb24", pix_fmt_out="yuv420p", quality=None,
                                                 output_params=["-crf", "26", "-preset", "veryfast"],
                                                 macro_block_size=2, ffmpeg_log_level="error")
            writer.send(None)
            writer.send(first.tobytes())
            for frame in frames:
                writer.send(frame.tobytes())
            writer.close()
    return path
