"""Shared fixtures for the motion tests: a seeded random motion and the shared real-data folder."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from retarget.motion import Motion


def shared_data_dir() -> Path:
    """``../shared/data`` beside the repository, or ``$RETARGET_SHARED_DATA``."""
    env = os.environ.get("RETARGET_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared test data not found at {path} (set RETARGET_SHARED_DATA)")
    return path


@pytest.fixture
def motion() -> Motion:
    """Three joints, 41 samples at 200 Hz with a non-zero start time, seeded random smooth-ish values."""
    rng = np.random.default_rng(1234)
    t = 0.25 + np.arange(41) / 200.0
    q = np.cumsum(rng.normal(scale=0.01, size=(41, 3)), axis=0) + rng.uniform(-1, 1, size=3)
    return Motion(t, ("shoulder_pitch", "elbow", "head_yaw"), q)
