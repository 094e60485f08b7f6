"""The twin's channel: a shared-memory ring of simulated body poses and servo shafts, one writer, any readers.

The emulator's simulation (writer) and the mocap node and the emulated bus (readers) are separate processes on one
machine. The channel is a small file (``RUN/twin.poses``, memory-mapped by every side) holding a header and a ring
of ``n_slots`` samples, each guarded by a sequence number written before and after the data (a seqlock): a reader
copies a slot and keeps it only if both numbers equal the sequence it expected, so a slot being overwritten is
skipped, never half-read. Nothing blocks: the writer never waits for readers, readers poll.

Lifecycle: the writer builds the file under a temporary name and renames it into place (readers never see a
partial header); on a clean exit it removes the file. A reader that finds no file reports ``absent``; a file
whose heartbeat is older than ``stale_after_s`` (writer killed) reports ``stale``; a new file (writer restarted:
other inode or generation) is picked up on the next poll and its history starts afresh.

Layout (little-endian). Header, 4096 bytes: magic ``RTWINPOS``, version u32, bodies u32, slots u32, slot size
u32, writer pid u32, motors u32, generation u64, head u64 (last sequence written, 0 = none), heartbeat f64 [s since
the epoch], then at byte 64 the names as JSON (u32 length + UTF-8: ``{"bodies": [...], "motors": [...]}``). Slot:
sequence u64, simulation time f64 [s], stamp f64 [s since the epoch: the wall-clock instant the state belongs to],
lag f64 [s], poses (b, 7) f64 (position [m], quaternion xyzw), shafts (m, 4) f64 (per motor, in joint space: shaft
angle [rad], speed [rad/s], the motor's electromagnetic torque [N m], PWM duty [-]), sequence u64 again.
"""
from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from retarget.atomic import atomic_path
from retarget.twin.errors import ChannelError

__all__ = ["CHANNEL_VERSION", "SHAFT_COLUMNS", "PoseRingReader", "PoseRingWriter", "PoseSample"]

CHANNEL_VERSION = 2
_MAGIC = b"RTWINPOS"
_HEADER = struct.Struct("<8sIIIIII QQd")
_HEADER_BYTES = 4096
_NAMES_AT = 64
_HEAD_AT = 8 + 6 * 4 + 8
_HEARTBEAT_AT = _HEAD_AT + 8


@dataclass(frozen=True)
class PoseSample:
    """One sample of the simulated bodies and servo shafts.

    Attributes:
        sequence: writer's counter (1, 2, ...). sim_time_s: simulation time [s].
        stamp_s: wall-clock time the state belongs to [s since the epoch]. lag_s: how far the simulation ran
            behind the servos when it was written [s].
        poses: ``(b, 7)``: position [m] and unit quaternion (x, y, z, w) per body, in the channel's body order.
        shafts: ``(m, 4)``: per motor, in the channel's motor order and joint space, the shaft angle [rad], speed
            [rad/s], the motor's electromagnetic torque [N m] and PWM duty [-] (:data:`SHAFT_COLUMNS`).
    """

    sequence: int
    sim_time_s: float
    stamp_s: float
    lag_s: float
    poses: NDArray[np.float64]
    shafts: NDArray[np.float64]


#: Columns of :attr:`PoseSample.shafts`.
SHAFT_COLUMNS: tuple[str, ...] = ("angle", "speed", "torque", "duty")


def _slot_bytes(n_bodies: int, n_motors: int) -> int:
    return 8 * (4 + 7 * n_bodies + 4 * n_motors + 1)


