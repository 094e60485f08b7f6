"""BVH (Biovision hierarchy) reading and forward kinematics.

A careful reader for the files animators and mocap libraries export, including the quirks of the CMU conversions:
``Frame Time: .0083333`` (no leading zero), any Euler channel order (``Zrotation Yrotation Xrotation`` is the
CMU/cgspeed order), 100-joint rigs with fingers and twist bones, ``End Site`` leaves, joint names with spaces.

Conventions (those of the Biovision format and of Blender, MotionBuilder and assimp):

- A joint's rotation channels compose left to right in the order listed: ``Zrotation Yrotation Xrotation`` gives
  ``R = Rz(z) @ Ry(y) @ Rx(x)``, angles in degrees.
- A joint's local translation is its ``OFFSET`` plus its position channels if it has any (for the root of the
  iClone CMU files the offset is the rest hip height and the channels are relative to it).
- Global transforms chain from the root: ``R_i = R_parent @ R_local``, ``p_i = p_parent + R_parent @ t_local``.

Lengths stay in the file's unit (cm for iClone, "inches / 0.45-ish" for cgspeed); pass ``scale`` [m per file unit]
to :meth:`BvhClip.forward_kinematics` to get metres. BVH is Y-up.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retarget.motion.errors import BvhError

__all__ = ["BvhClip", "BvhSkeleton", "euler_matrices", "parse_bvh", "read_bvh"]

_AXES = {"X": 0, "Y": 1, "Z": 2}
_VALID_CHANNELS = {f"{a}{kind}" for a in "XYZ" for kind in ("position", "rotation")}


@dataclass(frozen=True, eq=False)
class BvhSkeleton:
    """The hierarchy of a BVH file, joints in file order (every parent before its children).

    End sites are joints too (no channels), named ``<parent>_End`` (made unique), so their positions come out of
    forward kinematics (finger tips, head top).

    Attributes:
        names: Joint names, length ``k``.
        parents: Parent index of each joint, ``-1`` for a root, shape ``(k,)``.
        offsets: Offset of each joint from its parent [file units], shape ``(k, 3)``.
        channels: Channel names per joint, e.g. ``("Xposition", ..., "Zrotation", "Yrotation", "Xrotation")``.
        is_end_site: Whether each joint is an ``End Site``, shape ``(k,)``.
    """

    names: tuple[str, ...]
    parents: np.ndarray
    offsets: np.ndarray
    channels: tuple[tuple[str, ...], ...]
    is_end_site: np.ndarray

    @property
    def num_joints(self) -> int:
        """Number of joints ``k`` including end sites."""
        return len(self.names)

    @property
    def num_channels(self) -> int:
        """Number of channel values per frame."""
        return sum(len(c) for c in self.channels)

    def index(self, name: str) -> int:
        """Index of joint ``name``.

        Raises:
            BvhError: Naming the joint and a few similar names.
        """
        try:
            return self.names.index(name)
        except ValueError:
            close = [n for n in self.names if name.lower() in n.lower() or n.lower() in name.lower()][:8]
            raise BvhError(f"no joint '{name}' in the BVH skeleton" + (f"; similar: {close}" if close else "")
                           ) from None

    def channel_offsets(self) -> np.ndarray:
        """Index of each joint's first channel in a frame's values, shape ``(k,)``."""
        counts = np.array([len(c) for c in self.channels], dtype=np.int64)
        return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)

    def chain(self, name: str) -> list[int]:
        """Indices from the root down to joint ``name`` (inclusive)."""
        out = [self.index(name)]
        while self.parents[out[-1]] >= 0:
            out.append(int(self.parents[out[-1]]))
        return out[::-1]


def euler_matrices(angles_deg: np.ndarray, order: str) -> np.ndarray:
    """Rotation matrices of intrinsic Euler angles composed left to right.

    Args:
        angles_deg: Angles [deg], shape ``(f, len(order))``, column ``i`` about axis ``order[i]``.
        order: Axis letters, e.g. ``"ZYX"`` for ``R = Rz @ Ry @ Rx``.

    Returns:
        Rotations, shape ``(f, 3, 3)``.
    """
    frames = angles_deg.shape[0]
    out = np.broadcast_to(np.eye(3), (frames, 3, 3)).copy()
    rad = np.radians(angles_deg)
    for col, axis in enumerate(order):
        c, s = np.cos(rad[:, col]), np.sin(rad[:, col])
        r = np.zeros((frames, 3, 3))
        a = _AXES[axis]
        b, d = (a + 1) % 3, (a + 2) % 3
        r[:, a, a] = 1.0
        r[:, b, b] = c
        r[:, d, d] = c
        r[:, b, d] = -s
        r[:, d, b] = s
        out = out @ r
    return out


@dataclass(frozen=True, eq=False)
class BvhClip:
    """A BVH file: skeleton, frame time and the raw channel values of every frame.

    Attributes:
        skeleton: The hierarchy.
        frame_time: Time between frames [s].
        values: Channel values per frame in file order, shape ``(f, num_channels)`` (degrees, file length units).
        source: File name, for messages.
    """

    skeleton: BvhSkeleton
    frame_time: float
    values: np.ndarray
    source: str = "<bvh>"

    @property
    def num_frames(self) -> int:
        """Number of frames ``f``."""
        return int(self.values.shape[0])

    @property
    def time(self) -> np.ndarray:
        """Frame times [s], shape ``(f,)``, starting at 0."""
        return np.arange(self.num_frames) * self.frame_time

    @property
    def duration(self) -> float:
        """Time of the last frame [s]."""
        return (self.num_frames - 1) * self.frame_time

    def local_transforms(self) -> tuple[np.ndarray, np.ndarray]:
        """Local rotation and translation of every joint in every frame.

        Returns:
            ``(rotations (f, k, 3, 3), translations (f, k, 3) [file units])``.
        """
        sk = self.skeleton
        f, k = self.num_frames, sk.num_joints
        rot = np.broadcast_to(np.eye(3), (f, k, 3, 3)).copy()
        trans = np.broadcast_to(sk.offsets, (f, k, 3)).copy()
        starts = sk.channel_offsets()
        for j, chans in enumerate(sk.channels):
            if not chans:
                continue
            block = self.values[:, starts[j]:starts[j] + len(chans)]
            rot_cols = [i for i, c in enumerate(chans) if c.endswith("rotation")]
            for i, c in enumerate(chans):
                if c.endswith("position"):
                    trans[:, j, _AXES[c[0]]] += block[:, i]
            if rot_cols:
                rot[:, j] = euler_matrices(block[:, rot_cols], "".join(chans[i][0] for i in rot_cols))
        return rot, trans

    def forward_kinematics(self, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Global joint positions and orientations (in the BVH world frame, Y-up).

        Args:
            scale: Metres per file unit (0.01 for centimetres); positions are multiplied by it.

        Returns:
            ``(positions (f, k, 3) [m if scaled], rotations (f, k, 3, 3))``.
        """
        local_r, local_t = self.local_transforms()
        glob_r = np.empty_like(local_r)
        glob_p = np.empty_like(local_t)
        for j, parent in enumerate(self.skeleton.parents.tolist()):
            if parent < 0:
                glob_r[:, j] = local_r[:, j]
                glob_p[:, j] = local_t[:, j]
            else:
                glob_r[:, j] = glob_r[:, parent] @ local_r[:, j]
                glob_p[:, j] = glob_p[:, parent] + np.einsum("fab,fb->fa", glob_r[:, parent], local_t[:, j])
        return glob_p * scale, glob_r

    def bone_lengths(self, scale: float = 1.0) -> np.ndarray:
        """Distance of every joint from its parent in every frame, shape ``(f, k)`` (0 for roots)."""
        pos, _ = self.forward_kinematics(scale)
        parents = self.skeleton.parents
        out = np.zeros(pos.shape[:2])
        has = parents >= 0
        out[:, has] = np.linalg.norm(pos[:, has] - pos[:, parents[has]], axis=-1)
        return out


