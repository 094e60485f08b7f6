"""Tests of the compiled reduced engine (retarget.sim.reduced.compiled / .engine / .kernels).

The dense reference stepper (retarget.sim.reduced.stepper) is the oracle: the compiled residual, exact Jacobian,
∂R/∂θ̇ and generalized mass equal it to round-off on a rod closing a loop between two motors (couplings to the
reference and to a non-reference body, motorized hinges); ∂R/∂θ and the Jacobian are also checked against
finite differences; the compiled time loop reproduces the reference stepper's states to Newton tolerance; the
condensed transposed solve is the exact ``J⁻ᵀ``.
"""
from __future__ import annotations

import numpy as np
import pytest

from retarget.sim.bdf import StepInputs
from retarget.sim.constraints import JointConstraint
from retarget.sim.motors import FunctionMotors
from retarget.sim.reduced import compiled as ck
from retarget.sim.reduced.basis import ReducedBasis, rigid_modes
from retarget.sim.reduced.cubature import Cubature, _element_rows
from retarget.sim.reduced.engine import CompiledReducedEngine, pack_system, residual_compiled, simulate_compiled
from retarget.sim.reduced.stepper import residual_and_jacobian, solve_static, step
from retarget.sim.reduced.system import build_reduced_system, reference_bodies
from retarget.sim.scenarios import build_two_motor_rod
from retarget.sim.system import build_system


@pytest.fixture(scope="module")
def absolute():
    return build_system(build_two_motor_rod(length=0.3, diameter=0.004, separation=0.3, n_axial=4, n_around=6))


def _all_elements(elastic, basis) -> Cubature:
    g = elastic.geometry
    e = np.arange(elastic.mesh.n_tets)
    return Cubature(e, np.ones(len(e)), _element_rows(elastic.mesh.tets, basis), g.grad, g.weights, elastic.mu, elastic.lam, 0.0)


@pytest.fixture(scope="module")
def random_reduced(absolute):
    """6 rigid + 4 random modes (a non-physical basis: exercises every term with generic values)."""
    body = absolute.deformable[0]
    local = body.rest_positions - absolute.rigid[reference_bodies(absolute)[0]].reference_com
    extra = np.random.default_rng(0).normal(size=(body.n_dofs, 4)) * 1e-2
    modes = np.hstack([rigid_modes(local, body.mass_matrix), extra])
    return build_reduced_system(absolute, [ReducedBasis(modes, 6, 1.0, np.zeros(4))], [_all_elements(body.elastic, modes)])


@pytest.fixture(scope="module")
def pca_reduced(absolute):
    """A physical basis: 6 rigid modes + the 20 lowest elastic vibration modes (incl. torsion and stretch: the loop needs them)."""
    import scipy.linalg as sla

    body = absolute.deformable[0]
    local = body.rest_positions - absolute.rigid[reference_bodies(absolute)[0]].reference_com
    m = body.mass_matrix.toarray()
    k0 = body.elastic.tangent_stiffness(np.zeros(body.n_dofs)).toarray()
    # The free body's 6 zero-frequency modes are the rigid ones; the next 6 are M-orthogonal to them.
    _, vec = sla.eigh(k0, m, subset_by_index=[0, 25])
    rig = rigid_modes(local, body.mass_matrix)
    modes = np.hstack([rig, vec[:, 6:26]])
    return build_reduced_system(absolute, [ReducedBasis(modes, 6, 1.0, np.zeros(20))], [_all_elements(body.elastic, modes)])


def _random_point(rs, seed: int, z_scale: float = 0.003):
    rng = np.random.default_rng(seed)
    u = rs.reference_u()
    u[: 7 * rs.n_rigid] += rng.normal(size=7 * rs.n_rigid) * 0.05
    u[7 * rs.n_rigid :] = rng.normal(size=rs.n_u - 7 * rs.n_rigid) * z_scale
    u[7 * rs.n_rigid : 7 * rs.n_rigid + 6] *= 1e-3
    v = rng.normal(size=rs.n_v)
    lam = rng.normal(size=rs.n_lambda)
    s = np.concatenate([u, v, lam])
    u_bar = u + rng.normal(size=rs.n_u) * 1e-3
    v_bar = v + rng.normal(size=rs.n_v) * 1e-1
    return s, (u_bar, v_bar, 1e-3, np.array([0.2, -0.1]), np.array([1.5, 0.3]), 500.0)


