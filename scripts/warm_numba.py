"""Compile the numba kernels the test suite uses into numba's on-disk cache before pytest starts
(scripts/run_tests.sh; docs/testing.md "numba's compile").

Two processes warm disjoint kernel sets in parallel, so no kernel is compiled twice and no test waits for one:

- ``engine`` runs the compiled reduced engine (``run_chunk`` and its whole call tree, the largest compile) on the
  drummer's shipped demo model (``retarget/data/demo/``; the compiled engine's argument types do not depend on the
  model). Without that model it waits for ``rest``'s rod model.
- ``rest`` meanwhile compiles the leaves of that tree ``engine`` reaches last (:func:`_engine_leaves`), simulates
  the tests' rod on a motor (``tests/optimize/rod_fixtures.py``: the full-space simulator's kernels), trains its
  reduced model, steps the reference reduced stepper on it (the kernels it calls from Python), runs the step-test
  rigs' beam model and, once ``engine`` has cached its tree, the compiled engine's adjoint kernels
  (``factorize_exact``, ``condensed_solve_transposed``).

Apart from those leaves both call the real entry points, so the kernels compile with the signatures the code uses
(a leaf whose signature drifts from the engine's only compiles once more, in ``engine``). Nothing else happens
here: every test still runs, and a kernel this leaves out (or a failure here) compiles in the test that needs it.

``check STAMP`` exits 0 when the cache is as a finished warm-up left it (``record STAMP`` wrote STAMP then): the
same Python and numba, every source file under ``src/retarget`` of the same size and modification time (numba's
cache index keys its entries on them), and every cache index file of then still there. scripts/run_tests.sh then
skips the warm-up (with a warm cache it still costs both processes 4–6 s of loading and running kernels).

Usage: ``python scripts/warm_numba.py engine|rest HANDOFF_DIR`` or ``check|record STAMP``.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src" / "retarget"

#: How long a process waits at most for the other's model or compiled tree [s].
WAIT_S = 300.0


def _motors() -> object:
    from retarget.sim.motors import FunctionMotors

    return FunctionMotors(lambda t: [0.3 * np.sin(10 * t) ** 2], lambda t: [3.0 * np.sin(20 * t)])


def _wait_for(path: Path) -> bool:
    """Wait for the other process to write ``path``; False if it failed or :data:`WAIT_S` passed."""
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if any(path.parent.glob("*.failed")) or time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _shipped_model() -> object:
    """The drummer's shipped demo model (a :class:`ReducedSystem`), or None if it does not load."""
    from retarget.errors import InputError
    from retarget.sim.reduced.store import load_artifact, shipped_candidates

    for path in shipped_candidates("drummer"):
        try:
            return load_artifact("drummer", path).reduced
        except (InputError, OSError):
            continue
    return None


def engine(handoff: Path) -> None:
    """The compiled reduced engine's forward run."""
    from retarget.sim.adapters import reduced_engine
    from retarget.sim.motors import FunctionMotors

    rs = _shipped_model()
    if rs is None:
        if not _wait_for(handoff / "model.pickle"):
            return
        rs = pickle.loads((handoff / "model.pickle").read_bytes())
    n = len(rs.motors)
    eng = reduced_engine(rs, 1e-10)
    eng.simulate(eng.reference_state(), FunctionMotors(lambda t: np.zeros(n), lambda t: np.zeros(n)), 2e-3, 3)
    (handoff / "engine.done").touch()


def _engine_leaves() -> None:
    """Compile, without running them, the compiled engine's leaf kernels that ``engine`` reaches late in
    ``run_chunk``'s call tree, with the argument types the engine passes them (C-ordered float64 arrays of the
    packed model, bools, float64 scalars): ``engine`` then loads them from the cache, in its order."""
    import numba

    from retarget.sim.reduced.cubature import cubature_force_directional, cubature_force_value, cubature_tangents
    from retarget.sim.reduced.dynamics import body_force, body_forces
    from retarget.sim.reduced.kernels import block_eval, coupling_curvature
    from retarget.sim.reduced.tensors import InertiaTensors

    def a(ndim: int) -> object:
        return numba.typeof(np.zeros((1,) * ndim))

    f, b, i = numba.float64, numba.boolean, numba.int64
    inertia = numba.typeof(InertiaTensors(0.0, *(np.zeros((1,) * n) for n in (1, 2, 2, 3, 4, 2, 3, 2))))
    body = (a(1),) * 8 + (inertia,)
    for kernel, sig in (
        (body_forces, body),
        (body_force, body),
        (cubature_tangents, (a(1), a(1), a(4), a(2), a(1), f, f, b)),
        (cubature_force_directional, (a(1), a(1), a(4), a(2), a(1), f, f)),
        (cubature_force_value, (a(1), a(4), a(2), a(1), f, f)),
        (block_eval, (i, b, b, b, a(1), a(2), b, a(1), a(2), a(1), f)),
        (coupling_curvature, (a(1), b, b, a(1), a(2), a(1), a(1), a(1), f)),
    ):
        kernel.compile(sig)


