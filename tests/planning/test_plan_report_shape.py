"""The JSON report of a plan keeps its shape: ``retarget plan --json``, the ROS result's ``metrics_json``, the plan
report and the benchmarks all read it, so its keys (and where each kind of value sits) are compared, path by path
and in order, with ``plan_report_shape.json``, recorded from a plan of the tiny robot with every check on: the
finer step, the stiffness band, the full FEM and its band, the ZV/ZVD baselines (the ramp held 0.8 s), the settle
refinement; and a verification in another reduced model (:func:`~retarget.planning.verification.verify_reduced`).

``RETARGET_WRITE_SHAPE=1`` rewrites the file (only for an intended change of the report).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retarget.jsonsafe import dumps
from retarget.motion.motion import Motion
from retarget.planning.options import PlanOptions
from retarget.planning.run import plan

SHAPE = Path(__file__).with_name("plan_report_shape.json")

#: Mappings keyed by names the run chooses (stages, models' info): their own keys are not part of the contract.
OPEN = ("model", "timings_s", "warnings", "files")


def paths(value: Any, prefix: str = "") -> Iterator[str]:
    """``path: kind`` for every key of a JSON value, in order (lists and the :data:`OPEN` mappings as one leaf)."""
    if isinstance(value, dict) and prefix not in OPEN:
        for key, item in value.items():
            yield from paths(item, f"{prefix}.{key}" if prefix else key)
        return
    kind = ("null" if value is None else "bool" if isinstance(value, bool) else "number"
            if isinstance(value, (int, float)) else "str" if isinstance(value, str) else "list"
            if isinstance(value, list) else "object")
    yield f"{prefix}: {kind}"


def _report(tiny_artifact, tmp_path, monkeypatch) -> dict[str, list[str]]:
    from retarget.planning.verification import verify_reduced
    from retarget.sim.reduced.store import load_artifact

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", str(tmp_path / "models"))
    folder, npz = tiny_artifact
    robot = folder / "tiny_rod.yaml"
    t = np.linspace(0.0, 0.8, 161)
    motion = Motion(t, ("m",), (0.2 * np.clip(t / 0.1, 0, 1))[:, None])
    options = PlanOptions(dt=0.005, knot_spacing=0.04, max_iterations=1, reduced_file=str(npz),
                          allow_unverified_model=True, stiffness_band=(0.9, 1.1), band=(0.9, 1.1),
                          verify_model="full", verify_full_band=(0.9,), verify_dt=0.0025, settle_iterations=1,
                          workers=1)
    result = plan(robot, motion, options)
    report = json.loads(dumps(result.to_json(), default=float))
    own = verify_reduced(result, load_artifact(robot, npz), options.dt)
    reduced = json.loads(dumps(getattr(own, "to_json", lambda: own)(), default=float))
    unverified = plan(robot, motion, replace(options, max_iterations=0, verify_model="none"))
    return {"plan": list(paths(report)), "verify_reduced": list(paths(reduced)),
            "no_other_model": list(paths(json.loads(dumps(unverified.to_json(), default=float))))}


@pytest.mark.slow
def test_the_plan_report_keeps_its_shape(tiny_artifact, tmp_path, monkeypatch):
    got = _report(tiny_artifact, tmp_path, monkeypatch)
    if os.environ.get("RETARGET_WRITE_SHAPE") == "1":
        SHAPE.write_text(json.dumps(got, indent=1) + "\n")
    expected = json.loads(SHAPE.read_text())
    for part, lines in expected.items():
        assert got[part] == lines, part
