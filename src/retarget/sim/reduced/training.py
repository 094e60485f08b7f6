"""From full simulations to a reduced system, reduced simulation runs, and the reduced-vs-full comparison.

Training: the absolute engine's displacements of each deformable body are moved into its reference body's frame
(:func:`~retarget.sim.reduced.system.to_local_displacements`), mass-PCA gives the basis, the snapshots projected on
it train the cubature.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from retarget.sim.reduced.basis import (
    DEFAULT_VARIANCE,
    PcaSpectrum,
    ReducedBasis,
    _largest_deformation,
    interface_modes,
    interface_rows,
    mass_pca_basis,
    mass_pca_spectrum,
    with_modal_derivatives,
)
from retarget.sim.reduced.cubature import Cubature, train_cubature
from retarget.sim.reduced.defaults import DEFAULT_CUBATURE_TOLERANCE, DEFAULT_REPLAY_TOLERANCE, MIN_CUBATURE_TOLERANCE
from retarget.sim.reduced.stepper import ReducedState, solve_static, step
from retarget.sim.reduced.system import (
    ReducedSystem,
    build_reduced_system,
    loop_couplings,
    reference_bodies,
    reference_couplings,
    to_local_displacements,
)
from retarget.sim.system import System

__all__ = ["DEFAULT_CUBATURE_TOLERANCE", "MIN_CUBATURE_TOLERANCE", "TRAINING_RANGE_WARN", "ReducedResult",
           "ReplayCheck", "build_checked_by_replay", "build_from_result", "compare_tracked", "simulate_reduced",
           "tracked_distances", "training_range", "training_range_warning"]


#: A part deforming more than this multiple of its largest training deformation is reported as extrapolating.
#: The single rod trained on step_30 followed step_45_fast within 6 mm while its deformation stayed ≤ 0.98 × the
#: training's largest, and drifted to 0.3 m RMS once a return beyond the servo's speed whipped it to 2.3–2.7 ×
#: (docs/reduced-acceptance.md "Beyond the training range").
TRAINING_RANGE_WARN: float = 1.25


def _evenly_spaced(n: int, most: int) -> NDArray[np.int64]:
    """At most ``most`` evenly spaced indices of ``range(n)``, first and last included."""
    return np.unique(np.linspace(0, n - 1, min(n, most)).round().astype(np.int64))


def _runs(result: object) -> list[object]:
    """``result`` as a list of training runs (one result or a sequence of them)."""
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _snapshots(results: list[object], most: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Rigid poses and displacements of at most ``most`` snapshots, evenly spaced within each run and shared among
    the runs in proportion to their lengths, stacked."""
    counts = [len(r.rigid_poses) for r in results]  # type: ignore[attr-defined]
    total = sum(counts)
    poses, disp = [], []
    for r, n in zip(results, counts):
        keep = _evenly_spaced(n, max(2, round(most * n / total)))
        poses.append(np.asarray(r.rigid_poses)[keep])  # type: ignore[attr-defined]
        disp.append(np.asarray(np.asarray(r.displacements)[keep], dtype=float))  # type: ignore[attr-defined]
    return np.concatenate(poses), np.concatenate(disp)


