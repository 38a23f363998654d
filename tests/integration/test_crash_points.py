"""kill -9 of the merger at named points (merger/crashpoints.py), under a live workload:
mid-emission of a snapshot window, between one sink's write and the other's, between the
sink writes and the batch's state save, and while a table is paused with its changes kept
on disk. After each crash the merger is started again; at the end every sink equals the
source, row for row: nothing lost, nothing doubled."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time

import pymysql
import pytest

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.merger_harness import (
    ROOT,
    CrashingMerger,
    MergerProcess,
    SinkChecker,
    pg_conn,
    root_conn,
    write_merger_config,
)

pytestmark = pytest.mark.integration

ROWS = 30_000


class Writer(threading.Thread):
    def __init__(self, conn, tables):
        super().__init__(daemon=True)
        self.conn, self.tables = conn, tables
        self.stop, self.error, self.rnd = threading.Event(), None, random.Random(7)

    def run(self):
        r = self.rnd
        try:
            with self.conn.cursor() as cur:
                while not self.stop.is_set():
                    t = r.choice(self.tables)
                    k = r.randint(1, ROWS + 2000)
                    op = r.random()
                    if op < 0.35:
                        cur.execute(f"INSERT INTO {t} VALUES (%s, %s, 'ins') ON DUPLICATE KEY UPDATE v = v + 1", (k, k))
                    elif op < 0.75:
                        cur.execute(f"UPDATE {t} SET v = v + 1, s = 'upd' WHERE id BETWEEN %s AND %s", (k, k + 3))
                    else:
                        cur.execute(f"DELETE FROM {t} WHERE id = %s", (k,))
                    time.sleep(0.01)
        except Exception as exc:  # pragma: no cover - reported by the test
            self.error = exc


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_merger_killed_at_each_crash_point_converges(stack, unique_name, tmp_path):
    db = f"cp_{unique_name}"
    root = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        autocommit=True,
    )
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for t in ("t", "p"):
            cur.execute(f"CREATE TABLE {db}.{t} (id INT PRIMARY KEY, v BIGINT, s VARCHAR(20))")
            cur.execute(f"INSERT INTO {db}.{t} SELECT seq, seq, 'init' FROM mysql.seq_1_to_{ROWS}")
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db])
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    settings = {"snapshot.chunk_size": 4000, "snapshot.emit_rows_per_batch": 3000}
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        **settings,
        **{"sinks.postgres.nul_policy": "pause"},
    )
    checker = SinkChecker(stack, tmp_path)
    writer = Writer(
        pymysql.connect(
            ssl_disabled=True,
            host=stack.mariadb.host,
            port=stack.mariadb.port,
            user="root",
            password=stack.mariadb.root_password,
            database=db,
            autocommit=True,
        ),
        ["t", "p"],
    )
    merger = None
    try:
        wait_caught_up(stack, unique_name, proc=ingest)
        writer.start()
        for n, point in enumerate(
            ["mid_emission@2", "after_write:DeltaSink@6", "after_write:PostgresSink@9", "before_state_save@4"]
        ):
            merger = CrashingMerger(mcfg, tmp_path / f"merger{n}.log", point).start()
            merger.wait_killed(300)
        # a table paused by a value a sink cannot store (nul_policy: pause) keeps its changes on disk
        with root.cursor() as cur:
            cur.execute(f"UPDATE {db}.p SET s = CONCAT('nul', CHAR(0 USING utf8mb4), 'here') WHERE id = 7")
        merger = CrashingMerger(mcfg, tmp_path / "merger-paused.log", "paused_spill@3").start()
        merger.wait_killed(300)
        # the operator lets PostgreSQL strip NULs, restarts and resumes: the kept changes apply
        last = write_merger_config(stack, tmp_path / "merger-last.yaml", unique_name, [db], tmp_path, **settings)
        merger = CrashingMerger(last, tmp_path / "merger-last.log", None).start()
        res = _cli("resume", f"{db}.p", "-c", str(last))
        assert res.returncode == 0, res.stderr
        time.sleep(2)  # the writes go on while it starts
        writer.stop.set()
        writer.join(30)
        assert writer.error is None, writer.error
        wait_caught_up(stack, unique_name, proc=ingest)
        for t in ("t", "p"):
            checker.wait_equal(db, t, timeout_s=400, proc=merger)
    finally:
        writer.stop.set()
        if merger is not None:
            merger.stop()
        ingest.stop()
        checker.close()
        root.close()


PAUSED_BEFORE_HIGH = "cdc pause point before_high"


@pytest.mark.timeout(400)
def test_a_window_staged_without_its_high_closes_after_a_restart_on_a_quiet_source(
    stack, unique_name, tmp_path, monkeypatch
):
    """kill -9 between a window's staging and its HIGH write, with a batch that saved the
    window as staged in between (a CI run hung here: the restarted merger waited for a HIGH
    nobody would write, and a source with no writes brings no batch to expire the window).
    The restart must close the window on a quiet source, well before window_timeout_s
    (180 s in the harness), and every sink must equal the source."""
    db = f"hw_{unique_name}"
    with root_conn(stack) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v BIGINT, s VARCHAR(20))")
        cur.execute(f"INSERT INTO {db}.t SELECT seq, seq, 'init' FROM mysql.seq_1_to_500")
    ingest = IngestProcess(write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"]), tmp_path / "i.log")
    ingest.start()
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path)
    checker = SinkChecker(stack, tmp_path)
    merger = None
    try:
        wait_caught_up(stack, unique_name, proc=ingest)
        monkeypatch.setenv("CDC_PAUSE_AT", "before_high:300")
        merger = MergerProcess(mcfg, tmp_path / "merger-paused.log").start()
        deadline = time.monotonic() + 180
        while PAUSED_BEFORE_HIGH not in merger.log_text():
            assert merger.alive() and time.monotonic() < deadline, merger.log_text()[-3000:]
            time.sleep(0.5)
        # two changes, each brought to the sink by a batch: once the second is there, the
        # batch of the first has saved its state, with the window staged
        with root_conn(stack) as conn, conn.cursor() as cur:
            for v in (-1, -2):
                cur.execute(f"UPDATE {db}.t SET v = %s WHERE id = 7", (v,))
                _wait_for_pg_value(stack, db, 7, v, merger)
        merger.kill9()
        monkeypatch.delenv("CDC_PAUSE_AT")
        merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
        checker.wait_equal(db, "t", timeout_s=120, proc=merger)
        assert "HIGH watermark perhaps not written: written now" in merger.log_text()
    finally:
        if merger is not None:
            merger.stop()
        ingest.stop()
        checker.close()


def _wait_for_pg_value(stack, db, key, value, merger, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert merger.alive(), merger.log_text()[-3000:]
        with pg_conn(stack) as c:
            if c.execute("SELECT to_regclass(%s)", (f'"{db}"."t"',)).fetchone()[0] is not None:
                row = c.execute(f'SELECT v FROM "{db}"."t" WHERE id = %s', (key,)).fetchone()
                if row is not None and row[0] == value:
                    return
        time.sleep(0.5)
    raise AssertionError(f"the PostgreSQL sink did not get v = {value} of key {key} in {timeout_s}s")
