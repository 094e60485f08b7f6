"""Tests of retarget.fit.twin: a twin step test written to a bag reads back as the simulation, moved and noisy."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fit.recording import read_recording
from retarget.fit.rig import load_rig
from retarget.fit.simulators import BeamEngine
from retarget.fit.twin import TWIN_EPOCH_S, mocap_frame_transform, record_twin_step_test
from retarget.model.library import resolve_motion
from retarget.motion import load_motion


@pytest.fixture(scope="module")
def engine() -> BeamEngine:
    return BeamEngine(load_rig("single_rod"), dt=2e-3)


def test_mocap_frames() -> None:
    rot, _ = mocap_frame_transform("yup")
    np.testing.assert_allclose(rot @ [0, 0, 1], [0, 1, 0])  # robot up is Motive's +y
    assert np.linalg.det(rot) == pytest.approx(1.0)
    with pytest.raises(InputError):
        mocap_frame_transform("zdown")


def test_twin_bag_matches_simulation(tmp_path, engine) -> None:
    motion = load_motion(resolve_motion("single_rod/step_30"))
    truth = (2.0e11, 0.4, 5e-5)
    info = record_twin_step_test(engine, motion, tmp_path / "bag", *truth, noise_m=0.001, occlusion=0.1, seed=3)
    rec = read_recording(tmp_path / "bag", "tip")
    assert info.topic == "/mocap/tip/pose"
    assert len(rec.time_s) == info.frames - info.occluded and 0 < info.occluded < 0.2 * info.frames
    sim = engine.simulate(*truth, motion)
    t_motion = rec.time_s - TWIN_EPOCH_S - info.lead_s
    robot = (rec.position_m - info.translation) @ info.rotation  # back to the robot frame
    err = robot - sim.at(t_motion)
    assert np.std(err) == pytest.approx(0.001, rel=0.15)
    assert np.abs(err.mean(axis=0)).max() < 3e-4
    assert info.truth == {"youngs_modulus": 2.0e11, "alpha": 0.4, "beta": 5e-5}


def test_sqlite_storage_and_existing_bag(tmp_path, engine) -> None:
    from retarget.mocap.errors import BagError

    motion = load_motion(resolve_motion("single_rod/step_30"))
    record_twin_step_test(engine, motion, tmp_path / "b", 2e11, 0.2, 2e-5, storage="sqlite3", noise_m=0.0)
    assert len(read_recording(tmp_path / "b", "tip").time_s) > 400
    with pytest.raises(BagError):
        record_twin_step_test(engine, motion, tmp_path / "b", 2e11, 0.2, 2e-5)


def test_twin_motive_csv_in_any_frame_starting_after_the_motion(tmp_path, engine) -> None:
    """A Motive CSV export (mm, empty cells where untracked) in a rotated, offset frame whose capture starts 0.6 s
    into the motion: it reads back as the simulation, moved and noisy, with missing frames."""
    from scipy.spatial.transform import Rotation

    motion = load_motion(resolve_motion("single_rod/step_30"))
    truth = (2.0e11, 0.4, 5e-5)
    rot = Rotation.from_euler("xyz", [12, -25, 70], degrees=True).as_matrix()
    info = record_twin_step_test(engine, motion, tmp_path / "take.csv", *truth, noise_m=0.001, occlusion=0.1,
                                 lead_s=-0.6, mocap_frame=(rot, [0.4, 1.1, -2.3]), seed=3)
    lines = (tmp_path / "take.csv").read_text().splitlines()
    assert lines[0].startswith("Format Version,1.23,") and "Length Units,Millimeters" in lines[0]
    assert sum(line.endswith(",,,,,,,,") for line in lines) == info.occluded > 0
    rec = read_recording(tmp_path / "take.csv", "tip")
    assert len(rec.time_s) == info.frames and rec.time_s[0] == 0.0  # every frame, take time from 0
    assert int((~rec.valid).sum()) == info.occluded
    sim = engine.simulate(*truth, motion)
    robot = (rec.position_m[rec.valid] - [0.4, 1.1, -2.3]) @ rot  # back to the robot frame
    err = robot - sim.at(rec.time_s[rec.valid] + 0.6)
    assert np.std(err) == pytest.approx(0.001, rel=0.15) and np.abs(err.mean(axis=0)).max() < 3e-4
    with pytest.raises(InputError, match="proper rotation"):
        mocap_frame_transform((-np.eye(3), np.zeros(3)))
    with pytest.raises(InputError, match="nothing to record"):
        record_twin_step_test(engine, motion, tmp_path / "late.csv", *truth, lead_s=-100.0)
