"""Tests of retarget.motion.bvh_retarget: pole-vector elbow targets, map loading, and short real clips on the
humanoid13 rig (skipped without the robot library or the shared data). Full-clip numbers: ``retarget import-bvh``."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from retarget.motion import MotionFormatError
from retarget.motion.bvh import read_bvh
from retarget.motion.bvh_retarget import MAPS_DIR, _elbow_target, load_retarget_map, retarget_bvh


def test_elbow_target_keeps_link_lengths_and_bend_side() -> None:
    rng = np.random.default_rng(11)
    for _ in range(20):
        hand = rng.normal(size=3) * 0.2
        pole = rng.normal(size=3)
        l1, l2 = 0.15, 0.125
        elbow = _elbow_target(np.zeros(3), hand, pole, l1, l2)
        assert elbow is not None
        assert np.linalg.norm(elbow) == pytest.approx(l1, abs=1e-9)
        if np.linalg.norm(hand) < l1 + l2:
            assert np.linalg.norm(hand - elbow) == pytest.approx(l2, abs=1e-9)
        e = hand / np.linalg.norm(hand)
        assert (elbow - (elbow @ e) * e) @ (pole - (pole @ e) * e) > 0
    assert _elbow_target(np.zeros(3), np.array([0, 0, -0.2]), np.array([0, 0, 1.0]), 0.15, 0.125) is None


def test_shipped_maps_load_and_bad_maps_are_refused(tmp_path: Path) -> None:
    names = sorted(p.stem for p in MAPS_DIR.glob("*.yaml"))
    assert names == ["cmu_cgspeed_to_humanoid13", "iclone_cc_base_to_humanoid13"]
    for name in names:
        assert load_retarget_map(name).joints["hips"]
    bad = tmp_path / "m.yaml"
    bad.write_text("bvh: {joints: {hips: Hips}}\nrobot: {links: {}}\n")
    with pytest.raises(MotionFormatError, match=r"lacks bvh.joints \['left_hip'"):
        load_retarget_map(bad)
    with pytest.raises(MotionFormatError, match="no joint map 'nope'"):
        load_retarget_map("nope")


@pytest.mark.parametrize(("clip_name", "robot", "rig"), [
    ("cmu_02_05_punch_strike_iclone.bvh", "boxer", "iclone_cc_base_to_humanoid13"),
    ("cmu_01_01_cgspeed_assimp.bvh", "drummer", "cmu_cgspeed_to_humanoid13"),
])
def test_short_real_clip_follows_the_hands_within_limits(shared_data: Path, clip_name: str, robot: str,
                                                         rig: str) -> None:
    library = pytest.importorskip("retarget.model.library", reason="robot library not available")
    from retarget.motion.kinematics import RigKinematics

    try:
        kin = RigKinematics(library.urdf_xml(robot))
    except Exception as exc:  # the robot files are written in parallel
        pytest.skip(f"robot '{robot}' not loadable yet: {exc}")
    clip = read_bvh(shared_data / "bvh" / clip_name)
    start = int(1.0 / clip.frame_time)  # skip the first second (cgspeed clips begin with a T-pose frame)
    clip = replace(clip, values=clip.values[start: 2 * start])
    result = retarget_bvh(clip, kin, load_retarget_map(rig), rate=20.0, iterations=8)
    assert result.motion.joint_names == kin.joint_names and result.motion.num_samples == 20
    position_limits = {n: (lim.lower, lim.upper, None) for n, lim in kin.limits.items()}
    assert result.motion.check_limits(position_limits) == []
    assert result.hand_error_m < 0.04  # arms are ~0.28 m long
