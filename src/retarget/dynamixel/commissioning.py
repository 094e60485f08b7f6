"""Setting a robot's servos up as its files declare: IDs, baud rate, gains, limits (``retarget servos setup``).

A robot's params file (``config/<robot>.params.yaml``: ``joint_names``, ``dynamixel_ids``, ``servo_model``,
``baudrate``, ``operating_mode``, ``return_delay_us``, ``offsets``, ``directions``), its description's ``servo:``
section and its URDF limits say what each servo's control table must hold (:func:`robot_servos`,
:meth:`RobotServos.wanted`):

- ID: the joint's ``dynamixel_ids`` entry; Baud Rate: ``baudrate`` (default 1 000 000, the driver's);
- Operating Mode: ``operating_mode`` (default position); Return Delay Time: ``return_delay_us`` (default 0 µs: a
  100 Hz loop over 13 servos has no time for the factory 500 µs per reply, docs/dynamixel.md);
- Position P/I/D Gain and PWM Limit: the joint's servo parameters (``table_from_si``, as the driver writes them at
  every start: the gains are RAM items, lost at power-off; PWM Limit is kept);
- Homing Offset 0 and Drive Mode's reverse bit clear: the driver maps joint to servo angles itself
  (``offsets``, ``directions``), so the servo must report its raw angle;
- Min/Max Position Limit (position mode, once ``offsets`` are calibrated): the URDF limits widened by
  :data:`LIMIT_MARGIN_RAD`, mapped through the offset and direction (a backstop behind the trajectory server's
  check; uncalibrated, the factory limits stay).

:func:`plan_setup` matches the servos a scan found (:mod:`retarget.dynamixel.scan`) with the joints — a servo at a
joint's ID is that joint's; ``assign`` says which joint others drive (``--assign 1@57600=spine_pitch``); servos
still left are matched with the joints still without one in ID order when their counts agree (one new servo for
one joint, or a chain numbered in joint order; the plan says so) — and lists every change before anything is
written. :func:`apply_setup` writes them
in an order that leaves the bus consistent if it stops half way: torque off and every other item first, at the
servos' present IDs and rates; then the IDs (through a free ID when two servos swap); then the baud rates. Each
write is read back (an ID by a ping at the new ID, a rate by a ping at the new rate). A failure stops it with
:class:`SetupError`, which lists what was done and where each servo answers now: run setup again to finish.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from retarget.dynamixel.bus import DynamixelBus, servo_gain_values
from retarget.dynamixel.control_table import (
    BAUD_RATES,
    DEFAULT_BAUD_RATE,
    DEFAULT_SERVO_MODEL,
    OperatingMode,
    baud_rate_index,
    load_control_table,
    radians_to_position,
)
from retarget.dynamixel.errors import CrcError, DynamixelError, NoReplyError
from retarget.dynamixel.scan import FoundServo, ScanResult
from retarget.errors import InputError, RetargetError
from retarget.model.servo import ServoParams

if TYPE_CHECKING:
    from dynamixel_sdk import PortHandler

__all__ = [
    "LIMIT_MARGIN_RAD",
    "Change",
    "JointServo",
    "RobotServos",
    "SetupError",
    "SetupPlan",
    "SetupReport",
    "apply_setup",
    "parse_assignments",
    "plan_setup",
    "robot_servos",
]

#: How far the servos' position limits lie outside the URDF's [rad] (≈ 13 ticks): the trajectory server refuses
#: goals beyond the URDF limits, so a goal at a limit, rounded to a tick, is never refused by the servo.
LIMIT_MARGIN_RAD = 0.02

#: The items setup writes besides ID and Baud Rate, in writing order (EEPROM first: torque must be off).
SETUP_ITEMS: tuple[str, ...] = ("Operating Mode", "Return Delay Time", "Drive Mode", "Homing Offset",
                                "Min Position Limit", "Max Position Limit", "PWM Limit", "Position P Gain",
                                "Position I Gain", "Position D Gain")

_POSITION_TICKS = (0, 4095)


@dataclass(frozen=True)
class JointServo:
    """What a robot's files say about the servo of one joint.

    Attributes:
        joint: the joint (``joint_names`` entry).
        servo_id: its ``dynamixel_ids`` entry.
        offset: servo angle at joint angle 0 [rad], None while the robot is not calibrated.
        direction: +1 or -1 (``servo = direction * joint + offset``).
        limits: the URDF's position limits [rad], None for a continuous joint.
        servo: the description's servo parameters for this motor (None: the gains are left alone).
    """

    joint: str
    servo_id: int
    offset: float | None
    direction: int
    limits: tuple[float, float] | None
    servo: ServoParams | None


@dataclass(frozen=True)
class RobotServos:
    """A robot's servo bus as its files declare it (:func:`robot_servos`).

    Attributes:
        robot: the robot's name. params_file: its ROS params file. model: ``servo_model``.
        baudrate: ``baudrate`` [bit/s]. operating_mode: ``operating_mode``. return_delay_us: the Return Delay
        Time setup writes [µs]. joints: per joint, in ``joint_names`` order.
    """

    robot: str
    params_file: Path
    model: str
    baudrate: int
    operating_mode: OperatingMode
    return_delay_us: float
    joints: tuple[JointServo, ...]

    @property
    def calibrated(self) -> bool:
        """Whether the params file holds offsets (``retarget servos calibrate`` wrote them)."""
        return all(j.offset is not None for j in self.joints)

    def joint(self, name: str) -> JointServo:
        """The joint called ``name``.

        Raises:
            InputError: no such joint.
        """
        for joint in self.joints:
            if joint.joint == name:
                return joint
        raise InputError(f"{self.robot} has no joint {name!r}; joints: {', '.join(j.joint for j in self.joints)}")

    def wanted(self, joint: JointServo, present: Mapping[str, int]) -> tuple[dict[str, int], list[str]]:
        """The raw values of :data:`SETUP_ITEMS` ``joint``'s servo must hold, given what it holds now (``present``,
        for Drive Mode's other bits), and notes for people (a joint range the servo cannot reach).

        Raises:
            GainOutOfRangeError: the servo parameters give a value outside the item's range.
        """
        table = load_control_table(model=self.model)
        notes: list[str] = []
        out: dict[str, int] = {
            "Operating Mode": int(self.operating_mode),
            "Return Delay Time": int(round(self.return_delay_us / 2.0)),
            "Drive Mode": int(present.get("Drive Mode", 0)) & ~1,
            "Homing Offset": 0,
        }
        if self.operating_mode == OperatingMode.POSITION and joint.offset is not None and joint.limits is not None:
            lo, hi = joint.limits
            ends = sorted(joint.direction * q + joint.offset for q in (lo - LIMIT_MARGIN_RAD, hi + LIMIT_MARGIN_RAD))
            ticks = [int(radians_to_position(a)) for a in ends]
            clipped = [min(max(t, _POSITION_TICKS[0]), _POSITION_TICKS[1]) for t in ticks]
            if clipped != ticks:
                notes.append(f"joint {joint.joint}: its range [{lo:.3f}, {hi:.3f}] rad maps to servo angles "
                             f"[{ends[0]:.3f}, {ends[1]:.3f}] rad, beyond the ±π of position mode: the limits are "
                             "cut at ±π (remount the horn nearer the range's middle, or use extended_position)")
            out["Min Position Limit"], out["Max Position Limit"] = clipped
        if joint.servo is not None and not joint.servo.ideal:
            out.update(servo_gain_values(table, [joint.servo_id], [joint.servo])[joint.servo_id])
        return {item: out[item] for item in SETUP_ITEMS if item in out}, notes


def robot_servos(robot: str | Path) -> RobotServos:
    """Read what a robot's params file, description and URDF say about its servos.

    Raises:
        UnknownNameError: unknown robot. InputError: malformed params (lengths, unknown model or mode, a rate the
            servos do not have, directions other than ±1). ServoError: an invalid ``servo:`` section.
    """
    from retarget.control.urdf_limits import limits_from_urdf
    from retarget.dynamixel.robot_servos import servos_for_joints
    from retarget.model.library import read_ros_parameters, resolve_params, resolve_robot, urdf_xml

    description = resolve_robot(robot)
    params_file = resolve_params(description)
    params = read_ros_parameters(params_file)
    joints = [str(j) for j in params.get("joint_names") or []]
    ids = [int(i) for i in params.get("dynamixel_ids") or []]
    if not joints or len(ids) != len(joints):
        raise InputError(f"{params_file}: need joint_names and one dynamixel_ids entry per joint")
    model = load_control_table(model=str(params.get("servo_model") or DEFAULT_SERVO_MODEL)).model
    baudrate = int(params.get("baudrate") or DEFAULT_BAUD_RATE)
    baud_rate_index(baudrate)
    mode_name = str(params.get("operating_mode") or "position")
    try:
        mode = OperatingMode[mode_name.upper()]
    except KeyError:
        raise InputError(f"{params_file}: operating_mode {mode_name!r} is not a position mode") from None
    delay = float(params.get("return_delay_us", -1.0))
    offsets = params.get("offsets") or None
    directions = params.get("directions") or [1] * len(joints)
    if offsets is not None and len(offsets) != len(joints):
        raise InputError(f"{params_file}: {len(offsets)} offsets for {len(joints)} joints")
    if len(directions) != len(joints) or any(int(d) not in (-1, 1) for d in directions):
        raise InputError(f"{params_file}: directions must be {len(joints)} values of +1 or -1, got {directions}")
    limits = limits_from_urdf(urdf_xml(description))
    servos = servos_for_joints(description, joints)
    out = []
    for k, joint in enumerate(joints):
        limit = limits.get(joint)
        span = (limit.lower, limit.upper) if limit is not None and math.isfinite(limit.lower) else None
        out.append(JointServo(joint, ids[k], None if offsets is None else float(offsets[k]), int(directions[k]),
                              span, servos[k]))
    name = str(params.get("robot_name") or Path(description).stem)
    return RobotServos(name, Path(params_file), model, baudrate, mode, delay if delay >= 0 else 0.0, tuple(out))


@dataclass(frozen=True)
class Change:
    """One write setup makes.

    Attributes:
        joint: the joint whose servo it is.
        servo_id: the servo's ID when the write is made. baudrate: its rate then [bit/s].
        item: the control-table item. old: its value now. new: the value written.
    """

    joint: str
    servo_id: int
    baudrate: int
    item: str
    old: int
    new: int

    def describe(self) -> str:
        """``servo 11 at 57600 bit/s (base_yaw): Position P Gain 800 -> 850``."""
        old, new = self.old, self.new
        if self.item == "Baud Rate":
            old, new = f"{BAUD_RATES.get(old, old)} bit/s", f"{BAUD_RATES.get(new, new)} bit/s"
        elif self.item == "Return Delay Time":
            old, new = f"{2 * old} us", f"{2 * new} us"
        return f"servo {self.servo_id} at {self.baudrate} bit/s ({self.joint}): {self.item} {old} -> {new}"

    def as_dict(self) -> dict[str, object]:
        return {"joint": self.joint, "id": self.servo_id, "baud_rate": self.baudrate, "item": self.item,
                "old": self.old, "new": self.new}


@dataclass(frozen=True)
class SetupPlan:
    """What setup will write, in order (:func:`plan_setup`).

    Attributes:
        robot: the robot's servos as declared.
        assignment: joint → the servo found for it.
        changes: the writes, in order (items, then IDs, then rates).
        torque_off: servos (ID, rate) whose torque setup turns off first (the robot goes limp there).
        notes: lines for people (joints with no servo on the bus, limits cut at ±π, a free ID borrowed).
    """

    robot: RobotServos
    assignment: Mapping[str, FoundServo]
    changes: tuple[Change, ...]
    torque_off: tuple[tuple[int, int], ...] = ()
    notes: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The plan for people."""
        lines = [f"{self.robot.robot}: {len(self.assignment)} of {len(self.robot.joints)} joints' servos on the bus"]
        for joint in self.robot.joints:
            found = self.assignment.get(joint.joint)
            where = f"servo {found.servo_id} at {found.baudrate} bit/s" if found else "no servo on the bus"
            lines.append(f"  {joint.joint}: {where} -> ID {joint.servo_id} at {self.robot.baudrate} bit/s")
        lines += [f"note: {n}" for n in self.notes]
        if self.torque_off:
            lines.append("torque off first on " + ", ".join(f"servo {i} at {b} bit/s" for i, b in self.torque_off)
                         + ": those joints go limp, support the robot")
        if not self.changes:
            lines.append("nothing to change: the bus is as the params file says")
        else:
            lines.append(f"{len(self.changes)} change(s):")
            lines += [f"  {c.describe()}" for c in self.changes]
        return lines

    def as_dict(self) -> dict[str, object]:
        return {"robot": self.robot.robot, "params_file": str(self.robot.params_file),
                "assignment": {j: {"id": s.servo_id, "baud_rate": s.baudrate} for j, s in self.assignment.items()},
                "changes": [c.as_dict() for c in self.changes],
                "torque_off": [{"id": i, "baud_rate": b} for i, b in self.torque_off], "notes": list(self.notes)}