def test_residual_and_jacobian_equal_reference(random_reduced):
    rs = random_reduced
    packed = pack_system(rs)
    for seed in (1, 2):
        s, args = _random_point(rs, seed)
        ref = residual_and_jacobian(rs, s, StepInputs(*args))
        got = residual_compiled(packed, s, StepInputs(*args))
        assert np.max(np.abs(got.residual - ref.residual)) <= 1e-12 * np.max(np.abs(ref.residual))
        assert np.max(np.abs(got.jacobian - ref.jacobian)) <= 1e-12 * np.max(np.abs(ref.jacobian))
        assert np.max(np.abs(got.r_theta_dot - ref.r_theta_dot)) <= 1e-13
        assert np.max(np.abs(got.mass - ref.mass)) <= 1e-14 * np.max(np.abs(ref.mass))
        # Residual-only path: real-arithmetic constraint rows and the reduced-form cubature value kernel.
        only = residual_compiled(packed, s, StepInputs(*args), jacobian=False)
        assert np.max(np.abs(only.residual - got.residual)) <= 1e-13 * np.max(np.abs(got.residual))
        assert only.min_det == pytest.approx(got.min_det, rel=1e-13)


def test_kernels_call_what_the_dispatcher_calls(random_reduced):
    """``Kernels`` calls numba's compiled entry point for the arguments' types without the dispatcher's typing of the
    packed system: the same results as a dispatcher call, for arguments of every kind it is given (a read-only and a
    strided array get their own entry, not one compiled for contiguous writable arrays)."""
    rs = random_reduced
    packed = pack_system(rs)
    kernels = ck.Kernels(packed)
    s, (u_bar, v_bar, h, th, thd, a) = _random_point(rs, 4)
    want = ck.residual_jacobian(packed, s, u_bar, v_bar, h, th, thd, a, True, True)
    got = kernels(ck.residual_jacobian, s, u_bar, v_bar, h, th, thd, a, True, True)
    assert all(np.array_equal(x, y) for x, y in zip(got, want))
    ws, ws_numba = ck.make_workspace(packed), ck.make_workspace(packed)
    assert kernels(ck.factorize_exact, want[1], h, ws) == ck.factorize_exact(packed, want[1], h, ws_numba) == 0
    b = np.random.default_rng(5).normal(size=s.size)
    frozen = b.copy()
    frozen.flags.writeable = False
    strided = np.repeat(b, 2)[::2]
    expected = ck.condensed_solve_transposed(packed, ws_numba, b)
    for rhs in (b, frozen, strided):
        assert np.array_equal(kernels(ck.condensed_solve_transposed, ws, rhs), expected)
    assert len(kernels._entries) == 5  # residual, factorization, and one solve per kind of right-hand side


def test_curvature_free_columns_are_skipped_exactly(random_reduced):
    """Hinges are affine in the bodies' positions: those columns are flagged curvature-free (quaternion columns are
    not; a coupling's z enters bilinearly with the reference rotation), and the Jacobian that skips the flagged
    columns is bit-for-bit the one that complex-steps every column."""
    rs = random_reduced
    packed = pack_system(rs)
    for b, blk in enumerate(rs.constraints):
        flags = packed.curv[packed.ui_off[b] : packed.ui_off[b + 1]]
        nrs = int(packed.n_rigid_seg[b])
        for sg in range(nrs):
            assert np.all(flags[7 * sg + 3 : 7 * sg + 7])
            if isinstance(blk, JointConstraint):
                assert not np.any(flags[7 * sg : 7 * sg + 3])
        assert np.all(flags[7 * nrs :])
    every = packed._replace(curv=np.ones_like(packed.curv))
    s, args = _random_point(rs, 3)
    a, b = residual_compiled(packed, s, StepInputs(*args)), residual_compiled(every, s, StepInputs(*args))
    assert np.array_equal(a.jacobian, b.jacobian) and np.array_equal(a.r_theta, b.r_theta)


