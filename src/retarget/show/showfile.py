"""A show file: the jobs of a show, validated before any work, and the hash that keys each job's result.

A show file (YAML)::

    jobs:
      - robot: single_rod                  # a robot name (``retarget robots``) or its params YAML
        motion: single_rod/step_30_servo   # a library motion or a motion file
        options: {max_iterations: 20}      # PlanOptions fields (docs/optimize.md); others: PlanOptions' defaults
      - robot: robots/arm.yaml             # paths are relative to the show file
        motion: takes/wave.csv

:func:`load_show` checks every job before anything is planned: the robot and motion resolve, every option is a
:class:`~retarget.planning.options.PlanOptions` field with a value of its type and within its range. Every problem is
reported at once, each naming the job (``jobs[2]``) and the field. :func:`job_key` is the SHA-256 of what a job's
result depends on (robot and motion file contents, options, the files options name, retarget's version): the results
folder keys each finished job by it, so a second run skips exactly the jobs whose inputs did not change.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retarget.errors import InputError
from retarget.jsonsafe import JSONObject
from retarget.planning.options import METHODS, PlanOptions
from retarget.planning.settings import PLAN_SETTINGS, setting, with_files_from

if TYPE_CHECKING:
    from retarget.motion.motion import Motion

__all__ = ["JOB_KEYS", "SHOW_WORKERS", "Show", "ShowJob", "job_key", "load_show", "plan_options", "submission_order"]

#: The keys of a job in a show file.
JOB_KEYS: tuple[str, ...] = ("robot", "motion", "options", "recording")

#: ``PlanOptions.workers`` of a show job that does not set it (or sets it to null): one process per plan, Ray runs
#: the jobs side by side (forked worker processes inside a Ray worker would compete with the other jobs for the same
#: cores). When the cluster has more CPUs than the show has jobs, the show gives the spare ones to its longest jobs
#: (:func:`retarget.show.runner.task_cpus`).
SHOW_WORKERS = 1

#: Option fields that name files: resolved relative to the show file, their contents part of the job's key.
_FILE_OPTIONS: tuple[str, ...] = tuple(s.name for s in PLAN_SETTINGS if s.path and not s.keywords)

#: Option fields with a fixed set of values.
_CHOICES: dict[str, tuple[str, ...]] = {"method": METHODS, "start": ("feasible", "input")}

#: Option fields a show file cannot set: ``bodies`` holds typed objects (``weights`` takes the same in text).
_NOT_IN_SHOW: dict[str, str] = {"bodies": "not settable in a show file; use weights (LINK:pos=W[,ori=W])"}


@dataclass(frozen=True)
class ShowJob:
    """One plan of a show.

    Attributes:
        index: the job's position in the show file's ``jobs`` list (0-based).
        robot: the robot as written (a name, or a path).
        robot_path: the robot's params YAML.
        motion: the motion as written (a library name, or a path).
        motion_path: the motion file.
        options: the plan's settings.
        workers_given: whether the show file set ``workers`` (then the job's task reserves that many CPUs; else the
            show sizes it: :data:`SHOW_WORKERS`, more when the cluster has room).
    """

    index: int
    robot: str
    robot_path: Path
    motion: str
    motion_path: Path
    options: PlanOptions
    workers_given: bool = False

    @property
    def label(self) -> str:
        """``<robot> <motion>`` as a person reads it: files by their stems, a library motion by its own name."""
        robot = Path(self.robot).stem if Path(self.robot).suffix else self.robot
        motion = Path(self.motion).stem if Path(self.motion).suffix else Path(self.motion).name
        return f"{robot} {motion}"


@dataclass(frozen=True)
class Show:
    """A validated show file: its path and its jobs, in order."""

    path: Path
    jobs: tuple[ShowJob, ...]


def _type_error(where: str, expected: str, value: object) -> str:
    return f"{where}: expected {expected}, got {value!r}"


def _coerce(where: str, annotation: str, value: object, problems: list[str]) -> object:
    """``value`` as a value of a :class:`PlanOptions` field annotated ``annotation`` (the dataclass's annotation
    text), or None after appending a problem."""
    optional = annotation.endswith("| None")
    base = annotation.removesuffix("| None").strip()
    if value is None:
        if optional:
            return None
        problems.append(_type_error(where, base, value))
        return None
    if base == "bool":
        if isinstance(value, bool):
            return value
        problems.append(_type_error(where, "true or false", value))
        return None
    if base == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        problems.append(_type_error(where, "an integer", value))
        return None
    if base == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 5e-3 (no dot) as text
            try:
                return float(value)
            except ValueError:
                pass
        problems.append(_type_error(where, "a number", value))
        return None
    if base == "str":
        if isinstance(value, str):
            return value
        problems.append(_type_error(where, "text", value))
        return None
    if base.startswith("tuple["):
        item = base[len("tuple["):].split(",")[0].strip()
        items = value if isinstance(value, (list, tuple)) else None
        if items is None:
            problems.append(_type_error(where, f"a list of {item}", value))
            return None
        before = len(problems)
        out = tuple(_coerce(f"{where}[{k}]", item, v, problems) for k, v in enumerate(items))
        return out if len(problems) == before else None
    return value  # a field of any type: a number, schedule text or mapping (the planner checks it)


def plan_options(where: str, given: object, folder: Path, problems: list[str]) -> PlanOptions | None:
    """The :class:`PlanOptions` of one job's ``options`` mapping; every problem appended (``where.field: …``).

    File options (``reduced_file``, ``servo_file``, an artifact in ``verify_model``) are resolved relative to
    ``folder``; ``workers`` (not given or null) to :data:`SHOW_WORKERS`; ``verify_dt`` to ``dt / 5`` as in
    ``retarget plan`` (0 or null: none).
    """
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        problems.append(_type_error(where, "a mapping of PlanOptions fields", given))
        return None
    fields = {f.name: f for f in dataclasses.fields(PlanOptions)}
    before = len(problems)
    values: dict[str, object] = {}
    for name, value in given.items():
        spot = f"{where}.{name}"
        if name not in fields:
            problems.append(f"{spot}: not a plan option (known: {', '.join(sorted(set(fields) - set(_NOT_IN_SHOW)))})")
            continue
        if name in _NOT_IN_SHOW:
            problems.append(f"{spot}: {_NOT_IN_SHOW[name]}")
            continue
        values[name] = _coerce(spot, str(fields[name].type), value, problems)
        if name in _CHOICES and values[name] is not None and values[name] not in _CHOICES[name]:
            problems.append(f"{spot}: expected one of {', '.join(_CHOICES[name])}, got {values[name]!r}")
    if len(problems) > before:
        return None
    # As `retarget plan`: verified at dt / 5 unless told (0 or null: no verification at a finer step).
    if "verify_dt" not in values:
        values["verify_dt"] = float(values.get("dt", PlanOptions.dt)) / 5.0
    elif values["verify_dt"] is not None and values["verify_dt"] == 0.0:
        values["verify_dt"] = None
    given_verify = values.get("verify_model")
    values = with_files_from(values, folder)
    problems.extend(f"{where}.{name}: no such file {values[name]}" for name in _FILE_OPTIONS
                    if values.get(name) is not None and not Path(values[name]).is_file())
    verify = values.get("verify_model")
    if verify is not None and verify not in setting("verify_model").keywords:
        path = Path(verify)
        if path.suffix.lower() != ".npz" or not path.is_file():
            problems.append(f"{where}.verify_model: expected auto, full, none or an existing reduced-model artifact "
                            f"(.npz), got {given_verify!r}")
    if values.get("workers") is None:
        values["workers"] = SHOW_WORKERS
    elif values["workers"] < 1:
        problems.append(f"{where}.workers: must be 1 or more, got {values['workers']}")
    if len(problems) > before:
        return None
    options = PlanOptions(**values)
    problems.extend(f"{where}.{name}: {why}" for name, why in options.out_of_range())
    return options if len(problems) == before else None


def _resolve(where: str, text: object, folder: Path, kind: str, problems: list[str]) -> Path | None:
    """The file of a job's ``robot`` or ``motion``: a path relative to the show file, else a library name."""
    from retarget.model import library

    if not isinstance(text, str) or not text:
        problems.append(_type_error(where, f"a {kind} name or file", text))
        return None
    local = folder / text
    if local.is_file():
        return local.resolve()
    try:
        found = library.resolve_robot(text) if kind == "robot" else library.resolve_motion(text)
    except InputError as exc:  # UnknownNameError: neither a file nor a known name
        problems.append(f"{where}: {exc}")
        return None
    return Path(found).resolve()


