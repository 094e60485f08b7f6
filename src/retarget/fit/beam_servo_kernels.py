"""The servo–beam plant's time loop, compiled (numba): :meth:`retarget.fit.beam_servo.ServoBeam.simulate`.

The same equations, terms and iteration as the plant's Python step (:meth:`ServoBeam._step`, kept as the reference
the tests compare against): per step the trapezoidal rule's predictor, then a secant iteration on the shaft's
acceleration ``θ̈`` in which every iterate solves the beam's rows for ``q̈`` exactly (one dense solve) and evaluates
the shaft's row; the slope of that row is carried from step to step. Imported on first use (numba's import is not
paid by ``retarget --help``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from retarget.fit.beam import _BeamConstants
from retarget.jit import njit

#: Status of :func:`servo_trapezoidal`: every step converged, the shaft's row lost its slope, a step ran out of
#: iterations.
OK, SLOPE_LOST, NOT_CONVERGED = 0, 1, 2

#: Secant iterations per step, and the convergence tests (as :meth:`ServoBeam._step`).
MAX_ITERATIONS = 60


class ShaftLoop(NamedTuple):
    """The shaft equation's constants (:class:`~retarget.fit.beam_servo.ShaftTerms`), the loop's parameters
    (:class:`~retarget.fit.beam_servo.DynamixelLoop`) and gravity in the rig's plane, as the kernel takes them."""

    inertia: float
    inertia_gradient: NDArray[np.float64]
    coupling: NDArray[np.float64]
    first_moment: NDArray[np.float64]
    first_moment_map: NDArray[np.float64]
    kp: float
    ki: float
    kd: float
    kff1: float
    stall_torque: float
    max_velocity: float
    coulomb_friction: float
    viscous_friction: float
    duty_limit: float
    friction_speed: float
    g_a0: float
    g_l0: float


class _Point(NamedTuple):
    r: float
    size: float
    th: float
    w: float
    iota: float


@njit(cache=True, nogil=True)
def _torque(s: ShaftLoop, goal: float, goal_rate: float, th: float, w: float, iota: float) -> float:
    """:meth:`DynamixelLoop.torque` at one state [N m]."""
    u = s.kp * (goal - th) + s.ki * iota + s.kd * (goal_rate - w) + s.kff1 * goal_rate
    d = min(max(u / s.stall_torque, -s.duty_limit), s.duty_limit)
    tau = s.stall_torque * (d - w / s.max_velocity) - s.viscous_friction * w
    if s.coulomb_friction:
        tau = tau - s.coulomb_friction * math.tanh(w / s.friction_speed)
    return tau


@njit(cache=True, nogil=True)
def _evaluate(x: float, dt: float, b: _BeamConstants, s: ShaftLoop, k_bend: NDArray, damping0: NDArray,
              k_rot: NDArray, k_euler: NDArray, q_pred: NDArray, v_pred: NDArray, th_pred: float, w_pred: float,
              i_pred: float, iota_prev: float, goal: float, goal_rate: float, q: NDArray, v: NDArray,
              a: NDArray, work: NDArray) -> _Point:
    """One iterate ``θ̈ = x``: the beam's accelerations into ``a`` (and ``q``, ``v``), the shaft's row and its size.
    ``work`` (n, n) holds the step's matrix."""
    h1, h2 = 0.5 * dt, 0.25 * dt * dt
    n = b.mass.shape[0]
    th, w = th_pred + h2 * x, w_pred + h1 * x
    c, sn = math.cos(th), math.sin(th)
    g0, g1 = c * s.g_a0 + sn * s.g_l0, c * s.g_l0 - sn * s.g_a0
    w2, ww = w**2, 2.0 * w
    f0 = b.tip_mass * (g0 + w2 * b.tip_rest[0] - x * b.tip_rest_j[0])
    f1 = b.tip_mass * (g1 + w2 * b.tip_rest[1] - x * b.tip_rest_j[1])
    corner = b.tip_offset[0] * f0 + b.tip_offset[1] * f1
    for r in range(n):  # C, K of BeamModel.matrices: the step's matrix M + h1 C + h2 K, and the right-hand side
        rhs = (g1 * b.load_gravity_lateral[r] + w2 * b.load_centrifugal[r] + x * b.load_euler[r]
               + b.tip_map_t[r, 0] * f0 + b.tip_map_t[r, 1] * f1)
        if r == n - 1:
            rhs -= b.tip_inertia * x
        for col in range(n):
            cc = damping0[r, col] + ww * b.gjg[r, col]
            kk = k_bend[r, col] + g0 * b.geo_gravity[r, col] + w2 * k_rot[r, col] + x * k_euler[r, col]
            if r == n - 1 and col == n - 1:
                kk += corner
            work[r, col] = b.mass[r, col] + h1 * cc + h2 * kk
            rhs -= cc * v_pred[col] + kk * q_pred[col]
        a[r] = rhs
    a[:] = np.linalg.solve(work, a)
    for r in range(n):
        q[r] = q_pred[r] + h2 * a[r]
        v[r] = v_pred[r] + h1 * a[r]
    iota = i_pred + h1 * (goal - th) if dt > 0.0 else iota_prev
    first0, first1, hq, hv, ca, cabs = s.first_moment[0], s.first_moment[1], 0.0, 0.0, 0.0, 0.0
    for r in range(n):
        first0 += s.first_moment_map[0, r] * q[r]
        first1 += s.first_moment_map[1, r] * q[r]
        hq += s.inertia_gradient[r] * q[r]
        hv += s.inertia_gradient[r] * v[r]
        ca += s.coupling[r] * a[r]
        cabs += abs(s.coupling[r]) * abs(a[r])
    t0 = (s.inertia + hq) * x
    t1 = ca
    t2 = w * hv
    t3 = -(g0 * -first1 + g1 * first0)
    t4 = -_torque(s, goal, goal_rate, th, w, iota)
    loop_terms = (s.kp * (abs(goal) + abs(th)) + s.ki * abs(iota) + s.kd * (abs(goal_rate) + abs(w))
                  + s.kff1 * abs(goal_rate) + s.stall_torque * abs(w) / s.max_velocity)
    size = abs(t0) + abs(t1) + abs(t2) + abs(t3) + abs(t4) + cabs + loop_terms
    return _Point(t0 + t1 + t2 + t3 + t4, size, th, w, iota)


