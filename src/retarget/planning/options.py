"""Planner settings: :class:`PlanOptions`, one frozen dataclass with every default in one place."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TypeVar

from retarget.errors import InputError
from retarget.optimize.solver_settings import Method
from retarget.optimize.weights import TrackedBodyWeights, WeightSpec

__all__ = ["METHODS", "REST_AFTER_S", "PlanOptions", "RefineOptions", "Start", "VerifyModel", "band_offloaded"]


#: Default :attr:`PlanOptions.rest_after` [s]: about one period of the single rod's first mode with its tip mass
#: (3.1 Hz), the time a ZVD shaper adds to its motions.
REST_AFTER_S = 0.3


class Start(enum.StrEnum):
    """Where the optimizer starts (:attr:`PlanOptions.start`)."""

    FEASIBLE = "feasible"
    INPUT = "input"


class VerifyModel(enum.StrEnum):
    """The model a plan is verified in (:attr:`PlanOptions.verify_model`), besides a verification model's file."""

    AUTO = "auto"
    FULL = "full"
    NONE = "none"


#: The optimizers' names, for the command line's choices.
METHODS: tuple[str, ...] = tuple(m.value for m in Method)


_Choice = TypeVar("_Choice", bound=enum.StrEnum)


def _choice(kind: type[_Choice], name: str, value: object) -> _Choice:
    """``value`` as a member of ``kind``; an unknown one raises :class:`InputError` naming ``name`` and the choices."""
    try:
        return kind(value)
    except ValueError:
        raise InputError(f"unknown {name} {value!r}: choose {', '.join(m.value for m in kind)}") from None


