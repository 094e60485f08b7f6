"""The source-independent frame type."""
from __future__ import annotations

import math

import pytest

from retarget.mocap.source import BodyPose, MocapFrame


def test_valid_bodies_and_lookup() -> None:
    good = BodyPose("tip", (0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0))
    lost = BodyPose("base", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), tracking_valid=False)
    nan = BodyPose("arm", (math.nan, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    frame = MocapFrame(3, 9.995, 10.0, 0.005, (good, lost, nan))
    assert frame.valid_bodies == (good,)
    assert frame.body("base") is lost
    with pytest.raises(KeyError):
        frame.body("head")
