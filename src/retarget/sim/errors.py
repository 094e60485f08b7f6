"""Simulator errors: they carry the step, time and residual history needed to debug a failed solve."""
from __future__ import annotations

from retarget.errors import RetargetError

__all__ = ["NewtonFailed", "SimulationDiverged", "SimulationError"]


class SimulationError(RetargetError):
    """Root of the simulator's errors."""


class NewtonFailed(SimulationError):
    """Newton did not converge within the iteration limit.

    Attributes:
        step: step index (0 = quasi-static solve).
        time: [s].
        residual_norms: per iteration, max-norms of the kinematic [m], dynamic [N] and constraint [m/s] residuals.
    """

    def __init__(self, step: int, time: float, residual_norms: list[dict[str, float]], reason: str = "") -> None:
        self.step = step
        self.time = time
        self.residual_norms = residual_norms
        self.reason = reason
        last = residual_norms[-1] if residual_norms else {}
        detail = ", ".join(f"{k}={v:.3e}" for k, v in last.items())
        super().__init__(
            f"Newton did not converge at step {step} (t = {time:.6g} s) after {len(residual_norms)} iterations"
            f"{': ' + reason if reason else ''}; last residual norms: {detail}"
        )

    def __reduce__(self) -> tuple:
        # Rebuilt from the constructor's arguments, so the error crosses a process boundary (a robust member's
        # simulation in a forked worker fails like one run here) instead of breaking the worker pool.
        return type(self), (self.step, self.time, self.residual_norms, self.reason)


class SimulationDiverged(NewtonFailed):
    """The iterate became non-finite (NaN/inf) or an element inverted."""
