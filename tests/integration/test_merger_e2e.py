"""The merger end to end: real MariaDB, ingest, the broker, Spark local mode, Delta and
PostgreSQL. Snapshots run while a writer changes rows across the whole key range; the
sinks must end equal to the source row for row."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pymysql
import pytest

from merger.state.store import StateStore
from tests.conftest import IS_CI
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import (
    MergerProcess,
    MixedTablesWriter,
    SinkChecker,
    create_mixed_tables,
    write_merger_config,
)

pytestmark = pytest.mark.integration

BIG_ROWS = 200_000


def _conn(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )


def _create(stack, db: str, big_rows: int) -> None:
    conn = _conn(stack)
    try:
        create_mixed_tables(conn, db, big_rows)
    finally:
        conn.close()


def _start(stack, tmp_path, unique_name, db, **merger_extra):
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=3)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path, **merger_extra)
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    return ingest, merger


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_snapshot_under_concurrent_writes_then_truncate_add_column_new_table(stack, tmp_path, unique_name):
    db = f"mg_{unique_name}"
    rows = 60_000 if IS_CI else BIG_ROWS  # under CI still 3 chunks in 2 windows (chunk_size 20,000)
    _create(stack, db, rows)
    # as if an earlier merger had been killed while it wrote its first offsets: Spark
    # refuses a first batch next to a leftover temp file, the merger must clear it
    offsets = tmp_path / "state" / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / ".0.5c1f1a3e-0d7b-4f59-9a2e-3b7f0c4d2e11.tmp").write_text("v1\n{")
    (offsets / "..0.5c1f1a3e-0d7b-4f59-9a2e-3b7f0c4d2e11.tmp.crc").write_bytes(b"crc")
    ingest, merger = _start(stack, tmp_path, unique_name, db)
    # a second merger on the same state_dir is refused with a one-line reason
    lock = tmp_path / "state" / "merger.lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text().strip() == str(merger.proc.pid)):
        assert time.monotonic() < deadline and merger.alive(), merger.log_text()[-3000:]
        time.sleep(0.2)
    second = subprocess.run(
        [sys.executable, "-m", "cdc.cli", "merge", "-c", str(tmp_path / "merger.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode != 0 and "another merger is running" in second.stderr, second.stderr[-2000:]
    assert "Traceback" not in second.stderr, second.stderr[-2000:]
    checker = SinkChecker(stack, tmp_path)
    writer = MixedTablesWriter(stack, db, rows)
    try:
        time.sleep(5)
        writer.start()
        # write across the key range for as long as the snapshot of `num` runs (bounded)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            st = tmp_path / "state" / "status.json"
            if st.exists() and '"num"' not in st.read_text():
                pass
            plan = tmp_path / "state" / "snapshots" / f"{db}.num.json"
            if plan.exists() and '"finished_at"' in plan.read_text():
                break
            if not merger.alive():
                raise AssertionError(merger.log_text()[-4000:])
            time.sleep(1)
        time.sleep(3)
        writer.stop.set()
        writer.join(30)
        assert writer.error is None, writer.error
        assert writer.statements > 100
        for table in ("num", "skey", "comp"):
            checker.wait_equal(db, table, proc=merger)

        conn = _conn(stack, db)
        with conn.cursor() as cur:
            cur.execute("TRUNCATE TABLE comp")
            cur.execute("INSERT INTO comp VALUES (1, 'after', 1)")
            cur.execute("ALTER TABLE skey ADD COLUMN extra INT DEFAULT 7")
            cur.execute("UPDATE skey SET extra = 8 WHERE v < 100")
            cur.execute("CREATE TABLE later (id BIGINT PRIMARY KEY, s TEXT)")
            cur.execute("INSERT INTO later SELECT seq, REPEAT('x', seq % 50) FROM seq_1_to_3000")
            cur.execute("UPDATE later SET s = 'changed' WHERE id % 10 = 0")
        conn.close()
        for table in ("comp", "skey", "later", "num"):
            checker.wait_equal(db, table, proc=merger)
        assert ingest.alive()
        # the checkpoint is written without Hadoop's .crc files (each costs forked processes)
        batches = [p for p in offsets.iterdir() if p.name.isdigit()]
        assert batches, list(offsets.iterdir())
        assert not list((tmp_path / "state" / "checkpoint").rglob("*.crc")), list(offsets.iterdir())
    finally:
        writer.stop.set()
        merger.stop()
        ingest.stop()
        checker.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_merger_kill9_during_snapshot_and_streaming_converges(stack, tmp_path, unique_name):
    db = f"mk_{unique_name}"
    rows = 60_000 if IS_CI else BIG_ROWS
    _create(stack, db, rows)
    # small windows, one emitted per batch: the snapshot of `num` lasts many batches; the
    # Delta tables are compacted every third batch, so kills land in and around compactions
    ingest, merger = _start(
        stack,
        tmp_path,
        unique_name,
        db,
        **{
            "snapshot.chunk_size": rows // 10,
            "snapshot.chunks_per_window": 1,
            "snapshot.emit_rows_per_batch": rows // 10,
            "sinks.delta.compact_every_commits": 3,
        },
    )
    checker = SinkChecker(stack, tmp_path)
    writer = MixedTablesWriter(stack, db, rows, seed=9)
    rnd = random.Random(17)
    store = StateStore(tmp_path / "state")

    def chunks_done() -> int | None:
        """Chunks of `num` done while its snapshot runs; None once it finished."""
        plan = store.load_plan(f"{db}.num") or {}
        return None if plan.get("finished_at") else len(plan.get("done") or ())

    try:
        writer.start()
        kills, done_at_kill = 5, 0
        for i in range(kills):
            if i < 2:
                # the first two in the middle of the snapshot, each after a chunk the merger
                # (re)started finished: the plan persists, so "some chunks done" is already
                # true while a restarted merger's JVM starts
                deadline = time.monotonic() + 180
                while (done := chunks_done()) is None or done <= done_at_kill:
                    assert done is not None, "the snapshot ended before the merger could be killed in it"
                    assert time.monotonic() < deadline, f"no chunk of the snapshot done in 180 s: {done}"
                    time.sleep(0.1)
                done_at_kill = done
                time.sleep(rnd.uniform(0, 1.5))
            else:  # later ones at random moments: start-up, streaming
                time.sleep(rnd.uniform(3, 8))
            merger.kill9()
            merger.start()
        time.sleep(3)
        writer.stop.set()
        writer.join(30)
        assert writer.error is None, writer.error
        for table in ("num", "skey", "comp"):
            checker.wait_equal(db, table, proc=merger, timeout_s=400)
        assert "compacted its small Delta files" in merger.log_text()
    finally:
        writer.stop.set()
        merger.stop()
        ingest.stop()
        checker.close()
