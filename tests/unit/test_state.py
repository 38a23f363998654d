"""The merger's state directory: one merger at a time, and a checkpoint that a kill -9 in
the middle of a Spark write cannot wedge."""

from __future__ import annotations

import subprocess
import sys

import pytest

from merger.errors import MergerError
from merger.state import StateStore


def test_a_second_merger_on_the_same_state_dir_is_refused(tmp_path):
    held = StateStore(tmp_path)
    held.lock()
    holder = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys; from merger.state import StateStore; from merger.errors import MergerError\n"
                "try:\n    StateStore(sys.argv[1]).lock()\nexcept MergerError as e:\n    print(e); sys.exit(3)\n"
            ),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert holder.returncode == 3, holder.stderr
    assert "another merger is running" in holder.stdout and f"pid {__import__('os').getpid()}" in holder.stdout


def test_the_lock_goes_with_the_process(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from merger.state import StateStore; StateStore(sys.argv[1]).lock(); import os; os._exit(9)",
            str(tmp_path),
        ],
        timeout=60,
    )
    held = StateStore(tmp_path)
    held.lock()  # the dead holder left the file, not the lock
    with pytest.raises(MergerError):
        StateStore(tmp_path).lock()


def test_interrupted_checkpoint_writes_are_cleared_and_batches_kept(tmp_path):
    store = StateStore(tmp_path)
    offsets, commits = store.checkpoint / "offsets", store.checkpoint / "commits"
    offsets.mkdir(parents=True)
    commits.mkdir()
    keep = [
        offsets / "0",
        offsets / ".0.crc",
        offsets / "1",
        commits / "0",
        commits / ".0.crc",
        store.checkpoint / "metadata",
    ]
    leftovers = [offsets / ".2.0b9c.tmp", offsets / "..2.0b9c.tmp.crc", commits / ".1.77aa.tmp"]
    for p in keep + leftovers:
        p.write_text("x")
    removed = store.clear_interrupted_checkpoint_writes()
    assert sorted(removed) == sorted(f"{p.parent.name}/{p.name}" for p in leftovers)
    assert all(p.exists() for p in keep) and not any(p.exists() for p in leftovers)
    assert StateStore(tmp_path / "fresh").clear_interrupted_checkpoint_writes() == []


def test_a_staged_window_records_the_columns_it_was_read_with(tmp_path):
    store = StateStore(tmp_path)
    store.staging_dir("db.t", "w1").mkdir(parents=True)
    store.mark_staged("db.t", "w1", [("id", "int32"), ("x", "string")])
    assert store.is_staged("db.t", "w1")
    assert store.staged_columns("db.t", "w1") == [("id", "int32"), ("x", "string")]
    # a window staged by an older merger (an empty marker) is emitted as before
    store.staging_dir("db.t", "w0").mkdir(parents=True)
    (store.staging_dir("db.t", "w0") / StateStore.STAGED).touch()
    assert store.is_staged("db.t", "w0") and store.staged_columns("db.t", "w0") is None
    assert store.staged_columns("db.t", "missing") is None


def test_plans_are_read_again_only_when_their_file_changed(tmp_path):
    """Issue 23: plan files are read once and then only when they change, yet a reader
    always sees the latest plan, also one written by another StateStore (another
    process), and never a dict another caller changed."""
    from merger.state import StateStore

    store, other = StateStore(tmp_path), StateStore(tmp_path)
    store.save_plan("db.t", {"table": "db.t", "done": []})
    first = store.load_plan("db.t")
    first["done"].append("changed by a caller")
    assert store.load_plan("db.t") == {"table": "db.t", "done": []}
    for n in range(20):  # rewritten at once, same size: still seen
        other.save_plan("db.t", {"table": "db.t", "done": [f"c{n % 10}"]})
        assert store.load_plan("db.t")["done"] == [f"c{n % 10}"]
        assert store.all_plans()["db.t"]["done"] == [f"c{n % 10}"]
    store.plan_path("db.t").unlink()
    assert store.load_plan("db.t") is None and store.all_plans() == {}
