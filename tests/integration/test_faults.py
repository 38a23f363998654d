"""Faults, each against the real servers (MariaDB, the broker, PostgreSQL, Spark local mode):

* the source database stopped and restarted in the middle of a snapshot and again while
  streaming: ingest and the merger wait for it with backoff, say so (`cdc status`, logs,
  ingest's metrics), and resume without losing or duplicating a change;
* the PostgreSQL sink stopped: the merger retries, `cdc status --json` shows the tables
  blocked on the sink, and the sinks catch up afterwards;
* repeated kill -9 of ingest and of the merger during a mixed workload while snapshots
  run (bounded under CI=true, a soak of CDC_SOAK_MINUTES otherwise).

Every test ends the same way a user checks: every sink table equals its source, row for
row (``_assert_sinks_equal``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pymysql
import pytest

from cdc import stack as local_stack
from merger.state.store import StateStore
from tests.conftest import IS_CI, ROOT
from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, SinkChecker, create_mixed_tables, write_merger_config
from tests.support import readback

pytestmark = pytest.mark.integration

TABLES = ("num", "skey", "comp")
SOAK_MINUTES = float(os.environ.get("CDC_SOAK_MINUTES") or 0)


# ---------------------------------------------------------------------- helpers


def _conn(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
        connect_timeout=5,
        read_timeout=30,
        write_timeout=30,
    )


def _create(stack, db: str, big_rows: int) -> None:
    conn = _conn(stack)
    try:
        create_mixed_tables(conn, db, big_rows)
    finally:
        conn.close()


class Workload(threading.Thread):
    """Inserts, updates, deletes and primary-key changes across the whole key range of
    the three tables, a few hundred statements per second. Survives the source going
    away: it reconnects and carries on (the check at the end compares with whatever
    the source holds, so a statement lost with the connection does not matter)."""

    def __init__(self, stack, db: str, big_rows: int, seed: int):
        super().__init__(daemon=True)
        self.stack, self.db, self.big = stack, db, big_rows
        self.rnd = random.Random(seed)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.statements = 0
        self.reconnects = 0

    def run(self):
        conn = None
        try:
            while not self.stop.is_set():
                try:
                    if conn is None:
                        conn = _conn(self.stack, self.db)
                    with conn.cursor() as cur:
                        self._statement(cur)
                    self.statements += 1
                    time.sleep(0.004)
                except (pymysql.err.OperationalError, pymysql.err.InterfaceError):
                    # the source is down or restarting: wait, then reconnect
                    if conn is not None:
                        try:
                            conn.close()
                        except Exception:
                            pass
                    conn = None
                    self.reconnects += 1
                    self.stop.wait(1.0)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            if conn is not None:
                conn.close()

    def _statement(self, cur) -> None:
        r = self.rnd
        k = r.randint(1, self.big + 1000)
        op = r.random()
        if op < 0.3:
            cur.execute("INSERT IGNORE INTO num VALUES (%s, 'ins', %s, 1.5, NOW(3))", (k, k))
        elif op < 0.6:
            cur.execute("UPDATE num SET v = %s, n = n + 1 WHERE id BETWEEN %s AND %s", (f"u{k}", k, k + 5))
        elif op < 0.75:
            cur.execute("DELETE FROM num WHERE id BETWEEN %s AND %s", (k, k + 3))
        elif op < 0.85:
            try:
                cur.execute("UPDATE num SET id = %s WHERE id = %s", (self.big + 5000 + k, k))
            except pymysql.err.IntegrityError:
                pass
        elif op < 0.93:
            code = f"{chr(65 + k % 26)}é-{k % 25000}"
            cur.execute("INSERT INTO skey VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = v + 1", (code, k))
        else:
            cur.execute("UPDATE comp SET c = c + 1 WHERE a = %s", (k % 100,))


class Pipeline:
    """ingest and the merger as real processes for one test database."""

    def __init__(
        self,
        stack,
        tmp_path: Path,
        prefix: str,
        db: str,
        ingest_extra: dict | None = None,
        merger_extra: dict | None = None,
    ):
        self.stack, self.tmp, self.db = stack, tmp_path, db
        icfg = write_config(
            stack, tmp_path / "ingest.yaml", prefix, [db, "cdc"], topic_partitions=3, **(ingest_extra or {})
        )
        self.merger_config = write_merger_config(
            stack, tmp_path / "merger.yaml", prefix, [db], tmp_path, **(merger_extra or {})
        )
        self.ingest = IngestProcess(icfg, tmp_path / "ingest.log")
        self.merger = MergerProcess(self.merger_config, tmp_path / "merger.log")
        self.store = StateStore(tmp_path / "state")

    def start(self) -> "Pipeline":
        self.ingest.start()
        self.merger.start()
        return self

    def stop(self) -> None:
        self.merger.stop()
        self.ingest.stop()

    def check_alive(self) -> None:
        for name, proc in (("ingest", self.ingest), ("merger", self.merger)):
            if not proc.alive():
                raise AssertionError(f"{name} exited:\n{proc.log_text()[-4000:]}")

    def status(self) -> dict:
        """What an operator sees: `cdc status --json`."""
        res = subprocess.run(
            [sys.executable, "-m", "cdc.cli", "status", "--json", "-c", str(self.merger_config)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        return json.loads(res.stdout)

    def plan(self, table: str) -> dict | None:
        return self.store.load_plan(f"{self.db}.{table}")

    def snapshot_finished(self, table: str) -> bool:
        plan = self.plan(table)
        return bool(plan and plan.get("finished_at"))


def _wait_for(predicate, timeout_s: float, what: str, pipeline: Pipeline | None = None, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pipeline is not None:
            pipeline.check_alive()
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(
        f"timed out after {timeout_s:.0f}s waiting for {what}"
        + (f"\nmerger log:\n{pipeline.merger.log_text()[-3000:]}" if pipeline else "")
    )


def _assert_sinks_equal(stack, tmp_path: Path, db: str, tables, pipeline: Pipeline, timeout_s: float) -> float:
    """Every Delta and PostgreSQL table equals its source row for row (waits for the merger
    to catch up first); returns how long that took."""
    started = time.monotonic()
    checker = SinkChecker(stack, tmp_path)
    try:
        for table in tables:
            remaining = max(30.0, timeout_s - (time.monotonic() - started))
            checker.wait_equal(db, table, timeout_s=remaining, proc=pipeline.merger)
    finally:
        checker.close()
    return time.monotonic() - started


def _ingest_metric(port: int, name: str, labels: str = "") -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + labels + " "):
            return float(line.split()[-1])
    return None


def _stop(stack, name: str) -> float:
    started = time.monotonic()
    assert local_stack.stop(stack, name), f"{name} was not running"
    return time.monotonic() - started


def _start(stack, name: str) -> None:
    info = local_stack.up(Path(stack.state_dir), (name,))
    port = {"mariadb": info.mariadb.port, "postgres": info.postgres.port}[name]
    wanted = {"mariadb": stack.mariadb.port, "postgres": stack.postgres.port}[name]
    assert port == wanted, f"{name} came back on port {port}, not {wanted}"


# ---------------------------------------------------------------------- the source goes away


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_source_restart_during_snapshot_and_streaming(stack, tmp_path, unique_name):
    """MariaDB is stopped (a clean shutdown) for ~10 s while `num` is being snapshotted,
    and again for ~5 s while only streaming runs (the harness's backoff is at most 4 s, so
    both outages see several retries). Ingest and the merger keep running,
    report the outage, retry with backoff and converge: sinks equal the source."""
    db = f"fs_{unique_name}"
    rows = 120_000 if IS_CI else 200_000
    _create(stack, db, rows)
    port = local_stack.free_port()
    p = Pipeline(
        stack,
        tmp_path,
        unique_name,
        db,
        ingest_extra={"metrics_port": port},
        merger_extra={
            "snapshot.chunk_size": 10_000,
            "snapshot.chunks_per_window": 2,
            "snapshot.emit_rows_per_batch": 10_000,
        },
    ).start()
    work = Workload(stack, db, rows, seed=5)
    timings = {}
    try:
        work.start()
        # 1. in the middle of the snapshot of `num`
        _wait_for(lambda: (p.plan("num") or {}).get("done"), 300, "the first snapshot chunks of num", p)
        assert not p.snapshot_finished("num"), "snapshot too fast to be interrupted: raise `rows`"
        timings["stop_s"] = _stop(stack, "mariadb")
        down_at = time.monotonic()
        st = _wait_for(lambda: p.status().get("source_unavailable"), 90, "source_unavailable in cdc status", p)
        assert st["retries"] >= 1 and st["error"], st
        assert _wait_for(
            lambda: _ingest_metric(port, "cdc_ingest_unavailable", '{kind="source"}') == 1.0,
            60,
            "ingest's cdc_ingest_unavailable{kind=source} flag",
            p,
        )
        time.sleep(max(0.0, 10 - (time.monotonic() - down_at)))
        _start(stack, "mariadb")
        up_at = time.monotonic()
        _wait_for(lambda: p.status().get("source_unavailable") is None, 120, "the merger to reach the source", p)
        timings["merger_back_after_restart_s"] = time.monotonic() - up_at
        _wait_for(
            lambda: _ingest_metric(port, "cdc_ingest_unavailable", '{kind="source"}') == 0.0,
            120,
            "ingest to stream again",
            p,
        )
        timings["ingest_back_after_restart_s"] = time.monotonic() - up_at
        _wait_for(lambda: all(p.snapshot_finished(t) for t in TABLES), 600, "the snapshots to finish", p)
        timings["snapshot_done_after_restart_s"] = time.monotonic() - up_at

        # 2. while only streaming runs
        time.sleep(2)
        _stop(stack, "mariadb")
        _wait_for(
            lambda: _ingest_metric(port, "cdc_ingest_unavailable", '{kind="source"}') == 1.0,
            60,
            "ingest's unavailable flag (streaming)",
            p,
        )
        time.sleep(5)
        _start(stack, "mariadb")
        up_at = time.monotonic()
        _wait_for(
            lambda: _ingest_metric(port, "cdc_ingest_unavailable", '{kind="source"}') == 0.0,
            120,
            "ingest to stream again",
            p,
        )
        timings["ingest_back_after_second_restart_s"] = time.monotonic() - up_at
        time.sleep(2)
        work.stop.set()
        work.join(60)
        assert work.error is None, work.error
        assert work.reconnects >= 2 and work.statements > 1000, (work.reconnects, work.statements)
        timings["converged_s"] = _assert_sinks_equal(stack, tmp_path, db, TABLES, p, 600)
        p.check_alive()

        merger_log, ingest_log = p.merger.log_text(), p.ingest.log_text()
        retries = [
            line for line in merger_log.splitlines() if "WARNING merger.mysql.source: source unavailable" in line
        ]
        assert any(f"snapshot of {db}." in line for line in retries), retries[:5]  # the runner waited
        assert "source reachable again" in merger_log
        assert "source connection lost" in ingest_log and "reachable again" in ingest_log
        # every chunk was read in the end, those of the window the outage cut included
        plan = p.plan("num")
        assert len(plan["done"]) == len(plan["chunks"])
        print(
            f"timings {json.dumps({k: round(v, 1) for k, v in timings.items()})}, "
            f"merger retries logged {len(retries)}, workload {work.statements} statements, "
            f"{work.reconnects} reconnects"
        )
    finally:
        work.stop.set()
        _start(stack, "mariadb")  # whatever happened, leave the stack running
        p.stop()


@pytest.mark.timeout(600)
def test_window_cut_by_a_source_stop_is_read_again_with_new_watermarks(stack, tmp_path, unique_name, caplog):
    """The snapshot runner in-process (real Spark JDBC, real MariaDB): MariaDB is stopped
    while a window's chunk SELECTs stream their rows. The window is given up (no longer open, its
    staged rows deleted), the guard retries with backoff, and once MariaDB is back the
    same chunks are read completely in a new window with new watermarks."""
    import logging

    from cdc.config import MergerConfig
    from merger.batch.processor import BatchProcessor
    from merger.mysql.source import SourceGuard
    from merger.schema.catalog import SourceCatalog
    from merger.snapshot.runner import SnapshotRunner
    from merger.spark.session import make_spark

    db = f"fw_{unique_name}"
    conn = _conn(stack)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.big (id INT PRIMARY KEY, v VARCHAR(100))")
        cur.execute(f"INSERT INTO {db}.big SELECT seq, REPEAT('x', 90) FROM {db}.seq_1_to_1200000")
    conn.close()
    table = f"{db}.big"
    cfg = MergerConfig(
        mysql={
            "host": stack.mariadb.host,
            "port": stack.mariadb.port,
            "user": "root",
            "password_file": str(local_stack.secret_file(stack, "mysql_root_password")),
        },
        state_dir=str(tmp_path / "state"),
        spark_conf={"spark.driver.memory": "1g"},
        snapshot={"chunk_size": 300_000, "chunks_per_window": 4},
    )
    guard = SourceGuard(first_delay_s=0.5, max_delay_s=2.0)
    store = StateStore(cfg.state_dir)
    processor = BatchProcessor("x", store, [], SourceCatalog(cfg.mysql, guard), lambda topic: 1)
    spark = make_spark(cfg)
    timers = []
    try:
        runner = SnapshotRunner(cfg, spark, store, processor, guard)
        runner.ensure_watermark_table()
        plan = runner._plan(table, None)
        rt = processor.tables[table]
        reads, read = [], runner._read_chunks

        def stop_when_reading():
            """Stops MariaDB once the chunk SELECTs run (seen in its process list), starts it
            again 8 s later."""
            watcher = _conn(stack)
            deadline = time.monotonic() + 120
            with watcher.cursor() as cur:
                while time.monotonic() < deadline:
                    # the chunk SELECTs, not Spark's schema probe (WHERE 1=0) or this query
                    cur.execute(
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE "
                        "'%cdc_snapshot%' AND INFO NOT LIKE '%1=0%' AND INFO NOT LIKE '%PROCESSLIST%'"
                    )
                    if cur.fetchone()[0]:
                        break
                    time.sleep(0.05)
            watcher.close()
            time.sleep(0.05)  # rows are streaming now (1.2M rows take about a second)
            _stop(stack, "mariadb")
            time.sleep(8)
            _start(stack, "mariadb")

        def read_then_stop_the_source(table, rt, chunks, where, wid, *rest):
            reads.append(wid)
            if len(reads) == 1:
                timers.append(threading.Thread(target=stop_when_reading, daemon=True))
                timers[0].start()
            return read(table, rt, chunks, where, wid, *rest)

        runner._read_chunks = read_then_stop_the_source
        with caplog.at_level(logging.INFO, logger="merger.mysql.source"):
            runner._step(table, plan)  # returns once a window of these chunks is staged
        first, wanted = reads[0], tuple(c["id"] for c in plan["chunks"][:4])
        assert first not in rt.reconciler.windows
        assert not store.staging_dir(table, first).exists()
        [window] = rt.reconciler.windows.values()
        assert window.window_id != first and window.chunk_ids == wanted and window.staged
        staged = sum(
            pq.ParquetFile(f).metadata.num_rows for f in store.staging_dir(table, window.window_id).glob("*.parquet")
        )
        assert staged == 1_200_000
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings and f"snapshot of {table}" in warnings[0], warnings
        assert any(s in warnings[0] for s in ("SparkException", "SQL", "cdc-source-unavailable")), warnings[
            0
        ]  # the read failed
        assert any("source reachable again" in r.getMessage() for r in caplog.records)
        conn = _conn(stack)
        with conn.cursor() as cur:  # the last watermark written is the new window's HIGH
            cur.execute("SELECT window_id, kind FROM cdc.cdc_watermarks WHERE table_name = %s", (table,))
            assert cur.fetchone() == (window.window_id, "HIGH")
        conn.close()
        print(
            f"window {first} cut by the stop; read again as {window.window_id} after "
            f"{guard.total_retries} retries: {warnings}"
        )
    finally:
        for t in timers:
            t.join(180)
        _start(stack, "mariadb")
        spark.stop()


# ---------------------------------------------------------------------- the sink goes away


@pytest.mark.timeout(300)
def test_postgres_sink_maps_a_stopped_server_to_sink_unavailable(stack, unique_name):
    """A stopped PostgreSQL is SinkUnavailable (retried by the merger), not a fatal sink
    error: on a connection that was open (the server ends it) and at connect."""
    import pyarrow as pa

    from merger.sinks.base import SinkUnavailable
    from merger.sinks.postgres import PostgresSink

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = (f"fpg_{unique_name}", "t")

    def changes(seq):
        return pa.table({"id": [1, 2], "v": [f"v{seq}", "x"], "_cdc_op": ["u", "c"], "_cdc_seq": [seq, seq]})

    sink = PostgresSink(
        {
            "host": stack.postgres.host,
            "port": stack.postgres.port,
            "user": stack.postgres.user,
            "dbname": stack.postgres.database,
            "password": stack.postgres.password,
            "connect_timeout": 3,
        }
    )
    try:
        sink.ensure_table(table, schema, ["id"])
        assert sink.apply(table, 1, changes(1))
        _stop(stack, "postgres")
        try:
            with pytest.raises(SinkUnavailable, match="connection lost|unreachable"):
                sink.apply(table, 2, changes(2))  # the open connection was ended by the server
            with pytest.raises(SinkUnavailable, match="unreachable"):
                sink.apply(table, 2, changes(2))  # connect
        finally:
            _start(stack, "postgres")
        assert sink.apply(table, 2, changes(2))  # the same write, once it is back
        assert readback.rows(sink, table).to_pylist() == [{"id": 1, "v": "v2"}, {"id": 2, "v": "x"}]
    finally:
        sink.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_postgres_sink_down_blocks_then_catches_up(stack, tmp_path, unique_name):
    """PostgreSQL is stopped (fast shutdown) for 10 s under CI (retries at the harness's
    retry_max_s of 4 s), 60 s otherwise, while
    changes stream. The merger keeps running, `cdc status --json` shows the tables blocked
    on the sink, and once PostgreSQL is back both sinks catch up, equal to the source."""
    db = f"fp_{unique_name}"
    rows = 20_000
    down_s = 10 if IS_CI else 60
    _create(stack, db, rows)
    p = Pipeline(stack, tmp_path, unique_name, db).start()
    work = Workload(stack, db, rows, seed=7)
    try:
        _wait_for(lambda: all(p.snapshot_finished(t) for t in TABLES), 300, "the snapshots to finish", p)
        work.start()
        time.sleep(3)
        _stop(stack, "postgres")
        down_at = time.monotonic()
        st = _wait_for(
            lambda: [(n, t) for n, t in p.status()["tables"].items() if t.get("blocked_on_sink")],
            90,
            "a table blocked on the sink in cdc status",
            p,
        )
        name, table_status = st[0]
        assert "PostgresSink" in table_status["blocked_on_sink"], table_status
        blocked_after = time.monotonic() - down_at
        time.sleep(max(0.0, down_s - (time.monotonic() - down_at)))
        p.check_alive()
        before = p.status()
        _start(stack, "postgres")
        up_at = time.monotonic()
        _wait_for(
            lambda: not any(t.get("blocked_on_sink") for t in p.status()["tables"].values()),
            120,
            "the tables to be unblocked",
            p,
        )
        unblocked_after = time.monotonic() - up_at
        time.sleep(2)
        work.stop.set()
        work.join(60)
        assert work.error is None, work.error
        converged = _assert_sinks_equal(stack, tmp_path, db, TABLES, p, 300)
        log = p.merger.log_text()
        assert f"table {name} blocked on sink PostgresSink" in log and "sink PostgresSink reachable again" in log
        assert "sink DeltaSink reachable again" not in log  # only the blocked sink clears the flag
        print(
            f"sink down {down_s}s: blocked in status after {blocked_after:.1f}s, unblocked "
            f"{unblocked_after:.1f}s after restart, converged {converged:.1f}s later; status while down: "
            f"{json.dumps(before['tables'][name]['blocked_on_sink'])}"
        )
    finally:
        work.stop.set()
        _start(stack, "postgres")
        p.stop()


@pytest.mark.timeout(600)
def test_a_sink_down_longer_than_outage_max_s_stops_the_merger_and_loses_nothing(stack, tmp_path, unique_name):
    """With `sink_outage_max_s: 3`, PostgreSQL stopped while changes come: the merger stops
    within seconds with one line naming the table, the sink and the bound (no stack trace,
    no retrying forever); PostgreSQL back and the merger started again, both sinks equal
    the source: the batch that met the outage was not committed."""
    db = f"fo_{unique_name}"
    _create(stack, db, 300)
    p = Pipeline(stack, tmp_path, unique_name, db, merger_extra={"sink_outage_max_s": 3}).start()
    try:
        _wait_for(lambda: all(p.snapshot_finished(t) for t in TABLES), 300, "the snapshots to finish", p)
        _stop(stack, "postgres")
        down_at = time.monotonic()
        conn = _conn(stack)
        try:
            with conn.cursor() as cur:
                cur.execute(f"UPDATE {db}.num SET v = CONCAT(v, '!') WHERE id <= 50")
                cur.execute(f"DELETE FROM {db}.num WHERE id > 250")
        finally:
            conn.close()
        assert p.merger.wait_exit(90), "the merger still runs:\n" + p.merger.log_text()[-3000:]
        stopped_after = time.monotonic() - down_at
        out = p.merger.log_text()
        last = out.strip().splitlines()[-1]
        assert p.merger.proc.returncode != 0
        assert "sink PostgresSink: unreachable for" in last and "longer than sink_outage_max_s (3s)" in last, last
        assert f"table {db}." in last and "Nothing is lost" in last, last
        assert "Traceback" not in out, out[-3000:]
        _start(stack, "postgres")
        p.merger.start()
        converged = _assert_sinks_equal(stack, tmp_path, db, TABLES, p, 300)
        print(f"the merger stopped {stopped_after:.1f}s after PostgreSQL did; converged {converged:.1f}s after restart")
        print(f"its last line: {last}")
    finally:
        _start(stack, "postgres")
        p.stop()


# ---------------------------------------------------------------------- kill -9, repeatedly


@pytest.mark.soak
@pytest.mark.timeout(int(max(30, SOAK_MINUTES * 2 + 20) * 60))
def test_kill9_ingest_and_merger_repeatedly_during_snapshot_and_workload(stack, tmp_path, unique_name):
    """Bounded under CI (45 s of workload, 2 kills of each process: one every ~9 s, so
    each process is killed again ~18 s after its last start, past the merger's ~8 s start); with
    CDC_SOAK_MINUTES=<n> a soak of n minutes with a kill every ~45 s. A snapshot of `num`
    runs for most of the time (re-requested whenever one finishes), so kills land in
    snapshots and in streaming alike. At the end the sinks equal the source."""
    db = f"fk_{unique_name}"
    rows = 100_000
    minutes = SOAK_MINUTES or 0.75
    kills_each = 2 if not SOAK_MINUTES else max(3, int(minutes * 60 / 90))
    _create(stack, db, rows)
    p = Pipeline(
        stack,
        tmp_path,
        unique_name,
        db,
        ingest_extra={"commit_every_ms": 100},
        merger_extra={
            "snapshot.chunk_size": 10_000,
            "snapshot.chunks_per_window": 2,
            "snapshot.emit_rows_per_batch": 10_000,
        },
    ).start()
    work = Workload(stack, db, rows, seed=11)
    rnd = random.Random(29)
    events = []
    try:
        work.start()
        started = time.monotonic()
        end = started + minutes * 60
        victims = ["merger", "ingest"] * kills_each
        gap = (end - started) / (len(victims) + 1)
        snapshots = 1
        for i, victim in enumerate(victims):
            at = started + gap * (i + 1) + rnd.uniform(-gap / 3, gap / 3)
            while time.monotonic() < at:
                time.sleep(0.5)
                if work.error:
                    raise work.error
            proc = p.merger if victim == "merger" else p.ingest
            assert proc.alive(), f"{victim} exited:\n{proc.log_text()[-3000:]}"
            in_snapshot = not p.snapshot_finished("num")
            proc.kill9()
            proc.start()
            events.append((round(time.monotonic() - started), victim, "snapshot" if in_snapshot else "streaming"))
            if p.snapshot_finished("num"):
                p.store.request("snapshot", f"{db}.num")  # what `cdc snapshot` does
                snapshots += 1
        while time.monotonic() < end:
            time.sleep(1)
        work.stop.set()
        work.join(60)
        assert work.error is None, work.error
        converged = _assert_sinks_equal(stack, tmp_path, db, TABLES, p, 900)
        p.check_alive()
        assert any(kind == "snapshot" for *_, kind in events), events
        print(
            f"{minutes} min workload ({work.statements} statements), kills {events}, snapshots requested "
            f"{snapshots}, converged {converged:.1f}s after the workload stopped"
        )
    finally:
        work.stop.set()
        p.stop()
