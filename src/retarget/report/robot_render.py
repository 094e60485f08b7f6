"""Pictures of a robot: URDF visual geometry at a joint configuration, flexible parts from the params YAML.

Forward kinematics is yourdfpy's; drawing is matplotlib 3D (polygons shaded by a fixed light, painter's
algorithm). URDF boxes, cylinders and spheres are drawn (meshes are skipped); the links that flexible parts
replace are drawn from their ``mesh`` description (rod or bar) instead of their URDF placeholder, in a highlight
colour with their centre line, so the springy parts stand out. Loop-closing joints are marked with a
ring.

Regenerate the pictures of ``urdf/README.md``::

    python -m retarget.report.robot_render --out urdf/images
"""
from __future__ import annotations

import argparse
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from yourdfpy import URDF, Visual

__all__ = ["VIEWS", "load_urdf", "render_robot", "robot_polygons", "save_robot_picture"]

#: Named camera directions: (elevation [deg], azimuth [deg]) for matplotlib's ``view_init``.
VIEWS: dict[str, tuple[float, float]] = {"front": (0.0, 0.0), "side": (0.0, -90.0), "3/4": (20.0, -50.0)}

_FLEX_COLOUR = (0.2, 0.45, 0.95, 1.0)
_DEFAULT_COLOUR = (0.6, 0.6, 0.6, 1.0)
_LIGHT = np.array([0.4, -0.5, 0.75]) / np.linalg.norm([0.4, -0.5, 0.75])


def load_urdf(robot: str | Path) -> URDF:
    """The robot's URDF loaded by yourdfpy (xacro expanded, no meshes loaded).

    Returns:
        A ``yourdfpy.URDF`` with its scene graph built (for forward kinematics).
    """
    import yourdfpy

    from retarget.model.library import urdf_xml

    return yourdfpy.URDF.load(io.StringIO(urdf_xml(robot)), build_scene_graph=True, load_meshes=False)


