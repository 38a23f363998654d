"""Benchmarks that print their figures (results in bench/RESULTS.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit_label() -> str:
    """The checked-out commit, for a recorded figure ("(modified)" with uncommitted changes)."""
    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return (res.stdout.strip() or "unknown") + (" (modified)" if dirty.stdout.strip() else "")