def build_from_result(
    system: System,
    result: object,
    n_modes: int | None = None,
    variance: float = DEFAULT_VARIANCE,
    cubature_tolerance: float = DEFAULT_CUBATURE_TOLERANCE,
    cubature_samples: int = 60,
    max_snapshots: int = 2000,
    bases: list[ReducedBasis] | None = None,
    modal_derivatives: int = 0,
    cubature_points: bool = False,
    pca: dict[int, tuple[NDArray[np.float64], PcaSpectrum]] | None = None,
) -> tuple[ReducedSystem, list[ReducedBasis], list[Cubature]]:
    """Train bases and cubatures on a :class:`retarget.sim.result.SimulationResult` of ``system``.

    A body whose couplings close a loop (:func:`~retarget.sim.reduced.system.loop_couplings`) gets 6 interface
    modes per such coupling before its PCA modes (:func:`~retarget.sim.reduced.basis.interface_modes`).

    Args:
        system: the absolute system.
        result: its simulation, or a list of simulations of several training motions (stored samples are
            snapshots; at most ``max_snapshots`` evenly spaced ones are used, shared in proportion to the runs'
            lengths).
        n_modes: at most this many PCA deformation modes per body (fewer when the snapshots support fewer; None:
            by ``variance``), after the interface modes of a loop coupling.
        variance: captured mass-weighted variance when ``n_modes`` is None.
        cubature_tolerance: relative training error of the cubature.
        cubature_samples: evenly spaced snapshots used to train the cubature.
        max_snapshots: cap on the PCA snapshots (the method of snapshots solves an s × s eigenproblem: 10 s of
            the drummer stored every 1 ms would be four 10 000² problems).
        bases: bases built before from the same snapshots: kept, and only the cubatures trained (no PCA, no
            interface modes; ``n_modes``, ``variance`` and ``modal_derivatives`` are then unused).
        modal_derivatives: append the modal derivatives of each body's first this many PCA modes (k(k+1)/2 more
            modes; :func:`~retarget.sim.reduced.basis.with_modal_derivatives`), with the reference and loop
            interfaces held. 0: none.
        cubature_points: train per-point cubatures (single quadrature points of elements, :func:`train_cubature`
            ``per_point``) instead of whole elements.
        pca: per deformable body, its local snapshots and their mass-PCA spectrum (:func:`mass_pca_spectrum`): taken
            from here when there, else computed and put here, so that calls on the same ``result`` and
            ``max_snapshots`` with other mode counts solve each body's eigenproblem once
            (:func:`build_checked_by_replay`'s trials). None: computed every call.
    """
    refs = reference_bodies(system)
    held, loops = reference_couplings(system), loop_couplings(system)
    poses, disp = _snapshots(_runs(result), max_snapshots)
    pick = _evenly_spaced(len(poses), cubature_samples)  # the cubature's samples among the snapshots
    off = 0
    built, cubatures = [], []
    for d, body in enumerate(system.deformable):
        r = refs[d]
        dofs = slice(off, off + body.n_dofs)
        off += body.n_dofs

        def local(rows: slice | NDArray[np.int64]) -> NDArray[np.float64]:
            return to_local_displacements(body.rest_positions, system.rigid[r].reference_com, poses[rows, r, :3],
                                          poses[rows, r, 3:], disp[rows, dofs])

        if bases is not None:
            basis = bases[d]
            samples = local(pick)
        else:
            slots = [system.constraints[e].slots[-1] for e in [held[d], *loops[d]]]
            rows = [interface_rows(sl.map, sl.nodes, body.rest_positions) for sl in slots]
            rest_local = body.rest_positions - system.rigid[r].reference_com
            if pca is not None and d in pca:
                snapshots, spectrum = pca[d]
            else:
                snapshots = local(slice(None))
                extra = interface_modes(body.elastic.rest_stiffness, rows[0], rows[1:]) if loops[d] else None
                spectrum = mass_pca_spectrum(snapshots, rest_local, body.mass_matrix, extra)
                if pca is not None:
                    pca[d] = (snapshots, spectrum)
            basis = mass_pca_basis(snapshots, rest_local, body.mass_matrix, n_modes=n_modes, variance=variance,
                                   cap=True, spectrum=spectrum)
            if modal_derivatives > 0:
                basis = with_modal_derivatives(basis, body.elastic, np.vstack(rows), modal_derivatives,
                                               body.mass_matrix)
                basis = replace(basis, training_norm=_largest_deformation(snapshots, body.mass_matrix, basis.modes))
            samples = snapshots[pick]
        # Only the cubature's samples are projected (mass_pca_basis projected all of them for its training range).
        zs = samples @ (body.mass_matrix @ basis.modes)
        cubatures.append(train_cubature(body.elastic, basis.modes, zs, tolerance=cubature_tolerance,
                                        per_point=cubature_points))
        built.append(basis)
    return build_reduced_system(system, built, cubatures), built, cubatures


