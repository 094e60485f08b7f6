"""CLI: ``retarget motion-info FILE`` and ``retarget import-bvh ROBOT FILE --map MAP.yaml --out FILE``."""
from __future__ import annotations

import argparse
import json
import math
import sys

__all__ = ["register"]


def _robot_limits(robot: str) -> tuple[object, dict]:
    from retarget.model.library import urdf_xml
    from retarget.motion.kinematics import RigKinematics

    kin = RigKinematics(urdf_xml(robot))
    return kin, kin.limits


def _motion_info(args: argparse.Namespace) -> int:
    import numpy as np

    from retarget.motion.io import load_motion

    motion = load_motion(args.file, topic=args.topic)
    limits: dict = {}
    if args.robot:
        _, limits = _robot_limits(args.robot)
    speeds = np.abs(motion.segment_velocities()).max(axis=0) if motion.num_samples > 1 else np.zeros(
        motion.num_joints)
    joints = []
    for j, name in enumerate(motion.joint_names):
        lim = limits.get(name)
        joints.append({"joint": name, "min_rad": float(motion.positions[:, j].min()),
                       "max_rad": float(motion.positions[:, j].max()), "peak_speed_rad_s": float(speeds[j]),
                       "lower_rad": None if lim is None else lim.lower,
                       "upper_rad": None if lim is None else lim.upper,
                       "max_velocity_rad_s": None if lim is None or math.isinf(lim.velocity) else lim.velocity})
    violations = [v.describe() for v in motion.check_limits(limits)] if limits else []
    info = {"file": str(args.file), "samples": motion.num_samples, "start_s": float(motion.time[0]),
            "duration_s": motion.duration, "joints": joints, "limit_violations": violations}
    print(f"{args.file}: {motion.num_samples} samples, {motion.duration:.3f} s, {motion.num_joints} joints")
    print(f"{'joint':24s} {'min [deg]':>10s} {'max [deg]':>10s} {'peak [deg/s]':>13s} {'limit [deg/s]':>13s}")
    for row in joints:
        vmax = row["max_velocity_rad_s"]
        print(f"{row['joint']:24s} {math.degrees(row['min_rad']):10.2f} {math.degrees(row['max_rad']):10.2f} "
              f"{math.degrees(row['peak_speed_rad_s']):13.1f} {'-' if vmax is None else f'{math.degrees(vmax):.1f}':>13s}")
    for line in violations:
        print("  limit: " + line)
    if args.json:
        print(json.dumps(info))
    return 0


def _import_bvh(args: argparse.Namespace) -> int:
    from retarget.motion.bvh import read_bvh
    from retarget.motion.bvh_retarget import load_retarget_map, retarget_bvh
    from retarget.motion.io import save_motion

    kin, limits = _robot_limits(args.robot)
    clip = read_bvh(args.file)
    if args.start is not None or args.end is not None:
        from dataclasses import replace

        first = 0 if args.start is None else int(round(args.start / clip.frame_time))
        last = clip.num_frames if args.end is None else int(round(args.end / clip.frame_time)) + 1
        clip = replace(clip, values=clip.values[first:last])
    rig = load_retarget_map(args.map)
    result = retarget_bvh(clip, kin, rig, rate=args.rate, progress=sys.stderr.isatty())
    violations = result.motion.check_limits(limits)
    position_violations = [v for v in violations if v.kind != "velocity"]
    written = save_motion(args.out, result.motion, joint_limits={n: (lim.lower, lim.upper, None)
                                                                 for n, lim in limits.items()})
    summary = {"out": str(written), "samples": result.motion.num_samples, "duration_s": result.motion.duration,
               "hand_error_mean_m": result.hand_error_m, "hand_error_max_m": result.hand_error_max_m,
               "arm_scale": list(result.arm_scale), "torso_scale": result.torso_scale,
               "position_limit_violations": len(position_violations),
               "speed_limit_violations": [v.describe() for v in violations if v.kind == "velocity"]}
    print(f"wrote {written}: {result.motion.num_samples} samples, {result.motion.duration:.2f} s; hand error "
          f"mean {result.hand_error_m * 1000:.1f} mm, max {result.hand_error_max_m * 1000:.1f} mm")
    for line in summary["speed_limit_violations"]:
        print("  speed: " + line)
    if args.json:
        print(json.dumps(summary))
    return 0


def _import_bvh_legacy(args: argparse.Namespace) -> str:
    """``import-bvh FILE --robot R`` (the old spelling) as ``import-bvh R FILE``, with its deprecation note."""
    from retarget.errors import InputError

    if args.robot_option is None:
        if args.file is None:
            raise InputError("give the robot, then the BVH file: `retarget import-bvh ROBOT FILE.bvh --map ...`")
        return ""
    if args.file is not None:
        raise InputError(f"two robots: {args.robot} and --robot {args.robot_option}")
    args.file, args.robot = args.robot, args.robot_option
    return (f"`retarget import-bvh {args.file} --robot {args.robot}` is deprecated: give the robot first, "
            f"`retarget import-bvh {args.robot} {args.file} ...`")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("motion-info", help="duration, joints, ranges and peak speeds of a motion file",
                       description="Print a motion's duration, joint ranges and peak speeds (vs. a robot's "
                       "URDF limits with --robot).")
    p.add_argument("file", help="motion file (.csv .json .yaml .mcap .db3, bag dir) or name like drummer/drumming")
    p.add_argument("--robot", help="robot name or params YAML whose URDF limits to compare against")
    p.add_argument("--topic", help="bag topic")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_motion_info)

    p = sub.add_parser("import-bvh", help="retarget a BVH character animation onto a robot rig (IK rig)",
                       description="Map a humanoid BVH clip onto a robot by an IK rig (hands, elbows by pole "
                       "vectors, head), scaled to the robot, within its joint limits; write any motion format.")
    p.add_argument("robot", help="robot name (drummer, boxer) or params YAML")
    p.add_argument("file", nargs="?", default=None, help="BVH file")
    p.add_argument("--robot", dest="robot_option", default=None, help=argparse.SUPPRESS)
    p.set_defaults(legacy_form=_import_bvh_legacy)
    p.add_argument("--map", required=True, help="joint map YAML, or a shipped map name "
                   "(cmu_cgspeed_to_humanoid13, iclone_cc_base_to_humanoid13)")
    p.add_argument("--out", required=True, help="output motion file (.csv .json .yaml .mcap .db3)")
    p.add_argument("--rate", type=float, default=None, help="output rate [Hz] (default: the BVH frame rate)")
    p.add_argument("--start", type=float, default=None, help="first BVH time to use [s]")
    p.add_argument("--end", type=float, default=None, help="last BVH time to use [s]")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=_import_bvh)
