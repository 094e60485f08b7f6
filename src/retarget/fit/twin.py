"""Twin step tests: record what OptiTrack would see of a simulated rig with known material parameters.

The rehearsal of the fitting procedure without hardware: simulate the step test with known E, α, β, express the tip
in a mocap frame that differs from the robot's (Motive's Y-up convention by default), start the capture a little
before the motion, and stream it through :class:`retarget.mocap.TwinSource` (seeded Gaussian noise, occlusion,
latency) into a rosbag2 bag of PoseStamped messages — the same kind of file ``retarget record`` writes — or into a
Motive CSV export (format 1.23, millimetres, quaternions; untracked frames as empty cells, as Motive writes them).
A recording made elsewhere is mimicked with an arbitrary mocap frame (a rotation and offset of the rig), a capture
that starts after the motion (negative lead), occlusions and orientation noise.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retarget.atomic import atomic_path
from retarget.errors import InputError
from retarget.fit.beam import rotation_about
from retarget.fit.simulators import StepTestSimulator

__all__ = ["MOCAP_FRAMES", "TwinRecording", "mocap_frame_transform", "record_twin_step_test", "write_motive_csv"]

#: Named robot → mocap frame conventions for the twin.
MOCAP_FRAMES: tuple[str, ...] = ("yup", "identity")

#: Epoch of the twin's clock [s] (fixed so that recordings are reproducible).
TWIN_EPOCH_S = 1.7e9

#: Orientation of the twin's tip rigid body relative to the tip link (as a marker set would define it).
_MARKER_FRAME = rotation_about(np.array([0.6, 0.0, 0.8]), np.array([0.7]))[0]


def mocap_frame_transform(name: str | tuple[ArrayLike, ArrayLike]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Rotation (3, 3) and translation (3,) [m] with ``x_mocap = R x_robot + t``.

    ``yup``: Motive's default, Y up (robot z → mocap y, robot y → mocap −z), origin 1.2 m away on the floor;
    ``identity``: the robot frame itself; a ``(R (3, 3), t (3,) [m])`` pair: that transform (R a proper rotation).
    """
    if not isinstance(name, str):
        rot, trans = (np.asarray(a, dtype=float) for a in name)
        if rot.shape != (3, 3) or trans.shape != (3,) or not np.allclose(rot @ rot.T, np.eye(3), atol=1e-9) \
                or np.linalg.det(rot) < 0:
            raise InputError("a mocap frame must be a proper rotation (3, 3) and a translation (3,) [m]")
        return rot, trans
    if name == "identity":
        return np.eye(3), np.zeros(3)
    if name == "yup":
        rot = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
        return rot, np.array([0.35, 0.0, -1.2])
    raise InputError(f"unknown mocap frame {name!r}; choose one of {list(MOCAP_FRAMES)}")


def _matrix_to_xyzw(rot: NDArray[np.float64]) -> NDArray[np.float64]:
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix(rot).as_quat()


@dataclass(frozen=True)
class TwinRecording:
    """What was recorded and the truth behind it.

    Attributes:
        path: The bag.
        topic: The tip's PoseStamped topic.
        frames: Captured frames.
        occluded: Frames in which the tip was not tracked (not written).
        lead_s: Capture time before the motion starts [s].
        start_stamp_s: Stamp of the first frame [s since the epoch]; motion time = stamp − start − lead.
        rotation, translation: The robot → mocap transform used.
        truth: ``{"youngs_modulus", "alpha", "beta"}`` [SI].
    """

    path: Path
    topic: str
    frames: int
    occluded: int
    lead_s: float
    start_stamp_s: float
    rotation: NDArray[np.float64]
    translation: NDArray[np.float64]
    truth: dict[str, float]


