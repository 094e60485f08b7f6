"""Tests of the reduced-model lookup (retarget.twin.model) and the simulation-driven servos (retarget.twin.servo)."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from retarget.dynamixel.emulator import EmulatedBus
from retarget.errors import InputError
from retarget.twin.errors import TwinModelUnavailable
from retarget.twin.model import find_reduced_model
from retarget.twin.servo import SimulationDrivenServos, joint_mapping
from retarget.twin.worker import record_size


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    with pytest.raises(TwinModelUnavailable, match="planner cache") as err:
        find_reduced_model("single_rod")
    assert err.value.robot == "single_rod"
    with pytest.raises(InputError, match="does not exist"):
        find_reduced_model("single_rod", tmp_path / "missing.npz")
    folder = tmp_path / "cache" / "reduced"
    folder.mkdir(parents=True)
    old, new, other = folder / "single_rod-aaa.npz", folder / "single_rod-bbb.npz", folder / "two_rods-ccc.npz"
    for k, p in enumerate((old, new, other)):
        p.write_bytes(b"x")
        import os

        os.utime(p, (1000 + k, 1000 + k))
    found = find_reduced_model("single_rod")
    assert found.path == new.resolve() and found.origin == "planner_cache"
    given = tmp_path / "m.npz"
    given.write_bytes(b"x")
    assert find_reduced_model("single_rod", given).origin == "file"


def test_lookup_falls_back_to_the_planner_model_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import numpy as np

    from retarget.sim.reduced.artifact import FORMAT_VERSION

    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(models))
    stale, current = models / "drummer-old.npz", models / "drummer-boxing.npz"
    np.savez(stale, meta=np.array(json.dumps({"format_version": 1})))  # a format no longer read
    np.savez(current, meta=np.array(json.dumps({"format_version": FORMAT_VERSION})))
    import os

    os.utime(current, (1000, 1000))  # older than the stale one: the stale one is skipped, not preferred
    found = find_reduced_model("drummer")
    assert found.path == current.resolve() and found.origin == "artifact_dir"
    current.unlink()
    with pytest.raises(TwinModelUnavailable, match="no current drummer"):
        find_reduced_model("drummer")


def test_joint_mapping() -> None:
    index, offset, direction = joint_mapping(["a", "b", "c"], ["c", "a"], [0.1, 0.2, 0.3], [1, 1, -1])
    assert index.tolist() == [2, 0] and offset.tolist() == [0.3, 0.1] and direction.tolist() == [-1, 1]
    with pytest.raises(InputError, match="no emulated servo"):
        joint_mapping(["a"], ["z"])


def test_servos_stream_shaft_angles_and_report_them() -> None:
    records: list[bytes] = []
    index, offset, direction = joint_mapping(["j1", "j2"], ["j2"], [0.0, 0.5], [1.0, -1.0])
    dynamics = SimulationDrivenServos(2, lambda r: records.append(r) or True, index, offset, direction)
    clock = [0.0]
    bus = EmulatedBus([1, 2], dynamics=dynamics, clock=lambda: clock[0])
    bus.servos[2]._set("Torque Enable", 1)
    bus.servos[2]._set("Goal Position", 2048 + 512)  # +π/4 on the shaft
    clock[0] = 0.5
    bus.advance()
    size = record_size(1)
    assert all(len(r) == size for r in records)
    header = struct.unpack("<3d", records[0])
    assert header[0] < -1e9  # −(wall-clock time of motor time 0)
    t, theta, rate = struct.unpack("<3d", records[-1])
    present = bus.snapshot()["present_position"][1]
    # Present Position is the shaft angle, and the simulation gets the joint angle direction·(x − offset).
    assert present == pytest.approx(np.pi / 4, abs=2e-3)
    assert t == pytest.approx(0.5) and theta == pytest.approx(-(present - 0.5), abs=1e-3) and abs(rate) < 1e-6
    assert dynamics.sent == len(records) - 1 and dynamics.dropped == 0
