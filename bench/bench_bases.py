"""Reduced-basis variants against one full test run: does a basis trained on one motion transfer to another?

Issue #4's Run A (single_rod trained on ``step_30``, tested on ``step_45_fast``) fails with the shipped mass-PCA
basis. This bench trains other bases on the same training run and simulates the test motion with each, so the
cause can be told apart from the basis size: mass-PCA (``pca:N``), an oracle PCA that also sees the test run's
snapshots (``oracle:N``: what ``N`` modes can do when the subspace holds the test's shapes), ``N`` PCA modes plus the
modal derivatives of the first ``K`` PCA modes (``md:N:K``) or of the first ``K`` clamped linear modes
(``lmd:N:K``; Barbič and James 2005: ``K₀ ψᵢⱼ = −H(φᵢ, φⱼ)`` with the reference interface held,
``retarget.sim.reduced.basis.modal_derivatives``; appended whole, without the strain-energy drop of
``--modal-derivatives``), and ``N`` PCA modes
plus ``K`` directions of relaxed static shapes whose three leading PCA coordinates are scaled beyond the training
(``comp:N:K:S1,S2[:L]``: elastic energy minimized with the ``L`` (default 3) leading coordinates and the held
interface fixed, reached by continuation; only their part outside the PCA span is added, its leading directions
in the M-norm, or in the K-norm for ``compk``; ``rcomp``/``rcompk``: 30 random coordinate vectors within ± the
largest scale times the training range instead of scaled training snapshots) or those static shapes simply added to
the PCA snapshots (``aug:N:K:S1,S2``, ``K`` leading coordinates scaled). Append ``:exact`` for exact reduced forces
(every element) instead of a cubature trained at ``--cubature-tolerance``.

Per variant: deformation modes, cubature elements, the tracked bodies' RMS / max error against the full test run
(relative to ``--peak``, the full run's peak deviation from the quasi-static targets as ``retarget check reduced``
prints it), the M- and K-norm projection error of the test run's deformation on the basis, and the reduced wall
time. Robots with one deformable part only (the rods).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python bench/bench_bases.py single_rod \\
        single_rod/step_30 single_rod/step_45_fast --mesh-scale 0.05 --peak 0.3472 --cache /tmp/runs \\
        pca:15:exact oracle:15:exact md:15:3:exact

Prints the thread settings, one JSON line per variant and as the last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla


def full_run(system, motors, t_end: float, dt: float, cache: Path | None, key: str):
    """The absolute engine's run, read from / written to ``cache`` when given."""
    from retarget.sim.simulate import simulate

    path = None if cache is None else cache / f"{key}.pkl"
    if path is not None and path.exists():
        with open(path, "rb") as f:
            return pickle.load(f), 0.0
    t0 = time.perf_counter()
    res = simulate(system, motors, t_end, dt)
    wall = time.perf_counter() - t0
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(res, f)
        tmp.replace(path)
    return res, wall


