"""Weight schedules and tracked-body weights from YAML and the command line."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from retarget.errors import InputError
from retarget.optimize.errors import WeightSyntaxError
from retarget.optimize.weights import (
    TrackedBodyWeights,
    WeightSchedule,
    merge_tracked_weights,
    parse_tracked_bodies,
    parse_weight_option,
)


def test_constant() -> None:
    w = WeightSchedule.parse(2.5)
    np.testing.assert_array_equal(w(np.array([-1.0, 0.0, 10.0])), 2.5)
    assert WeightSchedule.parse("2.5").values[0] == 2.5
    assert not w.is_zero and WeightSchedule.constant(0.0).is_zero


def test_step_holds_from_each_breakpoint() -> None:
    w = WeightSchedule.parse({"step": [[0.0, 1.0], [2.0, 100.0], [3.0, 1.0]]})
    t = np.array([-1.0, 0.0, 1.99, 2.0, 2.5, 3.0, 9.0])
    np.testing.assert_array_equal(w(t), [1, 1, 1, 100, 100, 1, 1])


def test_spline_interpolates_without_overshoot() -> None:
    w = WeightSchedule.parse({"spline": [[0.0, 0.0], [1.0, 1.0], [2.0, 1.0], [3.0, 0.0]]})
    t = np.linspace(-1, 4, 501)
    v = w(t)
    np.testing.assert_allclose(w(np.array([0.0, 1.0, 2.0, 3.0])), [0, 1, 1, 0], atol=1e-15)
    assert v.min() >= 0.0 and v.max() <= 1.0 + 1e-15
    assert w(np.array([-1.0]))[0] == 0.0 and w(np.array([4.0]))[0] == 0.0


@pytest.mark.parametrize("text", ["1.5", "step(0:1, 2:100, 3:1)", "spline(0:0, 1.5:2)"])
def test_text_and_yaml_round_trip(text: str) -> None:
    w = WeightSchedule.parse(text)
    again = WeightSchedule.parse(w.to_text())
    from_yaml = WeightSchedule.parse(yaml.safe_load(yaml.safe_dump(w.to_yaml())))
    for other in (again, from_yaml):
        assert other.kind == w.kind
        np.testing.assert_array_equal(other.times, w.times)
        np.testing.assert_array_equal(other.values, w.values)


@pytest.mark.parametrize("bad", [
    "-1", "abc", "step(0:1, 0:2)", "step(1:1, 0:2)", "step(0)", "ramp(0:1)", "step(0:1", "nan",
    {"step": []}, {"step": [[0, 1, 2]]}, {"ramp": [[0, 1]]}, {"step": [[0, 1]], "spline": [[0, 1]]}, True, None,
])
def test_rejects_malformed(bad: object) -> None:
    with pytest.raises(WeightSyntaxError):
        WeightSchedule.parse(bad)


def test_errors_are_input_errors() -> None:
    with pytest.raises(InputError):
        WeightSchedule.parse("oops")


def test_tracked_bodies_from_yaml() -> None:
    section = yaml.safe_load("""
tracked_bodies:
  - {link: tip_mass, position_weight: 1.0}
  - link: glass
    position_weight: {step: [[0.0, 1.0], [2.0, 100.0]]}
    orientation_weight: 0.5
""")
    bodies = parse_tracked_bodies(section["tracked_bodies"])
    assert [b.link for b in bodies] == ["tip_mass", "glass"]
    assert bodies[0].orientation.is_zero
    w_pos, w_ori = bodies[1].sample(np.array([1.0, 2.5]))
    np.testing.assert_array_equal(w_pos, [1.0, 100.0])
    np.testing.assert_array_equal(w_ori, [0.5, 0.5])


@pytest.mark.parametrize("entries", [
    [{"position_weight": 1.0}],
    [{"link": "a", "weight": 1.0}],
    [{"link": "a"}, {"link": "a"}],
    ["a"],
])
def test_tracked_bodies_rejects(entries: list) -> None:
    with pytest.raises(WeightSyntaxError):
        parse_tracked_bodies(entries)


def test_shipped_robot_yaml_parses() -> None:
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "config"
    files = sorted(config.glob("*.yaml"))
    if not files:
        pytest.skip("no robot YAML in config/")
    for path in files:
        section = yaml.safe_load(path.read_text()).get("retarget") or {}
        bodies = parse_tracked_bodies(section.get("tracked_bodies"))
        assert all(isinstance(b, TrackedBodyWeights) for b in bodies)


def test_weight_option_syntax() -> None:
    link, given = parse_weight_option("tip_mass:pos=1.0,ori=0.1")
    assert link == "tip_mass" and given["position"].values[0] == 1.0 and given["orientation"].values[0] == 0.1
    link, given = parse_weight_option("glass: ori = step(0:0, 2.5:10)")
    assert link == "glass" and set(given) == {"orientation"} and given["orientation"].kind == "step"
    for bad in ("tip_mass", "tip_mass:", ":pos=1", "tip:pos=1,pos=2", "tip:rot=1", "tip:pos=step(0:1,2:3"):
        with pytest.raises(WeightSyntaxError):
            parse_weight_option(bad)


def test_merge_overrides_only_named_keys() -> None:
    base = parse_tracked_bodies([{"link": "tip", "position_weight": 2.0, "orientation_weight": 0.3}])
    merged = merge_tracked_weights(base, ["tip:ori=0", "motor:ori=0.5"])
    assert [b.link for b in merged] == ["tip", "motor"]
    assert merged[0].position.values[0] == 2.0 and merged[0].orientation.is_zero
    assert merged[1].position.values[0] == 1.0 and merged[1].orientation.values[0] == 0.5
