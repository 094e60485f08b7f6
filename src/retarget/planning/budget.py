"""A plan's time budget and what its stages cost: :class:`Budget` (the run's deadline, the deadlines and reserves
it hands the stages) and the cost model, said before the work (:func:`plan_estimate`) and kept as reserves while
it runs (:func:`checks_reserve`, :func:`full_verification_cost`).

The estimates are rough (within a factor of about two on a shared 2-core machine): they let a user choose a budget
before minutes go by, they do not bound anything. Each rests on a measured constant:

- a full FEM step costs :data:`FULL_STEP_S_PER_DOF` per deformable DOF (:func:`full_verification_cost`);
- the in-process training adds :data:`TRAINING_BUILD_FACTOR` × its full simulation for mass-PCA, cubature and the
  replay checks (the drummer's demo model: 5 min 7 s in all for a 191 s estimate of the simulation alone);
- a reduced step costs :data:`REDUCED_STEP_S_PER_STATE` per reduced unknown (the compiled engine:
  ``python bench/bench_reduced.py`` prints the per-step figures), at least :data:`REDUCED_STEP_MIN_S`;
- an optimizer iteration costs :data:`ITERATION_FORWARD_RUNS` forward runs of the span it optimizes, by method
  (the demo's 3 s of drumming, 5 windows, one iteration each: descent 63 s, L-BFGS-B 109 s, Levenberg–Marquardt
  139 s, at 2.9 s per window's forward run; docs/ros.md "make demo");
- the verification at ``verify_dt`` costs :data:`VERIFY_COST_FACTOR` × its forward runs' worth at the planning step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from retarget.optimize.control import EVALUATION_FORWARD_RUNS, Deadline
from retarget.planning.options import PlanOptions

if TYPE_CHECKING:
    from retarget.model.robot import RobotModel

__all__ = ["BASELINES_RESERVE", "FULL_STEP_S_PER_DOF", "ITERATION_FORWARD_RUNS", "REDUCED_STEP_MIN_S",
           "REDUCED_STEP_S_PER_STATE", "SETTLE_RESERVE", "TRAINING_BUILD_FACTOR", "VERIFY_COST_FACTOR", "Budget",
           "PlanEstimate", "StageEstimate", "checks_reserve", "deformable_dofs", "format_seconds",
           "full_verification_cost", "optimizer_reserve", "plan_estimate", "training_estimate",
           "verification_reserve"]

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

#: The verification's cost over its ``2 dt / verify_dt`` forward runs' worth at the planning step: a step at the
#: finer ``verify_dt`` costs a little more, and the deviation metrics of every step come on top. Measured on the
#: drummer's demo model (3 s of drumming, dt 2 ms, verify_dt 1 ms, NUMBA_NUM_THREADS=2): forward run 5.1-6.3 s at
#: 2 ms, 12.0-12.4 s at 1 ms, the verification 26.5-31.1 s = 4.8-5.6 planning forward runs where 4 were kept.
VERIFY_COST_FACTOR = 1.5

#: The ZV/ZVD baselines' reserve in optimizer evaluations: two forward simulations cost about 1.6 forward + adjoint
#: evaluations.
BASELINES_RESERVE = 1.6

#: The settle refinement stops this many of the optimizer's evaluations (of the optimum) before the deadline.
SETTLE_RESERVE = 2.0


@dataclass(frozen=True)
class Budget:
    """A plan's time budget: the seconds it may take, and once started its deadline, from which it hands each stage
    its own (:class:`~retarget.optimize.control.Deadline`).

    Attributes:
        seconds: the budget [s] (:attr:`PlanOptions.time_budget`); None: no limit.
        deadline: when the budget runs out; None before :meth:`started` or without a limit.
    """

    seconds: float | None
    deadline: Deadline | None = None

    @staticmethod
    def of(options: PlanOptions) -> Budget:
        """The budget of ``options.time_budget``, not started."""
        return Budget(None if options.time_budget is None else float(options.time_budget))

    def started(self, at: float | None = None) -> Budget:
        """The budget started at ``at`` (a ``time.perf_counter()`` instant [s]; None: now)."""
        if self.seconds is None:
            return self
        return Budget(self.seconds, Deadline.after(self.seconds) if at is None else Deadline(at + self.seconds))

    def less(self, spent: float) -> Budget:
        """The budget left after ``spent`` [s] (at least 0), not started."""
        return self if self.seconds is None else Budget(max(self.seconds - spent, 0.0))

    def reserving(self, seconds: float) -> Deadline | None:
        """The deadline of a stage that leaves ``seconds`` [s] for the work after it; None without a limit."""
        return None if self.deadline is None else self.deadline.earlier(seconds)


def verification_reserve(options: PlanOptions) -> float:
    """Time the verification at ``options.verify_dt`` needs, in optimizer evaluations (one evaluation, forward and
    adjoint, costs about three forward runs): two forward runs at ``verify_dt``, i.e. ``2 dt / verify_dt`` at the
    planning step, times :data:`VERIFY_COST_FACTOR`. 0 without a ``verify_dt``."""
    if options.verify_dt is None or not options.verify_dt > 0:
        return 0.0
    return VERIFY_COST_FACTOR * 2.0 * float(options.dt) / float(options.verify_dt) / EVALUATION_FORWARD_RUNS


def checks_reserve(options: PlanOptions, baselines: bool, verification_timed: bool = False) -> float:
    """Time the checks after the optimization need, in optimizer evaluations: the verification at
    ``verify_dt`` (:func:`verification_reserve`; none when ``verification_timed``: the plan keeps its measured time
    in seconds), and the robustness band: one forward run at the planning step per factor of
    :attr:`PlanOptions.band` and variant it re-simulates (naive and optimized, and ZVD when the ``baselines`` run),
    three forward runs being one evaluation. All of them, one after another, even where part of the band runs in
    a worker process beside the rest (:func:`~retarget.planning.options.band_offloaded`): two simulations at once on
    this 2-core machine ran at 1.0–1.25 × the throughput of one (docs/optimize.md, "Checks")."""
    band_runs = len(options.band) * (3 if baselines else 2)
    return (0.0 if verification_timed else verification_reserve(options)) + band_runs / EVALUATION_FORWARD_RUNS


def optimizer_reserve(options: PlanOptions, baselines: bool, verification_timed: bool = False) -> float:
    """The evaluations the optimizer keeps before the deadline for the work after it: the ZV/ZVD baselines when they
    run (:data:`BASELINES_RESERVE`; none when the motion leaves too little ring-out for them), and the checks
    (:func:`checks_reserve`)."""
    return (BASELINES_RESERVE if baselines else 0.0) + checks_reserve(options, baselines,
                                                                       verification_timed=verification_timed)


def deformable_dofs(model: RobotModel) -> int:
    """Deformable DOFs of ``model``'s flexible parts on their meshes (3 per node)."""
    return int(sum(3 * p.mesh.n_nodes for p in model.flexible_parts))


def full_verification_cost(model: RobotModel, duration: float, dt: float, runs: int = 3) -> float:
    """A rough estimate of :func:`~retarget.planning.verification.verify_full`'s wall time [s] on one core: the full
    engine's measured cost per step grows about linearly with the deformable DOFs (≈ 1.9e-5 s per DOF and step at
    2 337 DOFs, 2.3e-5 at 10 575, on a shared 2-core machine; :data:`FULL_STEP_S_PER_DOF`)."""
    dofs = deformable_dofs(model)
    return runs * (duration / dt) * FULL_STEP_S_PER_DOF * max(dofs, 500)


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
                         f"full simulation of {duration:g} s at dt {dt_train:g} s, "
                         + (f"{deformable_dofs} FEM DOFs, then mass-PCA and cubature" if deformable_dofs
                            else "rigid links only (no flexible part)"))


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
