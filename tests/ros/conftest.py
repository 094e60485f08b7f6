"""Fixtures for ROS integration tests: node processes started with the venv's Python, an in-process client node.

Every node runs as its own process (``python -m retarget.ros.<node> --ros-args --params-file ...``) exactly as
``retarget up`` starts it; teardown sends SIGINT, waits, and only then kills, so no process is left behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from retarget.processes import die_with_parent

rclpy = pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")


class NodeProcess:
    """A node started as a child process; its combined output goes to a log file."""

    def __init__(self, module: str, params: dict[str, Any] | None, tmp: Path, name: str,
                 argv: list[str] | None = None, namespace: str = "") -> None:
        """``params`` become a params file passed with ``--ros-args``; ``argv`` is used instead for non-nodes.

        A ``namespace`` keeps a test's topics apart from other test modules running in the same DDS domain.
        """
        args = list(argv or [])
        if params is not None:
            self.params_file = tmp / f"{name}.params.yaml"
            self.params_file.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
            args += ["--ros-args", "--params-file", str(self.params_file)]
            if namespace:
                args += ["-r", f"__ns:={namespace}"]
        self.log_path = tmp / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=self._log,
                                     stderr=subprocess.STDOUT, env=os.environ.copy(), start_new_session=True,
                                     preexec_fn=die_with_parent(signal.SIGINT))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGINT, then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode


def _launcher(tmp: Path) -> Iterator[Callable[..., NodeProcess]]:
    started: list[NodeProcess] = []

    def start(module: str, params: dict[str, Any] | None, name: str | None = None,
              argv: list[str] | None = None, namespace: str = "") -> NodeProcess:
        node = NodeProcess(module, params, tmp, name or module.rsplit(".", 1)[-1], argv, namespace)
        started.append(node)
        return node

    yield start
    for node in reversed(started):
        node.stop()


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., NodeProcess]]:
    """Start node processes for one test; all are stopped after it."""
    yield from _launcher(tmp_path)


@pytest.fixture(scope="module")
def start_module_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., NodeProcess]]:
    """Start node processes shared by a module's tests; all are stopped after the module."""
    yield from _launcher(tmp_path_factory.mktemp("nodes"))


@pytest.fixture(scope="module")
def ros_context() -> Iterator[Any]:
    """rclpy initialised in the test process, with a background executor.

    Add a node to the executor only after creating its action clients: rclpy's ``ActionClient`` registers itself
    with the node before it has its lock, and a spinning executor that sees it in between dies of an AttributeError
    (ros2/rclpy#1589; one CI failure: every later goal response of the module was lost).
    """
    from rclpy.executors import SingleThreadedExecutor

    context = rclpy.Context()
    rclpy.init(context=context)
    # Single-threaded: the client callbacks are short, and rclpy's MultiThreadedExecutor can spin a core busy
    # re-queueing tasks that have not started yet (ros2/rclpy#1452) - on 2 cores that starves the node processes.
    executor = SingleThreadedExecutor(context=context)

    stop = threading.Event()

    def spin() -> None:
        # Tests close their nodes while this thread may be waiting on them; rclpy then raises InvalidHandle from
        # the wait set. executor.spin() would die of it and every later test in the module would hear nothing.
        from rclpy.exceptions import InvalidHandle
        from rclpy.executors import ExternalShutdownException, ShutdownException

        while not stop.is_set():
            try:
                executor.spin_once(timeout_sec=0.1)
            except InvalidHandle:
                continue
            except (ExternalShutdownException, ShutdownException):
                return

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    yield context, executor
    stop.set()
    thread.join(5)
    executor.shutdown()
    rclpy.shutdown(context=context)
