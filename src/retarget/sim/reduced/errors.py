"""Errors of the reduced simulation: bad training data, and stale or foreign reduced-model artifacts."""
from __future__ import annotations

from retarget.errors import InputError, RetargetError

__all__ = ["ReducedModelError", "StaleReducedModelError", "TrainingDataError"]


class ReducedModelError(RetargetError):
    """Root of the reduced simulation's errors."""


class TrainingDataError(ReducedModelError, InputError):
    """Snapshots or cubature samples cannot build a basis (wrong shape, too few, degenerate).

    Attributes:
        detail: what was wrong, with the offending shapes or values.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class StaleReducedModelError(ReducedModelError, InputError):
    """A reduced-model artifact does not match the robot it is used with (or has an unknown format version).

    Attributes:
        path: the artifact file.
        changed: names of the inputs whose hashes differ (e.g. ``["robot_yaml", "material:rod"]``).
        built_for: what the artifact was built for, as its metadata records it (robot, each body's mesh and
            material, the mesh settings; :func:`retarget.sim.reduced.artifact.built_for`); empty when unreadable.
    """

    def __init__(self, path: str, changed: list[str], detail: str = "", built_for: str = "") -> None:
        self.path = path
        self.changed = changed
        self.built_for = built_for
        msg = f"reduced model {path} is stale or foreign: changed {', '.join(changed) or '?'}"
        msg += (f" ({detail})" if detail else "") + (f"; it was built for {built_for}" if built_for else "")
        super().__init__(msg + "; rebuild it with `retarget reduce`")
