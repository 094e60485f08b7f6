"""`retarget refine` (:mod:`retarget.planning.refine`): reading takes, aligning them, the learning step's quadratic
model (against finite differences), the trend and the history, and the command end to end on a swinging rod
(``tiny_robot.write_swinging_rod``: 0.5 m on an XM430) played in the servo–beam plant with a model error
(:mod:`retarget.fit.plant_trial`), with the refusals of takes and plans that do not belong together."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from retarget.planning.options import RefineOptions
from retarget.planning.refine import (
    Decision,
    History,
    RefineRefused,
    Refusal,
    Take,
    TrialRecord,
    _solve_box_qp,
    _trend,
    align_take,
    history_path,
    read_take,
)

# -- takes --------------------------------------------------------------------------------------------------------


def _arc(times: np.ndarray) -> np.ndarray:
    """A tip swinging 0.4 rad about y on a 0.7 m radius and back, ringing after: (n, 1, 3) [m]."""
    angle = 0.4 * np.clip(times - 0.5, 0, 0.5) / 0.5 - 0.4 * np.clip(times - 1.5, 0, 0.5) / 0.5
    angle = angle + 0.02 * np.exp(-(times - 2.0).clip(0) * 2.0) * np.sin(12.0 * times) * (times > 2.0)
    return 0.7 * np.stack([np.sin(angle), np.zeros_like(angle), np.cos(angle)], axis=1)[:, None, :]


def _rotation(rpy_deg) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_euler("xyz", rpy_deg, degrees=True).as_matrix()


def _take(times_plan, predicted, offset, rot, trans, rate=120.0, noise=3e-4, drop=None, seed=0) -> Take:
    """What a capture at ``rate`` sees of ``predicted`` (robot frame) in a mocap frame ``x_m = R x + t``, its clock
    ``t_take = t_plan + offset``; ``drop(t_plan, position)`` → frames to leave empty."""
    rng = np.random.default_rng(seed)
    t_take = np.arange(0.0, times_plan[-1] + 0.6, 1.0 / rate)
    t_plan = t_take - offset
    pos = np.stack([np.interp(t_plan, times_plan, predicted[:, 0, a]) for a in range(3)], axis=1)
    mocap = pos @ rot.T + trans + noise * rng.standard_normal(pos.shape)
    if drop is not None:
        mocap[drop(t_plan, pos)] = np.nan
    return Take(t_take, mocap[:, None, :], ("tip",), ("tip",), rate, "synthetic", "0" * 64)


def test_align_take_recovers_the_capture_frame_and_clock():
    times = np.arange(0, 3.0 + 1e-9, 0.005)
    predicted = _arc(times)
    rot, trans = _rotation((7, -12, 35)) @ np.array([[1, 0, 0], [0, 0, 1], [0, -1, 0.0]]), np.array([0.4, 0.9, -1.7])
    take = _take(times, predicted, 0.3127, rot, trans)
    a = align_take(take, times, predicted, (0.5, 2.0))
    assert a.offset_s == pytest.approx(0.3127, abs=1e-3)
    assert np.allclose(a.rotation, rot.T, atol=2e-3) and np.allclose(a.translation, -rot.T @ trans, atol=2e-3)
    assert a.residual_rms_m < 1e-3 and a.missing_fraction < 0.01 and a.coverage == pytest.approx(1.0)


def test_align_take_counts_missing_frames_and_coverage():
    times = np.arange(0, 3.0 + 1e-9, 0.005)
    predicted = _arc(times)
    rng = np.random.default_rng(3)
    # 40 % of the frames empty; a capture that starts 1.2 s into the plan (after the motion's start at 0.5 s).
    take = _take(times, predicted, -1.2, np.eye(3), np.zeros(3), drop=lambda t, p: rng.random(len(t)) < 0.4)
    a = align_take(take, times, predicted, (0.5, 2.0))
    assert a.missing_fraction == pytest.approx(0.4, abs=0.04)
    assert a.coverage == pytest.approx((2.0 - 1.2) / 1.5, abs=0.02)


def test_the_onset_is_measured_from_the_rest_before_the_plan_moves_not_a_ring_out_at_the_takes_start():
    # A take that begins while the rod still creeps back from the move to the plan's first pose (3 mm along the
    # motion, decaying in 0.1 s): its first 0.15 s read a rest 1.4 mm off the pose the plan starts from, which at
    # the tip's 0.56 m/s would move the onset by 2.5 ms and the measured peak with it.
    times = np.arange(0, 3.0 + 1e-9, 0.005)
    predicted = _arc(times)
    take = _take(times, predicted, 0.3127, np.eye(3), np.zeros(3), seed=4)
    creep = np.zeros_like(take.positions_m)
    creep[:, 0, 0] = -3e-3 * np.exp(-take.time_s / 0.1)
    take = replace(take, positions_m=take.positions_m + creep)
    a = align_take(take, times, predicted, (0.5, 2.0))
    assert a.offset_source == "onset"
    assert a.offset_s == pytest.approx(0.3127, abs=5e-4)


def test_a_recorded_start_is_the_offset_and_the_robots_lag_behind_it_is_measured():
    """A take whose recording stored the plan's start on the clock it shares with the robot (a bag of ``retarget play
    --record``) is aligned on that start, so a robot 30 ms behind its commands is measured 30 ms late; the onset,
    which puts the take's departure on the prediction's, takes that lag for a clock offset."""
    times = np.arange(0, 3.0 + 1e-9, 0.005)
    predicted = _arc(times)
    lag, start = 0.030, 0.4127
    take = _take(times, predicted, start + lag, np.eye(3), np.zeros(3), seed=5)
    a = align_take(take, times, predicted, (0.5, 2.0))
    assert a.offset_source == "onset" and a.offset_s == pytest.approx(start + lag, abs=2e-3)
    recorded = replace(take, recorded_start_s=start)
    a = align_take(recorded, times, predicted, (0.5, 2.0))
    assert (a.offset_source, a.offset_s) == ("recorded", start) and a.offset_given
    assert align_take(recorded, times, predicted, (0.5, 2.0), recorded_start=False).offset_source == "onset"
    given = align_take(recorded, times, predicted, (0.5, 2.0), motion_start_s=0.25)
    assert given.offset_source == "given" and given.offset_s == pytest.approx(float(take.time_s[0]) + 0.25)


def _write_csv(path: Path, take: Take, marker_name: str | None = None) -> Path:
    from retarget.fit.twin import write_motive_csv

    quat = np.tile([0.0, 0.0, 0.0, 1.0], (len(take.time_s), 1))
    tracked = np.isfinite(take.positions_m[:, 0]).all(axis=1)
    return write_motive_csv(path, marker_name or "tip", take.time_s, np.nan_to_num(take.positions_m[:, 0]), quat,
                            tracked, take.rate_hz)


def test_read_take_reads_a_motive_export_and_names_what_it_has(tmp_path):
    times = np.arange(0, 2.0, 0.005)
    take = _take(times, _arc(times), 0.2, np.eye(3), np.zeros(3), drop=lambda t, p: np.arange(len(t)) % 10 == 0)
    path = _write_csv(tmp_path / "take.csv", take)
    back = read_take(path, [("tip_mass", "tip")])
    assert back.links == ("tip_mass",) and back.rate_hz == pytest.approx(120.0)
    assert np.allclose(back.positions_m, take.positions_m, atol=1e-8, equal_nan=True)
    with pytest.raises(RefineRefused) as err:
        read_take(path, [("tip_mass", "wand")])
    assert err.value.reason is Refusal.WRONG_ROBOT and "'tip'" in str(err.value) and "wand" in str(err.value)


def test_read_take_falls_back_to_a_rigid_bodys_markers(tmp_path):
    """A markers-only export: the body is the centroid of the markers named after it (NaN where one is missing)."""
    n = 40
    lines = [("Format Version,1.23,Take Name,t,Capture Frame Rate,100.000000,Export Frame Rate,100.000000,"
              "Rotation Type,Quaternion,Length Units,Millimeters,Coordinate Space,Global"), "",
             ",Type,Marker,Marker,Marker,Marker,Marker,Marker",
             ",Name,tip:Marker1,tip:Marker1,tip:Marker1,tip:Marker2,tip:Marker2,tip:Marker2", ",ID,1,1,1,2,2,2",
             ",,Position,Position,Position,Position,Position,Position", "Frame,Time (Seconds),X,Y,Z,X,Y,Z"]
    for i in range(n):
        second = "" if i == 5 else f"{20.0 + i},0,0"
        lines.append(f"{i},{i / 100:.6f},{10.0 + i},0,0," + (second if second else ",,"))
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    take = read_take(tmp_path / "m.csv", [("tip_mass", "tip")])
    assert take.positions_m[0, 0] == pytest.approx([0.015, 0.0, 0.0])
    assert np.isnan(take.positions_m[5, 0]).all() and take.rate_hz == pytest.approx(100.0)


def test_read_take_reads_a_bag(tmp_path):
    from retarget.errors import InputError
    from retarget.mocap.bags import MOTION_START_KEY, PoseSeries, write_pose_bag

    t = 1.7e9 + np.arange(200) / 100.0
    pos = np.stack([np.sin(t - t[0]), np.zeros(200), np.ones(200)], axis=1)
    write_pose_bag(tmp_path / "bag", {"/mocap/tip/pose": PoseSeries(t, pos, np.tile([0, 0, 0, 1.0], (200, 1)),
                                                                       frame_id="mocap")})
    take = read_take(tmp_path / "bag", [("tip_mass", "tip")])
    assert take.rate_hz == pytest.approx(100.0) and np.allclose(take.positions_m[:, 0], pos, atol=1e-12)
    assert take.recorded_start_s is None
    write_pose_bag(tmp_path / "played", {"/mocap/tip/pose": PoseSeries(t, pos, np.tile([0, 0, 0, 1.0], (200, 1)))},
                   custom_data={MOTION_START_KEY: "1700000000500000000"})
    assert read_take(tmp_path / "played", [("tip_mass", "tip")]).recorded_start_s == pytest.approx(1.7e9 + 0.5)
    write_pose_bag(tmp_path / "odd", {"/mocap/tip/pose": PoseSeries(t, pos, np.tile([0, 0, 0, 1.0], (200, 1)))},
                   custom_data={MOTION_START_KEY: "soon"})
    with pytest.raises(InputError, match="retarget.motion_start_ns is 'soon'"):
        read_take(tmp_path / "odd", [("tip_mass", "tip")])
    with pytest.raises(RefineRefused, match="no topic '/mocap/wand/pose'"):
        read_take(tmp_path / "bag", [("tip_mass", "wand")])


def test_a_plan_file_records_its_settings_and_a_plan_of_another_input_is_refused(tmp_path):
    """The plan CSV's ``# plan settings:`` line (knots, step, rest, the input's digest) rebuilds the planner's
    parametrization; a plan whose recorded input is not --motion is refused before any model work."""
    from tiny_robot import write_tiny_robot

    from retarget.motion import Motion, load_motion, save_motion
    from retarget.planning.options import PlanOptions
    from retarget.planning.refine import plan_options_for, read_plan, refine_context
    from retarget.planning.variants import PLAN_SETTINGS_PREFIX, motion_digest

    folder = write_tiny_robot(tmp_path)
    ramp = load_motion(folder / "ramp.csv")
    settings = {"knot_spacing_s": 0.04, "dt_s": 0.004, "duration_s": 0.2, "rest_from_s": 0.16,
                "input_sha256": motion_digest(ramp)}
    other = Motion(ramp.time, ramp.joint_names, 0.5 * ramp.positions)
    save_motion(folder / "plan.csv", ramp, comments=[PLAN_SETTINGS_PREFIX + json.dumps(settings)])
    plan = read_plan(folder / "plan.csv")
    assert plan.settings() == settings
    options = plan_options_for(plan, PlanOptions(), ramp)
    assert (options.knot_spacing, options.dt, options.duration) == (0.04, 0.004, 0.2)
    assert options.rest_after == pytest.approx(0.16 - 0.1)  # the ramp stops at 0.1 s
    assert motion_digest(other) != settings["input_sha256"]
    with pytest.raises(RefineRefused) as err:
        refine_context(folder / "tiny_rod.yaml", other, plan)
    assert err.value.reason is Refusal.WRONG_MOTION and "another input" in str(err.value)


# -- the step's building blocks ------------------------------------------------------------------------------------


def test_solve_box_qp_is_the_bounded_minimizer():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(8, 5))
    h, g = a.T @ a + 0.1 * np.eye(5), rng.normal(size=5)
    lo, hi = -0.1 * np.ones(5), 0.1 * np.ones(5)
    x = _solve_box_qp(h, g, lo, hi)
    assert np.all(x >= lo - 1e-12) and np.all(x <= hi + 1e-12)
    # KKT: the gradient points outward at an active bound and vanishes where free.
    grad = h @ x + g
    free = (x > lo + 1e-9) & (x < hi - 1e-9)
    assert np.allclose(grad[free], 0.0, atol=1e-9)
    assert np.all(grad[np.isclose(x, lo)] >= -1e-9) and np.all(grad[np.isclose(x, hi)] <= 1e-9)
    assert np.allclose(_solve_box_qp(h, g, -np.inf * np.ones(5), np.inf * np.ones(5)), -np.linalg.solve(h, g))


def _record(trial: int, peak: float, radius: float = 0.05) -> TrialRecord:
    return TrialRecord(trial, "p.csv", "a" * 64, "t.csv", str(trial) * 64, {"tip": "tip"}, peak, peak / 3,
                       peak / 2, 0.003, peak / 2, 0.6, radius, radius / 2, "first trial", "learning step")


def test_trend_keeps_improving_halves_a_plateau_and_steps_back_from_a_rise():
    options = RefineOptions()
    assert _trend(History(), 0.04, options)[:2] == (Decision.FIRST, options.trust_region_rad)
    history = History((_record(1, 0.040, 0.02),))
    decision, radius, text, from_best = _trend(history, 0.020, options)
    assert decision is Decision.IMPROVING and radius == pytest.approx(0.03) and "-50.0 %" in text and not from_best
    decision, radius, text, from_best = _trend(history, 0.0395, options)
    assert decision is Decision.STOPPED and radius == pytest.approx(0.01) and "stopped improving" in text
    assert not from_best
    decision, radius, _, from_best = _trend(history, 0.050, options)
    assert decision is Decision.ROSE and radius == pytest.approx(0.01) and from_best
    # Measured against the best earlier trial, not only the last: a peak below the last trial's but above the
    # best's steps again from the best, and one within the plateau above it stops there.
    history = History((_record(1, 0.040, 0.02), _record(2, 0.010, 0.03), _record(3, 0.020, 0.02)))
    decision, radius, text, from_best = _trend(history, 0.015, options)
    assert decision is Decision.ROSE and from_best and radius == pytest.approx(0.01)
    assert "-25.0 % since trial 3" in text and "+50.0 % above the best trial 2" in text
    decision, radius, text, from_best = _trend(history, 0.0102, options)
    assert decision is Decision.STOPPED and from_best and "stepping again from the best trial" in text
    decision, radius, text, from_best = _trend(history, 0.009, options)
    assert decision is Decision.IMPROVING and not from_best


def test_history_round_trips_beside_the_plan(tmp_path):
    assert history_path(tmp_path / "next.csv") == tmp_path / "next.history.json"
    history = History((_record(1, 0.04), _record(2, 0.01)))
    history_path(tmp_path / "next.csv").write_text(json.dumps(history.to_json()))
    assert History.load(tmp_path / "next.history.json") == history
    assert History.load(tmp_path / "none.history.json") == History()
    assert history.best.trial == 2
    (tmp_path / "bad.history.json").write_text("{}")
    with pytest.raises(Exception, match="not a refine history"):
        History.load(tmp_path / "bad.history.json")


def test_the_learning_quadratic_is_the_derivative_of_the_predicted_objective(servo_rod_systems):
    """The step's model: at ``Δx = 0`` its gradient is the derivative of the plan's objective with the tracking term
    on the measurement moved by the model's change (the function the step is checked against), by central
    differences; its Gauss–Newton Hessian is that of the tracking rows."""
    from rod_plan import rod_limits, tip

    from retarget.motion.motion import Motion
    from retarget.optimize.adjoint import evaluate
    from retarget.optimize.problem import build_plan_problem
    from retarget.planning.options import PlanOptions
    from retarget.planning.refine import _objective, learning_quadratic
    from retarget.sim.adapters import reduced_engine

    _, rs = servo_rod_systems
    engine = reduced_engine(rs, tolerance=1e-12)
    t = np.linspace(0.0, 0.16, 33)
    motion = Motion(t, ("m",), (0.15 * np.clip(t / 0.08, 0.0, 1.0))[:, None])
    options = PlanOptions(knot_spacing=0.04, dt=0.004, stiffness_band=(), band=(), rest_after=None,
                          torque_weight=10.0, torque_margin=0.0)
    pp = build_plan_problem(engine, motion, tip(), rod_limits(servo=None), options)
    problem = replace(pp.problem, torque_penalty=replace(pp.problem.torque_penalty,
                                                         threshold=0.3 * pp.problem.torque_penalty.threshold))
    rng = np.random.default_rng(1)
    x = pp.fit.parameters + 0.01 * rng.normal(size=pp.fit.parameters.size)
    run = evaluate(problem, x, gradient=False)
    tau = run.rollout.matrix[:, engine.motor_torque_index]
    assert problem.torque_penalty.evaluate(tau, problem.torque_penalty.speeds(run.rollout.matrix))[0] > 0.0, \
        "the torque penalty's rows are active"
    measured = run.positions + 2e-3 * rng.normal(size=run.positions.shape)
    measured[5:8] = np.nan  # not measured there
    quad = learning_quadratic([problem], x, [run], measured, damping=0.0)
    direction = rng.normal(size=x.size)

    def predicted(step: float) -> float:
        y = x + step * direction
        return _objective(problem, y, evaluate(problem, y, gradient=False), quad, run.positions)

    h = 1e-5
    fd = (predicted(h) - predicted(-h)) / (2 * h)
    assert fd == pytest.approx(float(quad.gradient @ direction), rel=1e-6)
    assert predicted(0.0) == pytest.approx(
        0.5 * float(np.sum(np.where(quad.measured[..., None], quad.residual, quad.weights[..., None]
                                    * (run.positions - problem.tracking.target_positions)) ** 2))
        + problem.parameter_terms(x)[0]
        + problem.torque_penalty.evaluate(run.rollout.matrix[:, engine.motor_torque_index],
                                          problem.torque_penalty.speeds(run.rollout.matrix))[0], rel=1e-12)


# -- end to end on a swinging rod and the servo–beam plant --------------------------------------------------------

#: The plant's model error (a stiffer servo loop, a softer rod) and the capture (rotated and offset, Y up, 120 Hz,
#: 0.3 mm noise, starting 0.2 s before the motion).
ERROR = {"youngs_factor": 0.9, "kp_factor": 1.5}


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    """The swinging rod (``tiny_robot.write_swinging_rod``: 2.4 Hz, a 0.3 rad step and 1.2 s of ring-out), its
    planning model (2 modes), a plan (8 iterations), and what the perturbed plant did with the plan
    (``take1.csv``) and with the input as authored (``naive_take.csv``)."""
    from tiny_robot import write_swinging_rod

    from retarget.cli import main
    from retarget.fit.plant_trial import CaptureSettings, PlantPerturbation, play_trial, write_take
    from retarget.fit.rig import load_rig
    from retarget.motion import load_motion

    folder = write_swinging_rod(tmp_path_factory.mktemp("refine"))
    model = folder / "models" / "rod.npz"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RETARGET_CACHE", str(folder / "cache"))
        mp.setenv("RETARGET_MODELS", str(folder / "models"))
        assert main(["reduce", str(folder / "tiny_rod.yaml"), "--train-motion", str(folder / "step.csv"), "--out",
                     str(model), "--dt", "0.002", "--modes", "2", "--duration", "0.6",
                     "--replay-tolerance", "0"]) == 0
        assert main(["plan", str(folder / "tiny_rod.yaml"), "--motion", str(folder / "step.csv"), "--reduced",
                     str(model), "--max-iterations", "8", "--verify-model", "none", "--band", "none", "--robust",
                     "none", "--settle-iterations", "0", "--out", str(folder / "plan.csv")]) == 0
    rig = load_rig(folder / "tiny_rod.yaml")
    motion = load_motion(folder / "step.csv")
    plant = PlantPerturbation(**ERROR)
    capture = CaptureSettings(rotation_rpy_deg=(7, -12, 35), offset_m=(0.4, 0.9, -1.7), lead_s=0.2)
    trial1 = play_trial(rig, motion, load_motion(folder / "plan.csv"), plant, tail_s=0.3)
    write_take(trial1, capture, folder / "take1.csv")
    write_take(play_trial(rig, motion, motion, plant, tail_s=0.3), replace(capture, seed=1),
               folder / "naive_take.csv")
    return {"folder": folder, "model": model, "rig": rig, "motion": motion, "plant": plant, "capture": capture,
            "trial1": trial1}


def _refine(loop, plan, take, out, *extra, body="tip=tip"):
    from retarget.cli import main

    folder = loop["folder"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RETARGET_CACHE", str(folder / "cache"))
        mp.setenv("RETARGET_MODELS", str(folder / "models"))
        return main(["refine", str(folder / "tiny_rod.yaml"), "--motion", str(folder / "step.csv"), "--plan",
                     str(plan), "--recording", str(take), "--body", body, "--out", str(out), "--reduced",
                     str(loop["model"]), "--json", *extra])


def _written(folder: Path, stem: str) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith((stem, "." + stem)))


@pytest.mark.slow
def test_refine_lowers_the_deviation_on_the_plant_and_keeps_the_history(loop, capsys):
    """Two trials: the refined plans lower the plant's deviation from its intent (peak and RMS), stay within stall,
    the command's last line is the contract's JSON, and each NEXT carries the chain's history."""
    from retarget.fit.plant_trial import play_trial, write_take
    from retarget.motion import load_motion

    folder = loop["folder"]
    capsys.readouterr()
    assert _refine(loop, folder / "plan.csv", folder / "take1.csv", folder / "plan2.csv",
                   "--report", str(folder / "report")) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("measured_peak_deviation_m", "predicted_peak_deviation_m", "peak_torque_ratio"):
        assert np.isfinite(first[key])
    assert first["decision"] == "first trial" and first["trial"] == 1
    assert first["step"]["step_rad"] <= first["step"]["trust_region_rad"] + 1e-12
    assert first["measured_peak_deviation_m"] == pytest.approx(loop["trial1"].metrics.peak_deviation_m, rel=0.5)
    assert {p.name for p in (folder / "report").iterdir()} >= {"trials.png", "trial.png", "index.html",
                                                               "refine.json"}
    trial2 = play_trial(loop["rig"], loop["motion"], load_motion(folder / "plan2.csv"), loop["plant"], tail_s=0.3)
    one, two = loop["trial1"].metrics, trial2.metrics
    assert two.rms_deviation_m < 0.9 * one.rms_deviation_m and two.peak_deviation_m < one.peak_deviation_m
    assert two.peak_torque_ratio < 1.0
    history = History.load(folder / "plan2.history.json")
    assert [t.trial for t in history.trials] == [1] and history.trials[0].next_plan.endswith("plan2.csv")

    # A correction is never larger than the trust region: no goal moves by more than it (a convex combination of
    # control points that each moved at most that much).
    assert _refine(loop, folder / "plan.csv", folder / "take1.csv", folder / "small.csv", "--trust-region",
                   "0.002") == 0
    change = load_motion(folder / "small.csv").positions - load_motion(folder / "plan.csv").positions
    assert 0.0 < np.abs(change).max() <= 0.002 + 1e-9

    write_take(trial2, replace(loop["capture"], seed=7, lead_s=0.35), folder / "take2.csv")
    assert _refine(loop, folder / "plan2.csv", folder / "take2.csv", folder / "plan3.csv") == 0
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert second["trial"] == 2 and second["decision"] in ("improving", "stopped improving")
    assert [t.trial for t in History.load(folder / "plan3.history.json").trials] == [1, 2]
    assert (folder / "plan3.csv").read_text().startswith("# retarget refine: trial 2")


