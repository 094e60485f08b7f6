"""retarget.twin: the digital twin driven by the reduced simulation (docs/twin.md). No ROS imports.

The emulated servo bus (``--twin reduced``) runs :class:`~retarget.twin.servo.SimulationDrivenServos`: its
servos' goals and loop settings drive the compiled reduced engine (:class:`~retarget.twin.simulation.TwinSimulation`,
the servos' shafts in its state) in a worker process (:mod:`retarget.twin.worker`); the simulated shafts (what the
bus reports) and bodies' poses go out on a shared-memory ring (:mod:`retarget.twin.channel`) that the bus and the
mocap node's ``live:`` twin source read. :mod:`retarget.twin.model` finds the reduced model (``--reduced`` file or the
planner's cache).
"""
from __future__ import annotations

from retarget.twin.channel import CHANNEL_VERSION, PoseRingReader, PoseRingWriter, PoseSample
from retarget.twin.errors import ChannelError, TwinError, TwinModelUnavailable
from retarget.twin.model import ReducedModelSource, TwinModel, find_reduced_model, load_twin_model, robot_name

__all__ = [
    "CHANNEL_VERSION",
    "ChannelError",
    "PoseRingReader",
    "PoseRingWriter",
    "PoseSample",
    "ReducedModelSource",
    "TwinError",
    "TwinModel",
    "TwinModelUnavailable",
    "find_reduced_model",
    "load_twin_model",
    "robot_name",
]
