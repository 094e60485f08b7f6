"""Tests of retarget.fem.model_card and `retarget check model`: the stiffness calibration brings the planner's
coarse training mesh (20 layers x 6 around) within the fidelity gate, the gate names the failing part, the card's
JSON is strict, its servo rows round-trip and warn without gating, and the command's exit codes follow the gate."""
from __future__ import annotations

import json

import numpy as np
import pytest

from retarget.cli import main
from retarget.errors import InputError
from retarget.fem import get_material
from retarget.fem.model_card import (
    SERVO_MODE_WARN,
    ModelCard,
    ModelFidelityError,
    ServoModeCard,
    check_fidelity,
    model_card,
)
from retarget.model import library
from retarget.model.loader import load_robot

TRAINING_MESH = {"rod": {"axial": 20, "around": 6}}


@pytest.fixture(scope="module")
def coarse_rods():
    """single_rod on the planner's training mesh, calibrated and not."""
    path = library.resolve_robot("single_rod")
    return (load_robot(path, resolution=TRAINING_MESH),
            load_robot(path, resolution=TRAINING_MESH, stiffness_calibration=False))


def test_calibration_brings_the_training_mesh_within_the_gate(coarse_rods):
    calibrated, raw = coarse_rods
    part, raw_part = calibrated.flexible_parts[0], raw.flexible_parts[0]
    assert raw_part.stiffness_factor == 1.0 and raw_part.material == get_material("spring_steel")
    # The coarse mesh is 14 % too stiff in frequency: c ≈ 1/1.145² ≈ 0.76 on the Young's modulus only.
    assert 0.74 < part.stiffness_factor < 0.78
    assert part.material.youngs_modulus == pytest.approx(200e9 * part.stiffness_factor, rel=1e-15)
    assert part.material.density == raw_part.material.density
    assert part.nominal_material == raw_part.material
    before, after = model_card(raw), model_card(calibrated)
    assert not before.passed and after.passed
    modes = {m.mode: m for m in after.parts[0].modes}
    assert set(modes) == {"f1 x", "f1 y", "f2 x", "f2 y"}
    for m in after.parts[0].modes:
        assert abs(m.error) <= m.tolerance
        assert m.f_model == pytest.approx(m.f_mesh * np.sqrt(part.stiffness_factor), rel=1e-12)
        # Raw error of the coarse mesh, as measured: +14 % to +15 % in every mode.
        assert 0.13 < m.error_mesh < 0.16
        # The reference is the converged 3-D rod: within 0.15 % of Euler-Bernoulli at L/D = 140.
        assert m.f_reference == pytest.approx(m.f_euler_bernoulli, rel=0.0015)
    assert after.parts[0].clamped_interface == "horn" and after.parts[0].resolution == {"axial": 20, "around": 6}
    check_fidelity(after)
    with pytest.raises(ModelFidelityError):
        check_fidelity(before)


def test_gate_failure_names_the_part_and_mode(coarse_rods):
    _, raw = coarse_rods
    with pytest.raises(ModelFidelityError) as err:
        check_fidelity(model_card(raw))
    e = err.value
    assert isinstance(e, InputError)
    assert e.part == "rod" and e.mode.startswith("f1") and e.error > 0.13
    text = str(e)
    assert "'rod'" in text and e.mode in text and f"{e.f_model:.4f}" in text and f"{e.f_reference:.4f}" in text
    # How to fix it (a finer mesh; the card's command) and how to override it.
    assert "finer mesh" in text and "retarget check model" in text and "allow-unverified-model" in text
    # A looser gate passes the same card.
    check_fidelity(model_card(raw), f1_tol=0.2, f2_tol=0.2)


def test_card_json_is_strict_and_round_trips(coarse_rods):
    card = model_card(coarse_rods[0])
    text = card.to_json()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert data["passed"] is True and data["parts"][0]["name"] == "rod"
    assert data["parts"][0]["modes"][0]["passed"] is True
    assert ModelCard.from_dict(data).to_dict() == data
    table = card.format()
    assert "rod 20x6" in table and "f2 y" in table and "within the gate" in table


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_check_model_cli_exit_codes(capsys, tmp_path):
    args = ["check", "model", "single_rod", "--mesh-axial", "20", "--mesh-around", "6", "--json"]
    assert main(args) == 0
    card = _last_json(capsys)
    assert card["robot"] == "single_rod" and card["passed"] is True
    # The servo rows: the XM430's coupled mode against beam theory (reported, not gated).
    (servo,) = card["servo_modes"]
    assert servo["motor"] == "base_pitch" and servo["servo"] == "XM430-W210" and servo["mode"] == 1
    assert servo["reference"].startswith("Euler-Bernoulli") and abs(servo["error"]) < 0.01
    assert servo["warning"] is False and card["servo_mode_warn"] == SERVO_MODE_WARN
    assert main([*args, "--no-calibration", "--no-servo-modes"]) == 1
    raw = _last_json(capsys)
    assert raw["passed"] is False and raw["parts"][0]["stiffness_factor"] == 1.0
    # Without the servo rows the JSON is the bending card alone (what other checks read: a superset with them).
    assert "servo_modes" not in raw and set(raw) < set(card)
    assert main(["check", "model", "single_rod", "--mesh-axial", "0"]) == 2
    assert "--mesh-axial" in capsys.readouterr().err
    assert main(["check", "model", "single_rod", "--servo-goals", "0.1,x"]) == 2
    assert "--servo-goals" in capsys.readouterr().err
    assert main(["check", "model", "no_such_robot"]) == 2
    # --reduced: the card stored in an artifact's meta.
    art = tmp_path / "a.npz"
    np.savez_compressed(art, meta=np.array(json.dumps({"format_version": 3, "model_card": raw})))
    assert main(["check", "model", "single_rod", "--reduced", str(art), "--json", "--no-servo-modes"]) == 1
    assert _last_json(capsys) == raw
    assert main(["check", "model", "single_rod", "--reduced", str(tmp_path / "missing.npz")]) == 2


