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


def rss_kb(pid: int | None) -> int:
    """A process's resident memory in KB (0 when it is gone or None)."""
    if not pid:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def append_results(lines: list[str]) -> None:
    """Appends a recorded figure's markdown lines to bench/RESULTS.md."""
    with open(ROOT / "bench" / "RESULTS.md", "a") as f:
        f.write("\n" + "\n".join(lines) + "\n")
