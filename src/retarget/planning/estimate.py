"""What a plan costs, said before the work: each stage's wall time estimated from the model's size and the options.

The estimates are rough (within a factor of about two on a shared 2-core machine): they let a user choose a budget
before minutes go by, they do not bound anything. Each rests on a measured constant:

- a full FEM step costs :data:`FULL_STEP_S_PER_DOF` per deformable DOF (the constant of
  :func:`~retarget.planning.verification.full_verification_cost`);
- the in-process training adds :data:`TRAINING_BUILD_FACTOR` × its full simulation for mass-PCA, cubature and the
  replay checks (the drummer's demo model: 5 min 7 s in all for a 191 s estimate of the simulation alone);
- a reduced step costs :data:`REDUCED_STEP_S_PER_STATE` per reduced unknown (the compiled engine:
  ``python bench/bench_reduced.py`` prints the per-step figures), at least :data:`REDUCED_STEP_MIN_S`;
- an optimizer iteration costs :data:`ITERATION_FORWARD_RUNS` forward runs of the span it optimizes, by method
  (the demo's 3 s of drumming, 5 windows, one iteration each: descent 63 s, L-BFGS-B 109 s, Levenberg–Marquardt
  139 s, at 2.9 s per window's forward run; docs/ros.md "make demo").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from retarget.planning.options import VERIFY_COST_FACTOR, PlanOptions

__all__ = ["FULL_STEP_S_PER_DOF", "ITERATION_FORWARD_RUNS", "REDUCED_STEP_MIN_S", "REDUCED_STEP_S_PER_STATE",
           "TRAINING_BUILD_FACTOR", "PlanEstimate", "StageEstimate", "format_seconds", "plan_estimate",
           "training_estimate"]

#: Full FEM cost per deformable DOF and step [s].
FULL_STEP_S_PER_DOF = 2.2e-5

#: The in-process training's total over its full simulation (mass-PCA, cubature, replay checks on top).
TRAINING_BUILD_FACTOR = 1.6

#: Reduced engine cost per reduced unknown and step [s]: the drummer's demo model (518 unknowns) steps in 3.4-4.2 ms
#: (docs/ros.md "make demo"; 5.7-6.6 ms at load 10).
REDUCED_STEP_S_PER_STATE = 7.3e-6

#: The smallest reduced step cost [s] (the per-step overhead of a small model).
REDUCED_STEP_MIN_S = 2e-4

#: Forward runs of the optimized span per optimizer iteration, by method (line searches and gradients included).
ITERATION_FORWARD_RUNS = {"descent": 4.5, "lbfgs": 7.5, "gauss-newton": 10.0, "auto": 10.0}


@dataclass(frozen=True)
class StageEstimate:
    """One stage of a plan and its estimated wall time.

    Attributes:
        stage: what runs (``training``, ``optimization``, ``settle refinement``, ``verification``, ...).
        seconds: the estimate [s]; 0 for a stage that is skipped.
        note: what the estimate counts, or why the stage is skipped.
    """

    stage: str
    seconds: float
    note: str = ""

    @property
    def skipped(self) -> bool:
        return self.seconds <= 0.0

    def line(self) -> str:
        """``training: about 5 min (full simulation of ...)``, or ``settle refinement: skipped (...)``."""
        what = "skipped" if self.skipped else f"about {format_seconds(self.seconds)}"
        return f"{self.stage}: {what}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class PlanEstimate:
    """The estimated stages of one plan, in the order they run.

    Attributes:
        stages: every stage, skipped ones with ``seconds`` 0 and the reason in their note.
        time_budget: the plan's time budget [s], or None.
    """

    stages: tuple[StageEstimate, ...]
    time_budget: float | None = None

    @property
    def total_s(self) -> float:
        return float(sum(s.seconds for s in self.stages))

    def lines(self) -> list[str]:
        """One line per stage, then the total (and the budget)."""
        budget = "" if self.time_budget is None else f"; time budget {format_seconds(self.time_budget)}"
        return [s.line() for s in self.stages] + [f"total: about {format_seconds(self.total_s)}{budget}"]

    def summary(self) -> str:
        """One line: the stages that run with their estimates, the total and the budget (for the node's feedback)."""
        runs = ", ".join(f"{s.stage} ~{format_seconds(s.seconds)}" for s in self.stages if not s.skipped)
        budget = "" if self.time_budget is None else f", time budget {format_seconds(self.time_budget)}"
        return f"estimated {runs}; total ~{format_seconds(self.total_s)}{budget}"

    def as_dict(self) -> dict[str, float]:
        """Stage → estimated seconds (for a JSON report)."""
        return {s.stage: round(float(s.seconds), 1) for s in self.stages}


def format_seconds(seconds: float) -> str:
    """``45 s``, ``3 min``, ``1.5 h``."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{max(seconds, 1.0):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def training_estimate(deformable_dofs: int, duration: float, dt_train: float) -> StageEstimate:
    """The in-process training: a full simulation of ``duration`` [s] at ``dt_train`` [s] on a model with
    ``deformable_dofs``, then mass-PCA, cubature and replay checks."""
    simulation = (duration / dt_train) * FULL_STEP_S_PER_DOF * max(deformable_dofs, 500)
    return StageEstimate("training", TRAINING_BUILD_FACTOR * simulation,
                         f"full simulation of {duration:g} s at dt {dt_train:g} s, {deformable_dofs} DOFs, then "
                         "mass-PCA and cubature")


def reduced_step_s(n_state: int) -> float:
    """A reduced model's forward step [s] for ``n_state`` reduced unknowns."""
    return max(REDUCED_STEP_MIN_S, REDUCED_STEP_S_PER_STATE * float(n_state))


def plan_estimate(options: PlanOptions, duration: float, n_state: int, n_parameters: int, deformable_dofs: int,
                  full_verification: bool, settles: bool, training: StageEstimate | None = None) -> PlanEstimate:
    """The stages of a plan of ``duration`` [s] on a reduced model with ``n_state`` unknowns, ``n_parameters``
    optimizer parameters and ``deformable_dofs`` in its full FEM.

    Args:
        options: the plan's settings (method, iterations, windows, checks).
        full_verification: whether the plan is verified in the full FEM (``verify_model`` full, or auto within
            ``verify_full_max_s``).
        settles: whether the settle refinement runs (no windows, at most 200 parameters, ``settle_iterations`` > 0).
        training: the training's estimate when the model is trained first.
    """
    step = reduced_step_s(n_state)
    forward = (duration / options.dt) * step  # one forward run of the whole motion [s]
    stages: list[StageEstimate] = [] if training is None else [training]
    per_iteration = ITERATION_FORWARD_RUNS.get(options.method, ITERATION_FORWARD_RUNS["lbfgs"])
    iterations = f"{options.max_iterations} {options.method} iteration{'s' if options.max_iterations != 1 else ''}"
    members = 1 + (0 if options.window is not None else len([f for f in options.stiffness_band if f != 1.0]))
    if options.window is not None and options.window > 0:
        stride = max(options.window - options.window_overlap, options.dt)
        windows = max(1, math.ceil(max(duration - options.window, 0.0) / stride) + 1)
        span = min(options.window + options.window_tail, duration)
        optimization = windows * options.max_iterations * per_iteration * (span / options.dt) * step
        note = f"{iterations} in each of about {windows} windows"
    else:
        optimization = options.max_iterations * per_iteration * forward * members
        note = (f"at most {iterations}"
                + (f", {members} models (robust objective)" if members > 1 else ""))
    targets = (duration / options.dt / max(options.target_stride, 1)) * 10.0 * step
    stages.append(StageEstimate("targets", targets, "quasi-static targets"))
    stages.append(StageEstimate("optimization", optimization, note))
    if settles:
        models = 1 + len([f for f in options.settle_band if f != 1.0])
        # A tangent pass costs about one forward solve per parameter (a sparse back-substitution each).
        settle = options.settle_iterations * models * forward * (1.0 + n_parameters / 20.0)
        stages.append(StageEstimate("settle refinement", settle, f"{options.settle_iterations} steps on {models} "
                                    "models"))
    else:
        stages.append(StageEstimate("settle refinement", 0.0, "off" if options.settle_iterations <= 0 else
                                    "not for windows or plans of more than 200 parameters"))
    checks = 2.0 * forward if options.baselines else 0.0
    if options.verify_dt:
        checks += VERIFY_COST_FACTOR * 2.0 * forward * options.dt / options.verify_dt
    checks += len(options.band) * 3.0 * forward
    stages.append(StageEstimate("baselines and checks", checks, "ZV/ZVD, the finer step, the stiffness band"))
    if full_verification:
        runs = 3 * (1 + len(options.verify_full_band))
        full = runs * (duration / options.verify_full_dt) * FULL_STEP_S_PER_DOF * max(deformable_dofs, 500)
        note = f"{runs} full FEM runs" + (f" (Young's modulus x {', '.join(f'{f:g}' for f in options.verify_full_band)}"
                                          " too)" if options.verify_full_band else "")
        stages.append(StageEstimate("full FEM verification", full, note))
    return PlanEstimate(tuple(stages), options.time_budget)
