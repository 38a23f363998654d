"""A source with ``log_bin_compress=ON`` (issue 22, item 2): MariaDB writes its rows and
query events compressed (Write/Update/Delete_rows_compressed, Query_compressed), which
mysql-replication has no class for; ingest used to drop them without a word. End to end on
the stack's real MariaDB and broker: every change reaches the topics, the DDL reaches the
schema topic, and each record's ``source.pos`` is the start of its (compressed) event in
the server's binlog. The server setting is restored for the other tests of the session."""

from __future__ import annotations

import json

import pymysql
import pytest

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import read_records, rebuild
from tests.source_db import root_connection

COMPRESSED_KINDS = {"Write_rows_compressed", "Update_rows_compressed", "Delete_rows_compressed", "Query_compressed"}


@pytest.fixture
def compressed_binlog(stack, mysql_root):
    """Turns log_bin_compress on (with a small threshold) when called; the settings are
    restored afterwards."""
    with mysql_root.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'log_bin_compress%%'")
        before = dict(cur.fetchall())
    if "log_bin_compress" not in before:
        pytest.skip("the source has no log_bin_compress (not MariaDB)")

    def turn_on():
        with mysql_root.cursor() as cur:
            cur.execute("SET GLOBAL log_bin_compress_min_len = 10")
            cur.execute("SET GLOBAL log_bin_compress = ON")

    try:
        yield turn_on
    finally:
        with mysql_root.cursor() as cur:
            cur.execute("SET GLOBAL log_bin_compress = %s", (before["log_bin_compress"],))
            cur.execute("SET GLOBAL log_bin_compress_min_len = %s", (int(before["log_bin_compress_min_len"]),))


def _binlog_events(conn, files: list[str]) -> list[tuple[str, int, str, str]]:
    """(file, start, event type, info) of the events in ``files``."""
    out = []
    with conn.cursor() as cur:
        for f in files:
            cur.execute(f"SHOW BINLOG EVENTS IN '{f}'")
            out += [(f, pos, etype, info) for _log, pos, etype, _sid, _end, info in cur.fetchall()]
    return out


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_compressed_binlog_events_reach_kafka(stack, mysql_root, compressed_binlog, unique_name, tmp_path):
    db = f"bc_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.doc (id INT PRIMARY KEY, body TEXT, v INT) ENGINE=InnoDB")
        cur.execute("SHOW MASTER STATUS")
        first_file = cur.fetchone()[0]
    cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db])
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    conn = root_connection(stack, db)
    body = lambda i: (f"row {i} " + "abcdefghij" * 210)[:2048]  # noqa: E731  ~2 KB, compresses well
    try:
        wait_caught_up(stack, unique_name, proc=proc)
        compressed_binlog()  # switched on while ingest runs
        conn.close()
        conn = root_connection(stack, db)
        with conn.cursor() as cur:
            for i in range(60):  # one row per event
                cur.execute("INSERT INTO doc VALUES (%s, %s, 0)", (i, body(i)))
            cur.execute("UPDATE doc SET v = 7, body = CONCAT(body, 'u') WHERE id < 12")
            cur.execute("DELETE FROM doc WHERE id BETWEEN 20 AND 29")
            cur.executemany("INSERT INTO doc VALUES (%s, %s, 1)", [(i, body(i)) for i in range(100, 110)])
            cur.execute(  # one multi-row INSERT statement: one event of many rows
                "INSERT INTO doc VALUES " + ",".join(f"({i}, REPEAT('m{i}', 500), 2)" for i in range(200, 220))
            )
            cur.execute("ALTER TABLE doc ADD COLUMN note VARCHAR(40) NULL DEFAULT NULL AFTER v")
            cur.execute("INSERT INTO doc VALUES (300, %s, 3, 'after the alter')", (body(300),))
            cur.execute("BEGIN")
            cur.execute("UPDATE doc SET note = 'in a transaction' WHERE id IN (1, 2, 3)")
            cur.execute("DELETE FROM doc WHERE id = 4")
            cur.execute("COMMIT")
            cur.execute("SHOW BINARY LOGS")
            files = [r[0] for r in cur.fetchall() if r[0] >= first_file]
        wait_caught_up(stack, unique_name, proc=proc)

        events = _binlog_events(mysql_root, files)
        kinds = {etype.removesuffix("_v1") for _f, _p, etype, _i in events}
        assert COMPRESSED_KINDS <= kinds, f"the server wrote no compressed events of some kind: {sorted(kinds)}"

        records, _ = read_records(stack.kafka.bootstrap, [f"{unique_name}.{db}.doc"])
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SELECT * FROM doc")
            source = {(r["id"],): r for r in cur.fetchall()}
        assert len(source) == 60 - 10 - 1 + 10 + 20 + 1
        # rows written before the ALTER have no note in their last image: NULL, as in the source
        assert {k: {"note": None, **after} for k, after in rebuild(records, ["id"]).items()} == source
        ops = [r.payload["op"] for r in records if r.value is not None]
        assert ops.count("c") == 91 and ops.count("u") == 12 + 3 and ops.count("d") == 11, ops
        assert sum(r.value is None for r in records) == 11  # a tombstone after each delete

        # source.file/pos: the start of the compressed rows event in the server's binlog
        # (and a DDL marker's, the start of the compressed ALTER)
        rows_starts = {(f, p) for f, p, etype, _i in events if "_rows_compressed" in etype}
        query_starts = {(f, p) for f, p, etype, _i in events if etype == "Query_compressed"}
        for r in records:
            if r.value is not None:
                src, op = r.payload["source"], r.payload["op"]
                assert (src["file"], src["pos"]) in (query_starts if op == "m" else rows_starts), (src, op)
        assert {r.payload["op"] for r in records if r.value is not None} == {"c", "u", "d", "m"}

        schema, _ = read_records(stack.kafka.bootstrap, [unique_name])
        ddls = [json.loads(r.value).get("ddl", "") for r in schema if r.value]
        assert any("ADD COLUMN note" in d for d in ddls), ddls
        assert proc.alive() and "Traceback" not in proc.log_text()
    finally:
        proc.stop()
        conn.close()
