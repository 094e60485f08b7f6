#!/usr/bin/env bash
# Runs pytest over tests/; fails on any failure and on zero tests collected (pytest exit 5).
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest tests "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run_tests: pytest collected no tests — treated as a failure" >&2
  exit 1
fi
exit "$rc"
