"""Test-wide settings: DDS kept on loopback and isolated per run, one BLAS thread, shared test data lookup."""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

# A suite started in the background of a shell without job control (`cmd &` in a script, nohup) inherits SIGINT
# ignored, and so would every process a test starts: Ctrl-C tests would then wait for processes that cannot hear it.
# Python's own handler here makes the children start with the default disposition.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Set before any test imports numpy/rclpy or starts a process, so children inherit them.
# Loopback-only discovery and a per-run domain keep parallel runs (and other developers) apart;
# ROS_LOCALHOST_ONLY is ignored by Kilted.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(var, "1")
# Hermetic: no test (nor a process it starts) may pick up reduced models the developer has trained or cached
# (~/.cache/retarget, the checkout's .cache-models/): the planner would then optimize for real, for minutes.
_CACHE_PREFIX = "retarget-test-cache-"


def _remove_orphaned_caches() -> None:
    """Remove the test caches of earlier runs that were killed (atexit never ran): their process is gone."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_CACHE_PREFIX}*"):
        pid = folder.name[len(_CACHE_PREFIX):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:  # another user's live process
            pass


_remove_orphaned_caches()
os.environ["RETARGET_CACHE"] = _CACHE = tempfile.mkdtemp(prefix=f"{_CACHE_PREFIX}{os.getpid()}-")
atexit.register(shutil.rmtree, _CACHE, True)
os.environ.pop("RETARGET_MODELS", None)

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """``../shared/data`` beside the repository (or $RETARGET_SHARED_DATA), if present."""
    env = os.environ.get("RETARGET_SHARED_DATA")
    candidate = Path(env) if env else REPO.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The external test data folder; tests using it skip cleanly when it is absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("external test data ../shared/data is absent (set RETARGET_SHARED_DATA to its path)")
    return path


@pytest.fixture(autouse=True, scope="session")
def _ros_log_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("ROS_LOG_DIR", str(tmp_path_factory.mktemp("ros_log")))
