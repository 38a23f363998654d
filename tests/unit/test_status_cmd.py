"""`cdc status` says when the merger is not running, and why it ended (no servers needed:
the state directory's lock and exit record are what the command reads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from cdc.cli.app import merger_state
from merger.state.store import StateStore

ROOT = Path(__file__).resolve().parents[2]


def test_merger_state_rules():
    assert merger_state(42, None, 1.0) == {
        "running": True,
        "pid": 42,
        "stale": False,
        "summary": "merger running (pid 42)",
    }
    assert merger_state(42, None, 300.0)["stale"] and "stuck" in merger_state(42, None, 300.0)["summary"]
    failed = merger_state(None, {"at": time.time() - 66, "reason": "SinkError: boom"}, 66)
    assert not failed["running"] and "NOT RUNNING: it failed: SinkError: boom 66s ago" in failed["summary"]
    assert "stopped" in merger_state(None, {"at": time.time(), "reason": None}, 5)["summary"]
    assert "killed?" in merger_state(None, None, 5)["summary"]


def _status(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", "status", "-c", str(config), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_status_of_a_dead_merger_says_so(tmp_path):
    state = tmp_path / "state"
    config = tmp_path / "merger.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(state), "sinks": {"delta": {"path": str(tmp_path / "d")}}}))
    store = StateStore(state)
    table = {
        "phase": "snapshotting",
        "error": None,
        "blocked_on_sink": None,
        "snapshot": "running",
        "chunks_done": 1,
        "chunks_total": 9,
        "snapshot_rows": 20000,
        "rows_applied": 5,
        "lag_ms": 120,
        "last_offsets": {},
        "open_windows": 1,
    }
    stopped = time.time() - 66  # the merger's last status, and its file's time
    store.write_status({"updated_at": stopped, "last_batch": 3, "tables": {"db.t": table}})
    os.utime(state / "status.json", (stopped, stopped))

    # a merger holding the lock (another process, as in real life)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; from merger.state.store import StateStore; "
            f"s = StateStore({str(state)!r}); s.lock(); print('locked', flush=True); time.sleep(60)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        res = _status(config)
        assert res.returncode == 0, res.stderr
        st = json.loads(res.stdout)["merger"]
        assert st["running"] and st["pid"] == holder.pid and st["stale"]  # 66 s old: possibly stuck
    finally:
        holder.kill()
        holder.wait(10)

    # killed: the lock is gone with the process, no exit record
    res = _status(config)
    assert res.returncode == 3
    st = json.loads(res.stdout)["merger"]
    assert not st["running"] and "killed?" in st["summary"]

    # failed with a reason
    store.write_exit("SinkError: PostgreSQL text cannot hold NUL characters")
    res = subprocess.run(
        [sys.executable, "-m", "cdc.cli", "status", "-c", str(tmp_path / "merger.yaml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 3
    assert "merger NOT RUNNING: it failed: SinkError: PostgreSQL text cannot hold NUL" in res.stdout, res.stdout
