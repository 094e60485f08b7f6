"""Named lookup of the shipped robots and motions.

A robot is ``config/<name>.yaml`` (ROS params + the simulator's ``retarget:`` section) plus the URDF/xacro it
names under ``urdf/``; a rig is the same with ``retarget.kind: rig`` (a test stand such as the material-fitting
rig ``fit_rig``: resolved by name like a robot, but not listed among the robots, and without ROS bring-up); a
motion is ``src/retarget/motions/<robot>/<motion>.(yaml|csv|json)``, named ``<robot>/<motion>``.
See ``docs/robot-description.md`` for the file contracts and ``docs/robots.md`` for the robots themselves.

Where the files live:

- in a source or editable checkout, ``config/`` and ``urdf/`` are at the repository root;
- in a ROS 2 install, in ``share/retarget`` found through ``ament_index_python``;
- in a plain ``pip install``, in ``<sys.prefix>/share/retarget`` (setup.py's ``data_files``).

Motions ship inside the Python package (``package_data``), so they are found next to this code in every case.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from retarget.errors import InputError

if TYPE_CHECKING:
    from retarget.model.loader import RobotFile

__all__ = [
    "MOTION_SUFFIXES",
    "UnknownNameError",
    "list_motions",
    "list_rigs",
    "list_robots",
    "motions_dir",
    "resolve_motion",
    "resolve_params",
    "resolve_robot",
    "resolve_urdf",
    "read_ros_parameters",
    "robot_config",
    "robots_then_rigs",
    "ros_parameters",
    "share_dir",
    "urdf_xml",
]

#: File suffixes recognised as motions, in lookup order.
MOTION_SUFFIXES: tuple[str, ...] = (".yaml", ".yml", ".csv", ".json")

_PACKAGE = "retarget"


class UnknownNameError(InputError):
    """A robot or motion name that is neither a known name nor an existing file.

    Attributes:
        kind: ``"robot"`` or ``"motion"``.
        name: The name asked for.
        known: The names that exist.
    """

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = known
        listing = ", ".join(known) if known else "none"
        super().__init__(f"unknown {kind} {name!r} (not a file either); known {kind}s: {listing}")


def _source_root() -> Path | None:
    """The repository root when running from a source or editable checkout, else None."""
    root = Path(__file__).resolve().parents[3]
    if (root / "config").is_dir() and (root / "urdf").is_dir() and (root / "package.xml").is_file():
        return root
    return None


def share_dir() -> Path:
    """The folder holding ``config/`` and ``urdf/``.

    Returns:
        The repository root in a source/editable checkout; else ``share/retarget`` from the ament index when
        ``ament_index_python`` is importable and knows the package; else ``<sys.prefix>/share/retarget``.
    """
    root = _source_root()
    if root is not None:
        return root
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory(_PACKAGE))
    except (ImportError, LookupError, OSError, ValueError):
        # Not on a ROS 2 install (no module, AMENT_PREFIX_PATH unset, or package not indexed).
        return Path(sys.prefix) / "share" / _PACKAGE


def motions_dir() -> Path:
    """The folder of shipped motions, ``<package>/motions`` (one subfolder per robot)."""
    return Path(__file__).resolve().parents[1] / "motions"


def _description_kind(path: Path) -> str | None:
    """``"robot"`` or ``"rig"`` for a config YAML describing one (has ``retarget.urdf``; ``retarget.kind``, default
    robot), None for other files (e.g. materials.yaml)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not (isinstance(data, dict) and isinstance(data.get("retarget"), dict) and "urdf" in data["retarget"]):
        return None
    kind = data["retarget"].get("kind", "robot")
    return kind if kind in ("robot", "rig") else None


def _descriptions() -> dict[str, str]:
    """Name → ``"robot"`` / ``"rig"`` of every shipped description (each config YAML read once), sorted by name."""
    config = share_dir() / "config"
    if not config.is_dir():
        return {}
    kinds = ((p.stem, _description_kind(p)) for p in sorted(config.glob("*.yaml")))
    return {name: kind for name, kind in kinds if kind is not None}


