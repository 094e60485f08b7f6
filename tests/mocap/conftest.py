"""Shared fixtures for the mocap tests: the real-data folders (skipped cleanly when absent)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest


def shared_data_dir() -> Path:
    """``../shared/data`` beside the repository, or ``$RETARGET_SHARED_DATA``."""
    env = os.environ.get("RETARGET_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def _folder(*parts: str) -> Path:
    path = shared_data_dir().joinpath(*parts)
    if not path.is_dir():
        pytest.skip(f"shared test data not found at {path} (set RETARGET_SHARED_DATA to the shared/data folder)")
    return path


@pytest.fixture
def natnet_dir() -> Path:
    """The real NatNet 3.0 packets from Motive 2.1."""
    return _folder("optitrack", "natnet_v3_packets")


@pytest.fixture
def optitrack_dir() -> Path:
    """The Motive CSV exports."""
    return _folder("optitrack")


@pytest.fixture
def rosbag_dir() -> Path:
    """The real rosbag2 recordings."""
    return _folder("rosbag2")