@dataclass(frozen=True)
class ReplayCheck:
    """One trial of :func:`build_checked_by_replay`.

    Attributes:
        variance: the variance criterion tried (None: the modes were capped by ``n_modes``). modes: PCA modes per
        component. error_rel: RMS tracked-body error
        of the replay relative to the peak travel (inf: the replay failed); with several training motions the
        largest of theirs. error_m: that RMS [m]. message: why a replay failed ("" when it ran). kept: this
        trial's model is the one returned. cubature_tolerance: the cubature's training tolerance in this trial.
        errors_rel: each training motion's ``error_rel``, in order.
    """

    variance: float | None
    modes: tuple[int, ...]
    error_rel: float
    error_m: float
    message: str = ""
    kept: bool = False
    cubature_tolerance: float = DEFAULT_CUBATURE_TOLERANCE
    errors_rel: tuple[float, ...] = ()


def _replay_errors(
    rs: ReducedSystem,
    runs: list[object],
    drives: list[object],
    durations: list[float],
    travels: list[float],
    tracked: list[str],
    dt: float,
) -> tuple[list[float], list[float], str]:
    """Replay every training motion with the reduced system ``rs``: per run the tracked RMS error relative to the
    peak travel and in metres (inf where the replay failed), and the first failure's message ("" if none)."""
    from retarget.sim.errors import SimulationError
    from retarget.sim.reduced.engine import simulate_compiled

    errors: list[float] = []
    rms_m: list[float] = []
    message = ""
    for full, drive, duration, span in zip(runs, drives, durations, travels):
        try:
            replay = simulate_compiled(rs, drive, duration, dt)
            diff = np.concatenate(list(tracked_distances(full, replay, tracked).values()))
            rms = float(np.sqrt(np.mean(diff**2)))
            errors.append(rms / span if span > 0 else 0.0)
            rms_m.append(rms)
        except SimulationError as exc:
            errors.append(float("inf"))
            rms_m.append(float("inf"))
            message = message or str(exc)
    return errors, rms_m, message


def _trial_line(trial: ReplayCheck, chosen: str, cubatures: list[Cubature], travel: float, per_motion: bool) -> str:
    """The log line of one replay trial (``chosen``: how its modes were chosen; ``travel``: the worst run's peak
    travel [m])."""
    each = (" (per motion " + ", ".join(f"{100 * e:.3g} %" for e in trial.errors_rel) + ")") if per_motion else ""
    return (f"replay check: {chosen}, PCA modes {list(trial.modes)}, cubature tolerance {trial.cubature_tolerance:.3g} "
            f"(elements {[len(cub.elements) for cub in cubatures]}): tracked RMS error "
            f"{100 * trial.error_rel:.3g} % of the peak travel ({travel:.3g} m){each}"
            + (f" ({trial.message})" if trial.message else ""))


