"""Delta tables on an object store: the stack's S3 server (moto, a real server process; no
in-process mock), reached by delta-rs over HTTP with conditional-put commits.

* the Delta sink's own tests (tests/unit/test_sinks.py: types, deletes, tombstones,
  compaction, a crash between the table and the tombstone commit, replays, two writers)
  run again here with their tables at ``s3://cdc/<prefix>`` (the ``delta_store`` fixture);
* a merger whose Delta path is ``s3://`` (Spark local mode, ingest and the stack's MariaDB
  and broker) makes tables that equal the source row for row, read back with deltalake in
  the test; killed (-9) after a Delta commit and before its state is saved, it converges
  after a restart; ``cdc verify`` reads the same tables;
* an unreachable store, or a bucket that does not exist, stops the merger at start with one
  line;
* a store that hangs mid-run (moto frozen for 15 s under a workload) blocks the table on the
  Delta sink, visibly in ``cdc status``, and the table catches up equal to the source.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc import stack as local_stack
from tests.delta_stores import S3DeltaStore, s3_options
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import ROOT, MergerProcess, write_merger_config
from tests.source_db import root_connection
from tests.unit.test_sinks import (  # noqa: F401  (the same tests, on the object store)
    STEP,
    delta_sink,
    run_model,
    test_delta_a_second_merger_takes_over_and_the_first_is_fenced,
    test_delta_a_takeover_between_the_fence_check_and_the_commit_fails_that_commit,
    test_delta_an_older_merger_writing_after_the_takeover_stops_the_newer,
    test_delta_crash_between_table_and_tombstones,
    test_delta_deletes_and_updates_of_extreme_keys,
    test_delta_first_write_into_an_empty_table_is_an_append,
    test_delta_first_writes_of_two_mergers_racing_leave_no_row_twice,
    test_delta_layout_and_log,
    test_delta_mergers_claiming_at_once_get_distinct_epochs,
    test_delta_newer_write_over_unfinished_tombstones_pauses_the_table,
    test_delta_small_files_are_compacted_every_n_batches,
    test_delta_string_key_deletes_over_several_batches,
    test_delta_tables_are_written_in_files_of_the_compaction_target,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def delta_store(s3_store):
    return S3DeltaStore(s3_store)


# the model tests of tests/unit/test_sinks.py, fewer examples: each step is a few HTTP requests
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=10))
def test_delta_on_s3_matches_model(delta_store, steps):
    run_model(delta_store.sink(), steps)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=10))
def test_delta_on_s3_compacted_every_other_batch_matches_model(delta_store, steps):
    run_model(delta_store.sink(compact_every_commits=2), steps)


def test_commits_are_conditional_puts_never_an_unsafe_rename(delta_store):
    options = delta_store.options
    assert options["conditional_put"] == "etag" and options["AWS_S3_ALLOW_UNSAFE_RENAME"] == "false"
    assert delta_store.s3.secret_access_key not in repr(options)


# ----------------------------------------------------------------------------- the merger


def _run(stack, db, *statements):
    conn = root_connection(stack, db)
    try:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(s)
    finally:
        conn.close()


COLUMNS = ["id", "name", "price", "made", "note"]


def _source(stack, db) -> list[tuple]:
    conn = root_connection(stack, db)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(COLUMNS)} FROM items ORDER BY id")
            return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


def _delta_rows(s3, base: str, db: str) -> list[tuple] | None:
    """The sink table read with deltalake alone (not the merger's reader)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(f"{base}/{db}/items", storage_options=s3_options(s3)).to_pyarrow_table(columns=COLUMNS)
    except TableNotFoundError:
        return None
    return sorted(tuple(r[c] for c in COLUMNS) for r in table.to_pylist())


def _object_store_config(stack, base: str) -> dict:
    s3 = stack.s3  # set by the s3_store fixture
    return {
        "sinks.delta.path": base,
        "sinks.delta.object_store": {
            "endpoint": s3.endpoint,
            "region": s3.region,
            "addressing": "path",
            "allow_http": True,
            "credentials_file": str(local_stack.secret_file(stack, "s3_credentials")),
        },
    }


def _wait_equal(stack, s3, base, db, merger, timeout_s=300, expected=None):
    deadline = time.monotonic() + timeout_s
    got = None
    while time.monotonic() < deadline:
        if not merger.alive():
            raise AssertionError(f"merger exited:\n{merger.log_text()[-4000:]}")
        want = expected if expected is not None else _source(stack, db)
        got = _delta_rows(s3, base, db)
        if got == want:
            return
        time.sleep(2)
    differ = sorted(set(got or []) ^ set(want))[:6]
    raise AssertionError(
        f"Delta on S3 != source within {timeout_s}s ({len(got or [])} rows, source {len(want)}); rows in one of "
        f"them only: {differ}\n{merger.log_text()[-3000:]}"
    )


def _items(stack, db: str, rows_select: str) -> None:
    """A new database ``db`` with the table ``items``, filled by ``rows_select``."""
    _run(stack, None, f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
    _run(
        stack,
        db,
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2), made DATETIME(3), note TEXT)",
        f"INSERT INTO items {rows_select}",
    )


