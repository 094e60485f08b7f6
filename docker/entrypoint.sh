#!/usr/bin/env bash
set -e
source /opt/ros/kilted/setup.bash
source /ws/install/setup.bash
exec "$@"