@dataclass(frozen=True)
class PlanOptions:
    """Planner settings.

    Attributes:
        knot_spacing: B-spline knot spacing [s].
        dt: simulation step [s].
        max_iterations: optimizer iteration limit (L-BFGS-B or Levenberg–Marquardt).
        relative_tolerance: stop when an iteration lowers ``J`` by less than this fraction of ``J(x₀)``. ``J(x₀)`` is
            mostly the naive playback's ringing (and penalties), often 10⁴–10⁵ × the optimum's, so a tolerance of
            1e-6 stopped plans that still gained several per cent per iteration.
        deviation_weight: ``w_dev`` [1/(rad² s)] (number or schedule text/mapping).
        acceleration_weight: ``w_acc`` [s³/rad²].
        velocity_weight: speed-limit penalty weight (see :class:`VelocityPenalty`).
        settle_weight: factor on every tracked body's weights once the input has stopped moving (its ring-out): the
            vibration left after the motion is what the robot shows longest, and ZVD leaves almost none.
        rest_after: the optimized motors come to rest this long [s] after the input stops moving (from the next
            knot on, every motor holds one pose, chosen by the optimizer): a motor that keeps correcting by fractions
            of an encoder tick damps the ringing of the model it was planned on and excites a robot whose
            frequencies differ; at rest, the ring-out left is what the plan leaves robustly. None: only the end of
            the motion is at rest.
        torque_weight: weight of the penalty on simulated motor torques above ``(1 − torque_margin)`` × the
            servos' stall torque (:class:`~retarget.optimize.limits.TorquePenalty`) [1/(N² m² s)]; 0: torques are
            only reported (and warned about above stall). On by default: a plan the servos cannot play is no plan.
        torque_margin: fraction of the stall torque the penalty keeps free, in ``[0, 1)``.
        torque_rounds: when the optimum still asks more than the stall torque, optimize again from it with the
            penalty's weight × 10, at most this many times (a penalty continuation).
        verified_torque_rounds: when the verification model (the full FEM, or an independently trained one) measures
            the optimum above the stall torque although the planning model kept it within, optimize again from it
            with the torque penalty's threshold lowered by the ratio of the two models' peak torques, and verify
            again, at most this many times: the torque that counts is the one the robot needs.
        settle_iterations: steps of the settle refinement after the optimizer (:mod:`retarget.optimize.settle`): a
            minimax linear program on the exact sensitivities of the nominal model and the ``settle_band`` models
            lowers the largest ring-out after the motion without raising any peak deviation or torque; 0: off. It
            runs when the plan has a ring-out to refine (:data:`~retarget.planning.variants.MIN_RING_OUT`), no
            ``window`` and at most :data:`~retarget.optimize.gauss_newton.MAX_PARAMETERS` parameters (a tangent
            pass costs one solve per parameter and step).
        settle_band: stiffness factors of the settle refinement's models besides the nominal one: × 0.9 … × 1.1
            in steps of 0.05 hold the ring-out down across the band, not only at its ends (docs/optimize.md).
        settle_radius: the settle refinement's first trust radius [rad].
        settle_peak_allowance: how far the settle refinement may raise the peak deviation (nominal model, and the
            band's largest), as a factor: the vibration left after the motion is what the robot shows longest.
            Measured on single_rod/step_30_servo (docs/optimize.md): 1 (not raised) leaves 0.40 mm of ring-out
            across the band, 1.2 leaves 0.07 mm at a peak 1.2 × higher.
        duration: simulated time [s]; None: the motion's duration.
        baselines: also simulate the ZV/ZVD baselines (the naive one is the optimizer's first evaluation).
        target_stride: solve the quasi-static targets at every ``target_stride``-th step only and interpolate
            (cubic) in between (1: every step; see :func:`~retarget.optimize.targets.quasi_static_targets`).
        lbfgs_memory: L-BFGS-B correction pairs (``maxcor``). The Gauss-Newton Hessian of two_rods has ~30
            eigenvalues spread over three decades (docs/optimize.md): fewer pairs than that forget curvature the
            solver has already paid simulations for.
        time_budget: wall-time budget of :func:`run_plan` [s] (targets, optimization, baselines, and a reserve for
            the caller's verification at ``verify_dt``); None: no limit.
            The optimizer stops before an evaluation that would not fit (or aborts one that overruns) and returns
            the best point evaluated so far, flagged ``budget_limited``.
        method: ``"lbfgs"`` (L-BFGS-B with the adjoint gradient, the default), ``"descent"`` (projected steepest
            descent with a line search on values alone: L-BFGS-B's first iteration without the gradients at its
            trial points, for budgets of one iteration per window; :func:`~retarget.optimize.lbfgs.optimize`),
            ``"gauss-newton"`` (Levenberg–Marquardt with the exact tangent-linear Jacobian,
            :mod:`retarget.optimize.gauss_newton`) or ``"auto"``: Gauss–Newton up to
            :data:`~retarget.optimize.gauss_newton.MAX_PARAMETERS` parameters. With ``window``, "gauss-newton" and
            "descent" run in each window (on its parameters), anything else L-BFGS-B.
            Measured on two_rods (docs/optimize.md): Gauss–Newton's large steps leave the region the 3-mode
            reduced model represents (inverted cubature elements) and it ends behind L-BFGS-B in the same budget,
            so L-BFGS-B stays the default.
        first_step: length [rad, Euclidean norm over the parameters] of L-BFGS-B's first trial step (and of the
            first one after a restart). None (default): measured — one extra evaluation at a
            :data:`FIRST_STEP_PROBE` step along the projected steepest descent gives the objective's curvature
            there (a gradient difference), and the first step goes to the minimizer of that quadratic, at most
            1 rad. Left to itself, scipy's L-BFGS-B starts with the raw gradient step (every parameter bounded)
            or a unit step, whatever the useful step is, and its line search then backs off one simulation at a
            time.
        window: receding-horizon windows [s] (:func:`optimize_windows`): optimize the parameters whose influence
            begins in each ``window``-long span in turn, each against the tracking up to ``window_tail`` past the
            span, from the states the earlier windows left; ``max_iterations`` and ``relative_tolerance`` apply per
            window. None (default): the whole motion at once (:func:`optimize`).
        window_tail: how far past its span a window's objective reaches [s]: the ringing its profiles cause.
        window_overlap: how much of each span the next window optimizes again [s] (0 ≤ overlap < window): windows
            start every ``window − window_overlap`` seconds, so no window's last parameters are final after its
            few iterations.
        verify_dt: the step at which the caller will re-simulate the naive and optimized profiles afterwards
            (:func:`verify_plan`), or None. With a ``time_budget`` the optimizer keeps time for it: the plan runs
            the naive playback at ``verify_dt`` first (the verification reuses it) and keeps its measured time for
            the optimized run; when that run did not fit, two forward runs at ``verify_dt``, counted as
            ``2 dt / verify_dt`` forward runs at the planning step times
            :data:`~retarget.planning.budget.VERIFY_COST_FACTOR`
            (:func:`~retarget.planning.budget.verification_reserve`). Without a reserve a budget-limited plan used the
            whole budget and its verification then ran past the budget or was skipped.
        start: where the optimizer starts. ``"feasible"`` (default): from the input's fit, except that motors
            faster than their speed limit start from their closest speed-feasible profiles
            (:func:`~retarget.optimize.limits.speed_feasible_parameters`, no simulation): otherwise the speed
            penalty is most of ``J`` and the simulations go to slowing the motors down (the boxer: 23.7 of 23.8).
            The naive baseline still plays the input as authored, and the start is reported as the
            ``speed_limited`` variant. ``"input"``: from the input's fit as it is.
        stiffness_band: stiffness factors of the robust objective's other models: ``J`` is averaged over the nominal
            model and the same model with every flexible part's stiffness times each factor
            (:mod:`retarget.optimize.robust`; one more forward and adjoint run per factor). Empty: the nominal model
            alone. Not with ``window``.
        band: stiffness factors at which the plan's variants are re-simulated and their cut reported beside ZVD's
            (:func:`~retarget.planning.verification.stiffness_band`); empty: none.
        verify_model: ``"full"``: re-simulate naive, ZVD and optimized in the full FEM, a model the optimizer never
            saw (:func:`~retarget.planning.verification.verify_full`), whose cut is the plan's headline; a path to a
            ``.npz``: in that independently trained reduced model of the robot
            (:func:`~retarget.planning.verification.verify_reduced`); ``"auto"``: the full FEM when its estimated
            cost is within ``verify_full_max_s``, else the newest verification model of the robot in the model
            folders' ``verify/`` subfolder, else none; ``"none"``.
        verify_full_dt: the full-FEM verification's step [s].
        verify_full_max_s: the largest estimated cost [s] of an automatic full-FEM verification.
        verify_full_band: Young's-modulus factors at which the full-FEM verification is repeated (e.g. 0.9, 1.1:
            frequencies about ∓5 %); empty: none.
        modes: deformation modes per flexible part of a model trained in-process (a cap). Trained on the naive
            motion, 3 per rod could not represent the optimized two_rods swing (inverted cubature elements); 8 can.
        dt_train: the training simulation's step [s].
        mesh_axial, mesh_around: the training mesh of generated rods (layers, corners around; None: the robot's
            default mesh). The parts' stiffness is calibrated against a mesh-converged reference
            (:mod:`retarget.fem.model_card`), so a coarse training mesh keeps the right frequencies.
        reduced_file: a reduced model to plan with (``retarget reduce`` artifact) instead of finding or training one.
        fallback_models: artifacts to plan with when none is given, cached or found in the model folders, before
            training (the planner node's: the models shipped with retarget, :func:`retarget.sim.reduced.store.
            shipped_candidates`); a stale one is skipped.
        servo_file: a servo file (``retarget fit-servo --out``, :mod:`retarget.model.servo_file`) laid over the
            robot's servos: the plan is made for the servos it names.
        use_cache: read and write the model cache and search the model folders.
        allow_training: train a model in-process when none is given, cached or found (minutes); False: raise
            :class:`~retarget.errors.NotAvailableError` instead.
        allow_unverified_model: plan on a model whose frequencies miss the model card's gate (with a warning)
            instead of raising :class:`~retarget.fem.model_card.ModelFidelityError`.
        weights: tracked-body weight specs (``LINK:pos=W[,ori=W]``, schedules allowed) merged over the robot's.
        bodies: the tracked bodies and weights to use instead of the robot's (None: the robot's, with ``weights``).
        workers: forked worker processes for independent simulations (the robust objective's models, the
            full-FEM verification's variants; :mod:`retarget.optimize.parallel`); None: one per core; 1: none.
    """

    knot_spacing: float = 0.05
    dt: float = 0.005
    max_iterations: int = 50
    relative_tolerance: float = 1e-9
    deviation_weight: WeightSpec = 1e-3
    acceleration_weight: WeightSpec = 1e-8
    velocity_weight: float = 10.0
    settle_weight: float = 1.0
    rest_after: float | None = REST_AFTER_S
    torque_weight: float = 10.0
    torque_margin: float = 0.1
    torque_rounds: int = 2
    verified_torque_rounds: int = 1
    settle_iterations: int = 8
    settle_band: tuple[float, ...] = (0.9, 0.95, 1.05, 1.1)
    settle_radius: float = 0.01
    settle_peak_allowance: float = 1.2
    duration: float | None = None
    baselines: bool = True
    target_stride: int = 1
    lbfgs_memory: int = 50
    time_budget: float | None = None
    method: Method = Method.LBFGS
    first_step: float | None = None
    window: float | None = None
    window_tail: float = 0.5
    window_overlap: float = 0.0
    start: Start = Start.FEASIBLE
    verify_dt: float | None = None
    stiffness_band: tuple[float, ...] = (0.9, 1.1)
    band: tuple[float, ...] = (0.9, 1.1)
    verify_model: VerifyModel | str = VerifyModel.AUTO
    verify_full_dt: float = 0.002
    verify_full_max_s: float = 600.0
    verify_full_band: tuple[float, ...] = ()
    modes: int = 8
    dt_train: float = 2e-3
    mesh_axial: int | None = 20
    mesh_around: int | None = 6
    reduced_file: str | None = None
    fallback_models: tuple[str, ...] = ()
    servo_file: str | None = None
    use_cache: bool = True
    allow_training: bool = True
    allow_unverified_model: bool = False
    weights: tuple[str, ...] = ()
    bodies: tuple[TrackedBodyWeights, ...] | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        """The choices as their enums (a string names one: the command line's, the node parameters', JSON's).

        Raises:
            InputError: an unknown method or start.
        """
        object.__setattr__(self, "method", _choice(Method, "method", self.method))
        object.__setattr__(self, "start", _choice(Start, "start", self.start))
        if self.verify_model in {m.value for m in VerifyModel}:
            object.__setattr__(self, "verify_model", VerifyModel(self.verify_model))

    @property
    def verify_file(self) -> str | None:
        """The verification model's file :attr:`verify_model` names (None: it names a :class:`VerifyModel`)."""
        return None if isinstance(self.verify_model, VerifyModel) else str(self.verify_model)

    def out_of_range(self) -> list[tuple[str, str]]:
        """Each setting outside its range as (field, what it must be and what it is), for the shells to raise in
        their own spelling (``retarget plan``'s ``--flag``, the planner node's parameter)."""
        bad: list[tuple[str, str]] = []
        if not self.dt > 0:
            bad.append(("dt", f"must be positive, got {self.dt}"))
        if self.time_budget is not None and not self.time_budget > 0:
            bad.append(("time_budget", f"must be positive, got {self.time_budget}"))
        if self.settle_iterations < 0:
            bad.append(("settle_iterations", f"must be 0 (off) or more, got {self.settle_iterations}"))
        if not self.settle_peak_allowance >= 1.0:
            bad.append(("settle_peak_allowance", f"must be at least 1 (1: peaks not raised), got "
                                                 f"{self.settle_peak_allowance}"))
        if not self.settle_weight >= 0.0:
            bad.append(("settle_weight", f"must be 0 or more, got {self.settle_weight}"))
        if self.window is not None:
            if not self.window > 0.0:
                bad.append(("window", f"must be positive (or none: the whole motion at once), got {self.window}"))
            if not self.window_tail >= 0.0:
                bad.append(("window_tail", f"must be 0 or more, got {self.window_tail}"))
            if not 0.0 <= self.window_overlap < self.window:
                bad.append(("window_overlap", f"must be at least 0 and less than the window ({self.window:g} s), "
                                              f"got {self.window_overlap}"))
        return bad


