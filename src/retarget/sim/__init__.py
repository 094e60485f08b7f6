"""retarget.sim: the full-space multibody simulator (rigid bodies two-way coupled to quadratic-tet FEM parts).

Build a :class:`System` from a :class:`retarget.model.RobotModel` (:func:`build_system`), then either run
:func:`simulate` (→ :class:`SimulationResult`), step by hand (:func:`step`, :func:`initial_state`), or solve a
quasi-static equilibrium (:func:`solve_static`). The BDF residual and its exact Jacobian
(:func:`residual_and_jacobian`, :func:`history_jacobian`, :func:`linearize`) are public for the adjoint.
See docs/physics.md.
"""
from retarget.sim.dae import ConstraintTerms, Linearization, constraint_terms, history_jacobian, residual_and_jacobian
from retarget.sim.errors import NewtonFailed, SimulationDiverged, SimulationError
from retarget.sim.integrator import (
    BDF1,
    BDF2,
    FactorizationCache,
    State,
    StepOptions,
    initial_state,
    linearize,
    simulate_states,
    solve_newton,
    step,
)
from retarget.sim.motors import ConstantMotors, FunctionMotors, MotorTrajectory, SplineMotors
from retarget.sim.result import SimulationResult
from retarget.sim.simulate import simulate
from retarget.sim.statics import solve_static
from retarget.sim.system import DeformableBody, RigidBody, System, build_system

__all__ = [
    "BDF1",
    "BDF2",
    "ConstantMotors",
    "ConstraintTerms",
    "DeformableBody",
    "FactorizationCache",
    "FunctionMotors",
    "Linearization",
    "MotorTrajectory",
    "NewtonFailed",
    "RigidBody",
    "SimulationDiverged",
    "SimulationError",
    "SimulationResult",
    "SplineMotors",
    "State",
    "StepOptions",
    "System",
    "build_system",
    "constraint_terms",
    "history_jacobian",
    "initial_state",
    "linearize",
    "residual_and_jacobian",
    "simulate",
    "simulate_states",
    "solve_newton",
    "solve_static",
    "step",
]
