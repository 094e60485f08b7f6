"""retarget: vibration-minimizing motion retargeting for robot characters with flexible parts.

The numerical core (everything but :mod:`retarget.ros`) imports no ROS.
"""
from retarget.errors import RetargetError

__version__ = "0.1.0"
__all__ = ["RetargetError", "__version__"]
