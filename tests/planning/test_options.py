"""Plan options (retarget.planning.options): the planner node's parameters mapped to :class:`PlanOptions` (0 or
empty: the default; ``verify`` false: no verification at a finer step; goal fields as overrides) and the band's
share of a worker process."""
from __future__ import annotations

from dataclasses import replace

import pytest

from retarget.planning.options import PlanOptions, band_offloaded, iteration_budgeted
from retarget.planning.settings import NODE_PARAMETERS, options_from_parameters


def test_no_parameter_gives_the_defaults_and_a_verification_at_a_fifth_of_dt():
    options = options_from_parameters({})
    assert options == replace(PlanOptions(), verify_dt=pytest.approx(PlanOptions().dt / 5))
    assert options_from_parameters({"dt": 0.002}).verify_dt == pytest.approx(0.0004)


def test_zero_or_empty_parameters_mean_the_default():
    zeros = {"dt": 0.0, "target_stride": 0, "window": 0.0, "verify_dt": 0.0, "time_budget": 0.0, "reduced_file": ""}
    assert options_from_parameters(zeros) == options_from_parameters({})
    given = options_from_parameters({"dt": 0.004, "target_stride": 5, "time_budget": 30.0, "reduced_file": "m.npz",
                                     "allow_training": True, "allow_unverified_model": True, "verify_dt": 0.002})
    assert (given.dt, given.target_stride, given.time_budget, given.reduced_file) == (0.004, 5, 30.0, "m.npz")
    assert given.allow_training and given.allow_unverified_model and given.verify_dt == 0.002


def test_the_optimizer_and_its_iterations_are_passed_on_and_empty_or_zero_mean_the_default():
    options = options_from_parameters({"method": "gauss-newton", "max_iterations": 7})
    assert (options.method, options.max_iterations) == ("gauss-newton", 7)
    defaults = PlanOptions()
    assert (options_from_parameters({"method": "", "max_iterations": 0}).method,
            options_from_parameters({"max_iterations": 0}).max_iterations) == (defaults.method, defaults.max_iterations)
    assert options_from_parameters({"max_iterations": 7}, max_iterations=3).max_iterations == 3  # the goal's wins


def test_windows_are_passed_on():
    options = options_from_parameters({"window": 0.1, "window_tail": 0.05, "window_overlap": 0.02})
    assert (options.window, options.window_tail, options.window_overlap) == (0.1, 0.05, 0.02)
    assert options_from_parameters({"window": 0.0}).window is None


@pytest.mark.parametrize(("parameters", "expected"), [({"torque_weight": 10.0, "torque_margin": 0.2}, (10.0, 0.2)),
                                                     ({"torque_weight": 0.0}, (0.0, 0.1)),
                                                     ({}, (10.0, 0.1))])
def test_torque_penalty_is_passed_on_and_zero_turns_it_off(parameters, expected):
    """``torque_weight`` 0 keeps the penalty off (only reported and warned) rather than meaning "default"; absent,
    the penalty is on at the default weight."""
    options = options_from_parameters(parameters)
    assert (options.torque_weight, options.torque_margin) == expected


def test_verify_false_turns_the_verification_off():
    assert options_from_parameters({"verify": False, "verify_dt": 0.001}).verify_dt is None


def test_goal_overrides_win_and_none_is_not_given():
    options = options_from_parameters({"dt": 0.004}, knot_spacing=0.02, max_iterations=None, dt=0.003)
    assert (options.knot_spacing, options.max_iterations, options.dt) == (0.02, PlanOptions().max_iterations, 0.003)


def test_unknown_parameters_are_ignored_and_every_node_parameter_is_an_option_or_verify():
    assert options_from_parameters({"robot_name": "x", "joint_names": ["m"]}) == options_from_parameters({})
    fields = set(PlanOptions.__dataclass_fields__)
    assert set(NODE_PARAMETERS) - fields == {"verify"}


def test_a_worker_takes_about_half_of_the_band():
    """With a worker process beside the planning one the band's factors are split; the verification stays here,
    so the worker takes the larger half when there is one. None with one worker."""
    assert [band_offloaded(n, True, 2) for n in range(5)] == [0, 1, 1, 2, 2]
    assert [band_offloaded(n, False, 2) for n in range(5)] == [0, 0, 1, 1, 2]
    assert band_offloaded(4, True, 1) == 0


def test_rest_and_settle_parameters_take_their_values_as_the_command_line_does():
    defaults = PlanOptions()
    options = options_from_parameters({})
    assert (options.rest_after, options.settle_weight, options.settle_iterations, options.settle_peak_allowance) == (
        defaults.rest_after, defaults.settle_weight, defaults.settle_iterations, defaults.settle_peak_allowance)
    given = options_from_parameters({"rest_after": 0.0, "settle_weight": 4.0, "settle_iterations": 0,
                                     "settle_peak_allowance": 1.0})
    assert (given.rest_after, given.settle_weight, given.settle_iterations, given.settle_peak_allowance) == (
        0.0, 4.0, 0, 1.0)  # 0 is a value here: at rest right after the motion, the refinement off
    assert options_from_parameters({"rest_after": -1.0}).rest_after is None  # only the end of the motion at rest


