"""The snapshot runner's wait for the stream's first micro-batch (no Spark needed)."""

from __future__ import annotations

import logging
import threading
import time

from cdc.config import MergerConfig
from merger.snapshot import runner as snapshot
from merger.snapshot.runner import SnapshotRunner
from merger.state.store import StateStore


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
    from cdc.tablespec import ColumnSpec, TableSpec
    from merger.batch.processor import BatchProcessor

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
    processor.clock.restored = True
    runner._handle_requests()
    assert rt.phase == "streaming" and rt.error is None


def test_a_waiting_resume_is_kept_across_a_restart(tmp_path):
    """The merger stopped before its first micro-batch: the resume is still asked for when
    the next one starts (it stays in the store until it can be handled)."""
    from merger.batch.processor import BatchProcessor

    cfg = MergerConfig(state_dir=str(tmp_path / "state"))
    store = StateStore(cfg.state_dir)
    first = SnapshotRunner(cfg, None, store, processor=BatchProcessor("p", store, [], None, lambda topic: 1))
    store.request("resume", "db.t")
    first._handle_requests()
    first._handle_requests()
    assert store.tick() == 1  # one micro-batch asked for, not one per loop
    restarted = StateStore(cfg.state_dir)
    assert [(r["action"], r["table"]) for r in restarted.take_requests()] == [("resume", "db.t")]


def test_a_repair_behind_a_running_snapshot_is_kept_across_a_restart(tmp_path):
    """A repair asked for while the table's snapshot runs waits for it, in the store: a
    merger restarted meanwhile still has it, and runs it after the snapshot."""
    from merger.batch.processor import BatchProcessor

    cfg = MergerConfig(state_dir=str(tmp_path / "state"))
    store = StateStore(cfg.state_dir)

    def merger() -> SnapshotRunner:
        runner = SnapshotRunner(cfg, None, store, processor=BatchProcessor("p", store, [], None, lambda topic: 1))
        runner.processor.clock.restored = True
        return runner

    store.save_plan("db.t", {"chunks": [], "done": []})  # a snapshot under way
    runner = merger()
    planned = []
    runner._plan_repair = lambda table, rt, args: planned.append((table, args["id"]))
    store.request("repair", "db.t", keys=["[1]"], id="r1")
    runner._handle_requests()
    assert planned == []
    again = merger()  # the merger restarted
    again._plan_repair = lambda table, rt, args: planned.append((table, args["id"]))
    again._handle_requests()
    assert planned == []  # the snapshot still runs
    store.save_plan("db.t", {"chunks": [], "done": [], "finished_at": 1.0})
    again._handle_requests()
    assert planned == [("db.t", "r1")]
    again._handle_requests()
    assert planned == [("db.t", "r1")]  # taken once


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


def test_small_tables_share_their_watermark_writes_and_keep_the_dblog_order(tmp_path):
    """Issue 23: windows of small tables (each read whole) write their LOW rows in one
    statement and their HIGH rows in one, so ingest makes one Kafka transaction of each,
    not one per table; every table's read comes after the LOW statement and before the
    HIGH one. A table whose definition changed under its read is left out of HIGH and its
    window abandoned; the others go on."""
    from cdc.tablespec import ColumnSpec, TableSpec
    from merger.batch.processor import BatchProcessor
    from merger.dblog import encode_key

    cfg = MergerConfig(state_dir=str(tmp_path / "state"))
    store = StateStore(cfg.state_dir)
    processor = BatchProcessor("p", store, [], None, lambda topic: 1)
    runner = SnapshotRunner(cfg, None, store, processor=processor)
    events: list = []
    runner.watermarks.write_rows = lambda rows, shard=None: events.append(("watermarks", [(t, k) for t, _, k in rows]))

    def read(table, rt, chunks, where, wid, tasks=None):
        events.append(("read", table))
        if table == "db.t2":
            raise RuntimeError("(1054, \"Unknown column 'x' in 'field list'\")")
        return 1

    runner._read_chunks = read
    group = []
    for name in ("t1", "t2", "t3"):
        spec = TableSpec("db", name, (ColumnSpec("id", "int", 1, nullable=False),), ("id",))
        rt = processor.table(f"db.{name}", spec)
        chunk = {"id": f"{name}-0", "lo": encode_key(None), "hi": encode_key(None)}
        group.append((f"db.{name}", rt, [chunk], None, 1))
    staged = runner._shared_windows(group)
    assert staged == ["db.t1", "db.t3"]
    assert events == [
        ("watermarks", [("db.t1", "LOW"), ("db.t2", "LOW"), ("db.t3", "LOW")]),
        ("read", "db.t1"),
        ("read", "db.t2"),
        ("read", "db.t3"),
        ("watermarks", [("db.t1", "HIGH"), ("db.t3", "HIGH")]),
    ]
    windows = {name: list(processor.tables[name].reconciler.windows.values()) for name in ("db.t1", "db.t2", "db.t3")}
    assert [len(w) for w in windows.values()] == [1, 0, 1]  # t2's window abandoned
    assert windows["db.t1"][0].staged and windows["db.t3"][0].staged
    assert "db.t2" in runner._changed  # read again once its schema change arrives


