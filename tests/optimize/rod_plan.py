"""The reduced rod on a motor (``rod_systems`` in rod_fixtures.py) as a planning problem, shared by the optimizer
drivers' tests (test_lbfgs, test_windows; tests/planning's test_run, test_variants, test_verification): a 0.2 s ramp to
0.25 rad with the tip tracked, and :class:`RecordedProblem`, a :class:`~retarget.optimize.problem.PlanProblem`
whose evaluations are recorded and may be delayed or interrupted through :meth:`PlanProblem.evaluate`, the seam
every optimizer evaluates through."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from retarget.motion.motion import Motion
from retarget.optimize.adjoint import Evaluation
from retarget.optimize.limits import MotorLimits, ServoSpec
from retarget.optimize.problem import PlanProblem
from retarget.optimize.weights import TrackedBodyWeights, WeightSchedule
from retarget.planning.options import PlanOptions

#: Fast settings: 2 iterations, no shaped baselines, the nominal model alone (no robust objective), no stiffness
#: band and no full-FEM check. The defaults of those are tested in test_robust.py and tests/planning/test_run.py.
OPTIONS = PlanOptions(knot_spacing=0.04, dt=0.005, max_iterations=2, baselines=False, stiffness_band=(), band=(),
                      verify_model="none")


def ramp() -> Motion:
    """0 → 0.25 rad in 0.1 s (2.5 rad/s), then 0.1 s of hold; 41 samples [s], [rad]."""
    t = np.linspace(0.0, 0.2, 41)
    return Motion(t, ("m",), (0.25 * np.clip(t / 0.1, 0.0, 1.0))[:, None])


def tip() -> list[TrackedBodyWeights]:
    """The tip's position tracked with weight 1, its orientation not."""
    return [TrackedBodyWeights("tip", WeightSchedule.constant(1.0), WeightSchedule.constant(0.0))]


def rod_limits(lower: float = -0.2, upper: float = 0.3, servo: ServoSpec | None = None) -> MotorLimits:
    """Motor ``m`` between ``lower`` and ``upper`` [rad] (the XM430-W210's speed and torque unless ``servo``)."""
    return MotorLimits.build(("m",), {"m": (lower, upper, 0.0)}, servo)


#: ``hook(problem, call, progress) -> progress``: called before evaluation number ``call`` (1-based, counted over
#: every copy of the problem); it may raise, sleep, or return a wrapped ``progress``.
Hook = Callable[["RecordedProblem", int, Any], Any]


@dataclass(frozen=True, eq=False)
class RecordedProblem(PlanProblem):
    """A plan problem that records every point evaluated and lets a test act before each evaluation.

    ``dataclasses.replace`` keeps the class and shares ``seen`` (the windows' sub-problems record into the same
    list).

    Attributes:
        seen: the points evaluated, in order (copies).
        gradients: whether each of them was evaluated with the gradient.
        hook: see :data:`Hook`; None: evaluate as :class:`PlanProblem`.
    """

    seen: list[NDArray[np.float64]] = field(default_factory=list)
    gradients: list[bool] = field(default_factory=list)
    hook: Hook | None = None

    def evaluate(self, x: NDArray[np.float64], gradient: bool = True,
                 progress: Callable[[int, int], None] | None = None) -> Evaluation:
        self.seen.append(np.array(x, copy=True))
        self.gradients.append(bool(gradient))
        if self.hook is not None:
            progress = self.hook(self, len(self.seen), progress)
        return super().evaluate(x, gradient=gradient, progress=progress)


def recorded(pp: PlanProblem, hook: Hook | None = None) -> RecordedProblem:
    """``pp`` as a :class:`RecordedProblem`."""
    return RecordedProblem(**{f.name: getattr(pp, f.name) for f in fields(PlanProblem)}, hook=hook)
