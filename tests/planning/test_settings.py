"""The planner settings declared once (:mod:`retarget.planning.settings`): ``retarget plan``'s flags and the node's
parameters come from one table, and ``retarget plan ROBOT`` with no flags plans with the robot's params file."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from retarget.cli import build_parser
from retarget.errors import InputError
from retarget.planning.commands import QUICK_ITERATIONS, plan_options_from_args
from retarget.planning.options import PlanOptions
from retarget.planning.settings import (
    CLI_PARAMETERS_IGNORED,
    NODE_PARAMETERS,
    PLAN_SETTINGS,
    options_from_parameters,
    resolve_plan_options,
    setting,
)

DRUMMER = ["plan", "drummer", "--motion", "drummer/drumming"]


def _options(*argv: str) -> tuple[PlanOptions, list[str]]:
    return plan_options_from_args(build_parser().parse_args([*DRUMMER, *argv]))


def test_every_params_file_setting_is_declared_once() -> None:
    names = [s.name for s in PLAN_SETTINGS]
    assert sorted(names) == sorted(NODE_PARAMETERS) and len(set(names)) == len(names)
    fields = set(PlanOptions.__dataclass_fields__)
    assert {s.name for s in PLAN_SETTINGS} - fields == {"verify"}  # verify: verify_dt or none
    for s in PLAN_SETTINGS:
        assert s.group in ("model", "objective", "budget", "verification")
        assert s.kind in (float, int, bool, str) and isinstance(s.default, s.kind)
        if s.low is not None and s.high is not None:
            assert s.low <= s.default <= s.high, s.name
    # The node's description carries the unit and what its 0 means.
    assert setting("dt").description().endswith("[s]; 0: 0.005 s")
    assert setting("window").description().endswith("[s]; 0: the whole motion at once")
    assert setting("method").description().endswith("; empty: lbfgs")
    assert setting("torque_margin").description().endswith("; default: 0.1")
    with pytest.raises(KeyError):
        setting("nonsense")


def test_plan_with_no_flags_uses_the_robots_params_file() -> None:
    """`retarget plan drummer --motion drummer/drumming`: the settings of config/drummer.params.yaml, the node's."""
    from retarget.model.library import ros_parameters

    params = ros_parameters("drummer")
    options, skipped = _options()
    assert skipped == []
    assert (options.dt, options.window, options.window_tail, options.window_overlap, options.target_stride,
            options.method, options.time_budget, options.verify_dt) == (
        params["dt"], params["window"], params["window_tail"], params["window_overlap"], params["target_stride"],
        params["method"], params["time_budget"], params["verify_dt"]) == (
        0.002, 1.0, 0.5, 0.5, 5, "gauss-newton", 900.0, 0.001)
    # Everything the file does not say is PlanOptions' default, as on the node (which also may train).
    node = options_from_parameters({k: v for k, v in params.items() if k not in CLI_PARAMETERS_IGNORED})
    assert options == replace(node, allow_training=True, fallback_models=options.fallback_models)
    # Before training, the model shipped for the drummer (as on the node); not with --reduced or --no-cache.
    assert [Path(f).parent.name for f in options.fallback_models] == ["demo"]
    assert _options("--reduced", "m.npz")[0].fallback_models == _options("--no-cache")[0].fallback_models == ()


def test_a_flag_wins_over_the_params_file() -> None:
    options, _ = _options("--dt", "0.004", "--method", "descent", "--window", "0", "--time-budget", "60")
    assert (options.dt, options.method, options.window, options.time_budget) == (0.004, "descent", None, 60.0)
    assert options.verify_dt == 0.001  # the file's verification step stays
    assert _options("--verify-dt", "0")[0].verify_dt is None  # 0 on the command line: no verification
    assert _options("--reduced", "m.npz")[0].reduced_file == "m.npz"
    # A robot without windows in its file plans the whole motion at once with PlanOptions' defaults.
    rod = plan_options_from_args(build_parser().parse_args(["plan", "single_rod", "--motion",
                                                            "single_rod/step_30"]))[0]
    assert rod.window is None and rod.dt == PlanOptions.dt and rod.method == PlanOptions.method


