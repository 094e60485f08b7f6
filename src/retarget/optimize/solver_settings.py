"""What the solvers and the planning problem read of the planner's settings.

The settings themselves are :class:`retarget.planning.options.PlanOptions`, one frozen dataclass above this
package; the optimizers (:func:`~retarget.optimize.lbfgs.optimize`, :func:`~retarget.optimize.windows.optimize_windows`,
:func:`~retarget.optimize.gauss_newton.levenberg_marquardt`) and :func:`~retarget.optimize.problem.build_plan_problem`
take any object with the read-only attributes listed here (:class:`SolverOptions`, :class:`WindowOptions`,
:class:`ProblemOptions`), which ``PlanOptions`` has. :class:`Method` names the optimizers.
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from retarget.optimize.weights import WeightSpec

__all__ = ["Method", "ProblemOptions", "SolverOptions", "WindowOptions"]


class Method(enum.StrEnum):
    """The optimizers (:func:`retarget.optimize.lbfgs.choose_method`; :attr:`PlanOptions.method
    <retarget.planning.options.PlanOptions.method>` says what each does)."""

    LBFGS = "lbfgs"
    DESCENT = "descent"
    GAUSS_NEWTON = "gauss-newton"
    AUTO = "auto"


class SolverOptions(Protocol):
    """The settings an optimizer reads (:class:`~retarget.planning.options.PlanOptions` documents each)."""

    @property
    def max_iterations(self) -> int: ...

    @property
    def relative_tolerance(self) -> float: ...

    @property
    def lbfgs_memory(self) -> int: ...

    @property
    def method(self) -> Method: ...

    @property
    def first_step(self) -> float | None: ...

    @property
    def time_budget(self) -> float | None: ...


class WindowOptions(SolverOptions, Protocol):
    """The settings of the receding-horizon windows (:func:`~retarget.optimize.windows.optimize_windows`), besides
    their optimizer's. An implementation is a dataclass: each window runs with a copy whose ``method`` is the
    window's optimizer (``dataclasses.replace``)."""

    @property
    def window(self) -> float | None: ...

    @property
    def window_tail(self) -> float: ...

    @property
    def window_overlap(self) -> float: ...


class ProblemOptions(Protocol):
    """The settings the planning problem is built from (:func:`~retarget.optimize.problem.build_plan_problem`)."""

    @property
    def dt(self) -> float: ...

    @property
    def duration(self) -> float | None: ...

    @property
    def knot_spacing(self) -> float: ...

    @property
    def rest_after(self) -> float | None: ...

    @property
    def target_stride(self) -> int: ...

    @property
    def deviation_weight(self) -> WeightSpec: ...

    @property
    def acceleration_weight(self) -> WeightSpec: ...

    @property
    def velocity_weight(self) -> float: ...

    @property
    def settle_weight(self) -> float: ...

    @property
    def torque_weight(self) -> float: ...

    @property
    def torque_margin(self) -> float: ...