def test_an_iteration_budget_turns_off_the_work_it_does_not_bound_unless_kept():
    full = PlanOptions(verify_full_band=(0.9, 1.1))
    budgeted, skipped = iteration_budgeted(full)
    assert budgeted == replace(full, settle_iterations=0, verified_torque_rounds=0, verify_full_band=())
    assert skipped == ("settle_iterations", "verified_torque_rounds", "verify_full_band")
    kept, skipped = iteration_budgeted(full, frozenset({"settle_iterations", "verify_full_band"}))
    assert kept == replace(full, verified_torque_rounds=0) and skipped == ("verified_torque_rounds",)
    # What would not have run is not reported: windows, no torque weight, no band.
    quiet = PlanOptions(window=1.0, torque_weight=0.0)
    assert iteration_budgeted(quiet)[1] == ()
    assert iteration_budgeted(replace(quiet, window=None))[1] == ("settle_iterations",)


@pytest.mark.parametrize(("parameters", "message"), [({"settle_iterations": -1}, "settle_iterations must be 0"),
                                                     ({"settle_peak_allowance": 0.5}, "settle_peak_allowance must be"),
                                                     ({"settle_weight": -1.0}, "settle_weight must be")])
def test_bad_settle_parameters_are_input_errors_naming_them(parameters, message):
    from retarget.errors import InputError

    with pytest.raises(InputError, match=message):
        options_from_parameters(parameters)


def test_plan_options_list_every_setting_out_of_range_by_field():
    """The one range check behind both shells (the node names the field, ``retarget plan`` its flag)."""
    assert PlanOptions().out_of_range() == []
    bad = PlanOptions(dt=0.0, time_budget=-1.0, settle_iterations=-2, settle_peak_allowance=0.5, settle_weight=-1.0)
    assert [name for name, _ in bad.out_of_range()] == ["dt", "time_budget", "settle_iterations",
                                                         "settle_peak_allowance", "settle_weight"]
    assert dict(bad.out_of_range())["settle_iterations"] == "must be 0 (off) or more, got -2"


def test_window_settings_out_of_range_are_named_before_any_work():
    """A window, its tail or its overlap out of range: named by the range check (before the targets are solved),
    in the node's parameter names and ``retarget plan``'s flags; the node's and the command line's window 0 is the
    whole motion at once."""
    from retarget.cli import build_parser
    from retarget.errors import InputError
    from retarget.planning.commands import options_from_args

    assert PlanOptions(window=None, window_tail=-1.0).out_of_range() == []  # no windows: their settings unused
    bad = PlanOptions(window=-1.0, window_tail=-0.5, window_overlap=-2.0)
    assert [name for name, _ in bad.out_of_range()] == ["window", "window_tail", "window_overlap"]
    assert dict(PlanOptions(window=1.0, window_overlap=1.0).out_of_range())["window_overlap"].startswith(
        "must be at least 0 and less than the window (1 s)")
    with pytest.raises(InputError, match="window_overlap must be"):
        options_from_parameters({"window": 1.0, "window_overlap": 1.5})
    assert options_from_parameters({"window": 0.0}).window is None
    parser = build_parser()
    plan = ["plan", "single_rod", "--motion", "single_rod/step_30_servo"]
    assert options_from_args(parser.parse_args([*plan, "--window", "0"])).window is None
    with pytest.raises(InputError, match="--window-tail must be 0 or more"):
        options_from_args(parser.parse_args([*plan, "--window", "1", "--window-tail", "-1"]))
    with pytest.raises(InputError, match="--window must be positive"):
        options_from_args(parser.parse_args([*plan, "--window", "-1"]))


def test_the_pipelines_typed_options_and_results_resolve_to_types() -> None:
    """Tools that read the dataclasses' types (typing.get_type_hints: argument parsers, schema writers, Ray's
    serializers) see every field's type in every public dataclass of the planning pipeline and the show's results
    (the show's runner imports Ray, which opens a socket: not here)."""
    import dataclasses
    import importlib
    import inspect
    import pkgutil
    import typing

    import retarget.planning
    import retarget.show
    from retarget.optimize.weights import WeightSpec

    assert typing.get_type_hints(PlanOptions)["deviation_weight"] == WeightSpec
    checked = []
    for package in (retarget.planning, retarget.show):
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            if info.name == "retarget.show.runner":
                continue
            module = importlib.import_module(info.name)
            for name, cls in vars(module).items():
                if inspect.isclass(cls) and dataclasses.is_dataclass(cls) and cls.__module__ == info.name \
                        and not name.startswith("_"):
                    typing.get_type_hints(cls)  # raises NameError on an annotation that names nothing
                    checked.append(name)
    assert {"PlanOptions", "RefineOptions", "PlanResult", "PlanProgress", "Verdict", "PlanOutcome"} <= set(checked)