def _refused(loop, capsys, plan, take, reason, *extra, body="tip=tip"):
    folder = loop["folder"]
    out = folder / "refused.csv"
    capsys.readouterr()
    assert _refine(loop, plan, take, out, *extra, body=body) == 2
    captured = capsys.readouterr()
    last = json.loads(captured.out.strip().splitlines()[-1])
    assert last["refused"] is True and last["reason"] == reason.value and last["files"] == []
    assert _written(folder, "refused") == [], "nothing is written on a refusal"
    return last["message"]


@pytest.mark.slow
def test_refine_refuses_takes_and_plans_that_do_not_belong_together(loop, capsys, tmp_path):
    from retarget.mocap.motive_csv import read_motive_csv
    from retarget.motion import Motion, load_motion, save_motion

    folder = loop["folder"]
    plan, take = folder / "plan.csv", folder / "take1.csv"
    # The naive take passed as the plan's.
    message = _refused(loop, capsys, plan, folder / "naive_take.csv", Refusal.NAIVE_TAKE)
    assert "naive playback" in message
    # 40 % of the frames missing.
    lines = take.read_text().splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("Frame,")) + 1
    rng = np.random.default_rng(5)
    holes = [ln if rng.random() >= 0.4 else ",".join(ln.split(",")[:2] + [""] * 8) for ln in lines[head:]]
    (tmp_path / "holes.csv").write_text("\n".join(lines[:head] + holes) + "\n")
    assert "of the take's frames" in _refused(loop, capsys, plan, tmp_path / "holes.csv", Refusal.MISSING_FRAMES)
    # A take already used by an earlier trial of the chain.
    assert _refine(loop, plan, take, folder / "chain2.csv") == 0
    _refused(loop, capsys, folder / "chain2.csv", take, Refusal.REUSED_TAKE)
    # The body leaves the capture volume at the far end of its swing (clipped).
    data = read_motive_csv(take).rigid_bodies["tip"].position_m
    reach = np.linalg.norm(data - data[0], axis=1)
    far = reach > 0.9 * np.nanmax(reach)
    clipped = [ln if not far[i] else ",".join(ln.split(",")[:2] + [""] * 8) for i, ln in enumerate(lines[head:])]
    (tmp_path / "clipped.csv").write_text("\n".join(lines[:head] + clipped) + "\n")
    _refused(loop, capsys, plan, tmp_path / "clipped.csv", Refusal.CLIPPED)
    # A take of another motion: the input played slower.
    motion = loop["motion"]
    slow = Motion(motion.time, motion.joint_names, 0.3 * np.clip((motion.time - 0.1) / 0.6, 0, 1)[:, None])
    from retarget.fit.plant_trial import play_trial, write_take

    write_take(play_trial(loop["rig"], motion, slow, loop["plant"], tail_s=0.3), loop["capture"],
               tmp_path / "other.csv")
    _refused(loop, capsys, plan, tmp_path / "other.csv", Refusal.MISALIGNED)
    # Another robot: a plan that drives other motors; a body the take does not have.
    other = load_motion(plan)
    save_motion(tmp_path / "other_robot.csv", Motion(other.time, ("shoulder",), other.positions))
    _refused(loop, capsys, tmp_path / "other_robot.csv", take, Refusal.WRONG_ROBOT)
    _refused(loop, capsys, plan, take, Refusal.WRONG_ROBOT, body="tip=wand")
    # A plan made for other servos (another robot of the same motors, or this one before its servos changed).
    (tmp_path / "xm540.csv").write_text(plan.read_text().replace('"model": "XM430-W210"', '"model": "XM540-W270"'))
    assert "other servos" in _refused(loop, capsys, tmp_path / "xm540.csv", take, Refusal.WRONG_ROBOT)
    # ... also with a servo file laid over the robot's servos (`--servo`, the node's servo_file), which the check
    # then compares with (a plan made for the file's servos is this robot's: tests/fit/test_servo_fit.py).
    from retarget.model.servo import SERVO_MODELS
    from retarget.model.servo_file import write_servo_file

    fitted = write_servo_file(tmp_path / "fitted.yaml", SERVO_MODELS["XM430-W210"].with_values(kp=9.0).to_config())
    message = _refused(loop, capsys, tmp_path / "xm540.csv", take, Refusal.WRONG_ROBOT, "--servo", str(fitted))
    assert f"declares with the servo file {fitted} laid over it" in message
    # Another motion: a plan of the input at another knot spacing.
    resampled = load_motion(plan)
    wobble = resampled.positions + 0.01 * np.sin(40 * resampled.time)[:, None]
    save_motion(tmp_path / "wobble.csv", Motion(resampled.time, resampled.joint_names, wobble))
    assert "not a plan of this input" in _refused(loop, capsys, tmp_path / "wobble.csv", take, Refusal.WRONG_MOTION)


