"""Motor trajectories sampled at many times at once equal them sampled time by time."""
from __future__ import annotations

import numpy as np

from retarget.sim.motors import ConstantMotors, FunctionMotors, SplineMotors, sample_motors


def test_a_spline_sampled_at_once_equals_it_time_by_time_and_holds_outside_its_samples():
    t = np.linspace(0.0, 1.0, 11)
    motors = SplineMotors(t, np.column_stack([np.sin(3 * t), t**2]))
    times = np.linspace(-0.2, 1.3, 301)  # before, within and after the samples
    theta, theta_dot = sample_motors(motors, times)
    np.testing.assert_array_equal(theta, [motors.value(x) for x in times])
    np.testing.assert_array_equal(theta_dot, [motors.derivative(x) for x in times])
    assert np.all(theta_dot[times > 1.0] == 0.0) and np.all(theta[times > 1.0] == theta[-1])


def test_trajectories_without_a_vectorized_form_are_sampled_time_by_time():
    times = np.array([0.0, 0.5, 1.0])
    theta, theta_dot = sample_motors(FunctionMotors(lambda t: 2.0 * t, lambda t: 2.0), times)
    assert theta.shape == theta_dot.shape == (3, 1)
    np.testing.assert_array_equal(theta[:, 0], 2.0 * times) and np.testing.assert_array_equal(theta_dot, 2.0)
    held, rate = sample_motors(ConstantMotors(np.array([0.1, -0.3])), times)  # its ``values`` is a field
    np.testing.assert_array_equal(held, [[0.1, -0.3]] * 3) and np.testing.assert_array_equal(rate, 0.0)
