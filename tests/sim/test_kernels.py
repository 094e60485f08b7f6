"""The compiled kernels against the reference implementations: joint blocks vs ``JointConstraint.evaluate`` and
the Newton Jacobian vs finite differences, ``K(u) v`` vs the assembled stiffness."""
import numpy as np
import pytest

from sim_checks import assert_newton_jacobian_matches_fd

from retarget.model.robot import RobotBuilder
from retarget.sim.assembly import joint_pack, joint_terms
from retarget.sim.kernels import forces_and_stiffness_product
from retarget.sim.system import build_system


def all_kinds_chain():
    """Every joint kind, motors on a hinge and a slider, the world on either side (over-constrained: FD only)."""
    b = RobotBuilder("kinds", gravity=(0.0, 0.0, -9.81))
    inertia = np.diag([1.0, 2.0, 3.0]) * 1e-4
    for i, name in enumerate("ABCDE"):
        b.add_link(name, 0.1 + 0.01 * i, (0.1 * (i + 1), 0.01 * i, 0.02), inertia)
    b.add_joint("j_hinge", "hinge", None, "A", (0.05, 0.0, 0.0), (0.0, 0.3, 1.0), motor=True)
    b.add_joint("j_slide", "prismatic", "A", "B", (0.15, 0.0, 0.0), (1.0, 0.2, 0.0), motor=True)
    b.add_joint("j_univ", "universal", "B", "C", (0.25, 0.0, 0.0), (0.0, 0.0, 1.0), axis2=(0.0, 1.0, 0.0))
    b.add_joint("j_ball", "ball", "C", "D", (0.35, 0.0, 0.0))
    b.add_joint("j_fixed", "fixed", "D", "E", (0.45, 0.0, 0.0), (0.2, 0.0, 1.0))
    b.add_joint("j_world", "hinge", "E", None, (0.55, 0.0, 0.0), (0.0, 1.0, 0.0))
    b.add_joint("j_plain", "prismatic", "B", "D", (0.3, 0.0, 0.0), (0.0, 1.0, 0.0))
    model = b.build()
    return build_system(model)


SYSTEM = all_kinds_chain()


def _point(system, seed):
    rng = np.random.default_rng(seed)
    u = system.reference_u() + 1e-2 * rng.normal(size=system.n_u)
    v = rng.normal(size=system.n_v)
    lam = rng.normal(size=system.n_lambda)
    nm = len(system.motors)
    return u, v, lam, 0.3 * rng.normal(size=nm), rng.normal(size=nm)


def test_joint_kernel_matches_reference_evaluate():
    system = SYSTEM
    u, v, lam, th, thd = _point(system, 0)
    pack = joint_pack(system)
    assert pack.n == len(system.constraints)
    jt = joint_terms(pack, u, v, lam, th, thd, 7.0, True)
    for j, k in enumerate(pack.blocks):
        blk = system.constraints[k]
        y = np.concatenate([u[idx] for idx in system.slot_u[k]])
        c, cy = blk.evaluate(y, th[blk.motor] if blk.motor >= 0 else 0.0)
        assert np.allclose(jt.c[j, : blk.size], c, rtol=0, atol=1e-14)
        sides = [s for s in range(2) if pack.bodies[j, s] >= 0]
        ours = np.concatenate([jt.c_u[j, : blk.size, s] for s in sides], axis=1)
        assert np.allclose(ours, cy, rtol=0, atol=1e-13)


def test_newton_jacobian_of_every_joint_kind_matches_finite_differences():
    system = SYSTEM
    u, v, lam, th, thd = _point(system, 1)
    rng = np.random.default_rng(2)
    s = np.concatenate([u, v, lam])
    ub = u + 1e-4 * rng.normal(size=system.n_u)
    vb = v + 1e-2 * rng.normal(size=system.n_v)
    assert_newton_jacobian_matches_fd(system, s, ub, vb, 1e-3, 30.0, th, thd)


def test_matrix_free_product_is_reexported_from_fem():
    from retarget.fem.neo_hookean import forces_stiffness_product_numba

    assert forces_and_stiffness_product is forces_stiffness_product_numba


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
