"""Load a robot from ``config/<robot>.yaml`` (the ``retarget:`` section) and its URDF/xacro into a
:class:`RobotModel` (schema: docs/robot-description.md).

The URDF is expanded with xacro (if it ends in ``.xacro``), parsed with yourdfpy, and its kinematic tree is
evaluated at zero joint values to place every link, joint and flexible part in the world. Massless links
(frames without an inertial) attached by fixed joints are merged into their parent. Flexible parts replace their
URDF link (joints touching that link are dropped: the interfaces weld the part instead). ``loop_joints`` add joints
that close kinematic loops (and universal/ball joints, which URDF lacks).
"""
from __future__ import annotations

import contextlib
import io
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import yaml
from numpy.typing import NDArray

from retarget.model.robot import MeshGenerator, ModelError, RobotBuilder, RobotModel
from retarget.model.servo import ServoError, servos_from_config

if TYPE_CHECKING:
    import yourdfpy

    from retarget.fem.mesh import TetMesh

__all__ = [
    "FlexiblePartSpec",
    "RobotFile",
    "RobotSection",
    "load_robot",
    "parse_origin",
    "read_robot_yaml",
    "resolve_urdf",
    "urdf_text",
]


class FlexiblePartSpec(TypedDict, total=False):
    """One ``flexible_parts`` entry of a robot's ``retarget:`` section (docs/robot-description.md)."""

    name: str
    link: str
    origin: dict[str, list[float]]
    mesh: dict[str, object]
    material: str
    interfaces: list[dict[str, object]]


class RobotSection(TypedDict, total=False):
    """The ``retarget:`` section of a robot params file as read (docs/robot-description.md); ``urdf`` is required
    by :func:`load_robot`, every other key optional."""

    urdf: str
    xacro_args: dict[str, str]
    packages: dict[str, str]
    root_link: str
    gravity: list[float]
    motors: list[str]
    servo: dict[str, object]
    flexible_parts: list[FlexiblePartSpec]
    tracked_bodies: list[dict[str, object]]
    loop_joints: list[dict[str, object]]
    locked_joints: list[str] | dict[str, float]


class RobotFile(TypedDict):
    """A robot description YAML as read (:func:`retarget.model.library.robot_config`): its ``retarget:`` section
    (the ROS parameters under ``/**`` are read by :func:`retarget.model.library.ros_parameters`)."""

    retarget: RobotSection

_LOOP_JOINT_KEYS = {"name", "type", "parent", "child", "origin", "parent_origin", "child_origin", "axis", "axis2"}

_URDF_KINDS = {"revolute": "hinge", "continuous": "hinge", "prismatic": "prismatic", "fixed": "fixed"}


def _repo_share() -> Path:
    """The folder holding ``urdf/`` and ``config/`` (:func:`retarget.model.library.share_dir`)."""
    from retarget.model.library import share_dir

    return share_dir()


def parse_origin(origin: Mapping[str, object] | None) -> NDArray[np.float64]:
    """A 4×4 transform from ``{xyz: [..], rpy: [..]}`` (URDF convention: R = Rz(y) Ry(p) Rx(r))."""
    origin = origin or {}
    xyz = np.asarray(origin.get("xyz", [0, 0, 0]), dtype=float)
    r, p, y = (float(v) for v in origin.get("rpy", [0, 0, 0]))
    cr, sr, cp, sp_, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    rot = np.array(
        [
            [cy * cp, cy * sp_ * sr - sy * cr, cy * sp_ * cr + sy * sr],
            [sy * cp, sy * sp_ * sr + cy * cr, sy * sp_ * cr - cy * sr],
            [-sp_, cp * sr, cp * cr],
        ]
    )
    t = np.eye(4)
    t[:3, :3] = rot
    t[:3, 3] = xyz
    return t


