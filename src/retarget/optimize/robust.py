"""A robust objective: the tracking objective averaged over models whose flexible parts are stiffer or softer.

A real robot's frequencies differ from its model's by a few per cent (material-fit uncertainty, clamp and servo
compliance, printed-part tolerance). Profiles optimized on one model alone cancel that model's vibration exactly
and leave much of it on a robot a few per cent off. Averaging ``J`` over an ensemble of models — the nominal one
and the same reduced model with every part's stiffness scaled (:func:`retarget.sim.reduced.system.with_stiffness_scale`,
frequencies × √factor) — asks for profiles that keep their cut across that band, as a ZVD shaper does by design:

``J_robust(x) = 1/M Σ_m J_m(x)``, ``∇J_robust = 1/M Σ_m ∇J_m`` (each member's exact adjoint gradient).

Each member tracks the same quasi-static targets (the nominal model's) and starts from its own static equilibrium.
The parameter terms (regularizers, speed penalty) are the same in every member, so the average leaves them as they
are. The cost is one forward and adjoint run per member.

On a robot with a closed kinematic loop driven near one of its change points, a softer or stiffer model can
assemble on the loop's other branch (its playback then tracks tens of times worse than the nominal model's); no motor
profile brings it back, and its tracking term would steer the average.
:func:`without_other_branches` leaves such members out before the optimization.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.adjoint import AdjointProblem, Evaluation, evaluate
from retarget.optimize.limits import TorquePenalty
from retarget.optimize.parallel import fork_pool, run_shared

__all__ = ["BRANCH_RATIO", "Ensemble", "evaluate_ensemble", "without_other_branches"]

#: A member whose tracking term at the start is above this many times the nominal model's is taken to track on
#: another assembly branch of a closed loop (the rapper's ×0.9 model: 30 ×; its ×1.1 model: 1.4 ×).
BRANCH_RATIO: float = 10.0


@dataclass(frozen=True, eq=False)
class Ensemble:
    """The nominal problem and its stiffness-scaled members.

    Attributes:
        nominal: the problem on the nominal model (its rollout is the one reported).
        members: the problems on the scaled models (same parameters, targets and terms).
        factors: the members' stiffness factors, in order.
        pool: ``(executor, key)`` of :func:`retarget.optimize.parallel.fork_pool` over ``members`` (forked workers
            that evaluate the members while this process evaluates the nominal model), or None: all in-process.
    """

    nominal: AdjointProblem
    members: tuple[AdjointProblem, ...] = ()
    factors: tuple[float, ...] = ()
    pool: tuple[Executor, int] | None = None

    @property
    def size(self) -> int:
        """Models averaged (1 + members)."""
        return 1 + len(self.members)


def evaluate_ensemble(ensemble: Ensemble, x: NDArray[np.float64], gradient: bool = True,
                      progress: Callable[[int, int], None] | None = None) -> Evaluation:
    """``J`` averaged over the ensemble's models at ``x`` (and its gradient).

    The returned evaluation carries the nominal model's rollout and tracked positions; ``parts`` gains
    ``tracking_nominal`` and one ``tracking_x<factor>`` per member.

    Raises:
        whatever a member's simulation raises (e.g. :class:`~retarget.sim.errors.SimulationError`).
    """
    if not ensemble.members:
        return evaluate(ensemble.nominal, x, gradient=gradient, progress=progress)
    problems: Sequence[AdjointProblem] = (ensemble.nominal, *ensemble.members)
    m = len(problems)
    steps = 2 * ensemble.nominal.n_steps if gradient else ensemble.nominal.n_steps

    def member_progress(i: int) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda k, _n: progress(i * steps + k, m * steps)

    if ensemble.pool is not None:
        executor, key = ensemble.pool
        futures = [executor.submit(run_shared, key, partial(_member_job, index=i, x=np.asarray(x, dtype=float),
                                                            gradient=gradient, torque_penalty=member.torque_penalty))
                   for i, member in enumerate(ensemble.members)]
        # The members run alongside the nominal model: its steps are the evaluation's progress.
        first = evaluate(ensemble.nominal, x, gradient=gradient, progress=progress)
        evals = [first, *(_Member(*f.result()) for f in futures)]
    else:
        evals = [evaluate(p, x, gradient=gradient, progress=member_progress(i)) for i, p in enumerate(problems)]
    nominal = evals[0]
    parts = {key: float(np.mean([e.parts.get(key, 0.0) for e in evals])) for key in nominal.parts}
    parts["tracking_nominal"] = nominal.tracking
    for factor, e in zip(ensemble.factors, evals[1:]):
        parts[f"tracking_x{factor:g}"] = e.tracking
    grad = None
    if gradient:
        grads = [e.gradient for e in evals]
        assert all(g is not None for g in grads)
        grad = np.mean(np.stack(grads), axis=0)  # type: ignore[arg-type]
    return Evaluation(value=float(np.mean([e.value for e in evals])),
                      tracking=float(np.mean([e.tracking for e in evals])), parts=parts, gradient=grad,
                      rollout=nominal.rollout, positions=nominal.positions)


@dataclass(frozen=True)
class _Member:
    """A member's evaluation as it comes back from a worker (no rollout)."""

    value: float
    tracking: float
    parts: dict[str, float]
    gradient: NDArray[np.float64] | None


def _member_job(members: Sequence[AdjointProblem], index: int, x: NDArray[np.float64], gradient: bool,
                torque_penalty: TorquePenalty | None
                ) -> tuple[float, float, dict[str, float], NDArray[np.float64] | None]:
    """In a worker: member ``index``'s ``J`` (and gradient) at ``x``, with the parent's current torque penalty."""
    ev = evaluate(forked_member(members, index, torque_penalty), x, gradient=gradient)
    return ev.value, ev.tracking, dict(ev.parts), ev.gradient


def forked_member(members: Sequence[AdjointProblem], index: int,
                  torque_penalty: TorquePenalty | None) -> AdjointProblem:
    """In a worker: member ``index`` as forked, with the parent's current torque penalty (the continuation raises
    its weight after the fork)."""
    return replace(members[index], torque_penalty=torque_penalty)


def without_other_branches(ensemble: Ensemble, x: NDArray[np.float64], workers: int,
                           progress: Callable[[int, int], None] | None = None) -> tuple[Ensemble, list[str]]:
    """The ensemble without the members whose tracking term at ``x`` is above :data:`BRANCH_RATIO` × the nominal
    model's (module docstring), and one warning per member left out. One forward run of every model (the members in
    ``workers`` forked processes).
    """
    if not ensemble.members:
        return ensemble, []
    with fork_pool(ensemble.members, workers) as pool:
        ev = evaluate_ensemble(replace(ensemble, pool=pool), x, gradient=False, progress=progress)
    nominal = ev.parts["tracking_nominal"]
    kept: list[tuple[float, AdjointProblem]] = []
    warnings: list[str] = []
    for factor, member in zip(ensemble.factors, ensemble.members):
        tracking = ev.parts[f"tracking_x{factor:g}"]
        if tracking > BRANCH_RATIO * nominal:
            warnings.append(f"robust objective: the ×{factor:g} stiffness model tracks {tracking / nominal:.0f} × "
                            f"worse than the nominal model at the start (tracking {tracking:.3g} vs {nominal:.3g}): "
                            "it assembles the loop on another branch, which no motor profile undoes; the "
                            "objective averages the other models without it (the band still reports it)")
        else:
            kept.append((factor, member))
    return replace(ensemble, members=tuple(m for _, m in kept), factors=tuple(f for f, _ in kept)), warnings
