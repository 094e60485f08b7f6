"""A cheap single_rod reduced model for the twin tests, built once per session.

No full simulation: the basis is the rod's 6 rigid modes plus its lowest cantilever modes (base nodes clamped,
computed on the coarse mesh ``--mesh-scale 0.2``), with a cubature trained on random modal states, written as a
``retarget reduce``-format artifact (with its ``mesh_scale``) so the twin loads it exactly as a user's file. The
artifact records the robot's servo (an XM430-W210 in the loop, config/single_rod.yaml) as a trained one does;
``ideal=True`` records perfect position sources instead (a model trained before the servo model: stale).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

MESH_SCALE = 0.2
N_MODES = 4


def cantilever_reduced_artifact(out: Path, n_modes: int = N_MODES, seed: int = 0, ideal: bool = False) -> Path:
    """Write a single_rod artifact with rigid + clamped-base bending modes; returns its path."""
    import scipy.sparse.linalg as spla

    from retarget.sim.reduced.artifact import save_reduced
    from retarget.sim.reduced.basis import ReducedBasis, _m_orthonormalize, rigid_modes
    from retarget.sim.reduced.store import load_robot_system
    from retarget.sim.reduced.cubature import train_cubature
    from retarget.sim.reduced.system import reference_bodies

    yaml_path, model, system = load_robot_system("single_rod", MESH_SCALE)
    refs = reference_bodies(system)
    rng = np.random.default_rng(seed)
    bases, cubs = [], []
    for d, body in enumerate(system.deformable):
        x = body.rest_positions.reshape(-1, 3)
        free_nodes = x[:, 2] > x[:, 2].min() + 1e-9
        free = np.repeat(free_nodes, 3)
        k0 = body.elastic.tangent_stiffness(np.zeros(body.n_dofs)).tocsc()
        m = body.mass_matrix.tocsc()
        # A seeded start vector: the rod's bending modes come in pairs of equal frequency, and ARPACK's random start
        # would pick another basis of each pair (and another cubature) every time.
        v0 = np.random.default_rng([seed, d]).standard_normal(int(free.sum()))
        vals, vecs = spla.eigsh(k0[free][:, free], k=n_modes, M=m[free][:, free], sigma=0.0, which="LM", v0=v0)
        shapes = np.zeros((body.n_dofs, n_modes))
        shapes[free] = vecs[:, np.argsort(vals)]
        local = body.rest_positions - system.rigid[refs[d]].reference_com
        modes = _m_orthonormalize(np.hstack([rigid_modes(local, body.mass_matrix), shapes]), body.mass_matrix)
        amp = np.abs(modes[:, 6:]).max(axis=0)
        zs = np.zeros((40, modes.shape[1]))
        zs[:, 6:] = rng.normal(size=(40, n_modes)) * (0.05 / amp) / np.sqrt(n_modes)
        cubs.append(train_cubature(body.elastic, modes, zs, tolerance=1e-3))
        bases.append(ReducedBasis(modes, 6, 1.0, np.sqrt(np.sort(np.abs(vals))) / (2 * np.pi)))
    if ideal:
        from retarget.model.servo import IDEAL, SERVO_MODELS
        from retarget.sim.system import with_servos

        system = with_servos(system, [SERVO_MODELS[IDEAL]] * len(system.motors))
    return save_reduced(out, system, bases, cubs, yaml_path, model.name, {"mesh_scale": MESH_SCALE,
                                                                          "basis": "cantilever modes (tests)"})


@pytest.fixture(scope="session")
def rod_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The single_rod test artifact (coarse mesh, 4 cantilever modes)."""
    return cantilever_reduced_artifact(tmp_path_factory.mktemp("twin_model") / "single_rod_twin.npz")


@pytest.fixture
def ideal_rod_artifact(tmp_path: Path) -> Path:
    """A single_rod artifact recording perfect position sources (1 mode: cheap), stale for the robot's servo."""
    return cantilever_reduced_artifact(tmp_path / "single_rod_ideal.npz", n_modes=1, ideal=True)


@pytest.fixture(scope="session")
def rod_twin_model(rod_artifact: Path):
    """The artifact loaded as a :class:`retarget.twin.TwinModel`."""
    from retarget.twin.model import ReducedModelSource, load_twin_model

    return load_twin_model("single_rod", ReducedModelSource(rod_artifact, "file"))
