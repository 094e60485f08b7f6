"""Tests of retarget.motion.bvh: parsing, Euler conventions, forward kinematics by hand, the shared CMU clips."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from retarget.motion import BvhError
from retarget.motion.bvh import euler_matrices, parse_bvh, read_bvh

SMALL = """HIERARCHY
ROOT Hips
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Yrotation Xrotation
  JOINT Left Arm
  {
    OFFSET 1 0 0
    CHANNELS 2 Zrotation Xrotation
    End Site
    {
      OFFSET 0 2 0
    }
  }
}
MOTION
Frames: 2
Frame Time: .0083333
1 2 3 0 0 0 90 0
0 0 0 0 90 0 0 90
"""


def test_small_file_structure() -> None:
    clip = parse_bvh(SMALL)
    sk = clip.skeleton
    assert sk.names == ("Hips", "Left Arm", "Left Arm_End")
    np.testing.assert_array_equal(sk.parents, [-1, 0, 1])
    assert sk.channels[1] == ("Zrotation", "Xrotation") and sk.num_channels == 8
    np.testing.assert_array_equal(sk.is_end_site, [False, False, True])
    assert clip.frame_time == pytest.approx(0.0083333) and clip.num_frames == 2
    assert clip.duration == pytest.approx(0.0083333)
    assert sk.chain("Left Arm_End") == [0, 1, 2]


def test_forward_kinematics_matches_hand_computation() -> None:
    """Frame 0: arm turned 90 deg about Z; frame 1: root 90 deg about Y, arm 90 deg about X (see comments)."""
    pos, rot = parse_bvh(SMALL).forward_kinematics(scale=0.5)
    # frame 0: root at (1,2,3); arm at root + (1,0,0); Rz(90) maps the end offset (0,2,0) to (-2,0,0)
    np.testing.assert_allclose(pos[0], 0.5 * np.array([[1, 2, 3], [2, 2, 3], [0, 2, 3]]), atol=1e-12)
    # frame 1: Ry(90) maps (1,0,0) to (0,0,-1); Ry(90) Rx(90) maps (0,2,0) to (2,0,0)
    np.testing.assert_allclose(pos[1], 0.5 * np.array([[0, 0, 0], [0, 0, -1], [2, 0, -1]]), atol=1e-12)
    np.testing.assert_allclose(rot[1, 2], Rotation.from_euler("YX", [90, 90], degrees=True).as_matrix(), atol=1e-12)


@pytest.mark.parametrize("order", ["ZYX", "XYZ", "YXZ", "ZXY", "XZY", "YZX"])
def test_euler_matrices_are_intrinsic_left_to_right(order: str) -> None:
    rng = np.random.default_rng(3)
    angles = rng.uniform(-180, 180, size=(5, 3))
    expected = Rotation.from_euler(order, angles, degrees=True).as_matrix()  # upper case = intrinsic
    np.testing.assert_allclose(euler_matrices(angles, order), expected, atol=1e-12)


def _broken(old: str, new: str) -> str:
    assert old in SMALL
    return SMALL.replace(old, new, 1)


@pytest.mark.parametrize(("text", "message"), [
    (_broken("Frames: 2", "Frames: 3"), "'Frames: 3' but the file has 2 frame lines"),
    (_broken("0 0 0 0 90 0 0 90", "0 0 0 0 90 0 0"), "line 20: frame 1: 7 values, expected 8 channels"),
    (_broken("0 0 0 0 90 0 0 90", "0 0 0 0 90 0 0 x"), "line 20: frame 1: not a number"),
    (_broken("0 0 0 0 90 0 0 90", "0 0 0 0 90 0 0 nan"), "line 20: frame 1: non-finite"),
    (_broken("CHANNELS 2 Zrotation Xrotation", "CHANNELS 2 Zrotation Wrotation"), "line 9: joint 'Left Arm': invalid"),
    (_broken("CHANNELS 2 Zrotation Xrotation", "CHANNELS 3 Zrotation Xrotation"), "CHANNELS 3 lists 2 channels"),
    (_broken("OFFSET 1 0 0", "OFFSET 1 0"), "line 8: joint 'Left Arm' OFFSET: expected 3 numbers"),
    (_broken("Frame Time: .0083333", "Frame Time: 0"), "Frame Time must be positive"),
    (_broken("HIERARCHY", "HIERARCHIE"), "line 1: expected HIERARCHY"),
    (SMALL[:SMALL.index("MOTION")], "unexpected end of file"),
])
def test_malformed_bvh_names_the_line(text: str, message: str) -> None:
    with pytest.raises(BvhError, match=message):
        parse_bvh(text, source="x.bvh")


def test_brace_on_the_joint_line_and_name_collisions() -> None:
    text = SMALL.replace("JOINT Left Arm\n  {", "JOINT Left Arm {").replace("ROOT Hips\n{", "ROOT Left Arm_End {")
    sk = parse_bvh(text).skeleton
    assert sk.names == ("Left Arm_End", "Left Arm", "Left Arm_End2")
    with pytest.raises(BvhError, match="no joint 'Arm' .*similar"):
        sk.index("Arm")


@pytest.mark.parametrize(("name", "frames", "joints", "frame_time", "root"), [
    ("cmu_01_01_cgspeed_assimp.bvh", 2752, 31, 0.0083333, "Hips"),
    ("cmu_02_05_punch_strike_iclone.bvh", 927, 100, 0.016667, "CC_Base_Hip"),
    ("cmu_05_02_dance_pirouette_iclone.bvh", 562, 100, 0.016667, "CC_Base_Hip"),
])
def test_shared_cmu_clips(shared_data: Path, name: str, frames: int, joints: int, frame_time: float,
                          root: str) -> None:
    clip = read_bvh(shared_data / "bvh" / name)
    sk = clip.skeleton
    assert clip.num_frames == frames and int((~sk.is_end_site).sum()) == joints
    assert clip.frame_time == frame_time and sk.names[0] == root
    lengths = clip.bone_lengths()
    np.testing.assert_allclose(lengths, np.broadcast_to(lengths[0], lengths.shape), rtol=0, atol=1e-9)
    np.testing.assert_allclose(lengths[0], np.linalg.norm(sk.offsets, axis=1) * (sk.parents >= 0), atol=1e-9)
    pos, _ = clip.forward_kinematics()
    # Y is up: the head is above the hips in every frame (no frame is upside down after a bad Euler order).
    head = next(i for i, n in enumerate(sk.names) if n.endswith("Head"))
    assert np.all(pos[:, head, 1] > pos[:, 0, 1])


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(BvhError, match="cannot read"):
        read_bvh(tmp_path / "missing.bvh")