def test_coupling_curvature_by_chain_rule_equals_column_complex_steps(random_reduced):
    """The couplings' curvature terms through the slot map (one step along ẏ, 13 slot-row steps, 4 quaternion steps
    of the map) equal one complex step of the whole block per local coordinate, for couplings to the reference and
    to a non-reference body."""
    from retarget.sim.reduced.kernels import COUPLING_CODE, block_eval, coupling_curvature

    p = pack_system(random_reduced)
    rng = np.random.default_rng(11)
    seen = set()
    for bk in range(len(p.kind)):
        if p.kind[bk] != COUPLING_CODE:
            continue
        seen.add(int(p.separate[bk]))
        n, nrs = int(p.ui_off[bk + 1] - p.ui_off[bk]), int(p.n_rigid_seg[bk])
        ul = rng.normal(size=n)
        for sg in range(nrs):
            ul[7 * sg + 3 : 7 * sg + 7] /= np.linalg.norm(ul[7 * sg + 3 : 7 * sg + 7])
        ul[7 * nrs :] *= 1e-2
        lam, ydot = rng.normal(size=6), rng.normal(size=n)
        args = (p.kind[bk], False, p.present_a[bk] != 0, p.present_b[bk] != 0, p.fvec[bk], p.fmat[bk],
                p.separate[bk] != 0, p.y0[bk], p.ymap[bk])
        dot_ref, hess_ref = np.zeros((6, n)), np.zeros((n, n))
        for j in range(n):
            ulc = ul.astype(complex)
            ulc[j] += 1e-30j
            dcu = block_eval(*args, ulc, 0.0)[1].imag / 1e-30
            dot_ref[:, j] = dcu @ ydot
            hess_ref[:, j] = dcu.T @ lam
        dot, hess = coupling_curvature(p.fvec[bk], p.present_a[bk] != 0, p.separate[bk] != 0, p.y0[bk], p.ymap[bk],
                                       ul, lam, ydot, 1e-30)
        assert np.max(np.abs(dot - dot_ref)) <= 1e-12 * np.max(np.abs(dot_ref))
        assert np.max(np.abs(hess - hess_ref)) <= 1e-12 * np.max(np.abs(hess_ref))
    assert seen == {0, 1}


def test_r_theta_against_finite_differences(random_reduced):
    rs = random_reduced
    packed = pack_system(rs)
    s, (u_bar, v_bar, h, th, thd, a) = _random_point(rs, 3)
    lin = residual_compiled(packed, s, StepInputs(u_bar, v_bar, h, th, thd, a))
    for k in range(len(th)):
        e = np.zeros(len(th))
        e[k] = 1e-6
        rp = residual_compiled(packed, s, StepInputs(u_bar, v_bar, h, th + e, thd, a), jacobian=False).residual
        rm = residual_compiled(packed, s, StepInputs(u_bar, v_bar, h, th - e, thd, a), jacobian=False).residual
        fd = (rp - rm) / 2e-6
        assert np.allclose(lin.r_theta[:, k], fd, rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))
        assert np.max(np.abs(lin.r_theta[:, k])) > 0


def test_jacobian_against_finite_differences(pca_reduced):
    # Directional derivatives of the compiled residual along random directions (2nd-order central differences).
    rs = pca_reduced
    packed = pack_system(rs)
    # Vibration modes are ~6 m per unit z: keep the rod strained but not inverted (min det F > 0).
    s, args = _random_point(rs, 4, z_scale=1e-4)
    lin = residual_compiled(packed, s, StepInputs(*args))
    assert lin.min_det > 0.5
    jac = lin.jacobian
    rng = np.random.default_rng(5)
    for _ in range(4):
        d = rng.normal(size=len(s)) * 1e-8
        rp = residual_compiled(packed, s + d, StepInputs(*args), jacobian=False).residual
        rm = residual_compiled(packed, s - d, StepInputs(*args), jacobian=False).residual
        fd = (rp - rm) / 2
        assert np.max(np.abs(fd - jac @ d)) <= 1e-6 * np.max(np.abs(fd))


