"""A show planned on Ray: models trained once each, one task per plan, results written as they come.

:func:`run_show` (driver side):

1. each job's key (:func:`~retarget.show.showfile.job_key`); a job whose folder exists under the results folder is
   skipped;
2. Ray: the instance already initialised in this process, else :func:`connect` (a local instance sized to the machine
   without an address; with one, the cluster's);
3. one training task per planning model the jobs need (robot, training motion, training settings): it finds or
   trains the model as :func:`~retarget.planning.model.planning_model` does and returns its artifact
   (:class:`ModelArtifact`, the ``.npz`` bytes), which Ray keeps in its object store;
4. one plan task per job, taking its model's artifact as an argument: Ray starts it once the model exists and a
   node has the CPUs it reserves (:func:`task_cpus`: one, more when the cluster has more CPUs than the show has
   jobs, its plan then running that many ``workers``); the task lands the artifact where that node's planner looks
   (the model cache, :func:`retarget.sim.reduced.store.cache_dir`, or a model folder) when missing, and
   :func:`~retarget.planning.run.plan` then finds it there, as ``retarget plan`` does;
5. each result is written as it arrives (:class:`~retarget.show.results.ResultsFolder`); a failed job is a row with
   its error; a worker that dies is retried by Ray (:data:`MAX_RETRIES`); Ctrl-C cancels what is left.

Every task runs with :data:`THREAD_ENV` in its runtime environment: one BLAS / OpenMP / numba thread per task, Ray
running as many tasks at once as the cluster has CPUs.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import ray

from retarget.atomic import write_bytes_atomic
from retarget.jsonsafe import JSONObject, dumps
from retarget.show.results import JobRow, JobStatus, PlanOutcome, ResultsFolder
from retarget.show.showfile import Show, ShowJob, job_key, submission_order

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from retarget.motion.motion import Motion

__all__ = ["MAX_RETRIES", "THREAD_ENV", "JobEvent", "ModelArtifact", "ShowSummary", "connect", "run_show",
           "task_cpus"]

#: Thread settings of every task's process (its runtime environment): one thread each, so that N tasks on N CPUs
#: do not oversubscribe the cores.
THREAD_ENV: dict[str, str] = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                              "NUMBA_NUM_THREADS": "1"}

#: How many times Ray re-runs a task whose worker process died (killed, out of memory, node lost). A task that
#: raises is not retried: the error is the job's.
MAX_RETRIES = 2

#: The model store's environment variables a task is run with (the driver's): where models are cached and found.
STORE_ENV: tuple[str, ...] = ("RETARGET_CACHE", "RETARGET_MODELS")

#: How often a task reports its progress to the driver [s].
PROGRESS_PERIOD_S = 0.5


@dataclass(frozen=True)
class ModelArtifact:
    """A planning model travelling through Ray's object store.

    Attributes:
        name: its file name (the cache's key, or the model folder's name).
        data: the ``.npz`` artifact's bytes.
        digest: their SHA-256 (hex).
        where: ``cache`` (a model the planner cached) or ``models`` (found in a model folder).
    """

    name: str
    data: bytes
    digest: str
    where: str = "cache"


@dataclass(frozen=True)
class JobEvent:
    """What :func:`run_show` reports about a job while it runs.

    Attributes:
        index: the job.
        kind: ``started`` (a worker began an attempt), ``progress``, ``done``, ``failed``, ``skipped``, ``cancelled``.
        stage: the plan's current stage (``progress``).
        done, total: the stage's steps (``progress``).
        attempt: the attempt's number (1, then 2… when Ray retried the job).
        pid: the worker process of the attempt.
        row: the job's summary row (``done``, ``failed``, ``skipped``, ``cancelled``).
    """

    index: int
    kind: str
    stage: str = ""
    done: int = 0
    total: int = 0
    attempt: int = 0
    pid: int = 0
    row: JobRow | None = None


class RayInfo(TypedDict, total=False):
    """The Ray a show ran on, as its summary records it.

    Attributes:
        address: ``local`` (started for the show), ``existing`` (initialised in this process already), or the
            address joined.
        start_s: time to start or join it [s] (not for ``existing``).
        nodes: live nodes.
        cpus: CPUs of the cluster.
    """

    address: str
    start_s: float
    nodes: int
    cpus: float


class _BoardEntry(TypedDict, total=False):
    """A job's latest attempt as tasks post it on the board."""

    attempt: int
    pid: int
    node: str
    stage: str
    done: int
    total: int


