"""Links with mass welded by fixed joints merge into one rigid body (fixture: a bracket on a servo horn holding a
horizontal rod; a tracked marker on the bracket; a cap on the tip mass)."""
from pathlib import Path

import numpy as np
import pytest

from retarget.model.loader import load_robot
from retarget.model.robot import ModelError

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bracket_rod.yaml"


def _momentum(links, omega, velocity, point):
    """Linear and angular momentum about ``point`` of links moving as one rigid body (twist at ``point``)."""
    p, h = np.zeros(3), np.zeros(3)
    for link in links:
        r = link.com - point
        v = velocity + np.cross(omega, r)
        p += link.mass * v
        h += link.inertia @ omega + link.mass * np.cross(r, v)
    return p, h


def test_merged_body_carries_the_welded_links_mass_and_inertia():
    merged = load_robot(FIXTURE)
    separate = load_robot(FIXTURE, merge_fixed=False)
    assert [link.name for link in merged.links] == ["servo", "horn", "marker", "tip_mass"]
    assert merged.merged_links == {"bracket": "horn", "cap": "tip_mass"}
    assert separate.merged_links == {} and len(separate.links) == 6
    groups = {"horn": ["horn", "bracket"], "tip_mass": ["tip_mass", "cap"]}
    rng = np.random.default_rng(3)
    for body, members in groups.items():
        composite = merged.link(body)
        parts = [separate.link(n) for n in members]
        # The link frame stays the parent's (link poses, joint anchors).
        assert np.allclose(composite.frame_position, parts[0].frame_position)
        assert np.allclose(composite.frame_rotation, parts[0].frame_rotation)
        for _ in range(3):
            omega, velocity, point = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3) * 0.1
            p_ref, h_ref = _momentum(parts, omega, velocity, point)
            p, h = _momentum([composite], omega, velocity, point)
            np.testing.assert_allclose(p, p_ref, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(h, h_ref, rtol=1e-10, atol=1e-15)


def test_references_move_to_the_merged_body_and_exceptions_stay_separate():
    model = load_robot(FIXTURE)
    (part,) = model.flexible_parts
    # The rod's interface was on the bracket; the tip mass, welded to the rod the FEM part replaces, is not merged.
    assert [itf.link for itf in part.interfaces] == ["horn", "tip_mass"]
    # The tracked marker, welded to the bracket, keeps its own body; world-welded servo too.
    assert model.joint("marker_mount").parent == "horn"
    assert model.joint("mount").parent is None and model.joint("mount").child == "servo"
    assert {j.name for j in model.joints} == {"mount", "base_yaw", "marker_mount"}
    with pytest.raises(ModelError, match="welded by a fixed joint into the rigid body 'horn'"):
        model.link("bracket")


@pytest.mark.slow
def test_merged_and_separate_links_simulate_the_same_motion():
    """The weld's 6 constraint rows and the welded body's 6 coordinates describe exactly the rigid composite: the
    two discretizations of the same motion differ by O(dt²), ~1e-3 of the time-discretization error itself
    (measured over 0.15 s: tip 7.7e-8 m at 1 ms, 2.1e-8 m at 0.5 ms, against 1.9e-4 m between the two steps)."""
    from retarget.sim.integrator import StepOptions
    from retarget.sim.motors import FunctionMotors
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    motors = FunctionMotors(lambda t: np.array([0.6 * np.sin(np.pi * t / 0.1) ** 2 if t < 0.1 else 0.0]),
                            lambda t: np.array([0.6 * np.pi / 0.1 * np.sin(2 * np.pi * t / 0.1) if t < 0.1 else 0.0]))
    options = StepOptions(tolerance=1e-11)
    from retarget.model.servo import IDEAL, SERVO_MODELS

    # The motors prescribed (ideal servos): the weld's equivalence, not the servos' lag, is under test.
    systems = {merge: build_system(load_robot(FIXTURE, merge_fixed=merge).with_servos([SERVO_MODELS[IDEAL]]))
               for merge in (True, False)}
    assert len(systems[True].rigid) == 4 and len(systems[False].rigid) == 6
    diff, path = {}, {}
    for dt in (1e-3, 5e-4):
        merged, separate = (simulate(systems[m], motors, 0.1, dt, options=options) for m in (True, False))
        every = round(1e-3 / dt)
        # The marker and the horn are driven kinematically: the same up to the joints' drift (the horn's composite
        # centre of mass sits off the hinge axis: 6.8e-8 m at 1 ms, 8.5e-9 m at 0.5 ms).
        for name in ("marker", "horn"):
            np.testing.assert_allclose(merged.link_origin(name), separate.link_origin(name), rtol=0, atol=1e-6)
        tip = separate.link_origin("tip_mass")[::every]
        assert np.abs(tip - tip[0]).max() > 0.05  # the yaw swings the rod
        diff[dt] = np.abs(merged.link_origin("tip_mass")[::every] - tip).max()
        path[dt] = tip
    discretization = np.abs(path[1e-3] - path[5e-4]).max()
    assert diff[1e-3] / diff[5e-4] > 3.0  # O(dt²)
    assert diff[1e-3] < 2e-3 * discretization
