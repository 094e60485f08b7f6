"""Reading and writing motions in any supported format: :func:`load_motion` and :func:`save_motion`.

Formats by suffix: ``.csv``, ``.json``, ``.yaml``/``.yml`` (a JointTrajectory or a keyframes file, told apart by
content), and rosbag2 bags (a directory with ``metadata.yaml``, or its ``.mcap`` / ``.db3`` file). A string that is
not an existing path but looks like ``<robot>/<motion>`` is looked up in the motion library
(``retarget.model.library.resolve_motion``).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Union

import yaml

from retarget.motion.errors import MotionFormatError
from retarget.motion.limits import LimitLike, RowLabel, default_row_label
from retarget.motion.motion import Motion

__all__ = ["FORMATS", "WriterOption", "detect_format", "load_motion", "resolve_motion_path", "save_motion"]

#: A writer option of :func:`save_motion` (``time_unit``, ``velocities``, ``robot``, ``description``, ``topic``,
#: ``msgtype``, ``storage``, ``start_time_ns``).
WriterOption = Union[str, bool, int, float, None]

#: Format names accepted by :func:`save_motion` (``fmt=``) and :func:`load_motion` (``fmt=``).
FORMATS: tuple[str, ...] = ("csv", "json", "trajectory", "keyframes", "bag")
_BY_SUFFIX = {".csv": "csv", ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".mcap": "bag", ".db3": "bag"}


def resolve_motion_path(path_or_name: str | os.PathLike[str]) -> Path:
    """The file of a motion given as a path or as a library name such as ``single_rod/step_30``.

    Raises:
        MotionFormatError: Neither an existing path nor a known motion name.
    """
    path = Path(path_or_name)
    if path.exists():
        return path
    try:
        from retarget.model.library import resolve_motion  # written in parallel; absent in early checkouts
    except ImportError:
        raise MotionFormatError(f"no such motion file '{path_or_name}' (and no motion library to look names up "
                                f"in)") from None
    try:
        return Path(resolve_motion(str(path_or_name)))
    except Exception as exc:  # the library raises its own error types; report them as a missing motion
        raise MotionFormatError(f"no such motion file or motion name '{path_or_name}': {exc}") from exc


def detect_format(path: str | os.PathLike[str]) -> str:
    """Format name of a motion file or bag (one of :data:`FORMATS`); YAML is told apart by content."""
    path = Path(path)
    if path.is_dir():
        if (path / "metadata.yaml").exists() or any(path.glob("*.mcap")) or any(path.glob("*.db3")):
            return "bag"
        raise MotionFormatError("directory is not a rosbag2 bag (no metadata.yaml)", source=str(path))
    kind = _BY_SUFFIX.get(path.suffix.lower())
    if kind is None:
        hint = ""
        if path.suffix.lower() == ".bvh":  # a character's joint angles, not a robot's: mapped by its IK rig first
            hint = (f" (a BVH animates a character, not the robot: map it onto the robot first with `retarget "
                    f"import-bvh ROBOT {path} --map MAP --out motion.csv`)")
        raise MotionFormatError(f"unknown motion file type '{path.suffix}'; use .csv, .json, .yaml, .yml, .mcap, "
                                f".db3 or a bag directory{hint}", source=str(path))
    if kind != "yaml":
        return kind
    from retarget.motion.keyframes import is_keyframes_dict
    from retarget.motion.trajectory import is_trajectory_dict

    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except yaml.YAMLError as exc:
        raise MotionFormatError(f"not valid YAML: {exc}", source=str(path)) from None
    if docs and is_keyframes_dict(docs[0]):
        return "keyframes"
    if docs and is_trajectory_dict(docs[0]):
        return "trajectory"
    raise MotionFormatError("YAML is neither a JointTrajectory (joint_names, points) nor a keyframes file "
                            "(joints, keyframes)", source=str(path))


def _read(path: Path, fmt: str, topic: str | None, index: int) -> tuple[Motion, RowLabel]:
    if fmt == "csv":
        from retarget.motion.csv_format import parse_csv

        return parse_csv(path.read_text(encoding="utf-8"), source=str(path))
    if fmt == "json":
        from retarget.motion.json_format import read_json

        return read_json(path), default_row_label
    if fmt == "trajectory":
        from retarget.motion.trajectory import parse_trajectory_yaml

        return parse_trajectory_yaml(path.read_text(encoding="utf-8"), source=str(path))
    if fmt == "keyframes":
        from retarget.motion.keyframes import read_keyframes

        keys = read_keyframes(path)
        # A sampled keyframe motion's rows are not the file's keyframes: label them by sample and time.
        return keys.to_motion(), (lambda i: f"sample {i}") if keys.rate is not None else (lambda i: f"keyframe {i}")
    if fmt == "bag":
        from retarget.motion.bag import read_bag

        return read_bag(path, topic=topic, index=index)
    raise MotionFormatError(f"unknown motion format '{fmt}', use one of {list(FORMATS)}")


def load_motion(path_or_name: str | os.PathLike[str], *, joint_limits: Mapping[str, LimitLike] | None = None,
                fmt: str | None = None, topic: str | None = None, index: int = 0) -> Motion:
    """Read a motion from a file, a bag or the motion library.

    Args:
        path_or_name: File or bag path, or a library name like ``single_rod/step_30``.
        joint_limits: If given, ``{joint: (lower [rad], upper [rad], max_velocity [rad/s])}``; the motion must stay
            within them (see :meth:`Motion.check_limits`).
        fmt: Force a format (one of :data:`FORMATS`) instead of detecting it.
        topic: Bag topic (needed when a bag has several JointTrajectory/JointState topics).
        index: Which JointTrajectory message of a bag topic (0 first, -1 last).

    Returns:
        The motion in SI units.

    Raises:
        MotionFormatError: Malformed input; the message names file, row or line, and joint.
        MotionLimitError: With ``joint_limits``, the motion leaves them; the message names joint, row and time.
    """
    path = resolve_motion_path(path_or_name)
    kind = fmt or detect_format(path)
    motion, row_label = _read(path, kind, topic, index)
    if joint_limits is not None:
        motion.assert_within_limits(joint_limits, row_label=row_label, source=str(path))
    return motion


def save_motion(path: str | os.PathLike[str], motion: Motion, fmt: str | None = None, *,
                joint_limits: Mapping[str, LimitLike] | None = None, unit: str | None = None,
                **options: WriterOption) -> Path:
    """Write a motion atomically: on any error nothing is written.

    Args:
        path: Target file (or bag directory). A bag path ending in ``.mcap`` or ``.db3`` selects the storage and
            the bag directory is the path without that suffix.
        motion: Motion to write.
        fmt: One of :data:`FORMATS`; by default from the suffix (``.yaml``/``.yml`` -> ``"trajectory"``; no
            suffix -> ``"bag"``).
        joint_limits: If given, refuse (raise) to write a motion that leaves them.
        unit: Angle unit for csv (default ``"deg"``), json and keyframes (default ``"rad"``).
        **options: Passed to the writer: ``time_unit`` (csv), ``velocities`` (trajectory), ``robot``,
            ``description`` (keyframes), ``topic``, ``msgtype``, ``storage``, ``start_time_ns`` (bag).

    Returns:
        The path written (for bags, the bag directory).
    """
    path = Path(path)
    if joint_limits is not None:
        motion.assert_within_limits(joint_limits, source=str(path))
    suffix = path.suffix.lower()
    kind = fmt or {"": "bag", ".yaml": "trajectory", ".yml": "trajectory"}.get(suffix, _BY_SUFFIX.get(suffix))
    if kind not in FORMATS:
        raise MotionFormatError(f"cannot tell the format of '{path}'; pass fmt= one of {list(FORMATS)}")
    if unit is not None:
        options["unit"] = unit
    if kind == "csv":
        from retarget.motion.csv_format import write_csv

        return write_csv(path, motion, **options)
    if kind == "json":
        from retarget.motion.json_format import write_json

        return write_json(path, motion, **options)
    if kind == "trajectory":
        from retarget.motion.trajectory import write_trajectory_yaml

        return write_trajectory_yaml(path, motion, **options)
    if kind == "keyframes":
        from retarget.motion.keyframes import write_keyframes

        return write_keyframes(path, motion, **options)
    from retarget.motion.bag import write_bag

    if suffix in (".mcap", ".db3"):
        options.setdefault("storage", "mcap" if suffix == ".mcap" else "sqlite3")
        path = path.with_suffix("")
    return write_bag(path, motion, **options)