def _servo_row(**changes):
    values = {"motor": "base_pitch", "servo": "XM430-W210", "goal": 0.0, "mode": 1, "f_model": 1.70,
              "model": "reduced, 9 coordinates", "f_reference": 1.69, "reference": "full FEM, 21 094 DOF",
              "error": 1.70 / 1.69 - 1.0, "damping_ratio": 0.115, "share": 0.79, "f_ideal_servo": 3.17, **changes}
    return ServoModeCard(**values)


def test_servo_rows_round_trip_and_warn_beyond_the_threshold(coarse_rods):
    from dataclasses import replace

    card = model_card(coarse_rods[0])
    far = _servo_row(motor="elbow", f_model=1.80, error=1.80 / 1.69 - 1.0)
    none = _servo_row(motor="wrist", f_reference=None, reference="no reference", error=None, damping_ratio=None,
                      f_ideal_servo=None)
    with_rows = replace(card, servo_modes=(_servo_row(), far, none))
    data = json.loads(with_rows.to_json(), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert [m["warning"] for m in data["servo_modes"]] == [False, True, False]
    assert ModelCard.from_dict(data) == with_rows and ModelCard.from_dict(data).to_dict() == data
    assert with_rows.servo_warnings == ["elbow"] and with_rows.passed == card.passed  # reported, not gated
    check_fidelity(with_rows)
    table = with_rows.format()
    assert "coupled servo-structure modes" in table and "WARNING" in table and "elbow" in table
    assert "full FEM, 21 094 DOF" in table
    # A robot without flexible parts: one line says so (no empty part table), then its servo modes.
    rigid = replace(with_rows, parts=())
    lines = rigid.format().splitlines()
    assert lines[0].endswith(": no flexible part (rigid links only), nothing to gate") and "part " not in lines[1]
    assert "coupled servo-structure modes" in lines[1] and rigid.passed
    # A card without servo rows (an older artifact's) still loads, and its JSON has no servo keys.
    old = card.to_dict()
    assert "servo_modes" not in old and ModelCard.from_dict(old).servo_modes == ()


def test_a_mesh_file_part_is_not_calibrated_and_has_no_reference(tmp_path):
    from pathlib import Path

    from retarget.fem import rod_mesh, write_mesh

    fixtures = Path(__file__).resolve().parents[1] / "model" / "fixtures"
    write_mesh(tmp_path / "rod.msh", rod_mesh(0.12, 0.004, 8, 6))
    text = (fixtures / "mini_rod.yaml").read_text().replace(
        "mesh: {generator: rod, length: 0.12, diameter: 0.004, resolution: {axial: 8, around: 6}}",
        "mesh: {file: rod.msh}")
    assert "rod.msh" in text
    (tmp_path / "mini_rod.yaml").write_text(text)
    (tmp_path / "mini_rod.urdf.xacro").write_text((fixtures / "mini_rod.urdf.xacro").read_text())
    model = load_robot(tmp_path / "mini_rod.yaml")
    part = model.flexible_parts[0]
    assert part.generator is None and part.stiffness_factor == 1.0 and part.material == get_material("spring_steel")
    card = model_card(model)
    assert card.passed and card.unchecked == ["rod"] and card.parts[0].reference == "no reference"
    assert all(m.f_reference is None and m.error is None and m.passed is None for m in card.parts[0].modes)
    assert "no reference" in card.format()
    check_fidelity(card)  # nothing to judge
    assert json.loads(card.to_json())["parts"][0]["passed"] is None


@pytest.mark.parametrize("robot", ["single_rod", "two_rods", "dancer", "bartender", "rapper", "drummer", "boxer",
                                   "fit_rig"])
@pytest.mark.parametrize("mesh_scale", [1.0, 0.25])
def test_every_robot_is_within_the_gate_at_its_default_and_the_demos_mesh(robot, mesh_scale):
    card = model_card(load_robot(library.resolve_robot(robot), mesh_scale=mesh_scale))
    check_fidelity(card)
    assert card.passed and not card.unchecked
    for part in card.parts:
        assert 0.9 < part.stiffness_factor < 1.01  # a mesh at most 5 % too stiff in frequency