def load_show(path: str | Path) -> Show:
    """Read and check a show file: every job's robot, motion and options, before any work.

    Raises:
        InputError: the file is missing or not a YAML mapping with a non-empty ``jobs`` list, or any job is wrong;
            the message lists every problem, each naming the job (``jobs[i]``) and the field.
        NotAvailableError: a job asks to refine from a ``recording`` (``retarget refine`` does that, one take at a
            time).
    """
    import yaml

    from retarget.errors import NotAvailableError

    path = Path(path)
    if not path.is_file():
        raise InputError(f"show file {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"show file {path}: not YAML: {exc}") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise InputError(f"show file {path}: expected a mapping with a non-empty `jobs:` list")
    unknown = sorted(set(data) - {"jobs"})
    problems: list[str] = [f"{k}: unknown top-level key (a show file has `jobs:`)" for k in unknown]
    folder = path.parent
    jobs: list[ShowJob] = []
    recordings: list[str] = []
    for i, entry in enumerate(data["jobs"]):
        where = f"jobs[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(_type_error(where, "a mapping with robot, motion and options", entry))
            continue
        problems.extend(f"{where}.{k}: unknown key (a job has {', '.join(JOB_KEYS)})"
                        for k in entry if k not in JOB_KEYS)
        for key in ("robot", "motion"):
            if key not in entry:
                problems.append(f"{where}.{key}: missing")
        if entry.get("recording") is not None:
            recordings.append(where)
        robot = _resolve(f"{where}.robot", entry.get("robot"), folder, "robot", problems) \
            if "robot" in entry else None
        motion = _resolve(f"{where}.motion", entry.get("motion"), folder, "motion", problems) \
            if "motion" in entry else None
        options = plan_options(f"{where}.options", entry.get("options"), folder, problems)
        if robot is not None and motion is not None and options is not None:
            given = entry.get("options")
            workers_given = isinstance(given, Mapping) and given.get("workers") is not None
            jobs.append(ShowJob(i, str(entry["robot"]), robot, str(entry["motion"]), motion, options, workers_given))
    if problems:
        raise InputError(f"show file {path}: " + ("\n  " if len(problems) > 1 else "") + "\n  ".join(problems))
    if recordings:
        raise NotAvailableError(f"show file {path}: {', '.join(recordings)}.recording: refining from a recording is "
                                "not yet supported by `retarget show plan`; run `retarget refine` on that take")
    return Show(path, tuple(jobs))


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _robot_digests(path: Path) -> dict[str, str]:
    """SHA-256 of the robot's params YAML and of the URDF it names (when it resolves)."""
    from retarget.model.loader import read_robot_yaml, section_urdf

    out = {"yaml": _file_digest(path)}
    try:
        urdf = section_urdf(read_robot_yaml(path), path)
        out["urdf"] = _file_digest(Path(urdf))
    except (InputError, OSError):
        pass
    return out


def _options_record(options: PlanOptions) -> JSONObject:
    """Every field of ``options`` as JSON-able values (tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(options), default=str, sort_keys=True))


def job_key(job: ShowJob) -> str:
    """The SHA-256 (hex) of what ``job``'s result depends on: the robot's YAML and URDF contents, the motion file's
    contents, every plan option, the contents of the files the options name, and retarget's version."""
    from retarget import __version__

    files = {name: _file_digest(Path(getattr(job.options, name))) for name in _FILE_OPTIONS
             if getattr(job.options, name) is not None}
    if Path(job.options.verify_model).suffix.lower() == ".npz":
        files["verify_model"] = _file_digest(Path(job.options.verify_model))
    record = {"robot": _robot_digests(job.robot_path), "motion": _file_digest(job.motion_path),
              "options": _options_record(job.options), "files": files, "retarget": __version__}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def submission_order(jobs: list[ShowJob], motions: Mapping[int, Motion]) -> list[ShowJob]:
    """``jobs`` longest first, by a proxy of their planning work (the motion's steps × the optimizer's iterations):
    with more jobs than CPUs the long ones start first and the short ones fill in beside them, rather than a long job
    submitted last running alone while the other CPUs idle (longest-processing-time-first scheduling). Ties keep the
    show file's order."""
    def work(job: ShowJob) -> float:
        steps = motions[job.index].duration / job.options.dt
        return steps * max(job.options.max_iterations, 1)

    return sorted(jobs, key=work, reverse=True)
