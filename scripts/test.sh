#!/usr/bin/env bash
# Runs the lint checks and the test suite. Under CI=true the slow soak tests run in
# their bounded form. Arguments go to pytest (e.g. `tests/unit`: unit tests only).
# CDC_TEST_WORKERS (default 2) pytest-xdist workers, each with its own local stack;
# 0 runs everything in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
.venv/bin/ruff check .
.venv/bin/ruff format --check .
workers=${CDC_TEST_WORKERS:-2}
parallel=()
if [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist worksteal); fi
exec .venv/bin/python -m pytest -q -ra --durations=25 --timeout=900 "${parallel[@]}" "$@"
