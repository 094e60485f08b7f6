# retarget — the two commands: `make demo` and `make test` (both set up everything first).
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export NUMBA_NUM_THREADS ?= 1

.PHONY: setup test test-fast demo bench clean help

help:
	@echo "make setup   create $(VENV): ROS 2 Kilted wheels, dependencies, interface packages, retarget (editable)"
	@echo "make demo    set up, then run the main job (see README)"
	@echo "make test    set up, then run the whole test suite (unit + integration)"
	@echo "make bench   run the benchmarks in bench/ that need no arguments (JSON lines)"

setup:
	@PYTHON=$(PYTHON) VENV=$(abspath $(VENV)) bash scripts/setup.sh

test: setup
	@RETARGET_TEST_WORKERS=$${RETARGET_TEST_WORKERS:-3} bash scripts/run_tests.sh

test-fast: setup
	@bash scripts/run_tests.sh -m "not slow and not integration"

demo: setup
	@$(PY) -m retarget.cli demo

# The benchmarks that run without arguments (the others measure a named robot and motion: see their --help and
# bench/results/README.md for the commands behind each result). Thread settings as the benchmarks expect on 2 cores.
BENCH_DEFAULT := bench/bench_fem.py bench/bench_sim.py bench/bench_reduced.py bench/bench_acceptance_reduced.py

bench: setup
	@for b in $(BENCH_DEFAULT); do echo "== $$b"; OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 $(PY) $$b || exit 1; done
	@echo "(with arguments, see --help: $(filter-out $(BENCH_DEFAULT),$(wildcard bench/bench_*.py)))"

clean:
	rm -rf build $(VENV) .pytest_cache
