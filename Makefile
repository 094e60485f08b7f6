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
	@echo "make bench   run the benchmarks in bench/ (JSON lines)"

setup:
	@PYTHON=$(PYTHON) VENV=$(abspath $(VENV)) bash scripts/setup.sh

test: setup
	@bash scripts/run_tests.sh

test-fast: setup
	@bash scripts/run_tests.sh -m "not slow and not integration"

demo: setup
	@$(PY) -m retarget.demo

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf build $(VENV) .pytest_cache
