"""Motion capture: OptiTrack NatNet decoding and receiving, the twin's simulated mocap, Motive CSV import and
rosbag2 recording of PoseStamped streams. Imports no ROS.

Modules: :mod:`~retarget.mocap.natnet` (packet codec), :mod:`~retarget.mocap.client` (UDP receiver),
:mod:`~retarget.mocap.server` (loopback NatNet server for the twin and tests), :mod:`~retarget.mocap.source`
(the frame type every source yields), :mod:`~retarget.mocap.twin` (simulated source),
:mod:`~retarget.mocap.motive_csv` (CSV import), :mod:`~retarget.mocap.bags` (rosbag2 I/O),
:mod:`~retarget.mocap.pcap` (captured traffic for replay), :mod:`~retarget.mocap.onset` (where a tracked body
leaves its rest).
"""
from retarget.mocap.client import ClientStats, NatNetClient, NatNetClientConfig
from retarget.mocap.errors import (
    BagError,
    MocapError,
    MotiveCsvError,
    NatNetDecodeError,
    NatNetEncodeError,
    NatNetTimeoutError,
)
from retarget.mocap.motive_csv import MarkerTrack, MotiveTake, RigidBodyTrack, read_motive_csv
from retarget.mocap.natnet import FrameOfData, ModelDefinitions, ServerInfo, decode_packet, encode_packet
from retarget.mocap.source import BodyPose, MocapFrame, MocapSource
from retarget.mocap.twin import TwinNoise, TwinSource, interpolated_poses

__all__ = [
    "BagError",
    "BodyPose",
    "ClientStats",
    "FrameOfData",
    "MarkerTrack",
    "MocapError",
    "MocapFrame",
    "MocapSource",
    "ModelDefinitions",
    "MotiveCsvError",
    "MotiveTake",
    "NatNetClient",
    "NatNetClientConfig",
    "NatNetDecodeError",
    "NatNetEncodeError",
    "NatNetTimeoutError",
    "RigidBodyTrack",
    "ServerInfo",
    "TwinNoise",
    "TwinSource",
    "decode_packet",
    "encode_packet",
    "interpolated_poses",
    "read_motive_csv",
]