@pytest.mark.timeout(1200)
def test_merger_writes_delta_tables_to_s3_equal_to_the_source(stack, s3_store, tmp_path, unique_name, monkeypatch):
    db = f"s3_{unique_name}"
    base = f"s3://{s3_store.bucket}/{unique_name}"
    _items(
        stack,
        db,
        "SELECT seq, CONCAT('n', seq), seq * 1.25, '2025-01-02 03:04:05.678', "
        "IF(seq % 3 = 0, NULL, REPEAT('x', seq)) FROM seq_1_to_200",
    )
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    mcfg = write_merger_config(
        stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path, **_object_store_config(stack, base)
    )
    # killed after its third Delta commit, before the batch's state is saved
    monkeypatch.setenv("CDC_CRASH_AT", "after_write:DeltaSink@3")
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    try:
        merger.proc.wait(timeout=600)
        assert merger.proc.returncode == -9, merger.log_text()[-3000:]
        monkeypatch.delenv("CDC_CRASH_AT")
        merger.start()
        _wait_equal(stack, s3_store, base, db, merger)
        _run(
            stack,
            db,
            "INSERT INTO items VALUES (1001, 'new', 9.99, '2026-11-27 01:02:03.004', 'streamed')",
            "UPDATE items SET name = 'changed', price = price + 1 WHERE id <= 20",
            "DELETE FROM items WHERE id BETWEEN 50 AND 59",
            "UPDATE items SET id = 2000 WHERE id = 100",
            "UPDATE items SET note = NULL WHERE id = 1",
        )
        _wait_equal(stack, s3_store, base, db, merger)
        rows = _delta_rows(s3_store, base, db)
        assert len(rows) == 191 and (2000, "n100") == rows[-1][:2] and rows[0][4] is None
        res = subprocess.run(
            [sys.executable, "-m", "cdc.cli", "verify", "-c", str(mcfg), "--sink", "delta"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        merger.stop()
        ingest.stop()


@pytest.mark.parametrize(
    "problem, expected",
    [("unreachable", "is unreachable: "), ("no bucket", "NoSuchBucket")],
)
def test_a_bad_object_store_stops_the_merger_at_start_with_one_line(
    stack, s3_store, tmp_path, unique_name, problem, expected
):
    extra = _object_store_config(stack, f"s3://{s3_store.bucket}/{unique_name}")
    if problem == "unreachable":
        extra["sinks.delta.object_store"]["endpoint"] = f"http://127.0.0.1:{local_stack.free_port()}"
    else:
        extra["sinks.delta.path"] = f"s3://nobucket/{unique_name}"
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, ["nothing"], tmp_path, **extra)
    res = subprocess.run(
        [sys.executable, "-m", "cdc.cli", "merge", "-c", str(mcfg)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    errors = [line for line in res.stderr.splitlines() if "ERROR" in line or line.startswith("Error")]
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and expected in res.stderr, res.stderr[-3000:]
    assert s3_store.secret_access_key not in res.stderr + res.stdout
    assert len(errors) <= 1, errors


def _writer_epoch(s3, base: str, db: str) -> int | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from merger.sinks.delta.writers import WRITER_APP

    try:
        return DeltaTable(f"{base}/{db}/items", storage_options=s3_options(s3)).transaction_version(WRITER_APP)
    except TableNotFoundError:
        return None


@pytest.mark.timeout(1500)
def test_a_second_merger_with_its_own_state_dir_takes_the_bucket_over_and_the_first_stops(
    stack, s3_store, tmp_path, unique_name
):
    """Two merger processes, two state directories, one bucket: the state_dir lock cannot
    see each other, the writer epochs in the Delta tables do. The second takes over (epoch
    2), the first stops at its next write with one line, and the table still equals the
    source: no write of the first after the second's."""
    db = f"s3w_{unique_name}"
    base = f"s3://{s3_store.bucket}/{unique_name}"
    _items(stack, db, "SELECT seq, CONCAT('n', seq), seq, '2025-01-02 03:04:05', NULL FROM seq_1_to_50")
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    extra = _object_store_config(stack, base)
    first = MergerProcess(
        write_merger_config(stack, tmp_path / "a.yaml", unique_name, [db], tmp_path / "a", **extra),
        tmp_path / "a.log",
    ).start()
    second = MergerProcess(
        write_merger_config(stack, tmp_path / "b.yaml", unique_name, [db], tmp_path / "b", **extra),
        tmp_path / "b.log",
    )
    try:
        _wait_equal(stack, s3_store, base, db, first)
        assert _writer_epoch(s3_store, base, db) == 1
        second.start()
        deadline = time.monotonic() + 400
        while _writer_epoch(s3_store, base, db) != 2:  # its snapshot of the table was written
            assert time.monotonic() < deadline, second.log_text()[-3000:]
            assert second.alive(), second.log_text()[-3000:]
            time.sleep(2)
        _run(stack, db, "UPDATE items SET name = 'after takeover' WHERE id <= 5", "DELETE FROM items WHERE id = 50")
        assert first.wait_exit(300), first.log_text()[-3000:]
        assert "a newer merger (writer epoch 2, this one 1) took over" in first.log_text()
        assert "Traceback" not in first.log_text()[-2000:]
        _wait_equal(stack, s3_store, base, db, second)
        assert _writer_epoch(s3_store, base, db) == 2
    finally:
        second.stop()
        first.stop()
        ingest.stop()


# ------------------------------------------------------------------ the store hangs mid-run

FREEZE_S = 15  # the block shows after one or two request timeouts
REQUEST_TIMEOUT_S = 5  # object_store.request_timeout_s: a hung request fails after this


class _ItemsWorkload(threading.Thread):
    """Inserts, updates, deletes and key changes on ``items``, ~100 statements a second,
    until stopped (autocommit; the check compares with whatever the source then holds)."""

    def __init__(self, stack, db: str, rows: int):
        super().__init__(daemon=True)
        self.stack, self.db, self.rows = stack, db, rows
        self.rnd = random.Random(25)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.statements = 0

    def _next(self) -> tuple[str, tuple]:
        k = self.rnd.randint(1, self.rows + 500)
        op = self.rnd.random()
        if op < 0.35:
            return "INSERT IGNORE INTO items VALUES (%s, 'ins', %s, NOW(3), REPEAT('w', %s))", (k, k, k % 90)
        if op < 0.7:
            return "UPDATE items SET price = price + 1, name = %s WHERE id = %s", (f"u{k}", k)
        if op < 0.9:
            return "DELETE FROM items WHERE id = %s", (k,)
        return "UPDATE items SET id = %s WHERE id = %s", (k + 100_000, k)

    def run(self):
        try:
            conn = root_connection(self.stack, self.db)
            with conn, conn.cursor() as cur:
                while not self.stop.wait(0.01):
                    try:
                        cur.execute(*self._next())
                    except pymysql.err.IntegrityError:  # a key change onto a key that exists
                        pass
                    self.statements += 1
        except BaseException as exc:  # reported by the test
            self.error = exc


@contextlib.contextmanager
def _frozen(pid: int):
    """The process stopped (SIGSTOP) for the block, continued (SIGCONT) after it, also on
    failure; yields when it was stopped."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield time.monotonic()
    finally:
        os.kill(pid, signal.SIGCONT)


def _status(mcfg) -> dict:
    """What an operator sees: `cdc status --json` (reads the state directory only)."""
    res = subprocess.run(
        [sys.executable, "-m", "cdc.cli", "status", "--json", "-c", str(mcfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def _blocked(mcfg) -> dict[str, str]:
    return {n: t["blocked_on_sink"] for n, t in _status(mcfg)["tables"].items() if t.get("blocked_on_sink")}


def _wait(predicate, timeout_s: float, what: str, merger: MergerProcess):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not merger.alive():
            raise AssertionError(f"merger exited while waiting for {what}:\n{merger.log_text()[-4000:]}")
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{merger.log_text()[-3000:]}")


@pytest.mark.timeout(300)
def test_a_store_that_hangs_blocks_the_sink_then_catches_up(stack, s3_store, tmp_path, unique_name):
    """The S3 server stops answering for 15 s while a workload writes to MariaDB, then
    answers again: the merger keeps running, `cdc status` shows the table blocked on the
    Delta sink (each hung request fails after ``object_store.request_timeout_s``, then the
    write is retried with a growing delay, a WARNING line each), and once the store is back
    the Delta table catches up and equals the source row for row (read with deltalake, not
    the merger's reader): nothing lost, nothing doubled.

    The server is frozen (SIGSTOP, then SIGCONT), not killed: moto keeps its objects in
    memory only, so a killed and restarted moto would be a new, empty store (no bucket, no
    tables), not the same store back. A frozen server is "a store that hangs": connections
    are accepted by the kernel and no reply comes, which is also what a store behind a
    dead network path looks like, and requests that were in flight are carried out late,
    after the client gave up on them (a commit the merger believes failed may land: the
    retry must see it and not apply the batch twice)."""
    db = f"s3h_{unique_name}"
    base = f"s3://{s3_store.bucket}/{unique_name}"
    rows = 2000
    _items(stack, db, f"SELECT seq, CONCAT('n', seq), seq, '2025-01-02 03:04:05', NULL FROM seq_1_to_{rows}")
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    extra = _object_store_config(stack, base)
    extra["sinks.delta.object_store"]["request_timeout_s"] = REQUEST_TIMEOUT_S
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path, **extra)
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    work = _ItemsWorkload(stack, db, rows)
    moto = local_stack.running_pid(Path(stack.state_dir), "s3", local_stack.s3_marker(stack))
    assert moto, "the S3 server is not running"
    try:
        _wait_equal(stack, s3_store, base, db, merger, timeout_s=150)  # the snapshot is in
        work.start()
        time.sleep(3)  # changes stream into the table
        with _frozen(moto) as frozen_at:
            blocked = _wait(lambda: _blocked(mcfg), 30, "the table blocked on the sink in cdc status", merger)
            blocked_after = time.monotonic() - frozen_at
            time.sleep(max(3.0, FREEZE_S - (time.monotonic() - frozen_at)))  # retried while blocked
            assert merger.alive(), merger.log_text()[-3000:]
        thawed_at = time.monotonic()
        assert list(blocked) == [f"{db}.items"] and blocked[f"{db}.items"].startswith("DeltaSink: "), blocked
        assert "is unreachable" in blocked[f"{db}.items"], blocked
        _wait(lambda: not _blocked(mcfg), 60, "the table to be unblocked", merger)
        unblocked_after = time.monotonic() - thawed_at
        time.sleep(2)
        work.stop.set()
        work.join(30)
        assert work.error is None, work.error
        _wait_equal(stack, s3_store, base, db, merger, timeout_s=90)
        log = merger.log_text()
        assert f"table {db}.items blocked on sink DeltaSink: Delta storage for s3://" in log, log[-3000:]
        assert "sink DeltaSink reachable again" in log and "Traceback" not in log, log[-3000:]
        print(
            f"store frozen {FREEZE_S}s under {work.statements} statements: blocked in status after "
            f"{blocked_after:.1f}s, unblocked {unblocked_after:.1f}s after the thaw; while frozen: {blocked}"
        )
    finally:
        work.stop.set()
        merger.stop()
        ingest.stop()
