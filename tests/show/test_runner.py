"""A show on a real Ray cluster of two nodes on this machine (retarget.show.runner; no mocks): three jobs on the
tiny robot complete and equal ``plan()`` in-process; a finished show's second run skips every job; a worker killed
mid-job is retried; an interrupted show resumes without planning its finished jobs again; a failing job is reported
and the rest finish; ``retarget show plan --address`` from another process joins the cluster and uses both nodes.

One Ray cluster with 2 CPUs for the module (two nodes of one CPU each), one model cache (the tiny robot's model is
trained once, by the first show's training task), tiny budgets (one or a few iterations, no robust members, no
verification model).
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import ray
from tiny_robot import write_tiny_robot


def on_ray(test):
    """The marks of a test that plans on the module's Ray cluster (it starts processes, and takes seconds)."""
    return pytest.mark.integration(pytest.mark.slow(test))


#: Plan options of every job: the tiny robot's 2-mode model, one iteration, no robust members or band, the
#: verification at dt / 5 in the planning model only.
OPTIONS = ("max_iterations: 1, dt: 0.005, modes: 2, mesh_axial: 4, dt_train: 0.002, knot_spacing: 0.04, "
           "allow_unverified_model: true, stiffness_band: [], band: [], settle_band: [], verify_model: none, "
           "verify_dt: 0.001")


def _show(folder: Path, name: str, jobs: list[str]) -> Path:
    path = folder / name
    path.write_text("jobs:\n" + "".join(f"  - {{robot: tiny_rod.yaml, motion: {motion}, options: {{{OPTIONS}"
                                        f"{', ' + extra if extra else ''}}}}}\n"
                                        for motion, extra in (j.split("|") for j in jobs)))
    return path