def test_a_window_dropped_by_a_new_plan_under_its_read_is_no_failure(tmp_path):
    """A schema change makes a new plan, which drops the open windows and deletes their
    staged files while a read still writes them: that read then fails (its file is gone).
    The window was given up already, so the failure is no failure of the snapshot; a read
    failing in a window still open is one (the guard retries it)."""
    import pytest

    from cdc.tablespec import ColumnSpec, TableSpec
    from merger.batch.processor import BatchProcessor
    from merger.dblog import encode_key

    cfg = MergerConfig(state_dir=str(tmp_path / "state"))
    store = StateStore(cfg.state_dir)
    processor = BatchProcessor("p", store, [], None, lambda topic: 1)
    runner = SnapshotRunner(cfg, None, store, processor=processor)
    runner.watermarks.write_rows = lambda *args: None
    spec = TableSpec("db", "t", (ColumnSpec("id", "int", 1, nullable=False),), ("id",))
    rt = processor.table("db.t", spec)
    chunk = {"id": "t-0", "lo": encode_key(None), "hi": encode_key(None)}
    gone = "cdc-source-error: FileNotFoundError: [Errno 2] Failed to open local file '.../part-00000.parquet'"

    def read_under_a_new_plan(table, rt, chunks, where, wid, tasks=None):
        runner._drop_open_windows(table)  # the new plan, meanwhile
        raise RuntimeError(gone)

    runner._read_chunks = read_under_a_new_plan
    runner._window("db.t", rt, [chunk], None)  # no exception
    assert not rt.reconciler.windows

    def read_failing(table, rt, chunks, where, wid, tasks=None):
        raise RuntimeError(gone)

    runner._read_chunks = read_failing
    with pytest.raises(RuntimeError, match="FileNotFoundError"):
        runner._window("db.t", rt, [chunk], None)
    assert not rt.reconciler.windows  # abandoned


def test_a_repair_the_merger_cannot_run_is_reported_and_leaves_the_plan_alone(tmp_path):
    """A refused repair (here: a table the merger does not know) is written down beside the
    plans: `cdc repair` reports its reason, and the table's snapshot plan stays as it was."""
    import pytest

    from cdc.cli.repair import wait_for_repair
    from cdc.config import ConfigError
    from merger.batch.processor import BatchProcessor

    cfg = MergerConfig(state_dir=str(tmp_path / "state"))
    store = StateStore(cfg.state_dir)
    finished = {"table": "db.t", "chunks": [], "done": [], "finished_at": 1.0}
    store.save_plan("db.t", finished)
    runner = SnapshotRunner(cfg, None, store, processor=BatchProcessor("p", store, [], None, lambda topic: 1))
    runner.processor.clock.restored = True
    store.request("repair", "db.t", keys=["[1]"], id="r1")
    runner._handle_requests()
    assert store.load_plan("db.t") == finished
    assert store.repair_refusal("db.t", "r2") is None
    with pytest.raises(ConfigError, match="no such table with a key"):
        wait_for_repair(store, "db.t", "r1", timeout=5)


def test_windows_a_restart_restored_keep_their_chunks_unless_never_staged(tmp_path):
    """A window open when the merger stopped comes back with its table. Staged, its HIGH may
    be in the topic: its chunks must not be read again in a new window (a change log would
    get their rows twice), and its HIGH is written again (the process may have died before
    it wrote it: nothing else would close the window on a quiet source). Never staged, its
    read died with the process: its chunks are read again at once."""
    from cdc.tablespec import ColumnSpec, TableSpec
    from merger.batch.processor import BatchProcessor
    from merger.dblog import encode_key

    cfg = MergerConfig(state_dir=str(tmp_path / "state"))
    store = StateStore(cfg.state_dir)
    processor = BatchProcessor("p", store, [], None, lambda topic: 1)
    spec = TableSpec("db", "t", (ColumnSpec("id", "int", 1, nullable=False),), ("id",))
    rt = processor.table("db.t", spec)
    before = time.time() - 60
    rt.reconciler.open_window("staged", ["c1"], before)
    rt.reconciler.mark_staged("staged")
    rt.reconciler.open_window("unstaged", ["c2"], before)
    runner = SnapshotRunner(cfg, None, store, processor=processor)  # the merger restarted
    runner.processor.clock.changes_streaming = lambda: False
    chunks = [{"id": f"c{i}", "lo": encode_key(None), "hi": encode_key(None)} for i in (1, 2, 3)]
    plan = {"chunks": chunks, "done": []}
    store.save_plan("db.t", plan)
    written = []
    runner.watermarks.write_rows = lambda rows, shard=None: written.append((rows, shard))
    _, _, todo, _, _ = runner._next_window("db.t", plan)
    assert [c["id"] for c in todo] == ["c2", "c3"]
    assert set(rt.reconciler.windows) == {"staged"}
    assert written == [([("db.t", "staged", "HIGH")], None)]
    # a window this runner opens and has not staged yet is its own: kept
    rt.reconciler.open_window("mine", ["c2"], time.time())
    runner.pending_windows["db.t"].append("mine")
    _, _, todo, _, _ = runner._next_window("db.t", plan)
    assert [c["id"] for c in todo] == ["c3"]
    assert set(rt.reconciler.windows) == {"staged", "mine"}
    assert len(written) == 1  # once: the restored window is the runner's now


