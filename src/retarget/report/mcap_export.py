"""The simulated runs of a plan as an MCAP file with ROS 2 messages (rosbag2 layout, CDR), for Foxglove.

Written with rosbags (no ROS needed). Each animated run (``naive``, ``zvd``, ``optimized``) is its own TF tree,
placed side by side: ``world → <run>`` on ``/tf_static`` (an offset across the robot's width), then ``<run> →
<run>/<link>`` for every URDF link on ``/tf`` at the animation's frame rate. Topics:

============================ ================================== ====================================================
topic                        type                               content
============================ ================================== ====================================================
``/tf_static``               tf2_msgs/msg/TFMessage             ``world → <run>``, once
``/tf``                      tf2_msgs/msg/TFMessage             every link of every run, per frame
``/robot/visuals``           visualization_msgs/msg/MarkerArray URDF boxes, cylinders, spheres, frame-locked to the
                                                                links (and translucent at the targets' ghost frames
                                                                ``<run>/target/<link>``), once
``/robot/flexible_parts``    visualization_msgs/msg/MarkerArray deformed centre line of each flexible part (line
                                                                strip, the part's diameter wide), per frame
``/robot/targets``           visualization_msgs/msg/MarkerArray target centres of mass of the tracked bodies, per frame
``/deviation/<run>/<link>``  std_msgs/msg/Float64               distance of a tracked body from its target [m], at
                                                                the simulation's rate
``/deviation/<run>/max``     std_msgs/msg/Float64               the largest over the tracked bodies [m]
============================ ================================== ====================================================

Message times are the plan's times from the start of the motion (the recording starts at t = 0 s).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from retarget.atomic import atomic_path
from retarget.errors import RetargetError
from retarget.report.animation import PlanAnimation, rotation_to_quaternion

if TYPE_CHECKING:
    from rosbags.typesys.stores.ros2_kilted import builtin_interfaces__msg__Time as Time
    from rosbags.typesys.stores.ros2_kilted import geometry_msgs__msg__Point as Point
    from rosbags.typesys.stores.ros2_kilted import geometry_msgs__msg__TransformStamped as TransformStamped
    from rosbags.typesys.stores.ros2_kilted import std_msgs__msg__Float64 as Float64
    from rosbags.typesys.stores.ros2_kilted import std_msgs__msg__Header as Header
    from rosbags.typesys.stores.ros2_kilted import tf2_msgs__msg__TFMessage as TFMessage
    from rosbags.typesys.stores.ros2_kilted import visualization_msgs__msg__Marker as Marker
    from rosbags.typesys.stores.ros2_kilted import visualization_msgs__msg__MarkerArray as MarkerArray

__all__ = ["TOPIC_TYPES", "panel_offsets", "write_mcap"]

#: Message type of each fixed topic.
TOPIC_TYPES: dict[str, str] = {
    "/tf_static": "tf2_msgs/msg/TFMessage",
    "/tf": "tf2_msgs/msg/TFMessage",
    "/robot/visuals": "visualization_msgs/msg/MarkerArray",
    "/robot/flexible_parts": "visualization_msgs/msg/MarkerArray",
    "/robot/targets": "visualization_msgs/msg/MarkerArray",
}
_FLEX_RGBA = (0.2, 0.45, 0.95, 1.0)
_TARGET_RGBA = (0.1, 0.8, 0.2, 0.35)
_GHOST_ALPHA = 0.3


def panel_offsets(animation: PlanAnimation) -> np.ndarray:
    """Where each run stands beside the others: offsets (n_v, 3) [m] along world y, 1.2 robot widths apart."""
    low, high = animation.bounds()
    spacing = 1.2 * float(max(high[1] - low[1], high[0] - low[0], 1e-3))
    offsets = np.zeros((len(animation.variants), 3))
    offsets[:, 1] = (np.arange(len(animation.variants)) - 0.5 * (len(animation.variants) - 1)) * spacing
    return offsets


class _Messages:
    """Builders of the ROS 2 messages this export writes (rosbags' Kilted type store)."""

    def __init__(self) -> None:
        from rosbags.typesys import Stores, get_typestore

        self.store = get_typestore(Stores.ROS2_KILTED)
        self.t = self.store.types

    def stamp(self, ns: int) -> Time:
        return self.t["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)

    def header(self, ns: int, frame: str) -> Header:
        return self.t["std_msgs/msg/Header"](stamp=self.stamp(ns), frame_id=frame)

    def transform(self, ns: int, parent: str, child: str, xyz: ArrayLike, xyzw: ArrayLike) -> TransformStamped:
        t = self.t
        return t["geometry_msgs/msg/TransformStamped"](
            header=self.header(ns, parent), child_frame_id=child,
            transform=t["geometry_msgs/msg/Transform"](
                translation=t["geometry_msgs/msg/Vector3"](x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2])),
                rotation=t["geometry_msgs/msg/Quaternion"](x=float(xyzw[0]), y=float(xyzw[1]), z=float(xyzw[2]),
                                                           w=float(xyzw[3]))))

    def tf(self, transforms: list[TransformStamped]) -> TFMessage:
        return self.t["tf2_msgs/msg/TFMessage"](transforms=transforms)

    def point(self, xyz: ArrayLike) -> Point:
        return self.t["geometry_msgs/msg/Point"](x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2]))

    def marker(self, ns: int, frame: str, namespace: str, ident: int, kind: int, matrix: np.ndarray | None = None,
               scale: ArrayLike = (1.0, 1.0, 1.0), rgba: ArrayLike = (1.0, 1.0, 1.0, 1.0),
               points: Sequence[ArrayLike] | np.ndarray = (), frame_locked: bool = False) -> Marker:
        t = self.t
        matrix = np.eye(4) if matrix is None else matrix
        q = rotation_to_quaternion(matrix[:3, :3])
        pose = t["geometry_msgs/msg/Pose"](position=self.point(matrix[:3, 3]),
                                           orientation=t["geometry_msgs/msg/Quaternion"](
                                               x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3])))
        return t["visualization_msgs/msg/Marker"](
            header=self.header(ns, frame), ns=namespace, id=int(ident), type=int(kind), action=0, pose=pose,
            scale=t["geometry_msgs/msg/Vector3"](x=float(scale[0]), y=float(scale[1]), z=float(scale[2])),
            color=t["std_msgs/msg/ColorRGBA"](r=float(rgba[0]), g=float(rgba[1]), b=float(rgba[2]),
                                              a=float(rgba[3])),
            lifetime=t["builtin_interfaces/msg/Duration"](sec=0, nanosec=0), frame_locked=frame_locked,
            points=[self.point(p) for p in points], colors=[], texture_resource="",
            texture=t["sensor_msgs/msg/CompressedImage"](header=self.header(ns, ""), format="",
                                                         data=np.zeros(0, dtype=np.uint8)),
            uv_coordinates=[], text="", mesh_resource="",
            mesh_file=t["visualization_msgs/msg/MeshFile"](filename="", data=np.zeros(0, dtype=np.uint8)),
            mesh_use_embedded_materials=False)

    def markers(self, markers: list[Marker]) -> MarkerArray:
        return self.t["visualization_msgs/msg/MarkerArray"](markers=markers)

    def float64(self, value: float) -> Float64:
        return self.t["std_msgs/msg/Float64"](data=float(value))