def band_offloaded(n_factors: int, verify: bool, workers: int) -> int:
    """How many of the robustness band's ``n_factors`` factors the checks after a plan run in a forked worker
    process (:func:`retarget.planning.verification.check_plan`), beside the rest and the verification at
    ``verify_dt`` (``verify``) in the planning process: about half the work each; none with ``workers`` ≤ 1. It
    shortens the checks' wall time; the budget's reserve (:func:`~retarget.planning.budget.checks_reserve`) does not
    count on it."""
    if workers <= 1 or n_factors == 0:
        return 0
    return (n_factors + 1) // 2 if verify else n_factors // 2


#: What a plan budgeted by an iteration count skips, by the :class:`PlanOptions` field that turns it back on.
ITERATION_BUDGET_SKIPS: dict[str, str] = {
    "settle_iterations": "the settle refinement",
    "verified_torque_rounds": "the re-optimization when the verification model needs more torque than planned "
                              "(and its second verification)",
    "verify_full_band": "the full-FEM verifications at other Young's moduli",
}


def iteration_budgeted(options: PlanOptions,
                       keep: frozenset[str] = frozenset()) -> tuple[PlanOptions, tuple[str, ...]]:
    """The options of a plan budgeted by an iteration count (``retarget plan --max-iterations N``, a ``Retarget``
    goal's ``max_iterations``): the count bounds the optimizer, so the work after it that the count does not bound
    is off — the settle refinement, the verified-torque re-optimization, the full-FEM band — except the fields named
    in ``keep`` (:data:`ITERATION_BUDGET_SKIPS`; the command line keeps what a flag asked for).

    Returns:
        The options, and the fields of what was skipped that would have run (windows run neither the settle
        refinement nor the torque re-optimization; the latter runs only with a torque weight).
    """
    from dataclasses import replace

    whole = options.window is None
    would_run = {"settle_iterations": whole and options.settle_iterations > 0,
                 "verified_torque_rounds": whole and options.verified_torque_rounds > 0 and options.torque_weight > 0,
                 "verify_full_band": bool(options.verify_full_band)}
    off = {"settle_iterations": 0, "verified_torque_rounds": 0, "verify_full_band": ()}
    changed = {name: value for name, value in off.items() if name not in keep}
    return replace(options, **changed), tuple(name for name in changed if would_run[name])