def _box_faces(size: Sequence[float]) -> list[np.ndarray]:
    hx, hy, hz = (0.5 * float(s) for s in size)
    corners = np.array([[sx * hx, sy * hy, sz * hz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    return [corners[list(q)] for q in quads]


def _cylinder_faces(radius: float, length: float, segments: int = 16) -> list[np.ndarray]:
    angles = np.linspace(0.0, 2.0 * np.pi, segments + 1)
    ring = np.stack([radius * np.cos(angles), radius * np.sin(angles)], axis=1)
    bottom = np.column_stack([ring, np.full(len(ring), -0.5 * length)])
    top = np.column_stack([ring, np.full(len(ring), 0.5 * length)])
    faces = [np.array([bottom[i], bottom[i + 1], top[i + 1], top[i]]) for i in range(segments)]
    faces.append(bottom[:-1][::-1])
    faces.append(top[:-1])
    return faces


def _sphere_faces(radius: float, segments: int = 12) -> list[np.ndarray]:
    theta = np.linspace(0.0, np.pi, segments // 2 + 1)
    phi = np.linspace(0.0, 2.0 * np.pi, segments + 1)
    pts = radius * np.stack([np.outer(np.sin(theta), np.cos(phi)), np.outer(np.sin(theta), np.sin(phi)),
                             np.outer(np.cos(theta), np.ones_like(phi))], axis=-1)
    return [np.array([pts[i, j], pts[i, j + 1], pts[i + 1, j + 1], pts[i + 1, j]])
            for i in range(len(theta) - 1) for j in range(len(phi) - 1)]


def _transform(faces: list[np.ndarray], matrix: np.ndarray) -> list[np.ndarray]:
    return [f @ matrix[:3, :3].T + matrix[:3, 3] for f in faces]


def _origin_matrix(origin: Mapping[str, Sequence[float]] | None) -> np.ndarray:
    """4x4 transform of a YAML ``{xyz, rpy}`` origin (rpy = fixed-axis roll, pitch, yaw [rad], as in URDF)."""
    origin = origin or {}
    x, y, z = (float(v) for v in origin.get("xyz", (0.0, 0.0, 0.0)))
    roll, pitch, yaw = (float(v) for v in origin.get("rpy", (0.0, 0.0, 0.0)))
    cr, sr = np.cos(roll), np.sin(roll)
    cp, sp = np.cos(pitch), np.sin(pitch)
    cy, sy = np.cos(yaw), np.sin(yaw)
    rot_x = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    rot_y = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rot_z = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    out = np.eye(4)
    out[:3, :3] = rot_z @ rot_y @ rot_x
    out[:3, 3] = (x, y, z)
    return out


def _material_colours(urdf: URDF) -> dict[str, tuple[float, ...]]:
    colours = {}
    for material in getattr(urdf.robot, "materials", None) or []:
        if material.color is not None:
            colours[material.name] = tuple(float(c) for c in material.color.rgba)
    return colours


def _visual_colour(visual: Visual, named: Mapping[str, tuple[float, ...]]) -> tuple[float, ...]:
    material = visual.material
    if material is None:
        return _DEFAULT_COLOUR
    if material.color is not None:
        return tuple(float(c) for c in material.color.rgba)
    return named.get(material.name, _DEFAULT_COLOUR)


def _flexible_faces(part: Mapping[str, Any]) -> tuple[list[np.ndarray], np.ndarray]:
    """Faces (part frame) of a flexible part's mesh description, and its centre line (2, 3) [m]."""
    mesh = part.get("mesh") or {}
    length = float(mesh.get("length", 0.0))
    generator = mesh.get("generator", "rod")
    shift = np.eye(4)
    shift[2, 3] = 0.5 * length
    if generator == "rod":
        faces = _cylinder_faces(0.5 * float(mesh.get("diameter", 0.005)), length, segments=10)
    else:
        faces = _box_faces((float(mesh.get("width", 0.01)), float(mesh.get("thickness", 0.005)), length))
    return _transform(faces, shift), np.array([[0.0, 0.0, 0.0], [0.0, 0.0, length]])


def robot_polygons(robot: str | Path, joints: Mapping[str, float] | None = None
                   ) -> tuple[list[np.ndarray], list[tuple[float, ...]], list[np.ndarray], list[np.ndarray]]:
    """World-frame polygons of a robot at a joint configuration.

    Args:
        robot: Robot name or params YAML path.
        joints: Joint angles [rad] by name (motors and passive joints); missing joints are at 0.

    Returns:
        ``(faces, colours, centre_lines, loop_points)``: polygons ``(k, 3)`` [m] with RGBA colours; centre
        lines ``(2, 3)`` of the flexible parts; points ``(3,)`` of the loop-closing joints.
    """
    from retarget.model.library import robot_config

    urdf = load_urdf(robot)
    section = robot_config(robot)["retarget"]
    cfg = {name: 0.0 for name in urdf.actuated_joint_names}
    for name, value in (joints or {}).items():
        if name in cfg:
            cfg[name] = float(value)
    urdf.update_cfg(cfg)
    root = section.get("root_link") or urdf.base_link
    named = _material_colours(urdf)
    flexible = {p["link"]: p for p in section.get("flexible_parts") or []}

    faces: list[np.ndarray] = []
    colours: list[tuple[float, ...]] = []
    lines: list[np.ndarray] = []
    for link in urdf.robot.links:
        pose = urdf.get_transform(link.name, root)
        if link.name in flexible:
            part = flexible[link.name]
            part_pose = pose @ _origin_matrix(part.get("origin"))
            part_faces, line = _flexible_faces(part)
            new = _transform(part_faces, part_pose)
            faces += new
            colours += [_FLEX_COLOUR] * len(new)
            lines.append(line @ part_pose[:3, :3].T + part_pose[:3, 3])
            continue
        for visual in link.visuals:
            geometry = visual.geometry
            matrix = pose @ (visual.origin if visual.origin is not None else np.eye(4))
            if geometry.box is not None:
                local = _box_faces(geometry.box.size)
            elif geometry.cylinder is not None:
                local = _cylinder_faces(geometry.cylinder.radius, geometry.cylinder.length)
            elif geometry.sphere is not None:
                local = _sphere_faces(geometry.sphere.radius)
            else:
                continue
            new = _transform(local, matrix)
            faces += new
            colours += [_visual_colour(visual, named)] * len(new)
    loops = []
    for joint in section.get("loop_joints") or []:
        point = urdf.get_transform(joint["parent"], root) @ _origin_matrix(joint.get("parent_origin"))
        loops.append(point[:3, 3].copy())
    return faces, colours, lines, loops


def _shade(faces: list[np.ndarray], colours: list[tuple[float, ...]]) -> np.ndarray:
    out = np.empty((len(faces), 4))
    for i, (face, colour) in enumerate(zip(faces, colours)):
        normal = np.cross(face[1] - face[0], face[2] - face[0])
        norm = np.linalg.norm(normal)
        light = abs(float(normal @ _LIGHT)) / norm if norm > 0 else 1.0
        out[i, :3] = np.clip(np.asarray(colour[:3]) * (0.45 + 0.55 * light), 0.0, 1.0)
        out[i, 3] = colour[3] if len(colour) > 3 else 1.0
    return out


def render_robot(robot: str | Path, joints: Mapping[str, float] | None = None,
                 views: Sequence[str] = ("front", "side", "3/4"), title: str | None = None,
                 panel_size: float = 3.6) -> Figure:
    """A matplotlib figure of the robot, one panel per view.

    Args:
        robot: Robot name or params YAML path.
        joints: Joint angles [rad] by name; missing joints are at 0.
        views: Names from :data:`VIEWS`.
        title: Figure title (default: the robot name).
        panel_size: Panel width and height [inch].

    Returns:
        A ``matplotlib.figure.Figure`` (no pyplot state involved).
    """
    from matplotlib.figure import Figure
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    faces, colours, lines, loops = robot_polygons(robot, joints)
    points = np.concatenate(faces)
    low, high = points.min(axis=0), points.max(axis=0)
    centre, half = 0.5 * (low + high), 0.55 * float(np.max(high - low))
    shaded = _shade(faces, colours)

    fig = Figure(figsize=(panel_size * len(views), panel_size + 0.5))
    for index, view in enumerate(views):
        ax = fig.add_subplot(1, len(views), index + 1, projection="3d")
        # Fixed cubic limits before adding artists: autoscaling 3D scatter points is fragile in matplotlib.
        ax.set_xlim(centre[0] - half, centre[0] + half)
        ax.set_ylim(centre[1] - half, centre[1] + half)
        ax.set_zlim(centre[2] - half, centre[2] + half)
        ax.set_autoscale_on(False)
        ax.add_collection3d(Poly3DCollection(faces, facecolors=shaded, edgecolors=(0, 0, 0, 0.15),
                                             linewidths=0.2), autolim=False)
        for line in lines:
            ax.plot(line[:, 0], line[:, 1], line[:, 2], color=_FLEX_COLOUR, linewidth=2.5)
        for point in loops:
            ax.plot([point[0]], [point[1]], [point[2]], marker="o", markersize=8, markerfacecolor="none",
                    markeredgecolor="red", markeredgewidth=1.5, linestyle="none")
        ax.set_box_aspect((1, 1, 1), zoom=1.25)
        ax.view_init(*VIEWS[view])
        if view == "front":
            ax.set_proj_type("ortho")
            ax.set_xticks([])
        elif view == "side":
            ax.set_proj_type("ortho")
            ax.set_yticks([])
        ax.set_title(view, fontsize=9)
        ax.tick_params(labelsize=6)
    fig.suptitle(title if title is not None else str(robot), fontsize=11)
    fig.tight_layout()
    return fig


def save_robot_picture(robot: str, path: Path, joints: Mapping[str, float] | None = None,
                       dpi: int = 110) -> Path:
    """Render ``robot`` (front, side and 3/4 views) into a PNG file; returns the path."""
    fig = render_robot(robot, joints)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


#: Poses for the README pictures [rad]: a characteristic pose of each robot, not the all-zero pose.
SHOWCASE_POSES: dict[str, dict[str, float]] = {
    "single_rod": {"base_pitch": 0.0},
    "two_rods": {"swing": 0.0},
    "dancer": {"left_shoulder_roll": 2.3, "left_shoulder_pitch": 0.3, "right_shoulder_pitch": 0.9,
               "right_shoulder_roll": 0.4},
    "bartender": {"base_yaw": 0.3, "shoulder_pitch": 0.35, "elbow_pitch": 0.25, "wrist_pitch": -0.6},
    "rapper": {"shoulder_pitch": 0.5, "shoulder_roll": 0.3, "elbow": 1.2, "elbow_hinge": 1.2,
               "push_rod_u1": -1.2},
    "drummer": {"right_shoulder_pitch": 0.35, "right_elbow": 1.3, "left_shoulder_pitch": 0.35,
                "left_elbow": 1.6,
                "right_shoulder_roll": 0.2, "left_shoulder_roll": 0.2, "right_shoulder_yaw": 0.2,
                "left_shoulder_yaw": 0.2, "neck_pitch": 0.15},
    "boxer": {"right_shoulder_pitch": 1.0, "right_elbow": 1.9, "left_shoulder_pitch": 1.1, "left_elbow": 1.7,
              "right_shoulder_roll": 0.3, "left_shoulder_roll": 0.35, "right_shoulder_yaw": 0.5,
              "left_shoulder_yaw": 0.4, "spine_pitch": 0.1, "torso_yaw": 0.2},
}


def main(argv: Sequence[str] | None = None) -> int:
    """Render every shipped robot into ``<out>/<robot>.png``."""
    from retarget.model.library import list_robots

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("urdf/images"), help="output folder")
    parser.add_argument("robots", nargs="*", help="robot names (default: all)")
    args = parser.parse_args(argv)
    for robot in args.robots or list_robots():
        path = save_robot_picture(robot, args.out / f"{robot}.png", SHOWCASE_POSES.get(robot))
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