def read_robot_yaml(path: str | Path) -> RobotSection:
    """The ``retarget:`` section of a robot params file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ModelError(f"cannot read robot file {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("retarget"), dict):
        raise ModelError(f"{path}: no 'retarget:' section (see docs/robot-description.md)")
    return data["retarget"]


def packages_of(cfg: Mapping[str, object], yaml_path: Path) -> dict[str, Path]:
    """``packages:`` of a robot's ``retarget:`` section: ROS package name → its folder (relative to the YAML's
    folder, or absolute), for xacro's ``$(find pkg)`` and ``package://pkg/...`` in a description made for a ROS
    workspace.

    Raises:
        ModelError: not a mapping, a name that is not a ROS package name, or a folder that does not exist.
    """
    spec = cfg.get("packages")
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise ModelError(f"{yaml_path}: packages: expected a mapping of ROS package name to its folder, got "
                         f"{type(spec).__name__}")
    out = {}
    for name, folder in spec.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]+", str(name), re.ASCII):
            raise ModelError(f"{yaml_path}: packages: {name!r} is not a ROS package name")
        path = Path(str(folder)).expanduser()
        path = (path if path.is_absolute() else yaml_path.resolve().parent / path).resolve()
        if not path.is_dir():
            raise ModelError(f"{yaml_path}: packages: {name}: folder {path} does not exist")
        out[str(name)] = path
    return out


def _package_file(url: str, packages: Mapping[str, Path]) -> Path:
    """The file a ``package://pkg/rest`` URL names: under ``packages[pkg]``, else under retarget's share folder
    (the library's robots)."""
    pkg, _, rest = url[len("package://") :].partition("/")
    return (packages[pkg] if pkg in packages else _repo_share()) / rest


def resolve_urdf(name: str, yaml_path: Path, packages: Mapping[str, Path] | None = None) -> Path:
    """Find the URDF/xacro: ``package://`` through ``packages`` (:func:`packages_of`), else absolute, next to the
    YAML, in ``../urdf`` of the YAML, or in the repo's urdf/."""
    if name.startswith("package://"):
        candidates = [_package_file(name, packages or {})]
    else:
        p = Path(name)
        candidates = [p] if p.is_absolute() else [yaml_path.parent / p, yaml_path.parent.parent / "urdf" / p, _repo_share() / "urdf" / p]
    for c in candidates:
        if c.is_file():
            return c
    raise ModelError(f"URDF {name!r} not found (tried {', '.join(str(c) for c in candidates)})")


@contextlib.contextmanager
def _ament_prefix(packages: Mapping[str, Path]) -> Iterator[None]:
    """``packages`` findable by ament's index (xacro's ``$(find pkg)``) while the block runs: a temporary install
    prefix with each package's marker and its share folder linked to the package's folder, first on
    ``AMENT_PREFIX_PATH``."""
    if not packages:
        yield
        return
    before = os.environ.get("AMENT_PREFIX_PATH")
    with tempfile.TemporaryDirectory(prefix="retarget-packages-") as prefix:
        index = Path(prefix) / "share" / "ament_index" / "resource_index" / "packages"
        index.mkdir(parents=True)
        for name, folder in packages.items():
            (index / name).touch()
            (Path(prefix) / "share" / name).symlink_to(folder.resolve(), target_is_directory=True)
        os.environ["AMENT_PREFIX_PATH"] = os.pathsep.join([prefix, *([before] if before else [])])
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("AMENT_PREFIX_PATH", None)
            else:
                os.environ["AMENT_PREFIX_PATH"] = before


#: The xacro expansions of this process: (file, arguments, packages, AMENT_PREFIX_PATH) → (the size and
#: modification time of every file xacro read, the XML text).
_EXPANDED: dict[tuple[object, ...], tuple[tuple[tuple[str, int, int], ...] | None, str]] = {}


def _file_stamps(files: Sequence[str]) -> tuple[tuple[str, int, int], ...] | None:
    """(name, size, modification time) of each file; None when one cannot be read."""
    try:
        return tuple((f, (st := os.stat(f)).st_size, st.st_mtime_ns) for f in files)
    except OSError:
        return None


def urdf_text(path: Path, args: Mapping[str, object], packages: Mapping[str, Path] | None = None) -> str:
    """The URDF at ``path`` as XML text, expanded by xacro (with ``args``; ``$(find pkg)`` through ``packages``)
    when it is a ``.xacro`` file.

    An expansion is kept for the process and given again while the file and every file it included are unchanged
    (size and modification time) for the same arguments, packages and environment (a xacro reads variables through
    ``$(env ...)`` and ``$(optenv ...)``; ``AMENT_PREFIX_PATH`` locates ``$(find ...)``): xacro takes a few tenths of
    a second on a library robot, and loading a robot, its model's provenance and its limits each ask for the URDF.
    A file read by Python inside ``$(eval ...)`` (``open()``) is not stamped: such an expansion is kept while the
    xacro and its includes are unchanged.

    Raises:
        ModelError: xacro failed (its message included; a package it could not find named with the remedy).
    """
    if path.suffix != ".xacro":
        return path.read_text()
    import xacro

    mappings = {str(k): str(v) for k, v in args.items()}
    key = (str(Path(path).resolve()), tuple(sorted(mappings.items())),
           tuple(sorted((str(k), str(v)) for k, v in (packages or {}).items())), tuple(sorted(os.environ.items())))
    kept = _EXPANDED.get(key)
    if kept is not None and kept[0] is not None and _file_stamps([f for f, _, _ in kept[0]]) == kept[0]:
        return kept[1]
    first = len(xacro.all_includes)
    before = _file_stamps([key[0]])
    try:
        with _ament_prefix(packages or {}):
            doc = xacro.process_file(str(path), mappings=mappings)
    except Exception as exc:  # xacro raises its own XacroException and plain errors
        raise ModelError(f"xacro failed on {path}: {exc}{_find_hint(exc, path, packages or {})}") from exc
    text = doc.toxml()
    read = [key[0], *(str(Path(f).resolve()) for f in xacro.all_includes[first:])]
    stamps = _file_stamps(read)
    # A file written while xacro read it keeps no expansion (its stamp after may be that of the text read before).
    _EXPANDED[key] = (stamps if stamps is not None and stamps[:1] == before else None, text)
    return text


def _find_hint(exc: Exception, path: Path, packages: Mapping[str, Path]) -> str:
    """The remedy when xacro could not find a ROS package (``$(find pkg)`` without a ROS workspace): the packages
    the file asks for that ``packages:`` does not name."""
    text = str(exc)
    if "AMENT_PREFIX_PATH" not in text and not re.search(r"package '[^']+' not found", text):
        return ""
    try:
        asked = sorted(set(re.findall(r"\$\(find ([A-Za-z0-9_-]+)\)", path.read_text())) - set(packages))
    except OSError:
        asked = []
    name = asked[0] if asked else "PACKAGE"
    listed = f" ({', '.join(asked)})" if asked else ""
    return (f". The description uses $(find ...) for ROS packages{listed} and no ROS workspace provides them: give "
            f"each package's folder in the robot's YAML, e.g. `packages: {{{name}: path/to/{name}}}` "
            f"(docs/robot-description.md)")


def section_urdf(cfg: Mapping[str, object], yaml_path: Path) -> Path:
    """The URDF/xacro file a robot's ``retarget:`` section names (:func:`resolve_urdf`, ``package://`` through its
    ``packages``).

    Raises:
        ModelError: bad ``packages``, or no such file.
    """
    return resolve_urdf(str(cfg.get("urdf", "")), yaml_path, packages_of(cfg, yaml_path))


def robot_urdf(cfg: Mapping[str, object], yaml_path: Path) -> tuple[Path, str]:
    """The URDF file a robot's ``retarget:`` section names and its XML (xacro run with ``xacro_args``; ``$(find)``
    and ``package://`` resolved through ``packages``).

    Raises:
        ModelError: no ``urdf``, a file not found, bad ``packages`` or xacro failing.
    """
    if not cfg.get("urdf"):
        raise ModelError(f"{yaml_path}: retarget.urdf is required")
    packages = packages_of(cfg, yaml_path)
    path = resolve_urdf(str(cfg["urdf"]), yaml_path, packages)
    return path, urdf_text(path, cfg.get("xacro_args") or {}, packages)


def _parse_urdf(xml: str, base: Path, packages: Mapping[str, Path] | None = None) -> yourdfpy.URDF:
    import yourdfpy

    def handler(fname: str) -> str:
        if fname.startswith("package://"):
            return str(_package_file(fname, packages or {}))
        return str(base / fname)

    try:
        return yourdfpy.URDF.load(io.StringIO(xml), load_meshes=False, build_scene_graph=False, filename_handler=handler)
    except Exception as exc:
        raise ModelError(f"cannot parse URDF: {exc}") from exc


def _locked_values(spec: object, where: Path) -> dict[str, float]:
    """``locked_joints`` as ``{joint: value}``: a list of names locks each at 0, a mapping at its value [rad] or
    [m]."""
    if spec is None:
        return {}
    if isinstance(spec, list):
        spec = {name: 0.0 for name in spec}
    if not isinstance(spec, Mapping):
        raise ModelError(f"{where}: locked_joints: expected a list of joint names or a mapping of joint name to value "
                         f"[rad or m], got {type(spec).__name__}")
    out = {}
    for name, value in spec.items():
        try:
            out[str(name)] = float(value)
        except (TypeError, ValueError):
            raise ModelError(f"{where}: locked_joints.{name}: expected a number [rad or m], got {value!r}") from None
        if not math.isfinite(out[str(name)]):
            raise ModelError(f"{where}: locked_joints.{name}: expected a finite number, got {value!r}")
    return out


def _lock_joints(robot: yourdfpy.Robot, locked: dict[str, float], motors: Sequence[str], where: Path) -> None:
    """Make each locked URDF joint a fixed one at its value (the joint's motion folded into its origin), then refuse
    a ``<mimic>`` joint left free: the coupling it declares is not modelled.

    Raises:
        ModelError: a locked joint the URDF lacks, one that is also a motor, a value outside the joint's limits, or
            an unlocked mimic joint that is not a motor.
    """
    joints = {j.name: j for j in robot.joints}
    for name, value in locked.items():
        j = joints.get(name)
        if j is None:
            raise ModelError(f"{where}: locked_joints: no joint {name!r} in the URDF; joints: {', '.join(joints)}")
        if name in motors:
            raise ModelError(f"{where}: locked_joints: {name!r} is also a motor; a joint is one or the other")
        if j.type not in ("revolute", "continuous", "prismatic"):
            raise ModelError(f"{where}: locked_joints: {name!r} is a {j.type} joint; only revolute, continuous and "
                             "prismatic joints lock")
        lim = j.limit
        if j.type != "continuous" and lim is not None and lim.lower is not None and lim.upper is not None \
                and not lim.lower - 1e-12 <= value <= lim.upper + 1e-12:
            raise ModelError(f"{where}: locked_joints.{name}: {value} is outside the joint's limits "
                             f"[{lim.lower}, {lim.upper}]")
        from scipy.spatial.transform import Rotation

        axis = np.asarray(j.axis if j.axis is not None else [1.0, 0.0, 0.0], dtype=float)
        axis = axis / np.linalg.norm(axis)
        motion = np.eye(4)
        if j.type == "prismatic":
            motion[:3, 3] = value * axis
        else:
            motion[:3, :3] = Rotation.from_rotvec(value * axis).as_matrix()
        j.origin = (j.origin if j.origin is not None else np.eye(4)) @ motion
        j.type = "fixed"
    free = [j for j in robot.joints if j.mimic is not None and j.type != "fixed" and j.name not in motors]
    if free:
        pairs = ", ".join(f"{j.name!r} mimics {j.mimic.joint!r}" for j in free)
        raise ModelError(f"{where}: {pairs} (URDF <mimic>), a coupling retarget does not model: lock "
                         f"{'it' if len(free) == 1 else 'each'} (locked_joints: {{{free[0].name}: VALUE}}) or make "
                         f"{'it' if len(free) == 1 else 'each'} a motor (docs/robot-description.md)")


def _link_poses(robot: yourdfpy.Robot, root: str) -> dict[str, NDArray[np.float64]]:
    """World transform (4, 4) of every link at zero joint values."""
    poses = {root: np.eye(4)}
    children: dict[str, list[yourdfpy.Joint]] = {}
    for j in robot.joints:
        children.setdefault(j.parent, []).append(j)
    stack = [root]
    while stack:
        parent = stack.pop()
        for j in children.get(parent, []):
            origin = j.origin if j.origin is not None else np.eye(4)
            poses[j.child] = poses[parent] @ origin
            stack.append(j.child)
    return poses


def _scaled(count: int | None, default: int, scale: float) -> int:
    """An element count scaled by ``scale`` (at least 2 layers)."""
    base = default if count is None else int(count)
    return max(2, round(scale * base))


def _flexible_mesh(
    spec: FlexiblePartSpec,
    part: str,
    yaml_path: Path,
    mesh_scale: float = 1.0,
    resolution: Mapping[str, int] | None = None,
) -> tuple[TetMesh, float, MeshGenerator | None]:
    """The part's rest mesh in its own frame, its length along +z [m] and how it was generated (None: a file).

    ``resolution`` (keys ``axial``, ``around`` for rods; ``axial``, ``width``, ``thickness`` for bars and plates)
    overrides the YAML's; ``mesh_scale`` then multiplies the axial layer count (plates: also the width count).
    """
    from retarget.fem.mesh import (
        DEFAULT_ROD_AROUND,
        bar_mesh,
        bar_resolution,
        default_rod_axial,
        plate_mesh,
        plate_resolution,
        read_mesh,
        rod_mesh,
    )

    mesh_spec = spec.get("mesh") or {}
    if "file" in mesh_spec:
        if mesh_scale != 1.0 or resolution:
            raise ModelError(f"flexible part {part!r}: a mesh file cannot be rescaled (mesh_scale/resolution)")
        f = Path(mesh_spec["file"])
        if not f.is_absolute():
            f = next((c for c in (yaml_path.parent / f, _repo_share() / f) if c.is_file()), f)
        mesh = read_mesh(f)
        return mesh, float(mesh.nodes[:, 2].max()), None
    gen = mesh_spec.get("generator")
    res = dict(mesh_spec.get("resolution") or {})
    res.update(resolution or {})
    unknown = set(res) - {"axial", "around", "width", "thickness"}
    if unknown:
        raise ModelError(f"flexible part {part!r}: unknown resolution keys {sorted(unknown)}")
    try:
        length = float(mesh_spec["length"])
        if gen == "rod":
            diameter = float(mesh_spec["diameter"])
            axial = res.get("axial")
            if mesh_scale != 1.0:
                axial = _scaled(axial, default_rod_axial(length, diameter), mesh_scale)
            axial = default_rod_axial(length, diameter) if axial is None else int(axial)
            around = int(res.get("around", DEFAULT_ROD_AROUND))
            generator = MeshGenerator("rod", length, diameter=diameter, resolution={"axial": axial, "around": around})
            return rod_mesh(length, diameter, axial, around), length, generator
        if gen in ("bar", "plate"):
            width, thickness = float(mesh_spec["width"]), float(mesh_spec["thickness"])
            axial, n_width = res.get("axial"), res.get("width")
            if mesh_scale != 1.0:
                # The generators' own defaults (retarget.fem.mesh.bar_mesh / plate_mesh), scaled.
                if gen == "bar":
                    axial = _scaled(axial, bar_resolution(length, width, thickness)[0], mesh_scale)
                else:
                    cell = max(min(length, width) / 6.0, 2.0 * thickness)
                    axial = _scaled(axial, max(2, math.ceil(length / cell)), mesh_scale)
                    n_width = _scaled(n_width, max(2, math.ceil(width / cell)), mesh_scale)
            if gen == "bar":
                counts = bar_resolution(length, width, thickness, axial, n_width, res.get("thickness"))
                mesh = bar_mesh(length, width, thickness, *counts)
            else:
                counts = plate_resolution(length, width, thickness, axial, n_width, res.get("thickness", 1))
                mesh = plate_mesh(length, width, thickness, *counts)
            generator = MeshGenerator(gen, length, width=width, thickness=thickness,
                                      resolution=dict(zip(("axial", "width", "thickness"), counts)))
            return mesh, length, generator
    except KeyError as exc:
        raise ModelError(f"flexible part {part!r}: mesh needs {exc}") from exc
    raise ModelError(f"flexible part {part!r}: mesh needs 'file' or generator rod|bar|plate, got {mesh_spec!r}")


def _interface_nodes(mesh: TetMesh, length: float, region: Mapping[str, object], part: str) -> NDArray[np.int64]:
    if "end" in region:
        if region["end"] not in ("start", "end"):
            raise ModelError(f"flexible part {part!r}: region end must be start|end")
        return mesh.nodes_on_plane(2, 0.0 if region["end"] == "start" else length)
    if "box" in region:
        lo, hi = region["box"]
        return mesh.nodes_in_box(lo, hi)
    raise ModelError(f"flexible part {part!r}: interface region must be {{end: start|end}} or {{box: [lo, hi]}}")


class _Welds:
    """Which rigid body each URDF link belongs to.

    A massless link welded by a fixed joint merges into its parent; so does a link with mass when ``merge_fixed``,
    except into the world or into/out of a tracked link or a link a flexible part replaces. ``alias``: link → its
    body's name, or None = the world (filled as links are resolved); ``massive``: the links with mass, by name.
    """

    def __init__(self, robot: yourdfpy.Robot, root: str, replaced: set[str], tracked: set[str],
                 merge_fixed: bool) -> None:
        self.alias: dict[str, str | None] = {root: None}
        self.parent_joint = {j.child: j for j in robot.joints}
        self.massive: dict[str, yourdfpy.Link] = {}
        for link in robot.links:
            if link.name == root or link.name in replaced:
                continue
            if link.inertial is not None and link.inertial.mass and link.inertial.mass > 0:
                self.massive[link.name] = link
        self.replaced = replaced
        self.tracked = tracked
        self.merge_fixed = merge_fixed

    def resolve(self, n: str) -> str | None:
        """The body link ``n`` belongs to (None: the world).

        Raises:
            ModelError: fixed joints form a cycle, or a massless link is not welded to a parent.
        """
        alias, massive, tracked = self.alias, self.massive, self.tracked
        chain: list[str] = []
        cur = n
        while cur not in alias:
            if cur in chain:
                raise ModelError(f"link {n!r}: fixed joints form a cycle")
            chain.append(cur)
            j = self.parent_joint.get(cur)
            welded = j is not None and j.type == "fixed"
            if cur in massive:
                if not (self.merge_fixed and welded and cur not in tracked and j.parent not in self.replaced):
                    alias[cur] = cur
                    break
                up = self.resolve(j.parent)
                if up is None or up in tracked:
                    alias[cur] = cur
                    break
                alias[cur] = up
                break
            if not welded:
                raise ModelError(f"link {cur!r} has no mass and is not welded to a parent: give it an inertial")
            cur = j.parent
        for c in chain:
            alias[c] = alias[cur]
        return alias[n]


def _add_rigid_bodies(b: RobotBuilder, robot: yourdfpy.Robot, poses: dict[str, NDArray[np.float64]],
                      welds: _Welds) -> None:
    """One rigid body per group of links with mass welded together (mass, centre of mass and inertia combined;
    the body's name and frame are those of the group's body link)."""
    groups: dict[str, list[str]] = {}
    for n in [lk.name for lk in robot.links]:
        if n in welds.massive:
            groups.setdefault(str(welds.resolve(n)), []).append(n)
    for body, members in groups.items():
        parts = []
        for n in members:
            inr = welds.massive[n].inertial
            t_in = poses[n] @ (inr.origin if inr.origin is not None else np.eye(4))
            rot = t_in[:3, :3]
            parts.append((float(inr.mass), t_in[:3, 3], rot @ np.asarray(inr.inertia, dtype=float) @ rot.T))
        mass, com, inertia = _composite(parts)
        t = poses[body]
        b.add_link(body, mass, com, inertia, t[:3, 3], t[:3, :3])


def _add_urdf_joints(b: RobotBuilder, robot: yourdfpy.Robot, poses: dict[str, NDArray[np.float64]],
                     replaced: set[str], welds: _Welds) -> None:
    """The URDF's joints between bodies (merged welds, floating joints and joints of replaced links left out).

    Raises:
        ModelError: an unsupported URDF joint type.
    """
    for j in robot.joints:
        if j.parent in replaced or j.child in replaced:
            continue
        if j.type == "floating":
            continue
        if j.type not in _URDF_KINDS:
            raise ModelError(f"joint {j.name!r}: URDF type {j.type!r} is not supported")
        pa, ch = welds.resolve(j.parent), welds.resolve(j.child)
        if j.type == "fixed" and welds.alias[j.child] != j.child:
            continue  # merged
        if pa == ch:
            continue
        t = poses[j.child]
        axis = t[:3, :3] @ (np.asarray(j.axis, dtype=float) if j.axis is not None else np.array([1.0, 0, 0]))
        lim = j.limit
        lower = float(lim.lower) if lim is not None and lim.lower is not None else -np.inf
        upper = float(lim.upper) if lim is not None and lim.upper is not None else np.inf
        b.add_joint(j.name, _URDF_KINDS[j.type], pa, ch, t[:3, 3], axis, motor=False, lower=lower, upper=upper)


def _add_loop_joint(b: RobotBuilder, lj: Mapping[str, object], poses: dict[str, NDArray[np.float64]], root: str,
                    welds: _Welds) -> None:
    """One ``loop_joints`` entry of the robot YAML.

    Raises:
        ModelError: missing or unknown keys, unknown links, or parent and child points that do not coincide.
    """
    try:
        jname, kind, parent, child = str(lj["name"]), str(lj["type"]), lj["parent"], lj["child"]
    except KeyError as exc:
        raise ModelError(f"loop joint {lj!r} needs {exc}") from exc
    unknown = set(lj) - _LOOP_JOINT_KEYS
    if unknown:
        raise ModelError(f"loop joint {jname!r}: unknown keys {sorted(unknown)} (known: {sorted(_LOOP_JOINT_KEYS)})")
    if "origin" in lj and "parent_origin" in lj:
        raise ModelError(f"loop joint {jname!r}: give 'origin' or its alias 'parent_origin', not both")
    kind = {"revolute": "hinge", "spherical": "ball"}.get(kind, kind)
    frame_link = parent if parent is not None else child
    for link_name in (parent, child):
        if link_name is not None and link_name not in poses:
            raise ModelError(f"loop joint {jname!r}: unknown link {link_name!r}")
    t = poses[frame_link] @ parse_origin(lj.get("origin", lj.get("parent_origin")))
    if "child_origin" in lj and parent is not None and child is not None:
        # The same joint point given in the child frame must coincide at the reference configuration.
        tc = poses[child] @ parse_origin(lj["child_origin"])
        gap = float(np.linalg.norm(tc[:3, 3] - t[:3, 3]))
        if gap > 1e-6:
            raise ModelError(f"loop joint {jname!r} does not close at zero joint values: its parent and child "
                             f"points are {gap * 1e3:.3f} mm apart")
    axis = t[:3, :3] @ np.asarray(lj.get("axis", [0, 0, 1]), dtype=float)
    axis2 = t[:3, :3] @ np.asarray(lj["axis2"], dtype=float) if "axis2" in lj else None
    pa = welds.resolve(parent) if parent is not None and parent != root else None
    ch = welds.resolve(child) if child is not None and child != root else None
    b.add_joint(jname, kind, pa, ch, t[:3, 3], axis, axis2=axis2)


def _add_flexible_part(
    b: RobotBuilder,
    f: FlexiblePartSpec,
    poses: dict[str, NDArray[np.float64]],
    root: str,
    welds: _Welds,
    yaml_path: Path,
    materials_path: Path,
    mesh_scale: float,
    resolution: Mapping[str, int] | None,
) -> None:
    """One ``flexible_parts`` entry of the robot YAML: its mesh in the world frame, interfaces and material.

    Raises:
        ModelError: an unknown link or a bad mesh or interface specification.
    """
    from retarget.fem.material import get_material
    from retarget.fem.mesh import TetMesh

    part = str(f.get("name", ""))
    link = str(f.get("link", ""))
    if link not in poses:
        raise ModelError(f"flexible part {part!r}: link {link!r} is not a URDF link")
    mesh, length, generator = _flexible_mesh(f, part, yaml_path, mesh_scale, resolution)
    t = poses[link] @ parse_origin(f.get("origin"))
    world = TetMesh(mesh.nodes @ t[:3, :3].T + t[:3, 3], mesh.tets)
    ifaces = []
    for itf in f.get("interfaces") or []:
        il = itf.get("link")
        nodes = _interface_nodes(mesh, length, itf.get("region") or {}, part)
        ifaces.append((welds.resolve(il) if il is not None and il != root else None, nodes))
    material = get_material(f.get("material", "spring_steel"), overrides_path=materials_path)
    b.add_flexible_part(part, world, material, ifaces, replaces=link, generator=generator, pose=t)


def load_robot(
    path: str | Path,
    name: str | None = None,
    mesh_scale: float = 1.0,
    resolution: Mapping[str, Mapping[str, int]] | None = None,
    merge_fixed: bool = True,
    stiffness_calibration: bool = True,
) -> RobotModel:
    """Load ``config/<robot>.yaml`` + URDF/xacro into a :class:`RobotModel` (world frame at zero joint values).

    Args:
        path: the robot YAML.
        name: model name (default: the URDF's).
        mesh_scale: multiplies every generated flexible part's axial element layer count (0.5: half as many
            layers, about half the DOFs; cross-sections keep their resolution, which bending accuracy needs).
            The accuracy cost is in docs/physics.md (f₁ error of a cantilever against the scale).
        resolution: per flexible part name, element counts overriding the YAML's ``mesh.resolution``
            (``axial``, ``around`` for rods; ``axial``, ``width``, ``thickness`` for bars and plates); applied
            before ``mesh_scale``.
        merge_fixed: merge a link with mass welded by a fixed joint to a parent link into one rigid body (mass,
            centre of mass and inertia combined; the parent's name and frame), so the simulation carries neither
            its 6 coordinates nor the weld's 6 constraint rows. Links welded to the world, tracked links and
            links welded to a tracked link stay separate (a tracked body's centre of mass is what is tracked).
            ``RobotModel.merged_links`` maps each merged link to its body. False keeps every link with mass.
        stiffness_calibration: scale each generated part's Young's modulus by c = (f1_ref / f1_mesh)² so that its
            first bending frequencies (clamped at its root interface) match the mesh-converged reference
            (:func:`retarget.fem.model_card.calibrate_stiffness`; ``FlexiblePart.stiffness_factor`` records c,
            ``FlexiblePart.material`` is the scaled material). Parts read from mesh files are not calibrated.
            The first load of a new part computes its reference (seconds to a minute, then cached on disk).

    Raises:
        ModelError: unreadable files, unknown links/joints, bad flexible parts or loop joints, a non-positive
            ``mesh_scale``, a ``resolution`` for an unknown part, or rescaling a mesh read from a file.
    """
    if not (isinstance(mesh_scale, (int, float)) and math.isfinite(mesh_scale) and mesh_scale > 0):
        raise ModelError(f"mesh_scale must be a positive number, got {mesh_scale!r}")
    yaml_path = Path(path)
    cfg = read_robot_yaml(yaml_path)
    # Fitted materials (`retarget fit --write`) live beside the robot files and override the library.
    materials_path = yaml_path.resolve().parent / "materials.yaml"
    if "urdf" not in cfg:
        raise ModelError(f"{yaml_path}: retarget.urdf is required")
    motors = [str(m) for m in cfg.get("motors") or []]
    # The servo section is checked before any mesh or URDF work: a typo costs nothing.
    try:
        servos = servos_from_config(cfg.get("servo"), motors)
    except ServoError as exc:
        raise ModelError(f"{yaml_path}: {exc}") from exc
    urdf_path, xml = robot_urdf(cfg, yaml_path)
    robot = _parse_urdf(xml, urdf_path.parent, packages_of(cfg, yaml_path)).robot
    _lock_joints(robot, _locked_values(cfg.get("locked_joints"), yaml_path), motors, yaml_path)
    link_names = {link.name for link in robot.links}
    root = str(cfg.get("root_link", "world"))
    if root not in link_names:
        raise ModelError(f"root_link {root!r} is not a URDF link")
    poses = _link_poses(robot, root)
    flex_specs = list(cfg.get("flexible_parts") or [])
    unknown_parts = set(resolution or {}) - {str(f.get("name", "")) for f in flex_specs}
    if unknown_parts:
        raise ModelError(f"resolution given for unknown flexible parts {sorted(unknown_parts)}")
    replaced = {str(f.get("link", "")) for f in flex_specs}
    b = RobotBuilder(name or robot.name or yaml_path.stem, gravity=cfg.get("gravity", [0.0, 0.0, -9.81]))
    # Massless links welded by fixed joints merge into their parent; so do links with mass (merge_fixed), except
    # into the world or into/out of a tracked link.
    tracked = {str(tb.get("link", "")) for tb in cfg.get("tracked_bodies") or [] if isinstance(tb, Mapping)}
    welds = _Welds(robot, root, replaced, tracked, merge_fixed)
    _add_rigid_bodies(b, robot, poses, welds)
    merged = {n: str(welds.alias[n]) for n in welds.massive if welds.alias[n] != n}
    _add_urdf_joints(b, robot, poses, replaced, welds)
    for lj in cfg.get("loop_joints") or []:
        _add_loop_joint(b, lj, poses, root, welds)
    for f in flex_specs:
        _add_flexible_part(b, f, poses, root, welds, yaml_path, materials_path, float(mesh_scale),
                           (resolution or {}).get(str(f.get("name", ""))))
    b.set_motors(motors)
    for motor, servo in zip(motors, servos):
        b.set_servo(motor, servo)
    for tb in cfg.get("tracked_bodies") or []:
        b.track(str(tb["link"]), float(tb.get("position_weight", 1.0)), float(tb.get("orientation_weight", 0.0)))
    model = b.build(merged_links=merged)
    if stiffness_calibration and any(p.generator is not None for p in model.flexible_parts):
        from retarget.fem.model_card import calibrate_stiffness

        model = calibrate_stiffness(model)
    return model


def _composite(
    parts: list[tuple[float, NDArray[np.float64], NDArray[np.float64]]],
) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
    """Mass, centre of mass and inertia about it (world axes) of rigidly joined ``(mass, com, inertia)`` parts."""
    mass = sum(m for m, _, _ in parts)
    com = sum(m * c for m, c, _ in parts) / mass
    inertia = np.zeros((3, 3))
    for m, c, i in parts:
        d = c - com
        inertia += i + m * (float(d @ d) * np.eye(3) - np.outer(d, d))
    return float(mass), np.asarray(com, dtype=float), inertia