@dataclass(frozen=True)
class RefineOptions:
    """Settings of the learning step and of the take's checks.

    Attributes:
        trust_region_rad: the first trial's trust region: no control point moves by more [rad].
        damping: Levenberg–Marquardt's ``μ`` on ``diag(JᵀJ)`` [-]: damps the directions the take hardly shows.
        shrinks: how many times a step is halved before NEXT is CURRENT (no safe step).
        plateau: a peak that falls by less than this fraction between trials has stopped improving [-].
        max_missing: the largest fraction of missing frames (within the take's span of the plan) [-].
        min_coverage: the take must cover this fraction of the plan's moving span (first motion to settled) [-].
        max_residual_ratio: the largest alignment residual (RMS) over the prediction's travel (RMS about its mean):
            beyond it the take does not follow this plan [-].
        naive_ratio: a take whose alignment residual onto the naive playback's prediction is below this fraction
            of its residual onto CURRENT's is a take of the naive motion [-].
        refit_frequency_tolerance: a measured ring-out frequency this far (relative) from the model's advises a
            re-fit [-].
        fit_tolerance_rad: CURRENT's samples must be reproduced this closely by its parameters [rad].
        motion_start_s: when the plan's motion started, in seconds of the take's clock after its first sample (a
            recording with a clock shared with the robot): the time offset is then this, not searched.
        clock_snap_s: a searched time offset within this of zero is taken as zero: the take's own clock then reads
            as the plan's (a take stamped in the robot's clock, or one started with the motion), within one latency
            of the truth either way [s]; 0: never.
        recorded_start: align a take whose recording stored the plan's start (a bag of ``retarget play --record``)
            on that start, on the clock the robot and the motion capture share: the robot's lag behind its
            commands is then measured and corrected, not taken for a clock offset (False: found from the take).
        robust: stiffness factors of further models whose sensitivities the step is averaged over (empty: the
            nominal model alone).
        refit: re-fit the model's stiffness and servo gain to the take before the step (:func:`refit_model`).
        refit_bounds: the re-fitted factors' range [-].
        refit_gain: the re-fitted model is used when it explains the take by at least this fraction better (RMS) [-].
        refit_simulations: at most this many forward runs for the re-fit.
    """

    trust_region_rad: float = 0.05
    damping: float = 0.1
    shrinks: int = 6
    plateau: float = 0.05
    max_missing: float = 0.2
    min_coverage: float = 0.8
    max_residual_ratio: float = 0.25
    naive_ratio: float = 0.6
    refit_frequency_tolerance: float = 0.1
    fit_tolerance_rad: float = 1e-6
    motion_start_s: float | None = None
    clock_snap_s: float = 0.05
    recorded_start: bool = True
    robust: tuple[float, ...] = ()
    refit: bool = True
    refit_bounds: tuple[float, float] = (0.5, 2.0)
    refit_gain: float = 0.25
    refit_simulations: int = 24

    def out_of_range(self) -> list[tuple[str, str]]:
        """Each setting outside its range as (field, what it must be and what it is)."""
        out = []
        for name in ("trust_region_rad", "fit_tolerance_rad"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                out.append((name, f"must be positive, got {value}"))
        for name in ("max_missing", "plateau", "naive_ratio", "min_coverage"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                out.append((name, f"must lie in [0, 1], got {value}"))
        if not (self.damping >= 0 and math.isfinite(self.damping)):
            out.append(("damping", f"must be 0 or more, got {self.damping}"))
        if not self.max_residual_ratio > 0:
            out.append(("max_residual_ratio", f"must be positive, got {self.max_residual_ratio}"))
        if not (self.clock_snap_s >= 0 and math.isfinite(self.clock_snap_s)):
            out.append(("clock_snap_s", f"must be 0 or more, got {self.clock_snap_s}"))
        low, high = self.refit_bounds
        if not 0 < low <= 1 <= high:
            out.append(("refit_bounds", f"must enclose 1 and be positive, got {self.refit_bounds}"))
        if not 0 <= self.refit_gain < 1:
            out.append(("refit_gain", f"must lie in [0, 1), got {self.refit_gain}"))
        return out
