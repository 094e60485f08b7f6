"""Tests of retarget.fit.commands through the real CLI entry point (twin-test, then fit)."""
from __future__ import annotations

import json

import pytest
import yaml

from retarget.cli import main


def test_twin_test_then_fit_json_plot_write(tmp_path, capsys) -> None:
    bag = tmp_path / "twin"
    assert main(["twin-test", "single_rod", "--youngs-modulus", "1.9e11", "--noise", "0.001",
                 "--seed", "4", "--dt", "0.002", "--out", str(bag), "--json"]) == 0
    twin = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert twin["youngs_modulus"] == 1.9e11 and twin["topic"] == "/mocap/tip/pose"
    materials = tmp_path / "materials.yaml"
    plot = tmp_path / "fit.png"
    assert main(["fit", "single_rod", "--recording", str(bag), "--body", "tip", "--params",
                 "youngs_modulus", "--dt", "0.002", "--plot", str(plot), "--write", "--materials", str(materials),
                 "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    for key in ("youngs_modulus", "alpha", "beta", "residual_rms_m", "youngs_modulus_std"):
        assert key in summary
    assert summary["youngs_modulus"] == pytest.approx(1.9e11, rel=0.02)
    assert summary["residual_rms_m"] == pytest.approx(0.001, rel=0.15)
    # The beam engine prescribes the shaft: the report says so (a real rig's servo sags and lags).
    assert twin["engine"] == summary["engine"] == "beam" and summary["servo"].startswith("not modelled")
    assert twin["servo"] == summary["servo"]  # the twin recorded on the same prescribed shaft, and says so
    assert any(line.startswith("  servo: not modelled: the shaft follows the motion exactly") for line in out)
    assert plot.stat().st_size > 10_000
    written = yaml.safe_load(materials.read_text())["materials"]["spring_steel"]
    assert written == {"youngs_modulus": summary["youngs_modulus"]}


def test_user_errors_exit_2(tmp_path, capsys) -> None:
    assert main(["fit", "single_rod", "--recording", str(tmp_path / "none"), "--body", "tip"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["fit", "two_rods", "--recording", str(tmp_path), "--body", "tip"]) == 2
    assert main(["fit", "single_rod", "--recording", str(tmp_path), "--body", "tip",
                 "--params", "gamma"]) == 2


@pytest.mark.slow
def test_fit_motion_writes_the_identification_motion(tmp_path, capsys) -> None:
    out = tmp_path / "ident.yaml"
    assert main(["fit-motion", "single_rod", "--cycles", "3", "--bursts", "2", "--out", str(out),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frequencies_hz"][1] == pytest.approx(32.5, rel=0.01)
    assert summary["peak_rate_rad_s"] <= summary["max_velocity"] == pytest.approx(8.06)
    assert summary["peak_load_torque_nm"]["identification"] > 0.0
    assert summary["torque_limit_nm"] == pytest.approx(0.8 * summary["stall_torque_nm"])
    assert summary["burst_torque_nm"] <= summary["torque_limit_nm"]
    assert yaml.safe_load(out.read_text())["joints"] == ["base_pitch"]
    assert main(["fit-motion", "single_rod", "--cycles", "3", "--bursts", "2", "--torque-fraction", "0",
                 "--json"]) == 0
    speed_only = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert speed_only["torque_limit_nm"] is None
    assert speed_only["amplitude_rad"] > 5 * summary["amplitude_rad"]
    # Another servo (an XM540-W270: 10.6 N m, 30 rpm): the design and the report use its values, not the rig's.
    assert main(["fit-motion", "single_rod", "--cycles", "3", "--bursts", "2", "--stall-torque", "10.6",
                 "--max-velocity", "3.14", "--json"]) == 0
    captured = capsys.readouterr()
    bigger = json.loads(captured.out.strip().splitlines()[-1])
    assert bigger["stall_torque_nm"] == 10.6 and bigger["torque_limit_nm"] == pytest.approx(0.8 * 10.6)
    assert "= 80% of stall" in captured.out and "servo stall torque 10.60 N m" in captured.out
    assert bigger["peak_rate_rad_s"] <= bigger["max_velocity"] == pytest.approx(3.14)
    assert bigger["amplitude_rad"] == pytest.approx(summary["amplitude_rad"] * 10.6 / 3.0, rel=0.02)
    assert main(["fit-motion", "single_rod", "--step-deg", "120"]) == 2
    assert main(["fit-motion", "single_rod", "--choose", "--candidates", "2,x"]) == 2


@pytest.mark.slow
def test_fit_motion_predicts_on_the_servo_plant_where_the_loop_damps_the_modes(capsys) -> None:
    """``--predict-engine servo-beam``: the fit rig's XM540-W270 loop turns the shaft. Its second mode's damping
    beyond the loop's own is the part's Rayleigh ratio at that frequency (theory: α/2ω + βω/2), a fraction of what
    the loop adds; so the same motions that pin β to a few percent on the prescribed shaft leave it undetermined
    on the servo plant, while E stays pinned."""
    import math

    assert main(["fit-motion", "--predict", "--json"]) == 0
    beam = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["fit-motion", "--predict", "--predict-engine", "servo-beam", "--json"]) == 0
    captured = capsys.readouterr()
    servo = json.loads(captured.out.strip().splitlines()[-1])
    assert beam["predict_engine"] == "beam" and "servo_modes" not in beam and servo["predict_engine"] == "servo-beam"
    assert "servo plant mode 2:" in captured.out
    second = servo["servo_modes"][1]
    omega = 2 * math.pi * second["frequency_hz"]
    rayleigh = 0.2 / (2 * omega) + 2e-5 * omega / 2  # fit_rig's steel: alpha 0.2 1/s, beta 2e-5 s
    assert second["part_damping_ratio"] == pytest.approx(rayleigh, rel=0.15)
    assert second["damping_ratio"] > 5 * second["part_damping_ratio"]
    b, s = beam["predicted"]["step_30+motion"]["relative_std"], servo["predicted"]["step_30+motion"]["relative_std"]
    assert b["beta"] < 0.1 and s["beta"] > 10 * b["beta"] and s["youngs_modulus"] < 0.01


def test_the_fit_report_warns_of_a_parameter_its_one_sigma_does_not_determine(capsys) -> None:
    """1σ above half the value: not determined (the servo plant's β); at a bound: the bound's warning instead."""
    from types import SimpleNamespace

    import numpy as np

    from retarget.fit.commands import _print_fit_warnings

    units = {"youngs_modulus": ("GPa", 1e9), "alpha": ("1/s", 1.0), "beta": ("s", 1.0)}
    result = SimpleNamespace(fitted=("youngs_modulus", "alpha", "beta"),
                             values={"youngs_modulus": 2e11, "alpha": 0.5, "beta": 4e-5},
                             std={"youngs_modulus": 1e8, "alpha": 0.2, "beta": 2.1e-4}, at_bound={},
                             bounds={}, correlation=np.eye(3))
    _print_fit_warnings(result, units)
    out = capsys.readouterr().out
    assert "warning: beta is not determined by these recordings (1-sigma 525 % of its value)" in out
    assert "alpha is not" not in out and "youngs_modulus is not" not in out
    result.at_bound, result.bounds = {"beta": "upper"}, {"beta": (1e-7, 4e-5)}
    _print_fit_warnings(result, units)
    out = capsys.readouterr().out
    assert "beta is not determined" not in out and "warning: beta ended at its upper bound" in out


def test_check_sets_builtin_explicit_and_random() -> None:
    from retarget.errors import InputError
    from retarget.fit.commands import CHECK_SETS, RANDOM_RANGES, check_sets

    assert check_sets(None, 2, 0, 0) == list(CHECK_SETS[:2])
    assert check_sets(["1.7e11,0.4,5e-5"], 3, 0, 0) == [(1.7e11, 0.4, 5e-5)]
    drawn = check_sets(None, 0, 20, 3)
    assert drawn == check_sets(None, 0, 20, 3) and len(drawn) == 20
    for e, a, b in drawn:
        assert RANDOM_RANGES["youngs_modulus"][0] <= e <= RANDOM_RANGES["youngs_modulus"][1]
        assert RANDOM_RANGES["alpha"][0] <= a <= RANDOM_RANGES["alpha"][1]
        assert RANDOM_RANGES["beta"][0] <= b <= RANDOM_RANGES["beta"][1]
    with pytest.raises(InputError, match="three numbers"):
        check_sets(["1e11,0.5"], 3, 0, 0)
    with pytest.raises(InputError, match="no parameter sets"):
        check_sets(None, 0, 0, 0)


def test_random_ranges_are_the_design_ranges() -> None:
    from retarget.fit.commands import RANDOM_RANGES
    from retarget.fit.design import MATERIAL_RANGES

    assert RANDOM_RANGES == MATERIAL_RANGES


def _strict(line: str) -> dict:
    """Parse JSON refusing NaN and Infinity, as strict parsers do."""
    def refuse(name: str) -> None:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


def test_own_rig_motive_csv_from_elsewhere(own_rig, tmp_path, capsys) -> None:
    """A rig outside the repository (project xacro macros, a centred tip), recorded as a third party would: a
    Motive CSV in a rotated and offset frame, 5 % of the frames missing, the capture starting 0.6 s into the motion
    (no rest at its start), noisy orientation (0.03 rad). The documented commands fit it; the JSON is strict."""
    take = tmp_path / "take.csv"
    assert main(["twin-test", str(own_rig), "--motion", "fit_rig/step_30", "--youngs-modulus", "1.95e11",
                 "--alpha", "0", "--beta", "3e-4", "--lead", "-0.6", "--frame-rpy", "12,-25,70", "--frame-xyz",
                 "0.4,1.1,-2.3", "--occlusion", "0.05", "--rotation-noise", "0.03", "--seed", "11", "--dt", "0.002",
                 "--out", str(take), "--json"]) == 0
    twin = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    assert twin["occluded"] > 0 and take.read_text().startswith("Format Version,1.23,")
    assert main(["fit", str(own_rig), "--recording", str(take), "--motion", "fit_rig/step_30", "--body",
                 "tip", "--fix", "alpha=0", "--dt", "0.002", "--json"]) == 0
    out = capsys.readouterr().out
    summary = _strict(out.strip().splitlines()[-1])
    assert summary["fitted"] == ["youngs_modulus", "beta"] and summary["fixed"] == {"alpha": 0.0}
    assert summary["alpha"] == 0.0 and "(held: --fix)" in out
    assert summary["youngs_modulus"] == pytest.approx(1.95e11, rel=0.01)
    assert abs(summary["beta"] - 3e-4) < 3 * summary["beta_std"] and summary["beta"] == pytest.approx(3e-4, rel=0.15)
    assert summary["offsets_s"][0] == pytest.approx(-0.6, abs=2e-3)  # t_sim = t_rec + 0.6 s
    assert "orientation: used in 1 of 1 recording(s), weight 1 (the default)" in out
    assert summary["orientation_weight"] == 1.0 and summary["orientation_used"] == [True]
    # Positions only, α fitted although the truth is 0: it ends at its lower bound, and says so.
    assert main(["fit", str(own_rig), "--recording", str(take), "--motion", "fit_rig/step_30", "--body",
                 "tip", "--params", "youngs_modulus,alpha", "--fix", "beta=3e-4", "--orientation-weight", "0",
                 "--dt", "0.002", "--json"]) == 0
    out = capsys.readouterr().out
    summary = _strict(out.strip().splitlines()[-1])
    assert summary["at_bound"] == {"alpha": "lower"} and "warning: alpha ended at its lower bound" in out
    assert summary["angle_residual_rms_rad"] is None and summary["angle_noise_std_rad"] is None
    assert "orientation: not used (--orientation-weight 0: positions only)" in out


def test_fit_option_errors_exit_2(own_rig, tmp_path, capsys) -> None:
    take = tmp_path / "none.csv"
    base = ["fit", str(own_rig), "--recording", str(take), "--body", "tip", "--motion", "fit_rig/step_30"]
    for extra, message in ((["--fix", "gamma=1"], "unknown name 'gamma'"),
                           (["--fix", "alpha=x"], "'x' is not a number"),
                           (["--fix", "alpha=0", "--params", "alpha,beta"], "alpha is both fitted and fixed"),
                           (["--fix", "youngs_modulus=2e11", "--fix", "alpha=0", "--fix", "beta=0"], "nothing to fit"),
                           (["--orientation-weight", "-1"], "--orientation-weight must be >= 0"),
                           (["--motion-start", "0", "--motion-start", "1"], "one --motion-start for all")):
        assert main(base + extra) == 2
        assert message in capsys.readouterr().err
    # A rig outside the library has no default step test: the error says to give the motion.
    assert main(["fit", str(own_rig), "--recording", str(take), "--body", "tip"]) == 2
    assert "the motion library has no my_rig/step_30: give the motion the rig played with --motion FILE" in \
        capsys.readouterr().err
