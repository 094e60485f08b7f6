"""The show file (retarget.show.showfile): every job checked before any work — each problem named by job index and
field — and the job hash that keys a finished job's results (robot and motion contents, options, version)."""
from __future__ import annotations

from pathlib import Path

import pytest
from tiny_robot import write_tiny_robot

from retarget.errors import InputError, NotAvailableError
from retarget.show.showfile import SHOW_WORKERS, job_key, load_show


@pytest.fixture()
def folder(tmp_path):
    return write_tiny_robot(tmp_path / "robot")


def _show(folder: Path, text: str) -> Path:
    path = folder / "show.yaml"
    path.write_text(text)
    return path


def test_a_show_file_loads_with_paths_relative_to_it_and_its_options_typed(folder):
    show = load_show(_show(folder, """jobs:
  - robot: tiny_rod.yaml
    motion: ramp.csv
    options: {max_iterations: 2, dt: 1e-2, stiffness_band: [0.9, 1.1], rest_after: null}
  - {robot: single_rod, motion: single_rod/step_30}
"""))
    first, second = show.jobs
    assert first.robot_path == (folder / "tiny_rod.yaml").resolve() and first.motion_path.name == "ramp.csv"
    assert first.options.max_iterations == 2 and first.options.dt == 0.01  # 1e-2: text to YAML 1.1, a number here
    assert first.options.stiffness_band == (0.9, 1.1) and first.options.rest_after is None
    assert first.options.workers == SHOW_WORKERS and first.label == "tiny_rod ramp"
    assert second.robot_path.name == "single_rod.yaml" and second.options.max_iterations == 50
    # Verified at dt / 5 unless told, as `retarget plan` does.
    assert first.options.verify_dt == pytest.approx(0.002) and second.options.verify_dt == pytest.approx(0.001)


def test_workers_are_the_shows_to_size_unless_the_file_sets_them(folder):
    """Not given or null: :data:`SHOW_WORKERS` and the show sizes it (the runner's ``task_cpus``); a number: the
    job's own."""
    show = load_show(_show(folder, """jobs:
  - {robot: tiny_rod.yaml, motion: ramp.csv}
  - {robot: tiny_rod.yaml, motion: ramp.csv, options: {workers: null}}
  - {robot: tiny_rod.yaml, motion: ramp.csv, options: {workers: 3}}
"""))
    assert [(j.options.workers, j.workers_given) for j in show.jobs] == [(SHOW_WORKERS, False), (SHOW_WORKERS, False),
                                                                         (3, True)]
    assert job_key(show.jobs[0]) == job_key(show.jobs[1]) != job_key(show.jobs[2])


def test_every_problem_is_reported_at_once_naming_the_job_and_the_field(folder):
    path = _show(folder, """jobs:
  - robot: tiny_rod.yaml
    motion: ramp.csv
    options: {max_iterationz: 2}
  - robot: tiny_rod.yaml
    motion: ramp.csv
    options: {dt: fast, use_cache: 1, stiffness_band: 0.9}
  - robot: tiny_rod.yaml
    motion: ramp.csv
    options: {dt: -0.01, method: newton, bodies: []}
  - robot: no_such_robot
    motion: nowhere.csv
    color: red
  - motion: ramp.csv
""")
    with pytest.raises(InputError) as caught:
        load_show(path)
    text = str(caught.value)
    for expected in ("jobs[0].options.max_iterationz: not a plan option",
                     "jobs[1].options.dt: expected a number, got 'fast'",
                     "jobs[1].options.use_cache: expected true or false, got 1",
                     "jobs[1].options.stiffness_band: expected a list of float",
                     "jobs[2].options.method: expected one of lbfgs",
                     "jobs[2].options.bodies: not settable in a show file",
                     "jobs[3].robot:", "jobs[3].motion:", "jobs[3].color: unknown key", "jobs[4].robot: missing"):
        assert expected in text, expected
    # A range check of PlanOptions, named as the show's field.
    with pytest.raises(InputError, match=r"jobs\[0\]\.options\.dt: must be positive"):
        load_show(_show(folder, "jobs:\n  - {robot: tiny_rod.yaml, motion: ramp.csv, options: {dt: -0.01}}\n"))


@pytest.mark.parametrize("text", ["", "jobs: []\n", "- robot: x\n", "jobs: {robot: x}\n"])
def test_a_file_that_is_not_a_list_of_jobs_is_refused(folder, text):
    with pytest.raises(InputError, match="non-empty `jobs:` list"):
        load_show(_show(folder, text))


def test_a_recording_to_refine_from_is_refused_as_not_yet_supported(folder):
    path = _show(folder, "jobs:\n  - {robot: tiny_rod.yaml, motion: ramp.csv, recording: take.csv}\n")
    with pytest.raises(NotAvailableError, match=r"jobs\[0\]\.recording: .*not yet supported.*retarget refine"):
        load_show(path)


def test_the_job_key_changes_with_every_input_and_only_with_them(folder):
    text = "jobs:\n  - {robot: tiny_rod.yaml, motion: ramp.csv, options: {max_iterations: 2}}\n"
    key = job_key(load_show(_show(folder, text)).jobs[0])
    assert key == job_key(load_show(_show(folder, text)).jobs[0]) and len(key) == 64
    other_options = job_key(load_show(_show(folder, text.replace("2}", "3}"))).jobs[0])
    motion = folder / "ramp.csv"
    original = motion.read_text()
    motion.write_text(original.replace("0.005,", "0.0050,", 1))  # another file content, the same name
    other_motion = job_key(load_show(_show(folder, text)).jobs[0])
    motion.write_text(original)
    robot = folder / "tiny_rod.yaml"
    robot.write_text(robot.read_text().replace("diameter: 0.004", "diameter: 0.005"))
    other_robot = job_key(load_show(_show(folder, text)).jobs[0])
    assert len({key, other_options, other_motion, other_robot}) == 4


def test_jobs_are_submitted_longest_first_by_steps_times_iterations_ties_in_file_order(folder):
    from retarget.motion import load_motion
    from retarget.show.showfile import submission_order

    show = load_show(_show(folder, """jobs:
  - {robot: tiny_rod.yaml, motion: ramp.csv, options: {max_iterations: 2, dt: 0.01}}
  - {robot: single_rod, motion: single_rod/step_30, options: {max_iterations: 2, dt: 0.01}}
  - {robot: tiny_rod.yaml, motion: ramp.csv, options: {max_iterations: 8, dt: 0.01}}
  - {robot: tiny_rod.yaml, motion: ramp.csv, options: {max_iterations: 2, dt: 0.01}}
"""))
    motions = {job.index: load_motion(job.motion_path) for job in show.jobs}
    assert motions[1].duration > 4 * motions[0].duration  # the step outweighs the ramp at 8 iterations
    assert [job.index for job in submission_order(list(show.jobs), motions)] == [1, 2, 0, 3]