def test_time_loop_equals_reference_stepper(pca_reduced):
    rs = pca_reduced
    motors = FunctionMotors(lambda t: [0.3 * (1 - np.cos(20 * t)), -0.1 * t], lambda t: [6 * np.sin(20 * t), -0.1])
    dt, n = 1e-3, 60
    st = solve_static(rs, motors.value(0.0))
    prev4, prev3, prev2, prev, cache = None, None, None, st, {}
    ref = [st.s]
    for k in range(1, n + 1):
        new, _ = step(rs, prev, prev2, dt, motors, cache, k, prev3=prev3, estimate=True, prev4=prev4)
        prev4, prev3, prev2, prev = prev3, prev2, prev, new
        ref.append(new.s)
    ref = np.array(ref)
    run = simulate_compiled(rs, motors, n * dt, dt, start=st, chunk=25)
    nu, nv = rs.n_u, rs.n_v
    moved = np.max(np.abs(ref[:, : 7 * rs.n_rigid] - ref[0, : 7 * rs.n_rigid]))
    assert moved > 1e-3
    assert np.max(np.abs(run.states[:, :nu] - ref[:, :nu])) < 1e-9
    assert np.max(np.abs(run.states[:, nu : nu + nv] - ref[:, nu : nu + nv])) < 1e-6
    assert np.max(np.abs(run.states[:, nu + nv :] - ref[:, nu + nv :])) < 1e-6 * np.max(np.abs(ref[:, nu + nv :]))
    assert run.factorizations == cache["factorizations"]


def test_engine_static_solve_equals_reference(pca_reduced):
    """The compiled engine's quasi-static solve (compiled residual in the same Newton) = the reference solve."""
    rs = pca_reduced
    engine = CompiledReducedEngine(rs)
    theta = np.array([0.4, -0.2])
    ref = solve_static(rs, theta)
    got = engine.solve_static(theta)
    assert np.max(np.abs(got.s[: rs.n_u] - ref.u)) < 1e-10
    assert np.max(np.abs(got.s[rs.n_u + rs.n_v :] - ref.lam)) < 1e-8 * np.max(np.abs(ref.lam))
    # Warm start from a nearby equilibrium converges to the same state.
    warm = engine.solve_static(theta + 0.05)
    again = engine.solve_static(theta, warm)
    assert np.max(np.abs(again.s[: rs.n_u] - ref.u)) < 1e-10


def test_engine_steps_equal_compiled_run(pca_reduced):
    """The optimizer's one-step path (quadratic predictor from its cache) converges to the chunked run's states."""
    rs = pca_reduced
    motors = FunctionMotors(lambda t: [0.3 * (1 - np.cos(20 * t)), -0.1 * t], lambda t: [6 * np.sin(20 * t), -0.1])
    engine = CompiledReducedEngine(rs, tolerance=1e-12)
    start = engine.solve_static(motors.value(0.0))
    dt, n = 1e-3, 30
    prev2, prev, cache, steps = None, start, {}, [start.s]
    for k in range(1, n + 1):
        new = engine.step(prev, prev2, dt, motors, k, cache)
        prev2, prev = prev, new
        steps.append(new.s)
    run = engine.simulate(start, motors, dt, n)
    nu = rs.n_u
    assert np.max(np.abs(np.array(steps)[:, :nu] - run.states[:, :nu])) < 1e-10
    assert np.max(np.abs(run.states[:, : 7 * rs.n_rigid] - run.states[0, : 7 * rs.n_rigid])) > 1e-4


def test_planner_engine_stops_on_the_estimate_at_the_strict_engines_states(pca_reduced):
    """``planner_engine`` (tolerance 1e-10, the remaining-error estimate) saves Newton iterations on whole runs, and
    its whole-run and one-step paths stay on the strict engine's trajectory to the tolerance's order."""
    from retarget.sim.adapters import PLAN_TOLERANCE, planner_engine

    rs = pca_reduced
    motors = FunctionMotors(lambda t: [0.3 * (1 - np.cos(20 * t)), -0.1 * t], lambda t: [6 * np.sin(20 * t), -0.1])
    strict = CompiledReducedEngine(rs, tolerance=PLAN_TOLERANCE)
    planner = planner_engine(rs)
    assert planner.estimate and not strict.estimate and planner.tolerance == strict.tolerance
    start = strict.solve_static(motors.value(0.0))
    dt, n = 1e-3, 60
    runs = {e: e.simulate(start, motors, dt, n) for e in (strict, planner)}
    assert runs[planner].newton_iterations.sum() < runs[strict].newton_iterations.sum()
    nu = rs.n_u
    assert np.max(np.abs(runs[planner].states[:, :nu] - runs[strict].states[:, :nu])) < 1e-8
    prev2, prev, cache = None, start, {}
    for k in range(1, n + 1):
        new = planner.step(prev, prev2, dt, motors, k, cache)
        prev2, prev = prev, new
    assert np.max(np.abs(prev.s[:nu] - runs[strict].states[-1, :nu])) < 1e-8