@pytest.mark.slow
def test_a_trial_that_rose_steps_again_from_the_best_one(loop, capsys):
    """The history says trial 1 measured far less than this take: the peak rose, and NEXT is stepped from trial 1's
    plan and take with half its trust region."""
    import shutil

    from retarget.fit.plant_trial import write_take
    from retarget.planning.refine import _file_digest

    folder = loop["folder"]
    write_take(loop["trial1"], replace(loop["capture"], seed=11), folder / "take1b.csv")
    shutil.copy(folder / "plan.csv", folder / "again.csv")
    best = replace(_record(1, 1e-4, 0.04), plan=str(folder / "plan.csv"),
                   plan_sha256=_file_digest(folder / "plan.csv"), recording=str(folder / "take1b.csv"),
                   recording_sha256=_file_digest(folder / "take1b.csv"), bodies={"tip": "tip"},
                   next_plan=str(folder / "again.csv"), next_plan_sha256=_file_digest(folder / "again.csv"))
    (folder / "again.history.json").write_text(json.dumps(History((best,)).to_json()))
    capsys.readouterr()
    assert _refine(loop, folder / "again.csv", folder / "take1.csv", folder / "after_rise.csv") == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["decision"] == "rose" and out["stopped_improving"] is True
    assert "stepping again from the best trial" in out["message"]
    assert out["step"]["trust_region_rad"] <= 0.02 + 1e-12
    assert [t["trial"] for t in out["history"]] == [1] and out["trial"] == 2


