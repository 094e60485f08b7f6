"""The plan's animation (retarget.report.animation): links follow the simulated bodies, the rod is drawn from its
reduced coordinates and meets the links it is welded to, the ghosts sit at the targets, save/load round trip."""
from __future__ import annotations

import numpy as np
import pytest
import tiny_robot  # the optimizer tests' tiny robot (tests/optimize is on the path: conftest)

from retarget.errors import InputError
from retarget.report.animation import CENTRE_LINE_POINTS, load_animation

# The plans these tests run fork worker processes (the full-FEM checks, the robust members).
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def animation(tiny_report):
    return load_animation(tiny_report / "animation.npz")


def test_runs_links_and_parts(animation):
    assert animation.variants == ("naive", "zvd", "optimized")
    assert animation.links == ("world", "horn", "tip")
    assert animation.parts == ("rod",) and animation.tracked == ("tip",)
    n_v, n_f = 3, len(animation.times)
    assert animation.times[-1] == pytest.approx(0.6) and n_f == 31  # 50 frames per second
    assert animation.link_positions.shape == (n_v, n_f, 3, 3)
    assert animation.part_lines.shape == (n_v, n_f, 1, CENTRE_LINE_POINTS, 3)
    # The rod's radius comes from its mesh: 4 mm diameter.
    assert animation.part_radii[0] == pytest.approx(0.002, rel=1e-6)
    assert animation.sources["naive"] == animation.sources["optimized"] == "the plan's simulation"
    assert "simulated again" in animation.sources["zvd"]


def test_rod_meets_the_bodies_it_is_welded_to_and_bends(animation):
    tip = animation.links.index("tip")
    horn = animation.links.index("horn")
    lines = animation.part_lines[:, :, 0].astype(float)
    # The interfaces are the rod's end faces: their centres are the horn's and the tip's link origins (to the
    # coupling's reduced-model accuracy: 20 um on a 20 cm rod).
    assert np.max(np.abs(lines[:, :, -1] - animation.link_positions[:, :, tip])) < 2e-5
    assert np.max(np.abs(lines[:, :, 0] - animation.link_positions[:, :, horn])) < 2e-5
    # The tip's centre of mass is its link origin: it is the tracked position.
    assert np.max(np.abs(animation.link_positions[:, :, tip] - animation.tracked_positions[:, :, 0])) < 1e-7
    # Deformed, not a rigid link: the middle of the rod leaves the chord between its ends while it moves.
    chord_mid = 0.5 * (lines[:, :, 0] + lines[:, :, -1])
    bow = np.linalg.norm(lines[:, :, CENTRE_LINE_POINTS // 2] - chord_mid, axis=-1)
    assert bow.max() > 1e-5
    # Rod length is kept to within 1 % (a rigid-body transform of the reduced nodes would keep it exactly).
    length = np.linalg.norm(np.diff(lines, axis=2), axis=-1).sum(axis=-1)
    assert np.allclose(length, 0.2, rtol=1e-2)


def test_the_horn_turns_with_the_motor(animation, tiny_report):
    from scipy.spatial.transform import Rotation

    horn = animation.links.index("horn")
    q = animation.link_quaternions[0, :, horn].astype(float)
    pitch = Rotation.from_quat(q).as_rotvec()[:, 1]  # the motor's axis is y
    with np.load(tiny_report / "trajectories.npz") as data:
        time, angles = data["time"], data["naive_shafts"][:, 0]
    expected = np.interp(animation.times, time, angles)
    assert np.max(np.abs(pitch - expected)) < 2e-3  # the sampling of the animation [rad]


def test_ghost_at_target_and_deviations_from_the_report(animation, tiny_report):
    assert [animation.links[g] for g in animation.ghost_links] == ["tip"]
    assert np.max(np.abs(animation.ghost_positions[:, 0] - animation.target_positions[:, 0])) < 1e-6
    with np.load(tiny_report / "trajectories.npz") as data:
        for v, name in enumerate(animation.variants):
            distance = np.linalg.norm(data[f"{name}_positions"] - data["target_positions"], axis=-1)
            assert np.allclose(animation.deviations[v], distance, atol=1e-7)
            assert animation.metrics[name]["peak_deviation_m"] == pytest.approx(distance.max(), rel=1e-5)


def test_save_load_round_trip_and_select(animation, tmp_path):
    path = animation.save(tmp_path / "a.npz")
    back = load_animation(path)
    assert back.variants == animation.variants and back.links == animation.links
    assert np.array_equal(back.part_lines, animation.part_lines)
    assert np.array_equal(back.visuals.origin, animation.visuals.origin)
    two = back.select(["optimized", "naive"])
    assert two.variants == ("optimized", "naive")
    assert np.array_equal(two.link_positions[1], animation.link_positions[0])
    with pytest.raises(InputError, match="no variant 'zv'"):
        back.select(["zv"])
    with pytest.raises(InputError, match="no animation at"):
        load_animation(tmp_path / "missing.npz")


def test_urdf_found_as_the_simulator_finds_it(tmp_path):
    from retarget.report.animation import link_visuals

    # The optimizer tests' tiny robot keeps its URDF beside the params YAML.
    tiny_robot.write_tiny_robot(tmp_path)
    links = link_visuals(tmp_path / "tiny_rod.yaml", ["horn", "tip"], ["rod"])
    assert links.names == ("world", "horn", "tip") and links.body == (None, "horn", "tip")
    assert np.allclose(links.reference[2, :3, 3], [0.0, 0.0, 0.2])
    drummer = link_visuals("drummer", [], [])  # xacro expanded
    assert len(drummer.names) > 0
