"""The coupled servo–structure modes (:mod:`retarget.sim.servo_modes`): the eigen-solvers against the one-DOF
oscillator of a rigid arm on a servo (gravity, back EMF, derivative gain, integral action), the full FEM of a rod
on a servo against Euler–Bernoulli theory, a reduced model against the full FEM, and ideal servos (no servo mode)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.fem.beam_theory import servo_beam_modes
from retarget.fem.model_card import SERVO_MODE_WARN
from retarget.model import library
from retarget.model.loader import load_robot
from retarget.model.robot import RobotBuilder
from retarget.model.servo import IDEAL, SERVO_MODELS
from retarget.sim.scenarios import box_inertia, build_rod_on_motor, build_two_motor_rod
from retarget.sim.servo_modes import (
    coupled_modes,
    linearize_equilibrium,
    linearize_reduced_equilibrium,
    rod_on_servo_beam,
    servo_card,
    servo_modes,
)
from retarget.sim.system import build_system

XM430 = SERVO_MODELS["XM430-W210"]
GRAVITY = 9.81


def _arm(servo, mass: float, reach: float, gravity: float = GRAVITY):
    """A rigid box on a servo (hinge about y at the origin), its centre of mass ``reach`` [m] above the pivot
    (below for a negative reach)."""
    b = RobotBuilder("arm", gravity=(0.0, 0.0, -gravity))
    b.add_link("arm", mass, (0.0, 0.0, reach), box_inertia(mass, (0.02, 0.02, 2 * abs(reach) + 0.01)))
    b.add_joint("m", "hinge", None, "arm", (0.0, 0.0, 0.0), (0.0, 1.0, 0.0), motor=True)
    b.set_servo("m", servo)
    return b.build()


def _one_dof(servo, mass: float, reach: float) -> tuple[float, float, float]:
    """(inertia about the pivot [kg m²], stiffness [N m/rad], damping [N m s/rad]) of the arm on its servo:
    ``I = J + I_yy + m r²``, ``k = kp − m g r`` (an arm above the pivot falls: gravity's negative stiffness),
    ``c = stall / no_load + kd + viscous``."""
    inertia = servo.rotor_inertia + box_inertia(mass, (0.02, 0.02, 2 * abs(reach) + 0.01))[1, 1] + mass * reach**2
    return inertia, servo.kp - mass * GRAVITY * reach, servo.back_emf_damping + servo.kd + servo.viscous_friction


@pytest.mark.parametrize(("servo", "mass", "reach"), [
    (XM430, 0.3, 0.1),  # standing: k = kp − m g r
    (XM430, 0.3, -0.1),  # hanging: k = kp + m g r
    (XM430.with_values(kd=0.05, viscous_friction=0.02), 0.5, -0.15),
    (XM430, 0.01, 0.01),  # a light arm: the back EMF overdamps it (ζ > 1, two real eigenvalues)
])
def test_a_rigid_arm_on_a_servo_is_the_one_dof_oscillator(servo, mass, reach):
    inertia, stiffness, damping = _one_dof(servo, mass, reach)
    omega = math.sqrt(stiffness / inertia)
    zeta = damping / (2.0 * math.sqrt(stiffness * inertia))
    lin = linearize_equilibrium(build_system(_arm(servo, mass, reach)))
    rows, modes = servo_modes(lin)
    assert len(modes.frequencies) == 1 and len(rows) == 1  # the hinge and the motor row leave one DOF
    row = rows[0]
    assert row.motor == "m" and row.mode == 0
    assert row.frequency == pytest.approx(omega / (2 * math.pi), rel=1e-9)
    assert row.damping_ratio == pytest.approx(zeta, rel=1e-7)
    # The servo spring's share of the strain energy: kp over the total (gravity's part is the rest).
    assert row.share == pytest.approx(servo.kp / stiffness, rel=1e-9)
    if mass == 0.01:
        assert row.damping_ratio > 1.0
    # On the card: no reference, and no structure's own mode (an ideal servo holds the arm rigidly).
    (card,) = servo_card(_arm(servo, mass, reach))
    assert card.f_model == pytest.approx(row.frequency, rel=1e-12) and card.mode == 1
    assert card.reference == "no reference" and card.error is None and card.f_ideal_servo is None


def test_integral_action_adds_the_third_order_root():
    servo = XM430.with_values(ki=40.0, kd=0.02)
    mass, reach = 0.3, -0.1
    inertia, stiffness, damping = _one_dof(servo, mass, reach)
    lin = linearize_equilibrium(build_system(_arm(servo, mass, reach)))
    rows, modes = servo_modes(lin)
    # Undamped: the spring alone (the integral state has no mass and no spring).
    assert rows[0].frequency == pytest.approx(math.sqrt(stiffness / inertia) / (2 * math.pi), rel=1e-9)
    # Damped: the oscillating pair of I s³ + c s² + k s + ki = 0 (ι̇ = g − θ).
    roots = np.roots([inertia, damping, stiffness, servo.ki])
    pair = roots[np.argmax(roots.imag)]
    assert rows[0].damping_ratio == pytest.approx(-pair.real / abs(pair), rel=1e-7)


def test_an_ideal_servo_has_no_servo_mode():
    ideal = SERVO_MODELS[IDEAL]
    assert servo_card(_arm(ideal, 0.3, 0.1)) == ()
    model = build_rod_on_motor().with_servos([ideal])
    assert servo_card(model) == ()
    lin = linearize_equilibrium(build_system(model))
    modes = coupled_modes(lin, 4, damped=())
    assert lin.servo.n_servos == 0 and modes.shares.shape == (4, 0)
    # The structure's own modes: the first bending pair of the clamped rod with its tip mass.
    modelled = servo_card(build_rod_on_motor().with_servos([XM430]))[0]
    assert modelled.f_ideal_servo == pytest.approx(modes.frequencies[0], rel=0.02)
    assert modelled.f_model < modelled.f_ideal_servo


@pytest.fixture(scope="module")
def single_rod_coarse():
    """single_rod (70 cm rod, 100 g tip, XM430-W210) on a tenth of its mesh, stiffness-calibrated."""
    return load_robot(library.resolve_robot("single_rod"), mesh_scale=0.1)


def test_the_beam_model_of_single_rod_reads_its_geometry(single_rod_coarse):
    beam = rod_on_servo_beam(single_rod_coarse)
    assert beam is not None
    assert beam.length == 0.7 and beam.youngs_modulus == 200e9  # nominal, not the calibrated mesh's
    assert beam.hub_stiffness == XM430.kp and beam.axial_gravity == pytest.approx(GRAVITY)
    assert beam.hub_offset == pytest.approx(0.027, abs=1e-9)  # the rod's clamp 27 mm above the shaft
    assert beam.tip_mass == 0.1 and 0.0 < beam.tip_offset < 0.01
    assert beam.hub_inertia > XM430.rotor_inertia
    # Tilted off gravity there is no beam-theory reference; with two motors neither.
    assert rod_on_servo_beam(single_rod_coarse, [0.3]) is None
    assert rod_on_servo_beam(build_two_motor_rod().with_servos([XM430, XM430])) is None


def test_the_full_fem_modes_are_the_same_in_every_call(single_rod_coarse):
    """The sparse eigensolver starts from a fixed vector (ARPACK's own start is random): the same equilibrium gives
    the same mode shapes, signs included, to the last bit."""
    lin = linearize_equilibrium(build_system(single_rod_coarse))
    assert lin.n_v > 800  # the sparse path
    first, again = coupled_modes(lin, 3), coupled_modes(lin, 3)
    assert np.array_equal(first.frequencies, again.frequencies)
    assert np.array_equal(first.shapes, again.shapes)


def test_the_full_fem_rod_on_a_servo_matches_beam_theory(single_rod_coarse):
    """The coupled mode of the rod swinging on the servo's spring: full FEM (14 x 8 mesh, calibrated) within 1 %
    of Euler–Bernoulli with gravity's axial load (-0.40 % measured; -0.10 % at mesh scale 0.25, -0.03 % at 0.5,
    -0.001 % at the default mesh: docs/fem.md)."""
    rows = servo_card(single_rod_coarse)
    assert len(rows) == 1
    row = rows[0]
    assert row.reference.startswith("Euler-Bernoulli") and row.mode == 1
    assert abs(row.error) < 0.01
    beam = servo_beam_modes(rod_on_servo_beam(single_rod_coarse))
    assert row.f_reference == pytest.approx(beam.frequencies[0], rel=1e-12)
    assert row.share == pytest.approx(beam.shares[0], abs=0.01)
    # Back EMF (3 N m / 8.06 rad/s) and the rod's Rayleigh damping: ζ ≈ 0.115 (measured 0.1143).
    assert 0.10 < row.damping_ratio < 0.13
    # The structure's own mode: the clamped rod's first bending with the tip mass (ideal servo), -1.27 % on this
    # mesh (the bending alone; -0.34 % at scale 0.25, -0.12 % at 0.5).
    ideal = servo_beam_modes(replace(rod_on_servo_beam(single_rod_coarse), hub_stiffness=math.inf))
    assert row.f_ideal_servo == pytest.approx(ideal.frequencies[0], rel=0.02)
    assert row.f_ideal_servo > 1.8 * row.f_model


@pytest.fixture(scope="module")
def servo_rod_reduced():
    """The rod on a motor with every term of the servo law, and its reduced model (3 modes) trained from a short
    full run with the servo in the loop (as tests/optimize/rod_fixtures.py's ``servo_rod_systems``)."""
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.simulate import simulate

    servo = XM430.with_values(ki=40.0, kd=0.05, kff1=0.02, coulomb_friction=0.03, viscous_friction=0.01)
    model = build_rod_on_motor().with_servos([servo])
    system = build_system(model)
    motors = FunctionMotors(lambda t: [0.3 * np.sin(10 * t) ** 2], lambda t: [3.0 * np.sin(20 * t)])
    rs, _, _ = build_from_result(system, simulate(system, motors, 0.08, 2e-3), n_modes=3)
    return model, rs


def test_the_reduced_coupled_mode_matches_the_full_fem(servo_rod_reduced):
    model, rs = servo_rod_reduced
    rows = servo_card(model, rs)
    assert len(rows) == 1
    row = rows[0]
    assert row.model.startswith("reduced") and row.reference.startswith("full FEM")
    # Within the card's warning threshold by far (2e-5 measured).
    assert abs(row.error) < 1e-3 < SERVO_MODE_WARN and not row.warning
    full_rows, _ = servo_modes(linearize_equilibrium(build_system(model)))
    assert row.f_reference == pytest.approx(full_rows[0].frequency, rel=1e-12)
    # Damping (back EMF, kd, friction linearized, Rayleigh) and share alike in both models.
    assert row.damping_ratio == pytest.approx(full_rows[0].damping_ratio, rel=1e-3)
    assert row.share == pytest.approx(full_rows[0].share, abs=1e-3)
    # The dense (reduced) and sparse (full) damped solvers: the same linearization solved both ways.
    red = linearize_reduced_equilibrium(rs)
    assert red.servo.n_servos == 1 and red.springs[0] == pytest.approx(XM430.kp, rel=1e-12)


def test_goals_move_the_equilibrium(single_rod_coarse):
    row0 = servo_card(single_rod_coarse)[0]
    row = servo_card(single_rod_coarse, goals=[0.3])[0]
    assert row.goal == 0.3 and row.reference == "no reference" and row.error is None
    # Tilted, the rod's weight pulls less against the spring: the coupled mode stiffens.
    assert row.f_model > row0.f_model
    with pytest.raises(InputError, match="goals"):
        servo_card(single_rod_coarse, goals=[0.1, 0.2])


def test_the_fit_rigs_xm540_mode_is_overdamped_and_matches_beam_theory():
    """The fit rig's XM540-W270 (kp 48.8 N m/rad, back EMF 10.6 / 3.14 = 3.4 N m s/rad) on the same rod: its servo
    mode is the rotor and horn against the rod's first bending at 15 Hz, overdamped (two real eigenvalues, the second
    found by a shift near ω² / s₁: ζ = 2.39 measured at mesh scale 0.25)."""
    model = load_robot(library.resolve_robot("fit_rig"), mesh_scale=0.1)
    (row,) = servo_card(model)
    assert row.servo == "XM540-W270" and row.reference.startswith("Euler-Bernoulli")
    assert abs(row.error) < 0.01 and 14.5 < row.f_model < 15.5 and row.share > 0.5
    assert 2.0 < row.damping_ratio < 2.8