@dataclass(frozen=True)
class ShowSummary:
    """A show's outcome: a row per job, in the show file's order, and how it ran."""

    show: str
    out: str
    rows: tuple[JobRow, ...]
    wall_s: float
    interrupted: bool = False
    ray: RayInfo = field(default_factory=RayInfo)

    def count(self, status: JobStatus) -> int:
        return sum(1 for r in self.rows if r.status is status)

    def to_json(self) -> JSONObject:
        """The summary as ``summary.json`` and ``--json`` have it."""
        return {"show": self.show, "out": self.out, "jobs": [r.to_json() for r in self.rows],
                **{s.value: self.count(s) for s in JobStatus}, "wall_s": self.wall_s,
                "interrupted": self.interrupted, "ray": self.ray}


def connect(address: str | None = None) -> RayInfo:
    """Start or join Ray; returns what the summary records (address, nodes, CPUs, start-up time).

    Args:
        address: None: a local instance with one CPU per core of this machine (``os.cpu_count()``) and no dashboard;
            ``auto``: the cluster running on this machine (``ray start --head``); ``ray://HOST:PORT``: a remote
            cluster through Ray Client.
    """
    started = time.perf_counter()
    kwargs: dict[str, bool | str] = {"log_to_driver": False, "logging_level": "ERROR", "include_dashboard": False}
    if address is None:  # "local": a new instance even when `ray start` left a cluster running on this machine
        ray.init(address="local", num_cpus=os.cpu_count(), **kwargs)
    else:
        kwargs.pop("include_dashboard")
        ray.init(address=address, **kwargs)
    return RayInfo(address=address or "local", start_s=time.perf_counter() - started, **cluster_info())