@pytest.mark.parametrize(("argv", "message"), [
    (("--dt", "0"), "--dt must be positive"), (("--time-budget", "-5"), "--time-budget must be positive"),
    (("--max-iterations", "0"), "--max-iterations must be positive"),
    (("--window-overlap", "2"), "--window-overlap must be at least 0 and less than the window"),
    (("--settle-weight", "-1"), "--settle-weight must be 0 or more"),
])
def test_a_setting_out_of_range_is_named_as_its_flag(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(InputError, match=message):
        _options(*argv)


def test_a_budget_limited_look_skips_what_was_not_asked_for_and_says_so() -> None:
    quick, skipped = _options("--quick", "--window", "0")
    assert quick.max_iterations == QUICK_ITERATIONS and quick.settle_iterations == 0
    assert quick.stiffness_band == () and quick.verify_model == "none" and quick.verified_torque_rounds == 0
    assert all(line.startswith("--quick: skipping ") for line in skipped) and len(skipped) == 4
    assert any("settle refinement" in line for line in skipped)
    # The drummer's windows run neither the robust objective, the settle refinement nor the torque round: not said.
    windowed, skipped = _options("--quick")
    assert windowed.settle_iterations == 0
    assert skipped == ["--quick: skipping the verification in another model (--verify-model auto|full|FILE runs it)"]
    looked, skipped = _options("--max-iterations", "2", "--window", "0")
    assert looked.max_iterations == 2 and looked.settle_iterations == 0 and looked.verify_model == "auto"
    assert looked.stiffness_band == PlanOptions.stiffness_band  # only --quick drops the robust objective
    assert skipped[0] == "--max-iterations 2: skipping the settle refinement (--settle-iterations N runs it)"
    asked, skipped = _options("--quick", "--settle-iterations", "4", "--verify-full-band", "0.9,1.1",
                              "--verify-model", "full", "--robust", "0.9,1.1", "--window", "0")
    assert asked.settle_iterations == 4 and asked.verify_full_band == (0.9, 1.1) and asked.verify_model == "full"
    assert asked.stiffness_band == (0.9, 1.1)
    assert not any("settle" in line or "Young" in line or "another model" in line for line in skipped)
    # A full plan runs every stage.
    assert _options()[0].settle_iterations == PlanOptions.settle_iterations


def test_plan_help_groups_the_options_and_lists_the_exit_statuses() -> None:
    parser = build_parser()
    plan = parser._subparsers._group_actions[0].choices["plan"]
    titles = [g.title for g in plan._action_groups]
    for title in ("model", "objective", "budget", "verification", "output"):
        assert any(t.startswith(title) for t in titles), titles
    text = plan.format_help()
    assert "exit status:" in text and "  3 " in text and "  2 " in text
    assert "(default: the params file's dt, else 0.005 s)" in " ".join(text.split())
    group_of = {a.dest: g.title.split()[0] for g in plan._action_groups for a in g._group_actions}
    for s in PLAN_SETTINGS:
        if s.flag:
            assert group_of[s.dest] == s.group, s.name


def test_resolve_ignores_the_nodes_deployment_settings() -> None:
    options = resolve_plan_options({"reduced_file": "node.npz", "allow_training": False, "dt": 0.004}, {},
                                   allow_training=True)
    assert options.reduced_file is None and options.allow_training and options.dt == 0.004


def test_the_docs_table_is_the_declarations() -> None:
    from retarget.planning.settings import TABLE_DOC, with_settings_table

    doc = Path(__file__).resolve().parents[2] / TABLE_DOC
    text = doc.read_text(encoding="utf-8")
    assert with_settings_table(text) == text, f"{TABLE_DOC}'s planner settings table is stale: run " \
        "`.venv/bin/python -m retarget.planning.settings`"


def test_a_setting_declared_once_reaches_the_flags_and_the_docs_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's side: tests/ros/test_planner_parameters.py."""
    from retarget.planning import settings

    knob = settings.PlanSetting("test_knob", float, 0.0, "a knob for this test", "s", 0.0, 5.0, "budget",
                                "0: off", "--test-knob")
    monkeypatch.setattr(settings, "PLAN_SETTINGS", (*settings.PLAN_SETTINGS, knob))
    plan = build_parser()._subparsers._group_actions[0].choices["plan"]
    help_text = " ".join(plan.format_help().split())
    assert "--test-knob S a knob for this test [s] (default: the params file's test_knob, else 0: off)" in help_text
    group_of = {a.dest: g.title.split()[0] for g in plan._action_groups for a in g._group_actions}
    assert group_of["test_knob"] == "budget"
    assert "| `test_knob` | `--test-knob` | float | s | 0 to 5 | `0`: off | a knob for this test |" in \
        settings.settings_table().splitlines()
    given = plan.parse_args(["ROBOT", "--motion", "M", "--test-knob", "2"])
    assert settings.parameters_from_flags(given) == {"test_knob": 2.0}
    with pytest.raises(ValueError, match="markers"):
        settings.with_settings_table("no table here")


def test_a_servo_file_is_a_planner_setting(tmp_path: Path) -> None:
    """`retarget plan --servo FILE`, the params file's and the node's `servo_file` set the same option."""
    assert _options("--servo", "fitted.yaml")[0].servo_file == "fitted.yaml"
    assert _options()[0].servo_file is None
    assert options_from_parameters({"servo_file": "fitted.yaml"}).servo_file == "fitted.yaml"
    assert options_from_parameters({"servo_file": ""}).servo_file is None  # the node's empty: the robot's servos
    assert resolve_plan_options({"servo_file": "file.yaml"}, {}).servo_file == "file.yaml"
    assert resolve_plan_options({"servo_file": "file.yaml"}, {"servo_file": "flag.yaml"}).servo_file == "flag.yaml"
    from retarget.planning.settings import given_servo_file  # retarget refine's and play's --servo, the same way

    assert given_servo_file("flag.yaml", {"servo_file": "file.yaml"}) == "flag.yaml"
    assert given_servo_file(None, {"servo_file": "file.yaml"}) == "file.yaml"
    assert given_servo_file(None, {"servo_file": ""}) is None and given_servo_file(None, {}) is None


def _robot_with_params(folder: Path, extra: str) -> Path:
    """A copy of the single rod's description and params file in ``folder``, ``extra`` appended to its
    ``ros__parameters`` (the description is only located, not loaded, by what these tests call)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = Path(__file__).resolve().parents[2] / "config"
    robot = folder / "single_rod.yaml"
    robot.write_text((config / "single_rod.yaml").read_text())
    (folder / "single_rod.params.yaml").write_text((config / "single_rod.params.yaml").read_text() + extra)
    return robot


def test_a_params_files_relative_file_settings_are_taken_from_its_folder(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`servo_file: fitted.yaml` in config/ROBOT.params.yaml names config/fitted.yaml wherever the command runs:
    for `retarget plan`, `retarget refine` and `retarget play` (robot_settings), and for the nodes `retarget up` and
    the launch files start (bringup); keywords, absolute paths and empty values stay as they are."""
    from retarget.planning.settings import robot_settings, with_files_from
    from retarget.ros.bringup import describe

    robot = _robot_with_params(tmp_path / "cfg", "    servo_file: fitted.yaml\n    reduced_file: models/r.npz\n"
                                                 "    verify_model: verify/v.npz\n    twin_motion: poses.npz\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = (tmp_path / "cfg").resolve()
    expected = {"servo_file": str(folder / "fitted.yaml"), "reduced_file": str(folder / "models" / "r.npz"),
                "verify_model": str(folder / "verify" / "v.npz")}
    settings = robot_settings(robot)
    assert {k: settings[k] for k in expected} == expected
    from retarget.model.library import ros_parameters

    raw = ros_parameters(robot)
    others = {k: v for k, v in settings.items() if k not in expected}
    assert others == {k: v for k, v in raw.items() if k not in expected}
    options, _ = plan_options_from_args(build_parser().parse_args(["plan", str(robot), "--motion", "x.csv"]))
    assert options.servo_file == expected["servo_file"] and options.verify_model == expected["verify_model"]
    nodes = {n.name: n for n in describe(robot, run_dir=tmp_path / "run").nodes}
    assert {k: nodes["planner"].parameters[k] for k in expected} == expected
    # The mocap twin's poses file the same way (not a planner setting; builtin:… and live:… name no file).
    assert nodes["mocap"].parameters["twin_motion"] == str(folder / "poses.npz")
    # What stays: a keyword of verify_model, an empty value, an absolute path; ~ is the user's home.
    kept = {"verify_model": "auto", "servo_file": "", "reduced_file": "/abs/r.npz", "method": "lbfgs", "dt": 0.002}
    assert with_files_from(kept, tmp_path) == kept
    assert with_files_from({"servo_file": "~/s.yaml"}, tmp_path)["servo_file"] == str(tmp_path / "home" / "s.yaml")
    assert {s.name for s in PLAN_SETTINGS if s.path} == {"servo_file", "reduced_file", "verify_model"}


def test_the_nodes_zero_means_the_default_where_the_declaration_says_so() -> None:
    """options_from_parameters reads the node's convention off each declaration: 0 or empty is PlanOptions' default
    where the setting says so (`zero_is_default`), a value everywhere else."""
    defaults = options_from_parameters({})
    for s in PLAN_SETTINGS:
        if s.name in ("verify", "verify_dt", "rest_after"):  # read by hand (test_options.py)
            continue
        zero = "" if s.kind is str else (False if s.kind is bool else s.kind(0))
        if s.zero_is_default:
            assert options_from_parameters({s.name: zero}) == defaults, s.name
        elif s.kind is not bool and (s.low is None or s.low <= 0):
            assert getattr(options_from_parameters({s.name: zero}), s.name) == 0, s.name
    assert setting("target_stride").zero_is_default and not setting("window_overlap").zero_is_default
    assert not setting("torque_weight").zero_is_default and setting("time_budget").zero_is_default


def test_the_node_names_a_file_setting_that_names_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """missing_files: what the planner node warns of at its start (a goal planning with it would fail)."""
    from retarget.planning.settings import missing_files

    there = tmp_path / "fitted.yaml"
    there.write_text("servo: {}\n")
    monkeypatch.chdir(tmp_path)
    assert missing_files({"servo_file": str(there), "verify_model": "auto", "reduced_file": "", "dt": 0.0}) == []
    assert missing_files({"servo_file": "fitted.yaml"}) == []  # relative: from the working directory
    lines = missing_files({"servo_file": "/nowhere/fitted.yaml", "reduced_file": "models/r.npz",
                           "verify_model": "verify/v.npz", "method": "lbfgs"})
    assert lines == [
        f"reduced_file models/r.npz: no such file (a relative path: from the working directory {tmp_path}); a goal "
        "fails until it is there",
        "servo_file /nowhere/fitted.yaml: no such file; a goal fails until it is there",
        f"verify_model verify/v.npz: no such file (a relative path: from the working directory {tmp_path}); a goal "
        "fails until it is there"]
