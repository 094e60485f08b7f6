"""Character animation onto a robot rig: an IK rig with pole vectors (seed 002, Yang et al.) on key effectors.

Pipeline, per output frame:

1. Forward kinematics of the BVH character; express its key joints in the character's *heading frame*
   (origin at the hips, up = the BVH up axis, left = horizontal direction from right hip to left hip,
   forward = left x up). Locomotion and whole-body turns are removed: the robot stands on a fixed base.
2. IK-rig targets in the robot's frame (x forward, y left, z up), scaled to the robot's size by segment ratios:
   hand relative to shoulder (arm-length ratio), head relative to pelvis (torso ratio), and the elbow placed on the
   character's pole vector (the bend direction): with robot upper/lower arm lengths ``l1``, ``l2`` and hand target
   ``E'`` from the shoulder ``R``, the elbow target is ``R + l1 cos(a) e + l1 sin(a) p``, with ``e`` along ``RE'``,
   ``cos(a) = (l1^2 + |RE'|^2 - l2^2) / (2 l1 |RE'|)`` and ``p`` the character's pole direction (the part of
   shoulder->elbow perpendicular to shoulder->hand).
3. Damped least squares over all motors, warm-started from the previous frame, each step clipped to the URDF
   position limits; a small pull toward the previous frame keeps the motion continuous.

The joint map (which character joints and robot links play which role, and the weights) is a user-editable YAML;
maps for the CMU cgspeed and iClone CC_Base skeletons onto the humanoid13 rig ship in ``retarget/motion/maps``.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from retarget.motion.bvh import BvhClip
from retarget.motion.errors import MotionFormatError
from retarget.motion.kinematics import RigKinematics
from retarget.motion.motion import Motion

__all__ = ["MAPS_DIR", "RetargetMap", "RetargetResult", "load_retarget_map", "retarget_bvh"]

#: Folder of the shipped joint maps.
MAPS_DIR = Path(__file__).resolve().parent / "maps"
_ROLES = ("hips", "left_hip", "right_hip", "head", "left_shoulder", "left_elbow", "left_hand", "right_shoulder",
          "right_elbow", "right_hand")
_LINK_ROLES = ("pelvis", "head", "left_shoulder", "left_elbow", "left_hand", "right_shoulder", "right_elbow",
               "right_hand")
_DEFAULT_WEIGHTS = {"hand": 1.0, "elbow": 0.3, "head": 0.5, "smooth": 0.02, "rest": 0.001}


@dataclass(frozen=True)
class RetargetMap:
    """Which character joints and robot links play which IK-rig role.

    Attributes:
        joints: ``{role: BVH joint name}`` for every role in ``hips, left_hip, right_hip, head,
            {left,right}_{shoulder,elbow,hand}``.
        links: ``{role: robot link name}`` for ``pelvis, head, {left,right}_{shoulder,elbow,hand}``.
        up_axis: BVH up axis, ``"x"``, ``"y"`` or ``"z"``.
        length_unit: Metres per BVH length unit (informational: targets are scaled by segment ratios).
        weights: Objective weights ``hand, elbow, head, smooth, rest``.
        description: Free text.
    """

    joints: dict[str, str]
    links: dict[str, str]
    up_axis: str = "y"
    length_unit: float = 0.01
    weights: dict[str, float] = field(default_factory=lambda: dict(_DEFAULT_WEIGHTS))
    description: str = ""


def load_retarget_map(path_or_name: str | os.PathLike[str]) -> RetargetMap:
    """Read a joint-map YAML (a path, or the name of a shipped map such as ``cmu_cgspeed_to_humanoid13``).

    Raises:
        MotionFormatError: Missing roles, unknown up axis or weights.
    """
    path = Path(path_or_name)
    if not path.exists() and (MAPS_DIR / f"{path_or_name}.yaml").exists():
        path = MAPS_DIR / f"{path_or_name}.yaml"
    if not path.exists():
        shipped = sorted(p.stem for p in MAPS_DIR.glob("*.yaml"))
        raise MotionFormatError(f"no joint map '{path_or_name}'; shipped maps: {shipped}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise MotionFormatError(f"not valid YAML: {exc}", source=str(path)) from None
    bvh, robot = data.get("bvh") or {}, data.get("robot") or {}
    joints, links = dict(bvh.get("joints") or {}), dict(robot.get("links") or {})
    missing = [r for r in _ROLES if r not in joints]
    missing_links = [r for r in _LINK_ROLES if r not in links]
    if missing or missing_links:
        raise MotionFormatError(f"joint map lacks bvh.joints {missing} and robot.links {missing_links}",
                                source=str(path))
    up = str(bvh.get("up_axis", "y")).lower()
    if up not in ("x", "y", "z"):
        raise MotionFormatError(f"up_axis must be x, y or z, got '{up}'", source=str(path))
    weights = dict(_DEFAULT_WEIGHTS)
    extra = set(data.get("weights") or {}) - set(weights)
    if extra:
        raise MotionFormatError(f"unknown weights {sorted(extra)}; known: {sorted(weights)}", source=str(path))
    weights.update({k: float(v) for k, v in (data.get("weights") or {}).items()})
    return RetargetMap(joints, links, up, float(bvh.get("length_unit", 0.01)), weights,
                       str(data.get("description", "")))


@dataclass(frozen=True)
class RetargetResult:
    """A retargeted motion and how well it follows the character.

    Attributes:
        motion: Robot motor angles [rad] over time [s].
        hand_targets: Scaled character hand paths in the robot frame [m], shape ``(n, 2, 3)`` (left, right),
            relative to the robot's shoulders as they move.
        hand_positions: Robot hand paths [m], shape ``(n, 2, 3)``.
        hand_error_m: Mean distance between robot hands and their targets [m] over frames and both hands.
        hand_error_max_m: Largest such distance [m].
        arm_scale: Robot / character arm-length ratio (left, right).
        torso_scale: Robot / character hips-to-head ratio.
    """

    motion: Motion
    hand_targets: np.ndarray
    hand_positions: np.ndarray
    hand_error_m: float
    hand_error_max_m: float
    arm_scale: tuple[float, float]
    torso_scale: float


def _heading_frames(pos: np.ndarray, rig: RetargetMap, idx: dict[str, int]) -> np.ndarray:
    """Rows (forward, left, up) of the character heading frame per frame, shape ``(f, 3, 3)``."""
    up = np.zeros(3)
    up["xyz".index(rig.up_axis)] = 1.0
    left = pos[:, idx["left_hip"]] - pos[:, idx["right_hip"]]
    left = left - np.outer(left @ up, up)
    norm = np.linalg.norm(left, axis=1)
    if np.any(norm < 1e-9):
        raise MotionFormatError("left and right hips coincide (seen from above); check the joint map")
    left /= norm[:, None]
    forward = np.cross(left, up)
    return np.stack([forward, left, np.broadcast_to(up, left.shape)], axis=1)


def _elbow_target(shoulder: np.ndarray, hand: np.ndarray, pole: np.ndarray, l1: float, l2: float
                  ) -> np.ndarray | None:
    """Elbow position on the pole side of the shoulder->hand line for link lengths ``l1``, ``l2`` [m]."""
    e = hand - shoulder
    d = float(np.linalg.norm(e))
    if d < 1e-9:
        return None
    e /= d
    p = pole - (pole @ e) * e
    if np.linalg.norm(p) < 1e-6:  # straight arm: no bend direction to follow
        return None
    p /= np.linalg.norm(p)
    d = min(max(d, abs(l1 - l2) + 1e-9), l1 + l2 - 1e-9)
    cos_a = (l1 * l1 + d * d - l2 * l2) / (2.0 * l1 * d)
    return shoulder + l1 * cos_a * e + l1 * np.sqrt(max(0.0, 1.0 - cos_a * cos_a)) * p


def retarget_bvh(clip: BvhClip, kinematics: RigKinematics, rig: RetargetMap, *, rate: float | None = None,
                 iterations: int = 12, progress: bool = False) -> RetargetResult:
    """Retarget a BVH clip onto a robot rig.

    Args:
        clip: The character animation.
        kinematics: The robot's rigid kinematics (URDF limits are respected).
        rig: The joint map.
        rate: Output sampling rate [Hz]; default the BVH frame rate.
        iterations: Damped-least-squares iterations per frame.
        progress: Show a progress bar on stderr.

    Returns:
        The motion over the robot's actuated joints and the hand-tracking error.
    """
    sk = clip.skeleton
    idx = {role: sk.index(name) for role, name in rig.joints.items() if role in _ROLES}
    for role, link in rig.links.items():
        kinematics.ancestors(link)  # raises if the robot lacks the link
    pos_all, _ = clip.forward_kinematics()
    times = clip.time
    out_t = times if rate is None else np.arange(int(np.floor(clip.duration * rate + 1e-9)) + 1) / rate
    keys = np.stack([pos_all[:, idx[r]] for r in _ROLES], axis=1)  # (f, roles, 3)
    if rate is not None:
        keys = np.stack([[np.interp(out_t, times, keys[:, r, c]) for c in range(3)] for r in range(len(_ROLES))],
                        axis=0).transpose(2, 0, 1)
    k = {r: i for i, r in enumerate(_ROLES)}
    heading = _heading_frames(keys, rig, k)
    rel = np.einsum("fab,frb->fra", heading, keys - keys[:, [k["hips"]]])  # (n, roles, 3) robot axes, BVH units

    m = len(kinematics.joint_names)
    lower, upper = kinematics.lower_upper()
    rest = np.clip(np.zeros(m), lower, upper)
    f0 = kinematics.forward(rest)
    pt = {role: f0[link][:3, 3] for role, link in rig.links.items()}
    arm_scale, l12 = [], []
    for side in ("left", "right"):
        l1 = float(np.linalg.norm(pt[f"{side}_elbow"] - pt[f"{side}_shoulder"]))
        l2 = float(np.linalg.norm(pt[f"{side}_hand"] - pt[f"{side}_elbow"]))
        c = rel[0]
        char = (np.linalg.norm(c[k[f"{side}_elbow"]] - c[k[f"{side}_shoulder"]])
                + np.linalg.norm(c[k[f"{side}_hand"]] - c[k[f"{side}_elbow"]]))
        arm_scale.append((l1 + l2) / char)
        l12.append((l1, l2))
    torso_scale = float(np.linalg.norm(pt["head"] - pt["pelvis"]) / np.linalg.norm(rel[0, k["head"]]))
    w = rig.weights
    q = rest.copy()
    n = len(out_t)
    angles = np.empty((n, m))
    hands = np.empty((n, 2, 3))
    targets = np.empty((n, 2, 3))
    frames_iter: Iterable[int] = range(n)
    if progress:
        from tqdm import tqdm

        frames_iter = tqdm(frames_iter, desc="retarget", unit="frame", leave=False)
    for i in frames_iter:
        c = rel[i]
        q_prev = q.copy()
        # The first frame starts from the zero pose, far from the character: converge it fully, unsmoothed, so
        # the motion does not begin with a jump.
        smooth = 0.0 if i == 0 else w["smooth"]
        for _ in range(iterations * 5 if i == 0 else iterations):
            fr = kinematics.forward(q)
            rows, jacs = [], []
            head_target = pt["pelvis"] + torso_scale * c[k["head"]]
            rows.append(w["head"] * (fr[rig.links["head"]][:3, 3] - head_target))
            jacs.append(w["head"] * (kinematics.point_jacobian(fr, rig.links["head"])
                                     - kinematics.point_jacobian(fr, rig.links["pelvis"])))
            for s, side in enumerate(("left", "right")):
                sh_link, el_link, ha_link = (rig.links[f"{side}_{p}"] for p in ("shoulder", "elbow", "hand"))
                sh = fr[sh_link][:3, 3]
                j_sh = kinematics.point_jacobian(fr, sh_link)
                d_hand = arm_scale[s] * (c[k[f"{side}_hand"]] - c[k[f"{side}_shoulder"]])
                rows.append(w["hand"] * (fr[ha_link][:3, 3] - sh - d_hand))
                jacs.append(w["hand"] * (kinematics.point_jacobian(fr, ha_link) - j_sh))
                elbow = _elbow_target(np.zeros(3), d_hand, c[k[f"{side}_elbow"]] - c[k[f"{side}_shoulder"]],
                                      *l12[s])
                if elbow is not None:
                    rows.append(w["elbow"] * (fr[el_link][:3, 3] - sh - elbow))
                    jacs.append(w["elbow"] * (kinematics.point_jacobian(fr, el_link) - j_sh))
            r = np.concatenate(rows)
            jac = np.vstack(jacs)
            lhs = jac.T @ jac + (smooth + w["rest"] + 1e-6) * np.eye(m)
            rhs = -(jac.T @ r) - smooth * (q - q_prev) - w["rest"] * (q - rest)
            q = np.clip(q + np.linalg.solve(lhs, rhs), lower, upper)
        fr = kinematics.forward(q)
        angles[i] = q
        for s, side in enumerate(("left", "right")):
            sh = fr[rig.links[f"{side}_shoulder"]][:3, 3]
            hands[i, s] = fr[rig.links[f"{side}_hand"]][:3, 3]
            targets[i, s] = sh + arm_scale[s] * (c[k[f"{side}_hand"]] - c[k[f"{side}_shoulder"]])
    err = np.linalg.norm(hands - targets, axis=-1)
    motion = Motion(out_t, kinematics.joint_names, angles)
    return RetargetResult(motion, targets, hands, float(err.mean()), float(err.max()),
                          (float(arm_scale[0]), float(arm_scale[1])), torso_scale)