def test_predictor_satisfies_kinematic_rows(pca_reduced):
    """BDF2 start: V, λ extrapolated linearly; c and z rows of ``R_U`` vanish, q rows to O(h·|Δq|)."""
    rs = pca_reduced
    packed = pack_system(rs)
    rng = np.random.default_rng(8)
    nu, nv, nb = rs.n_u, rs.n_v, rs.n_rigid
    base, _ = _random_point(rs, 9)
    states = np.stack([base, base + rng.normal(size=len(base)) * 1e-4, np.zeros_like(base)])
    dt = 1e-3
    h = 2 * dt / 3
    u_bar = (4 * states[1, :nu] - states[0, :nu]) / 3
    v_bar = (4 * states[1, nu : nu + nv] - states[0, nu : nu + nv]) / 3
    guess = ck._predict(packed, states, 1, u_bar, h, dt, 2)
    assert np.allclose(guess[nu:], 2 * states[1, nu:] - states[0, nu:], rtol=0, atol=1e-15)
    inputs = StepInputs(u_bar, v_bar, h, np.zeros(2), np.zeros(2), 1 / h)
    res = residual_compiled(packed, guess, inputs, jacobian=False).residual
    c_rows = np.concatenate([np.arange(7 * i, 7 * i + 3) for i in range(nb)])
    assert np.max(np.abs(res[c_rows])) <= 1e-15
    assert np.max(np.abs(res[7 * nb : nu])) <= 1e-15
    q_rows = np.concatenate([np.arange(7 * i + 3, 7 * i + 7) for i in range(nb)])
    assert np.max(np.abs(res[q_rows])) <= 1e-6


def test_stopping_test_bounds_the_remaining_error():
    """Linear convergence ``e_k = e_0 ρᵏ``: stopping on ``size ρ/(1−ρ) ≤ tol`` leaves an error ≤ tol."""
    for rho in (0.01, 0.1, 0.3, 0.45):
        err = 1e-4
        previous = np.inf
        for _ in range(200):
            size = err * (1 - rho)  # the update removes (1 − ρ) of the current error
            err *= rho
            if ck.converged(size, previous, 1e-10):
                break
            previous = size
        assert err <= 1e-10 * (1 + 1e-12)
        assert err > 1e-10 * rho**2  # not more iterations than needed
    assert not ck.converged(1e-9, np.inf, 1e-10)  # no estimate from a single update
    assert not ck.converged(1e-9, 1.5e-9, 1e-10)  # ρ ≥ 0.5: only the update size counts
    assert ck.converged(1e-10, 1.5e-10, 1e-10)


def test_a_matrix_is_replaced_where_its_cost_per_step_is_least():
    """Renewal theory: a matrix whose steps cost ``c_1 ≤ c_2 ≤ …`` iterations, after a factorization of cost ``C``,
    serves the fewest iterations per step when replaced after the step ``n`` that minimizes ``(C + Σ_{k≤n} c_k)/n``.
    :func:`outlived` replaces it there, on gradually rising sequences of several shapes (it has no foresight: a
    sudden jump is seen after the step that makes it)."""
    for costs in ([2, 2, 2, 3, 3, 4, 5, 6, 8, 11], [3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 5, 6, 7, 9, 12],
                  [1, 2, 3, 4, 5, 6, 7, 8], [2] * 10 + [3] * 5 + [4, 5, 6]):
        totals = ck.REFACTOR_COST + np.cumsum(costs)
        best = int(np.argmin(totals / np.arange(1, len(costs) + 1))) + 1
        replaced = next(n for n in range(1, len(costs) + 1)
                        if ck.outlived(float(totals[n - 1]), float(n), float(costs[n - 1])))
        # The rule judges the next step by the one just taken, so it replaces the matrix at or after the least
        # average (after a run of ties), never before it, at an average within 5 % of the least.
        assert best <= replaced, (costs, best, replaced)
        average = totals / np.arange(1, len(costs) + 1)
        assert average[replaced - 1] <= average[best - 1] * 1.05, (costs, best, replaced)


