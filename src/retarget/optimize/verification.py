"""Checking a plan in models it was not optimized on.

A plan's cut measured in the reduced model it was optimized on says little about the robot: the optimizer exploits
that model's exact frequencies. Two checks here measure it elsewhere:

- :func:`verify_full`: the naive, ZVD and optimized motor trajectories re-simulated in the **full FEM** of the
  robot (no reduced basis, no cubature, a finer step) — a model the optimizer never saw. Its flexible parts are the
  training mesh's, whose frequencies the model card (:mod:`retarget.fem.modal`) compares with a mesh-converged
  reference. Affordable for robots of a few thousand deformable DOFs (single_rod, two_rods, fit_rig); the cost is
  estimated first (:func:`full_verification_cost`).
- :func:`stiffness_band`: the same trajectories in the reduced model with every flexible part's stiffness scaled
  (a robot whose parts are a few per cent stiffer or softer, e.g. a material-fit error): the cut across that band,
  beside ZVD's, which is robust by design.

Both measure like the planner: tracked bodies' centres of mass against the input's quasi-static targets (cubic
interpolation of the planner's targets onto the finer grid), plus the peak deviation once the motion has stopped
(``ring_out_peak_m``) and the peak motor torque over stall.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from retarget.optimize.limits import MotorLimits, torque_report
from retarget.optimize.objective import deviation_metrics

if TYPE_CHECKING:  # pragma: no cover
    from retarget.optimize.planner import PlanResult

__all__ = ["VERIFIED_VARIANTS", "full_verification_cost", "scaled_stiffness_model", "stiffness_band",
           "trajectory_metrics", "variant_motors", "verify_full"]

#: The variants re-simulated, in order (those the plan has).
VERIFIED_VARIANTS: tuple[str, ...] = ("naive", "zvd", "optimized")


def variant_motors(times: NDArray[np.float64], angles: NDArray[np.float64]) -> Any:
    """A motor trajectory through a variant's commanded angles on the planning grid (cubic spline, C²)."""
    from retarget.sim.motors import SplineMotors

    return SplineMotors(np.asarray(times, dtype=float), np.asarray(angles, dtype=float))


def trajectory_metrics(times: NDArray[np.float64], positions: NDArray[np.float64], torques: NDArray[np.float64],
                       target_times: NDArray[np.float64], target_positions: NDArray[np.float64], stop_time: float,
                       limits: MotorLimits) -> dict[str, float]:
    """Deviation and torque figures of one simulated run.

    Args:
        times: run sample times [s] (n,).
        positions: tracked centres of mass [m] (n, k, 3).
        torques: motor torques [N m] (n, n_motors).
        target_times, target_positions: the planner's quasi-static targets [s], [m] (n_t,), (n_t, k, 3).
        stop_time: when the input stops moving [s]: the ring-out is measured after it.
        limits: motor limits (stall torques).

    Returns:
        ``peak_deviation_m``, ``rms_deviation_m``, ``ring_out_peak_m`` and ``peak_torque_ratio`` (max over motors
        of peak |τ| / stall).
    """
    from scipy.interpolate import CubicSpline

    t = np.asarray(times, dtype=float)
    keep = t <= float(target_times[-1]) + 1e-9
    t, pos = t[keep], np.asarray(positions)[keep]
    target = CubicSpline(target_times, target_positions, axis=0)(t)
    out = deviation_metrics(pos, target)
    after = t >= stop_time
    dist = np.linalg.norm(pos - target, axis=-1)
    out["ring_out_peak_m"] = float(dist[after].max()) if after.any() else 0.0
    out["peak_torque_ratio"] = float(max(torque_report(t, np.asarray(torques)[keep], limits).ratio))
    return out


def scaled_stiffness_model(model: Any, factor: float) -> Any:
    """``model`` (a :class:`retarget.model.RobotModel`) with every flexible part's Young's modulus × ``factor``."""
    if factor == 1.0:
        return model
    parts = tuple(replace(p, material=replace(p.material, youngs_modulus=p.material.youngs_modulus * factor))
                  for p in model.flexible_parts)
    return replace(model, flexible_parts=parts)


def full_verification_cost(model: Any, duration: float, dt: float, runs: int = 3) -> float:
    """A rough estimate of :func:`verify_full`'s wall time [s] on one core: the full engine's measured cost per step
    grows about linearly with the deformable DOFs (≈ 1.9e-5 s per DOF and step at 2 337 DOFs, 2.3e-5 at 10 575, on a
    shared 2-core machine)."""
    dofs = sum(3 * p.mesh.n_nodes for p in model.flexible_parts)
    return runs * (duration / dt) * 2.2e-5 * max(dofs, 500)


