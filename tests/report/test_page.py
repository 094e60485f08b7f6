"""The page (retarget.report.page): self-contained, and in a real browser (headless Chromium, software WebGL) the
robot is drawn and moves once playback starts.

Chromium is the Debian package ``chromium`` (``make setup`` installs it where it runs as root with apt-get); the
browser test skips, saying so, where it is absent.
"""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

# The plans these tests run fork worker processes (the full-FEM checks, the robust members).
pytestmark = pytest.mark.integration


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _chromium_flags(size: tuple[int, int] = (900, 500)) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
            "--hide-scrollbars", f"--window-size={size[0]},{size[1]}"]


def _screenshot(browser: str, url: str, out: Path, budget_ms: int = 2000) -> np.ndarray:
    """A screenshot of the page at ``url`` once ``budget_ms`` of (virtual) time has run in it; RGB (h, w, 3)."""
    from PIL import Image

    cmd = [browser, *_chromium_flags(), f"--virtual-time-budget={budget_ms}", f"--screenshot={out}", url]
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180)
    assert out.is_file(), f"chromium wrote no screenshot (exit {run.returncode}): {run.stderr[-2000:]}"
    return np.asarray(Image.open(out).convert("RGB"), dtype=int)


def _shown_time(browser: str, url: str, budget_ms: int) -> float:
    """The time the page's clock label shows once ``budget_ms`` of (virtual) time has run in it."""
    cmd = [browser, *_chromium_flags(), f"--virtual-time-budget={budget_ms}", "--dump-dom", url]
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180)
    found = re.search(r'id="time"[^>]*>t = ([0-9.]+) s<', run.stdout)
    assert found, f"the page shows no clock (exit {run.returncode}): {run.stderr[-2000:]}"
    return float(found.group(1))


def test_page_is_self_contained_and_small(tiny_report):
    text = (tiny_report / "animation.html").read_text()
    # No file or network fetch: scripts are inline or data: URLs of the import map.
    assert not re.search(r"<script[^>]+src=", text) and not re.search(r"<link[^>]+href=", text)
    assert '"three": "data:text/javascript;base64,' in text
    assert len(text.encode()) < 1_500_000  # three.js (0.9 MB as base64) + 0.6 s of three runs


def test_robot_is_drawn_and_moves_in_chromium(tiny_report, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium; make setup does it as root)")
    page = (tiny_report / "animation.html").resolve().as_uri()
    # The motion ramps the rod over 0.1 s then rings: the page opened at 0.05 s and at 0.25 s (its #t= seek, paused)
    # shows two poses. The seek makes the pictures independent of how fast a loaded machine renders.
    early = _screenshot(browser, page + "#t=0.05", tmp_path / "early.png")
    late = _screenshot(browser, page + "#t=0.25", tmp_path / "late.png")
    view = (slice(60, 440), slice(0, 900))  # the viewports, below the labels and above the controls
    blue = np.array([51, 115, 242])

    def rod_pixels(image: np.ndarray) -> int:
        """Pixels of the flexible parts' blue (shaded): more blue than red and green by a margin."""
        px = image[view]
        return int(np.sum((px[..., 2] > px[..., 0] + 60) & (px[..., 2] > px[..., 1] + 30)))

    for image in (early, late):
        assert image.shape[:2] == (500, 900)
        # Drawn: each of the three panels shows the rod (a few hundred blue pixels) on its light background.
        assert rod_pixels(image) > 3 * 150, "the flexible part is not drawn"
        assert np.abs(image[view] - blue).sum(axis=-1).min() < 120
    moved = np.abs(early[view] - late[view]).sum(axis=-1) > 60
    assert moved.sum() > 200, "the robot does not move between the two times"


def test_playback_starts_on_its_own_in_chromium(tiny_report):
    browser = _chromium()
    if browser is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium; make setup does it as root)")
    page = (tiny_report / "animation.html").resolve().as_uri()
    assert _shown_time(browser, page + "#t=0.2", 1000) == pytest.approx(0.2, abs=0.011)  # seeked: stays paused
    # Opened plainly, the clock runs: after 3 s of page time it is past the start (it loops over the 0.6 s motion,
    # hence a second budget off its period). On a loaded machine few animation frames may fit the page's virtual
    # time before the budget ends (software rendering): longer budgets follow, tried only while the clock shows 0.
    assert any(_shown_time(browser, page, budget) > 0.0 for budget in (3000, 3300, 8000, 20000))


def _embedded_times(html: str) -> np.ndarray:
    """The frame times [s] the page embeds (its JSON payload's base64 float32 ``times``)."""
    payload = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.DOTALL)
    assert payload, "the page has no data payload"
    return np.frombuffer(base64.b64decode(json.loads(payload.group(1))["times"]), dtype="<f4")


def test_page_embeds_frames_decimated_to_its_rate(tiny_report):
    from retarget.report.animation import load_animation
    from retarget.report.page import page_html

    animation = load_animation(tiny_report / "animation.npz")  # 50 frames per second over 0.6 s: 31
    assert len(animation.times) == 31
    # The written page: every second frame (25 per second), so a long motion's page grows at 25 frames a second.
    times = _embedded_times((tiny_report / "animation.html").read_text())
    assert len(times) == 16 and np.allclose(np.diff(times), 0.04, atol=1e-6) and times[-1] == pytest.approx(0.6)
    times = _embedded_times(page_html(animation, fps=10.0))
    assert len(times) == 7 and np.allclose(np.diff(times), 0.1, atol=1e-6)