class _Lines:
    """Cursor over non-empty lines, keeping 1-based line numbers for messages."""

    def __init__(self, text: str, source: str) -> None:
        self.lines = [(i + 1, ln.split()) for i, ln in enumerate(text.splitlines()) if ln.strip()]
        self.pos = 0
        self.source = source

    def error(self, message: str, line: int | None = None) -> BvhError:
        if line is None:
            line = self.lines[self.pos][0] if self.pos < len(self.lines) else (self.lines[-1][0] if self.lines else 0)
        return BvhError(f"{self.source}: line {line}: {message}")

    def next(self, what: str) -> tuple[int, list[str]]:
        if self.pos >= len(self.lines):
            raise self.error(f"unexpected end of file, expected {what}")
        item = self.lines[self.pos]
        self.pos += 1
        return item


def _floats(tokens: list[str], count: int, lines: _Lines, line: int, what: str) -> list[float]:
    if len(tokens) != count:
        raise lines.error(f"{what}: expected {count} numbers, got {len(tokens)}", line)
    try:
        return [float(t) for t in tokens]
    except ValueError:
        raise lines.error(f"{what}: not a number in {tokens}", line) from None


def _parse_joint(lines: _Lines, name: str, parent: int, acc: dict[str, list]) -> None:
    index = len(acc["names"])
    acc["names"].append(name)
    acc["parents"].append(parent)
    acc["end"].append(False)
    line, toks = lines.next("'{'")
    if toks != ["{"]:
        raise lines.error(f"expected '{{' after joint '{name}', got {' '.join(toks)}", line)
    line, toks = lines.next("OFFSET")
    if not toks or toks[0] != "OFFSET":
        raise lines.error(f"joint '{name}': expected OFFSET, got {' '.join(toks)}", line)
    acc["offsets"].append(_floats(toks[1:], 3, lines, line, f"joint '{name}' OFFSET"))
    line, toks = lines.next("CHANNELS")
    if not toks or toks[0] != "CHANNELS":
        raise lines.error(f"joint '{name}': expected CHANNELS, got {' '.join(toks)}", line)
    try:
        count = int(toks[1])
    except (IndexError, ValueError):
        raise lines.error(f"joint '{name}': CHANNELS needs a count", line) from None
    chans = toks[2:]
    if len(chans) != count:
        raise lines.error(f"joint '{name}': CHANNELS {count} lists {len(chans)} channels", line)
    bad = [c for c in chans if c not in _VALID_CHANNELS]
    if bad or len(set(chans)) != len(chans):
        raise lines.error(f"joint '{name}': invalid or repeated channels {bad or chans}", line)
    acc["channels"].append(tuple(chans))
    while True:
        line, toks = lines.next("JOINT, End Site or '}'")
        if toks == ["}"]:
            return
        if toks[0] == "JOINT":
            child = " ".join(t for t in toks[1:] if t != "{")
            if not child:
                raise lines.error("JOINT without a name", line)
            if toks[-1] == "{":
                lines.lines.insert(lines.pos, (line, ["{"]))
            _parse_joint(lines, child, index, acc)
        elif toks[:2] == ["End", "Site"]:
            if toks[-1] != "{":
                line, toks = lines.next("'{'")
                if toks != ["{"]:
                    raise lines.error(f"expected '{{' after End Site of '{name}'", line)
            line, toks = lines.next("OFFSET")
            if not toks or toks[0] != "OFFSET":
                raise lines.error(f"End Site of '{name}': expected OFFSET", line)
            offset = _floats(toks[1:], 3, lines, line, f"End Site of '{name}' OFFSET")
            line, toks = lines.next("'}'")
            if toks != ["}"]:
                raise lines.error(f"End Site of '{name}': expected '}}'", line)
            acc["names"].append(f"{name}_End")
            acc["parents"].append(index)
            acc["end"].append(True)
            acc["offsets"].append(offset)
            acc["channels"].append(())
        else:
            raise lines.error(f"joint '{name}': expected JOINT, End Site or '}}', got {' '.join(toks)}", line)