def build_checked_by_replay(
    system: System,
    result: object,
    motors: object,
    dt: float,
    tracked: list[str],
    variance: float = DEFAULT_VARIANCE,
    tolerance: float = DEFAULT_REPLAY_TOLERANCE,
    max_tightenings: int = 8,
    log: Callable[[str], None] | None = None,
    cubature_tolerance: float = DEFAULT_CUBATURE_TOLERANCE,
    modal_derivatives: int = 0,
    cubature_points: bool = False,
    n_modes: int | None = None,
    max_trials: int | None = None,
) -> tuple[ReducedSystem, list[ReducedBasis], list[Cubature], list[ReplayCheck]]:
    """Bases chosen by variance, tightened until the reduced model replays its own training motion (each of them).

    Mass-weighted variance alone can miss modes that carry little motion but matter to the dynamics (the single
    rod at 99.99 % keeps 2 modes and replays its own 30° step with a 22 % tip error; 4 modes: 0.26 %). So the
    training motion is simulated with the reduced model (compiled engine, same ``dt``) and the tracked bodies
    compared with the full run; while the RMS error exceeds ``tolerance`` × the tracked bodies' peak travel, the
    uncaptured variance is divided by 10 (more modes where the snapshots support them) and the model rebuilt; once
    every component has all the modes its snapshots support (or after ``max_tightenings``), the cubature's training
    tolerance is divided by 10 instead (more elements), down to :data:`MIN_CUBATURE_TOLERANCE`. The first model
    within tolerance is returned, else the most accurate one tried. With ``n_modes`` the mode count is fixed and
    only the cubature is tightened (the single rod's 15 modes at the default cubature tolerance transfer to a 20°
    step with 0.046 of its peak deviation, at 1e-6 with 0.0022: docs/reduced.md "Replay check"). A replay says nothing
    about motions larger than the training one (the rod's 4 modes fail a 45° step, docs/reduced.md "Replay check";
    :func:`training_range`).

    Args:
        system, result: the absolute system and its full training run (every step stored), or a list of runs of
            several training motions (the bases and cubature see all of them; each is replayed, the worst counts).
        motors: the training motors (a list, one per run, with several runs). dt: the training step [s].
        tracked: rigid bodies compared.
        variance: the starting variance criterion. tolerance: relative RMS error accepted.
        max_tightenings: at most this many tenfold tightenings of the variance.
        log: receives one line per trial.
        cubature_tolerance: the cubature training tolerance while the variance is tightened.
        modal_derivatives: as :func:`build_from_result` (every trial's bases get them).
        cubature_points: as :func:`build_from_result`.
        n_modes: at most this many PCA modes per body, as :func:`build_from_result` (``variance`` is then unused).
        max_trials: at most this many models built and replayed (None: until the variance and the cubature
            tolerance are exhausted); when the last one is still off, the most accurate is returned and ``log`` says
            that the check did not pass.

    Returns:
        The reduced system, bases, cubatures, and every trial (the returned model's marked ``kept``).
    """
    runs = _runs(result)
    drives = list(motors) if isinstance(motors, (list, tuple)) else [motors]
    if len(drives) != len(runs):
        raise ValueError(f"{len(runs)} training runs but {len(drives)} motor trajectories")
    travels = [max(float(np.max(np.linalg.norm(x - x[0], axis=1)))
                   for x in (run.body_position(n) for n in tracked)) for run in runs]  # type: ignore[attr-defined]
    durations = [float(run.time[-1] - run.time[0]) for run in runs]  # type: ignore[attr-defined]
    trials: list[ReplayCheck] = []
    best: tuple[int, tuple] | None = None  # (index in trials, model)
    v = float(variance)
    c = float(cubature_tolerance)
    tightenings = 0
    kept_bases = None  # the cubature phase keeps the last bases: only the cubature is retrained
    pca: dict[int, tuple[NDArray[np.float64], PcaSpectrum]] = {}  # every trial's snapshots and spectra
    while True:
        built = build_from_result(system, runs, n_modes=n_modes, variance=v, cubature_tolerance=c, bases=kept_bases,
                                  modal_derivatives=modal_derivatives, cubature_points=cubature_points, pca=pca)
        modes = tuple(b.n_pca for b in built[1])
        if not trials or (modes, c) != (trials[-1].modes, trials[-1].cubature_tolerance):
            errors, rms_m, message = _replay_errors(built[0], runs, drives, durations, travels, tracked, dt)
            worst = int(np.argmax(errors))
            trial = ReplayCheck(None if n_modes is not None else v, modes, errors[worst], rms_m[worst], message,
                                cubature_tolerance=c, errors_rel=tuple(errors))
            trials.append(trial)
            if log is not None:
                chosen = f"at most {n_modes} modes" if n_modes is not None else f"variance {v:.12g}"
                log(_trial_line(trial, chosen, built[2], travels[worst], len(runs) > 1))
            if best is None or trial.error_rel < trials[best[0]].error_rel:
                best = (len(trials) - 1, built)
            if trial.error_rel <= tolerance:
                break
            if max_trials is not None and len(trials) >= max_trials:
                if log is not None:
                    kept = trials[best[0]] if best is not None else trial
                    log(f"replay check: not within {100 * tolerance:.3g} % after {len(trials)} trials (the bound): "
                        f"keeping the most accurate model, {100 * kept.error_rel:.3g} % of the peak travel")
                break
        all_modes = n_modes is not None or v >= 1.0 or all(b.n_pca >= len(b.spectrum) for b in built[1])
        if not all_modes and tightenings < max_tightenings:
            v = 1.0 - float(f"{(1.0 - v) / 10.0:.6g}")  # 0.9999 → 0.99999 …, without accumulating round-off
            tightenings += 1
        elif c > MIN_CUBATURE_TOLERANCE:
            c = max(MIN_CUBATURE_TOLERANCE, float(f"{c / 10.0:.6g}"))  # then the cubature, with the last basis
            kept_bases = built[1]
        else:
            break
    assert best is not None
    # The first trial within tolerance is also the most accurate so far (every earlier one was above it).
    trials[best[0]] = replace(trials[best[0]], kept=True)
    return (*best[1], trials)