class PoseRingWriter:
    """Create the channel file and append samples.

    Args:
        path: channel file (replaced atomically if it exists).
        bodies: body names, in the order of the poses written.
        motors: motor names, in the order of the shafts written (none: no shaft rows).
        n_slots: ring length (4096 at 1 kHz is 4 s of history for a reader that pauses).
    """

    def __init__(self, path: str | Path, bodies: list[str] | tuple[str, ...],
                 motors: list[str] | tuple[str, ...] = (), n_slots: int = 4096) -> None:
        self.path = Path(path)
        self.bodies = tuple(bodies)
        self.motors = tuple(motors)
        self.n_slots = int(n_slots)
        self._slot = _slot_bytes(len(self.bodies), len(self.motors))
        names = json.dumps({"bodies": list(self.bodies), "motors": list(self.motors)}).encode()
        if _NAMES_AT + 4 + len(names) > _HEADER_BYTES:
            raise ChannelError(str(path), f"too many body and motor names for the header ({len(names)} bytes)")
        size = _HEADER_BYTES + self.n_slots * self._slot
        with atomic_path(self.path) as tmp:  # the mapping stays valid across the rename: it maps the file itself
            with open(tmp, "wb") as fh:
                fh.truncate(size)
            fd = os.open(tmp, os.O_RDWR)
            try:
                self._mm = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            self.generation = time.time_ns() ^ (os.getpid() << 20)
            _HEADER.pack_into(self._mm, 0, _MAGIC, CHANNEL_VERSION, len(self.bodies), self.n_slots, self._slot,
                              os.getpid(), len(self.motors), self.generation, 0, time.time())
            struct.pack_into("<I", self._mm, _NAMES_AT, len(names))
            self._mm[_NAMES_AT + 4 : _NAMES_AT + 4 + len(names)] = names
        self._seq = 0
        self._closed = False

    @property
    def sequence(self) -> int:
        """Sequence number of the last sample written (0 before the first)."""
        return self._seq

    def write(self, sim_time_s: float, stamp_s: float, poses: NDArray[np.float64], lag_s: float = 0.0,
              shafts: NDArray[np.float64] | None = None) -> int:
        """Append one sample; returns its sequence number. ``poses``: ``(b, 7)``; ``shafts``: ``(m, 4)``
        (:attr:`PoseSample.shafts`; None: zeros)."""
        p = np.ascontiguousarray(poses, dtype="<f8").reshape(len(self.bodies), 7)
        if shafts is None:
            shafts = np.zeros((len(self.motors), 4))
        q = np.ascontiguousarray(shafts, dtype="<f8").reshape(len(self.motors), 4)
        self._seq += 1
        seq = self._seq
        at = _HEADER_BYTES + ((seq - 1) % self.n_slots) * self._slot
        mm = self._mm
        # Seqlock: the leading number first, then the data, then the trailing number; a reader checks both.
        struct.pack_into("<Q", mm, at, seq)
        struct.pack_into("<ddd", mm, at + 8, sim_time_s, stamp_s, lag_s)
        mm[at + 32 : at + 32 + p.nbytes] = p.tobytes()
        mm[at + 32 + p.nbytes : at + 32 + p.nbytes + q.nbytes] = q.tobytes()
        struct.pack_into("<Q", mm, at + 32 + p.nbytes + q.nbytes, seq)
        struct.pack_into("<Qd", mm, _HEAD_AT, seq, time.time())
        return seq

    def heartbeat(self) -> None:
        """Mark the writer alive while it has nothing new (e.g. the servos rest and the simulation waits)."""
        struct.pack_into("<d", self._mm, _HEARTBEAT_AT, time.time())

    def close(self, remove: bool = True) -> None:
        """Unmap; ``remove`` deletes the file so readers see the writer gone (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._mm.close()
        if remove:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def __enter__(self) -> PoseRingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PoseRingReader:
    """Poll a channel file for new samples; survives the writer being absent, restarting or killed.

    Args:
        path: the channel file.
        stale_after_s: a heartbeat older than this means the writer is gone [s].

    Attributes:
        state: ``absent`` (no file), ``live``, or ``stale``.
        bodies: body names of the current writer (empty while absent). motors: its motor names.
        generation: the current writer's generation (changes on restart).
        skipped: samples lost because the reader fell more than a ring behind, or slots overwritten mid-read.
        restarts: writer restarts seen.
    """

    def __init__(self, path: str | Path, stale_after_s: float = 2.0) -> None:
        self.path = Path(path)
        self.stale_after_s = float(stale_after_s)
        self.state = "absent"
        self.bodies: tuple[str, ...] = ()
        self.motors: tuple[str, ...] = ()
        self.generation = 0
        self.skipped = 0
        self.restarts = 0
        self._mm: mmap.mmap | None = None
        self._inode: tuple[int, int] | None = None
        self._n_slots = 0
        self._slot = 0
        self._next = 1

    def _close_map(self) -> None:
        if self._mm is not None:
            self._mm.close()
        self._mm = None
        self._inode = None
        self.bodies = ()
        self.motors = ()

    def _open(self) -> bool:
        """(Re)open the file if it changed; False while there is none."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._close_map()
            self.state = "absent"
            return False
        ident = (st.st_dev, st.st_ino)
        if self._mm is not None and ident == self._inode:
            return True
        self._close_map()
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self.state = "absent"
            return False
        try:
            size = os.fstat(fd).st_size
            if size < _HEADER_BYTES:
                raise ChannelError(str(self.path), f"{size} bytes, shorter than the header")
            mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        magic, version, n_bodies, n_slots, slot, _pid, n_motors, generation, head, _hb = _HEADER.unpack_from(mm, 0)
        if magic != _MAGIC or version != CHANNEL_VERSION or slot != _slot_bytes(n_bodies, n_motors) or \
                size < _HEADER_BYTES + n_slots * slot:
            mm.close()
            raise ChannelError(str(self.path), f"not a version-{CHANNEL_VERSION} pose channel")
        (length,) = struct.unpack_from("<I", mm, _NAMES_AT)
        names = json.loads(bytes(mm[_NAMES_AT + 4 : _NAMES_AT + 4 + length]).decode())
        self.bodies = tuple(names["bodies"])
        self.motors = tuple(names["motors"])
        if self.generation and generation != self.generation:
            self.restarts += 1
        self.generation = generation
        self._mm, self._inode, self._n_slots, self._slot = mm, ident, n_slots, slot
        # A new writer's history starts now: a reader does not replay what happened before it looked.
        self._next = head + 1
        return True

    def poll(self, max_samples: int | None = None) -> list[PoseSample]:
        """New samples since the last call, oldest first (empty while the writer is absent or quiet)."""
        if not self._open():
            return []
        mm = self._mm
        assert mm is not None
        head, heartbeat = struct.unpack_from("<Qd", mm, _HEAD_AT)
        self.state = "stale" if time.time() - heartbeat > self.stale_after_s else "live"
        if head < self._next - 1:  # same file, counter went back: treat as a restart
            self._next = head + 1
        oldest = head - self._n_slots + 2  # keep one slot of margin: the writer may be filling the next one
        if self._next < oldest:
            self.skipped += oldest - self._next
            self._next = oldest
        out: list[PoseSample] = []
        while self._next <= head and (max_samples is None or len(out) < max_samples):
            seq = self._next
            self._next += 1
            sample = self._read(seq)
            if sample is None:
                self.skipped += 1
                continue
            out.append(sample)
        return out

    def _read(self, seq: int) -> PoseSample | None:
        """The sample with sequence number ``seq``, or None when its slot holds another (overwritten, or being
        written)."""
        mm = self._mm
        assert mm is not None
        n_bodies, n_motors = len(self.bodies), len(self.motors)
        at = _HEADER_BYTES + ((seq - 1) % self._n_slots) * self._slot
        (end,) = struct.unpack_from("<Q", mm, at + self._slot - 8)
        sim_t, stamp, lag = struct.unpack_from("<ddd", mm, at + 8)
        poses = np.frombuffer(mm, dtype="<f8", count=7 * n_bodies, offset=at + 32).reshape(n_bodies, 7).copy()
        shafts = np.frombuffer(mm, dtype="<f8", count=4 * n_motors,
                               offset=at + 32 + 56 * n_bodies).reshape(n_motors, 4).copy()
        (begin,) = struct.unpack_from("<Q", mm, at)
        if begin != seq or end != seq:
            return None
        return PoseSample(seq, sim_t, stamp, lag, poses, shafts)

    def latest(self) -> PoseSample | None:
        """The newest sample, or None while there is none, the writer is absent or stale (what the emulated bus
        reports as its servos' state). Does not change what :meth:`poll` returns next."""
        if not self._open():
            return None
        mm = self._mm
        assert mm is not None
        for _attempt in range(3):  # the writer may be overwriting that slot's successor: read again
            head, heartbeat = struct.unpack_from("<Qd", mm, _HEAD_AT)
            self.state = "stale" if time.time() - heartbeat > self.stale_after_s else "live"
            if head == 0 or self.state != "live":
                return None
            sample = self._read(head)
            if sample is not None:
                return sample
        return None

    def close(self) -> None:
        """Unmap (idempotent)."""
        self._close_map()
