"""Twin mocap source: noise statistics, occlusion, interpolation, and the twin → NatNet → client path."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError
from retarget.mocap.client import NatNetClient, NatNetClientConfig
from retarget.mocap.server import NatNetServer, default_server_info, frame_of_data, model_definitions_for
from retarget.mocap.source import MocapSource
from retarget.mocap.twin import TwinNoise, TwinSource, interpolated_poses


def _still(t: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {"tip": (np.array([0.1, 0.2, 0.7]), np.array([0.0, 0.0, 0.0, 1.0]))}


def test_position_noise_has_the_requested_std() -> None:
    twin = TwinSource(_still, rate_hz=100, noise=TwinNoise(position_std_m=0.001), seed=4, start_time_s=0.0)
    positions = np.array([f.body("tip").position_m for f in twin.frames(40.0)])
    assert isinstance(twin, MocapSource)
    np.testing.assert_allclose(positions.mean(axis=0), (0.1, 0.2, 0.7), atol=1e-4)  # standard error 1.6e-5 m
    np.testing.assert_allclose(positions.std(axis=0), 0.001, rtol=0.05)  # 4001 samples: ~1.1 % std error


def test_rotation_noise_angle_scale() -> None:
    twin = TwinSource(_still, noise=TwinNoise(rotation_std_rad=0.01), seed=5, start_time_s=0.0)
    q = np.array([f.body("tip").orientation_xyzw for f in twin.frames(20.0)])
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-12)
    angles = 2 * np.arcsin(np.linalg.norm(q[:, :3], axis=1))
    # The angle of a 3-D Gaussian rotation vector is Maxwell distributed: rms = sqrt(3) sigma.
    assert np.sqrt(np.mean(angles**2)) == pytest.approx(np.sqrt(3) * 0.01, rel=0.05)


def test_occlusion_keeps_last_pose_and_marks_invalid() -> None:
    twin = TwinSource(
        lambda t: {"tip": (np.array([t, 0.0, 0.0]), np.array([0.0, 0.0, 0.0, 1.0]))},
        rate_hz=10,
        noise=TwinNoise(occlusion_probability=0.3),
        seed=6,
        start_time_s=100.0,
    )
    frames = list(twin.frames(50.0))
    valid = np.array([f.body("tip").tracking_valid for f in frames])
    assert valid.mean() == pytest.approx(0.7, abs=0.05)
    last = None
    for f in frames:
        pose = f.body("tip")
        if pose.tracking_valid:
            assert pose.position_m[0] == pytest.approx(f.stamp_s - 100.0)
            last = pose.position_m
        elif last is not None:
            assert pose.position_m == last and f.valid_bodies == ()


def test_seeded_and_latency() -> None:
    make = lambda: TwinSource(_still, noise=TwinNoise(0.002, 0.0, 0.1, 0.004), seed=9, start_time_s=5.0)  # noqa: E731
    a, b = list(make().frames(1.0)), list(make().frames(1.0))
    assert a == b
    assert a[3].stamp_s == pytest.approx(5.0 + 3 / 120) and a[3].receive_time_s - a[3].stamp_s == pytest.approx(0.004)


def test_interpolated_poses() -> None:
    t = np.array([0.0, 1.0, 2.0])
    p = np.array([[0.0, 0, 0], [1.0, 0, 0], [1.0, 2.0, 0]])
    half = np.sin(np.pi / 4)
    q = np.array([[0, 0, 0, 1.0], [0, 0, half, half], [0, 0, 1.0, 0]])
    pose_at = interpolated_poses(t, {"b": p}, {"b": q})
    position, quat = pose_at(1.5)["b"]
    np.testing.assert_allclose(position, (1.0, 1.0, 0.0))
    np.testing.assert_allclose(quat, (0, 0, np.sin(3 * np.pi / 8), np.cos(3 * np.pi / 8)), atol=1e-12)
    np.testing.assert_allclose(pose_at(-1.0)["b"][0], p[0])
    np.testing.assert_allclose(pose_at(9.0)["b"][0], p[-1])
    with pytest.raises(InputError, match="shape"):
        interpolated_poses(t, {"b": p[:2]})
    with pytest.raises(InputError, match="increasing"):
        interpolated_poses(np.array([0.0, 0.0]), {})


@pytest.mark.integration
def test_twin_streams_through_natnet_to_the_client() -> None:
    twin = TwinSource(_still, noise=TwinNoise(0.001, 0.0, 0.0, 0.006), seed=1, start_time_s=1e9)
    ids = twin.body_ids
    server = NatNetServer(default_server_info(0), model_definitions_for({v: k for k, v in ids.items()})).start()
    host, port = server.command_address
    config = NatNetClientConfig(server_address=host, command_port=port, data_port=0, multicast_address=None)
    client = NatNetClient(config)
    try:
        client.open()
        server.add_data_destination(client.data_address)
        client.connect(2.0)
        client.request_model_definitions(2.0)
        sent = list(twin.frames(0.05))
        for frame in sent:
            server.send_frame(frame_of_data(frame, ids))
        received = list(client.frames(max_frames=len(sent), idle_timeout_s=1.0))
    finally:
        client.close()
        server.stop()
    assert len(received) == len(sent)
    for s, r in zip(sent, received):
        np.testing.assert_allclose(r.body("tip").position_m, s.body("tip").position_m, atol=1e-7)
        assert r.latency_s == pytest.approx(0.006, abs=1e-6)


def test_bad_noise_is_rejected() -> None:
    with pytest.raises(InputError):
        TwinNoise(occlusion_probability=1.5)
    with pytest.raises(InputError):
        TwinSource(_still, rate_hz=0)
