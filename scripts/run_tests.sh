#!/usr/bin/env bash
# Runs pytest over tests/ on pytest-xdist workers (docs/testing.md); fails on any failure and on zero tests
# collected (pytest exit 5). RETARGET_TEST_WORKERS sets the number of workers (default 2, one per core of the
# project's machines, for `make test-fast`'s CPU-bound tests; `make test` sets 3: its integration tests wait on
# processes and on motions playing in real time; 0 runs in this process, as plain pytest). Extra arguments go to
# pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
workers=${RETARGET_TEST_WORKERS:-2}
parallel=()
if [ "$workers" != 0 ]; then
  # loadfile: a test module runs on one worker, so its module-scoped fixtures (node processes, planned rods) are
  # built once. --no-loadscope-reorder: modules go out in the order tests/conftest.py gives them (the heaviest
  # first), not xdist's (the most tests first, which leaves the long one-test modules to the end).
  # --max-worker-restart 0: a worker that crashes (the watchdog of tests/conftest.py ends a hung test's worker) stops
  # the run; xdist would otherwise run the crashed test again on a new worker, up to 4 x workers times.
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder --max-worker-restart 0)
fi
# Bytecode into the checkout's __pycache__ (as numba's cache), even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE): pytest's workers then reuse their rewritten test modules instead of rewriting every
# assert of every module at each collection (6 s of each worker's 9 s), and every process the tests start reuses
# the compiled modules it imports.
unset PYTHONDONTWRITEBYTECODE
# numba's kernels into its disk cache first (scripts/warm_numba.py): two processes compile disjoint kernel sets in
# parallel, so the workers find them cached instead of each compiling the same ones. Best-effort: a failure there
# only leaves its kernels to the tests that use them. Skipped while the cache is as the last finished warm-up left
# it (the stamp: same sources, same numba). RETARGET_WARM_NUMBA=0 skips it.
stamp=.venv/.retarget-stamps/numba-warm
if [ "${RETARGET_WARM_NUMBA:-1}" != 0 ] && ! .venv/bin/python scripts/warm_numba.py check "$stamp"; then
  handoff=$(mktemp -d)
  for part in engine rest; do
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python scripts/warm_numba.py "$part" \
      "$handoff" &
  done
  warmed=1
  for part in engine rest; do
    wait -n || { warmed=0; echo "run_tests: a numba warm-up process failed; the tests compile what it left" >&2; }
  done
  rm -rf "$handoff"
  if [ "$warmed" = 1 ]; then .venv/bin/python scripts/warm_numba.py record "$stamp"; fi
fi
# --durations: every run's log names its 30 slowest steps (setup, call, teardown), where the suite's time goes.
.venv/bin/python -m pytest tests "${parallel[@]}" --durations=30 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run_tests: pytest collected no tests — treated as a failure" >&2
  exit 1
fi
exit "$rc"
