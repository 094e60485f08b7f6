"""retarget.ros.spinning.spin: a shutdown race ends spinning quietly, a real error in a callback does not, and a
node that dies of a fatal signal prints where."""
from __future__ import annotations

import os
import threading
from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 Kilted wheels: make setup)")

pytestmark = pytest.mark.integration  # DDS (rclpy) and child processes


@pytest.fixture
def node() -> Any:
    from rclpy.node import Node

    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("spinning_test", context=context)
    yield node
    node.destroy_node()
    context.try_shutdown()


def _raise_in_timer(node: Any, make_error: Any) -> list[str]:
    calls: list[str] = []

    def tick() -> None:
        calls.append("tick")
        raise make_error()

    node.create_timer(0.001, tick)
    return calls


def _interrupted_conversion() -> RuntimeError:
    # What take_message raises when SIGINT's KeyboardInterrupt lands inside the message conversion.
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        try:
            raise RuntimeError("Unable to convert call argument '0' to Python object")
        except RuntimeError as exc:
            return exc


def test_an_error_chained_to_a_keyboard_interrupt_ends_spinning_quietly(node: Any) -> None:
    from retarget.ros.spinning import spin

    calls = _raise_in_timer(node, _interrupted_conversion)
    spin(node, before_shutdown=lambda: calls.append("before shutdown"))
    assert calls == ["tick", "before shutdown"]


def test_an_error_after_the_context_is_shut_down_ends_spinning_quietly(node: Any) -> None:
    from retarget.ros.spinning import spin

    def tick() -> None:
        node.context.shutdown()  # as rclpy's SIGINT handler does, from outside the executor
        raise RuntimeError("InvalidHandle-like failure of a torn-down handle")

    node.create_timer(0.001, tick)
    spin(node)


def test_an_error_just_before_the_context_is_shut_down_ends_spinning_quietly(node: Any) -> None:
    import threading

    from retarget.ros.spinning import spin

    def tick() -> None:
        # rclpy's signal thread shuts the context down a moment after the executor's take failed.
        threading.Timer(0.2, node.context.shutdown).start()
        raise RuntimeError("Unable to convert call argument '0' to Python object")

    node.create_timer(0.001, tick)
    spin(node)


def test_a_real_error_is_raised_and_the_threads_are_stopped_all_the_same(node: Any) -> None:
    from retarget.ros.spinning import spin

    calls = _raise_in_timer(node, lambda: ValueError("a bug in a callback"))
    with pytest.raises(ValueError, match="a bug"):
        spin(node, before_shutdown=lambda: calls.append("before shutdown"))
    assert calls == ["tick", "before shutdown"]


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no SCHED_FIFO on this system")
def test_a_node_is_destroyed_with_ordinary_scheduling_after_a_real_time_executor(node: Any) -> None:
    """The driver's executor thread runs under SCHED_FIFO; close_node destroys the node's DDS entities under
    SCHED_OTHER (ahead of the DDS threads the destruction waits on, a real-time thread would starve them)."""
    from retarget.processes import realtime_priority
    from retarget.ros.spinning import close_node

    seen: dict[str, Any] = {}

    def executor_thread() -> None:
        tid = threading.get_native_id()
        try:
            seen["refused"] = realtime_priority(1)
            seen["before"] = os.sched_getscheduler(tid)
            close_node(node)
            seen["after"] = os.sched_getscheduler(tid)
        finally:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))

    thread = threading.Thread(target=executor_thread)
    thread.start()
    thread.join(10.0)
    if seen.get("refused"):
        pytest.skip(f"this user may not run SCHED_FIFO: {seen['refused']}")
    assert seen == {"refused": None, "before": os.SCHED_FIFO, "after": os.SCHED_OTHER}
    assert not list(node.publishers)  # destroyed (the parameter events publisher with it)

_SIGINT_DURING_A_CALLBACK = """
import json, os, signal, time
import rclpy
from rclpy.node import Node
from retarget.ros.spinning import spin

events = []

def busy():
    if events:
        return
    os.kill(os.getpid(), signal.SIGINT)
    try:
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # Python bytecode, where a KeyboardInterrupt would land
            pass
        events.append("callback finished")
    except KeyboardInterrupt:
        events.append("callback interrupted")

def before_shutdown():
    events.append("before shutdown")
    events.append(f"handler restored {signal.getsignal(signal.SIGINT) is signal.default_int_handler}")

with rclpy.init():
    node = Node("sigint_during_a_callback")
    node.create_timer(0.05, busy)
    spin(node, before_shutdown=before_shutdown)
    events.append(f"context ok {node.context.ok()}")
print(json.dumps(events))
"""


