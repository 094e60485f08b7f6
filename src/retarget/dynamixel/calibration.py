"""Calibrating a robot's joint offsets and directions on its servos (``retarget servos calibrate``).

The driver maps joint angles to servo angles as ``servo = direction * joint + offset`` [rad] (servo angle 0 =
tick 2048; :mod:`retarget.dynamixel.bus`), with ``offsets`` and ``directions`` from the params file. A horn is
never mounted exactly at tick 2048, nor is every servo turned the way its joint's URDF axis turns; calibration
measures both:

1. torque off on every servo (the robot goes limp: support it);
2. a person puts the robot in its zero pose (every joint at 0 rad: the URDF's pose, docs/bringup.md) and says so;
3. the servos' angles there are the offsets (the mean of a few reads, taken on the circle);
4. directions: given (``--directions``), or guided (``--guided``: per joint, a person turns it by hand a good way
   in its positive direction, right-hand rule about the URDF axis; the sign of the servo's turn is the direction;
   a turn under :data:`MIN_GUIDED_TURN_RAD` is refused as unclear), or kept from the params file;
5. :func:`write_calibration` writes ``offsets`` and ``directions`` into the params file
   (:func:`retarget.model.params_file.set_ros_parameters`: in place, comments kept, atomic).

A joint whose range, mapped through its offset and direction, leaves the servo's ±π (position mode's single turn)
is reported: the horn should be remounted nearer the middle of the range (or the joint run in extended position
mode). ``retarget servos setup`` afterwards writes the servos' position limits for the new offsets.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retarget.dynamixel.bus import DynamixelBus
from retarget.dynamixel.commissioning import RobotServos
from retarget.errors import InputError

__all__ = ["MIN_GUIDED_TURN_RAD", "Calibration", "calibrate", "write_calibration"]

#: The least turn a guided direction step accepts [rad] (5°): a smaller one may be play in the gears.
MIN_GUIDED_TURN_RAD = math.radians(5.0)

#: What the params file's ``offsets`` and ``directions`` lines say.
COMMENTS = {"offsets": "[rad] servo angle at joint 0 (retarget servos calibrate)",
            "directions": "servo = direction * joint + offset (retarget servos calibrate)"}


@dataclass(frozen=True)
class Calibration:
    """A calibration's result.

    Attributes:
        joints: the joints, in ``joint_names`` order. offsets: servo angle at joint 0 per joint [rad].
        directions: ±1 per joint. how: where the directions came from (``measured``, ``given``, ``kept``).
        notes: lines for people (ranges that leave the servo's ±π).
    """

    joints: tuple[str, ...]
    offsets: tuple[float, ...]
    directions: tuple[int, ...]
    how: str
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"joints": list(self.joints), "offsets": [round(o, 6) for o in self.offsets],
                "directions": list(self.directions), "directions_from": self.how, "notes": list(self.notes)}


def _wrap(angle: np.ndarray) -> np.ndarray:
    """Angles [rad] wrapped to [−π, π)."""
    return (np.asarray(angle) + math.pi) % (2.0 * math.pi) - math.pi


def _servo_angles(bus: DynamixelBus, samples: int) -> np.ndarray:
    """The mean of ``samples`` reads of every servo's angle [rad] ``(n,)``, taken on the circle (a shaft resting
    at ±π reads on both sides)."""
    reads = np.array([bus.read_state(raise_on_alert=False).position for _ in range(max(1, samples))])
    return _wrap(reads[0] + np.mean(_wrap(reads - reads[0]), axis=0))


def calibrate(robot: RobotServos, bus: DynamixelBus, ask: Callable[[str], None], *, guided: bool = False,
              directions: Sequence[int] | None = None, samples: int = 5) -> Calibration:
    """Measure the offsets (and, ``guided``, the directions) of ``robot``'s joints on ``bus``.

    Args:
        robot: the robot's servos (:func:`retarget.dynamixel.commissioning.robot_servos`).
        bus: an open bus of the robot's servos in ``joint_names`` order, with no offsets and directions (it reads
            servo angles).
        ask: shows a person an instruction and returns once it is done (the command line waits for Enter).
        guided: measure the directions by a turn of each joint.
        directions: the directions to use (±1 per joint); None and not ``guided``: the params file's.
        samples: reads averaged per measurement.

    Raises:
        InputError: both ``guided`` and ``directions``, wrong count or values, a guided turn too small.
        DynamixelError: bus errors (a servo of another model: WrongModelError).
    """
    names = tuple(j.joint for j in robot.joints)
    if guided and directions is not None:
        raise InputError("give the directions or measure them (--guided), not both")
    if directions is not None and (len(directions) != len(names) or any(int(d) not in (-1, 1) for d in directions)):
        raise InputError(f"directions must be {len(names)} values of +1 or -1, got {list(directions)}")
    bus.check_models()
    bus.set_torque(False)
    ask(f"Torque is off on every servo of {robot.robot}. Put the robot in its zero pose (every joint at 0 rad, the "
        "URDF's pose: docs/bringup.md) and hold it there.")
    zero = _servo_angles(bus, samples)
    if guided:
        measured = []
        for k, name in enumerate(names):
            ask(f"Turn {name} by hand about 20 degrees in its positive direction (right-hand rule about its URDF "
                "axis) and hold it there.")
            turn = float(_wrap(_servo_angles(bus, samples)[k] - zero[k]))
            if abs(turn) < MIN_GUIDED_TURN_RAD:
                raise InputError(f"{name}'s servo turned {math.degrees(turn):.1f} degrees: too little to tell the "
                                 f"direction (at least {math.degrees(MIN_GUIDED_TURN_RAD):.0f}); start again")
            measured.append(1 if turn > 0 else -1)
        found, how = tuple(measured), "measured"
    elif directions is not None:
        found, how = tuple(int(d) for d in directions), "given"
    else:
        found, how = tuple(j.direction for j in robot.joints), "kept"
    offsets = tuple(float(o) for o in zero)
    notes = []
    for joint, offset, direction in zip(robot.joints, offsets, found):
        if joint.limits is None:
            continue
        ends = sorted(direction * q + offset for q in joint.limits)
        if ends[0] <= -math.pi or ends[1] >= math.pi:
            notes.append(f"{joint.joint}: its range [{joint.limits[0]:.3f}, {joint.limits[1]:.3f}] rad needs servo "
                         f"angles [{ends[0]:.3f}, {ends[1]:.3f}] rad, beyond position mode's ±π: remount the horn "
                         "nearer the middle of the range (or use extended_position)")
    return Calibration(names, offsets, found, how, tuple(notes))


def write_calibration(params_file: str | Path, calibration: Calibration, write: bool = True) -> str:
    """Write ``offsets`` and ``directions`` into the params file (after ``dynamixel_ids`` when new), comments
    and layout kept; returns the new text.

    Raises:
        InputError: the file cannot be edited safely (nothing written).
    """
    from retarget.model.params_file import set_ros_parameters

    values = {"offsets": [round(o, 5) for o in calibration.offsets], "directions": list(calibration.directions)}
    return set_ros_parameters(params_file, values, after="dynamixel_ids", comments=COMMENTS, write=write)