def parse_assignments(texts: Sequence[str]) -> dict[tuple[int, int | None], str]:
    """``["11=base_yaw", "1@57600=spine_pitch"]`` (or comma-separated) → ``{(11, None): "base_yaw", (1, 57600):
    "spine_pitch"}``.

    Raises:
        InputError: malformed entry.
    """
    out: dict[tuple[int, int | None], str] = {}
    for text in texts:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            where, sep, joint = part.partition("=")
            servo, _, rate = where.partition("@")
            try:
                key = (int(servo), int(rate) if rate else None)
            except ValueError:
                key = None
            if not sep or not joint or key is None:
                raise InputError(f"bad --assign {part!r}: use ID=JOINT or ID@BAUD=JOINT, e.g. 1@57600=spine_pitch")
            out[key] = joint.strip()
    return out


def plan_setup(robot: RobotServos, scan: ScanResult,
               assign: Mapping[tuple[int, int | None], str] | None = None) -> SetupPlan:
    """Match the servos found with the robot's joints and list every write that makes the bus as declared.

    Args:
        robot: :func:`robot_servos`.
        scan: what is on the bus (:func:`retarget.dynamixel.scan.scan_bus`).
        assign: ``{(ID, rate or None): joint}`` for servos not at their joint's ID (:func:`parse_assignments`).

    Raises:
        InputError: servos sharing an ID (garbled answers), a servo of another model or of unknown items, a
            servo no joint claims, a joint claimed twice, an assignment naming no servo or no joint.
    """
    if scan.collisions:
        raise InputError("more than one servo answers to " + ", ".join(f"ID {i} at {b} bit/s"
                                                                       for i, b in scan.collisions)
                         + ": servos sharing an ID cannot be told apart on one bus (new servos all ship as ID 1 at "
                         "57600 bit/s). Connect them one at a time, alone or beside servos already set up, and run "
                         "setup for each with --assign 1@57600=JOINT (docs/bringup.md)")
    assignment: dict[str, FoundServo] = {}
    claimed: set[tuple[int, int]] = set()
    for (servo_id, rate), joint_name in (assign or {}).items():
        joint = robot.joint(joint_name)
        servo = scan.servo(servo_id, rate)
        if joint.joint in assignment:
            raise InputError(f"joint {joint.joint} assigned twice")
        assignment[joint.joint] = servo
        claimed.add(servo.key)
    # A servo at a joint's ID is that joint's (at the robot's rate first, when the ID answers at several).
    for joint in robot.joints:
        if joint.joint in assignment:
            continue
        here = [s for s in scan.servos if s.servo_id == joint.servo_id and s.key not in claimed]
        here.sort(key=lambda s: s.baudrate != robot.baudrate)
        if here:
            assignment[joint.joint] = here[0]
            claimed.add(here[0].key)
    left = [s for s in scan.servos if s.key not in claimed]
    missing = [j for j in robot.joints if j.joint not in assignment]
    notes: list[str] = []
    if left and len(left) == len(missing):
        # As many servos left as joints without one (one new servo for one joint, or a chain numbered in joint
        # order): matched in ID order, said in the plan, which is shown before anything is written.
        pairs = list(zip(sorted(left, key=lambda s: (s.servo_id, s.baudrate)),
                         sorted(missing, key=lambda j: j.servo_id)))
        for servo, joint in pairs:
            assignment[joint.joint] = servo
        if len(pairs) > 1:
            notes.append("matched by ID order: " + ", ".join(f"servo {s.servo_id} -> {j.joint}" for s, j in pairs)
                         + "; if they are wired otherwise, say so with --assign ID@BAUD=JOINT")
        left, missing = [], []
    if left:
        raise InputError("servos on the bus that no joint claims: " + ", ".join(
            f"ID {s.servo_id} at {s.baudrate} bit/s" for s in left) + f" (joints without a servo: "
            f"{', '.join(j.joint for j in missing) or 'none'}); say which joint each drives with --assign "
            "ID@BAUD=JOINT, or unplug it")
    notes += [f"joint {j.joint}: no servo on the bus, nothing done for it" for j in missing]
    if not robot.calibrated:
        notes.append("position limits left as they are: the params file has no offsets yet (run `retarget servos "
                     "calibrate`, then setup again)")
    changes: list[Change] = []
    torque_off: list[tuple[int, int]] = []
    for joint in robot.joints:
        servo = assignment.get(joint.joint)
        if servo is None:
            continue
        if servo.model != robot.model:
            raise InputError(f"servo {servo.servo_id} at {servo.baudrate} bit/s is a "
                             f"{servo.model or f'model number {servo.model_number}'}, the params file says "
                             f"{robot.model} (servo_model)")
        if not servo.items:
            raise InputError(f"servo {servo.servo_id} at {servo.baudrate} bit/s: its items could not be read "
                             f"({servo.error})")
        wanted, joint_notes = robot.wanted(joint, servo.items)
        notes += joint_notes
        item_changes = [Change(joint.joint, servo.servo_id, servo.baudrate, item, servo.items[item], value)
                        for item, value in wanted.items() if servo.items[item] != value]
        needs_torque_off = bool(item_changes) or servo.servo_id != joint.servo_id \
            or servo.baudrate != robot.baudrate
        if needs_torque_off and servo.items["Torque Enable"]:
            torque_off.append(servo.key)
        changes += item_changes
    id_changes, id_notes = _id_moves(robot, assignment, scan)
    changes += id_changes
    notes += id_notes
    target_index = baud_rate_index(robot.baudrate)
    for joint in robot.joints:
        servo = assignment.get(joint.joint)
        if servo is not None and servo.baudrate != robot.baudrate:
            changes.append(Change(joint.joint, joint.servo_id, servo.baudrate, "Baud Rate",
                                  baud_rate_index(servo.baudrate), target_index))
    return SetupPlan(robot, dict(assignment), tuple(changes), tuple(torque_off), tuple(notes))


