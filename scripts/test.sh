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
# a run writes up to ~8 GB (the servers' data under .cdc, the tests' directories under /tmp,
# measured 2026-12-07): say so before it fails half-way with "No space left on device"
for dir in . "${TMPDIR:-/tmp}"; do
  free_gb=$(df -Pk "$dir" | awk 'NR==2 {print int($4 / 1048576)}')
  if [ "${free_gb:-0}" -lt 10 ]; then
    echo "warning: only ${free_gb} GB free where the suite writes ($(cd "$dir" && pwd)); it needs up to ~8 GB" >&2
  fi
done
workers=${CDC_TEST_WORKERS:-2}
parallel=()
if [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist worksteal); fi
exec .venv/bin/python -m pytest -q -ra --durations=25 --timeout=900 "${parallel[@]}" "$@"