def parse_bvh(text: str, *, source: str = "<bvh>") -> BvhClip:
    """Parse BVH text.

    Raises:
        BvhError: Malformed hierarchy or motion data; the message names the line (and frame).
    """
    lines = _Lines(text, source)
    line, toks = lines.next("HIERARCHY")
    if toks != ["HIERARCHY"]:
        raise lines.error(f"expected HIERARCHY, got {' '.join(toks)}", line)
    acc: dict[str, list] = {"names": [], "parents": [], "offsets": [], "channels": [], "end": []}
    while True:
        line, toks = lines.next("ROOT or MOTION")
        if toks[0] == "ROOT":
            name = " ".join(t for t in toks[1:] if t != "{")
            if toks[-1] == "{":
                lines.lines.insert(lines.pos, (line, ["{"]))
            _parse_joint(lines, name, -1, acc)
        elif toks == ["MOTION"]:
            break
        else:
            raise lines.error(f"expected ROOT or MOTION, got {' '.join(toks)}", line)
    if not acc["names"]:
        raise lines.error("no ROOT joint in HIERARCHY")
    names = list(acc["names"])
    seen: dict[str, int] = {}
    for i, n in enumerate(names):  # end-site names may collide with real joints: make every name unique
        if n in seen:
            k = 2
            while f"{n}{k}" in seen or f"{n}{k}" in names:
                k += 1
            names[i] = f"{n}{k}"
        seen[names[i]] = i
    skeleton = BvhSkeleton(tuple(names), np.array(acc["parents"], dtype=np.int64), np.array(acc["offsets"]),
                           tuple(acc["channels"]), np.array(acc["end"], dtype=bool))
    line, toks = lines.next("Frames:")
    if len(toks) != 2 or toks[0] != "Frames:" or not toks[1].isdigit():
        raise lines.error(f"expected 'Frames: <count>', got {' '.join(toks)}", line)
    frames = int(toks[1])
    line, toks = lines.next("Frame Time:")
    if toks[:2] != ["Frame", "Time:"] or len(toks) != 3:
        raise lines.error(f"expected 'Frame Time: <seconds>', got {' '.join(toks)}", line)
    try:
        frame_time = float(toks[2])  # float() accepts the '.0083333' of the cgspeed files
    except ValueError:
        raise lines.error(f"Frame Time '{toks[2]}' is not a number", line) from None
    if not frame_time > 0:
        raise lines.error(f"Frame Time must be positive, got {frame_time}", line)
    rows = lines.lines[lines.pos:]
    if len(rows) != frames:
        at = rows[frames][0] if len(rows) > frames else (rows[-1][0] if rows else line)
        raise lines.error(f"'Frames: {frames}' but the file has {len(rows)} frame lines", at)
    n_ch = skeleton.num_channels
    values = np.empty((frames, n_ch))
    for f, (ln, row) in enumerate(rows):
        if len(row) != n_ch:
            raise lines.error(f"frame {f}: {len(row)} values, expected {n_ch} channels", ln)
        try:
            values[f] = np.array(row, dtype=np.float64)
        except ValueError:
            raise lines.error(f"frame {f}: not a number in the channel values", ln) from None
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        f = int(bad[0][0])
        raise lines.error(f"frame {f}: non-finite channel value", rows[f][0])
    return BvhClip(skeleton, frame_time, values, source)


def read_bvh(path: str | os.PathLike[str]) -> BvhClip:
    """Read a BVH file (see :func:`parse_bvh`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BvhError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_bvh(text, source=str(path))