def _id_moves(robot: RobotServos, assignment: Mapping[str, FoundServo],
              scan: ScanResult) -> tuple[list[Change], list[str]]:
    """The ID writes, ordered so that no two servos ever share an ID (a swap goes through a free ID)."""
    where = {j.joint: (s.servo_id, s.baudrate) for j in robot.joints if (s := assignment.get(j.joint))}
    target = {j.joint: j.servo_id for j in robot.joints if j.joint in where}
    occupied = {s.servo_id for s in scan.servos}
    pending = [j for j in target if where[j][0] != target[j]]
    changes: list[Change] = []
    notes: list[str] = []
    while pending:
        free = [j for j in pending if target[j] not in occupied]
        if free:
            joint = free[0]
            new = target[joint]
        else:  # a cycle (two servos swapping IDs): park one on an ID nobody uses or wants
            joint = pending[0]
            wanted = set(target.values())
            new = max(i for i in range(253) if i not in occupied and i not in wanted)
            notes.append(f"joint {joint}: through the free ID {new} (its ID is taken by a servo moving elsewhere)")
        old, rate = where[joint]
        changes.append(Change(joint, old, rate, "ID", old, new))
        occupied.discard(old)
        occupied.add(new)
        where[joint] = (new, rate)
        if new == target[joint]:
            pending.remove(joint)
    return changes, notes


