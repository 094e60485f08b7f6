"""retarget.sim.reduced: deformable bodies in relative coordinates, mass-PCA bases, cubature (docs/reduced.md).

Layers: :mod:`.basis` (rigid + mass-PCA modes), :mod:`.tensors` (constant inertia tensors, reduced interfaces),
:mod:`.cubature` (reduced Neo-Hookean forces), :mod:`.dynamics` (compiled relative inertial forces with exact
Jacobians), :mod:`.system` (the reduced system built from an absolute one), :mod:`.stepper` (BDF DAE step, exact
dense Newton Jacobian, quasi-static solve: the reference), :mod:`.kernels` + :mod:`.compiled` (the numba engine:
constraint rows, residual and exact Jacobian, condensed chord Newton, time loop), :mod:`.engine` (its Python
face and the optimizer adapter), :mod:`.artifact` (the versioned reduced-model file), :mod:`.training` (from full
simulations to a reduced system, runs, comparison).
"""

from retarget.sim.reduced.artifact import FORMAT_VERSION, load_reduced, provenance, save_reduced
from retarget.sim.reduced.basis import DEFAULT_VARIANCE, ReducedBasis, mass_pca_basis, rigid_modes
from retarget.sim.reduced.cubature import Cubature, cubature_forces, train_cubature
from retarget.sim.reduced.dynamics import body_force, body_forces
from retarget.sim.reduced.engine import (
    DEFAULT_DT,
    CompiledLinearization,
    CompiledReducedEngine,
    CompiledRun,
    linearize_compiled,
    pack_system,
    residual_compiled,
    simulate_compiled,
)
from retarget.sim.reduced.errors import ReducedModelError, StaleReducedModelError, TrainingDataError
from retarget.sim.reduced.stepper import (
    ReducedLinearization,
    ReducedState,
    history_jacobian,
    linearize,
    residual_and_jacobian,
    solve_static,
    step,
)
from retarget.sim.reduced.system import ReducedBody, ReducedSystem, build_reduced_system, reference_bodies
from retarget.sim.reduced.tensors import InertiaTensors, ReducedInterface, inertia_tensors, reduce_interface
from retarget.sim.reduced.training import ReducedResult, build_from_result, compare_tracked, simulate_reduced

__all__ = [
    "DEFAULT_DT",
    "DEFAULT_VARIANCE",
    "FORMAT_VERSION",
    "CompiledLinearization",
    "CompiledReducedEngine",
    "CompiledRun",
    "body_force",
    "linearize_compiled",
    "load_reduced",
    "pack_system",
    "provenance",
    "residual_compiled",
    "save_reduced",
    "simulate_compiled",
    "Cubature",
    "InertiaTensors",
    "ReducedBasis",
    "ReducedBody",
    "ReducedInterface",
    "ReducedLinearization",
    "ReducedModelError",
    "ReducedResult",
    "ReducedState",
    "ReducedSystem",
    "StaleReducedModelError",
    "TrainingDataError",
    "body_forces",
    "build_from_result",
    "build_reduced_system",
    "compare_tracked",
    "cubature_forces",
    "history_jacobian",
    "inertia_tensors",
    "linearize",
    "mass_pca_basis",
    "reduce_interface",
    "reference_bodies",
    "residual_and_jacobian",
    "rigid_modes",
    "simulate_reduced",
    "solve_static",
    "step",
    "train_cubature",
]