def _of_kind(found: dict[str, str], kind: str) -> list[str]:
    return [name for name, k in found.items() if k == kind]


def list_robots() -> list[str]:
    """Names of the shipped robots (``config/<name>.yaml`` files with a ``retarget.urdf`` entry, not rigs), sorted."""
    return _of_kind(_descriptions(), "robot")


def list_rigs() -> list[str]:
    """Names of the shipped test rigs (``config/<name>.yaml`` with ``retarget.kind: rig``), sorted."""
    return _of_kind(_descriptions(), "rig")


def robots_then_rigs() -> list[str]:
    """:func:`list_robots` + :func:`list_rigs` from one pass over the config folder."""
    found = _descriptions()
    return _of_kind(found, "robot") + _of_kind(found, "rig")


def resolve_robot(name_or_path: str | Path) -> Path:
    """The params YAML of a robot.

    Args:
        name_or_path: A robot or rig name (``"drummer"``, ``"fit_rig"``) or a path to an existing params YAML.

    Returns:
        The YAML path (an existing path is returned as given).

    Raises:
        UnknownNameError: Neither an existing file nor a known robot name.
    """
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidate = share_dir() / "config" / f"{name_or_path}.yaml"
    if "/" not in str(name_or_path) and candidate.is_file() and _description_kind(candidate) is not None:
        return candidate
    raise UnknownNameError("robot", str(name_or_path), robots_then_rigs())


def same_robot(serving: str | Path, asked: str | Path) -> bool:
    """Whether ``asked`` names the robot ``serving`` names: the same name or file, the other path to the same
    description, or (``serving`` a description file of the user's own) the robot's name in its params file or the
    file's stem. False when either names nothing."""
    if str(serving) == str(asked):
        return True
    try:
        description = resolve_robot(serving).resolve()
    except InputError:
        return False
    try:
        if resolve_robot(asked).resolve() == description:
            return True
    except InputError:
        pass
    names = {description.name.removesuffix(".yaml")}
    try:
        names.add(str(read_ros_parameters(resolve_params(description)).get("robot_name") or ""))
    except InputError:
        pass
    return str(asked) in names - {""}


def resolve_params(robot: str | Path) -> Path:
    """The ROS 2 params file of a robot: ``<name>.params.yaml`` beside its description ``<name>.yaml``.

    Raises:
        UnknownNameError: Unknown robot.
        InputError: The robot has no params file.
    """
    description = resolve_robot(robot)
    path = description.with_name(description.name.removesuffix(".yaml") + ".params.yaml")
    if not path.is_file():
        raise InputError(f"{description}: no ROS 2 params file {path.name} beside it (docs/robot-description.md)"
                         + _params_template(description, path))
    return path


def _params_template(description: Path, path: Path) -> str:
    """A params file to start from, made of the robot's motors and servo model (empty if the description cannot be
    read): the IDs are placeholders, which the text says."""
    from retarget.model.loader import read_robot_yaml

    try:
        cfg = read_robot_yaml(description)
    except InputError:
        return ""
    motors = [str(m) for m in cfg.get("motors") or []]
    if not motors:
        return ""
    servo = cfg.get("servo")
    model = str(servo.get("model", "")) if isinstance(servo, dict) else ""
    lines = ["/**:", "  ros__parameters:", f"    robot_name: {description.name.removesuffix('.yaml')}",
             f"    joint_names: [{', '.join(motors)}]",
             f"    dynamixel_ids: [{', '.join(str(i) for i in range(1, len(motors) + 1))}]"]
    if model and model.lower() != "ideal":
        lines.append(f"    servo_model: {model}")
    return (f". To start from, write this to {path} (the IDs 1 to {len(motors)} in the motors' order are "
            "placeholders: `retarget servos scan PORT` lists your servos' IDs; the emulated bus takes them as they "
            "are):\n" + "\n".join(lines))


