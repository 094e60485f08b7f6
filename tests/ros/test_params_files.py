"""Every shipped config/<robot or rig>.params.yaml is a params file that real rcl accepts, as users pass it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from retarget.model.library import robots_then_rigs, resolve_params, ros_parameters

pytest.importorskip("rclpy", reason="rclpy is installed by `make setup`")

pytestmark = pytest.mark.integration  # DDS (rclpy), child processes

PROBE = """
import sys, rclpy
rclpy.init(args=["probe", "--ros-args", "--params-file", sys.argv[1]])
node = rclpy.create_node("any_node", automatically_declare_parameters_from_overrides=True)
print(",".join(node.get_parameter("joint_names").value))
node.destroy_node()
rclpy.shutdown()
"""


@pytest.mark.parametrize("robot", robots_then_rigs())
def test_rcl_parses_params_file(robot: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, str(resolve_params(robot))], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split(",") == list(ros_parameters(robot)["joint_names"])