def test_sigint_ends_spinning_at_the_wait_and_never_inside_a_callback() -> None:
    """Ctrl-C in a node's process (rclpy's handler on the default context, spinning on the main thread): the
    callback running at the signal finishes, spinning ends without a KeyboardInterrupt, and Python's handler is
    back for the clean-up."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _SIGINT_DURING_A_CALLBACK], capture_output=True, text=True,
                         check=False, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        "callback finished", "before shutdown", "handler restored True", "context ok False"]


def test_a_node_that_dies_of_a_fatal_signal_prints_its_threads_stacks(start_node: Any) -> None:
    """A node (its own process, as ``retarget up`` starts it) killed by SIGSEGV, as a crash in rclpy or the DDS
    kills it, leaves the Python stack of each thread in its log, not only the exit code."""
    import signal
    import time

    from ros_helpers import wait_for

    server = start_node("retarget.ros.trajectory_server", {"joint_names": ["base_pitch"]}, "trajectory_server",
                        namespace="/test_fatal_signal")
    wait_for(lambda: "ready:" in server.log() or server.proc.poll() is not None, 30.0,
             f"trajectory_server to start: {server.log()}")
    time.sleep(1.0)  # "ready:" is logged just before the node starts spinning
    server.proc.send_signal(signal.SIGSEGV)
    assert server.proc.wait(10.0) == -signal.SIGSEGV
    log = server.log()
    assert "Fatal Python error: Segmentation fault" in log and "most recent call first" in log, log
    assert "spinning.py" in log, log  # the main thread's stack: in spin, where the node waits


_SIGUSR1_THEN_SIGINT = """
import os, signal, threading
import rclpy
from rclpy.node import Node
from retarget.ros.spinning import spin

with rclpy.init():
    node = Node("asked_for_its_stacks")
    sent = []

    def tick():
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGUSR1)  # the supervisor's question to a node that ignored SIGINT
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()

    node.create_timer(0.05, tick)
    spin(node)
print("stopped on SIGINT")
"""


def test_a_spinning_node_prints_its_threads_stacks_on_sigusr1_and_goes_on() -> None:
    """The supervisor sends SIGUSR1 to a node that did not stop on SIGINT before killing it: the node prints every
    thread's Python stack (faulthandler) and is not ended by it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _SIGUSR1_THEN_SIGINT], capture_output=True, text=True,
                         check=False, timeout=60)
    assert out.returncode == 0 and "stopped on SIGINT" in out.stdout, out.stderr
    assert "Current thread" in out.stderr and "File " in out.stderr, out.stderr


_HANG_IN_THE_STOP = """
import sys, threading
import rclpy
from rclpy.node import Node
from retarget.ros.spinning import close_node, spin, stopping_on_signals

def stuck_in_teardown():
    threading.Event().wait()

with rclpy.init(), stopping_on_signals(stop_timeout=float(sys.argv[2])):
    node = Node("hangs_in_its_stop")
    node.create_timer(0.05, lambda: print("spinning", flush=True))
    spin(node, before_shutdown=stuck_in_teardown if sys.argv[1] == "hang" else None)
    close_node(node)
print("stopped", flush=True)
"""


@pytest.mark.parametrize("how", ["hang", "clean"])
def test_a_node_whose_stop_hangs_prints_its_stacks_and_exits_within_its_stop_timeout(how: str) -> None:
    """stopping_on_signals: the first SIGINT arms the stop watchdog; a stop that hangs ends with every thread's
    stack and exit code 1 (not a kill from outside); a clean one ends with 0 and no dump. The clean stop's watchdog
    is 20 s, not the hanging one's 1 s: on a loaded machine destroying the node alone can take over a second."""
    import signal
    import subprocess
    import sys

    timeout = "1.0" if how == "hang" else "20.0"
    proc = subprocess.Popen([sys.executable, "-c", _HANG_IN_THE_STOP, how, timeout], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "spinning"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if how == "hang":
        assert proc.returncode == 1 and "stopped" not in out
        assert err.startswith("Timeout (0:00:01)!") and "stuck_in_teardown" in err, err
    else:
        assert proc.returncode == 0 and out.strip().endswith("stopped") and "Timeout" not in err, err


_STOP_BEFORE_SPINNING = """
import os, signal, time
import rclpy
from rclpy.node import Node
from retarget.ros.spinning import close_node, spin, stop_requested, stopping_on_signals

events = []
with rclpy.init(), stopping_on_signals():
    node = Node("stopped_while_starting")
    os.kill(os.getpid(), signal.SIGINT)  # while the node is still starting: no KeyboardInterrupt here
    # rclpy's signal thread shuts the context down a moment later (milliseconds; longer on a loaded machine).
    deadline = time.monotonic() + 10.0
    while node.context.ok() and time.monotonic() < deadline:
        time.sleep(0.001)
    events.append(f"context ok {node.context.ok()}, stop requested {stop_requested()}")
    spin(node, before_shutdown=lambda: events.append("before shutdown"))
    close_node(node)
print(events)
"""


def test_a_stop_signal_before_spinning_ends_the_node_without_spinning() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _STOP_BEFORE_SPINNING], capture_output=True, text=True,
                         check=False, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.strip() == "['context ok False, stop requested True', 'before shutdown']"
