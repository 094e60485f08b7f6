"""Tests of retarget.fit.simulators: motor profiles and the engine adapters."""
from __future__ import annotations

import numpy as np
import pytest

from retarget.errors import InputError, NotAvailableError
from retarget.fit.rig import load_rig
from retarget.fit.simulators import BeamEngine, FullEngine, make_simulator, motor_profile
from retarget.model.library import resolve_motion
from retarget.motion import Motion, load_motion


def test_motor_profile_derivatives() -> None:
    t = np.linspace(0.0, 2.0, 401)
    motion = Motion(t + 5.0, ("base_pitch",), np.sin(2 * t)[:, None])
    p = motor_profile(motion, "base_pitch", 1e-3)
    assert p.time_s[0] == 0.0 and p.time_s[-1] == pytest.approx(2.0)
    inner = (p.time_s > 0.2) & (p.time_s < 1.8)
    np.testing.assert_allclose(p.rate[inner], 2 * np.cos(2 * p.time_s[inner]), atol=1e-5)
    np.testing.assert_allclose(p.acceleration[inner], -4 * np.sin(2 * p.time_s[inner]), atol=2e-3)
    with pytest.raises(InputError, match="no joint"):
        motor_profile(motion, "elbow", 1e-3)


def test_make_simulator() -> None:
    rig = load_rig("single_rod")
    assert isinstance(make_simulator("auto", rig), BeamEngine)
    with pytest.raises(NotAvailableError):
        make_simulator("reduced", rig)
    with pytest.raises(InputError):
        make_simulator("mujoco", rig)


def test_beam_engine_output() -> None:
    rig = load_rig("single_rod")
    motion = load_motion(resolve_motion("single_rod/step_30"))
    tr = BeamEngine(rig, dt=2e-3).simulate(2e11, 0.2, 2e-5, motion)
    assert tr.position_m.shape == (tr.time_s.size, 3) and tr.time_s[-1] == pytest.approx(4.0)
    np.testing.assert_allclose(tr.position_m[0], rig.tip_com, atol=1e-9)  # upright: no sag at rest
    # After the return the motor is back at 0 and the tip angle rings about it.
    assert abs(tr.motor_rad[-1]) < 1e-9 and np.abs(tr.angle_rad[tr.time_s > 2.5]).max() > 0.05


def test_full_engine_adapter_agrees_at_the_start() -> None:
    """The full engine on a deliberately coarse mesh for 20 steps: same tip at rest, same output layout."""
    rig = load_rig("single_rod")
    motion = load_motion(resolve_motion("single_rod/step_30"))
    full = FullEngine(rig, dt=1e-3, store_every=1, resolution=(4, 6), duration=0.02)
    tr = full.simulate(2e11, 0.2, 2e-5, motion)
    assert tr.time_s.size == 21 and tr.angle_rad is not None
    np.testing.assert_allclose(tr.position_m[0], rig.tip_com, atol=2e-4)
    assert np.abs(tr.angle_rad).max() < 1e-6  # the motor has not moved yet