@dataclass(frozen=True, eq=False)
class ReducedResult:
    """Stored samples of a reduced simulation.

    Attributes:
        system: the reduced system.
        time: (n,) [s].
        rigid_poses: (n, b, 7) centre of mass [m] and unit quaternion of each rigid body.
        coordinates: (n, Σr) reduced coordinates z.
        constraint_forces: (n, m) [N] / [N m].
        newton_iterations: (n,).
        factorizations: number of Jacobian factorizations in the run.
    """

    system: ReducedSystem
    time: NDArray[np.float64]
    rigid_poses: NDArray[np.float64]
    coordinates: NDArray[np.float64]
    constraint_forces: NDArray[np.float64]
    newton_iterations: NDArray[np.int64]
    factorizations: int

    def body_position(self, name: str) -> NDArray[np.float64]:
        """Centre of mass of rigid body ``name`` over time (n, 3) [m]."""
        return self.rigid_poses[:, self.system.rigid_index(name), :3].copy()


def simulate_reduced(
    rs: ReducedSystem,
    motors: object,
    duration: float,
    dt: float,
    store_every: int = 1,
    start: ReducedState | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReducedResult:
    """BDF1 then BDF2 from the quasi-static equilibrium at ``θ(0)`` (or ``start``) for ``duration`` [s]."""
    n_steps = int(round(duration / dt))
    state = start if start is not None else solve_static(rs, motors.value(0.0))  # type: ignore[attr-defined]
    nb = rs.n_rigid
    n_store = n_steps // store_every + 1
    time = np.zeros(n_store)
    poses = np.zeros((n_store, nb, 7))
    nz = rs.n_z
    coords = np.zeros((n_store, nz))
    lam = np.zeros((n_store, rs.n_lambda))
    iters = np.zeros(n_store, dtype=np.int64)

    def store(j: int, st: ReducedState, it: int) -> None:
        time[j] = st.t
        poses[j] = st.u[: 7 * nb].reshape(nb, 7)
        poses[j, :, 3:] /= np.linalg.norm(poses[j, :, 3:], axis=1, keepdims=True)
        coords[j] = st.u[7 * nb : 7 * nb + nz]
        lam[j] = st.lam
        iters[j] = it

    store(0, state, 0)
    prev2: ReducedState | None = None
    prev = state
    cache: dict = {}
    for k in range(1, n_steps + 1):
        new, it = step(rs, prev, prev2, dt, motors, cache, k)
        prev2, prev = prev, new
        if k % store_every == 0:
            store(k // store_every, new, it)
        if progress is not None:
            progress(k, n_steps)
    return ReducedResult(rs, time, poses, coords, lam, iters, int(cache.get("factorizations", 0)))


def tracked_distances(full: object, reduced: object, names: list[str]) -> dict[str, NDArray[np.float64]]:
    """``|x_reduced − x_full|`` [m] of each tracked rigid body on the samples both runs have.

    Both runs must store every step from the same start at the same step (the reduced run's time grid a prefix of
    the full one's or the other way round).

    Raises:
        ValueError: the time grids differ.
    """
    tf = np.asarray(full.time, dtype=float)  # type: ignore[attr-defined]
    tr = np.asarray(reduced.time, dtype=float)  # type: ignore[attr-defined]
    n = min(len(tf), len(tr))
    if not np.allclose(tf[:n], tr[:n], rtol=0.0, atol=1e-9):
        raise ValueError("the reduced and full runs have different time grids (other step or start)")
    return {name: np.linalg.norm(reduced.body_position(name)[:n] - full.body_position(name)[:n], axis=1)  # type: ignore[attr-defined]
            for name in names}


def compare_tracked(
    full: object, reduced: object, tracked: list[str], targets: dict[str, NDArray[np.float64]]
) -> dict[str, object]:
    """Reduced-vs-full errors of tracked bodies on common samples (:func:`tracked_distances`).

    ``tracked_rms_error_rel`` = RMS over time and bodies of ``|x_red − x_full|``, divided by the peak over time and
    bodies of the full simulation's deviation from the quasi-static targets ``targets[name]`` (n, 3); ``tracked``
    has the RMS / max error and the peak deviation of each body.
    """
    dist = tracked_distances(full, reduced, tracked)
    devs = {name: np.linalg.norm(full.body_position(name)[: len(d)] - targets[name][: len(d)], axis=1)  # type: ignore[attr-defined]
            for name, d in dist.items()}
    diff = np.concatenate(list(dist.values()))
    peak = float(max(np.max(v) for v in devs.values()))
    rms = float(np.sqrt(np.mean(diff**2)))
    return {
        "tracked_rms_error_rel": rms / peak if peak > 0 else float("inf"),
        "tracked_rms_error_m": rms,
        "tracked_max_error_m": float(np.max(diff)),
        "peak_deviation_m": peak,
        "tracked": {name: {"rms_error_m": float(np.sqrt(np.mean(d**2))), "max_error_m": float(np.max(d)),
                           "peak_deviation_m": float(np.max(devs[name]))} for name, d in dist.items()},
    }


def training_range(rs: ReducedSystem, coordinates: NDArray[np.float64]) -> dict[str, float]:
    """Largest deformation of each part in a reduced run, as a multiple of its largest training deformation.

    ``max_t ‖z_def(t)‖ / training_norm`` per part (the bases are mass-orthonormal, so this is the ratio of the
    deformations' M-norms); parts whose basis does not record its training range (older artifacts, modal bases) are
    left out. Above about :data:`TRAINING_RANGE_WARN` the run leaves the deformations the basis and cubature were
    trained on, and the accuracy measured on the training motion no longer says anything about it.

    Args:
        rs: the reduced system. coordinates: ``z`` of every part over time (n, Σr), as ``CompiledRun.coordinates``.
    """
    z = np.asarray(coordinates, dtype=float)
    out: dict[str, float] = {}
    off = 0
    for body in rs.bodies:
        b = body.basis
        if b.training_norm > 0.0:
            norms = np.linalg.norm(z[:, off + b.n_rigid : off + b.size], axis=1)
            out[body.name] = float(np.max(norms)) / b.training_norm if len(norms) else 0.0
        off += b.size
    return out


def training_range_warning(ratios: dict[str, float], limit: float = TRAINING_RANGE_WARN) -> str | None:
    """A one-line warning naming the parts beyond ``limit`` × their training range, or None."""
    beyond = {name: r for name, r in ratios.items() if r > limit}
    if not beyond:
        return None
    parts = ", ".join(f"{name} {r:.2f}x" for name, r in beyond.items())
    return (f"the motion deforms {parts} its largest training deformation: the reduced model extrapolates there "
            f"and its accuracy is unknown; train it on a motion that covers this one (retarget reduce --train-motion)")