@pytest.mark.slow
def test_a_frozen_coordinate_is_refused_as_saturated(loop, capsys, tmp_path):
    folder = loop["folder"]
    lines = (folder / "take1.csv").read_text().splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("Frame,")) + 1
    body = lines[head:]
    # 12 frames from 0.35 s into the take (the motion, 0.15 s after it starts): x held at its first value.
    frozen = body[42].split(",")[6]
    for i in range(42, 54):
        cells = body[i].split(",")
        cells[6] = frozen
        body[i] = ",".join(cells)
    (tmp_path / "frozen.csv").write_text("\n".join(lines[:head] + body) + "\n")
    assert "saturated" in _refused(loop, capsys, folder / "plan.csv", tmp_path / "frozen.csv", Refusal.CLIPPED)


def test_bad_input_exits_2_with_the_json_line_and_writes_nothing(tmp_path, capsys):
    from tiny_robot import write_tiny_robot

    from retarget.cli import main

    folder = write_tiny_robot(tmp_path)
    base = ["refine", str(folder / "tiny_rod.yaml"), "--motion", str(folder / "ramp.csv"), "--plan",
            str(folder / "ramp.csv"), "--json"]
    for extra, says in ((["--recording", str(folder / "none.csv"), "--out", str(folder / "next.csv")], "no such"),
                        (["--recording", str(folder / "ramp.csv"), "--body", "tip", "--out", str(folder / "next.csv")],
                         "LINK=NAME"),
                        (["--recording", str(folder / "ramp.csv"), "--out", str(folder / "ramp.csv")], "differ"),
                        (["--recording", str(folder / "ramp.csv"), "--out", str(folder / "next.csv"),
                          "--trust-region", "0"], "--trust-region")):
        capsys.readouterr()
        assert main(base + extra) == 2
        last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert last == {"refused": False, "reason": "error", "message": last["message"], "files": []}
        assert says in last["message"]
        assert not list(folder.glob("next*")) and not list(folder.glob(".next*"))


