"""What every motion-capture source yields: frames of named rigid-body poses on the receiver's clock.

Two sources implement :class:`MocapSource`: :class:`retarget.mocap.client.NatNetClient` (OptiTrack over UDP) and
:class:`retarget.mocap.twin.TwinSource` (the digital twin). The ROS mocap node only loops over ``receive()`` and
publishes one ``PoseStamped`` per valid body, so it never needs to know which source it has.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["BodyPose", "MocapFrame", "MocapSource"]


@dataclass(frozen=True)
class BodyPose:
    """Pose of one tracked rigid body.

    Attributes:
        name: body name (Motive asset name, or the twin's body name).
        position_m: pivot position [m], ``(x, y, z)`` in the mocap frame.
        orientation_xyzw: unit quaternion ``(x, y, z, w)``.
        tracking_valid: False if the body was not tracked in this frame (the pose is then the last one seen and
            must not be published).
        mean_error_m: mean marker residual [m] (0 for the twin).
        body_id: streaming id (-1 if the source has none).
    """

    name: str
    position_m: tuple[float, float, float]
    orientation_xyzw: tuple[float, float, float, float]
    tracking_valid: bool = True
    mean_error_m: float = 0.0
    body_id: int = -1

    @property
    def is_finite(self) -> bool:
        """Whether position and orientation are finite numbers."""
        return all(math.isfinite(v) for v in (*self.position_m, *self.orientation_xyzw))


@dataclass(frozen=True)
class MocapFrame:
    """One frame of a motion-capture source.

    Attributes:
        frame_number: the source's frame counter.
        stamp_s: estimated capture time (camera mid-exposure) on the receiver's clock [s since the epoch]:
            ``receive_time_s - latency_s``. Stamp published poses with this.
        receive_time_s: when the frame arrived [s since the epoch].
        latency_s: capture-to-arrival latency that was subtracted [s].
        bodies: one pose per rigid body in the frame.
    """

    frame_number: int
    stamp_s: float
    receive_time_s: float
    latency_s: float
    bodies: tuple[BodyPose, ...]

    def body(self, name: str) -> BodyPose:
        """The pose of body ``name``; ``KeyError`` if it is not in this frame."""
        for pose in self.bodies:
            if pose.name == name:
                return pose
        raise KeyError(name)

    @property
    def valid_bodies(self) -> tuple[BodyPose, ...]:
        """Bodies tracked in this frame with finite poses: the ones to publish."""
        return tuple(b for b in self.bodies if b.tracking_valid and b.is_finite)


@runtime_checkable
class MocapSource(Protocol):
    """A source of :class:`MocapFrame` (NatNet client or digital twin)."""

    def receive(self, timeout_s: float) -> MocapFrame | None:
        """The next frame, or ``None`` if none arrived within ``timeout_s`` [s]."""
        ...

    def close(self) -> None:
        """Release sockets or other resources; idempotent."""
        ...
