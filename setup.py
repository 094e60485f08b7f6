"""ament_python package `retarget` (src layout).

On a ROS 2 distro colcon builds it; without one, `make setup` installs it editable into .venv.
Launch files, robot params, URDFs and motions are installed under share/retarget so that
`ros2 launch retarget drummer.launch.py` and `get_package_share_directory('retarget')` find them.
"""
import os
from glob import glob

from setuptools import find_namespace_packages, setup

PACKAGE = "retarget"


def tree(folder):
    """data_files entries installing `folder` recursively under share/retarget/<folder>."""
    entries = []
    for root, _dirs, files in os.walk(folder):
        paths = [os.path.join(root, f) for f in files if not f.startswith(".")]
        if paths:
            entries.append((os.path.join("share", PACKAGE, root), paths))
    return entries


setup(
    name=PACKAGE,
    version="0.1.0",
    package_dir={"": "src"},
    packages=find_namespace_packages("src", include=["retarget", "retarget.*"]),
    include_package_data=True,
    package_data={PACKAGE: ["data/**/*", "motions/**/*", "motion/maps/*.yaml", "fem/*.json", "report/web/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        ("share/" + PACKAGE + "/launch", glob("launch/*.launch.py")),
    ]
    + tree("config")
    + tree("urdf"),
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="retarget developers",
    maintainer_email="retarget-dev@example.com",
    description="Vibration-minimizing motion retargeting for robot characters with flexible parts.",
    license="Apache-2.0",
    python_requires=">=3.10",
    entry_points={
        "console_scripts": [
            "retarget = retarget.cli:main",
            "planner = retarget.ros.planner:main",
            "trajectory_server = retarget.ros.trajectory_server:main",
            "dynamixel_driver = retarget.ros.dynamixel_driver:main",
            "mocap = retarget.ros.mocap_node:main",
            "servo_twin = retarget.ros.servo_twin:main",
        ],
    },
)