class Variants:
    """Builds the bases of the module doc for the single deformable body of ``system``."""

    def __init__(self, system, train, test) -> None:
        from retarget.sim.reduced.basis import interface_rows
        from retarget.sim.reduced.system import reference_bodies, reference_couplings
        from retarget.sim.reduced.training import _snapshots

        if len(system.deformable) != 1:
            raise SystemExit(f"bench_bases handles robots with one deformable part, got {len(system.deformable)}")
        self.system, self.body = system, system.deformable[0]
        self.ref = reference_bodies(system)[0]
        self.com = system.rigid[self.ref].reference_com
        self.rest_local = self.body.rest_positions - self.com
        self.mass = self.body.mass_matrix
        self.k0 = sp.csc_matrix(self.body.elastic.rest_stiffness)
        slot = system.constraints[reference_couplings(system)[0]].slots[-1]
        self.held = interface_rows(slot.map, slot.nodes, self.body.rest_positions)
        self.n = self.k0.shape[0]
        self.train = self._local(_snapshots([train], 2000))
        self.test = self._local(_snapshots([test], 2000))

    def _local(self, poses_disp):
        from retarget.sim.reduced.system import to_local_displacements

        poses, disp = poses_disp
        r = self.ref
        return to_local_displacements(self.body.rest_positions, self.com, poses[:, r, :3], poses[:, r, 3:], disp)

    def pca(self, snapshots, n_modes: int):
        from retarget.sim.reduced.basis import mass_pca_basis

        return mass_pca_basis(snapshots, self.rest_local, self.mass, n_modes=n_modes, cap=True)

    def modal_derivatives(self, phis):
        from retarget.sim.reduced.basis import modal_derivatives

        return modal_derivatives(self.body.elastic, self.held, np.asarray(phis).T)

    def clamped_linear_modes(self, k: int):
        ns = sla.null_space(self.held)
        _, vec = sla.eigh(ns.T @ (self.k0 @ ns), ns.T @ (self.mass @ ns), subset_by_index=[0, k - 1])
        return ns @ vec

    def relax(self, phi, target_coords, start=None, steps: int = 8, iters: int = 40):
        """Relaxed shape: min E(u) with the held interface fixed and ``φᵀMu = c``, the target reached in ``steps``
        equal increments from ``start`` (rest when None); None when a Newton solve does not converge."""
        from retarget.fem.elastic import InvertedElementError

        g = sp.csr_matrix(np.vstack([self.held, (self.mass @ phi).T]))
        elastic = self.body.elastic
        u = np.zeros(self.n) if start is None else start.copy()
        c0 = phi.T @ (self.mass @ u)
        for s in np.linspace(0.0, 1.0, steps + 1)[1:]:
            target = np.concatenate([np.zeros(6), c0 + s * (target_coords - c0)])
            for _ in range(iters):
                f, kt = elastic.internal_forces_and_stiffness(u)
                a = sp.bmat([[sp.csc_matrix(kt), g.T], [g, None]], format="csc")
                du = spla.spsolve(a, -np.concatenate([f, g @ u - target]))[: self.n]
                step = 1.0
                while step > 1e-3:
                    try:
                        elastic.internal_forces(u + step * du)
                        break
                    except InvertedElementError:
                        step *= 0.5
                u = u + step * du
                if np.linalg.norm(du) < 1e-9 * max(1e-3, np.linalg.norm(u)):
                    break
            else:
                return None
        return u

    def static_shapes(self, phi, scales, count: int = 30, random: bool = False):
        """Relaxed shapes whose coordinates on ``φ`` are scaled training coordinates (``random``: uniformly random
        in ± the largest scale times each coordinate's training range, seed 0). Returns (shapes, failures)."""
        from retarget.sim.reduced.training import _evenly_spaced

        coords = self.train @ (self.mass @ phi)
        out, failed = [], 0
        if random:
            rng = np.random.default_rng(0)
            span = max(scales) * np.max(np.abs(coords), axis=0)
            jobs = [(rng.uniform(-span, span), None) for _ in range(count)]
        else:
            jobs = [(s * coords[k], self.train[k]) for k in _evenly_spaced(len(self.train), count)
                    if np.linalg.norm(coords[k]) > 1e-9 for s in scales]
        for target, start in jobs:
            u = self.relax(phi, target, start)
            if u is None:
                failed += 1
            else:
                out.append(u)
        return np.array(out), failed

    def basis(self, spec: str):
        """``(modes (3N, r), training_norm, notes)`` for one spec of the module doc."""
        from retarget.sim.reduced.basis import _m_orthonormalize

        parts = spec.split(":")
        kind = parts[0]
        args = [p for p in parts[1:] if p != "exact"]
        n_modes = int(args[0])
        notes: dict = {}
        snaps = self.train
        if kind == "oracle":
            snaps = np.vstack([self.train, self.test])
        elif kind == "aug":
            lead = self.pca(self.train, int(args[1])).modes[:, 6:]
            shapes, notes["static_failed"] = self.static_shapes(lead, [float(x) for x in args[2].split(",")])
            snaps = np.vstack([self.train, shapes])
        b = self.pca(snaps, n_modes)
        modes = b.modes
        if kind in ("md", "lmd"):
            k = int(args[1])
            phis = modes[:, 6 : 6 + k] if kind == "md" else self.clamped_linear_modes(k)
            modes = _m_orthonormalize(np.hstack([modes, self.modal_derivatives(list(phis.T))]), self.mass)
        elif kind in ("comp", "compk", "rcomp", "rcompk"):
            lead = self.pca(self.train, int(args[3]) if len(args) > 3 else 3).modes[:, 6:]
            shapes, notes["static_failed"] = self.static_shapes(lead, [float(x) for x in args[2].split(",")],
                                                                random=kind.startswith("r"))
            rest = shapes.T - modes @ (modes.T @ (self.mass @ shapes.T))
            norm = self.k0 if kind.endswith("k") else self.mass
            lam, vec = np.linalg.eigh(rest.T @ (norm @ rest))
            extra = rest @ vec[:, ::-1][:, : int(args[1])]
            modes = _m_orthonormalize(np.hstack([modes, extra]), self.mass)
        elif kind not in ("pca", "oracle", "aug"):
            raise SystemExit(f"unknown variant {spec!r}")
        return modes, b.training_norm, notes

    def projection_error(self, modes) -> tuple[float, float]:
        """Relative M- and K-norm error of the test run's deformation projected on ``modes``."""
        m = self.mass
        d = self.test - (self.test @ (m @ modes[:, :6])) @ modes[:, :6].T
        res = d - (d @ (m @ modes)) @ modes.T

        def norm2(x, a):
            return float(np.sum(x * (a @ x.T).T))

        return (np.sqrt(norm2(res, m) / norm2(d, m)), np.sqrt(norm2(res, self.k0) / norm2(d, self.k0)))

    def cubature(self, modes, exact: bool, tolerance: float):
        from retarget.sim.reduced.cubature import Cubature, _element_rows, train_cubature
        from retarget.sim.reduced.training import _evenly_spaced

        el = self.body.elastic
        if not exact:
            zs = self.train[_evenly_spaced(len(self.train), 60)] @ (self.mass @ modes)
            return train_cubature(el, modes, zs, tolerance=tolerance)
        e = np.arange(len(el.mesh.tets))
        geo = el.geometry
        return Cubature(e, np.ones(len(e)), _element_rows(el.mesh.tets[e], modes), np.ascontiguousarray(geo.grad),
                        np.ascontiguousarray(geo.weights), float(el.mu), float(el.lam), 0.0)


