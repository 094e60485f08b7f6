"""``make demo``: the main job on an embedded default (the drummer).

It runs only what exists and says plainly what does not: no step is faked.
"""
from __future__ import annotations

import sys


def main() -> int:
    from retarget.info import components

    found = components()
    missing = [name for name in ("rclpy", "control_msgs", "retarget_interfaces") if not found[name]]
    if missing:
        print(f"retarget demo: set-up incomplete, missing {', '.join(missing)} (run `make setup`)", file=sys.stderr)
        return 1
    print(
        "retarget demo: set-up complete (ROS 2 Kilted wheels, control_msgs, retarget_interfaces); "
        "the simulator, planner and drummer bring-up are not built yet, so there is nothing more to run."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
