"""Material fitting: Young's modulus and Rayleigh damping of a rig's flexible part from recorded step tests.

Load a rig (:func:`load_rig`), pick an engine (:func:`make_simulator`), read recordings (:func:`read_recording`),
then :func:`fit_materials` (or :func:`build_problem` + :func:`solve` to inspect the aligned problem first).
:func:`record_twin_step_test` makes twin recordings with known parameters. :func:`design_identification_motion`
builds the motion that separates α from β (second bending mode, within the servo's stall torque),
:func:`predict_uncertainty` the 1σ a fit will reach before anything is recorded and :func:`choose_burst_count` the
number of bursts from it. :func:`fit_servo` identifies a servo's position loop from a step test
(:func:`read_servo_recording`). :func:`build_servo_beam` puts the rig's beam on a shaft driven by a
Dynamixel position loop (an independent plant), and :func:`replay` plays a plan and its naive input in it.
Imports no ROS. See docs/fit.md.
"""
from retarget.fit.align import Alignment, RestPose, align, detect_onset, kabsch, rest_pose, still_pose
from retarget.fit.beam_servo import DynamixelLoop, PlantError, ServoBeam, ServoBeamRun, build_servo_beam
from retarget.fit.design import (
    MATERIAL_RANGES,
    BurstChoice,
    IdentificationDesign,
    UncertaintyPrediction,
    burst_torque_bound,
    choose_burst_count,
    design_identification_motion,
    load_torque,
    predict_uncertainty,
    write_identification_motion,
)
from retarget.fit.errors import AlignmentError, FitError, RecordingError, RigError
from retarget.fit.fitter import (
    PARAMETERS,
    FitCase,
    FitOptions,
    FitProblem,
    FitResult,
    build_problem,
    fit_materials,
    parse_params,
    solve,
)
from retarget.fit.materials_file import default_materials_path, update_materials_file
from retarget.fit.recording import TipRecording, read_recording
from retarget.fit.replay import ReplayReport, replay
from retarget.fit.rig import StepTestRig, load_rig
from retarget.fit.servo_fit import ServoFitOptions, ServoFitResult, fit_servo, prepare_step_test
from retarget.fit.servo_recording import ServoRecording, read_servo_recording
from retarget.fit.simulators import (
    ENGINES,
    BeamEngine,
    FullEngine,
    MotorProfile,
    StepTestSimulator,
    TipTrajectory,
    make_simulator,
    motor_profile,
)
from retarget.fit.twin import TwinRecording, record_twin_step_test

__all__ = [
    "ENGINES",
    "MATERIAL_RANGES",
    "PARAMETERS",
    "Alignment",
    "AlignmentError",
    "BeamEngine",
    "BurstChoice",
    "DynamixelLoop",
    "FitCase",
    "FitError",
    "FitOptions",
    "FitProblem",
    "FitResult",
    "FullEngine",
    "IdentificationDesign",
    "MotorProfile",
    "PlantError",
    "RecordingError",
    "ReplayReport",
    "RestPose",
    "RigError",
    "ServoBeam",
    "ServoBeamRun",
    "ServoFitOptions",
    "ServoFitResult",
    "ServoRecording",
    "StepTestRig",
    "StepTestSimulator",
    "TipRecording",
    "TipTrajectory",
    "TwinRecording",
    "UncertaintyPrediction",
    "align",
    "build_problem",
    "build_servo_beam",
    "burst_torque_bound",
    "choose_burst_count",
    "default_materials_path",
    "design_identification_motion",
    "detect_onset",
    "fit_materials",
    "fit_servo",
    "kabsch",
    "load_rig",
    "load_torque",
    "make_simulator",
    "motor_profile",
    "parse_params",
    "predict_uncertainty",
    "prepare_step_test",
    "read_recording",
    "read_servo_recording",
    "record_twin_step_test",
    "replay",
    "rest_pose",
    "solve",
    "still_pose",
    "update_materials_file",
    "write_identification_motion",
]