def verify_full(result: PlanResult, model: Any, dt: float, stiffness: float = 1.0,
                variants: Sequence[str] = VERIFIED_VARIANTS,
                progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Re-simulate the plan's variants in the full FEM of ``model`` at step ``dt`` [s].

    Args:
        result: the plan.
        model: the :class:`retarget.model.RobotModel` to simulate in full (the planning model's mesh).
        dt: the full simulation's step [s].
        stiffness: factor on every flexible part's Young's modulus (1: the nominal robot).
        variants: which of the plan's variants to re-simulate (those it has).
        progress: ``progress(stage, step, n_steps)``.

    Returns:
        ``model`` ("full FEM"), ``deformable_dofs``, ``dt_s``, ``stiffness_factor``, one metrics mapping per variant
        (:func:`trajectory_metrics`), ``peak_ratio`` and ``rms_ratio`` (optimized over naive), ``zvd_rms_ratio``
        (optimized over ZVD, when there is one) and ``wall_s``.
    """
    from retarget.optimize.planner import _motion_stop_time
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    started = time.perf_counter()
    pp = result.pp
    system = build_system(scaled_stiffness_model(model, stiffness))
    links = list(pp.problem.tracking.links)
    from retarget.optimize.engines import motor_rows

    rows = motor_rows(system.constraints, system.lambda_offsets, len(system.motors))
    stop = _motion_stop_time(pp.motion)
    duration = float(pp.targets.times[-1])
    out: dict[str, Any] = {"model": "full FEM", "deformable_dofs": int(system.n_deformable_dofs), "dt_s": float(dt),
                           "stiffness_factor": float(stiffness)}
    for name in variants:
        if name not in result.variants:
            continue
        motors = variant_motors(pp.targets.times, result.variants[name].angles)
        cb = None if progress is None else (lambda k, n, s=name: progress(f"full FEM: {s}", k, n))
        run = simulate(system, motors, duration, dt, progress=cb)
        positions = np.stack([run.body_position(link) for link in links], axis=1)
        torques = run.constraint_forces[:, rows]
        out[name] = trajectory_metrics(run.time, positions, torques, pp.targets.times, pp.targets.positions, stop,
                                       pp.limits)
    _ratios(out)
    out["wall_s"] = time.perf_counter() - started
    return out


def stiffness_band(result: PlanResult, factors: Sequence[float], engine_factory: Callable[[float], Any],
                   variants: Sequence[str] = VERIFIED_VARIANTS) -> dict[str, Any]:
    """The plan's variants re-simulated in the planning model with the flexible parts' stiffness scaled.

    Args:
        result: the plan.
        factors: stiffness factors (e.g. 0.9, 1.1: frequencies about ∓5 %).
        engine_factory: ``engine_factory(factor)`` → an engine of the planning model with that stiffness.
        variants: which variants.

    Returns:
        One entry per factor (key ``"x0.9"`` …): metrics per variant, ``peak_ratio``, ``rms_ratio`` and
        ``zvd_rms_ratio``; plus ``worst_peak_ratio`` (the largest optimized/naive peak ratio over the band).
    """
    from retarget.optimize.adjoint import rollout
    from retarget.optimize.planner import _motion_stop_time

    pp = result.pp
    prob = pp.problem
    stop = _motion_stop_time(pp.motion)
    out: dict[str, Any] = {}
    for factor in factors:
        engine = engine_factory(float(factor))
        start = engine.solve_static(pp.fit.profiles.value(0.0))
        entry: dict[str, Any] = {}
        for name in variants:
            if name not in result.variants:
                continue
            motors = variant_motors(pp.targets.times, result.variants[name].angles)
            run = rollout(engine, start, motors, prob.dt, prob.n_steps)
            entry[name] = trajectory_metrics(run.times, prob.poses.positions(run.matrix),
                                             run.matrix[:, engine.motor_torque_index], pp.targets.times,
                                             pp.targets.positions, stop, pp.limits)
        _ratios(entry)
        out[f"x{float(factor):g}"] = entry
    ratios = [e["peak_ratio"] for e in out.values() if isinstance(e, Mapping) and "peak_ratio" in e]
    out["worst_peak_ratio"] = max(ratios) if ratios else None
    return out


def _ratios(entry: dict[str, Any]) -> None:
    """Add optimized-over-naive (and over-ZVD) ratios to a metrics mapping, in place."""
    if "optimized" in entry and "naive" in entry:
        naive, opt = entry["naive"], entry["optimized"]
        entry["peak_ratio"] = opt["peak_deviation_m"] / max(naive["peak_deviation_m"], 1e-300)
        entry["rms_ratio"] = opt["rms_deviation_m"] / max(naive["rms_deviation_m"], 1e-300)
    if "optimized" in entry and "zvd" in entry:
        entry["zvd_rms_ratio"] = entry["optimized"]["rms_deviation_m"] / max(entry["zvd"]["rms_deviation_m"], 1e-300)
        entry["zvd_peak_ratio"] = entry["optimized"]["peak_deviation_m"] / max(entry["zvd"]["peak_deviation_m"], 1e-300)