class SetupError(RetargetError):
    """Setup stopped half way.

    Attributes:
        done: the changes made.
        failed: the change that failed.
        where: joint → (ID, rate) each servo answers at now.
    """

    def __init__(self, failed: Change, cause: Exception, done: Sequence[Change],
                 where: Mapping[str, tuple[int, int]]) -> None:
        self.failed = failed
        self.done = list(done)
        self.where = dict(where)
        now = ", ".join(f"{j} at ID {i}, {b} bit/s" for j, (i, b) in self.where.items())
        super().__init__(f"setup stopped at {failed.describe()}: {cause}. {len(self.done)} change(s) made before "
                         f"it; the servos answer now as: {now}. The bus is usable as it is: fix the cause and run "
                         "setup again to finish")


@dataclass(frozen=True)
class SetupReport:
    """What :func:`apply_setup` did.

    Attributes:
        done: the changes made, in order. where: joint → (ID, rate) each servo answers at now.
    """

    done: tuple[Change, ...]
    where: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def apply_setup(plan: SetupPlan, port: str | PortHandler, *, latency_timer_ms: float = 16.0,
                progress: Callable[[str], None] | None = None) -> SetupReport:
    """Make the changes of ``plan`` on ``port``, each read back (module docstring for the order).

    Args:
        plan: :func:`plan_setup`'s plan (from a scan of this bus, just before).
        port: device path or an SDK ``PortHandler``.
        latency_timer_ms: as :class:`~retarget.dynamixel.bus.DynamixelBus`.
        progress: called with a line per change made.

    Raises:
        SetupError: a write failed or did not read back (what was done and where the servos answer now).
        PortGoneError: the port cannot be opened.
    """
    robot = plan.robot
    table = load_control_table(model=robot.model)
    where = {joint: found.key for joint, found in plan.assignment.items()}
    rates = sorted({b for _, b in where.values()} | {robot.baudrate})
    bus = DynamixelBus(port, [1], baudrate=rates[0], table=table, latency_timer_ms=latency_timer_ms)
    done: list[Change] = []
    say = progress or (lambda _line: None)
    bus.open()
    try:
        for servo_id, rate in plan.torque_off:
            joint = next(j for j, key in where.items() if key == (servo_id, rate))
            step = Change(joint, servo_id, rate, "Torque Enable", 1, 0)
            _run(bus, step, lambda s=step: _write_checked(bus, s), done, where)
            say(f"torque off: servo {servo_id} at {rate} bit/s ({joint})")
        for change in plan.changes:
            _run(bus, change, lambda c=change: _make(bus, c), done, where)
            if change.item == "ID":
                where[change.joint] = (change.new, change.baudrate)
            elif change.item == "Baud Rate":
                where[change.joint] = (change.servo_id, BAUD_RATES[change.new])
            say(f"done: {change.describe()}")
    finally:
        bus.close()
    return SetupReport(tuple(done), dict(where))


