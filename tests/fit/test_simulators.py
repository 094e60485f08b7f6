"""Tests of retarget.fit.simulators: motor profiles and the engine adapters."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError, NotAvailableError
from retarget.fit.rig import load_rig
from retarget.fit.simulators import BeamEngine, FullEngine, make_simulator, motor_profile
from retarget.model.library import resolve_motion
from retarget.motion import Motion, load_motion


def test_motor_profile_derivatives() -> None:
    t = np.linspace(0.0, 2.0, 401)
    motion = Motion(t + 5.0, ("base_pitch",), np.sin(2 * t)[:, None])
    p = motor_profile(motion, "base_pitch", 1e-3)
    assert p.time_s[0] == 0.0 and p.time_s[-1] == pytest.approx(2.0)
    inner = (p.time_s > 0.2) & (p.time_s < 1.8)
    np.testing.assert_allclose(p.rate[inner], 2 * np.cos(2 * p.time_s[inner]), atol=1e-5)
    np.testing.assert_allclose(p.acceleration[inner], -4 * np.sin(2 * p.time_s[inner]), atol=2e-3)
    with pytest.raises(InputError, match="no joint"):
        motor_profile(motion, "elbow", 1e-3)


def test_make_simulator() -> None:
    rig = load_rig("single_rod")
    assert isinstance(make_simulator("auto", rig), BeamEngine)
    with pytest.raises(NotAvailableError):
        make_simulator("reduced", rig)
    with pytest.raises(InputError):
        make_simulator("mujoco", rig)


def test_beam_engine_output() -> None:
    rig = load_rig("single_rod")
    motion = load_motion(resolve_motion("single_rod/step_30"))
    tr = BeamEngine(rig, dt=2e-3).simulate(2e11, 0.2, 2e-5, motion)
    assert tr.position_m.shape == (tr.time_s.size, 3) and tr.time_s[-1] == pytest.approx(4.0)
    np.testing.assert_allclose(tr.position_m[0], rig.tip_com, atol=1e-9)  # upright: no sag at rest
    # After the return the motor is back at 0 and the tip angle rings about it.
    assert abs(tr.motor_rad[-1]) < 1e-9 and np.abs(tr.angle_rad[tr.time_s > 2.5]).max() > 0.05


def test_full_engine_adapter_agrees_at_the_start() -> None:
    """The full engine on a deliberately coarse mesh for 20 steps: same tip at rest, same output layout."""
    rig = load_rig("single_rod")
    motion = load_motion(resolve_motion("single_rod/step_30"))
    full = FullEngine(rig, dt=1e-3, store_every=1, resolution=(4, 6), duration=0.02)
    tr = full.simulate(2e11, 0.2, 2e-5, motion)
    assert tr.time_s.size == 21 and tr.angle_rad is not None
    np.testing.assert_allclose(tr.position_m[0], rig.tip_com, atol=2e-4)
    assert np.abs(tr.angle_rad).max() < 1e-6  # the motor has not moved yet


def _modal_reduced(model: object, n_modes: int = 4, seed: int = 0) -> tuple[object, object, object, object]:
    """A small reduced model of a coarse single_rod: 6 rigid + the lowest free vibration modes, trained cubature.

    Returns ``(reduced system, basis modes (3N, r), cubature samples (s, r), absolute system)``.
    """
    from scipy.sparse.linalg import eigsh

    from retarget.sim import build_system
    from retarget.sim.reduced.basis import ReducedBasis, rigid_modes
    from retarget.sim.reduced.cubature import train_cubature
    from retarget.sim.reduced.system import build_reduced_system, reference_bodies

    system = build_system(model)
    body = system.deformable[0]
    local = body.rest_positions - system.rigid[reference_bodies(system)[0]].reference_com
    mass = body.mass_matrix.tocsc()
    vals, vecs = eigsh(body.elastic.tangent_stiffness(np.zeros(body.n_dofs)).tocsc(), k=6 + n_modes, M=mass,
                       sigma=-1.0, which="LM")
    order = np.argsort(vals)
    modes = np.hstack([rigid_modes(local, body.mass_matrix), vecs[:, order[6:]]])
    chol = np.linalg.cholesky(modes.T @ (mass @ modes))
    modes = modes @ np.linalg.inv(chol).T  # M-orthonormal, the rigid modes first
    size = float(np.ptp(body.rest_positions, axis=0).max())
    zs = np.zeros((30, modes.shape[1]))
    zs[:, 6:] = (np.random.default_rng(seed).normal(size=(30, n_modes)) * 0.05 * size
                 / np.abs(modes[:, 6:]).max(axis=0) / np.sqrt(n_modes))
    cub = train_cubature(body.elastic, modes, zs, tolerance=1e-3)
    basis = ReducedBasis(modes, 6, 1.0, np.sqrt(np.abs(vals[order[6:]])) / (2 * np.pi))
    return build_reduced_system(system, [basis], [cub]), modes, zs, system


@pytest.fixture(scope="module")
def coarse_reduced() -> tuple[object, ...]:
    from retarget.fit.simulators import _load_with_resolution

    rig = load_rig("single_rod")
    model = _load_with_resolution(rig, (12, 6))
    return (rig, model, *_modal_reduced(model))


def test_reduced_adapter_scales_forces_like_the_full_engine_at_a_scaled_material(coarse_reduced) -> None:
    """Neo-Hookean forces are linear in E at fixed ν: the adapter's scaled cubature weights and K₀ equal the full
    FEM body built at E·s (projected on the basis) and a cubature retrained on it."""
    from dataclasses import replace

    from retarget.fit.simulators import ReducedEngine
    from retarget.sim import build_system
    from retarget.sim.reduced.cubature import train_cubature

    rig, model, rs, modes, zs, _ = coarse_reduced
    # The coarse mesh is stiffness-calibrated (its E is c times the file's): the adapter works in physical E.
    engine = ReducedEngine(rig, rs, stiffness_factor=model.flexible_parts[0].stiffness_factor)
    assert engine.youngs_modulus_trained == pytest.approx(rig.material.youngs_modulus, rel=1e-12)
    scale = 0.8
    scaled = engine.system_at(scale * rig.material.youngs_modulus, 0.7, 3e-5)
    body = scaled.bodies[0]
    assert (body.alpha, body.beta) == (0.7, 3e-5) and rs.bodies[0].alpha == rig.material.rayleigh_alpha
    parts = tuple(replace(p, material=replace(p.material, youngs_modulus=scale * p.material.youngs_modulus))
                  for p in model.flexible_parts)
    full = build_system(replace(model, flexible_parts=parts)).deformable[0]
    k0_full = modes.T @ (full.elastic.tangent_stiffness(np.zeros(full.n_dofs)) @ modes)
    np.testing.assert_allclose(body.stiffness0, k0_full, rtol=1e-10, atol=1e-8 * abs(body.stiffness0).max())
    retrained = train_cubature(full.elastic, modes, zs, tolerance=1e-3)
    np.testing.assert_array_equal(retrained.elements, rs.bodies[0].cubature.elements)
    rng = np.random.default_rng(1)
    for z in zs[rng.choice(len(zs), 3, replace=False)]:
        f_adapter, k_adapter, _ = body.cubature.evaluate(z)
        f_retrained, k_retrained, _ = retrained.evaluate(z)
        np.testing.assert_allclose(f_adapter, f_retrained, rtol=1e-9, atol=1e-9 * np.abs(f_retrained).max())
        np.testing.assert_allclose(k_adapter, k_retrained, rtol=1e-9, atol=1e-9 * np.abs(k_retrained).max())
        exact = modes.T @ full.elastic.internal_forces(modes @ z)
        assert np.linalg.norm(f_adapter - exact) <= 5e-3 * np.linalg.norm(exact)


def test_reduced_adapter_runs_the_compiled_engine(coarse_reduced) -> None:
    from retarget.fit.simulators import ReducedEngine

    rig, _, rs, *_ = coarse_reduced
    engine = make_simulator("auto", rig, reduced=rs)
    assert isinstance(engine, ReducedEngine)
    rest = Motion(np.array([0.0, 0.05]), (rig.motor,), np.zeros((2, 1)))
    tip = engine.simulate(rig.material.youngs_modulus, 0.5, 4e-5, rest)
    assert tip.position_m.shape == (len(tip.time_s), 3) and tip.angle_rad is not None
    # Held at the quasi-static start: the tip stays put (sub-micrometre) and does not turn.
    assert np.abs(tip.position_m - tip.position_m[0]).max() < 1e-5
    assert np.abs(tip.angle_rad - tip.angle_rad[0]).max() < 1e-5


def test_servo_beam_engine_drives_the_shaft_and_tends_to_the_prescribed_one_as_the_loop_stiffens() -> None:
    """The servo-beam engine plays the motion as the rig servo's goal: at factory gains the XM540's shaft sags and
    lags the goal by degrees on the fit rig's 30° step; the gap to the beam engine's prescribed shaft falls about as
    1/kp (the loop's compliance) as the gain grows."""
    from dataclasses import replace

    from retarget.fit.beam_servo import PlantError
    from retarget.fit.simulators import ServoBeamEngine

    rig = load_rig("fit_rig")
    motion = load_motion(resolve_motion("fit_rig/step_30"))
    prescribed = make_simulator("beam", rig).simulate(2e11, 0.1, 1e-5, motion)
    gaps = []
    for factor in (1.0, 10.0, 100.0):
        engine = ServoBeamEngine(rig, servo=rig.servo.with_values(kp=rig.servo.kp * factor))
        run = engine.simulate(2e11, 0.1, 1e-5, motion)
        np.testing.assert_allclose(run.time_s, prescribed.time_s)
        gaps.append(np.abs(run.motor_rad - prescribed.motor_rad).max())
    assert gaps[0] > np.radians(2.0)  # the factory loop's sag and lag: degrees, not a rounding
    assert 4.0 < gaps[0] / gaps[1] and 4.0 < gaps[1] / gaps[2] < 25.0
    assert make_simulator("servo-beam", rig).name == "servo-beam"
    with pytest.raises(PlantError, match="servo"):
        ServoBeamEngine(replace(rig, servo=None))
