"""Planning: the pipeline around the optimizer — one :func:`plan` for ``retarget plan``, the ROS planner node and
the benchmarks.

:mod:`~retarget.planning.run` (:func:`plan`: the planning model, the optimization, the baselines and the checks),
:mod:`~retarget.planning.model` (the reduced model it plans on: given, cached, found or trained),
:mod:`~retarget.planning.options` (:class:`PlanOptions`, every setting's default) and
:mod:`~retarget.planning.settings` (their command-line flags and node parameters),
:mod:`~retarget.planning.variants` (naive, ZV/ZVD and optimized runs; :class:`PlanResult`),
:mod:`~retarget.planning.verification` (the plan in models it was not optimized on) and
:mod:`~retarget.planning.checks` (what they find, and the plan's verdict), :mod:`~retarget.planning.budget` (the
time budget and what each stage costs), :mod:`~retarget.planning.stages` (progress stages and the cancel check),
:mod:`~retarget.planning.refine` (the learning step from a recorded take) and the CLI
(:mod:`~retarget.planning.commands`: ``retarget plan``, ``retarget refine``, the plan checks).

The math it runs — profiles, objective, adjoint, solvers — is :mod:`retarget.optimize`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from retarget._lazy import lazy_exports

# Public names → defining module. Imported on first access (PEP 562) so that `import retarget.planning.commands`
# (every `retarget` CLI start, `retarget --help`) does not pull numba and scipy.
_EXPORTS: dict[str, str] = {
    "BandResult": "checks",
    "FinerStepCheck": "checks",
    "PlanChecks": "checks",
    "RunFigures": "checks",
    "StiffnessBand": "checks",
    "Verdict": "checks",
    "Verification": "checks",
    "Budget": "budget",
    "PlanEstimate": "budget",
    "plan_estimate": "budget",
    "PlanningModel": "model",
    "planning_model": "model",
    "PlanOptions": "options",
    "RefineOptions": "options",
    "Start": "options",
    "VerifyModel": "options",
    "options_from_parameters": "settings",
    "PlanProgress": "run",
    "plan": "run",
    "run_plan": "run",
    "PlanResult": "variants",
    "Variant": "variants",
    "simulate_variant": "variants",
    "check_plan": "verification",
    "verify_plan": "verification",
}

if TYPE_CHECKING:
    from retarget.planning.budget import Budget, PlanEstimate, plan_estimate
    from retarget.planning.checks import (
        BandResult,
        FinerStepCheck,
        PlanChecks,
        RunFigures,
        StiffnessBand,
        Verdict,
        Verification,
    )
    from retarget.planning.model import PlanningModel, planning_model
    from retarget.planning.options import PlanOptions, RefineOptions, Start, VerifyModel
    from retarget.planning.settings import options_from_parameters
    from retarget.planning.run import PlanProgress, plan, run_plan
    from retarget.planning.variants import PlanResult, Variant, simulate_variant
    from retarget.planning.verification import check_plan, verify_plan


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "BandResult",
    "Budget",
    "FinerStepCheck",
    "PlanChecks",
    "PlanEstimate",
    "PlanOptions",
    "PlanProgress",
    "PlanResult",
    "PlanningModel",
    "RefineOptions",
    "RunFigures",
    "Start",
    "StiffnessBand",
    "Variant",
    "Verdict",
    "Verification",
    "VerifyModel",
    "check_plan",
    "options_from_parameters",
    "plan",
    "plan_estimate",
    "planning_model",
    "run_plan",
    "simulate_variant",
    "verify_plan",
]