def test_a_stale_matrix_is_kept_near_the_tolerance_and_replaced_far_from_it():
    """Within a step: a stale matrix contracting at ρ needs ``ln(size/tol)/ln(1/ρ)`` more iterations; a fresh one
    :data:`REFACTOR_COST` plus ``ln(size/tol)/ln(1/FRESH_CONTRACTION)``. :func:`refactor` picks the cheaper."""
    tol = 1e-10
    assert not ck.refactor(1e-6, np.inf, tol)  # the step's first update: no contraction observed
    assert ck.refactor(1e-6, 1.5e-6, tol)  # ρ ≥ STALE_CONTRACTION_MAX
    for size in (1e-9, 1e-7, 1e-5, 1e-3):
        for rho in (0.02, 0.1, 0.2, 0.3, 0.45):
            remaining = np.log(size / tol)
            stale = remaining / np.log(1 / rho)
            fresh = ck.REFACTOR_COST + remaining / np.log(1 / ck.FRESH_CONTRACTION)
            assert ck.refactor(size, size / rho, tol) == (stale > fresh), (size, rho)
    assert not ck.refactor(1e-11, 1e-10, tol)  # converged already


def test_condensed_solves_are_exact(pca_reduced):
    rs = pca_reduced
    packed = pack_system(rs)
    s, args = _random_point(rs, 6)
    lin = residual_compiled(packed, s, StepInputs(*args))
    ws = ck.make_workspace(packed)
    assert ck.factorize_exact(packed, lin.jacobian, args[2], ws) == 0
    b = np.random.default_rng(7).normal(size=len(s))
    jac = lin.jacobian
    # The DAE Jacobian is badly scaled (stiff elastic rows, λ columns): check the backward error.
    x = ck.condensed_solve(packed, ws, b)
    assert np.max(np.abs(jac @ x + b)) <= 1e-12 * np.max(np.abs(jac) @ np.abs(x))
    y = ck.condensed_solve_transposed(packed, ws, b)
    assert np.max(np.abs(jac.T @ y - b)) <= 1e-12 * np.max(np.abs(jac.T) @ np.abs(y))
    # Many right-hand sides at once (a tangent-linear pass's columns), with the single solve's backward error.
    many = np.random.default_rng(8).normal(size=(len(s), 5))
    xs = ck.condensed_solve_columns(packed, ws, many)
    assert xs.shape == many.shape
    assert np.all(np.max(np.abs(jac @ xs + many), axis=0) <= 1e-12 * np.max(np.abs(jac) @ np.abs(xs), axis=0))


def test_damping_uses_current_tangent_not_rest_stiffness(random_reduced):
    """β damps with the cubature tangent at the current z in both engines; ``stiffness0`` no longer enters."""
    import dataclasses

    rs = random_reduced
    assert rs.bodies[0].beta > 0.0
    s, args = _random_point(rs, 8)
    scaled = dataclasses.replace(rs, bodies=tuple(dataclasses.replace(b, stiffness0=7.0 * b.stiffness0) for b in rs.bodies))
    undamped = dataclasses.replace(rs, bodies=tuple(dataclasses.replace(b, beta=0.0) for b in rs.bodies))
    ref = residual_and_jacobian(rs, s, StepInputs(*args))
    assert np.array_equal(residual_and_jacobian(scaled, s, StepInputs(*args)).residual, ref.residual)
    for jacobian in (True, False):
        got = residual_compiled(pack_system(scaled), s, StepInputs(*args), jacobian=jacobian).residual
        assert np.max(np.abs(got - ref.residual)) <= 1e-12 * np.max(np.abs(ref.residual))
    # The β term is β K(z) ż on the ż rows.
    body = rs.bodies[0]
    zu, zv = rs.z_slice_u(0), rs.z_slice_v(0)
    kz = body.cubature.evaluate(s[zu])[1]
    diff = ref.residual - residual_and_jacobian(undamped, s, StepInputs(*args)).residual
    expected = np.zeros_like(diff)
    expected[rs.n_u + zv.start : rs.n_u + zv.stop] = body.beta * kz @ s[rs.n_u + zv.start : rs.n_u + zv.stop]
    assert np.max(np.abs(diff - expected)) <= 1e-12 * np.max(np.abs(expected))