def cluster_info() -> RayInfo:
    """The cluster's live nodes and CPUs."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return RayInfo(nodes=len(nodes), cpus=float(ray.cluster_resources().get("CPU", 0.0)))


def _node_cpus() -> list[int]:
    """The CPUs of each live node of the cluster."""
    return [int(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]


def task_cpus(jobs: Sequence[ShowJob], node_cpus: Sequence[int]) -> dict[int, int]:
    """The CPUs each job's plan task reserves, by job index; ``jobs`` in submission order (longest first),
    ``node_cpus`` the CPUs of each node.

    A job whose show file sets ``workers`` reserves that many (at most the largest node's CPUs: a plan's worker
    processes are forked on its node). The others reserve one each. When every job fits on the cluster at once with
    CPUs to spare, the spare ones go one at a time to the jobs that leave ``workers`` to the show, longest first
    and in turn, each as long as the jobs still fit on the nodes together (each job on one node); such a job's plan
    then runs as many ``workers``: its robust members, verification variants and band factors side by side instead
    of one after another (the same answer, :mod:`retarget.optimize.parallel`, unless a time budget ends the plan:
    then more iterations fit in it). The CPUs are shared out once, when the jobs are submitted: a job does not grow
    when others finish.
    """
    largest = max(node_cpus, default=1)
    cpus = {job.index: max(1, min(job.options.workers or 1, largest)) if job.workers_given else 1 for job in jobs}
    if not _fits(list(cpus.values()), node_cpus):
        return cpus
    growing = [job.index for job in jobs if not job.workers_given]
    while True:  # rounds: each job one more CPU, longest first, where the jobs still fit together
        grew = False
        for i in growing:
            cpus[i] += 1
            if cpus[i] <= largest and _fits(list(cpus.values()), node_cpus):
                grew = True
            else:
                cpus[i] -= 1
        if not grew:
            return cpus


def _fits(sizes: list[int], node_cpus: Sequence[int]) -> bool:
    """Whether tasks of ``sizes`` CPUs fit on nodes of ``node_cpus`` at once (largest first, each into the fullest
    node it fits in)."""
    left = list(node_cpus)
    for size in sorted(sizes, reverse=True):
        fitting = [k for k in range(len(left)) if left[k] >= size]
        if not fitting:
            return False
        k = min(fitting, key=lambda n: left[n])
        left[k] -= size
    return True


@contextlib.contextmanager
def _environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """The model store's variables set as the driver had them, for the duration of a task (a worker runs the tasks
    of several shows in turn)."""
    before = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _model_arguments(job: ShowJob) -> dict[str, int | float | None]:
    """The arguments :func:`~retarget.planning.run.plan` passes to ``planning_model`` (servo file aside: a
    model is trained with the robot's servos and used with the file's)."""
    o = job.options
    return {"n_modes": o.modes, "dt_train": o.dt_train, "mesh_axial": o.mesh_axial, "mesh_around": o.mesh_around}


def training_group(job: ShowJob, motion_digest: str) -> tuple[Hashable, ...] | None:
    """The planning model ``job`` needs, as a key shared by every job that needs the same one (None: the job's plan
    gets its model itself — a given ``reduced_file``, no cache, or no training allowed)."""
    o = job.options
    if o.reduced_file is not None or not o.use_cache or not o.allow_training:
        return None
    return (str(job.robot_path), motion_digest, *sorted(_model_arguments(job).items()))


@ray.remote(num_cpus=0)
class _Board:
    """Where tasks post their progress and the driver reads it (no CPU while idle)."""

    def __init__(self) -> None:
        self.state: dict[int, _BoardEntry] = {}

    def started(self, index: int, pid: int, node: str) -> int:
        entry = self.state.setdefault(index, {"attempt": 0})
        entry.update(attempt=entry["attempt"] + 1, pid=pid, node=node, stage="starting", done=0, total=0)
        return int(entry["attempt"])

    def progress(self, index: int, stage: str, done: int, total: int) -> None:
        entry = self.state.setdefault(index, {"attempt": 0})
        entry.update(stage=stage, done=done, total=total)

    def snapshot(self) -> dict[int, _BoardEntry]:
        return {k: _BoardEntry(**v) for k, v in self.state.items()}


def _train_task(job: ShowJob, motion: Motion, store_env: Mapping[str, str | None]) -> ModelArtifact | None:
    """Find or train the planning model of ``job`` as :func:`~retarget.planning.model.planning_model` does
    (the cache, the model folders, or a training run into the cache) and return its artifact file: the cache's, or
    the model folder's (None: a model without a file)."""
    from retarget.planning.model import planning_model

    with _environment(store_env):
        pm = planning_model(job.robot_path, motion, use_cache=True, allow_training=True, **_model_arguments(job))
    cached, found = pm.info.get("cache_file"), pm.info.get("file")
    source, where = (cached, "cache") if cached else (found, "models")
    if not source or not Path(source).is_file():
        return None
    data = Path(source).read_bytes()
    return ModelArtifact(Path(source).name, data, hashlib.sha256(data).hexdigest(), where)


def _same_file(path: Path, digest: str) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest


def _land(artifact: ModelArtifact) -> None:
    """Write ``artifact`` where this node's planner looks for it, unless the same file is there: the model cache
    (:func:`~retarget.sim.reduced.store.cache_dir`), or the first model folder
    (:func:`~retarget.sim.reduced.store.artifact_dirs`) when no model folder has it. Temporary name, then rename."""
    from retarget.sim.reduced.store import artifact_dirs, cache_dir

    if artifact.where == "cache":
        path = cache_dir() / artifact.name
        if _same_file(path, artifact.digest):
            return
    else:
        folders = artifact_dirs()
        if not folders or any(_same_file(folder / artifact.name, artifact.digest) for folder in folders):
            return
        path = folders[0] / artifact.name
    write_bytes_atomic(path, artifact.data)


@dataclass(frozen=True)
class _TaskOutput:
    """What a plan task sends back: the figures, the job's files (zip bytes) and its timing."""

    outcome: PlanOutcome
    files: bytes
    task_s: float
    node: str