def _windows(full, red, dt: float, width: float = 0.25) -> dict:
    """Per ``width`` window: RMS position error [m] and the x half-range of full and reduced runs [m]."""
    n = min(len(full), len(red))
    full, red = full[:n], red[:n]
    k = max(1, int(round(width / dt)))
    out: dict = {"rms_error_m": [], "x_half_range_full_m": [], "x_half_range_reduced_m": []}
    for a in range(0, n - k + 1, k):
        f, r = full[a : a + k], red[a : a + k]
        out["rms_error_m"].append(float(np.sqrt(np.mean(np.sum((f - r) ** 2, axis=1)))))
        out["x_half_range_full_m"].append(float(np.ptp(f[:, 0]) / 2))
        out["x_half_range_reduced_m"].append(float(np.ptp(r[:, 0]) / 2))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("robot")
    p.add_argument("train_motion")
    p.add_argument("test_motion")
    p.add_argument("variants", nargs="+",
                   help="pca:N, oracle:N, md:N:K, lmd:N:K, comp:N:K:S1,S2[:L], compk, rcomp, rcompk, aug:N:K:S1,S2 "
                        "[:exact]")
    p.add_argument("--mesh-scale", type=float, default=0.05)
    p.add_argument("--dt", type=float, default=1e-3)
    p.add_argument("--cubature-tolerance", type=float, default=1e-4)
    p.add_argument("--peak", type=float, default=None, metavar="M",
                   help="denominator of the relative error [m] (default: the tracked bodies' peak travel)")
    p.add_argument("--cache", type=Path, default=None, help="folder for the two full runs (reused when present)")
    args = p.parse_args()
    threads = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    print(f"threads: {threads}; cpus: {os.cpu_count()}", flush=True)

    from retarget.model import library
    from retarget.sim.motion_input import motors_from_motion
    from retarget.sim.reduced.commands import tracked_links
    from retarget.sim.reduced.store import load_robot_system
    from retarget.sim.reduced.basis import ReducedBasis
    from retarget.sim.reduced.engine import simulate_compiled
    from retarget.sim.reduced.system import build_reduced_system
    from retarget.sim.reduced.training import tracked_distances

    _, model, system = load_robot_system(args.robot, args.mesh_scale)
    tracked = tracked_links(model, system.rigid)
    runs, walls = {}, {}
    for role, name in (("train", args.train_motion), ("test", args.test_motion)):
        motors, t_end = motors_from_motion(library.resolve_motion(name), model.motors)
        key = f"{args.robot}-{name.replace('/', '_')}-mesh{args.mesh_scale:g}-dt{args.dt:g}"
        runs[role], walls[role] = full_run(system, motors, t_end, args.dt, args.cache, key)
        print(f"full {role} run ({name}, {t_end:g} s): {walls[role]:.0f} s", flush=True)
    test_motors, t_test = motors_from_motion(library.resolve_motion(args.test_motion), model.motors)
    travel = max(float(np.max(np.linalg.norm(x - x[0], axis=1)))
                 for x in (runs["test"].body_position(n) for n in tracked))
    peak = args.peak if args.peak else travel
    v = Variants(system, runs["train"], runs["test"])
    rows = []
    for spec in args.variants:
        t0 = time.perf_counter()
        modes, norm, notes = v.basis(spec)
        cub = v.cubature(modes, spec.endswith(":exact"), args.cubature_tolerance)
        basis = ReducedBasis(modes, 6, 1.0, np.zeros(0), 0, norm)
        rs = build_reduced_system(system, [basis], [cub])
        wall_build = time.perf_counter() - t0
        simulate_compiled(rs, test_motors, 2 * args.dt, args.dt)  # compile / load the numba cache
        red = simulate_compiled(rs, test_motors, t_test, args.dt)
        dist = tracked_distances(runs["test"], red, tracked)
        diff = np.concatenate(list(dist.values()))
        rms = float(np.sqrt(np.mean(diff**2)))
        windows = _windows(runs["test"].body_position(tracked[0]), red.body_position(tracked[0]), args.dt)
        proj_m, proj_k = v.projection_error(modes)
        row = {"variant": spec, "deformation_modes": modes.shape[1] - 6, "cubature_elements": int(len(cub.elements)),
               "rms_error_m": rms, "rms_error_rel": rms / peak, "max_error_m": float(np.max(diff)),
               "projection_error_M": proj_m, "projection_error_K": proj_k, "wall_s_build": wall_build,
               "wall_s_reduced": red.wall_s, f"windows_0.25s_{tracked[0]}": windows, **notes}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"robot": args.robot, "train_motion": args.train_motion, "test_motion": args.test_motion,
                      "mesh_scale": args.mesh_scale, "dt": args.dt, "sim_seconds": t_test, "threads": threads,
                      "cubature_tolerance": args.cubature_tolerance, "denominator_m": peak,
                      "denominator": "--peak" if args.peak else "tracked peak travel",
                      "wall_s_full": walls, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
