#!/usr/bin/env bash
# Runs the test suite. Under CI=true the slow soak tests run in their bounded form.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest -q -ra --durations=25 --timeout=900 "$@"
