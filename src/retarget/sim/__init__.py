"""retarget.sim: the full-space multibody simulator (rigid bodies two-way coupled to quadratic-tet FEM parts).

Build a :class:`System` from a :class:`retarget.model.RobotModel` (:func:`build_system`), then either run
:func:`simulate` (→ :class:`SimulationResult`), step by hand (:func:`step`, :func:`initial_state`), or solve a
quasi-static equilibrium (:func:`solve_static`), or the coupled servo–structure modes at one (:func:`servo_card`,
:mod:`retarget.sim.servo_modes`). The BDF residual and its exact Jacobian
(:func:`residual_and_jacobian` of a :class:`StepInputs`, :func:`history_jacobian`, :func:`linearize`) are public for the adjoint, and
:class:`Engine` (:mod:`retarget.sim.engine`) is the stepping protocol with exact step sensitivities that either
engine is driven through; :mod:`retarget.sim.adapters` puts the engines behind it (:func:`planner_engine`, the one
the planner runs on a reduced model). See docs/physics.md.
"""
from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from retarget._lazy import lazy_exports

# Public names → defining module. Imported on first access (PEP 562) so that `import retarget.sim.commands`
# (every `retarget` CLI start) does not pull numba and scipy.
_EXPORTS: dict[str, str] = {
    "AbsoluteEngine": "adapters",
    "ReferenceReducedEngine": "adapters",
    "planner_engine": "adapters",
    "reduced_engine": "adapters",
    "ConstraintTerms": "dae",
    "Linearization": "dae",
    "constraint_terms": "dae",
    "history_jacobian": "dae",
    "residual_and_jacobian": "dae",
    "Engine": "engine",
    "EngineState": "engine",
    "StepSensitivity": "engine",
    "SystemEngine": "engine",
    "NewtonFailed": "errors",
    "SimulationDiverged": "errors",
    "SimulationError": "errors",
    "BDF1": "bdf",
    "BDF2": "bdf",
    "StepInputs": "bdf",
    "step_inputs": "bdf",
    "FactorizationCache": "integrator",
    "State": "integrator",
    "StepOptions": "integrator",
    "initial_state": "integrator",
    "linearize": "integrator",
    "simulate_states": "integrator",
    "solve_newton": "integrator",
    "step": "integrator",
    "ConstantMotors": "motors",
    "FunctionMotors": "motors",
    "MotorTrajectory": "motors",
    "SplineMotors": "motors",
    "SimulationResult": "result",
    "simulate": "simulate",
    "servo_card": "servo_modes",
    "solve_static": "statics",
    "DeformableBody": "system",
    "RigidBody": "system",
    "System": "system",
    "build_system": "system",
}

if TYPE_CHECKING:
    from retarget.sim.adapters import AbsoluteEngine, ReferenceReducedEngine, planner_engine, reduced_engine
    from retarget.sim.bdf import BDF1, BDF2, StepInputs, step_inputs
    from retarget.sim.dae import ConstraintTerms, Linearization, constraint_terms, history_jacobian, residual_and_jacobian
    from retarget.sim.engine import Engine, EngineState, StepSensitivity, SystemEngine
    from retarget.sim.errors import NewtonFailed, SimulationDiverged, SimulationError
    from retarget.sim.integrator import (
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
    from retarget.sim.servo_modes import servo_card
    from retarget.sim.simulate import simulate
    from retarget.sim.statics import solve_static
    from retarget.sim.system import DeformableBody, RigidBody, System, build_system


class _Package(types.ModuleType):
    """This package's module type: the submodule ``simulate`` shares its name with the function it defines;
    importing the submodule must not replace the package attribute ``simulate`` (the function, as before)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "simulate" and isinstance(value, types.ModuleType):
            value = value.simulate
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "AbsoluteEngine",
    "BDF1",
    "BDF2",
    "ConstantMotors",
    "ConstraintTerms",
    "DeformableBody",
    "Engine",
    "EngineState",
    "FactorizationCache",
    "FunctionMotors",
    "Linearization",
    "MotorTrajectory",
    "NewtonFailed",
    "ReferenceReducedEngine",
    "RigidBody",
    "SimulationDiverged",
    "SimulationError",
    "SimulationResult",
    "SplineMotors",
    "State",
    "StepInputs",
    "StepOptions",
    "StepSensitivity",
    "System",
    "SystemEngine",
    "build_system",
    "constraint_terms",
    "history_jacobian",
    "initial_state",
    "linearize",
    "planner_engine",
    "reduced_engine",
    "residual_and_jacobian",
    "servo_card",
    "simulate",
    "simulate_states",
    "solve_newton",
    "solve_static",
    "step",
    "step_inputs",
]
