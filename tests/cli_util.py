"""Running `cdc` as a user does (a subprocess), and waiting for what it reports."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def merger_status(config) -> dict:
    """`cdc status --json` of the merger of ``config``."""
    res = run_cli("status", "--json", "-c", str(config))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def wait_for(predicate, what: str, timeout_s: float, proc=None, every_s: float = 1.0):
    """``predicate()``'s first true value, polled until ``timeout_s``; a process that ends
    meanwhile (``proc``) fails the wait with its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise AssertionError(f"process exited while waiting for {what}:\n{proc.log_text()[-4000:]}")
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(
        f"timed out after {timeout_s:.0f}s waiting for {what}"
        + (f"\n{proc.log_text()[-3000:]}" if proc is not None else "")
    )