def _beam() -> None:
    """The step-test rigs' beam model's time loop (material fits, identification-motion design) and the same beam's
    on the rig's servo loop (the servo-beam plant)."""
    from retarget.fit.beam import build_beam_model
    from retarget.fit.beam_servo import build_servo_beam
    from retarget.fit.rig import load_rig

    rig = load_rig("single_rod")
    t = np.arange(3) * 1e-3
    build_beam_model(rig, 2).simulate(2e11, 0.0, 0.0, t, t, t, t)
    build_servo_beam(rig, None, 2).simulate(t, np.zeros(3), np.zeros(3))


def rest(handoff: Path) -> None:
    """The compiled engine's late leaf kernels, the full-space simulator and training on the rod, the reference
    reduced stepper on its model, the step-test rigs' beam model, then the compiled engine's step sensitivity."""
    from retarget.sim.adapters import reduced_engine
    from retarget.sim.reduced.training import build_from_result
    from retarget.sim.scenarios import build_rod_on_motor
    from retarget.sim.simulate import simulate
    from retarget.sim.system import build_system

    _engine_leaves()
    motors = _motors()
    system = build_system(build_rod_on_motor())
    rs, _, _ = build_from_result(system, simulate(system, motors, 0.02, 2e-3), n_modes=3)
    tmp = handoff / "model.pickle.tmp"
    tmp.write_bytes(pickle.dumps(rs))
    tmp.rename(handoff / "model.pickle")
    ref = reduced_engine(rs, 1e-10, compiled=False)
    s0, cache = ref.reference_state(), {}
    s1 = ref.step(s0, None, 2e-3, motors, 1, cache)
    ref.step(s1, s0, 2e-3, motors, 2, cache)
    _beam()
    if not _wait_for(handoff / "engine.done"):
        return
    eng = reduced_engine(rs, 1e-10)
    c0, cache = eng.reference_state(), {}
    c1 = eng.step(c0, None, 2e-3, motors, 1, cache)
    c2 = eng.step(c1, c0, 2e-3, motors, 2, cache)
    sens = eng.sensitivity(c2, c1, c0, 2e-3, motors)
    n = len(c2.native.s)
    sens.solve_transposed(np.ones(n))  # the adjoint pass
    sens.solve(np.ones(n))  # the tangent-linear pass of Gauss-Newton, one direction and several
    sens.solve(np.ones((n, 2)))


def _state(src: Path) -> tuple[str, list[str]]:
    """(digest of the interpreter, numba and the sizes and times of the sources under ``src``, the cache index files
    present there)."""
    import hashlib
    from importlib.metadata import version

    h = hashlib.sha256(f"{sys.version} numba {version('numba')}\n".encode())
    for f in sorted(src.rglob("*.py")):
        st = f.stat()
        h.update(f"{f.relative_to(src)} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest(), sorted(str(f.relative_to(src)) for f in src.rglob("__pycache__/*.nbi"))


def check(stamp: Path, src: Path = SRC) -> bool:
    """Whether numba's cache under ``src`` is as the warm-up that wrote ``stamp`` left it."""
    try:
        digest, *indexes = stamp.read_text().splitlines()
    except (OSError, ValueError):
        return False
    return digest == _state(src)[0] and bool(indexes) and all((src / f).is_file() for f in indexes)


def record(stamp: Path, src: Path = SRC) -> None:
    """Write ``stamp`` after a warm-up that finished: the state :func:`check` compares with."""
    digest, indexes = _state(src)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text("\n".join([digest, *indexes]) + "\n")


def main(argv: list[str]) -> int:
    if argv[1] == "check":
        return 0 if check(Path(argv[2])) else 1
    if argv[1] == "record":
        record(Path(argv[2]))
        return 0
    # Started with ``&`` by a script, the process inherits SIGINT ignored: Ctrl-C must stop it as it stops pytest.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    part, handoff = argv[1], Path(argv[2])
    handoff.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        {"engine": engine, "rest": rest}[part](handoff)
    except BaseException:
        (handoff / f"{part}.failed").touch()  # the other process stops waiting
        raise
    print(f"warm_numba {part}: {time.perf_counter() - t0:.0f} s (pid {os.getpid()})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