def _plan_task(job: ShowJob, motion: Motion, artifact: ModelArtifact | None, store_env: Mapping[str, str | None],
               board: ActorHandle) -> _TaskOutput:
    """Plan one job in a worker: the model landed, :func:`~retarget.planning.run.plan`, the job's files."""
    from retarget.planning.run import PlanProgress, plan
    from retarget.show.results import plan_outcome, write_job_files

    started = time.perf_counter()
    node = ray.get_runtime_context().get_node_id()
    board.started.remote(job.index, os.getpid(), node)
    last = [0.0]

    def steps(stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= PROGRESS_PERIOD_S or (total > 0 and done >= total):
            last[0] = now
            board.progress.remote(job.index, stage, int(done), int(total))

    def iteration(info: Mapping[str, float]) -> None:
        board.progress.remote(job.index, "optimizing", int(info.get("iteration", 0)), int(job.options.max_iterations))

    with _environment(store_env):
        if artifact is not None:
            _land(artifact)
        result = plan(job.robot_path, motion, job.options, PlanProgress(steps=steps, iteration=iteration))
        outcome = plan_outcome(result, float(motion.time[0]))
        with tempfile.TemporaryDirectory(prefix="retarget-show-") as tmp:
            files = write_job_files(result, motion, Path(tmp))
    return _TaskOutput(outcome, files, time.perf_counter() - started, node)


def _error_text(exc: BaseException) -> str:
    """The job's error as one line: the task's own exception where Ray wraps one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"


def run_show(show: Show, out: str | Path, address: str | None = None,
             on_event: Callable[[JobEvent], None] | None = None) -> ShowSummary:
    """Plan every job of ``show`` on Ray, writing each result under ``out`` as it finishes.

    Args:
        show: the validated show (:func:`~retarget.show.showfile.load_show`).
        out: the results folder (:mod:`retarget.show.results`).
        address: Ray to use when this process has none initialised (:func:`connect`); it is shut down at the end
            when this call started it.
        on_event: told of every job's progress (:class:`JobEvent`); a KeyboardInterrupt it raises stops the show
            as Ctrl-C does; any other exception cancels the running tasks and propagates.

    Returns:
        The :class:`ShowSummary` (also written as ``summary.json`` and ``index.html``); ``interrupted`` after Ctrl-C,
        the unfinished jobs ``cancelled``.
    """
    from retarget.motion import load_motion

    started = time.perf_counter()
    folder = ResultsFolder(out)
    emit = on_event or (lambda event: None)
    rows: dict[int, JobRow] = {}
    keys = {job.index: job_key(job) for job in show.jobs}
    todo: list[ShowJob] = []
    for job in show.jobs:
        done = folder.finished(job.label, keys[job.index])
        if done is None:
            todo.append(job)
            continue
        rows[job.index] = JobRow(job.index, job.robot, job.motion, JobStatus.SKIPPED, done.get("verified_ratio"),
                                 done.get("torque_ratio"), done.get("cut_reached"), done.get("wall_s"),
                                 key=keys[job.index], folder=done.get("folder", ""))
        emit(JobEvent(job.index, "skipped", row=rows[job.index]))
    ray_info = RayInfo()
    owned = False
    interrupted = False
    if todo:
        if not ray.is_initialized():
            ray_info = connect(address)
            owned = True
        else:
            ray_info = RayInfo(address="existing", **cluster_info())
    try:
        if todo:
            interrupted = _run_jobs(todo, keys, folder, rows, emit, load_motion)
    finally:
        if owned:
            ray.shutdown()
    summary = ShowSummary(str(show.path), str(folder.root), tuple(rows[j.index] for j in show.jobs),
                          time.perf_counter() - started, interrupted, ray_info)
    folder.write_summary(summary.to_json())
    return summary


def _run_jobs(todo: list[ShowJob], keys: dict[int, str], folder: ResultsFolder, rows: dict[int, JobRow],
              emit: Callable[[JobEvent], None], load_motion: Callable[[Path], Motion]) -> bool:
    """Submit the training and plan tasks of ``todo``, collect them into ``rows``; True when interrupted."""
    store_env = {k: os.environ.get(k) for k in STORE_ENV}
    options = {"runtime_env": {"env_vars": dict(THREAD_ENV)}, "max_retries": MAX_RETRIES}
    train = ray.remote(num_cpus=1)(_train_task).options(**options)
    plan_remote = ray.remote(num_cpus=1)(_plan_task)
    board = _Board.remote()
    motions = {job.index: load_motion(job.motion_path) for job in todo}
    trainings: dict[tuple[Hashable, ...], ray.ObjectRef] = {}
    pending: dict[ray.ObjectRef, ShowJob] = {}
    order = submission_order(todo, motions)
    cpus = task_cpus(order, _node_cpus())
    for job in order:
        group = training_group(job, hashlib.sha256(job.motion_path.read_bytes()).hexdigest())
        artifact = None
        if group is not None:
            if group not in trainings:
                trainings[group] = train.remote(job, motions[job.index], store_env)
            artifact = trainings[group]
        sized = job if job.workers_given else replace(job, options=replace(job.options, workers=cpus[job.index]))
        ref = plan_remote.options(**options, retry_exceptions=False, num_cpus=cpus[job.index]).remote(
            sized, motions[job.index], artifact, store_env, board)
        pending[ref] = job
    seen: dict[int, _BoardEntry] = {}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=PROGRESS_PERIOD_S)
            _relay(ray.get(board.snapshot.remote()), seen, emit)
            for ref in ready:
                job = pending.pop(ref)
                rows[job.index] = _collect(ref, job, keys[job.index], folder, seen.get(job.index, {}),
                                           cpus[job.index])
                emit(JobEvent(job.index, rows[job.index].status.value, row=rows[job.index]))
    except BaseException as exc:
        for ref in pending:
            ray.cancel(ref, force=True)
        if not isinstance(exc, KeyboardInterrupt):
            raise
        for job in pending.values():
            rows[job.index] = JobRow(job.index, job.robot, job.motion, JobStatus.CANCELLED, error="interrupted",
                                     key=keys[job.index], attempts=int(seen.get(job.index, {}).get("attempt", 0)))
            emit(JobEvent(job.index, "cancelled", row=rows[job.index]))
        return True
    finally:
        ray.kill(board)
    return False


def _relay(state: Mapping[int, _BoardEntry], seen: dict[int, _BoardEntry],
           emit: Callable[[JobEvent], None]) -> None:
    """Events for what changed on the board since the last look."""
    for index, entry in sorted(state.items()):
        before = seen.get(index, {})
        if entry.get("attempt") != before.get("attempt"):
            emit(JobEvent(index, "started", attempt=int(entry["attempt"]), pid=int(entry.get("pid", 0))))
        if (entry.get("stage"), entry.get("done"), entry.get("total")) != (
                before.get("stage"), before.get("done"), before.get("total")):
            emit(JobEvent(index, "progress", stage=str(entry.get("stage", "")), done=int(entry.get("done", 0)),
                          total=int(entry.get("total", 0)), attempt=int(entry.get("attempt", 0)),
                          pid=int(entry.get("pid", 0))))
        seen[index] = _BoardEntry(**entry)


def _collect(ref: ray.ObjectRef, job: ShowJob, key: str, folder: ResultsFolder, board: _BoardEntry,
             cpus: int) -> JobRow:
    """The row of a finished task (which reserved ``cpus``): its files committed to the results folder, or its
    error."""
    attempts = int(board.get("attempt", 0))
    try:
        output: _TaskOutput = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - any task failure is the job's, reported in its row
        return JobRow(job.index, job.robot, job.motion, JobStatus.FAILED, error=_error_text(exc), key=key,
                      attempts=max(attempts, 1), node=str(board.get("node", "")), cpus=cpus)
    outcome = output.outcome
    row = JobRow(job.index, job.robot, job.motion, JobStatus.DONE, outcome.verified_ratio, outcome.torque_ratio,
                 outcome.cut_reached, outcome.wall_s, key=key,
                 folder=folder.job_folder(job.label, key).relative_to(folder.root).as_posix(),
                 attempts=max(attempts, 1), node=output.node, task_s=output.task_s, cpus=cpus)
    profile = io.BytesIO()
    np.savez(profile, joint_names=np.asarray(outcome.joint_names), times=outcome.times, positions=outcome.positions,
             parameters=outcome.parameters)
    record = {**row.to_json(), "metrics": outcome.metrics}
    dumps(record)  # strict JSON, checked before anything is renamed into place
    folder.commit(job.label, key, output.files, record, {"profile.npz": profile.getvalue()})
    return row
