"""Snapshots without writes (issue 44, ``snapshot.watermarks: positions``), end to end.

The source is a private MariaDB server switched to ``read_only=ON`` after its tables are
made (the shared server cannot be: other tests' mergers write their watermarks to it).
The merger's user has ``SELECT`` on the captured database and nothing else; ingest follows
the same server. Under a steady write load through root (``read_only`` spares it), the
merger snapshots three tables (integer, collated string and composite keys) in small
positional windows, is killed -9 twice in the middle of it, ingest once; then a snapshot
asked for on demand; both sinks must equal a plain SELECT of the source, and nothing may
have been written by the merger (no watermark table exists)."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pymysql
import pytest

from cdc import stack as local_stack
from merger.state.store import StateStore
from tests.conftest import IS_CI
from tests.failover_harness import root, start_server
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import (
    MergerProcess,
    MixedTablesWriter,
    SinkChecker,
    create_mixed_tables,
    write_merger_config,
)

pytestmark = pytest.mark.integration

READ_ONLY_PASSWORD = "ro-pw-1"


@pytest.fixture
def read_only_source(stack, tmp_path, unique_name):
    """A private server with the tables, a SELECT-only user, then read_only=ON; the stack
    as the processes see it (this server, the shared broker and PostgreSQL)."""
    if not stack.mariadb.datadir:
        pytest.skip("needs the local stack's MariaDB binaries")
    server_dir = tmp_path / "source"
    try:
        source = start_server(server_dir, 4400 + abs(hash(unique_name)) % 500)
        via = local_stack.StackInfo(
            state_dir=str(tmp_path / "via"), mariadb=source.mariadb, kafka=stack.kafka, postgres=stack.postgres
        )
        yield via
    finally:
        local_stack.down(server_dir, components=("mariadb",))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_read_only_user_on_a_read_only_server_snapshots_under_writes_and_kill9(
    read_only_source, tmp_path, unique_name
):
    """Over 60 s: three merger starts (two after kill -9) and an ingest restart, each a
    scenario step the exactness claim is about."""
    via = read_only_source
    db = f"ro_{unique_name}"
    rows = 30_000 if IS_CI else 120_000
    user = f"ro_{unique_name}"[:32]
    conn = root(via)
    with conn.cursor() as cur:
        create_mixed_tables(conn, db, rows)
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, READ_ONLY_PASSWORD))
        cur.execute(f"GRANT SELECT ON `{db}`.* TO %s@'%%'", (user,))
        cur.execute("SET GLOBAL read_only = ON")
    secret = tmp_path / "ro_password"
    secret.write_text(READ_ONLY_PASSWORD)
    secret.chmod(0o600)
    ro = pymysql.connect(
        ssl_disabled=True, host=via.mariadb.host, port=via.mariadb.port, user=user, password=READ_ONLY_PASSWORD
    )
    with ro.cursor() as cur, pytest.raises(pymysql.err.OperationalError):
        cur.execute(f"INSERT INTO `{db}`.comp VALUES (1000, 'x', 1)")  # the user can write nothing
    ro.close()

    icfg = write_config(via, tmp_path / "ingest.yaml", unique_name, [db], topic_partitions=3)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    mcfg = write_merger_config(
        via,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        **{
            "mysql.user": user,
            "mysql.password_file": str(secret),
            "snapshot.watermarks": "positions",
            "snapshot.chunk_size": rows // 8,
            "snapshot.chunks_per_window": 1,
            "snapshot.emit_rows_per_batch": rows // 8,
        },
    )
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(via, tmp_path)
    writes = MixedTablesWriter(via, db, rows, seed=44)
    store = StateStore(tmp_path / "state")
    rnd = random.Random(5)

    def chunks_done() -> int | None:
        plan = store.load_plan(f"{db}.num") or {}
        return None if plan.get("finished_at") else len(plan.get("done") or ())

    def after_a_chunk(done_before: int) -> int:
        deadline = time.monotonic() + 240
        while (done := chunks_done()) is None or done <= done_before:
            assert done is not None, "the snapshot of num ended before the kill"
            assert time.monotonic() < deadline, f"no chunk of num done in 240 s:\n{merger.log_text()[-3000:]}"
            assert merger.alive(), merger.log_text()[-3000:]
            time.sleep(0.1)
        time.sleep(rnd.uniform(0, 1.0))
        return done

    def finished(table: str, after: float = 0.0) -> None:
        deadline = time.monotonic() + 300
        while (store.load_plan(f"{db}.{table}") or {}).get("finished_at", 0) <= after:
            assert time.monotonic() < deadline, f"the snapshot of {table} did not finish:\n{merger.log_text()[-3000:]}"
            assert merger.alive(), merger.log_text()[-3000:]
            time.sleep(0.2)

    try:
        writes.start()
        done = after_a_chunk(0)
        merger.kill9()
        merger.start()
        done = after_a_chunk(done)
        ingest.kill9()
        ingest.start()
        done = after_a_chunk(done)
        merger.kill9()
        merger.start()
        for table in ("num", "skey", "comp"):
            finished(table)
        # a snapshot asked for on demand, under the same writes
        asked = time.time()
        subprocess.run(
            [sys.executable, "-m", "cdc.cli", "snapshot", f"{db}.comp", "-c", str(mcfg)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        finished("comp", after=asked)
        time.sleep(2)
        writes.stop.set()
        writes.join(30)
        assert writes.error is None, writes.error
        for table in ("num", "skey", "comp"):
            checker.wait_equal(db, table, proc=merger, timeout_s=300)
        log = merger.log_text()
        assert "LOW at sequence" in log and "HIGH at sequence" in log  # the windows were positional ones
        with conn.cursor() as cur:  # and nothing was written: no watermark table anywhere
            cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'cdc_watermarks'")
            assert cur.fetchone()[0] == 0
    finally:
        writes.stop.set()
        merger.stop()
        ingest.stop()
        checker.close()
        conn.close()
