"""retarget.sim.reduced: deformable bodies in relative coordinates, mass-PCA bases, cubature (docs/reduced.md).

Layers: :mod:`.basis` (rigid + mass-PCA modes), :mod:`.tensors` (constant inertia tensors, reduced interfaces),
:mod:`.cubature` (reduced Neo-Hookean forces), :mod:`.dynamics` (compiled relative inertial forces with exact
Jacobians), :mod:`.system` (the reduced system built from an absolute one), :mod:`.stepper` (BDF DAE step, exact
dense Newton Jacobian, quasi-static solve: the reference), :mod:`.kernels` + :mod:`.compiled` (the numba engine:
constraint rows, residual and exact Jacobian, condensed chord Newton, time loop), :mod:`.engine` (its Python
face behind the ``Engine`` protocol of :mod:`retarget.sim.engine`), :mod:`.artifact` (the versioned reduced-model
file), :mod:`.store` (where artifacts live, finding and loading them for a robot), :mod:`.training` (from full
simulations to a reduced system, runs, comparison).

Names load on first use (PEP 562), so that the CLI finding ``retarget.sim.reduced.commands`` does not
import numba kernels and the artifact machinery.
"""
from __future__ import annotations

from retarget._lazy import lazy_exports

# Public names -> defining submodule.
_EXPORTS: dict[str, str] = {
    "DEFAULT_DT": "engine",
    "DEFAULT_VARIANCE": "basis",
    "FORMAT_VERSION": "artifact",
    "CompiledLinearization": "engine",
    "CompiledReducedEngine": "engine",
    "CompiledRun": "engine",
    "body_force": "dynamics",
    "linearize_compiled": "engine",
    "load_reduced": "artifact",
    "pack_system": "engine",
    "provenance": "artifact",
    "residual_compiled": "engine",
    "save_reduced": "artifact",
    "simulate_compiled": "engine",
    "Cubature": "cubature",
    "InertiaTensors": "tensors",
    "ReducedBasis": "basis",
    "ReducedBody": "system",
    "ReducedInterface": "tensors",
    "ReducedLinearization": "stepper",
    "ReducedModelError": "errors",
    "ReducedResult": "training",
    "ReducedState": "stepper",
    "ReducedSystem": "system",
    "StaleReducedModelError": "errors",
    "TrainingDataError": "errors",
    "body_forces": "dynamics",
    "build_from_result": "training",
    "build_reduced_system": "system",
    "compare_tracked": "training",
    "cubature_damping_derivative": "cubature",
    "cubature_force_directional": "cubature",
    "cubature_force_value": "cubature",
    "cubature_forces": "cubature",
    "reduced_gradients": "cubature",
    "history_jacobian": "stepper",
    "inertia_tensors": "tensors",
    "linearize": "stepper",
    "mass_pca_basis": "basis",
    "reduce_interface": "tensors",
    "reference_bodies": "system",
    "residual_and_jacobian": "stepper",
    "rigid_modes": "basis",
    "simulate_reduced": "training",
    "solve_static": "stepper",
    "step": "stepper",
    "train_cubature": "cubature",
}

__all__ = sorted(_EXPORTS)



__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