def _visual_markers(msg: _Messages, animation: PlanAnimation, ns: int) -> list[Marker]:
    """Frame-locked markers of the URDF visuals, per run at its links and (translucent) at its ghost links."""
    marker_type = msg.t["visualization_msgs/msg/Marker"]
    vis = animation.visuals
    kinds = {0: marker_type.CUBE, 1: marker_type.CYLINDER, 2: marker_type.SPHERE}
    ghosts = {int(g) for g in animation.ghost_links}
    out = []
    for run in animation.variants:
        for i in range(len(vis)):
            link = animation.links[int(vis.link[i])]
            kind = int(vis.kind[i])
            size = vis.size[i]
            scale = size if kind == 0 else (2 * size[0], 2 * size[0], size[2] if kind == 1 else 2 * size[0])
            out.append(msg.marker(ns, f"{run}/{link}", f"{run}/links", len(out), kinds[kind], vis.origin[i], scale,
                                  vis.rgba[i], frame_locked=True))
            if int(vis.link[i]) in ghosts:
                rgba = (*vis.rgba[i][:3], _GHOST_ALPHA)
                out.append(msg.marker(ns, f"{run}/target/{link}", f"{run}/targets", len(out), kinds[kind],
                                      vis.origin[i], scale, rgba, frame_locked=True))
    return out


