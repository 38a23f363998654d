#!/usr/bin/env bash
# Runs the lint checks and the test suite. Under CI=true the slow soak tests run in
# their bounded form. Arguments go to pytest (e.g. `-m "not integration"`: unit tests only).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -q -ra --durations=25 --timeout=900 "$@"