def test_a_bad_newton_start_falls_back_to_a_safer_one(pca_reduced):
    """Step k's quadratic start uses S_{k−2}, which its solution does not depend on: spoil S_{k−2} so that start
    inverts elements, and the step still converges (from the linear or held start) to the same state."""
    rs = pca_reduced
    motors = FunctionMotors(lambda t: [0.3 * (1 - np.cos(20 * t)), -0.1 * t], lambda t: [6 * np.sin(20 * t), -0.1])
    dt, n, k = 1e-3, 30, 20
    run = simulate_compiled(rs, motors, n * dt, dt, tol=1e-12)
    packed = pack_system(rs)
    times = np.arange(n + 1) * dt
    thetas = np.array([motors.value(t) for t in times], dtype=float)
    theta_dots = np.array([motors.derivative(t) for t in times], dtype=float)
    states = run.states.copy()
    # The start's elastic coordinates are z̄ + h ż*, ż* = 3ż_k − 3ż_{k−1} + ż_{k−2}: far beyond inversion.
    states[k - 2, rs.n_u + 6 * rs.n_rigid + 6 : rs.n_u + rs.n_v] += 5e4
    iters = np.zeros(n + 1, dtype=np.int64)
    spoiled = ck._predict(packed, states, k, (4 * states[k, : rs.n_u] - states[k - 1, : rs.n_u]) / 3, 2 * dt / 3, dt, 2)
    inputs = StepInputs((4 * states[k, : rs.n_u] - states[k - 1, : rs.n_u]) / 3,
                        (4 * states[k, rs.n_u : rs.n_u + rs.n_v] - states[k - 1, rs.n_u : rs.n_u + rs.n_v]) / 3,
                        2 * dt / 3, thetas[k + 1], theta_dots[k + 1], 1.5 / dt)
    res = residual_compiled(packed, spoiled, inputs, jacobian=False)
    assert not res.min_det > 0, "the spoiled start must be one the engine refuses"
    status, at = ck.run_chunk(packed, states, iters, k, k + 1, dt, thetas, theta_dots, 1e-12, 30,
                              ck.make_workspace(packed), True, False)
    assert (status, at) == (0, k + 1)
    nu = rs.n_u
    assert np.max(np.abs(states[k + 1, :nu] - run.states[k + 1, :nu])) < 1e-10


def test_inexact_chord_matrix_drops_only_the_second_order_terms(pca_reduced):
    """``exact=False`` leaves out the blocks' curvature and the damping derivative, nothing else (with both absent
    from the system the two Jacobians are bit-for-bit equal); the residual is the same, and a run whose chord
    iterations use it converges to the exact-chord run's states."""
    from retarget.sim.reduced import compiled as ck

    rs = pca_reduced
    packed = pack_system(rs)
    s, (u_bar, v_bar, h, th, thd, a) = _random_point(rs, 6, z_scale=1e-4)
    exact = ck.residual_jacobian(packed, s, u_bar, v_bar, h, th, thd, a, True, True)
    inexact = ck.residual_jacobian(packed, s, u_bar, v_bar, h, th, thd, a, True, False)
    assert np.array_equal(exact[0], inexact[0]) and np.array_equal(exact[2], inexact[2])
    assert np.array_equal(exact[3], inexact[3]) and not np.array_equal(exact[1], inexact[1])
    plain = packed._replace(curv=np.zeros_like(packed.curv), bbeta=np.zeros_like(packed.bbeta))
    assert np.array_equal(ck.residual_jacobian(plain, s, u_bar, v_bar, h, th, thd, a, True, True)[1],
                          ck.residual_jacobian(plain, s, u_bar, v_bar, h, th, thd, a, True, False)[1])
    motors = FunctionMotors(lambda t: [0.3 * (1 - np.cos(20 * t)), -0.1 * t], lambda t: [6 * np.sin(20 * t), -0.1])
    st = solve_static(rs, motors.value(0.0))
    runs = [simulate_compiled(rs, motors, 0.06, 1e-3, start=st, estimate=False, exact_chord=e) for e in (True, False)]
    nu = rs.n_u
    assert np.max(np.abs(runs[0].states[:, :nu] - runs[1].states[:, :nu])) < 1e-9