def test_positional_windows_read_low_before_and_high_after_the_selects_and_write_nothing(tmp_path):
    """snapshot.watermarks positions: a window's LOW is read before its SELECT, HIGH after,
    nothing written to the source; HIGH's read-through target (the partitions' ends once
    ingest committed through HIGH) goes to the table, and a tick asks for the batch that
    sees the reader pass it. Small tables share one LOW and one HIGH."""
    from cdc.tablespec import ColumnSpec, TableSpec
    from merger.batch.processor import BatchProcessor
    from merger.dblog import encode_key
    from merger.mysql.positions import BinlogPoint, Committed
    from merger.snapshot.positional import Watermark

    cfg = MergerConfig(state_dir=str(tmp_path / "state"), snapshot={"watermarks": "positions"})
    store = StateStore(cfg.state_dir)
    processor = BatchProcessor("p", store, [], None, lambda topic: 2)
    runner = SnapshotRunner(cfg, None, store, processor=processor)
    assert not runner.watermarks.writes_to_source
    events: list = []
    positions = iter(range(1000, 2000, 100))

    def read(conn):
        seq = next(positions)
        events.append(("position", seq))
        return Watermark(BinlogPoint(1, "bin.000001", seq), seq, 0)

    runner.watermarks.read = read
    committed = []  # ingest's committed position, as the offsets topic would say
    runner.watermarks.committed = lambda: committed[-1] if committed else None
    runner.watermarks.partition_ends = lambda topic, n: events.append(("ends", topic)) or {0: 7, 1: 9}
    runner.watermarks.resolver = "no thread: the test resolves"
    runner.watermarks.connection = lambda: None

    def read_chunks(table, rt, chunks, where, wid, tasks=None):
        events.append(("read", table))
        return 1

    runner._read_chunks = read_chunks
    tick = store.tick()
    spec = TableSpec("db", "t", (ColumnSpec("id", "int", 1, nullable=False),), ("id",))
    rt = processor.table("db.t", spec)
    chunk = {"id": "t-0", "lo": encode_key(1), "hi": encode_key(100)}
    runner._window("db.t", rt, [chunk], None)
    assert events == [("position", 1000), ("read", "db.t"), ("position", 1100)]
    (window,) = rt.reconciler.windows.values()
    assert (window.positions.low, window.positions.high, window.staged) == (1000, 1100, True)
    # the target comes once ingest has committed through HIGH, not before
    assert runner.watermarks.resolve_pending() and not rt.read_through.targets
    committed.append(Committed(1, 0, 1099))
    assert runner.watermarks.resolve_pending() and not rt.read_through.targets
    committed.append(Committed(1, 0, 1100))
    assert not runner.watermarks.resolve_pending()
    assert events[-1] == ("ends", "p.db.t")
    assert [(t.sequence, t.ends) for t in rt.read_through.targets] == [(1099, {0: 7, 1: 9})]
    assert store.tick() > tick

    events.clear()
    group = []
    for name in ("s1", "s2"):
        small = TableSpec("db", name, (ColumnSpec("id", "int", 1, nullable=False),), ("id",))
        whole = {"id": f"{name}-0", "lo": encode_key(None), "hi": encode_key(None)}
        group.append((f"db.{name}", processor.table(f"db.{name}", small), [whole], None, 1))
    assert runner._shared_windows(group) == ["db.s1", "db.s2"]
    committed.append(Committed(1, 0, 1300))
    assert not runner.watermarks.resolve_pending()
    assert events == [
        ("position", 1200),
        ("read", "db.s1"),
        ("read", "db.s2"),
        ("position", 1300),
        ("ends", "p.db.s1"),
        ("ends", "p.db.s2"),
    ]

    # ingest never gets there: the window becomes a problem (read again), not a guess
    runner.watermarks.timeout_s = 0.0
    runner._window("db.t", rt, [chunk], None)
    assert not runner.watermarks.resolve_pending()
    waiting = [w for w in rt.reconciler.windows.values() if w.positions.high == 1500]
    assert len(waiting) == 1 and "did not commit through" in waiting[0].problem