def record_twin_step_test(
    simulator: StepTestSimulator,
    motion: object,
    out: str | Path,
    youngs_modulus: float,
    alpha: float,
    beta: float,
    body: str = "tip",
    noise_m: float = 0.001,
    rotation_noise_rad: float = 0.005,
    occlusion: float = 0.0,
    rate_hz: float = 120.0,
    lead_s: float = 0.37,
    mocap_frame: str | tuple[ArrayLike, ArrayLike] = "yup",
    seed: int = 0,
    storage: str = "mcap",
) -> TwinRecording:
    """Simulate a step test with known parameters and write what the mocap system would record.

    Args:
        simulator: Engine adapter (its rig gives the motor axis for the tip's orientation).
        motion: The step-test :class:`retarget.motion.Motion`.
        out: Bag to create (must not exist), or a ``.csv`` file: a Motive CSV export of rigid body ``body``
            (overwritten if it exists).
        youngs_modulus, alpha, beta: The true E [Pa], α [1/s], β [s].
        body: Mocap body name (topic ``/mocap/<body>/pose``).
        noise_m: Position noise std per axis [m].
        rotation_noise_rad: Orientation noise std per axis [rad] (a rigid body with markers 5 cm apart and
            0.25 mm marker noise has about 0.005 rad).
        occlusion: Probability that the tip is not tracked in a frame.
        rate_hz: Capture rate [Hz].
        lead_s: Capture starts this long before the motion [s] (the fitter must find the offset); negative: the
            capture starts ``-lead_s`` after the motion started (a recording without rest at its start).
        mocap_frame: One of :data:`MOCAP_FRAMES`, or a ``(R, t)`` pair (:func:`mocap_frame_transform`).
        seed: Noise seed.
        storage: ``mcap`` or ``sqlite3``.

    Raises:
        InputError: Bad arguments. BagError: The bag cannot be written (e.g. it exists).
    """
    from retarget.mocap.bags import PoseSeries, pose_topic, write_pose_bag
    from retarget.mocap.twin import TwinNoise, TwinSource

    truth = {"youngs_modulus": float(youngs_modulus), "alpha": float(alpha), "beta": float(beta)}
    sim = simulator.simulate(youngs_modulus, alpha, beta, motion)
    rot, trans = mocap_frame_transform(mocap_frame)
    rig = simulator.rig
    pos_m = sim.position_m @ rot.T + trans
    angle = sim.motor_rad if sim.angle_rad is None else sim.angle_rad
    duration = float(sim.time_s[-1]) + lead_s
    if duration <= 0:
        raise InputError(f"the capture starts {-lead_s} s after a motion of {float(sim.time_s[-1])} s: nothing to "
                         "record")

    def pose_at(t: float) -> dict[str, tuple[NDArray[np.float64], NDArray[np.float64]]]:
        ts = t - lead_s
        position = np.array([np.interp(ts, sim.time_s, pos_m[:, k]) for k in range(3)])
        # Motive's rigid-body frame is whatever the marker set defined: a fixed, arbitrary rotation of the link.
        rot_tip = rot @ rotation_about(rig.axis, np.array([np.interp(ts, sim.time_s, angle)]))[0] @ _MARKER_FRAME
        return {body: (position, _matrix_to_xyzw(rot_tip))}

    noise = TwinNoise(position_std_m=noise_m, rotation_std_rad=rotation_noise_rad, occlusion_probability=occlusion)
    source = TwinSource(pose_at, rate_hz, noise, seed=seed, start_time_s=TWIN_EPOCH_S)
    n_frames = int(np.floor(duration * rate_hz)) + 1
    stamps, positions, quats, tracked = [], [], [], []
    for _ in range(n_frames):
        frame = source.next_frame()
        pose = frame.bodies[0]
        stamps.append(frame.stamp_s)
        tracked.append(bool(pose.tracking_valid))
        positions.append(pose.position_m)
        quats.append(pose.orientation_xyzw)
    keep = np.array(tracked)
    occluded = int((~keep).sum())
    topic = pose_topic(body)
    if Path(out).suffix.lower() == ".csv":
        write_motive_csv(out, body, np.array(stamps) - TWIN_EPOCH_S, np.array(positions), np.array(quats), keep,
                         rate_hz)
    else:
        series = PoseSeries(np.array(stamps)[keep], np.array(positions)[keep], np.array(quats)[keep],
                            frame_id="mocap")
        write_pose_bag(out, {topic: series}, storage=storage)
    return TwinRecording(Path(out), topic, n_frames, occluded, lead_s, TWIN_EPOCH_S, rot, trans, truth)


def write_motive_csv(path: str | Path, body: str, time_s: NDArray[np.float64], position_m: NDArray[np.float64],
                     orientation_xyzw: NDArray[np.float64], tracked: NDArray[np.bool_], rate_hz: float) -> Path:
    """Write one rigid body as Motive exports it (format 1.23, millimetres, quaternions, global space).

    Args:
        path: The ``.csv`` file (written to a temporary name, then renamed).
        body: Rigid-body (asset) name.
        time_s: (n,) take time of each frame [s].
        position_m: (n, 3) [m]; written in millimetres.
        orientation_xyzw: (n, 4) unit quaternions.
        tracked: (n,) False where the body was not tracked: the frame's cells are left empty.
        rate_hz: Capture and export frame rate [Hz].
    """
    out = Path(path)
    n = len(time_s)
    header = ["Format Version", "1.23", "Take Name", out.stem, "Take Notes", "", "Capture Frame Rate",
              f"{rate_hz:.6f}", "Export Frame Rate", f"{rate_hz:.6f}", "Capture Start Time",
              "2026-01-01 12.00.00.000 PM", "Capture Start Frame", "0", "Total Frames in Take", str(n),
              "Total Exported Frames", str(n), "Rotation Type", "Quaternion", "Length Units", "Millimeters",
              "Coordinate Space", "Global"]
    cols = 8
    lines = [",".join(header), "",
             ",".join(["", "Type"] + ["Rigid Body"] * cols),
             ",".join(["", "Name"] + [body] * cols),
             ",".join(["", "ID"] + ["1"] * cols),
             ",".join(["", ""] + ["Rotation"] * 4 + ["Position"] * 3 + ["Mean Marker Error"]),
             "Frame,Time (Seconds),X,Y,Z,W,X,Y,Z,"]
    for i in range(n):
        cells = [str(i), f"{time_s[i]:.6f}"]
        if tracked[i]:
            cells += [f"{v:.6f}" for v in orientation_xyzw[i]] + [f"{1e3 * v:.6f}" for v in position_m[i]]
            cells.append("0.000100")
        else:
            cells += [""] * cols
        lines.append(",".join(cells))
    with atomic_path(out) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return out
