"""The video (retarget.report.video): frame count and duration match the motion, read back with imageio-ffmpeg's
reader (MP4) and Pillow's (GIF); the robot moves between frames."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.report.animation import load_animation
from retarget.report.video import video_frame_times, write_video

# The plans these tests run fork worker processes (the full-FEM checks, the robust members).
pytestmark = pytest.mark.integration

DURATION_S = 0.6  # the tiny report's motion (conftest.write_visual_robot)


def test_mp4_frames_and_duration_match_the_motion(tiny_report):
    import imageio_ffmpeg

    path = tiny_report / "animation.mp4"
    frames, seconds = imageio_ffmpeg.count_frames_and_secs(str(path))
    # 25 frames per second, frame k at k / 25 s: floor(0.6 x 25) + 1 frames lasting 1/25 s each.
    assert frames == len(video_frame_times(DURATION_S, 25.0)) == 16
    assert seconds == pytest.approx(frames / 25.0, abs=1e-3)
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    assert meta["fps"] == pytest.approx(25.0) and meta["size"] == (3 * 480, 432)
    images = [np.frombuffer(b, dtype=np.uint8).reshape(432, 3 * 480, 3).astype(int) for b in reader]
    assert len(images) == frames
    assert np.abs(images[2] - images[8]).sum(axis=-1).max() > 100  # the robot moves


def test_gif_frames_and_durations(tiny_report, tmp_path):
    from PIL import Image

    animation = load_animation(tiny_report / "animation.npz").select(["naive", "optimized"])
    path = write_video(animation, tmp_path / "a.gif", fps=20, panel_width=160)
    with Image.open(path) as gif:
        assert gif.n_frames == len(video_frame_times(DURATION_S, 20.0)) == 13
        durations = []
        for k in range(gif.n_frames):
            gif.seek(k)
            durations.append(gif.info["duration"])
        assert gif.size == (2 * 160, 144)
    assert durations == [50] * 13


def test_an_upper_case_suffix_chooses_the_format_and_nothing_else_is_left(tiny_report, tmp_path):
    import imageio_ffmpeg
    from PIL import Image

    animation = load_animation(tiny_report / "animation.npz").select(["optimized"])
    mp4 = write_video(animation, tmp_path / "A.MP4", fps=5, panel_width=160)
    assert imageio_ffmpeg.count_frames_and_secs(str(mp4))[0] == len(video_frame_times(DURATION_S, 5.0))
    with Image.open(write_video(animation, tmp_path / "A.GIF", fps=5, panel_width=160)) as gif:
        assert gif.format == "GIF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.GIF", "A.MP4"]
    assert not list(tiny_report.glob(".*"))  # the report's page, video, MCAP and animation: no temporary file left


def test_bad_video_requests(tiny_report, tmp_path):
    animation = load_animation(tiny_report / "animation.npz")
    with pytest.raises(InputError, match=r"\.mp4 or \.gif"):
        write_video(animation, tmp_path / "a.avi")
    with pytest.raises(InputError, match="whole 10 ms"):
        write_video(animation, tmp_path / "a.gif", fps=30)
    assert not list(tmp_path.iterdir())  # nothing half-written