#: Three jobs on one model: the planning model is trained once for them.
THREE = ["ramp.csv|", "ramp.csv|knot_spacing: 0.05", "ramp.csv|max_iterations: 2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(robot folder, cluster address, the cluster): a Ray cluster of two nodes on this machine with one CPU each (2 CPUs in all;
    Ray's own ``cluster_utils``: real raylets, stopped with the module), this process its driver, the tiny robot on
    disk and a private model cache for the module."""
    from ray.cluster_utils import Cluster

    folder = write_tiny_robot(tmp_path_factory.mktemp("show"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RETARGET_CACHE", str(folder / "cache"))
        env.setenv("RETARGET_MODELS", str(folder / "models"))
        nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            nodes.add_node(num_cpus=1)
            nodes.wait_for_nodes()
            ray.init(address=nodes.address, log_to_driver=False, logging_level="ERROR")
            yield folder, nodes.address, nodes
        finally:
            ray.shutdown()
            nodes.shutdown()


@pytest.fixture(scope="module")
def first_show(cluster):
    """The three-job show planned through ``retarget show plan --json`` (on the Ray this process has):
    (show file, results folder, JSON)."""
    from retarget.cli import main

    folder, _, _ = cluster
    show = _show(folder, "three.yaml", THREE)
    out = folder / "three-results"
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["show", "plan", str(show), "--out", str(out), "--json"])
    assert code == 0
    return show, out, json.loads(printed.getvalue().strip().splitlines()[-1])


@on_ray
def test_a_three_job_show_completes_with_its_summary_and_index(first_show):
    _, out, report = first_show
    assert [j["status"] for j in report["jobs"]] == ["done"] * 3 and report["done"] == 3
    for job in report["jobs"]:
        assert {"robot", "motion", "verified_ratio", "torque_ratio", "wall_s"} <= set(job) and "error" not in job
        assert job["robot"] == "tiny_rod.yaml" and job["motion"] == "ramp.csv" and job["wall_s"] > 0
        assert job["torque_ratio"] > 0 and job["attempts"] == 1
        folder = out / job["folder"]
        for name in ("result.json", "optimized.csv", "optimized.yaml", "profile.npz", "report/motors.png",
                     "report/trajectories.npz"):
            assert (folder / name).is_file(), name
    # No verification model asked for (verify_model none): no verified ratio, as `retarget plan` reports it.
    assert all(j["verified_ratio"] is None for j in report["jobs"])
    index = (out / "index.html").read_text()
    assert all(f'href="{j["folder"]}/report/"' in index for j in report["jobs"])
    assert json.loads((out / "summary.json").read_text())["jobs"] == report["jobs"]
    # One planning model for the three jobs: one artifact in the cache.
    assert len(list((Path(os.environ["RETARGET_CACHE"]) / "reduced").glob("*.npz"))) == 1


@on_ray
def test_a_show_job_equals_plan_in_process(first_show):
    """The same options, the same cached model: the profiles and metrics of the show's job 2 and of ``plan()``
    called here agree within 1e-9."""
    from retarget.motion import load_motion
    from retarget.planning.run import plan
    from retarget.show.showfile import load_show

    show, out, report = first_show
    job = load_show(show).jobs[2]
    result = plan(job.robot_path, load_motion(job.motion_path), job.options)
    with np.load(out / report["jobs"][2]["folder"] / "profile.npz") as saved:
        np.testing.assert_allclose(saved["parameters"], result.optimization.x, rtol=0, atol=1e-9)
        names, times, positions = result.trajectory(0.0)
        assert list(saved["joint_names"]) == list(names)
        np.testing.assert_allclose(saved["positions"], positions, rtol=0, atol=1e-9)
        np.testing.assert_allclose(saved["times"], times, rtol=0, atol=1e-12)
    metrics = json.loads((out / report["jobs"][2]["folder"] / "result.json").read_text())["metrics"]
    here = result.to_json()
    for key in ("objective_initial", "objective_final", "iterations"):
        assert metrics[key] == pytest.approx(here[key], rel=1e-9, abs=1e-12), key
    for key in ("peak_deviation_m", "rms_deviation_m", "peak_torque_ratio"):
        assert metrics["optimized"][key] == pytest.approx(here["optimized"][key], rel=1e-9, abs=1e-12), key
    assert metrics["verify"]["optimized"] == pytest.approx(here["verify"]["optimized"], rel=1e-9, abs=1e-12)


@on_ray
def test_a_second_run_skips_every_finished_job(first_show):
    from retarget.show.runner import run_show
    from retarget.show.showfile import load_show

    show, out, report = first_show
    stamps = {j["folder"]: (out / j["folder"] / "result.json").stat().st_mtime_ns for j in report["jobs"]}
    again = run_show(load_show(show), out).to_json()
    assert [j["status"] for j in again["jobs"]] == ["skipped"] * 3
    assert [j["verified_ratio"] for j in again["jobs"]] == [j["verified_ratio"] for j in report["jobs"]]
    assert stamps == {f: (out / f / "result.json").stat().st_mtime_ns for f in stamps}


@on_ray
def test_a_worker_killed_during_a_job_is_retried_and_the_show_completes(cluster):
    folder, _, _ = cluster
    from retarget.show.runner import run_show
    from retarget.show.showfile import load_show

    show = load_show(_show(folder, "kill.yaml", ["ramp.csv|max_iterations: 3"]))
    killed: list[int] = []

    def on_event(event):
        if event.kind == "started" and event.attempt == 1 and not killed:
            killed.append(event.pid)
            os.kill(event.pid, signal.SIGKILL)

    summary = run_show(show, folder / "kill-results", on_event=on_event)
    (row,) = summary.rows
    assert killed and row.status.value == "done" and row.attempts == 2, row


@on_ray
def test_an_interrupted_show_resumes_without_planning_its_finished_jobs_again(cluster):
    folder, _, _ = cluster
    from retarget.show.runner import run_show
    from retarget.show.showfile import load_show

    show = load_show(_show(folder, "stop.yaml", ["ramp.csv|max_iterations: 1", "ramp.csv|max_iterations: 2",
                                                   "ramp.csv|knot_spacing: 0.05, max_iterations: 2"]))
    out = folder / "stop-results"

    def stop_after_the_first(event):
        if event.kind == "done":
            raise KeyboardInterrupt

    first = run_show(show, out, on_event=stop_after_the_first)
    statuses = [r.status.value for r in first.rows]
    assert first.interrupted and statuses.count("done") == 1 and statuses.count("cancelled") == 2
    (finished,) = [r for r in first.rows if r.status.value == "done"]
    stamp = (out / finished.folder / "result.json").stat().st_mtime_ns
    assert not any((out / "jobs").glob(".*.tmp")) and len(list((out / "jobs").iterdir())) == 1
    started: list[int] = []
    second = run_show(show, out, on_event=lambda e: started.append(e.index) if e.kind == "started" else None)
    assert not second.interrupted
    assert [r.status.value for r in second.rows] == ["skipped" if r.index == finished.index else "done"
                                                     for r in second.rows]
    assert finished.index not in started and (out / finished.folder / "result.json").stat().st_mtime_ns == stamp
    assert json.loads((out / "summary.json").read_text())["skipped"] == 1


@on_ray
def test_a_failing_job_is_reported_and_the_rest_finish(cluster):
    folder, _, _ = cluster
    from retarget.motion import Motion, save_motion
    from retarget.show.runner import run_show
    from retarget.show.showfile import load_show

    t = np.linspace(0.0, 0.2, 41)
    save_motion(folder / "other_joint.csv", Motion(t, ("elbow",), (0.1 * t)[:, None]))
    show = load_show(_show(folder, "fail.yaml", ["other_joint.csv|", "ramp.csv|knot_spacing: 0.05"]))
    summary = run_show(show, folder / "fail-results")
    failed, done = summary.rows
    assert failed.status.value == "failed" and "no column for motors" in failed.error and not failed.folder
    assert done.status.value == "done", done.error
    assert (folder / "fail-results" / done.folder / "result.json").is_file()
    report = summary.to_json()
    assert report["failed"] == 1 and report["jobs"][0]["error"] == failed.error


@on_ray
def test_a_show_joins_a_cluster_by_address_and_runs_jobs_on_both_nodes(cluster, tmp_path):
    """`retarget show plan --address` in another process (a driver of its own) joins the two-node cluster; its jobs
    run on both nodes."""
    import subprocess

    folder, address, _ = cluster
    show = _show(folder, "two-nodes.yaml", ["ramp.csv|max_iterations: 1, knot_spacing: 0.05",
                                            "ramp.csv|max_iterations: 2, knot_spacing: 0.05",
                                            "ramp.csv|max_iterations: 3, knot_spacing: 0.05"])
    run = subprocess.run([sys.executable, "-m", "retarget.cli", "show", "plan", str(show), "--out",
                          str(tmp_path / "results"), "--address", address, "--json"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert [j["status"] for j in report["jobs"]] == ["done"] * 3
    assert report["ray"]["nodes"] == 2 and report["ray"]["address"] == address
    assert len({j["node"] for j in report["jobs"]}) == 2


@on_ray
def test_a_job_alone_takes_a_nodes_spare_cpus_for_its_workers_with_the_same_answer(cluster):
    """A cluster with more CPUs than the show has jobs: the job's task reserves both CPUs of a two-CPU node and its
    plan runs two workers (its robust members' runs in processes forked beside it, in the Ray worker); the answer
    equals ``plan()`` here with one worker."""
    from retarget.motion import load_motion
    from retarget.planning.run import plan
    from retarget.show.runner import run_show
    from retarget.show.showfile import load_show

    folder, _, nodes = cluster
    big = nodes.add_node(num_cpus=2)
    try:
        nodes.wait_for_nodes()
        options = "knot_spacing: 0.05, stiffness_band: [0.9, 1.1], max_iterations: 2"
        show = load_show(_show(folder, "room.yaml", [f"ramp.csv|{options}"]))
        (row,) = run_show(show, folder / "room-results").rows
    finally:
        nodes.remove_node(big)
    assert row.status.value == "done" and row.cpus == 2 and row.node == big.node_id, row
    job = show.jobs[0]
    assert job.options.workers == 1 and job.options.stiffness_band == (0.9, 1.1)
    here = plan(job.robot_path, load_motion(job.motion_path), job.options)
    with np.load(folder / "room-results" / row.folder / "profile.npz") as saved:
        np.testing.assert_array_equal(saved["parameters"], here.optimization.x)


def _jobs(*given: int | None) -> list:
    """Show jobs in submission order: None a job that leaves ``workers`` to the show, a number one that sets it."""
    from dataclasses import replace

    from retarget.planning.options import PlanOptions
    from retarget.show.showfile import SHOW_WORKERS, ShowJob

    base = PlanOptions(workers=SHOW_WORKERS)
    return [ShowJob(i, "r", Path("r.yaml"), "m", Path("m.csv"),
                    base if w is None else replace(base, workers=w), w is not None) for i, w in enumerate(given)]


@pytest.mark.parametrize(("given", "nodes", "expected"), [
    ((None, None, None), (1, 1), (1, 1, 1)),   # the test cluster: no room
    ((None, None, None, None), (2,), (1, 1, 1, 1)),  # more jobs than CPUs: one each
    ((None,), (2,), (2,)),                      # one job on a laptop: both cores
    ((None,), (1, 1), (1,)),                    # a plan's workers are forked on its node: at most the largest
    ((None, None, None), (4,), (2, 1, 1)),      # the spare CPU to the longest job
    ((None, None, None), (2, 2), (2, 1, 1)),    # the two short jobs share a node
    ((None, None), (8, 2), (4, 4)),             # in turn, as long as the jobs fit on the nodes together
    ((None, None, None), (3, 3), (3, 2, 1)),
    ((3, None), (2,), (2, 1)),                  # a job's own workers reserve at most the largest node
    ((1, None), (4,), (1, 3)),                  # ... and are not grown
])
def test_spare_cpus_go_to_the_longest_jobs_when_the_cluster_has_room(given, nodes, expected):
    from retarget.show.runner import task_cpus

    jobs = _jobs(*given)
    assert task_cpus(jobs, list(nodes)) == dict(enumerate(expected))


def test_a_model_artifact_lands_where_the_planner_looks_unless_it_is_there(tmp_path, monkeypatch):
    """The cache's artifact into the model cache; a model folder's into the first model folder, unless a model
    folder holds the same bytes (no copy beside the original, no newer file than it)."""
    import hashlib

    from retarget.show.runner import ModelArtifact, _land

    monkeypatch.setenv("RETARGET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RETARGET_MODELS", os.pathsep.join([str(tmp_path / "first"), str(tmp_path / "second")]))
    data = b"not really an npz, bytes are bytes"
    digest = hashlib.sha256(data).hexdigest()
    _land(ModelArtifact("robot-abc-def.npz", data, digest, "cache"))
    assert (tmp_path / "cache" / "reduced" / "robot-abc-def.npz").read_bytes() == data
    (tmp_path / "second").mkdir()
    (tmp_path / "second" / "robot-motion.npz").write_bytes(data)
    _land(ModelArtifact("robot-motion.npz", data, digest, "models"))
    assert not (tmp_path / "first" / "robot-motion.npz").exists()
    _land(ModelArtifact("robot-other.npz", data, digest, "models"))
    assert (tmp_path / "first" / "robot-other.npz").read_bytes() == data
    assert not list(tmp_path.rglob("*.tmp"))