def ros_parameters(robot: str | Path) -> dict[str, object]:
    """The ``/**: ros__parameters`` mapping of a robot's params file (see :func:`resolve_params`).

    Raises:
        UnknownNameError: Unknown robot.
        InputError: No params file, or it has no ``/**: ros__parameters`` mapping.
    """
    return read_ros_parameters(resolve_params(robot))


def read_ros_parameters(path: Path) -> dict[str, object]:
    """The ``/**: ros__parameters`` mapping of a ROS 2 params file.

    Raises:
        InputError: Unreadable, not YAML, or no ``/**: ros__parameters`` mapping.
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read the params file: {exc}") from exc
    params = data.get("/**", {}).get("ros__parameters") if isinstance(data, dict) else None
    if not isinstance(params, dict):
        raise InputError(f"{path}: no '/**: ros__parameters:' mapping (docs/robot-description.md)")
    return params


def robot_config(robot: str | Path) -> RobotFile:
    """The parsed description YAML of a robot (its ``retarget:`` section; the ROS parameters are in
    :func:`ros_parameters`).

    Raises:
        UnknownNameError: Unknown robot.
        InputError: The file is not a mapping with a ``retarget:`` section.
    """
    import yaml

    path = resolve_robot(robot)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("retarget"), dict):
        raise InputError(f"{path}: no 'retarget:' mapping (see docs/robot-description.md)")
    return data


def resolve_urdf(robot: str | Path) -> Path:
    """The URDF or xacro file a robot's params YAML names (``retarget.urdf``).

    A relative ``urdf`` entry is looked up in the ``urdf/`` folder beside the YAML's folder first (so a robot
    copied with its folders works), then in ``share_dir()/urdf``.

    Raises:
        UnknownNameError: Unknown robot.
        InputError: The YAML has no ``retarget.urdf`` or the file does not exist.
    """
    from retarget.model.loader import section_urdf

    path = resolve_robot(robot)
    section = robot_config(path)["retarget"]
    if not section.get("urdf"):
        raise InputError(f"{path}: retarget.urdf is missing")
    return section_urdf(section, path.resolve())


def urdf_xml(robot: str | Path) -> str:
    """The robot's URDF as XML text, running xacro with the YAML's ``retarget.xacro_args`` when needed.

    Raises:
        UnknownNameError: Unknown robot.
        InputError: Missing file, or xacro failed (the message carries xacro's).
    """
    from retarget.model.loader import robot_urdf

    path = resolve_robot(robot)
    return robot_urdf(robot_config(path)["retarget"], path.resolve())[1]


def _motion_files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    root = motions_dir()
    if not root.is_dir():
        return out
    for robot_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for suffix in MOTION_SUFFIXES:
            for file in sorted(robot_dir.glob(f"*{suffix}")):
                out.setdefault(f"{robot_dir.name}/{file.stem}", file)
    return out


def list_motions(robot: str | None = None) -> list[str]:
    """Names ``<robot>/<motion>`` of the shipped motions, sorted.

    Args:
        robot: Only this robot's motions; all robots when None.
    """
    names = sorted(_motion_files())
    if robot is None:
        return names
    return [n for n in names if n.split("/", 1)[0] == robot]


def resolve_motion(name_or_path: str | Path) -> Path:
    """The file of a motion.

    Args:
        name_or_path: ``"<robot>/<motion>"`` (``"single_rod/step_30"``) or a path to an existing file.

    Returns:
        The motion file (an existing path is returned as given).

    Raises:
        UnknownNameError: Neither an existing file nor a shipped motion.
    """
    path = Path(name_or_path)
    if path.is_file():
        return path
    files = _motion_files()
    if str(name_or_path) in files:
        return files[str(name_or_path)]
    raise UnknownNameError("motion", str(name_or_path), sorted(files))