@njit(cache=True, nogil=True)
def servo_trapezoidal(dt: float, youngs_modulus: float, alpha: float, beta: float, goal: NDArray,
                      goal_rate: NDArray, q0: NDArray, v0: NDArray, a0: NDArray, th0: float, w0: float, x0: float,
                      iota0: float, b: _BeamConstants, s: ShaftLoop
                      ) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray, NDArray, int, int, float]:
    """The plant's run on the grid of ``goal`` (n_t,) from the state ``(q0, v0, a0, θ0, ω0, θ̈0, ι0)`` at its first
    point: first the accelerations consistent with that state (a step of 0), then one trapezoidal step per point.

    Returns:
        ``q``, ``q̇`` (n_t, n), ``θ``, ``ω``, ``θ̈``, ``ι`` (n_t,), then the status (:data:`OK`, :data:`SLOPE_LOST`,
        :data:`NOT_CONVERGED`), the grid index of the failing step and the slope or residual that failed.
    """
    n_t, n = goal.shape[0], b.mass.shape[0]
    q_out, v_out = np.zeros((n_t, n)), np.zeros((n_t, n))
    shaft, speed, acc, integral = np.zeros(n_t), np.zeros(n_t), np.zeros(n_t), np.zeros(n_t)
    k_bend = youngs_modulus * b.stiffness_unit
    damping0 = alpha * b.mass_rod + beta * k_bend
    k_rot = b.geo_centrifugal - b.mass_rod - b.ggt
    k_euler = b.geo_euler + b.gjg
    q, v, a = q0.copy(), v0.copy(), a0.copy()
    th, w, x_acc, iota = th0, w0, x0, iota0
    qn, vn, an = np.zeros(n), np.zeros(n), np.zeros(n)
    work = np.empty((n, n))
    slope = math.nan
    # Point 0 is the start with its consistent accelerations (a step of 0 from it); every other point one step of dt.
    for i in range(n_t):
        h = 0.0 if i == 0 else dt
        goal_prev = goal[max(i - 1, 0)]
        h1, h2 = 0.5 * h, 0.25 * h * h
        q_pred = q + h * v + h2 * a
        v_pred = v + h1 * a
        th_pred = th + h * w + h2 * x_acc
        w_pred = w + h1 * x_acc
        i_pred = iota + h1 * (goal_prev - th)
        x = x_acc
        p = _evaluate(x, h, b, s, k_bend, damping0, k_rot, k_euler, q_pred, v_pred, th_pred, w_pred, i_pred, iota,
                      goal[i], goal_rate[i], qn, vn, an, work)
        r = p.r
        if i <= 1:  # the start's and the first step's slope by a difference; then the secant's, step to step
            dx = 1e-6 * (1.0 + abs(x))
            slope = (_evaluate(x + dx, h, b, s, k_bend, damping0, k_rot, k_euler, q_pred, v_pred, th_pred, w_pred,
                               i_pred, iota, goal[i], goal_rate[i], qn, vn, an, work).r - r) / dx
        done = False
        for _ in range(MAX_ITERATIONS):
            if not (slope > 0.0 and math.isfinite(slope)):
                return q_out, v_out, shaft, speed, acc, integral, SLOPE_LOST, i, slope
            x_new = x - r / slope
            p = _evaluate(x_new, h, b, s, k_bend, damping0, k_rot, k_euler, q_pred, v_pred, th_pred, w_pred,
                          i_pred, iota, goal[i], goal_rate[i], qn, vn, an, work)
            if abs(p.r) <= 1e-12 * p.size or abs(x_new - x) <= 1e-9 * (1.0 + abs(x_new)):
                q[:] = qn
                v[:] = vn
                a[:] = an
                th, w, x_acc, iota = p.th, p.w, x_new, p.iota
                done = True
                break
            if x_new != x and p.r != r:
                secant = (p.r - r) / (x_new - x)
                if secant > 0.0:
                    slope = secant
            x, r = x_new, p.r
        if not done:
            return q_out, v_out, shaft, speed, acc, integral, NOT_CONVERGED, i, r
        q_out[i] = q
        v_out[i] = v
        shaft[i], speed[i], acc[i], integral[i] = th, w, x_acc, iota
    return q_out, v_out, shaft, speed, acc, integral, OK, 0, 0.0
