"""Snapshot and repair under a source whose GLOBAL sql_mode has NO_BACKSLASH_ESCAPES (issue
41, defect 2), with keys holding ``\\``, ``'`` and ``"``.

No connection of ours sets its own sql_mode, so every session the pipeline opens has the
mode: a chunk predicate or repair key list written in the backslash form means other keys
there (``'a\\\\b'`` is ``a\\\\b``) or is no SQL at all (``'O\\'Brien'``). The table's chunk
boundaries fall on keys with ``'``, ``"`` and ``\\`` (checked first, the premise); the
sinks must equal the source after the snapshot, and after a repair of damage to both
sinks, while a workload writes some of the damaged keys. Real MariaDB, ingest, the broker,
the merger (Spark local mode), Delta and PostgreSQL; the global sql_mode is restored after
each test.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import (
    MergerProcess,
    SinkChecker,
    Workload,
    pg_conn,
    root_conn,
    run_cdc,
    write_merger_config,
)

pytestmark = pytest.mark.integration

CHUNK = 100  # the smallest chunk_size the config allows
# 320 keys k000.. each ending in ', " or \ (one of them with the issue's injection), and
# the keys; in utf8mb4_general_ci 'a\b' sorts first, so boundary n*CHUNK is k{n*CHUNK-1:03d}
SUFFIXES = ("'Brien", '"q"', "\\b", "' OR '1'='1", "\\'", '\\"')
FILLER = [f"k{i:03d}{SUFFIXES[i % len(SUFFIXES)]}" for i in range(320)]
NAMED = ["a\\b", "\\\\", "\\", "O'Brien", "x' OR '1'='1", 'say "hi"', "ü\\'ü"]
KEYS = NAMED + FILLER
# the keys the workload writes (the damage hits some of them: repaired while written)
HOT = ["a\\b", "\\", *FILLER[::7]]
STRAY = "z\\\"stray'"  # a row only the PostgreSQL sink holds


@pytest.fixture
def no_backslash_escapes(stack):
    """The source's GLOBAL sql_mode with NO_BACKSLASH_ESCAPES added for the test (every new
    session takes it), the former mode restored after."""
    conn = root_conn(stack)
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sql_mode")
        (before,) = cur.fetchone()
        cur.execute("SET GLOBAL sql_mode = %s", (",".join(m for m in (before, "NO_BACKSLASH_ESCAPES") if m),))
    try:
        yield before
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = %s", (before,))
        conn.close()


def _create(stack, db: str) -> None:
    conn = root_conn(stack)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@SESSION.sql_mode")
            assert "NO_BACKSLASH_ESCAPES" in cur.fetchone()[0]  # the session took the global mode
            cur.execute(f"CREATE DATABASE {db} CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")
            cur.execute(f"USE {db}")
            cur.execute("CREATE TABLE t (k VARCHAR(40) NOT NULL PRIMARY KEY, v INT NOT NULL, s VARCHAR(40))")
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(k, i, k[::-1]) for i, k in enumerate(KEYS)])
            # the premise: the chunk boundaries are keys holding ', " and \
            bounds = []
            for n in (1, 2, 3):
                cur.execute(f"SELECT k FROM t ORDER BY k LIMIT 1 OFFSET {n * CHUNK}")
                bounds.append(cur.fetchone()[0])
            assert bounds == ["k099' OR '1'='1", 'k199"q"', 'k299\\"'], bounds
    finally:
        conn.close()


def _start(stack, tmp_path: Path, name: str, db: str, **merger_settings):
    icfg = write_config(stack, tmp_path / "ingest.yaml", name, [db, "cdc"])
    mcfg = write_merger_config(
        stack, tmp_path / "merger.yaml", name, [db], tmp_path, **{"snapshot.chunk_size": CHUNK, **merger_settings}
    )
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    return mcfg, ingest, merger


def hot_statement(rnd: random.Random) -> tuple[str, tuple]:
    k = rnd.choice(HOT)
    op = rnd.random()
    if op < 0.6:
        return "UPDATE t SET v = v + 1, s = CONCAT(%s, v) WHERE k = %s", (k, k)
    if op < 0.8:
        return "DELETE FROM t WHERE k = %s", (k,)
    return "INSERT INTO t VALUES (%s, 0, %s) ON DUPLICATE KEY UPDATE v = v - 1", (k, k)


def _damage_delta(path: Path) -> None:
    """Before the workload starts: v is still each key's index in KEYS (no quoting in the
    predicates of delta-rs, whose SQL has its own escapes)."""
    for attempt in range(5):  # the merger commits too: a conflict is retried
        try:
            # '\\', 'say "hi"' changed; "O'Brien", 'k002\b' deleted
            DeltaTable(str(path)).update(updates={"s": "'damaged'"}, predicate="v IN (1, 5)")
            DeltaTable(str(path)).delete("v IN (3, 9)")
            return
        except CommitFailedError:
            if attempt == 4:
                raise
            time.sleep(0.5)


@pytest.mark.timeout(900)
def test_snapshot_and_repair_of_quote_and_backslash_keys(stack, tmp_path, unique_name, no_backslash_escapes):
    """About 60-90 s here: the merger's start (Spark), a snapshot, a verify and a repair,
    each a real process under a global sql_mode no test of the other files sets."""
    db = f"nbe_{unique_name}"
    _create(stack, db)
    mcfg, ingest, merger = _start(stack, tmp_path, unique_name, db)
    checker = SinkChecker(stack, tmp_path)
    workload = Workload(stack, db, hot_statement, rate=40, seed=5)
    try:
        checker.wait_equal(db, "t", timeout_s=240, proc=merger)  # the snapshot, chunked on those keys
        assert "planned: 4 chunks" in merger.log_text()
        _damage_delta(tmp_path / "delta" / db / "t")
        workload.start()
        time.sleep(2)
        with pg_conn(stack) as c:
            c.execute(f'UPDATE "{db}"."t" SET s = %s WHERE k = ANY(%s)', ("damaged", ["a\\b", "O'Brien", "ü\\'ü"]))
            c.execute(f'DELETE FROM "{db}"."t" WHERE k = ANY(%s)', (["\\\\", "x' OR '1'='1", "\\"],))
            c.execute(f'INSERT INTO "{db}"."t" (k, v, s, _cdc_seq) VALUES (%s, 0, %s, 1)', (STRAY, "stray"))
        res = run_cdc("repair", "-c", str(mcfg), "--json", f"{db}.t", timeout=600)
        (tmp_path / "repair.json").write_text(res.stdout + res.stderr)
        assert res.returncode in (0, 1), res.stdout + res.stderr + merger.log_text()[-3000:]
        (repair,) = json.loads(res.stdout)["repairs"]
        assert repair["error"] is None, repair
        # the cold damage is found and mended: nothing the source holds was deleted
        assert repair["by_sink"]["postgres"]["inserted"] >= 2 and repair["by_sink"]["delta"]["inserted"] >= 2, repair
        assert repair["rows_deleted"] >= 1, repair  # the stray row (and hot keys the workload deleted meanwhile)
        workload.stop()
        checker.wait_equal(db, "t", timeout_s=120, proc=merger)
        assert merger.alive() and "Traceback" not in merger.log_text()
    finally:
        workload.stop_event.set()
        merger.stop()
        ingest.stop()
        checker.close()


def test_jdbc_snapshot_of_quote_and_backslash_keys(stack, tmp_path, unique_name, no_backslash_escapes):
    """The same table read by Spark JDBC (its partition predicates are SQL text)."""
    db = f"nbj_{unique_name}"
    _create(stack, db)
    _, ingest, merger = _start(stack, tmp_path, unique_name, db, **{"snapshot.reader": "jdbc"})
    checker = SinkChecker(stack, tmp_path)
    try:
        checker.wait_equal(db, "t", timeout_s=240, proc=merger)
        assert "planned: 4 chunks" in merger.log_text() and "snapshot reader (jdbc)" in merger.log_text()
        assert merger.alive() and "Traceback" not in merger.log_text()
    finally:
        merger.stop()
        ingest.stop()
        checker.close()


COLLATIONS = (
    "utf8mb4_general_ci",
    "utf8mb4_bin",
    "utf8mb4_unicode_ci",
    "utf8mb4_unicode_520_nopad_ci",
    "latin1_swedish_ci",
)
VALUES = ["a", "A", "á", "a ", "b", "ß", "ss", "O'Brien", "a\\b", "a\\\\b", "\\", '"', "'", "\\'", "", "é😀"]


@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES", "ANSI_QUOTES,NO_BACKSLASH_ESCAPES"])
def test_text_literals_compare_as_the_column_does_under_every_sql_mode(stack, unique_name, sql_mode):
    """``sql_literal``'s ``_utf8mb4 X'..'`` against MariaDB itself: in a session of each
    sql_mode, ``k = / < / >= literal`` selects what ``k = / < / >= %s`` (pymysql's quoting,
    which follows the session's NO_BACKSLASH_ESCAPES) selects, in columns of several
    collations (case and accent insensitive, binary, PAD SPACE and NO PAD, latin1): the
    literal takes the column's collation, as a quoted one does."""
    import pymysql

    from merger.snapshot.chunking import sql_literal

    db = f"lit_{unique_name}"
    conn = root_conn(stack)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"USE {db}")
            cur.execute(f"SET SESSION sql_mode = '{sql_mode}'")
            cur.execute("SELECT %s, @@SESSION.sql_mode", ("a\\'b",))
            assert cur.fetchone() == ("a\\'b", sql_mode)  # pymysql quotes for this mode
            for i, coll in enumerate(COLLATIONS):
                charset = coll.split("_")[0]
                cur.execute(
                    f"CREATE TABLE c{i} (id INT PRIMARY KEY, k VARCHAR(20) CHARACTER SET {charset} COLLATE {coll})"
                )
                rows = [(n, v) for n, v in enumerate(VALUES) if charset != "latin1" or v.isascii()]
                cur.executemany(f"INSERT INTO c{i} VALUES (%s, %s)", rows)
                for v in VALUES:
                    cur.execute(f"SELECT COERCIBILITY({sql_literal(v)}) = COERCIBILITY(%s)", (v,))
                    assert cur.fetchone() == (1,)
                    for op in ("=", "<", ">="):
                        got = []
                        for sql, args in ((f"k {op} {sql_literal(v)}", None), (f"k {op} %s", (v,))):
                            try:
                                cur.execute(f"SELECT id FROM c{i} WHERE {sql} ORDER BY id", args)
                                got.append(cur.fetchall())
                            except pymysql.err.MySQLError as exc:
                                got.append(exc.args[0])  # the same error both ways (a latin1 column and an emoji)
                        assert got[0] == got[1], (coll, sql_mode, v, op, got)
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.close()
