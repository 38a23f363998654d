"""The snapshot runner's wait for the stream's first micro-batch (no Spark needed)."""

from __future__ import annotations

import logging
import threading
import time

from cdc.config import MergerConfig
from merger.snapshot import runner as snapshot
from merger.snapshot.runner import SnapshotRunner
from merger.state import StateStore


def _runner(tmp_path) -> SnapshotRunner:
    cfg = MergerConfig(state_dir=str(tmp_path / "state"))
    return SnapshotRunner(cfg, None, StateStore(cfg.state_dir), processor=None)


def test_snapshots_wait_for_the_first_micro_batch(tmp_path):
    runner = _runner(tmp_path)
    answers = iter([False, False, False, True])
    asked = []
    runner.stream_ready = lambda: asked.append(1) or next(answers)
    started = time.monotonic()
    runner._wait_for_stream()
    assert len(asked) == 4
    assert 0.25 <= time.monotonic() - started < 25


def test_the_wait_is_bounded(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(snapshot, "STREAM_READY_WAIT_S", 0.5)
    runner = _runner(tmp_path)
    runner.stream_ready = lambda: False
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="merger.snapshot.runner"):
        runner._wait_for_stream()
    assert 0.5 <= time.monotonic() - started < 25
    assert "snapshots start anyway" in caplog.text


def test_stopping_ends_the_wait(tmp_path):
    runner = _runner(tmp_path)
    runner.stream_ready = lambda: False
    threading.Timer(0.3, runner.stop_event.set).start()
    started = time.monotonic()
    runner._wait_for_stream()
    assert time.monotonic() - started < 25  # the wait's own bound is 30 s


def test_an_unknown_stream_state_does_not_hold_snapshots(tmp_path):
    runner = _runner(tmp_path)

    def broken():
        raise RuntimeError("py4j: the query is gone")

    runner.stream_ready = broken
    started = time.monotonic()
    runner._wait_for_stream()
    assert time.monotonic() - started < 25  # not the whole 30 s bound


def test_a_resume_before_the_first_micro_batch_waits_for_the_restored_tables(tmp_path):
    """A restarted merger knows its (paused) tables only once its first micro-batch has
    restored them: a `cdc resume` asked for before must not be lost."""
    from ingest.tablespec import ColumnSpec, TableSpec
    from merger.processor import BatchProcessor

    cfg = MergerConfig(state_dir=str(tmp_path / "state"))
    store = StateStore(cfg.state_dir)
    processor = BatchProcessor("p", store, [], None, lambda topic: 1)
    runner = SnapshotRunner(cfg, None, store, processor=processor)
    store.request("resume", "db.t")
    runner._handle_requests()
    assert store.tick() == 1  # a micro-batch is asked for, to restore the tables
    # that batch restores the paused table
    rt = processor.table("db.t", TableSpec("db", "t", (ColumnSpec("id", "int", 1, nullable=False),), ("id",)))
    rt.phase, rt.error = "paused", "why"
    processor.restored = True
    runner._handle_requests()
    assert rt.phase == "streaming" and rt.error is None


def test_reads_at_once_are_capped_at_the_cores_only_when_the_merger_sizes_local_spark():
    from merger.snapshot.chunk_read import read_parallelism

    def cfg(parallelism, master="local[2]"):
        return MergerConfig(snapshot={"parallelism": parallelism}, spark_master=master)

    local = {}
    assert read_parallelism(cfg(4), cores=2, environ=local) == 2
    assert read_parallelism(cfg(2), cores=2, environ=local) == 2
    assert read_parallelism(cfg(1), cores=8, environ=local) == 1
    assert read_parallelism(cfg(8), cores=8, environ=local) == 8
    assert read_parallelism(cfg(4), cores=1, environ=local) == 1
    # the user chose the task slots, or spark-submit did: parallelism as configured
    assert read_parallelism(cfg(4, "local[8]"), cores=2, environ=local) == 4
    assert read_parallelism(cfg(4), cores=2, environ={"SPARK_SUBMIT": "1"}) == 4
    assert read_parallelism(cfg(4), cores=2, environ={"SPARK_ENV_LOADED": "1"}) == 4
