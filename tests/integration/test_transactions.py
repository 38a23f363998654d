"""Transaction control in the binlog: savepoints (as ORMs write them), ROLLBACK TO that
MariaDB leaves in the binlog, XA transactions. Unit tests of the classifier, then ingest
end to end on the real MariaDB and broker: the topics rebuild the source exactly."""

from __future__ import annotations

import json

import pymysql
import pytest

from tests.ingest_harness import IngestProcess, read_resume_point, wait_caught_up, write_config
from tests.kafka_util import read_records, rebuild

# ---------------------------------------------------------------------------- end to end


def _root(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )


def _topic_rows(stack, prefix, db, table):
    records, _ = read_records(stack.kafka.bootstrap, [f"{prefix}.{db}.{table}"])
    return rebuild(records, ["id"]), records


def _source(conn, table):
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM {table}")
        return {(r["id"],): r for r in cur.fetchall()}


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_savepoints_and_rollback_to_reach_kafka_exactly(stack, mysql_root, unique_name, tmp_path):
    """Django's nested atomic() / Spring NESTED / Rails requires_new: every change after a
    savepoint arrives, and rows rolled back to a savepoint never do, also when MariaDB keeps
    them in the binlog (a non-transactional change after the savepoint: ROLLBACK TO is logged)."""
    db = f"sp_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
        cur.execute(f"CREATE TABLE {db}.m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")
    cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db], commit_every_events=50)
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    conn = _root(stack, db)
    try:
        wait_caught_up(stack, unique_name, proc=proc)
        with conn.cursor() as cur:
            # the sequence, word for word
            for sql in [
                "BEGIN",
                "INSERT INTO t VALUES (0, 0)",
                "INSERT INTO t VALUES (1, 0)",
                "SAVEPOINT s1",
                "INSERT INTO t VALUES (2, 0)",
                "ROLLBACK TO SAVEPOINT s1",
                "INSERT INTO t VALUES (3, 0)",
                "SAVEPOINT s2",
                "UPDATE t SET v = 7 WHERE id = 0",
                "RELEASE SAVEPOINT s2",
                "INSERT INTO t VALUES (4, 0)",
                "COMMIT",
            ]:
                cur.execute(sql)
            # nested savepoints, a savepoint set twice, ROLLBACK TO an outer one
            for sql in [
                "BEGIN",
                "INSERT INTO t VALUES (10, 1)",
                "SAVEPOINT a",
                "INSERT INTO t VALUES (11, 1)",
                "SAVEPOINT b",
                "INSERT INTO t VALUES (12, 1)",
                "ROLLBACK TO a",
                "UPDATE t SET v = 2 WHERE id = 10",
                "SAVEPOINT a",
                "DELETE FROM t WHERE id = 1",
                "ROLLBACK TO a",
                "INSERT INTO t VALUES (13, 1)",
                "COMMIT",
            ]:
                cur.execute(sql)
            # a MyISAM change after the savepoint: MariaDB logs the InnoDB rows after it and ROLLBACK TO
            cur.execute("SET SESSION binlog_direct_non_transactional_updates = 0")
            for sql in [
                "BEGIN",
                "INSERT INTO t VALUES (50, 0)",
                "SAVEPOINT q",
                "INSERT INTO m VALUES (50, 0)",
                "INSERT INTO t VALUES (51, 0)",
                "UPDATE t SET v = 99 WHERE id = 50",
                "ROLLBACK TO q",
                "INSERT INTO t VALUES (52, 0)",
                "SAVEPOINT r",
                "INSERT INTO t VALUES (53, 0)",
                "INSERT INTO m VALUES (53, 0)",
                "RELEASE SAVEPOINT r",
                "COMMIT",
            ]:
                cur.execute(sql)
            # many row events after a savepoint, more than commit_every_events
            cur.execute("BEGIN")
            cur.execute("SAVEPOINT big")
            for i in range(100, 120):
                cur.execute("INSERT INTO t VALUES (%s, %s)", (i, i))
            cur.execute("INSERT INTO m VALUES (100, 0)")
            cur.execute("ROLLBACK TO big")
            for i in range(200, 210):
                cur.execute("INSERT INTO t VALUES (%s, %s)", (i, i))
            cur.execute("COMMIT")
            # a transaction larger than commit_every_events, cut in pieces, with savepoints in it
            cur.execute("BEGIN")
            for i in range(300, 420):
                cur.execute("INSERT INTO t VALUES (%s, %s)", (i, i))
                if i % 40 == 0:
                    cur.execute(f"SAVEPOINT p{i}")
            cur.execute("UPDATE t SET v = -1 WHERE id BETWEEN 300 AND 419")
            cur.execute("COMMIT")
            cur.execute("INSERT INTO t VALUES (1000, 0)")  # after all that, plain autocommit
        wait_caught_up(stack, unique_name, proc=proc)
        for table in ("t", "m"):
            rebuilt, _ = _topic_rows(stack, unique_name, db, table)
            source = _source(conn, table)
            assert rebuilt == source, (table, sorted(rebuilt), sorted(source))
        assert {0, 1, 3, 4, 10, 13, 50, 52, 53, 1000} <= {k[0] for k in _source(conn, "t")}
        assert proc.alive()
    finally:
        proc.stop()
        conn.close()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_large_rows_held_for_a_savepoint_are_bounded_in_bytes(stack, mysql_root, unique_name, tmp_path):
    """Records held back for a ROLLBACK TO are sent once they reach hold_max_mb, whatever
    their count: a rollback reaching back past them cannot be honoured, so ingest stops
    with the error that says what to do (never writes the rolled-back rows silently). Under
    the bound, the same transaction rolls back cleanly."""
    db = f"hb_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.doc (id INT PRIMARY KEY, body LONGTEXT) ENGINE=InnoDB")
        cur.execute(f"CREATE TABLE {db}.m (id INT PRIMARY KEY) ENGINE=MyISAM")
    big = "x" * 300_000

    def transaction(cur, first: int) -> None:
        # the MyISAM row keeps the rolled-back part in the binlog, with its ROLLBACK TO
        cur.execute("BEGIN")
        cur.execute("INSERT INTO doc VALUES (%s, 'before')", (first + 200,))
        cur.execute("SAVEPOINT s")
        for i in range(first, first + 8):  # 8 rows of 300 KB: 2.4 MB held
            cur.execute("INSERT INTO doc VALUES (%s, %s)", (i, big))
        cur.execute("INSERT INTO m VALUES (%s)", (first,))
        cur.execute("ROLLBACK TO s")
        cur.execute("INSERT INTO doc VALUES (%s, 'kept')", (first + 100,))
        cur.execute("COMMIT")

    conn = _root(stack, db)
    cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db], commit_every_events=1000, hold_max_mb=4)
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        wait_caught_up(stack, unique_name, proc=proc)
        with conn.cursor() as cur:
            transaction(cur, 0)
        wait_caught_up(stack, unique_name, proc=proc)
        rebuilt, _ = _topic_rows(stack, unique_name, db, "doc")
        assert set(rebuilt) == {(100,), (200,)} and rebuilt == _source(conn, "doc")
        proc.stop()

        cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db], commit_every_events=1000, hold_max_mb=1)
        proc = IngestProcess(cfg, tmp_path / "ingest2.log").start()
        wait_caught_up(stack, unique_name, proc=proc)
        with conn.cursor() as cur:
            transaction(cur, 1000)
        assert proc.wait_exit(60), "ingest went on past a ROLLBACK TO of records it had already sent"
        log = proc.log_text()
        assert "ROLLBACK TO s" in log and f"{db}.doc" in log and "hold_max_mb (1 MB)" in log, log[-2000:]
        assert "Traceback" not in log, log[-3000:]
    finally:
        proc.stop()
        conn.close()


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_xa_transactions(stack, mysql_root, unique_name, tmp_path):
    """XA COMMIT (two-phase and one-phase) reaches Kafka and moves ingest's position; an XA
    ROLLBACK after XA PREPARE (whose rows the binlog holds at the PREPARE) stops ingest with
    an error naming the table, unless on_xa_rollback: warn."""
    db = f"xa_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db])
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    conn = _root(stack, db)
    try:
        wait_caught_up(stack, unique_name, proc=proc)
        u = unique_name  # XA ids are global to the server
        other = _root(stack, db)
        with conn.cursor() as cur:
            for sql in [
                f"XA START '{u}x1'",
                "INSERT INTO t VALUES (1, 1)",
                "UPDATE t SET v = 2 WHERE id = 1",
                f"XA END '{u}x1'",
                f"XA PREPARE '{u}x1'",
            ]:
                cur.execute(sql)
            with other.cursor() as cur2:  # another transaction commits between PREPARE and COMMIT
                cur2.execute("INSERT INTO t VALUES (2, 2)")
            other.close()
            for sql in [
                f"XA COMMIT '{u}x1'",
                f"XA START '{u}x2'",
                "INSERT INTO t VALUES (3, 3)",
                f"XA END '{u}x2'",
                f"XA COMMIT '{u}x2' ONE PHASE",
                f"XA START '{u}x3'",
                "INSERT INTO t VALUES (4, 4)",
                f"XA END '{u}x3'",
                f"XA ROLLBACK '{u}x3'",
            ]:
                cur.execute(sql)
        wait_caught_up(stack, unique_name, proc=proc)
        rebuilt, _ = _topic_rows(stack, unique_name, db, "t")
        assert rebuilt == _source(conn, "t") and set(rebuilt) == {(1,), (2,), (3,)}

        # an XA transaction of a table ingest does not capture, rolled back after PREPARE: nothing to say
        with mysql_root.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}_other")
            cur.execute(f"CREATE TABLE {db}_other.t (id INT PRIMARY KEY)")
            for sql in [
                f"XA START '{u}o'",
                f"INSERT INTO {db}_other.t VALUES (1)",
                f"XA END '{u}o'",
                f"XA PREPARE '{u}o'",
                f"XA ROLLBACK '{u}o'",
            ]:
                cur.execute(sql)
        wait_caught_up(stack, unique_name, proc=proc)
        assert proc.alive()

        with conn.cursor() as cur:
            for sql in [
                f"XA START '{u}x4'",
                "INSERT INTO t VALUES (5, 5)",
                f"XA END '{u}x4'",
                f"XA PREPARE '{u}x4'",
                f"XA ROLLBACK '{u}x4'",
            ]:
                cur.execute(sql)
        assert proc.wait_exit(60), "ingest went on past an XA ROLLBACK of changes it had written"
        log = proc.log_text()
        assert "XA ROLLBACK" in log and f"{db}.t" in log and "on_xa_rollback: warn" in log, log[-2000:]
        assert "Traceback" not in log, log[-3000:]

        cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db], on_xa_rollback="warn")
        proc = IngestProcess(cfg, tmp_path / "ingest2.log").start()
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (6, 6)")
        wait_caught_up(stack, unique_name, proc=proc)
        rebuilt, _ = _topic_rows(stack, unique_name, db, "t")
        assert (6,) in rebuilt and (5,) in rebuilt  # (5,) is the documented phantom: re-snapshot the table
    finally:
        proc.stop()
        conn.close()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_rollback_to_a_savepoint_from_before_a_resume_stops_ingest(stack, mysql_root, unique_name, tmp_path):
    """Issue 22, item 4: ingest resumes inside a large transaction whose first pieces are
    in Kafka already, then reads a ROLLBACK TO a savepoint set before them. The pieces
    cannot be taken back: the guard that stops ingest without a resume must hold after one.

    The resume is made deterministic: a row too large for kafka.max_message_bytes, sent at
    once (above hold_max_mb) after three pieces were committed, stops the first run (ingest
    says it resumes at that row); the second run, with higher limits, resumes after the
    committed pieces and holds the rest (fewer than commit_every_events) until the ROLLBACK TO."""
    db = f"rs_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, body LONGTEXT) ENGINE=InnoDB")
        cur.execute(f"CREATE TABLE {db}.m (id INT PRIMARY KEY) ENGINE=MyISAM")
    conn = _root(stack, db)
    cfg = write_config(
        stack,
        tmp_path / "ingest.yaml",
        unique_name,
        [db],
        commit_every_events=20,
        hold_max_mb=1,
        **{"kafka.max_message_bytes": 1_000_000},
    )
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        wait_caught_up(stack, unique_name, proc=proc)
        with conn.cursor() as cur:
            # the MyISAM row keeps the rolled-back rows in the binlog, with the ROLLBACK TO
            cur.execute("SET SESSION binlog_direct_non_transactional_updates = 0")
            cur.execute("BEGIN")
            cur.execute("INSERT INTO t VALUES (0, 'before')")
            cur.execute("SAVEPOINT s")
            for i in range(1, 71):  # row events 2-71: pieces committed at 20, 40 and 60
                cur.execute("INSERT INTO t VALUES (%s, 'rolled back')", (i,))
            cur.execute("INSERT INTO t VALUES (999, %s)", ("x" * 1_500_000,))  # too large for the first run
            for i in range(71, 76):
                cur.execute("INSERT INTO t VALUES (%s, 'rolled back')", (i,))
            cur.execute("INSERT INTO m VALUES (1)")
            cur.execute("ROLLBACK TO s")
            cur.execute("INSERT INTO t VALUES (500, 'kept')")
            cur.execute("COMMIT")
        assert proc.wait_exit(60), "the first run did not stop at the row too large for it"
        assert "kafka.max_message_bytes" in proc.log_text(), proc.log_text()[-2000:]
        point = read_resume_point(
            {"bootstrap.servers": stack.kafka.bootstrap},
            f"{unique_name}.offsets",
            json.dumps({"server": unique_name}, separators=(",", ":")).encode(),
            timeout_s=10,
        )
        assert point is not None and point.trx_gtid and point.trx_events >= 40, point  # pieces in Kafka
        records, _ = read_records(stack.kafka.bootstrap, [f"{unique_name}.{db}.t"])
        assert len([r for r in records if r.value is not None]) >= 40

        cfg = write_config(
            stack,
            tmp_path / "ingest.yaml",
            unique_name,
            [db],
            commit_every_events=20,
            hold_max_mb=8,
            **{"kafka.max_message_bytes": 10_000_000},
        )
        proc = IngestProcess(cfg, tmp_path / "ingest2.log").start()
        if not proc.wait_exit(60):
            rebuilt, _ = _topic_rows(stack, unique_name, db, "t")
            phantoms = sorted(set(rebuilt) - set(_source(conn, "t")))
            raise AssertionError(
                f"ingest went on past a ROLLBACK TO over pieces written before the resume; "
                f"phantom rows in Kafka: {phantoms[:10]}... ({len(phantoms)})"
            )
        log = proc.log_text()
        assert "ROLLBACK TO s" in log and f"{db}.t" in log and "commit_every_events (20)" in log, log[-2000:]
        assert "Traceback" not in log, log[-3000:]
    finally:
        proc.stop()
        conn.close()