def write_mcap(animation: PlanAnimation, path: str | Path,
               progress: Callable[[str, int, int], None] | None = None) -> Path:
    """Write the runs of ``animation`` to the MCAP file ``path`` (module docstring); via a temporary name.

    Returns:
        ``path``.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer

    path = Path(path)
    msg = _Messages()
    store = msg.store
    offsets = panel_offsets(animation)
    times_ns = np.round(animation.times * 1e9).astype(np.int64)
    identity = (0.0, 0.0, 0.0, 1.0)
    with atomic_path(path) as tmp:
        bag = tmp.with_name(tmp.name + ".bag")  # rosbags writes a bag folder; its one MCAP file becomes tmp
        with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            conns = {topic: writer.add_connection(topic, kind, typestore=store) for topic, kind in TOPIC_TYPES.items()}

            def write(topic: str, ns: int, message: TFMessage | MarkerArray | Float64) -> None:
                conn = conns[topic]
                writer.write(conn, int(ns), store.serialize_cdr(message, conn.msgtype))

            t0 = int(times_ns[0])
            write("/tf_static", t0, msg.tf([msg.transform(t0, "world", run, offsets[v], identity)
                                            for v, run in enumerate(animation.variants)]))
            write("/robot/visuals", t0, msg.markers(_visual_markers(msg, animation, t0)))
            n_f = len(times_ns)
            for f, ns in enumerate(times_ns):
                ns = int(ns)
                transforms, lines, targets = [], [], []
                for v, run in enumerate(animation.variants):
                    for i, link in enumerate(animation.links):
                        transforms.append(msg.transform(ns, run, f"{run}/{link}", animation.link_positions[v, f, i],
                                                        animation.link_quaternions[v, f, i]))
                    for g, i in enumerate(animation.ghost_links):
                        transforms.append(msg.transform(ns, run, f"{run}/target/{animation.links[int(i)]}",
                                                        animation.ghost_positions[f, g],
                                                        animation.ghost_quaternions[f, g]))
                    for p, part in enumerate(animation.parts):
                        width = 2.0 * float(animation.part_radii[p])
                        lines.append(msg.marker(ns, run, f"{run}/{part}", p, 4, scale=(width, 0.0, 0.0),
                                                rgba=_FLEX_RGBA, points=animation.part_lines[v, f, p]))
                    for k, link in enumerate(animation.tracked):
                        size = 0.012
                        centre = np.eye(4)
                        centre[:3, 3] = animation.target_positions[f, k]
                        targets.append(msg.marker(ns, run, f"{run}/targets/{link}", k, 2, centre, (size,) * 3,
                                                  _TARGET_RGBA))
                write("/tf", ns, msg.tf(transforms))
                write("/robot/flexible_parts", ns, msg.markers(lines))
                write("/robot/targets", ns, msg.markers(targets))
                if progress is not None and (f % 25 == 0 or f == n_f - 1):
                    progress("MCAP: frames", f + 1, n_f)
            dev_ns = np.round(animation.deviation_times * 1e9).astype(np.int64)
            for v, run in enumerate(animation.variants):
                topics = [f"/deviation/{run}/{link}" for link in animation.tracked] + [f"/deviation/{run}/max"]
                for topic in topics:
                    conns[topic] = writer.add_connection(topic, "std_msgs/msg/Float64", typestore=store)
                values = np.concatenate([animation.deviations[v], animation.deviations[v].max(axis=1, keepdims=True)],
                                        axis=1)
                for n, ns in enumerate(dev_ns):
                    for topic, value in zip(topics, values[n]):
                        write(topic, int(ns), msg.float64(value))
        written = list(bag.glob("*.mcap"))
        if len(written) != 1:
            raise RetargetError(f"rosbags wrote {len(written)} MCAP files into {bag}, expected one")
        written[0].replace(tmp)
    return path
