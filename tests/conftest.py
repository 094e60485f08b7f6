"""Test-wide settings: DDS kept on loopback and isolated per run (and per xdist worker), one BLAS thread, shared
test data lookup, and the ``integration`` marker enforced: a test that starts a process, opens an internet
(UDP/TCP) socket or a pseudo-terminal, or initialises rclpy (DDS) fails unless it is marked ``integration``, so
``make test-fast`` (``-m "not slow and not integration"``) never starts one."""
from __future__ import annotations

import _posixsubprocess
import atexit
import faulthandler
import importlib.util
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
_DOMAIN = int(os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100)))
# pytest-xdist's workers inherit the controller's environment, its domain included: worker gwN takes the N + 1-th
# domain after it, so two workers' nodes never discover each other.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw"):
    os.environ["ROS_DOMAIN_ID"] = str(1 + (_DOMAIN + int(_WORKER[2:])) % 100)
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

#: The rod systems and the tiny robot shared by tests/optimize and tests/planning (tests/optimize/rod_fixtures.py;
#: tests/optimize is on the import path: pyproject.toml).
pytest_plugins = ("rod_fixtures",)


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


# --- the integration marker, enforced ---------------------------------------------------------------------------

#: The unmarked test running now (None: none, or one marked ``integration``), and what it was caught doing.
_unmarked: pytest.Item | None = None
_violations: dict[str, list[str]] = {}

#: Audit events (sys.addaudithook) that start a process.
_PROCESS_EVENTS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec"}


def _violation(what: str) -> None:
    """Record that the running unmarked test did ``what`` and stop it (``pytest.fail`` is a BaseException: an
    ``except Exception`` in the code under test does not swallow it)."""
    item = _unmarked
    if item is None:
        return
    _violations.setdefault(item.nodeid, []).append(what)
    pytest.fail(f"{item.nodeid} {what} but is not marked @pytest.mark.integration (tests/conftest.py)",
                pytrace=False)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _unmarked is None:
        return
    if event in _PROCESS_EVENTS:
        _violation(f"starts a process ({event} {str(args[:2])[:120]})")
    elif event == "socket.__new__" and args[1] in (socket.AF_INET, socket.AF_INET6):
        _violation("opens an internet socket")


def _guarded(function: Callable[..., Any], what: str) -> Callable[..., Any]:
    def guard(*args: Any, **kwargs: Any) -> Any:
        _violation(what)
        return function(*args, **kwargs)

    guard.__wrapped__ = function  # type: ignore[attr-defined]
    return guard


def pytest_configure(config: pytest.Config) -> None:
    global _watchdog_file
    # The stderr the run started with, before pytest's capture replaces file descriptor 2 (a watchdog's stacks
    # printed into a test's capture would be lost with its process).
    if _watchdog_file is None:
        _watchdog_file = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")
    sys.addaudithook(_audit)
    # Not audited: multiprocessing's spawn and forkserver start methods (they exec through fork_exec directly), the
    # pseudo-terminal, and rclpy's context (DDS).
    _posixsubprocess.fork_exec = _guarded(_posixsubprocess.fork_exec, "starts a process (fork_exec)")
    os.openpty = _guarded(os.openpty, "opens a pseudo-terminal")
    if importlib.util.find_spec("rclpy") is not None:
        from rclpy.context import Context

        Context.init = _guarded(Context.init, "initialises rclpy (DDS)")


# --- the watchdog behind pytest-timeout --------------------------------------------------------------------------
#: How long after its pytest-timeout a test may still run before the watchdog ends its process. pytest-timeout's
#: signal method raises in the main thread only when that thread next runs Python code: a test blocked inside a C
#: call (a DDS wait without a timeout, a join in a C++ executor) never sees it, and its xdist worker would hang the
#: whole run. faulthandler's watchdog is a C thread: it prints every thread's stack and exits the process, so xdist
#: reports the test as crashed (and stops the run: scripts/run_tests.sh passes --max-worker-restart 0).
WATCHDOG_GRACE = 120.0
_watchdog_file: Any = None


def _test_timeout(item: pytest.Item) -> float:
    """The pytest-timeout this test runs under (its ``timeout`` marker, else --timeout, else the ini's), 0 for none."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        return float((marker.args[0] if marker.args else marker.kwargs["timeout"]) or 0)
    option = item.config.getoption("timeout", None)
    return float(option if option is not None else item.config.getini("timeout") or 0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _unmarked
    _unmarked = None if item.get_closest_marker("integration") else item
    timeout = _test_timeout(item)
    watched = timeout > 0 and _watchdog_file is not None
    if watched:
        faulthandler.dump_traceback_later(timeout + WATCHDOG_GRACE, exit=True, file=_watchdog_file)
    try:
        return (yield)
    finally:
        _unmarked = None
        if watched:
            faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's own end is watched too: a process whose exit hangs (a thread that is not a daemon, a DDS
    participant that does not close) prints its stacks and exits after :data:`WATCHDOG_GRACE`. Not in an xdist
    worker: a worker that has finished waits for the whole run to end, however long the other workers take, and
    xdist ends a worker that does not exit within 10 s of the run's end."""
    if _watchdog_file is not None and "PYTEST_XDIST_WORKER" not in os.environ:
        faulthandler.dump_traceback_later(WATCHDOG_GRACE, exit=True, file=_watchdog_file)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Fails a phase in which the test broke the rule even when the code under test caught the failure."""
    report = yield
    caught = _violations.pop(item.nodeid, None)
    if caught and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} {caught[0]} but is not marked @pytest.mark.integration "
                           "(tests/conftest.py)")
    return report


# --- the order modules reach pytest-xdist's workers -------------------------------------------------------------


def _module_weight(items: list[pytest.Item]) -> int:
    """0: the module has a test marked both ``slow`` and ``integration`` (a long run of processes: a node set's
    plan, the demo, the shutdown cycles), 1: one marked either, 2: unit tests only."""
    marks = [{m.name for m in item.iter_markers()} for item in items]
    if any({"slow", "integration"} <= m for m in marks):
        return 0
    return 1 if any(m & {"slow", "integration"} for m in marks) else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the modules heaviest first (:func:`_module_weight`; collection order within a weight),
    each module's tests together: with ``--dist loadfile --no-loadscope-reorder`` (scripts/run_tests.sh) the
    controller hands out modules in this order, so the run ends on short unit-test modules that fill both workers,
    not on one long module running alone. A plain pytest run keeps the collection order."""
    if not _WORKER:
        return
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ordered = sorted(modules.values(), key=_module_weight)  # stable: collection order within a weight
    items[:] = [item for module in ordered for item in module]