def _run(bus: DynamixelBus, change: Change, action: Callable[[], None], done: list[Change],
         where: Mapping[str, tuple[int, int]]) -> None:
    try:
        if bus.baudrate != change.baudrate:
            bus.set_baudrate(change.baudrate)
        action()
    except (DynamixelError, InputError) as exc:
        raise SetupError(change, exc, done, where) from exc
    done.append(change)


def _make(bus: DynamixelBus, change: Change) -> None:
    """One change, confirmed: an item read back; an ID by a ping at the new ID; a rate by a ping at the new rate.

    A lost or corrupt reply to an ID or Baud Rate write does not mean the write failed (the servo may have taken
    it and answered from its new address): the confirmation decides.
    """
    if change.item not in ("ID", "Baud Rate"):
        _write_checked(bus, change)
        return
    try:
        bus.write(change.servo_id, change.item, change.new)
    except (NoReplyError, CrcError):
        pass
    if change.item == "ID":
        _ping_within(bus, change.new, "a ping at its new ID")
        return
    bus.set_baudrate(BAUD_RATES[change.new])
    _ping_within(bus, change.servo_id, f"a ping at {BAUD_RATES[change.new]} bit/s after its Baud Rate change")


def _write_checked(bus: DynamixelBus, change: Change) -> None:
    bus.write(change.servo_id, change.item, change.new)
    got = bus.read(change.servo_id, change.item)
    if got != change.new:
        raise InputError(f"servo {change.servo_id} holds {change.item} {got} after writing {change.new}")


def _ping_within(bus: DynamixelBus, servo_id: int, what: str, attempts: int = 5) -> None:
    """Ping until the servo answers (a servo takes an EEPROM write in a few ms).

    Raises:
        NoReplyError: no answer to ``attempts`` pings (``what``: the ping's purpose, for the message).
    """
    for _ in range(attempts - 1):
        try:
            bus.ping(servo_id)
            return
        except (NoReplyError, CrcError):
            continue
    try:
        bus.ping(servo_id)
    except (NoReplyError, CrcError) as exc:
        raise NoReplyError(servo_id, what) from exc
