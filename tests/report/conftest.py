"""A real plan report of a tiny robot with URDF visuals, made once per test run by ``retarget plan --report``.

The robot is the optimizer tests' 20 cm spring-steel rod on one motor with a 50 g tip mass, given a box on the horn
and a sphere at the tip, in the ``config/`` + ``urdf/`` layout of a robot folder; the motion is a 0.1 s ramp held
for 0.5 s (enough ring-out for the ZVD baseline). The reduced model has 2 modes trained on 0.04 s of the ramp.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "optimize"))

import tiny_robot

DURATION_S = 0.6


def write_visual_robot(folder: Path) -> Path:
    """``config/tiny_rod.yaml``, ``urdf/tiny_rod.urdf`` (with visuals) and ``ramp.csv`` in ``folder``."""
    from retarget.motion import Motion, save_motion

    (folder / "config").mkdir(parents=True, exist_ok=True)
    (folder / "urdf").mkdir(exist_ok=True)
    urdf = tiny_robot.URDF.replace(
        '<link name="horn">',
        '<link name="horn">\n    <visual><geometry><box size="0.03 0.02 0.01"/></geometry></visual>').replace(
        '<link name="tip">', '<link name="tip">\n    <visual><geometry><sphere radius="0.012"/></geometry></visual>')
    (folder / "urdf" / "tiny_rod.urdf").write_text(urdf)
    (folder / "config" / "tiny_rod.yaml").write_text(tiny_robot.YAML)
    t = np.linspace(0.0, DURATION_S, 121)
    save_motion(folder / "ramp.csv", Motion(t, ("m",), (0.2 * np.clip(t / 0.1, 0, 1))[:, None]))
    return folder / "config" / "tiny_rod.yaml"


@pytest.fixture(scope="session")
def tiny_report(tmp_path_factory) -> Path:
    """The report folder of ``retarget plan`` on the tiny robot (page, video and MCAP included)."""
    from retarget.cli import main

    folder = tmp_path_factory.mktemp("tiny_report")
    robot = write_visual_robot(folder)
    model = folder / "models" / "tiny_rod-ramp.npz"
    assert main(["reduce", str(robot), "--train-motion", str(folder / "ramp.csv"), "--out", str(model), "--dt",
                 "0.002", "--modes", "2", "--duration", "0.04", "--replay-tolerance", "0"]) == 0
    report = folder / "report"
    code = main(["plan", str(robot), "--motion", str(folder / "ramp.csv"), "--reduced", str(model),
                 "--max-iterations", "2", "--knot-spacing", "0.04", "--verify-dt", "0", "--robust", "none", "--band",
                 "none", "--verify-model", "none", "--allow-unverified-model", "--report", str(report)])
    # 3: no meaningful cut in two iterations; the report is written all the same.
    assert code in (0, 3)
    return report
