"""Benchmarks that print their figures (today's in bench/RESULTS.md, every record in bench/HISTORY.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit_label() -> str:
    """The checked-out commit, for a recorded figure ("(modified)" with uncommitted changes)."""
    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return (res.stdout.strip() or "unknown") + (" (modified)" if dirty.stdout.strip() else "")


def append_results(lines: list[str]) -> None:
    """Appends a recorded figure's markdown lines to bench/HISTORY.md (the table of today's
    figures in bench/RESULTS.md is updated by hand from it)."""
    with open(ROOT / "bench" / "HISTORY.md", "a") as f:
        f.write("\n" + "\n".join(lines) + "\n")


def publish(lines: list[str], record: bool) -> None:
    """Prints a bench's markdown figures; with ``record``, appends them to bench/HISTORY.md."""
    print("\n".join(lines))
    if record:
        append_results(lines)
