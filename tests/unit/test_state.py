"""The merger's state directory: one merger at a time, and a checkpoint that a kill -9 in
the middle of a Spark write cannot wedge."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from merger.errors import MergerError
from merger.state.store import StateStore


def test_a_second_merger_on_the_same_state_dir_is_refused(tmp_path):
    held = StateStore(tmp_path)
    held.lock()
    holder = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys; from merger.state.store import StateStore; from merger.errors import MergerError\n"
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
            "import sys, os; from merger.state.store import StateStore; StateStore(sys.argv[1]).lock(); os._exit(9)",
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
    from merger.state.store import StateStore

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


def test_plan_summaries_and_unfinished_plans_follow_every_write(tmp_path):
    """Issue 23: the status and the snapshot runner read the plans from an index that lists
    the directory again only when it changed; a plan written by another StateStore is seen
    both while the directory's time is recent and after it is old (and trusted)."""
    import os

    from merger.state.store import StateStore

    store, other = StateStore(tmp_path), StateStore(tmp_path)
    store.save_plan("db.a", {"table": "db.a", "chunks": ["c0", "c1"], "done": ["c0"]})
    store.save_plan("db.b", {"table": "db.b", "chunks": ["c0"], "done": ["c0"], "finished_at": 1.0})
    assert store.plan_summaries() == {
        "db.a": {"table": "db.a", "snapshot": "running", "chunks_done": 1, "chunks_total": 2},
        "db.b": {"table": "db.b", "snapshot": "finished", "chunks_done": 1, "chunks_total": 1},
    }
    assert list(store.unfinished_plans()) == ["db.a"]
    store.unfinished_plans()["db.a"]["done"].append("changed by a caller")
    assert store.unfinished_plans()["db.a"]["done"] == ["c0"]
    for n in range(3):
        # an old directory time: the listing is trusted until the directory changes
        old = time.time() - 60 - n
        os.utime(store.plans, (old, old))
        assert store.plan_summaries()["db.a"]["chunks_done"] == 1
        assert store.plan_summaries()["db.a"]["chunks_done"] == 1
        other.save_plan("db.a", {"table": "db.a", "chunks": ["c0", "c1"], "done": ["c0", "c1"], "finished_at": 2.0})
        assert store.plan_summaries()["db.a"]["snapshot"] == "finished"
        assert store.unfinished_plans() == {}
        other.save_plan("db.a", {"table": "db.a", "chunks": ["c0", "c1"], "done": ["c0"]})
        assert store.unfinished_plans()["db.a"]["done"] == ["c0"]
    other.plan_path("db.b").unlink()
    assert set(store.plan_summaries()) == {"db.a"}


def test_an_unchanged_status_is_not_written_again_and_still_fresh(tmp_path):
    import json
    import os
    import time

    store = StateStore(tmp_path)
    path = tmp_path / "status.json"
    store.write_status({"updated_at": 100.0, "last_batch": 3, "tables": {"db.t": {"phase": "streaming"}}})
    assert json.loads(path.read_text())["updated_at"] == 100.0
    os.utime(path, (50.0, 50.0))  # an old file time: the status's own time counts
    assert store.read_status()["updated_at"] == 100.0
    before = time.time()
    store.write_status({"updated_at": 101.0, "last_batch": 3, "tables": {"db.t": {"phase": "streaming"}}})
    assert json.loads(path.read_text())["updated_at"] == 100.0  # not written again ...
    assert store.read_status()["updated_at"] >= before - 1  # ... but its file's time says when
    store.write_status({"updated_at": 102.0, "last_batch": 4, "tables": {"db.t": {"phase": "streaming"}}})
    assert store.read_status()["last_batch"] == 4  # a change is written
    path.unlink()
    store.write_status({"updated_at": 103.0, "last_batch": 4, "tables": {"db.t": {"phase": "streaming"}}})
    assert store.read_status()["last_batch"] == 4  # gone: written again