def test_a_file_written_under_a_temporary_name_has_the_digest_of_its_final_name(tmp_path):
    """NEXT's digest in its history is taken before the rename: it must be the digest of NEXT as read later (else
    the next trial warns that CURRENT is not the plan the chain wrote)."""
    from retarget.planning.refine import _file_digest

    tmp = tmp_path / ".next.partial-1234.csv"
    tmp.write_text("time,m\n0,0\n", encoding="utf-8")
    expected = _file_digest(tmp, "next.csv")
    tmp.rename(tmp_path / "next.csv")
    assert _file_digest(tmp_path / "next.csv") == expected != _file_digest(tmp_path / "next.csv", "other.csv")


def test_write_refinement_renames_next_first_and_leaves_nothing_on_an_error(tmp_path, monkeypatch):
    """NEXT, its JointTrajectory YAML and the history appear together under their names; an error while writing
    leaves none of them and no temporary file; a failed rename leaves the files before it (NEXT first, the
    history last) and no temporary file."""
    from types import SimpleNamespace

    import retarget.planning.refine as refine_module
    from retarget.motion import Motion, load_motion
    from retarget.planning.refine import _file_digest, write_refinement

    t = np.linspace(0.0, 1.0, 11)
    refinement = SimpleNamespace(next_plan=Motion(t, ("m",), 0.1 * t[:, None]), comments=("refined",),
                                 record=_record(1, 0.02), history=History())
    paths = write_refinement(refinement, tmp_path / "next.csv")
    assert paths == (tmp_path / "next.csv", tmp_path / "next.yaml", tmp_path / "next.history.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["next.csv", "next.history.json", "next.yaml"]
    assert load_motion(paths[0]).joint_names == ("m",) and "refined" in paths[0].read_text()
    (record,) = History.load(paths[2]).trials
    assert record.next_plan == str(paths[0].resolve()) and record.next_plan_sha256 == _file_digest(paths[0])

    empty = tmp_path / "error"
    real_save = refine_module.save_motion

    def failing_save(path, motion, **options):
        if Path(path).suffix == ".yaml":
            raise OSError("disk full")
        real_save(path, motion, **options)

    monkeypatch.setattr(refine_module, "save_motion", failing_save)
    with pytest.raises(OSError, match="disk full"):
        write_refinement(refinement, empty / "next.csv")
    assert list(empty.iterdir()) == []
    monkeypatch.setattr(refine_module, "save_motion", real_save)

    blocked = tmp_path / "blocked"
    (blocked / "next.yaml" / "in_the_way").mkdir(parents=True)  # a non-empty folder: the YAML's rename fails
    with pytest.raises(OSError):
        write_refinement(refinement, blocked / "next.csv")
    assert sorted(p.name for p in blocked.iterdir()) == ["next.csv", "next.yaml"]
    assert (blocked / "next.yaml").is_dir()


def test_an_input_that_leaves_motors_out_belongs_to_its_robot_unless_it_moves_other_joints():
    """The motors an input has no column for hold their zero pose (as in `retarget plan`); an input that also moves
    joints the robot has no motor for is another robot's."""
    from types import SimpleNamespace

    from retarget.motion import Motion
    from retarget.planning.refine import _check_plan_for

    t = np.linspace(0.0, 1.0, 11)
    plan = SimpleNamespace(path=Path("plan.csv"), motion=Motion(t, ("shoulder", "elbow"), np.zeros((11, 2))))
    _check_plan_for(plan, Motion(t, ("shoulder",), 0.1 * t[:, None]), ["shoulder", "elbow"])
    with pytest.raises(RefineRefused) as err:
        _check_plan_for(plan, Motion(t, ("base_pitch",), 0.1 * t[:, None]), ["shoulder", "elbow"])
    assert err.value.reason is Refusal.WRONG_ROBOT and "another robot" in str(err.value)
