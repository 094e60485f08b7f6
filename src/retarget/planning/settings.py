"""The planner settings a robot's params file carries, each declared once: type, unit, range, default and help.

``retarget plan``'s flags (:func:`add_setting_flags`), the planner node's parameters (``retarget.ros.planner``) and
the docs' table (:func:`settings_table`) are generated from :data:`PLAN_SETTINGS`, and the node's parameters become
:class:`~retarget.planning.options.PlanOptions` through :func:`options_from_parameters` (the node's convention, read
from each declaration: 0 or "" for "the default"). :func:`resolve_plan_options` merges a params file's values, the
flags given and the command's other options the same way, so ``retarget plan ROBOT`` with no flags plans with the
settings the robot's planner node uses. A new setting is a :class:`PlanOptions` field and its declaration here.
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from retarget.errors import InputError
from retarget.model.library import read_ros_parameters, resolve_params
from retarget.planning.options import METHODS, REST_AFTER_S, PlanOptions, VerifyModel

__all__ = ["CLI_PARAMETERS_IGNORED", "NODE_PARAMETERS", "PLAN_SETTINGS", "PlanSetting", "add_setting_flags",
           "given_servo_file", "missing_files", "options_from_parameters", "parameters_from_flags",
           "path_from", "resolve_plan_options", "robot_settings", "setting", "settings_table", "with_files_from",
           "with_settings_table"]


#: A setting's value as a node parameter holds it.
ParamValue = bool | int | float | str


@dataclass(frozen=True)
class PlanSetting:
    """One planner setting as a params file, the node and ``retarget plan`` know it.

    Attributes:
        name: the node's parameter name (the :class:`PlanOptions` field it sets, except ``verify``).
        kind: ``float``, ``int``, ``bool`` or ``str``.
        default: the node parameter's default (0 or "" mean "the default": :attr:`meaning`).
        help: what it does (without the unit or the default).
        unit: e.g. ``s``; "" for none.
        low, high: inclusive range of a number (the node's descriptor; the flag's check).
        group: ``retarget plan --help``'s group: model, objective, budget, verification.
        meaning: what the default means, for the help (``"0.005 s"``, ``"none"``).
        flag: ``retarget plan``'s flag; "" for a setting that is not a flag.
        choices: the allowed values of a text setting.
        metavar: the flag's value in ``--help`` ("" : from the unit and type).
        zero_default: whether the node's 0 (or less) or empty text stands for :class:`PlanOptions`' default; None:
            where the declared default is 0 or empty (:attr:`zero_is_default`).
        path: a file's name: a relative one in a params file is taken from the params file's folder
            (:func:`with_files_from`).
        keywords: the values of a :attr:`path` setting that name no file (``verify_model``'s ``auto``).
    """

    name: str
    kind: type
    default: ParamValue
    help: str
    unit: str = ""
    low: float | None = None
    high: float | None = None
    group: str = "objective"
    meaning: str = ""
    flag: str = ""
    choices: tuple[str, ...] = ()
    metavar: str = ""
    zero_default: bool | None = None
    path: bool = False
    keywords: tuple[str, ...] = ()

    @property
    def zero_is_default(self) -> bool:
        """Whether 0 (or less) or an empty text is "the default" on the node (:func:`options_from_parameters`)."""
        if self.zero_default is not None:
            return self.zero_default
        return self.kind is not bool and self.default in (0, "")

    @property
    def dest(self) -> str:
        """The argparse destination of :attr:`flag`."""
        return self.flag.lstrip("-").replace("-", "_")

    def names_file(self, value: object) -> bool:
        """Whether ``value`` of this setting names a file: a :attr:`path` setting's non-empty text that is not one of
        its :attr:`keywords`."""
        return self.path and isinstance(value, str) and bool(value) and value not in self.keywords

    @property
    def stands_for(self) -> str:
        """What the node parameter's default stands for where it is not the value itself ("" else): the text after
        a ``0:`` :attr:`meaning`, or the meaning of a 0 or empty default."""
        if self.meaning.startswith("0:"):
            return self.meaning[2:].strip()
        if self.kind is not bool and self.default in (0, ""):
            return self.meaning
        return ""

    def description(self) -> str:
        """The node parameter's description: help, unit, and what the default means."""
        unit = f" [{self.unit}]" if self.unit else ""
        if not self.meaning:
            return f"{self.help}{unit}"
        if self.stands_for:
            return f"{self.help}{unit}; {'empty' if self.kind is str else '0'}: {self.stands_for}"
        return f"{self.help}{unit}; default: {self.meaning}"


_D = PlanOptions()

#: Every planner setting of the params files (:data:`NODE_PARAMETERS`), declared once.
PLAN_SETTINGS: tuple[PlanSetting, ...] = (
    PlanSetting("reduced_file", str, "", "reduced model to plan with (.npz from `retarget reduce` or cached by "
                "`retarget plan`)", group="model", flag="--reduced", metavar="FILE", path=True,
                meaning="the cache, the model folders, else trained (the planner node: the model shipped for the "
                "robot before training)"),
    PlanSetting("servo_file", str, "", "a servo file (`retarget fit-servo --out`) laid over the robot's servos: the "
                "plan is made for the servos it names, with their values", group="model", flag="--servo",
                metavar="SERVO.yaml", meaning="the servos of the robot's description", path=True),
    PlanSetting("allow_training", bool, True, "train a reduced model in-process when none is given, cached or found "
                "(minutes to hours)", group="model", meaning="true"),
    PlanSetting("allow_unverified_model", bool, False, "plan even when a flexible part's frequencies miss the model "
                "card's gate (the plan's figures then rest on wrong frequencies)", group="model",
                flag="--allow-unverified-model", meaning="false"),
    PlanSetting("dt", float, 0.0, "simulation step of the plan", "s", 0.0, 1.0, "objective",
                f"{_D.dt:g} s", "--dt"),
    PlanSetting("target_stride", int, 1, "solve the quasi-static targets every N steps and interpolate between (long "
                "motions: 5)", "", 1, 1000, "objective", "1: every step", "--target-stride", zero_default=True),
    PlanSetting("window", float, 0.0, "optimize in receding-horizon windows of this length, one after another (long "
                "motions; max_iterations per window)", "s", 0.0, 1e4, "objective", "0: the whole motion at once",
                "--window"),
    PlanSetting("window_tail", float, _D.window_tail, "how far past its span a window's objective reaches", "s", 0.0,
                1e4, "objective", f"{_D.window_tail:g} s", "--window-tail"),
    PlanSetting("window_overlap", float, _D.window_overlap, "how much of each window the next one optimizes again",
                "s", 0.0, 1e4, "objective", "0: windows side by side", "--window-overlap", zero_default=False),
    PlanSetting("torque_weight", float, _D.torque_weight, "penalty on simulated motor torques above (1 - "
                "torque_margin) x the servos' stall torque (0: only reported, warned above stall)", "1/(N^2 m^2 s)",
                0.0, 1e12, "objective", f"{_D.torque_weight:g}", "--torque-weight"),
    PlanSetting("torque_margin", float, _D.torque_margin, "fraction of the stall torque the torque penalty keeps "
                "free", "", 0.0, 0.99, "objective", f"{_D.torque_margin:g}", "--torque-margin"),
    PlanSetting("rest_after", float, REST_AFTER_S, "the optimized motors come to rest this long after the input "
                "stops and hold one pose from the next knot on (negative: only the end of the motion at rest)", "s",
                None, None, "objective", f"{REST_AFTER_S:g} s", "--rest-after"),
    PlanSetting("settle_weight", float, _D.settle_weight, "factor on the tracked bodies' weights once the input stops "
                "moving (its ring-out)", "", 0.0, 1e6, "objective", f"{_D.settle_weight:g}", "--settle-weight"),
    PlanSetting("method", str, "", "optimizer: lbfgs (L-BFGS-B, adjoint gradient), descent (projected steepest "
                "descent, line search on values alone), gauss-newton (Levenberg-Marquardt, exact tangent-linear "
                "Jacobian; with windows in each) or auto (gauss-newton up to 200 parameters)", group="budget",
                meaning=_D.method, flag="--method", choices=METHODS),
    PlanSetting("max_iterations", int, 0, "optimizer iterations (per window with windows)", "", 0, 100000, "budget",
                f"{_D.max_iterations}", "--max-iterations"),
    PlanSetting("time_budget", float, 0.0, "wall-time budget of the plan (targets, optimization, checks; not the "
                "model, nor the warm-up that compiles the kernels first): the best iterate when it runs out", "s",
                0.0, 1e7, "budget", "0: none", "--time-budget"),
    PlanSetting("settle_iterations", int, _D.settle_iterations, "steps of the settle refinement after the optimizer: "
                "lowers the largest ring-out across the stiffness band (whole-motion plans of at most 200 "
                "parameters; 0: off)", "", 0, 1000, "budget", f"{_D.settle_iterations}", "--settle-iterations"),
    PlanSetting("settle_peak_allowance", float, _D.settle_peak_allowance, "factor by which the settle refinement may "
                "raise the peak deviation (1: not raised)", "", 1.0, 100.0, "budget",
                f"{_D.settle_peak_allowance:g}", "--settle-peak-allowance"),
    PlanSetting("verify", bool, True, "re-simulate the naive and optimized trajectories at verify_dt and warn when "
                "the improvement does not hold there", group="verification", meaning="true"),
    PlanSetting("verify_dt", float, 0.0, "re-simulate the naive and optimized trajectories at this finer step (with "
                "verify) and warn when the improvement does not hold there (`retarget plan --verify-dt 0`: no "
                "re-simulation)", "s", 0.0, 1.0, "verification", "dt / 5", "--verify-dt"),
    PlanSetting("verify_model", str, "", "the model the plan is verified in, one it was not optimized on: auto (the "
                "full FEM where its estimated cost fits, else the newest verification model in the model folders' "
                "verify/), full, none, or a verification model's .npz", group="verification", meaning="auto",
                flag="--verify-model", metavar="auto|full|none|FILE.npz", path=True,
                keywords=tuple(m.value for m in VerifyModel)),
)

#: The planner node's parameters (``config/<robot>.params.yaml``) that set plan options: every setting's name.
NODE_PARAMETERS: tuple[str, ...] = tuple(s.name for s in PLAN_SETTINGS)

#: Settings :func:`options_from_parameters` reads by hand: ``verify`` with ``verify_dt`` (none, or the planning step /
#: 5), ``rest_after`` (negative: None).
_BY_HAND = frozenset({"verify", "verify_dt", "rest_after"})


def options_from_parameters(parameters: Mapping[str, object], **overrides: object) -> PlanOptions:
    """:class:`PlanOptions` from the planner node's parameters (:data:`NODE_PARAMETERS`; others are ignored), then
    ``overrides`` (e.g. a goal's fields; None: not given).

    The node's convention, from each setting's declaration (:attr:`PlanSetting.zero_is_default`): a setting declared
    with 0 or an empty text as its default (but ``window_overlap``; and ``target_stride``) takes
    :class:`PlanOptions`' own default for 0, less, or empty (``dt`` 0: 0.005 s; ``window`` 0: the whole motion at
    once; ``method`` empty: lbfgs); for the others 0 is a value, as on the command line (``torque_weight`` 0 and
    ``settle_iterations`` 0 turn those off). ``verify`` false means no verification at a finer step (``verify_dt``
    0: the planning step / 5); ``rest_after`` 0 rests right after the motion, a negative one only at its end.

    Raises:
        InputError: a setting out of its range (:meth:`PlanOptions.out_of_range`), named as the parameter.
    """
    defaults = PlanOptions()
    p = dict(parameters)
    values: dict[str, object] = {}
    for s in PLAN_SETTINGS:
        value = p.get(s.name)
        if s.name in _BY_HAND or value is None:
            continue
        if s.zero_is_default and (value == "" or (not isinstance(value, (bool, str)) and value <= 0)):
            continue  # "the default": PlanOptions' own
        values[s.name] = s.kind(value)
    if p.get("verify", True):
        verify_dt = p.get("verify_dt")
        dt = float(values.get("dt", defaults.dt))  # type: ignore[arg-type]
        values["verify_dt"] = float(verify_dt) if verify_dt is not None and verify_dt > 0 else dt / 5.0
    else:
        values["verify_dt"] = None
    rest_after = p.get("rest_after", defaults.rest_after)
    values["rest_after"] = None if rest_after is None or rest_after < 0 else float(rest_after)
    values.update({k: v for k, v in overrides.items() if v is not None})
    options = PlanOptions(**values)
    for name, why in options.out_of_range():
        raise InputError(f"{name} {why}")
    return options


def with_files_from(parameters: Mapping[str, object], folder: str | Path) -> dict[str, object]:
    """``parameters`` (a params file's) with the relative paths of its file settings (:attr:`PlanSetting.path`)
    taken from ``folder`` (the params or show file's own, as someone reading the file expects), every such path made
    absolute (``~`` expanded, links followed); an empty value and a setting's keywords (``verify_model: auto``)
    stay as they are."""
    resolved = dict(parameters)
    for s in PLAN_SETTINGS:
        value = resolved.get(s.name)
        if s.names_file(value):
            resolved[s.name] = path_from(folder, str(value))
    return resolved


def path_from(folder: str | Path, value: str) -> str:
    """``value``, a file's path, absolute: a relative one taken from ``folder``, ``~`` expanded, links followed."""
    return str((Path(folder) / Path(value).expanduser()).resolve())


def missing_files(parameters: Mapping[str, object]) -> list[str]:
    """One line per file setting of ``parameters`` (the planner node's) that names no file, which a goal planning
    with it would fail on: what the node warns of at its start."""
    lines = []
    for s in PLAN_SETTINGS:
        value = parameters.get(s.name)
        if not s.names_file(value):
            continue
        path = Path(str(value)).expanduser()
        if not path.is_file():
            where = "" if path.is_absolute() else f" (a relative path: from the working directory {Path.cwd()})"
            lines.append(f"{s.name} {value}: no such file{where}; a goal fails until it is there")
    return lines


def robot_settings(robot: str | Path) -> dict[str, object]:
    """A robot's params-file values (``/**: ros__parameters`` of ``config/<robot>.params.yaml``) with its file
    settings' relative paths taken from the params file's folder (:func:`with_files_from`).

    Raises:
        UnknownNameError: unknown robot.
        InputError: no params file, or it has no ``/**: ros__parameters`` mapping.
    """
    params_file = resolve_params(robot)
    return with_files_from(read_ros_parameters(params_file), params_file.parent)


def given_servo_file(flag: str | None, params_file: Mapping[str, object]) -> str | None:
    """The servo file a command was given (``--servo``), else its robot's params file's ``servo_file``, else None
    (``retarget refine``, ``retarget play``; ``retarget plan`` merges it with the other settings)."""
    return flag or str(params_file.get("servo_file") or "") or None


#: Params-file settings ``retarget plan`` does not take from the file: where the node's model comes from and whether
#: it may train are the node's deployment (the command takes ``--reduced`` and trains when it must).
CLI_PARAMETERS_IGNORED: frozenset[str] = frozenset({"reduced_file", "allow_training"})

_GROUP_TITLES = {"model": "model", "objective": "objective", "budget": "budget", "verification": "verification"}


def setting(name: str) -> PlanSetting:
    """The declaration of ``name``.

    Raises:
        KeyError: no such setting.
    """
    for s in PLAN_SETTINGS:
        if s.name == name:
            return s
    raise KeyError(name)


def add_setting_flags(groups: Mapping[str, argparse._ActionsContainer]) -> None:
    """Add a flag for every setting that has one to its ``groups[setting.group]`` (an argparse parser or group).

    Each flag's default is None (not given), so the params file's value, else the setting's default, applies; its
    help says the unit and both.
    """
    for s in PLAN_SETTINGS:
        if not s.flag:
            continue
        target = groups[s.group]
        fallback = (f"(default: {s.meaning})" if s.name in CLI_PARAMETERS_IGNORED
                    else f"(default: the params file's {s.name}, else {s.meaning})")
        if s.kind is bool:
            target.add_argument(s.flag, action="store_true", default=None, help=f"{s.help} {fallback}")
            continue
        unit = f" [{s.unit}]" if s.unit else ""
        kwargs: dict[str, object] = {"default": None, "help": f"{s.help}{unit} {fallback}"}
        if s.choices:
            kwargs["choices"] = s.choices
        else:
            kwargs["type"] = s.kind
            kwargs["metavar"] = s.metavar or ("S" if s.unit == "s" else ("N" if s.kind is int else
                                                                        ("X" if s.kind is float else "TEXT")))
        target.add_argument(s.flag, **kwargs)


def parameters_from_flags(args: argparse.Namespace) -> dict[str, object]:
    """The settings given as flags, as node parameter values (``--verify-dt 0``: ``verify`` false)."""
    given: dict[str, object] = {}
    for s in PLAN_SETTINGS:
        if not s.flag:
            continue
        value = getattr(args, s.dest, None)
        if value is None:
            continue
        if s.name == "verify_dt" and value == 0:
            given["verify"] = False
            continue
        given[s.name] = value
    return given


def resolve_plan_options(params_file: Mapping[str, object], flags: Mapping[str, object],
                         **others: object) -> PlanOptions:
    """:class:`PlanOptions` from a robot's params-file values (its planner settings; the others and
    :data:`CLI_PARAMETERS_IGNORED` are ignored), over them the settings given as flags (node parameter values,
    :func:`parameters_from_flags`), and ``others`` (options that are not params-file settings; None: not given).

    Raises:
        InputError: a setting out of its range, named as the parameter.
    """
    names = {s.name for s in PLAN_SETTINGS} - CLI_PARAMETERS_IGNORED
    merged = {k: v for k, v in params_file.items() if k in names}
    merged.update(flags)
    if flags.get("verify_dt"):  # a step given on the command line verifies, whatever the file says
        merged["verify"] = True
    return options_from_parameters(merged, **others)


#: The lines around the planner settings' table in :data:`TABLE_DOC`, which ``python -m retarget.planning.settings``
#: rewrites from :data:`PLAN_SETTINGS` (tests/planning/test_settings.py checks the doc holds the current table).
TABLE_BEGIN = "<!-- planner settings: generated from PLAN_SETTINGS by `python -m retarget.planning.settings` -->"
TABLE_END = "<!-- end of the generated planner settings -->"
#: The doc that holds the table, relative to the repository.
TABLE_DOC = "docs/ros.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default_cell(s: PlanSetting) -> str:
    """The node parameter's default and, where it stands for another value, what that is."""
    value = ("true" if s.default else "false") if s.kind is bool else (f'`"{s.default}"`' if s.kind is str
                                                                        else f"`{s.default:g}`")
    return f"{value}: {_cell(s.stands_for)}" if s.stands_for else value


def settings_table() -> str:
    """:data:`PLAN_SETTINGS` as a markdown table: the node's parameter, ``retarget plan``'s flag, type, unit, range
    or choices, default and help, one row per setting."""
    rows = ["| parameter | `retarget plan` | type | unit | range | default | what it does |",
            "|---|---|---|---|---|---|---|"]
    for s in PLAN_SETTINGS:
        if s.choices:
            allowed = ", ".join(s.choices)
        elif s.low is not None and s.high is not None:
            allowed = f"{s.low:g} to {s.high:g}"
        else:
            allowed = ""
        flag = f"`{s.flag}`" if s.flag else ("`--verify-dt 0`: false" if s.name == "verify" else "—")
        if s.name in CLI_PARAMETERS_IGNORED and s.flag:
            flag += " (the params file's value is the node's alone)"
        kind = f"{s.kind.__name__} (file)" if s.path else s.kind.__name__
        rows.append(f"| `{s.name}` | {flag} | {kind} | {_cell(s.unit)} | {_cell(allowed)} | "
                    f"{_default_cell(s)} | {_cell(s.help)} |")
    return "\n".join(rows)


def with_settings_table(text: str) -> str:
    """``text`` (a doc) with the lines between :data:`TABLE_BEGIN` and :data:`TABLE_END` replaced by
    :func:`settings_table`.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise ValueError(f"the markers {TABLE_BEGIN!r} and {TABLE_END!r} are not in the doc, in that order")
    return f"{text[:begin + len(TABLE_BEGIN)]}\n{settings_table()}\n{text[end:]}"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the planner settings' table in :data:`TABLE_DOC` (or the doc given), or ``--print`` it."""
    from pathlib import Path

    from retarget.atomic import write_text_atomic

    parser = argparse.ArgumentParser(prog="python -m retarget.planning.settings",
                                     description="the planner settings' table of the docs, from PLAN_SETTINGS")
    parser.add_argument("doc", nargs="?", default=str(Path(__file__).resolve().parents[3] / TABLE_DOC),
                        help=f"the doc to rewrite between its markers (default: the repository's {TABLE_DOC})")
    parser.add_argument("--print", action="store_true", help="print the table instead")
    args = parser.parse_args(argv)
    if args.print:
        print(settings_table())
        return 0
    path = Path(args.doc)
    text = path.read_text(encoding="utf-8")
    try:
        updated = with_settings_table(text)
    except ValueError as exc:
        parser.error(f"{path}: {exc}")
    if updated != text:
        write_text_atomic(path, updated)
    print(f"{path}: {'updated' if updated != text else 'already current'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
